"""`kit.dot` forms that reuse the fp16 tensor-core product exactly: int8 x int8 -> int32,
and fp16 x fp16 with `out_dtype=kit.float16`.

int8: every int8 value is an fp16 value, each product (|p| <= 2^14) and every partial sum
of up to 1024 of them (|s| <= 2^24) is exact in the mma's fp32 accumulator, so the fp16 mma
of the converted tiles gives the integer dot exactly for K <= 1024; the int32 accumulator is
added after (wrapping on overflow, as integer adds do). Larger K is not supported yet.

out_dtype=float16: Triton accumulates in fp16; kitjit accumulates in fp32 and rounds once to
fp16 at the end (the same or closer to the exact product); `acc`, if given, is fp16."""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Value
from kitjit.ir.types import float16, float32, int32

from .base import _describe

INT8_MAX_K = 1024


def _check_acc(b: Any, acc: Any, shape: tuple, dtype, name: str) -> None:
    if acc is not None and (not isinstance(acc, Value) or acc.shape != shape
                            or acc.dtype is not dtype):
        raise b.error(f"kit.dot: acc must be an {name} tile of shape [{shape[0]}, {shape[1]}] "
                      f"here, got {_describe(acc)}",
                      f"start it as kit.zeros(({shape[0]}, {shape[1]}), kit.{name})")


def _mma(b: Any, a: Value, w: Value) -> Value:
    (M, K), (_, N) = a.shape, w.shape
    if M < 16 or K < 16 or N < 8:
        raise b.error(f"kit.dot needs M >= 16, K >= 16 and N >= 8 (tensor-core tile "
                      f"16x8x16), got M={M}, N={N}, K={K}",
                      "pad the block sizes up and mask the edges")
    zero = b.full((M, N), 0.0, float32)
    return b.emit1("dot", [b.cast(a, float16), b.cast(w, float16), zero], zero.type)


def int8_dot(b: Any, a: Value, w: Value, acc: Any) -> Value:
    """acc + a @ w on int8 tiles, as an int32 tile."""
    (M, K), (_, N) = a.shape, w.shape
    _check_acc(b, acc, (M, N), int32, "int32")
    if K > INT8_MAX_K:
        raise b.error(f"kit.dot of int8 tiles with K={K} > {INT8_MAX_K} is not supported yet",
                      f"split K into blocks of at most {INT8_MAX_K}")
    r = b.cast(_mma(b, a, w), int32)
    return r if acc is None else b.binary("add", r, acc)


def f16_out_dot(b: Any, a: Value, w: Value, acc: Any) -> Value:
    """acc + a @ w on fp16 tiles with an fp16 result."""
    (M, _), (_, N) = a.shape, w.shape
    _check_acc(b, acc, (M, N), float16, "float16")
    r = _mma(b, a, w)
    if acc is not None:
        r = b.binary("add", r, b.cast(acc, float32))
    return b.cast(r, float16)

"""`kit.dot_scaled`: Triton's microscaled matrix product, as an upcast and an ordinary dot.

Why a decomposition: Hopper has no block-scaled MMA, and Triton 3.6 itself lowers
`tl.dot_scaled` on sm_90 the same way (its DecomposeScaledBlocked pass): each operand is
converted to a 16-bit compute type (fp16 when either side's format is "fp16", else bf16),
multiplied by its scale broadcast along K in that type, set to NaN where the scale is the
e8m0 NaN (255) unless `fast_math`, and the two go through the ordinary `kit.dot` (fp32
accumulation). Every step below is an existing tile op, so the interpreter and the GPU run
the same arithmetic and nothing new needs a lowering.

The steps, in Triton's order and rounding:
- e2m1: two 4-bit codes per uint8, the first element in the low nibble, packed along K (or
  along M / N with `*_k_pack=False`); a code's bits (sign, 2 exponent bits, 1 mantissa bit)
  are rebuilt as the compute type's bits (exact: every e2m1 value is a bf16 and fp16 value);
- e4m3 / e5m2 (uint8 bits or the fp8 dtype), bf16 / fp16 (or uint16 bits): converted to the
  compute type (exact, except NaN payloads);
- the e8m0 scale s becomes the compute type's 2**(s-127) as Triton builds it: bf16 from the
  bits s << 7 (so s = 0 gives 0.0, not 2**-127, and s = 255 gives inf), fp16 by rounding the
  fp32 with bits s << 23 (inf above 2**15, 0 below 2**-25);
- value * scale is one multiply rounded to the compute type (it overflows to inf, or
  underflows, where the scaled value leaves that type's range);
- NaN scales: where s == 255 the operand is NaN (so its rows / columns of the result are NaN);
  with `fast_math=True` that select is skipped, as in Triton: the product is value * inf
  (inf, or NaN for a zero value).

Beyond Triton on Hopper: `*_k_pack=False` (e2m1 packed along M / N) works here, where Triton
3.6's sm_90 compiler fails an assertion. Not yet: 3-d tiles, e4m3 scales (nvfp4, one per 16).
"""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Value
from kitjit.ir.types import (
    DType,
    bfloat16,
    float8e4nv,
    float8e5,
    float16,
    float32,
    int32,
    uint8,
    uint16,
)

from .base import _describe, _shape

FORMATS = ("e2m1", "e4m3", "e5m2", "bf16", "fp16")
_FLOAT_OF = {"e4m3": float8e4nv, "e5m2": float8e5, "bf16": bfloat16, "fp16": float16}
_BITS_OF = {"e2m1": uint8, "e4m3": uint8, "e5m2": uint8, "bf16": uint16, "fp16": uint16}
SCALE_GROUP = 32   # e8m0 scales: one per 32 elements along K
E8M0_NAN = 255


def _const(b: Any, value: Any, dtype: DType) -> Value:
    return b.constant(value, dtype)


def _check_format(b: Any, side: str, fmt: Any, v: Any, k_pack: Any) -> None:
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise b.error(f"kit.dot_scaled: {side}_format must be one of {', '.join(FORMATS)} "
                      f"(a constexpr string), got {fmt!r}")
    if not isinstance(v, Value) or v.type.is_shared or len(v.shape) not in (2, 3):
        raise b.error(f"kit.dot_scaled: '{side}' must be a 2-d register tile, got "
                      f"{_describe(v)}")
    if len(v.shape) == 3:
        raise b.error("kit.dot_scaled on 3-d (batched) tiles is not supported yet",
                      "call it once per batch index on 2-d tiles")
    want = (_BITS_OF[fmt],) if fmt == "e2m1" else (_FLOAT_OF[fmt], _BITS_OF[fmt])
    if v.dtype not in want:
        raise b.error(f"kit.dot_scaled: {side}_format {fmt!r} takes a "
                      f"{' or '.join(str(d) for d in want)} tile, got {v.dtype}",
                      "e2m1 is two 4-bit codes packed in each uint8" if fmt == "e2m1" else None)
    if k_pack not in (True, False):
        raise b.error(f"kit.dot_scaled: {side}_k_pack must be a constexpr bool, got {k_pack!r}")
    if not k_pack and fmt != "e2m1":
        raise b.error(f"kit.dot_scaled: {side}_k_pack=False is only for e2m1 ({side}_format is "
                      f"{fmt!r}): only mxfp4 is packed along a dim other than K")


def _unpacked_shape(shape: tuple, fmt: str, packed_dim: int) -> tuple:
    if fmt != "e2m1":
        return shape
    return tuple(n * 2 if d == packed_dim else n for d, n in enumerate(shape))


def _e2m1_to(b: Any, packed: Value, packed_dim: int, ctype: DType) -> Value:
    """The uint8 tile of packed e2m1 pairs as a ctype tile twice as long along packed_dim
    (the low nibble is the first element)."""
    x = b.cast(packed, int32)
    lo = b.binary("and", x, _const(b, 0xF, int32))
    hi = b.binary("shr", x, _const(b, 4, int32))
    pairs = b.join(lo, hi)                       # [..., n, ..., 2]
    if packed_dim == 0:                          # [n, C, 2] -> [n, 2, C] -> [2n, C]
        pairs = b.permute(pairs, (0, 2, 1), "kit.dot_scaled")
        shape = (packed.shape[0] * 2, packed.shape[1])
    else:                                        # [R, n, 2] -> [R, 2n]
        shape = (packed.shape[0], packed.shape[1] * 2)
    code = b.reshape(pairs, shape, "kit.dot_scaled")
    # magnitude code m = (e << 1) | f: e > 0 is 2**(e-1) * (1 + f/2), whose bits in ctype are
    # (m << (mantissa bits - 1)) + the bits of 0.5; m = 1 is 0.5 itself, m = 0 zero
    shift, half = (6, 0x3F00) if ctype is bfloat16 else (9, 0x3800)
    mag = b.binary("and", code, _const(b, 7, int32))
    normal = b.binary("add", b.binary("shl", mag, _const(b, shift, int32)),
                      _const(b, half, int32))
    small = b.binary("mul", mag, _const(b, half, int32))        # m in {0, 1}
    bits = b.where(b.compare("ge", mag, _const(b, 2, int32)), normal, small)
    sign = b.binary("shl", b.binary("and", code, _const(b, 8, int32)), _const(b, 12, int32))
    bits = b.binary("or", bits, sign)
    return b.cast(b.cast(bits, uint16), ctype, bitcast=True)


def _upcast(b: Any, v: Value, fmt: str, packed_dim: int, ctype: DType) -> Value:
    if fmt == "e2m1":
        return _e2m1_to(b, v, packed_dim, ctype)
    if v.dtype is _BITS_OF[fmt]:
        v = b.cast(v, _FLOAT_OF[fmt], bitcast=True)
    return b.cast(v, ctype)


def _scale_values(b: Any, s: Value, ctype: DType) -> Value:
    """e8m0 codes as ctype values 2**(s-127), built as Triton builds them."""
    x = b.cast(s, int32)
    if ctype is bfloat16:
        bits = b.binary("shl", x, _const(b, 7, int32))
        return b.cast(b.cast(bits, uint16), bfloat16, bitcast=True)
    bits = b.binary("shl", x, _const(b, 23, int32))
    return b.cast(b.cast(bits, float32, bitcast=True), ctype)


def _along_k(b: Any, t: Value, k: int, rhs: bool) -> Value:
    """A [R, K/32] tile repeated 32 times along K: [R, K] ([K, R] for the rhs)."""
    r, groups = t.shape
    t = b.broadcast_to(b.expand_dims(t, 2), (r, groups, k // groups))
    t = b.reshape(t, (r, k), "kit.dot_scaled")
    return b.permute(t, (1, 0), "kit.dot_scaled") if rhs else t


def _apply_scale(b: Any, v: Value, s: Value, side: str, rows: int, k: int, ctype: DType,
                 fast_math: bool) -> Value:
    rhs = side == "rhs"
    want = (rows, k // SCALE_GROUP)
    if not isinstance(s, Value) or s.type.is_shared:
        raise b.error(f"kit.dot_scaled: {side}_scale must be a register tile or None, got "
                      f"{_describe(s)}")
    if s.dtype is not uint8:
        extra = " (Triton's e4m3 scales, one per 16 elements, are not supported yet)" \
            if s.dtype is float8e4nv else ""
        raise b.error(f"kit.dot_scaled: {side}_scale must be a uint8 tile of e8m0 exponents, "
                      f"got {s.dtype}{extra}")
    if k % SCALE_GROUP or s.shape != want:
        raise b.error(f"kit.dot_scaled: {side}_scale must be a tile of shape "
                      f"{_shape(want)} (one per {SCALE_GROUP} elements along K = {k}), got "
                      f"{_shape(s.shape)}",
                      "K must be a multiple of 32; the rhs scale is [N, K//32], not transposed")
    scaled = b.binary("mul", v, _along_k(b, _scale_values(b, s, ctype), k, rhs))
    if fast_math:
        return scaled
    is_nan = _along_k(b, b.compare("eq", s, _const(b, E8M0_NAN, uint8)), k, rhs)
    return b.where(is_nan, _const(b, float("nan"), ctype), scaled)


def scaled_dot(b: Any, lhs: Any, lhs_scale: Any, lhs_format: Any, rhs: Any, rhs_scale: Any,
               rhs_format: Any, acc: Any, fast_math: Any, lhs_k_pack: Any, rhs_k_pack: Any,
               out_dtype: Any) -> Value:
    """acc + (lhs * lhs_scale) @ (rhs * rhs_scale), Triton 3.6's `dot_scaled` on sm_90."""
    _check_format(b, "lhs", lhs_format, lhs, lhs_k_pack)
    _check_format(b, "rhs", rhs_format, rhs, rhs_k_pack)
    if {lhs_format, rhs_format} == {"bf16", "fp16"}:
        raise b.error("kit.dot_scaled of bf16 with fp16 is not supported (nor by Triton on "
                      "Hopper: its compiler has no bf16 -> fp16 conversion for it)",
                      "give both sides one of the two formats")
    if out_dtype is not float32:
        raise b.error(f"kit.dot_scaled: out_dtype must be kit.float32 (as in Triton), got "
                      f"{_describe(out_dtype)}")
    if fast_math not in (True, False):
        raise b.error(f"kit.dot_scaled: fast_math must be a constexpr bool, got {fast_math!r}")
    lhs_dim = 1 if lhs_k_pack else 0       # the dim the e2m1 pairs are packed along
    rhs_dim = 0 if rhs_k_pack else 1
    (m, k), (k2, n) = (_unpacked_shape(lhs.shape, lhs_format, lhs_dim),
                       _unpacked_shape(rhs.shape, rhs_format, rhs_dim))
    if k != k2:
        raise b.error(f"kit.dot_scaled: lhs ({lhs_format}, {_shape(lhs.shape)}) holds K = {k} "
                      f"elements per row but rhs ({rhs_format}, {_shape(rhs.shape)}) holds "
                      f"K = {k2} per column",
                      "e2m1 tiles hold two elements per uint8 along the packed dim")
    if m < 16 or k < 16 or n < 8:
        raise b.error(f"kit.dot_scaled needs M >= 16, K >= 16 and N >= 8 (tensor-core tile "
                      f"16x8x16), got M={m}, N={n}, K={k}",
                      "pad the block sizes up and mask the edges")
    if acc is not None and (not isinstance(acc, Value) or acc.shape != (m, n)
                            or acc.dtype is not float32):
        raise b.error(f"kit.dot_scaled: acc must be an fp32 tile of shape [{m}, {n}], got "
                      f"{_describe(acc)}", f"start it as kit.zeros(({m}, {n}), kit.float32)")
    ctype = float16 if "fp16" in (lhs_format, rhs_format) else bfloat16
    a = _upcast(b, lhs, lhs_format, lhs_dim, ctype)
    w = _upcast(b, rhs, rhs_format, rhs_dim, ctype)
    if lhs_scale is not None:
        a = _apply_scale(b, a, lhs_scale, "lhs", m, k, ctype, fast_math)
    if rhs_scale is not None:
        w = _apply_scale(b, w, rhs_scale, "rhs", n, k, ctype, fast_math)
    return b.dot(a, w, acc, None, float32)

"""Matrix products on tensor cores: kit.dot (mma.sync) and kit.mma (Hopper wgmma).

Call rules: kit.dot, kit.dot_scaled (frontend/semantic/dot_scaled.py), kit.mma.
"""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Op, Value
from kitjit.ir.registry import typing_rule
from kitjit.ir.types import (
    bfloat16,
    float8e4nv,
    float8e5,
    float16,
    float32,
    int1,
    int8,
    int32,
    mbarrier,
)

from . import dot_batched, dot_f32, dot_int8, dot_scaled
from .base import _describe, _shape, is_pow2
from .call_rules import Call, call_rule

_FP8_MMA = (float8e4nv, float8e5)   # wgmma's e4m3 and e5m2


def _is_trans(v: Value) -> bool:
    """A `.T` view of a shared tile (odd number of transposes)."""
    n = 0
    while isinstance(v.owner, Op) and v.owner.name == "smem_trans":
        n, v = n + 1, v.owner.operands[0]
    return n % 2 == 1


class DotOps:
    """Typing rules of the dot family."""

    @typing_rule("dot")
    def dot(self, a: Any, b: Any, acc: Any = None, precision: str | None = None,
            out_dtype: Any = float32) -> Value:
        if any(isinstance(v, Value) and len(v.shape) == 3 for v in (a, b)):
            return dot_batched.batched_dot(self, a, b, acc, precision, out_dtype)
        for name, v in (("a", a), ("b", b)):
            if not isinstance(v, Value) or len(v.shape) != 2:
                raise self.error(f"kit.dot: '{name}' must be a 2-d tile, got {_describe(v)}")
        (M, K), (K2, N) = a.shape, b.shape
        if K != K2:
            raise self.error(f"kit.dot: inner dims differ: a is {_shape(a.shape)}, "
                             f"b is {_shape(b.shape)}",
                             "a is [M, K] and b is [K, N]: load b with the K offsets on its "
                             "rows")
        if a.dtype.is_fp8() and b.dtype.is_fp8():
            # Hopper's mma.sync has no fp8 shape: upcast in registers (exact: fp8 values are
            # fp16 values), then the f16 mma; the fp32 sums are those of an fp8 mma
            a, b = self.cast(a, float16), self.cast(b, float16)
        if a.dtype is int8 and b.dtype is int8:
            return dot_int8.int8_dot(self, a, b, acc)
        if out_dtype is bfloat16:
            raise self.error("kit.dot: out_dtype=bfloat16 is not supported (nor in Triton)",
                             "use out_dtype=kit.float32 and convert with .to(kit.bfloat16)")
        if out_dtype is float16 and a.dtype is float16 and b.dtype is float16:
            return dot_int8.f16_out_dot(self, a, b, acc)
        f32 = a.dtype is float32 and b.dtype is float32
        if f32 and precision is not None and precision not in dot_f32.PRECISIONS:
            raise self.error(f"kit.dot: input_precision must be one of "
                             f"{', '.join(dot_f32.PRECISIONS)}, got {precision!r}")
        if not f32 and (a.dtype not in (float16, bfloat16) or b.dtype not in (float16, bfloat16)):
            raise self.error(f"kit.dot takes fp16, bf16, fp32 or int8 inputs of one dtype for "
                             f"now, got {a.dtype} and {b.dtype} (fp8 works when both sides are "
                             f"fp8)", "convert the inputs with .to(kit.bfloat16)")
        if a.dtype is not b.dtype:
            raise self.error(f"kit.dot: a is {a.dtype} but b is {b.dtype}",
                             "convert one side so both match")
        if M < 16 or K < 16 or N < 8:
            raise self.error(f"kit.dot needs M >= 16, K >= 16 and N >= 8 (tensor-core tile "
                             f"16x8x16), got M={M}, N={N}, K={K}",
                             "pad the block sizes up and mask the edges")
        if acc is None:
            acc = self.full((M, N), 0.0, float32)
        elif not isinstance(acc, Value) or acc.shape != (M, N) or acc.dtype is not float32:
            raise self.error(f"kit.dot: acc must be an fp32 tile of shape [{M}, {N}], got "
                             f"{_describe(acc)}",
                             f"start it as kit.zeros(({M}, {N}), kit.float32)")
        if f32:
            return dot_f32.split_dot(self, a, b, acc, precision or "tf32")
        return self.emit1("dot", [a, b, acc], acc.type)

    @typing_rule("wgmma")
    def wgmma(self, a: Any, b: Any, acc: Any, pending: Any, next: Any = None) -> Value:
        if not isinstance(a, Value) or len(a.shape) != 2:
            raise self.error(f"kit.mma: 'a' must be a 2-d tile (shared, or registers), got "
                             f"{_describe(a)}")
        if not isinstance(b, Value) or not b.type.is_shared or len(b.shape) != 2:
            raise self.error(f"kit.mma: 'b' must be a 2-d shared tile, got {_describe(b)}",
                             "load it with kit.tma_load into kit.shared(...)")
        (M, K), (K2, N) = a.shape, b.shape
        nw = self.warps
        fp8 = a.dtype in _FP8_MMA and b.dtype in _FP8_MMA
        if not fp8 and (a.dtype not in (float16, bfloat16) or a.dtype is not b.dtype):
            raise self.error(f"kit.mma takes fp16 or bf16 tiles of one dtype, or fp8 tiles "
                             f"(float8e4nv / float8e5, mixed allowed), got {a.dtype} and "
                             f"{b.dtype}")
        if K != K2:
            raise self.error(f"kit.mma: inner dims differ: a is {_shape(a.shape)}, b is "
                             f"{_shape(b.shape)}")
        kstep = 32 if fp8 else 16     # one wgmma instruction reads 32 bytes of K per row
        if self.fn.attrs.get("target"):  # Ampere/Ada: mma.sync m16n8k16 (frontend/ampere.py)
            if fp8:
                raise self.error(f"kit.mma with fp8 tiles needs Hopper's wgmma; on "
                                 f"{self.fn.attrs['target']} it is not supported yet",
                                 "use kit.dot on fp8 register tiles (it upcasts to fp16)")
            if M % 16 or K % 16 or N % 8 or N > 256:
                raise self.error(f"kit.mma on {self.fn.attrs['target']} needs M and K "
                                 f"multiples of 16 and N a multiple of 8 up to 256 (mma.sync "
                                 f"m16n8k16); got M={M}, N={N}, K={K}")
        elif nw % 4 or M % (16 * nw) or K % kstep or N % 8 or N > 256:
            raise self.error(f"kit.mma needs num_warps a multiple of 4 (warpgroups), M a "
                             f"multiple of 16*num_warps (64 rows per warpgroup), K a multiple "
                             f"of {kstep} and N a multiple of 8 up to 256; got M={M}, N={N}, "
                             f"K={K}, num_warps={nw}")
        if fp8:
            # Hopper's fp8 wgmma has no transpose bits: both operands must be K-major in
            # shared memory (A stored [M, K], B stored [N, K] and passed as b[s].T)
            if not a.type.is_shared or _is_trans(a):
                raise self.error("kit.mma with fp8 takes A from a shared tile stored [M, K] "
                                 "(K contiguous); fp8 A from registers or transposed is not "
                                 "supported yet")
            if not _is_trans(b):
                raise self.error("kit.mma with fp8 needs B K-major: store it [N, K] in shared "
                                 "memory and pass the .T view",
                                 "b = kit.shared((STAGES, BN, BK), ...); kit.mma(a[s], b[s].T, "
                                 "acc)")
        if not ((is_pow2(M) or M == 16 * nw) and is_pow2(N)):
            raise self.error(f"kit.mma: the result is a register tile, whose dims are powers "
                             f"of two, got M={M}, N={N} (a is {_shape(a.shape)}, b is "
                             f"{_shape(b.shape)})",
                             "shared tiles of other dims (a multiple of 8 rows) fit on the "
                             "K side: a's cols, b's rows")
        if not isinstance(acc, Value) or acc.shape != (M, N) or acc.dtype is not float32:
            raise self.error(f"kit.mma: acc must be an fp32 register tile of shape [{M}, {N}], "
                             f"got {_describe(acc)}",
                             f"start it as kit.zeros(({M}, {N}), kit.float32)")
        if not isinstance(pending, int) or pending < 0:
            raise self.error("kit.mma: pending must be a constexpr int >= 0")
        attrs = {"pending": pending}
        extra = []
        if next is not None:
            extra = self._mma_next(a, b, next)
            attrs["next"] = True
        return self.emit1("wgmma", [a, b, acc, *extra], acc.type, attrs)

    def _mma_next(self, a: Value, b: Value, next: Any) -> list[Value]:
        """kit.mma's `next=(a_next, b_next, barrier, phase[, cond])` (below sm_90): the
        operands [a_next, b_next, barrier, phase i32, cond i1] appended to the wgmma op."""
        if self.fn.attrs.get("_tma_target"):   # (the interpreter types as Hopper: it runs it)
            raise self.error("kit.mma(..., next=...) prefetches mma.sync fragments across a "
                             "stage wait, an sm_80/86/89 form; on sm_90a it is not supported "
                             "yet", "pass next= only where the kernel compiles for Ampere/Ada")
        if not isinstance(next, tuple) or len(next) not in (4, 5):
            raise self.error(f"kit.mma: next must be a tuple (a_next, b_next, barrier, phase"
                             f"[, cond]), got {_describe(next)}")
        a1, b1, bar, phase, *cond = next
        if not a.type.is_shared:
            raise self.error("kit.mma(..., next=...) needs A in shared memory; A from "
                             "registers is not supported yet")
        for x, x1, name in ((a, a1, "a"), (b, b1, "b")):
            if not (isinstance(x1, Value) and x1.type.is_shared and x1.shape == x.shape
                    and x1.dtype is x.dtype and _is_trans(x1) == _is_trans(x)):
                raise self.error(f"kit.mma: next's {name} must be a shared tile like {name} "
                                 f"({_describe(x)}; the same view, e.g. {name}[s1] beside "
                                 f"{name}[s]), got {_describe(x1)}")
        if not isinstance(bar, Value) or bar.dtype is not mbarrier or bar.shape != ():
            raise self.error(f"kit.mma: next's barrier must be one mbarrier (bars[s]), got "
                             f"{_describe(bar)}")
        ph = self.cast(phase, int32) if isinstance(phase, Value) else self.constant(phase, int32)
        c = cond[0] if cond else True
        c = self.cast(c, int1) if isinstance(c, Value) else self.constant(bool(c), int1)
        return [a1, b1, bar, ph, c]


# -------------------------------------------------------------------- kit.<name> calls
@call_rule("dot", lambda input, other, acc=None, input_precision=None, allow_tf32=None,
           max_num_imprecise_acc=None, out_dtype=float32: None)
def _dot(c: Call) -> Any:
    # max_num_imprecise_acc: Triton's cap on fp8 wgmma sums kept in lower precision; kitjit
    # accumulates every fp8 product in fp32, so any cap is met (accepted, nothing to do)
    c.const("max_num_imprecise_acc", "a constexpr int")
    precision = c.const("input_precision", "a constexpr string")
    tf32 = c.const("allow_tf32", "a constexpr bool")
    if precision is None and tf32 is not None:
        precision = "tf32" if tf32 else "ieee"
    return c.b.dot(c["input"], c["other"], c["acc"], precision, c.const("out_dtype"))


@call_rule("dot_scaled", lambda lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format,
           acc=None, fast_math=False, lhs_k_pack=True, rhs_k_pack=True, out_dtype=float32: None)
def _dot_scaled(c: Call) -> Any:
    consts = {k: c.const(k) for k in ("lhs_format", "rhs_format", "fast_math", "lhs_k_pack",
                                      "rhs_k_pack", "out_dtype")}
    return dot_scaled.scaled_dot(c.b, c["lhs"], c["lhs_scale"], consts["lhs_format"], c["rhs"],
                                 c["rhs_scale"], consts["rhs_format"], c["acc"],
                                 consts["fast_math"], consts["lhs_k_pack"],
                                 consts["rhs_k_pack"], consts["out_dtype"])


@call_rule("mma", lambda a, b, acc, pending=0, next=None: None)
def _mma(c: Call) -> Any:
    return c.b.wgmma(c["a"], c["b"], c["acc"], c.const("pending"), c["next"])

"""Scans, sorts and histograms: `scan` (kit.associative_scan with a `@kit.jit` combine
function inlined into its region, kit.cumsum, kit.cumprod), `sort` (kit.sort, kit.topk)
and `histogram`.

Call rules: kit.associative_scan, kit.cumsum, kit.cumprod, kit.sort, kit.topk,
kit.histogram.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kitjit.ir.core import Block, Value
from kitjit.ir.registry import typing_rule
from kitjit.ir.types import DType, TileType, bfloat16, float32, int32, uint32

from .base import _describe, _shape, is_pow2
from .call_rules import Call, call_rule
from .reduction import _binary_region, _jit_region


class ScanOps:
    """Typing rules of the scan family."""

    @typing_rule("scan")
    def scan(self, xs: list[Value], axis: Any, region: Callable[[], Block],
             reverse: bool = False) -> list[Value]:
        axis = self.reduction_axis(xs[0], axis)
        op = self.emit("scan", list(xs), [x.type for x in xs],
                       {"axis": axis, "reverse": bool(reverse)}, [region()])
        return list(op.results)

    @typing_rule("sort")
    def sort(self, x: Any, dim: Any, descending: bool, k: int | None, what: str) -> Value:
        if not isinstance(x, Value) or x.type.is_scalar or x.type.is_shared:
            raise self.error(f"{what} needs a tile, got {_describe(x)}")
        if x.dtype.is_ptr():
            raise self.error(f"{what} does not apply to pointers")
        rank = len(x.shape)
        if dim is not None and (not isinstance(dim, int) or dim % rank != rank - 1 or
                                not -rank <= dim < rank):
            raise self.error(f"{what} sorts along the last dim only (as Triton), got dim={dim!r}"
                             f" for a tile of shape {_shape(x.shape)}", "pass dim=None")
        n = x.shape[-1]
        if k is None:
            k = n
        if not isinstance(k, int) or not is_pow2(k) or k > n:
            raise self.error(f"{what}: k must be a power of two no larger than {n}, got {k!r}")
        if k < n:  # Triton's rounds of tl.max / tl.min widen as those do
            if x.dtype.is_floating() and x.dtype.bits < 32:
                x = self.cast(x, float32)
            elif (x.dtype.is_int() or x.dtype.is_bool()) and x.dtype.bits < 32:
                x = self.cast(x, int32)
        return self.emit1("sort", [x], TileType(x.dtype, x.shape[:-1] + (k,)),
                          {"descending": bool(descending), "k": k})

    @typing_rule("histogram")
    def histogram(self, x: Any, num_bins: Any, mask: Any) -> Value:
        if not isinstance(x, Value) or len(x.shape) != 1 or x.type.is_shared:
            raise self.error(f"kit.histogram needs a 1-d tile, got {_describe(x)}")
        if not x.dtype.is_int() and not x.dtype.is_bool():
            raise self.error(f"kit.histogram counts integers, got {x.dtype}",
                             "convert the values to bin indices with .to(kit.int32)")
        if not isinstance(num_bins, int) or not is_pow2(num_bins):
            raise self.error(f"kit.histogram: num_bins must be a constexpr power of two, got "
                             f"{num_bins!r}")
        self.check_numel((num_bins,), "kit.histogram")
        ops = [x]
        if mask is not None:
            m = self.to_value(mask, x)
            if not m.dtype.is_bool():
                m = self.compare("ne", m, 0)
            ops.append(self.broadcast_to(m, x.shape))
        return self.emit1("histogram", ops, TileType(int32, (num_bins,)),
                          {"num_bins": num_bins, "has_mask": mask is not None})


def _sum_dtype(dt: DType) -> DType | None:
    """Triton's cumsum accumulator: bf16 -> fp32, narrow ints -> int32/uint32 (bool is
    unsigned)."""
    if dt is bfloat16:
        return float32
    if dt.is_int_signed() and dt.bits < 32:
        return int32
    if (dt.is_int_unsigned() or dt.is_bool()) and dt.bits < 32:
        return uint32
    return None


# -------------------------------------------------------------------- kit.<name> calls
@call_rule("associative_scan", lambda input, axis, combine_fn, reverse=False: None)
def _scan(c: Call) -> Any:
    xs, multi = c.b.combine_inputs("kit.associative_scan", c["input"])
    region = _jit_region(c, "kit.associative_scan", c["combine_fn"], [x.dtype for x in xs])
    rs = c.b.scan(xs, c.const("axis"), region, bool(c.const("reverse")))
    return tuple(rs) if multi else rs[0]


@call_rule("cumsum", lambda input, axis=0, reverse=False, dtype=None: None)
@call_rule("cumprod", lambda input, axis=0, reverse=False: None)
def _cum(c: Call) -> Any:
    what = f"kit.{c.name}"
    xs, multi = c.b.combine_inputs(what, c["input"])
    if multi:
        raise c.err(f"{what} needs one tile, got {_describe(c['input'])}")
    x = xs[0]
    dt = c.const("dtype") if c.name == "cumsum" else None
    if dt is not None and not isinstance(dt, DType):
        raise c.err(f"{what}: dtype must be a kit dtype, got {_describe(dt)}")
    fp8 = x.dtype if x.dtype.is_fp8() and dt is None else None
    if dt is None:
        dt = _sum_dtype(x.dtype) if c.name == "cumsum" else \
            (float32 if x.dtype is bfloat16 else None)
    if fp8 is not None:  # computed in fp32, each result rounded to the input's fp8 (Triton's)
        dt = float32
    if dt is not None:
        x = c.b.cast(x, dt)
    if x.dtype.is_bool():  # cumprod of bools: and
        region = _binary_region(c, what, "and", x.dtype)
    else:
        region = _binary_region(c, what, "add" if c.name == "cumsum" else "mul", x.dtype)
    r = c.b.scan([x], c.const("axis"), region, bool(c.const("reverse")))[0]
    return r if fp8 is None else c.b.cast(r, fp8)


@call_rule("sort", lambda x, dim=None, descending=False: None)
def _sort(c: Call) -> Any:
    return c.b.sort(c["x"], c.const("dim"), bool(c.const("descending")), None, "kit.sort")


@call_rule("topk", lambda x, k, dim=None: None)
def _topk(c: Call) -> Any:
    return c.b.sort(c["x"], c.const("dim"), True, c.const("k"), "kit.topk")


@call_rule("histogram", lambda input, num_bins, mask=None: None)
def _histogram(c: Call) -> Any:
    return c.b.histogram(c["input"], c.const("num_bins"), c["mask"])

"""Typing rules and op construction: what `a + b`, `kit.load(...)`, `kit.sum(...)` mean.

One module per op family of `kitjit.ir.ops` (core, elementwise, memory, reduction, scan, shape,
dot, tma, control, signal). Each holds the family's Builder mixin, whose methods type-check
operands, insert casts and broadcasts and emit the ops (each marked `@typing_rule("op")`), and the
`kit.<name>(...)` call rules of the family (`@call_rule`, see `call_rules.py`). `base.py`
holds the Builder's state, the shared helpers and the type promotion rules.

Adding an op: declare it in `kitjit/ir/ops.py`, add a `@typing_rule` method to the family's
mixin here and, for a new builtin, a `@call_rule` beside it.
"""

from . import block_ptr  # noqa: F401  (block pointers, tensor descriptors: call rules)
from .base import (
    MAX_TILE_NUMEL,
    BuilderBase,
    Number,
    describe,
    int_range,
    is_pow2,
    literal_dtype,
    promote,
    shape_str,
    weak_dtype,
)
from .call_rules import CALL_RULES, Call, CallRule, call_rule
from .cluster import ClusterOps
from .control import ControlOps
from .core import CoreOps
from .dot import DotOps
from .elementwise import ElementwiseOps
from .memory import MemoryOps
from .reduction import ReductionOps
from .scan import ScanOps
from .shape import ShapeOps
from .signal import SignalOps
from .tma import TmaOps


class Builder(CoreOps, ElementwiseOps, MemoryOps, ReductionOps, ScanOps, ShapeOps, DotOps,
              TmaOps, ControlOps, SignalOps, ClusterOps, BuilderBase):
    """Appends ops to the current block and checks every rule a user can break (shapes that
    cannot broadcast, dtypes that cannot meet, axes out of range), raising `CompileError` at
    the current source location."""


__all__ = [
    "Builder", "BuilderBase", "CALL_RULES", "Call", "CallRule", "MAX_TILE_NUMEL", "Number",
    "call_rule", "describe", "int_range", "is_pow2", "literal_dtype", "promote", "shape_str",
    "weak_dtype",
]

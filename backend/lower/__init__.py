"""Tile IR (with layouts) -> LLVM IR in NVVM form.

Each tile value becomes, in every thread, the list of LLVM values for the registers that
thread owns under the tile's layout (`LinearLayout`); a scalar is a list of one. Ops are
unrolled over those lists. Where data must cross threads - reductions, layout conversions,
mma operands - the lowering matches element coordinates between layouts: a register's
coordinate is its register-bit part (a compile-time constant) plus a lane/warp part
(computed once from the thread id). `for` and `if` become LLVM control flow whose phis carry
the lists.

One module per op family (the families of `kitjit/ir/ops.py`), each a mixin of `Lowering`
whose methods register with `@lowering("op")` (`kitjit/ir/registry.py`); `base.py` holds the
state and the helpers more than one family uses, and `block()`, which dispatches through the
registry. Importing this package registers every family's lowerings.
"""

from __future__ import annotations

from ..nvvm import GPTR, I64, SPTR
from .ampere import AmpereLowering
from .base import LoweringBase, LoweringError
from .cluster import ClusterLowering
from .control import ControlLowering
from .core import CoreLowering
from .dot import DotLowering
from .elementwise import ElementwiseLowering
from .memory import MemoryLowering
from .reduction import ReductionLowering
from .scan import ScanLowering
from .shape import ShapeLowering
from .signal import SignalLowering
from .tma import TmaLowering


class Lowering(CoreLowering, ElementwiseLowering, MemoryLowering, ReductionLowering,
               ScanLowering, ShapeLowering, DotLowering, TmaLowering, ControlLowering,
               SignalLowering, ClusterLowering, AmpereLowering, LoweringBase):
    """Lowers one kernel: `Lowering(fn).llvm_ir()` is its LLVM module's text."""


__all__ = ["Lowering", "LoweringError", "GPTR", "SPTR", "I64"]

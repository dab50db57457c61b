"""The language's foundation: compile-time parameters (`kit.constexpr`), unrolled loops
(`kit.static_range`), dtypes, and `builtin`, which makes the markers every family module
declares (`kit.load`, `kit.sum`, ...): the frontend recognises them by identity and builds
tile IR; called from plain Python they raise."""

from __future__ import annotations

import builtins
from typing import Any

from ..ir.types import (
    DType,
    PointerDType,
    int1,
)

bool_ = int1
dtype = DType
pointer_type = PointerDType


class constexpr:
    """Annotation for compile-time parameters (`BLOCK: kit.constexpr`); their values are part
    of the specialization key and fold at compile time."""

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return f"constexpr({self.value!r})"


class const:
    """Annotation of a pointer parameter whose data the kernel only reads (`X: kit.const`,
    Triton's `tl.const`): loads through it work; a store or an atomic through it, or through
    a pointer computed from it, is a compile error at that line (Triton's compiler says
    "Cannot store to a constant pointer"; its interpreter does not check)."""


class static_range:
    """`for i in kit.static_range(4)`: unrolled at compile time; `i` is a constant."""

    def __init__(self, start, stop=None, step=1):
        if stop is None:
            start, stop = 0, start
        self.start, self.stop, self.step = start, stop, step

    def __iter__(self):
        return iter(builtins.range(self.start, self.stop, self.step))


class tensor:
    """The type of tiles and scalars in a kernel (Triton's `tl.tensor`): a kernel may ask
    `isinstance(x, kit.tensor)` (answered at compile time)."""


class tensor_descriptor:
    """The type of tensor descriptors in a kernel (Triton's `tl.tensor_descriptor`): from
    `kit.make_tensor_descriptor`, or a host `kitjit.tools.tensor_descriptor.TensorDescriptor`
    argument. `isinstance(x, kit.tensor_descriptor)` is answered at compile time."""


BUILTINS: dict[str, Any] = {}


def builtin(fn):
    """Mark `fn` as a kitjit builtin: usable only inside @kit.jit functions."""
    name = fn.__name__

    def outside(*args, **kwargs):
        raise RuntimeError(f"kit.{name} can only be used inside a @kit.jit function")

    outside.__name__ = name
    outside.__qualname__ = name
    outside.__doc__ = fn.__doc__
    outside.__kit_builtin__ = name
    BUILTINS[name] = outside
    return outside


class range:  # noqa: A001 - Triton's name
    """`for i in kit.range(lo, hi, step, num_stages=..., ...)`: a loop that runs at run time,
    as Python's `range` in a kernel, with Triton's loop hints. `loop_unroll_factor` reaches
    LLVM as loop metadata: 1 (or 0) keeps the loop rolled, n unrolls it n times (without
    it LLVM decides, and unrolls a short loop of constant trip count whole). The other hints
    are checked and kept on the loop's `for` op but change no code yet: `num_stages`
    (software pipelining depth), `disallow_acc_multi_buffer`, `flatten`, `warp_specialize`,
    `disable_licm`. Outside a kernel it iterates as Python's range."""

    def __init__(self, arg1, arg2=None, step=None, num_stages=None, loop_unroll_factor=None,
                 disallow_acc_multi_buffer=False, flatten=False, warp_specialize=False,
                 disable_licm=False):
        if arg2 is None:
            arg1, arg2 = 0, arg1
        self.start, self.stop, self.step = arg1, arg2, 1 if step is None else step

    def __iter__(self):
        return iter(builtins.range(self.start, self.stop, self.step))


NAMESPACED: dict[str, Any] = {}


def namespaced(qualname: str, doc: str | None = None):
    """A marker that lives in a namespace module (``libdevice.tanh``), not in kit.<name>:
    its call rule is registered under `qualname`."""
    def outside(*args, **kwargs):
        raise RuntimeError(f"{qualname} can only be used inside a @kit.jit function")

    outside.__name__ = qualname.rsplit(".", 1)[-1]
    outside.__qualname__ = qualname
    outside.__doc__ = doc
    outside.__kit_builtin__ = qualname
    NAMESPACED[qualname] = outside
    return outside

"""What a program knows and makes from nothing: its id, the grid, ranges, filled tiles, and
ceiling division."""

from __future__ import annotations

# Triton's triton.language.core also holds its type classes and small helpers: re-exported
from ..constexpr_fn import must_use_result  # noqa: F401
from ..kernel_interface import JITCallable  # noqa: F401
from .base import BUILTINS, builtin
from .base import tensor_descriptor as tensor_descriptor_base  # noqa: F401
from .types import (  # noqa: F401
    base_type,
    base_value,
    get_primitive_bitwidth,
    is_negative_zero,
    slice_type,
    tuple_type,
    validate_block_shape,
)

#: the attribute Triton's builtins carry (kitjit's markers carry `__kit_builtin__`)
TRITON_BUILTIN = "__triton_builtin__"


def is_builtin(fn) -> bool:
    """Whether `fn` is one of the language's builtins (a kit.<name> marker)."""
    return bool(getattr(fn, "__kit_builtin__", False) or getattr(fn, TRITON_BUILTIN, False))


@builtin
def program_id(axis):
    """The index of this program (CTA) along grid axis 0, 1 or 2."""


@builtin
def num_programs(axis):
    """The number of programs along grid axis 0, 1 or 2."""


@builtin
def arange(start, end):
    """[start, start+1, ..., end-1] as an int32 tile; end-start a power of two."""


@builtin
def zeros(shape, dtype):
    """A tile of zeros."""


@builtin
def full(shape, value, dtype):
    """A tile filled with `value`."""


@builtin
def cdiv(x, div):
    """Ceiling division (also usable on the host: kit.cdiv(n, BLOCK))."""


def _host_cdiv(x, div):
    if isinstance(x, int) and isinstance(div, int):
        return -(-x // div)
    raise RuntimeError("kit.cdiv takes ints on the host")


# Triton's `triton.language.core` names that kernels copied from Triton's own library use
# (fla's bitonic argsort): a compile-time 0 for parameter defaults, and the integer dtype of
# a bit width, called at compile time
CONSTEXPR_0 = 0


def get_int_dtype(bitwidth: int, signed: bool):
    """The int dtype of `bitwidth` bits (8, 16, 32, 64), signed or not."""
    from ..ir import types as t

    table = {(8, True): t.int8, (16, True): t.int16, (32, True): t.int32, (64, True): t.int64,
             (8, False): t.uint8, (16, False): t.uint16, (32, False): t.uint32,
             (64, False): t.uint64, (1, False): t.int1, (1, True): t.int1}
    if (bitwidth, bool(signed)) not in table:
        raise ValueError(f"no integer dtype of {bitwidth} bits")
    return table[bitwidth, bool(signed)]


def next_power_of_2(n: int) -> int:
    """Host helper: the smallest power of two >= n."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


_host_cdiv.__kit_builtin__ = "cdiv"


_host_cdiv.__name__ = "cdiv"


_host_cdiv.__doc__ = cdiv.__doc__


cdiv = BUILTINS["cdiv"] = _host_cdiv


@builtin
def multiple_of(input, values):
    """`input`, promising that each element (of each run, per dim) is a multiple of
    `values`: kitjit uses it, as Triton does, to prove alignment for wider memory accesses.
    A false promise is undefined behaviour on the GPU; the interpreter does not check it."""


@builtin
def max_contiguous(input, values):
    """`input`, promising runs of `values` consecutive elements (per dim)."""


@builtin
def max_constancy(input, values):
    """`input`, promising runs of `values` equal elements (per dim)."""


@builtin
def assume(cond):
    """Promises the scalar `cond` holds (`llvm.assume` on the GPU). The interpreter checks
    it and raises DeviceAssertError where it does not."""


from .triton_names import language_attr as _language_attr  # noqa: E402
from .triton_names import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("kitjit.language.core", "triton.language.core", _language_attr)


@builtin
def item(input):
    """The one element of a single-element tile as a scalar (Triton's `x.item()`); a
    scalar is returned as it is."""

"""libdevice's bit reinterpretations (`libdevice.float_as_int(x)`, ...): `x.to(dtype,
bitcast=True)` with the one input dtype Triton's libdevice accepts for each (another dtype is
a compile-time error, as Triton finds no overload). Imported on first use by libdevice's
module `__getattr__` (these are @kit.jit functions, which need kitjit.jit)."""

from __future__ import annotations

from ...ir.types import float32, float64, int32, int64, uint32
from ...jit import jit
from ..base import BUILTINS as _B

_cast, _static_assert = _B["cast"], _B["static_assert"]


@jit
def float_as_int(x):
    """The bits of an fp32 tile as int32."""
    _static_assert(x.dtype == float32, "libdevice.float_as_int takes an fp32 tile")
    return _cast(x, int32, bitcast=True)


@jit
def float_as_uint(x):
    """The bits of an fp32 tile as uint32."""
    _static_assert(x.dtype == float32, "libdevice.float_as_uint takes an fp32 tile")
    return _cast(x, uint32, bitcast=True)


@jit
def int_as_float(x):
    """An int32 tile's bits as fp32."""
    _static_assert(x.dtype == int32, "libdevice.int_as_float takes an int32 tile")
    return _cast(x, float32, bitcast=True)


@jit
def uint_as_float(x):
    """A uint32 tile's bits as fp32."""
    _static_assert(x.dtype == uint32, "libdevice.uint_as_float takes a uint32 tile")
    return _cast(x, float32, bitcast=True)


@jit
def double_as_longlong(x):
    """The bits of an fp64 tile as int64."""
    _static_assert(x.dtype == float64, "libdevice.double_as_longlong takes an fp64 tile")
    return _cast(x, int64, bitcast=True)


@jit
def longlong_as_double(x):
    """An int64 tile's bits as fp64."""
    _static_assert(x.dtype == int64, "libdevice.longlong_as_double takes an int64 tile")
    return _cast(x, float64, bitcast=True)


BITS = ("float_as_int", "float_as_uint", "int_as_float", "uint_as_float", "double_as_longlong",
        "longlong_as_double")

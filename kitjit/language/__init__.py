"""The kitjit language: the names a kernel body uses (`kit.load`, `kit.sum`, ...).

These are markers: the frontend recognises them by identity and builds tile IR; calling one
from plain Python raises. Names and semantics follow Triton's `triton.language` where Triton
has the name, so a Triton kernel ports by changing the import. One module per op family, as
in the frontend (frontend/semantic/<family>.py), the backend (backend/lower/<family>.py) and
the interpreter (kitjit/interpreter/<family>.py).
"""

from ..ir.types import (  # noqa: F401
    DType,
    PointerDType,
    bfloat16,
    float8e4b15,
    float8e4nv,
    float8e5,
    float16,
    float32,
    float64,
    int1,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from . import (  # noqa: F401
    cluster,
    control,
    core,
    dot,
    elementwise,
    extra,
    math,
    memory,
    reduction,
    scan,
    shape,
    signal,
    tma,
)
from .base import (  # noqa: F401
    BUILTINS,
    bool_,
    builtin,
    const,
    constexpr,
    dtype,
    pointer_type,
    range,
    static_range,
    tensor,
    tensor_descriptor,
)
from .core import next_power_of_2  # noqa: F401
from .elementwise import PropagateNan  # noqa: F401
from .types import block_type, constexpr_type, pi32_t, slice, void  # noqa: F401

TRITON_MAX_TENSOR_NUMEL = 1 << 20  # Triton's limit on a tile's elements; kitjit's is the same
# Triton's tl.tuple: kitjit's kernels hold tuples of tiles as Python tuples, so `tl.tuple([a,
# b])` builds one and `isinstance(x, tl.tuple)` asks for one
tuple = tuple  # noqa: A001,PLW0127

globals().update(BUILTINS)  # every marker is kit.<name>

# @kit.jit functions over the markers above: Triton's random numbers and small helpers
from . import bitonic, loops, random, standard, target_info  # noqa: E402,F401
from .bitonic import bitonic_merge  # noqa: E402,F401
from .loops import condition  # noqa: E402,F401
from .random import (  # noqa: E402,F401
    pair_uniform_to_normal,
    philox,
    philox_impl,
    rand,
    rand4x,
    randint,
    randint4x,
    randn,
    randn4x,
    uint_to_uniform_float,
)
from .standard import (  # noqa: E402,F401
    add,
    load_tensor_descriptor,
    mul,
    softmax,
    store_tensor_descriptor,
    sub,
    swizzle2d,
    zeros_like,
)

__all__ = [
    "TRITON_MAX_TENSOR_NUMEL", "tuple", "const", "constexpr", "static_range", "range",
    "next_power_of_2", "builtin", "BUILTINS", "dtype",
    "pointer_type", "math", "extra", "PropagateNan", "tensor", "tensor_descriptor",
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "int1", "bool_", "float8e4nv", "float8e5",
    "float8e4b15", "void", "pi32_t", "block_type", "constexpr_type", "slice",
    *BUILTINS, *random.RANDOM, *standard.STANDARD, "bitonic_merge",
    "condition", "target_info",
]


def __getattr__(name: str):
    """A Triton name kitjit lacks: a one-line "not supported yet" (see triton_names.py)."""
    if name.startswith("__"):
        raise AttributeError(name)
    from .triton_names import missing_name_message

    raise AttributeError(missing_name_message(name))

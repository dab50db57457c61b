"""The kitjit language: the names a kernel body uses (`kit.load`, `kit.sum`, ...).

These are markers: the frontend recognises them by identity and builds tile IR; calling one
from plain Python raises. Names and semantics follow Triton's `triton.language` where Triton
has the name, so a Triton kernel ports by changing the import.
"""

from __future__ import annotations

from typing import Any

from .ir.types import (
    DType,
    PointerDType,
    bfloat16,
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


class static_range:
    """`for i in kit.static_range(4)`: unrolled at compile time; `i` is a constant."""

    def __init__(self, start, stop=None, step=1):
        if stop is None:
            start, stop = 0, start
        self.start, self.stop, self.step = start, stop, step

    def __iter__(self):
        return iter(range(self.start, self.stop, self.step))


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
def load(pointer, mask=None, other=None):
    """Load a tile through a tile of pointers; masked-off lanes read `other` (0 if None)."""


@builtin
def store(pointer, value, mask=None):
    """Store a tile through a tile of pointers; masked-off lanes are not written."""


@builtin
def where(condition, x, y):
    """Elementwise select."""


@builtin
def minimum(x, y):
    """Elementwise minimum."""


@builtin
def maximum(x, y):
    """Elementwise maximum."""


@builtin
def exp(x, ftz=False):
    """e**x (fp32 inputs use the hardware's exp2 with a scale). ftz: see kit.exp2."""


@builtin
def exp2(x, ftz=False):
    """2**x. ftz=True flushes results below 2**-126 to zero: the bare MUFU.EX2 instead of
    three instructions (what softmax wants: such terms vanish in its sums anyway)."""


@builtin
def log(x):
    """Natural logarithm."""


@builtin
def log2(x):
    """Base-2 logarithm."""


@builtin
def sqrt(x):
    """Square root (correctly rounded)."""


@builtin
def rsqrt(x):
    """1/sqrt(x) (approximate, like CUDA's rsqrtf)."""


@builtin
def abs(x):
    """Absolute value."""


@builtin
def sin(x):
    """Sine (hardware approximation)."""


@builtin
def cos(x):
    """Cosine (hardware approximation)."""


@builtin
def sigmoid(x):
    """1 / (1 + exp(-x))."""


@builtin
def floor(x):
    """Round toward -inf."""


@builtin
def ceil(x):
    """Round toward +inf."""


@builtin
def sum(x, axis=None, keep_dims=False):
    """Sum along `axis` (all axes if None). Integers narrower than 32 bits and fp16/bf16
    accumulate in int32/fp32."""


@builtin
def max(x, axis=None, keep_dims=False):
    """Maximum along `axis`."""


@builtin
def min(x, axis=None, keep_dims=False):
    """Minimum along `axis`."""


@builtin
def argmax(x, axis, keep_dims=False):
    """Index of the maximum along `axis` (the first one on ties)."""


@builtin
def argmin(x, axis, keep_dims=False):
    """Index of the minimum along `axis` (the first one on ties)."""


@builtin
def dot(a, b, acc=None):
    """a @ b (+ acc) on tensor cores (mma.sync): fp16/bf16 inputs, fp32 accumulation."""


@builtin
def cdiv(x, div):
    """Ceiling division (also usable on the host: kit.cdiv(n, BLOCK))."""


def _host_cdiv(x, div):
    if isinstance(x, int) and isinstance(div, int):
        return -(-x // div)
    raise RuntimeError("kit.cdiv takes ints on the host")


_host_cdiv.__kit_builtin__ = "cdiv"
_host_cdiv.__name__ = "cdiv"
_host_cdiv.__doc__ = cdiv.__doc__
cdiv = BUILTINS["cdiv"] = _host_cdiv


def next_power_of_2(n: int) -> int:
    """Host helper: the smallest power of two >= n."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


@builtin
def cast(x, dtype):
    """Convert to `dtype` (same as `x.to(dtype)`)."""


@builtin
def expand_dims(x, axis):
    """Insert a dim of size 1 (same as `x[None, :]` / `x[:, None]`)."""


@builtin
def broadcast_to(x, shape):
    """Broadcast to `shape`."""


@builtin
def static_assert(cond, msg=""):
    """A compile-time assertion on constexpr values."""


# ------------------------------------------------------------------ level 2: Hopper tiles
@builtin
def shared(shape, dtype):
    """A tile in shared memory; a leading dim makes pipeline stages (`a[s]` is stage s). The
    swizzle is chosen from the row width, the same for the TMA box and the WGMMA descriptor."""


@builtin
def mbarriers(count, arrivals=1):
    """`count` mbarriers in shared memory, each completing a phase after `arrivals` arrivals
    (and the bytes that TMA copies announced)."""


@builtin
def mbarrier_arrive(barrier):
    """Arrive on `barrier`, once per warpgroup that runs this (its first thread arrives):
    a consumer warpgroup tells the producer a stage is free."""


@builtin
def warpgroup_id():
    """Which warpgroup (4 warps) this thread belongs to. `if kit.warpgroup_id() == 0:` splits
    the CTA into roles (a producer and consumers); tiles inside a role are spread over that
    role's warps only, and kit.barrier() syncs that role."""


@builtin
def setmaxnreg(count):
    """Set this warpgroup's register budget (setmaxnreg): a producer gives registers up
    (e.g. 40), consumers take them (e.g. 232)."""


@builtin
def tma_load(dst, tensor, coords, barrier):
    """Copy the box of the 2-d `tensor` argument at `coords` (row, col) into shared tile `dst`
    with the Tensor Memory Accelerator, completing on `barrier`. Out-of-range parts of the
    box read as zero. One thread issues it; loads on the same barrier in a row share one
    arrival with their total byte count."""


@builtin
def mbarrier_wait(barrier, phase):
    """Wait until `barrier` completes phase `phase` (0 or 1, alternating)."""


@builtin
def mma(a, b, acc, pending=0):
    """acc + a @ b on Hopper's warpgroup tensor cores (WGMMA), a and b in shared memory, acc in
    registers. Returns with at most `pending` MMA groups still running: reading the result
    before they finish is safe (the compiler waits), and `pending=1` overlaps the MMA with the
    next loads."""


@builtin
def tma_store(tensor, coords, value):
    """Store register tile `value` into the box of the 2-d `tensor` argument at `coords`
    through shared memory and the Tensor Memory Accelerator: the registers go to a swizzled
    staging tile, one thread issues the bulk copy, and the kernel goes on while it drains.
    Parts of the box outside the tensor are not written."""


@builtin
def barrier():
    """Synchronize the threads of the CTA (bar.sync)."""


range = range  # noqa: A001 - Triton spells a runtime loop `tl.range`; Python's works as well

__all__ = [
    "constexpr", "static_range", "range", "next_power_of_2", "builtin", "BUILTINS", "dtype",
    "pointer_type",
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "int1", "bool_",
    *BUILTINS,
]

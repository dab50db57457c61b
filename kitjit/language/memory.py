"""Loads and stores through tiles of pointers."""

from __future__ import annotations

from .base import builtin


@builtin
def load(pointer, mask=None, other=None, boundary_check=(), padding_option="",
         cache_modifier="", eviction_policy="", volatile=False):
    """Load a tile through a tile of pointers; masked-off lanes read `other` (0 if None).
    Through a block pointer (kit.make_block_ptr): the block, elements outside the tensor on
    the dims of `boundary_check` read 0 (padding_option "zero" or "") or NaN ("nan"); on
    other dims they are undefined in Triton and read unmasked in kitjit (the interpreter
    raises OutOfBoundsError). Triton's signature: the cache hints are accepted and do not
    change the code yet.

    Level 2: `kit.load(a[s])` of a shared tile (kit.shared, a stage, or its `.T`) reads it
    into a register tile. Writes by other threads (kit.store) need a kit.barrier() first;
    TMA copies, a kit.mbarrier_wait on their barrier."""


@builtin
def store(pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""):
    """Store a tile through a tile of pointers; masked-off lanes are not written. Through a
    block pointer: elements outside the tensor on the dims of `boundary_check` are not
    written (others are written unmasked, undefined in Triton). The value and the mask
    broadcast to the pointers' shape (never the other way, as in Triton).

    Level 2: `kit.store(a[s], x)` writes register tile x (converted to the tile's dtype)
    into a shared tile (kit.shared, a stage, or its `.T` view, which stores x transposed), in
    the swizzled layout TMA and WGMMA read. It fences the write for them (fence.proxy.async):
    after a kit.barrier() of the role (or an mbarrier arrive/wait), a kit.mma or a TMA store
    may read the tile. This is how a register result becomes an MMA operand that a register
    A fragment cannot be (another warpgroup's rows, a transposed operand)."""


@builtin
def make_block_ptr(base, shape, strides, offsets, block_shape, order):
    """A pointer to the `block_shape` block at `offsets` of the tensor at `base` with `shape`
    and `strides` (in elements). kit.load/kit.store take it; kit.advance moves it. It lowers
    to a tile of pointers plus masks (no TMA); `order` is accepted and does not change the
    access (kitjit's layouts pick the vector direction from the strides)."""


@builtin
def advance(base, offsets):
    """The block pointer `base` moved by `offsets` (one per dim, in elements)."""


@builtin
def make_tensor_descriptor(base, shape, strides, block_shape, padding_option="zero"):
    """A descriptor of the row-major tensor at `base` (last stride 1): `desc.load(offsets)`
    reads the `block_shape` block at `offsets` (outside the tensor: 0), `desc.store(offsets,
    value)` writes it (outside: dropped). On sm_90a, 2-d descriptors whose blocks TMA can
    copy (rows of 16 bytes or more, at most 256 per dim, last stride the literal 1) go
    through TMA: the kernel builds the CUtensorMap in its program's 128-byte slot of a
    global scratch that each launch allocates (`kit.set_allocator`'s function, as Triton's;
    without one, a torch tensor on the device). As in Triton, `base` and the row stride
    must then be multiples of 16 bytes: the GPU traps otherwise (a dead CUDA context), and
    the interpreter stops at the call with that rule for the same descriptors.
    Other descriptors, other targets and the interpreter use masked pointer loads and
    stores, with the same results."""


# ----------------------------------------------------------------------------- atomics
# Each returns the values memory held before (masked-off lanes: 0). `sem` is the memory
# order ("acq_rel" by default, "acquire", "release", "relaxed"), `scope` who it orders against
# ("gpu" by default, "cta", "sys"). Lanes of one tile that hit the same address all apply,
# in row-major lane order in the interpreter (the GPU picks some order).

@builtin
def atomic_add(pointer, val, mask=None, sem=None, scope=None):
    """`*pointer += val` atomically; fp16, bf16, fp32, fp64, int32, uint32, int64, uint64.
    fp32 adds flush subnormal inputs and results to zero (PTX `atom.add.f32`); fp16/bf16
    adds do not (`.noftz`)."""


@builtin
def atomic_max(pointer, val, mask=None, sem=None, scope=None):
    """`*pointer = max(*pointer, val)` atomically; 32/64-bit ints and fp32/fp64. Floats use
    Triton's integer trick: a value with a clear sign bit is a signed max on the bits, one
    with the sign bit set an unsigned min; so -0.0 < +0.0, a +NaN wins and a -NaN loses."""


@builtin
def atomic_min(pointer, val, mask=None, sem=None, scope=None):
    """`*pointer = min(*pointer, val)` atomically; as atomic_max (a -NaN wins, a +NaN
    loses)."""


@builtin
def atomic_and(pointer, val, mask=None, sem=None, scope=None):
    """`*pointer &= val` atomically; 32/64-bit ints."""


@builtin
def atomic_or(pointer, val, mask=None, sem=None, scope=None):
    """`*pointer |= val` atomically; 32/64-bit ints."""


@builtin
def atomic_xor(pointer, val, mask=None, sem=None, scope=None):
    """`*pointer ^= val` atomically; 32/64-bit ints."""


@builtin
def atomic_xchg(pointer, val, mask=None, sem=None, scope=None):
    """`*pointer = val` atomically, returning the old value; 32/64-bit ints and floats."""


@builtin
def atomic_cas(pointer, cmp, val, sem=None, scope=None):
    """Where `*pointer == cmp` (bitwise), `*pointer = val`; returns the old value either way.
    32/64-bit ints and floats. In the interpreter, which runs programs one at a time, a
    compare-and-swap that keeps failing with nothing else written in between (a spin on a
    lock that only a later program could release) raises DeadlockError."""

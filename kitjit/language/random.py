"""Counter-based random numbers: Philox-4x32-10 (and 4x64 for 64-bit offsets), the same
streams as Triton's `triton.language.random`, so a seeded kernel (a dropout mask) draws the
same numbers under kitjit as under Triton, on the GPU and in the interpreter alike.

Each function is a `@kit.jit` function built on uint32/uint64 arithmetic (which wraps) and
`kit.umulhi`; nothing here is a new op. `seed` is a scalar (an int argument or a constexpr);
it goes to uint64 first (a negative int32 seed sign-extends, as Triton's `seed.to(uint64)`),
and for 32-bit counters its low and high words are the two Philox keys. `offset` is a tile
of int32/uint32 (Philox-4x32) or int64/uint64 (Philox-4x64, the 64-bit seed is the first key).
"""

from __future__ import annotations

from ..ir.types import int32, int64, uint32, uint64
from ..jit import jit
from . import core  # noqa: F401  (kit.full, kit.where, ... are registered)
from .base import BUILTINS as _B
from .base import constexpr, static_range

N_ROUNDS_DEFAULT = 10  # Philox-4x32-10

# Philox's constants (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
# the Weyl increments of the keys (golden ratio, sqrt(3) - 1) and the round multipliers.
PHILOX_KEY_A_32 = 0x9E3779B9
PHILOX_KEY_B_32 = 0xBB67AE85
PHILOX_ROUND_A_32 = 0xD2511F53
PHILOX_ROUND_B_32 = 0xCD9E8D57
PHILOX_KEY_A_64 = 0x9E3779B97F4A7C15
PHILOX_KEY_B_64 = 0xBB67AE8584CAA73B
PHILOX_ROUND_A_64 = 0xD2E7470EE14C6C93
PHILOX_ROUND_B_64 = 0xCA5A826395121157

_full, _where, _umulhi = _B["full"], _B["where"], _B["umulhi"]
_maximum, _sqrt, _log, _cos, _sin = (_B[n] for n in ("maximum", "sqrt", "log", "cos", "sin"))
_u32, _u64, _i32, _i64 = uint32, uint64, int32, int64


@jit
def philox_impl(c0, c1, c2, c3, k0, k1, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """`n_rounds` Philox rounds on the counter (c0, c1, c2, c3) with key (k0, k1); all uint32
    (Philox-4x32) or all uint64 (Philox-4x64)."""
    if c0.dtype == _u32:
        KEY_A = PHILOX_KEY_A_32
        KEY_B = PHILOX_KEY_B_32
        ROUND_A = PHILOX_ROUND_A_32
        ROUND_B = PHILOX_ROUND_B_32
    else:
        KEY_A = PHILOX_KEY_A_64
        KEY_B = PHILOX_KEY_B_64
        ROUND_A = PHILOX_ROUND_A_64
        ROUND_B = PHILOX_ROUND_B_64
    for _ in static_range(n_rounds):
        _c0 = c0
        _c2 = c2
        c0 = _umulhi(ROUND_B, _c2) ^ c1 ^ k0
        c2 = _umulhi(ROUND_A, _c0) ^ c3 ^ k1
        c1 = _c2 * ROUND_B
        c3 = _c0 * ROUND_A
        k0 = k0 + KEY_A
        k1 = k1 + KEY_B
    return c0, c1, c2, c3


@jit
def philox(seed, c0, c1, c2, c3, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """Philox of counter (c0..c3) under `seed`: 32-bit counters take the seed's low and high
    words as the key, 64-bit counters the seed and 0."""
    seed = _full((), seed, _u64)
    if c0.dtype.bits == 32:
        k0 = (seed & 0xFFFFFFFF).to(_u32)
        k1 = ((seed >> 32) & 0xFFFFFFFF).to(_u32)
        return philox_impl(c0.to(_u32), c1.to(_u32), c2.to(_u32), c3.to(_u32), k0, k1,
                           n_rounds)
    else:
        k1 = _full((), 0, _u64)
        return philox_impl(c0.to(_u64), c1.to(_u64), c2.to(_u64), c3.to(_u64), seed, k1,
                           n_rounds)


@jit
def randint4x(seed, offset, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """Four tiles of random uint32 (uint64 for 64-bit offsets) for `offset`: Philox of the
    counter (offset, 0, 0, 0)."""
    _0 = offset * 0
    return philox(seed, offset, _0, _0, _0, n_rounds)


@jit
def randint(seed, offset, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """One tile of random uint32 for `offset` (the first of `randint4x`'s four)."""
    ret, _, _, _ = randint4x(seed, offset, n_rounds)
    return ret


@jit
def uint_to_uniform_float(x):
    """Random 32/64-bit ints -> fp32 uniform in [0, 1): the bits as a signed int, folded to
    non-negative (x < 0 -> -x - 1), times the largest scale that keeps the maximum below 1."""
    if x.dtype.bits == 32:
        x = x.to(_i32)
        scale = 4.6566127342e-10
    else:
        x = x.to(_i64)
        scale = 1.0842020432385337e-19
    x = _where(x < 0, -x - 1, x)
    return x * scale


@jit
def rand(seed, offset, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """A tile of fp32 uniform in [0, 1) for `offset`."""
    source = randint(seed, offset, n_rounds)
    return uint_to_uniform_float(source)


@jit
def rand4x(seed, offsets, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """Four tiles of fp32 uniform in [0, 1) for `offsets`."""
    i1, i2, i3, i4 = randint4x(seed, offsets, n_rounds)
    u1 = uint_to_uniform_float(i1)
    u2 = uint_to_uniform_float(i2)
    u3 = uint_to_uniform_float(i3)
    u4 = uint_to_uniform_float(i4)
    return u1, u2, u3, u4


@jit
def pair_uniform_to_normal(u1, u2):
    """Box-Muller: two uniforms -> two independent standard normals (u1 clamped to 1e-7)."""
    u1 = _maximum(1.0e-7, u1)
    th = 6.283185307179586 * u2
    r = _sqrt(-2.0 * _log(u1))
    return r * _cos(th), r * _sin(th)


@jit
def randn(seed, offset, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """A tile of fp32 standard normals for `offset` (Box-Muller of randint4x's first two).
    The GPU's log/sin/cos are libdevice's (1-2 ulp) and its sqrt is correctly rounded, so
    the values agree with the interpreter's to a few ulp, not bit for bit."""
    i1, i2, _, _ = randint4x(seed, offset, n_rounds)
    u1 = uint_to_uniform_float(i1)
    u2 = uint_to_uniform_float(i2)
    n1, _ = pair_uniform_to_normal(u1, u2)
    return n1


@jit
def randn4x(seed, offset, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """Four tiles of fp32 standard normals for `offset`."""
    u1, u2, u3, u4 = rand4x(seed, offset, n_rounds)
    n1, n2 = pair_uniform_to_normal(u1, u2)
    n3, n4 = pair_uniform_to_normal(u3, u4)
    return n1, n2, n3, n4


RANDOM = ["philox_impl", "philox", "randint", "randint4x", "uint_to_uniform_float", "rand",
          "rand4x", "pair_uniform_to_normal", "randn", "randn4x"]

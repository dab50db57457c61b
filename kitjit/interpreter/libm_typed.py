"""numpy semantics of libdevice's integer, conversion and bit functions (kitjit/ir/libm_typed.py).

All but rcp64h are exact on the GPU, and these give the same bits: integer functions as
their PTX instructions define them (clz, popc, brev, prmt, mul.hi, sad, ...), conversions
rounded exactly in their mode (libm_round.py), saturating to the destination's range with
NaN -> 0 as cvt does. rcp64h is rcp.approx.ftz.f64 (relative error ~2**-19 on the GPU;
here 1/x with its flush of subnormal inputs and results).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kitjit.ir.libm_typed import CONVERSIONS

from .libm_round import double_to_float, float_to_int, int_to_float

_U = {32: np.uint32, 64: np.uint64}
_I = {32: np.int32, 64: np.int64}


def _bits(x, width: int):
    return np.asarray(x).astype(_I[width]).view(_U[width]) if np.asarray(x).dtype.kind == "i" \
        else np.asarray(x).astype(_U[width])


def _bitlen(u, width: int):
    """The bit length of unsigned values (0 for 0), exactly."""
    u = np.asarray(u).astype(np.uint64)
    if width == 32:
        return np.frexp(u.astype(np.float64))[1].astype(np.int32)
    hi = (u >> np.uint64(32)).astype(np.float64)
    lo = (u & np.uint64(0xFFFFFFFF)).astype(np.float64)
    return np.where(hi > 0, 32 + np.frexp(hi)[1], np.frexp(lo)[1]).astype(np.int32)


def _brev(u, width: int):
    u = np.ascontiguousarray(u, _U[width])
    b = np.unpackbits(u.view(np.uint8).reshape(u.shape + (width // 8,)), axis=-1,
                      bitorder="little")
    return np.packbits(b[..., ::-1], axis=-1, bitorder="little").view(_U[width]).reshape(
        u.shape)


def _mulhi(signed: bool, width: int) -> Callable:
    if width == 32:
        def f32(a, b):
            t = np.int64 if signed else np.uint64
            p = np.asarray(a).astype(t) * np.asarray(b).astype(t)
            return (p >> t(32)).astype(_I[32] if signed else _U[32])
        return f32

    def f64(a, b):
        ua, ub = _bits(a, 64), _bits(b, 64)
        m = np.uint64(0xFFFFFFFF)
        a0, a1, b0, b1 = ua & m, ua >> np.uint64(32), ub & m, ub >> np.uint64(32)
        with np.errstate(over="ignore"):
            t = a1 * b0 + ((a0 * b0) >> np.uint64(32))
            w1 = (t & m) + a0 * b1
            hi = a1 * b1 + (t >> np.uint64(32)) + (w1 >> np.uint64(32))
            if signed:  # the signed high word from the unsigned one
                hi = hi - np.where(np.asarray(a) < 0, ub, 0).astype(np.uint64) - \
                    np.where(np.asarray(b) < 0, ua, 0).astype(np.uint64)
        return hi.view(np.int64) if signed else hi
    return f64


def _mul24(signed: bool) -> Callable:
    def f(a, b):
        ua, ub = (_bits(v, 32).astype(np.int64) & 0xFFFFFF for v in (a, b))
        if signed:
            ua, ub = (np.where(v >= 0x800000, v - 0x1000000, v) for v in (ua, ub))
        return (ua * ub).astype(np.int64).astype(np.uint64).astype(np.uint32).view(
            np.int32 if signed else np.uint32)
    return f


def _sad(signed: bool) -> Callable:
    def f(a, b, c):
        t = np.int64 if signed else np.uint64
        a, b = np.asarray(a).astype(t), np.asarray(b).astype(t)
        d = np.where(a < b, b - a, a - b).astype(np.uint64)
        r = (d + _bits(c, 32).astype(np.uint64)) & np.uint64(0xFFFFFFFF)
        return r.astype(np.uint32).view(np.int32 if signed else np.uint32)
    return f


def _halfadd(signed: bool, rounded: bool) -> Callable:
    def f(a, b):
        s = np.asarray(a).astype(np.int64) + np.asarray(b).astype(np.int64) + int(rounded)
        return (s >> 1).astype(np.int32 if signed else np.uint32)
    return f


def _byte_perm(a, b, s):
    a, b, s = (_bits(v, 32).astype(np.uint64) for v in (a, b, s))
    src = a | (b << np.uint64(32))
    out = np.zeros(np.broadcast(a, b, s).shape, np.uint64)
    for i in range(4):
        sel = (s >> np.uint64(4 * i)) & np.uint64(7)
        byte = (src >> (sel * np.uint64(8))) & np.uint64(0xFF)
        out |= byte << np.uint64(8 * i)
    return out.astype(np.uint32).view(np.int32)


def _ilogb(f32: bool) -> Callable:
    imin, imax = np.int32(-(2 ** 31)), np.int32(2 ** 31 - 1)

    def f(x):
        x = np.asarray(x, np.float32 if f32 else np.float64)
        e = np.frexp(x)[1].astype(np.int32) - 1
        return np.where(np.isnan(x) | (x == 0), imin, np.where(np.isinf(x), imax, e)).astype(
            np.int32)
    return f


def _llround(x):
    x = np.asarray(x, np.float64)
    t = np.trunc(x)
    with np.errstate(invalid="ignore"):
        r = np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)
    return float_to_int("rz", "i64", "i64", "fp64")(r)


def _rcp64h(x):
    x = np.asarray(x, np.float64)
    tiny = np.finfo(np.float64).tiny
    x = np.where(np.abs(x) < tiny, np.copysign(0.0, x), x)  # .ftz: subnormal inputs are 0
    with np.errstate(divide="ignore"):
        r = 1.0 / x
    return np.where(np.abs(r) < tiny, np.copysign(0.0, r), r)


def typed_fn(fn: str, args: tuple[str, ...], ret: str) -> Callable:
    """The numpy function of libdevice's `fn` for operand dtype names `args`."""
    if fn in CONVERSIONS:
        src, dst, mode = CONVERSIONS[fn]
        if dst in ("fp32", "fp64"):
            if src == "fp64":
                return double_to_float(mode)
            return int_to_float(mode, src, dst)
        return float_to_int(mode, dst, ret, src)
    w = 64 if args[0] in ("i64", "u64") else 32
    signed = args[0] in ("i32", "i64")
    if fn == "clz":
        return lambda x: (w - _bitlen(_bits(x, w), w)).astype(np.int32)
    if fn == "popc":
        return lambda x: np.bitwise_count(_bits(x, w)).astype(np.int32)
    if fn == "ffs":
        def ffs(x):
            u = _bits(x, w)
            with np.errstate(over="ignore"):
                low = u & (~u + _U[w](1))
            return _bitlen(low, w)
        return ffs
    if fn == "brev":
        return lambda x: _brev(_bits(x, w), w).view(_I[w])
    if fn == "byte_perm":
        return _byte_perm
    if fn == "mulhi":
        return _mulhi(signed, w)
    if fn == "mul24":
        return _mul24(signed)
    if fn == "sad":
        return _sad(signed)
    if fn in ("hadd", "rhadd"):
        return _halfadd(signed, fn == "rhadd")
    if fn == "llrint":
        return float_to_int("rn", "i64", "i64", args[0])
    if fn == "llround":
        return _llround
    if fn == "ilogb":
        return _ilogb(args[0] == "fp32")
    if fn == "hiloint2double":
        return lambda hi, lo: ((_bits(hi, 32).astype(np.uint64) << np.uint64(32)) |
                               _bits(lo, 32).astype(np.uint64)).view(np.float64)
    if fn == "double2loint":
        return lambda x: (np.asarray(x, np.float64).view(np.uint64) &
                          np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32)
    if fn == "double2hiint":
        return lambda x: (np.asarray(x, np.float64).view(np.uint64) >>
                          np.uint64(32)).astype(np.uint32).view(np.int32)
    if fn == "rcp64h":
        return _rcp64h
    raise NotImplementedError(f"libdevice.{fn} has no interpreter semantics")

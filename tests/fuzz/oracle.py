"""The oracle: a kernel's tree evaluated in float64 (`Reference`), with a running bound on
the kernel's error per element (each operation adds its rounding error in its own dtype,
and the documented error of kitjit's math) and an "unstable" mask for elements whose value
depends on a comparison or truncation closer than that bound."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import torch

from .kernel import Kernel
from .model import (
    BITS,
    FP8_MAX,
    TINY,
    UNIT,
    Node,
    as_u64,
    irange,
    is_float,
    is_fp8,
    is_unsigned,
    meet,
    round_to,
    wrap,
)


class Val:
    """A float64 reference value, a bound on the kernel's error, and where the kernel's
    result may differ by more (a comparison or a truncation within the error)."""

    __slots__ = ("v", "e", "u")

    def __init__(self, v, e=0.0, u=False):
        self.v, self.e, self.u = np.asarray(v, np.float64), np.asarray(e, np.float64), \
            np.asarray(u, bool)

    def shaped(self, shape) -> Val:
        return Val(*(np.broadcast_to(x, shape) for x in (self.v, self.e, self.u)))


def rnd(v, dt):
    """The rounding error of a result `v` computed in `dt`."""
    if not (is_float(dt) or is_fp8(dt)):
        return 0.0
    return UNIT[dt] * np.abs(v) + TINY[dt]


def conv(x: Val, frm, to) -> Val:
    """`x` converted from dtype `frm` (None: a literal, exact) to `to`: floats round (exact
    into a wider float), ints wrap, floats to ints truncate and saturate (8-bit ints to 16
    bits, keeping the low byte), floats to fp8 round and saturate (through fp32: fp64
    rounds twice; ints go through fp32)."""
    if frm is None or frm == to:
        return x
    if is_fp8(to):
        if not (is_float(frm) or is_fp8(frm)):
            x, frm = conv(x, frm, "fp32"), "fp32"
        v = np.clip(x.v, -FP8_MAX[to], FP8_MAX[to])
        return Val(v, x.e + rnd(v, to) + (rnd(v, "fp32") if frm == "fp64" else 0.0), x.u)
    if is_fp8(frm):  # fp8 -> a wider float (or fp32 -> int, never generated): exact
        return conv(x, "fp32", to)
    if not is_float(to):
        if not is_float(frm):
            return Val(wrap(x.v, to), 0.0, x.u)
        # 8-bit ints saturate to 16 bits and keep the low byte, as Triton's GPU code
        lo, hi = (-(2 ** 15), 2 ** 15 - 1) if BITS[to] == 8 and not is_unsigned(to) else \
            (0, 2 ** 16 - 1) if BITS[to] == 8 else irange(to)
        t = np.clip(np.trunc(x.v), lo, hi)
        jump = np.clip(np.trunc(x.v - x.e), lo, hi) != np.clip(np.trunc(x.v + x.e), lo, hi)
        return Val(wrap(t, to) if BITS[to] == 8 else t, 0.0, x.u | jump)
    if is_float(frm) and (to == "fp64" or (frm, to) in (("fp16", "fp32"), ("bf16", "fp32"))):
        return x
    return Val(x.v, x.e + rnd(x.v, to), x.u)


def iarith(sym: str, a, b, dt: str):
    """a sym b on ints of dtype `dt`, wrapping (uint64 arithmetic wraps mod 2**64)."""
    x, y = as_u64(a), as_u64(b)
    with np.errstate(over="ignore"):
        r = x + y if sym == "+" else x - y if sym == "-" else x * y
    return wrap(r, dt).reshape(np.broadcast_shapes(np.shape(a), np.shape(b)))


_CMP = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
        "==": np.equal, "!=": np.not_equal}


def loop_values(form: str, iters: int) -> list[int]:
    return {"range": range(iters), "while": range(iters), "while-and": range(iters),
            "range1": range(1, iters + 1),
            "step2": range(0, 2 * iters, 2), "static": range(3),
            "reverse": range(iters - 1, -1, -1)}[form]


class Reference:
    """Evaluates a kernel's tree for one program; `side`: the Acc / Cnt contents (`Val`s of
    whole tensors, updated by the atomics as the programs run one after another)."""

    def __init__(self, k: Kernel, env: dict, side: dict):
        self.k = k
        self.env = env
        self.side = side

    def ev(self, n: Node) -> Val:
        if n.op == "var":
            return self.env[n.a["name"]]
        if n.op == "lit":
            return Val(float(n.a["value"]))
        return getattr(self, "e_" + n.op)(n).shaped(n.shape)

    def arg(self, n: Node, dt: str) -> Val:
        if n.is_lit:  # a constant of dtype `dt` (rounded or wrapped once, at compile time)
            return Val(round_to(n.a["value"], dt))
        return conv(self.ev(n), n.dtype, dt)

    def e_bin(self, n):
        dt = n.dtype
        a, b = (self.arg(x, dt) for x in n.kids)
        sym = n.a["sym"]
        if not is_float(dt):
            return Val(iarith(sym, a.v, b.v, dt), 0.0, a.u | b.u)
        if sym == "*":
            v = a.v * b.v
            e = np.abs(a.v) * b.e + np.abs(b.v) * a.e + a.e * b.e
        else:
            v = a.v + b.v if sym == "+" else a.v - b.v
            e = a.e + b.e
        return Val(v, e + rnd(v, dt), a.u | b.u)

    def e_div(self, n):
        dt, num, den = n.dtype, n.a["num"], n.a["den"]
        a = conv(self.arg(n.kids[0], num), num, dt)
        b = self.arg(n.kids[1], den)
        s = np.abs(b.v) + 1.0
        d = conv(Val(s, b.e + 2 * rnd(s, den), b.u), den, dt)
        v = a.v / d.v
        e = (a.e + np.abs(v) * d.e) / np.maximum(d.v - d.e, 1e-300) + 2 * rnd(v, dt)
        return Val(v, e, a.u | d.u)

    def e_minmax(self, n):
        a, b = (self.arg(x, n.dtype) for x in n.kids)
        f = np.minimum if n.a["fn"] == "minimum" else np.maximum
        return Val(f(a.v, b.v), np.maximum(a.e, b.e), a.u | b.u)

    def e_clamp(self, n):
        a = self.ev(n.kids[0])
        c = n.a["c"]
        return Val(np.clip(a.v, -c, c), a.e, a.u)

    def e_where(self, n):
        x, y = (self.arg(k, n.dtype) for k in n.kids[:2])
        cond, unstable = None, False
        if n.a.get("scond"):
            k = self.k
            cond = bool(eval(n.a["scond"], {}, {"flag": k.flag, "alpha": k.alpha,
                                                "n_extra": k.n_extra}))
        for j, sym in enumerate(n.a["cmps"]):
            ca, cb = n.kids[2 + 2 * j], n.kids[3 + 2 * j]
            dt = meet(ca, cb)
            a, b = self.arg(ca, dt), self.arg(cb, dt)
            slack = a.e + b.e
            unstable = unstable | a.u | b.u | ((np.abs(a.v - b.v) <= slack) & (slack > 0))
            c = _CMP[sym](a.v, b.v)
            cond = c if cond is None else (cond & c if n.a["join"] == "&" else cond | c)
        return Val(np.where(cond, x.v, y.v), np.where(cond, x.e, y.e),
                   unstable | np.where(cond, x.u, y.u))

    def e_unary(self, n):
        fn, md = n.a["fn"], n.dtype
        a = self.ev(n.kids[0])
        if fn == "abs":
            v = np.abs(a.v)
            return Val(v if is_float(n.dtype) else wrap(v, n.dtype), a.e, a.u)
        if fn == "neg":
            return Val(-a.v if is_float(n.dtype) else wrap(-a.v, n.dtype), a.e, a.u)
        a = conv(a, n.kids[0].dtype, md)
        if fn in ("exp", "exp2"):
            m = np.minimum(a.v, 3.0 if fn == "exp" else 4.0)
            r = np.exp(m) if fn == "exp" else np.exp2(m)
            with np.errstate(over="ignore"):
                grow = np.expm1(a.e) if fn == "exp" else np.expm1(a.e * math.log(2))
            # exp: ex2.approx of x * log2(e) rounded in fp32 (kit.exp): 2 + |x| ulp
            ulps = 2 + np.abs(m) if fn == "exp" else 2
            return Val(r, r * grow + 2 * ulps * rnd(r, md), a.u)
        if fn in ("log", "log2", "sqrt"):
            s = np.abs(a.v) + 1.0
            es = a.e + rnd(s, md)
            low = np.maximum(s - es, 1e-300)
            if fn == "sqrt":
                r = np.sqrt(s)
                return Val(r, es / (2 * np.sqrt(low)) + 2 * rnd(r, md), a.u)
            r = np.log(s) if fn == "log" else np.log2(s)
            scale = 1.0 if fn == "log" else 1 / math.log(2)
            return Val(r, scale * es / low + 4 * rnd(r, md), a.u)
        if fn == "sigmoid":
            r = 1 / (1 + np.exp(-a.v))
            return Val(r, a.e / 4 + 4 * UNIT[md] + rnd(r, md), a.u)
        r = np.sin(a.v) if fn == "sin" else np.cos(a.v)
        # libdevice's sinf / cosf (kit.sin): 2 ulp at any argument
        return Val(r, a.e + 5 * rnd(r, md), a.u)

    def e_cast(self, n):
        return conv(self.ev(n.kids[0]), n.kids[0].dtype, n.dtype)

    def e_reduce(self, n):
        x = n.kids[0]
        a = self.ev(x).shaped(x.shape)
        fn, axis = n.a["fn"], n.a["axis"]
        kw = {"axis": axis, "keepdims": True}
        u = a.u.any(**kw)
        if fn == "sum":
            v = a.v.sum(**kw)
            e = a.e.sum(**kw)
            if is_float(x.dtype):
                e = e + x.shape[axis] * UNIT[n.dtype] * np.abs(a.v).sum(**kw) + TINY[n.dtype]
            r = Val(v, e, u)
        elif fn in ("max", "min"):
            v = a.v.max(**kw) if fn == "max" else a.v.min(**kw)
            r = Val(v, a.e.max(**kw), u)
        else:
            v = a.v if fn == "argmax" else -a.v
            idx = np.argmax(v, **kw)
            best = np.take_along_axis(v, idx, axis)
            ebest = np.take_along_axis(a.e, idx, axis)
            near = (best - v) <= (a.e + ebest)
            tied = near.sum(**kw) > 1
            fuzzy = (np.where(near, a.e, 0.0).max(**kw) + ebest) > 0
            r = Val(idx.astype(np.float64), 0.0, u | (tied & fuzzy))
        r = r.shaped(r.v.shape)
        return Val(r.v.reshape(n.shape), r.e.reshape(n.shape), r.u.reshape(n.shape))

    def e_loop(self, n):
        c = n.kids[0]
        kind = n.a["kind"]
        acc = Val(np.full(n.shape, 0.0 if kind == "sum" else -1024.0))
        for i in loop_values(n.a["form"], self.k.iters):
            self.env[n.a["i"].a["name"]] = Val(float(i))
            x = self.ev(c)
            if kind == "sum":
                t = Val(x.v * i, x.e * abs(i), x.u)
                t = conv(Val(t.v, t.e + rnd(t.v, c.dtype), t.u), c.dtype, "fp32")
                v = acc.v + t.v
                acc = Val(v, acc.e + t.e + rnd(v, "fp32"), acc.u | t.u)
            else:
                t = Val(x.v - i, x.e, x.u)
                t = conv(Val(t.v, t.e + rnd(t.v, c.dtype), t.u), c.dtype, "fp32")
                acc = Val(np.maximum(acc.v, t.v), np.maximum(acc.e, t.e), acc.u | t.u)
        return acc

    def e_if(self, n):
        names = {"flag": self.k.flag, "n_extra": self.k.n_extra}
        names.update({k: int(v.v) for k, v in self.env.items() if re.fullmatch(r"i\d+", k)})
        taken = eval(n.a["cond"], {}, names)
        k = n.kids[0] if taken else n.kids[1]
        return self.arg(k, "fp32")

    def e_scan(self, n):
        x = n.kids[0]
        a = self.ev(x).shaped(x.shape)
        axis, dt = n.a["axis"], n.dtype
        a = conv(a, x.dtype, dt).shaped(x.shape)
        f = (lambda z: np.flip(z, axis)) if n.a["rev"] else (lambda z: z)
        cnt = np.cumsum(np.ones_like(a.v), axis)
        u = np.broadcast_to(a.u.any(axis=axis, keepdims=True), a.u.shape)
        e = f(np.cumsum(f(a.e), axis))
        if n.a["fn"] == "cumsum":
            v = f(np.cumsum(f(a.v), axis))
            e = e + f(cnt) * (UNIT[dt] * f(np.cumsum(f(np.abs(a.v)), axis)) + TINY[dt])
            v = v if is_float(dt) else wrap(v, dt)
        else:  # |x| <= 1: a change of one factor moves the product by at most that change
            v = f(np.cumprod(f(a.v), axis))
            e = e + f(cnt) * (UNIT[dt] + TINY[dt])
        return Val(v, e, u)

    def e_shape(self, n):
        a = self.ev(n.kids[0]).shaped(n.shape)
        form, full = n.a["form"], n.a["full"]

        def f(z):
            if form == "flip":
                return np.flip(z, n.a["dim"])
            if form in ("trans", "permute"):
                return z.reshape(full[1], full[0]).T
            if form == "ravel":
                return z.reshape(-1)[::-1].reshape(full)
            return z.reshape(2, full[0] // 2).T.reshape(full)
        return Val(f(a.v), f(a.e), f(a.u))

    def e_join(self, n):
        vals = [self.arg(k, n.dtype) for k in n.kids]  # both run (an atomic may be in either)
        return vals[n.a["which"]]

    def e_libm(self, n):
        md, fn = n.dtype, n.a["fn"]
        a = self.arg(n.kids[0], md)
        if fn == "fma":
            b, c = (self.arg(k, md) for k in n.kids[1:])
            v = a.v * b.v + c.v
            e = np.abs(a.v) * b.e + np.abs(b.v) * a.e + a.e * b.e + c.e
            return Val(v, e + rnd(v, md), a.u | b.u | c.u)
        if fn == "tanh":
            v = np.tanh(a.v)
            return Val(v, a.e + 4 * rnd(v, md) + 2 * UNIT[md], a.u)
        if fn == "erf":
            v = np.vectorize(math.erf, otypes=[np.float64])(a.v)
            return Val(v, 1.2 * a.e + 4 * rnd(v, md) + 2 * UNIT[md], a.u)
        s = np.abs(a.v)
        v = np.log1p(s)
        return Val(v, a.e / (1 + np.maximum(s - a.e, 0)) + 4 * rnd(v, md) + TINY[md], a.u)

    def e_ihash(self, n):
        a = self.arg(n.kids[0], n.dtype)
        m = iarith("*", a.v, round_to(n.a["m"], n.dtype), n.dtype)
        return Val(iarith("+", m, n.a["k"], n.dtype), 0.0, a.u)

    def e_idiv(self, n):
        dt = n.dtype
        a = self.arg(n.kids[0], dt)
        b = self.ev(n.kids[1])
        bi = np.asarray(b.v).astype(np.int64)
        d = conv(Val((bi & 7) + 1.0), n.kids[1].dtype, dt)
        q = np.trunc(a.v / d.v)
        v = q if n.a["sym"] == "//" else a.v - q * d.v
        return Val(wrap(v, dt), 0.0, a.u | b.u)

    def e_umulhi(self, n):
        a, b = (self.arg(k, n.dtype) for k in n.kids)
        shape = np.broadcast_shapes(np.shape(a.v), np.shape(b.v))
        if n.dtype == "i64":  # the 128-bit product, in Python ints (the bits read unsigned)
            def hi(x, y):
                return ((int(x) % 2 ** 64) * (int(y) % 2 ** 64) >> 64) % 2 ** 64
            big = np.frompyfunc(hi, 2, 1)(*np.broadcast_arrays(a.v, b.v))
            v = np.array([x - 2 ** 64 if x >= 2 ** 63 else x
                          for x in np.asarray(big, dtype=object).ravel()], np.float64)
            return Val(v.reshape(shape), 0.0, a.u | b.u)
        x, y = as_u64(wrap(a.v, "u32")), as_u64(wrap(b.v, "u32"))
        hi = (x * y) >> np.uint64(32)
        return Val(wrap(hi, n.dtype).reshape(shape), 0.0, a.u | b.u)

    def e_kclamp(self, n):
        a = self.ev(n.kids[0])
        lo, hi = round_to(n.a["lo"], n.dtype), round_to(n.a["hi"], n.dtype)
        return Val(np.clip(a.v, lo, hi), a.e, a.u)

    def e_call(self, n):
        h = next(h for h in self.k.helpers if h.name == n.a["name"])
        vals = [self.ev(x) for x in n.kids]
        saved = self.env
        self.env = {p.a["name"]: v for p, v in zip(h.params, vals)}
        try:
            if h.early is None:
                return self.ev(h.body)
            taken = eval(h.early["cond"], {}, {"s": self.k.flag})
            return self.arg(h.early["body"] if taken else h.body, h.body.dtype)
        finally:
            self.env = saved

    def e_fp8(self, n):
        x = n.kids[0]
        return conv(conv(self.ev(x), x.dtype, n.a["f8"]), n.a["f8"], n.dtype)

    def e_atomic(self, n):
        """The old values of the lanes' own Acc elements (0 where masked off); Acc updated."""
        dt, fn = n.dtype, n.a["fn"]
        idx = self.env["acc_idx"]
        live = self.env["mask"] if n.a["mask"] and fn != "cas" else np.ones(idx.shape, bool)
        acc = self.side["Acc"]
        old = Val(acc.v[idx], acc.e[idx], acc.u[idx])
        x = self.arg(n.kids[0], dt).shaped(idx.shape)
        if fn == "add":
            v = old.v + x.v if is_float(dt) else iarith("+", old.v, x.v, dt)
            # fp32 atomic adds flush subnormals to zero (PTX atom.add.f32)
            e = old.e + x.e + rnd(v, dt) + (2.0 ** -126 if dt == "fp32" else 0.0)
            new = Val(v, e, old.u | x.u)
        elif fn in ("max", "min"):
            f = np.maximum if fn == "max" else np.minimum
            new = Val(f(old.v, x.v), np.maximum(old.e, x.e), old.u | x.u)
        elif fn in ("and", "or", "xor"):
            f = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[fn]
            v = f(old.v.astype(np.int64), x.v.astype(np.int64))
            new = Val(wrap(v, dt), 0.0, old.u | x.u)
        elif fn == "xchg":
            new = x
        else:  # cas: the compare value is the lane's index % 9 - 4 (0..8 unsigned)
            cmp = idx % 9 - (0 if is_unsigned(dt) else 4)
            hit = old.v == cmp
            new = Val(np.where(hit, x.v, old.v), np.where(hit, x.e, old.e), old.u | x.u)
        for a, b in ((acc.v, new.v), (acc.e, new.e), (acc.u, new.u)):
            a[idx[live]] = np.broadcast_to(b, idx.shape)[live]
        z = ~live
        return Val(np.where(z, 0.0, old.v), np.where(z, 0.0, old.e), old.u & live)

    def e_contend(self, n):
        """x itself; every lane (where the mask lets it) applies fn to Cnt[its index % 4]."""
        dt, fn = n.dtype, n.a["fn"]
        x = self.arg(n.kids[0], dt)
        idx = self.env["out_idx"] % 4
        live = self.env["mask"] if n.a["mask"] else np.ones(idx.shape, bool)
        cnt = self.side["Cnt"]
        xs = x.shaped(idx.shape)
        for i, v, u in zip(idx[live], xs.v[live], xs.u[live]):
            c = cnt.v[i]
            if fn == "add":
                c = iarith("+", c, v, dt)
            elif fn in ("max", "min"):
                c = max(c, v) if fn == "max" else min(c, v)
            else:
                f = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[fn]
                c = wrap(f(np.int64(c), np.int64(v)), dt)
            cnt.v[i] = float(c)
            cnt.u[i] |= bool(u)
        return x


@dataclass
class Expected:
    """What a run must give: Out's (value, error bound, unstable) per element in float64,
    and the same for the atomics' Acc / Cnt (`side`, by parameter name)."""
    v: np.ndarray
    e: np.ndarray
    u: np.ndarray
    side: dict


def reference(k: Kernel, ts: list[torch.Tensor]) -> Expected:
    """Run the kernel's tree in float64, program by program, on the inputs `ts`."""
    xs = [t.double().numpy() for t in ts]
    if k.mode == "1d":
        n, B = k.sizes["n"], k.dims["BLOCK"]
        out_shape = (n,)
    else:
        M, N, BM, BN = k.sizes["M"], k.sizes["N"], k.dims["BM"], k.dims["BN"]
        out_shape = (M, N)
    V, E, U = (np.full(out_shape, np.nan), np.full(out_shape, np.nan),
               np.ones(out_shape, bool))
    side = {p: Val(t.double().numpy().copy(), np.zeros(t.shape), np.zeros(t.shape, bool))
            for p, t in k.side_tensors().items()}
    for s in side.values():  # (Val's arrays are views: make them writable copies)
        s.v, s.e, s.u = s.v.copy(), s.e.copy(), s.u.copy()
    for p in range(k.grid):
        env = {"alpha": Val(k.alpha)}
        if k.mode == "1d":
            offs = p * B + np.arange(B)
            mask = offs < n
            env["offs"] = Val(offs)
            env["acc_idx"] = env["out_idx"] = offs
            for j, (dt, _, other) in enumerate(k.inputs):
                o = other if is_float(dt) or is_fp8(dt) else int(other)
                env[f"x{j}"] = Val(np.where(mask, xs[j][np.minimum(offs, n - 1)], o))
        else:
            rm, rn = p * BM + np.arange(BM), np.arange(BN)
            cm, cn = np.minimum(rm, M - 1), np.minimum(rn, N - 1)
            mask = (rm < M)[:, None] & (rn < N)[None, :]
            env["rm[:, None]"] = Val(rm[:, None])
            env["rn[None, :]"] = Val(rn[None, :])
            env["acc_idx"] = rm[:, None] * BN + rn[None, :]
            env["out_idx"] = rm[:, None] * N + rn[None, :]
            for j, (dt, kind, other) in enumerate(k.inputs):
                o = other if is_float(dt) or is_fp8(dt) else int(other)
                if kind == "full":
                    x = np.where(mask, xs[j][np.ix_(cm, cn)], o)
                elif kind == "row":
                    x = np.where(rn < N, xs[j][cn], o)[None, :]
                else:
                    x = np.where(rm < M, xs[j][cm], o)[:, None]
                env[f"x{j}"] = Val(x)
        env["mask"] = mask
        r = Reference(k, env, side)
        root = r.ev(k.root)
        if k.early is not None and all(eval(c, {}, {"flag": k.flag, "n_extra": k.n_extra,
                                                    "alpha": k.alpha}) for c in k.early[0]):
            root, dt = r.ev(k.early[1]), k.early[1].dtype
        else:
            dt = k.root.dtype
        res = conv(root, dt, k.out_dtype).shaped(k.full)
        if k.mode == "1d":
            sel = offs[mask]
            V[sel], E[sel], U[sel] = res.v[mask], res.e[mask], res.u[mask]
        else:
            rows = rm[rm < M]
            V[rows], E[rows], U[rows] = (x[: len(rows), :N] for x in (res.v, res.e, res.u))
    return Expected(V, E, U, {p: (s.v, s.e, s.u) for p, s in side.items()})

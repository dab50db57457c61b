"""Kernels: `Emitter` turns a tree into statements, `Kernel` holds a generated kernel (its
helpers, inputs, sizes and run-time scalars) and renders its source; `kernels` is the
hypothesis strategy that draws one."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import torch
from hypothesis import strategies as st

from .gen import Gen
from .model import KIT, LIMIT, TORCH, Node, is_float, is_fp8, is_unsigned


class Emitter:
    """Statements of one function body: `(indent, text)` lines; names of values it made."""

    def __init__(self, full_text: str, names: itertools.count, cval=None, mode: str = "1d"):
        self.lines: list[tuple[int, str]] = []
        self.full_text = full_text
        self.names = names
        self.cval = cval
        # the lane's address in Acc (one per lane of the grid, all in bounds) and in Out
        self.acc_idx = "offs" if mode == "1d" else "(rm[:, None] * BN + rn[None, :])"
        self.out_idx = "offs" if mode == "1d" else "(rm[:, None] * N + rn[None, :])"
        self.calls: dict[str, int] = {}  # helper name -> index of the line calling it
        self.vars: list[tuple] = []  # top-level values: (name, dtype, shape, from index)

    def line(self, ind: int, text: str) -> int:
        self.lines.append((ind, text))
        return len(self.lines) - 1

    def fresh(self) -> str:
        return f"v{next(self.names)}"

    def ref(self, n: Node, ind: int) -> str:
        """An expression for `n` (emitting the statements it needs first)."""
        if n.op == "var":
            return n.a["name"]
        if n.op == "lit":
            v = n.a["value"]
            if self.cval is not None and v == self.cval and type(v) is type(self.cval):
                return "C"
            return f"({v!r})" if (isinstance(v, (int, float)) and v < 0) else repr(v)
        name = self.fresh()
        self.stmt(n, name, ind)
        if ind == 1:  # visible to statements inserted at this index or later
            self.vars.append((name, n.dtype, n.shape, len(self.lines)))
        return name

    def stmt(self, n: Node, name: str, ind: int) -> None:
        r = lambda k: self.ref(k, ind)  # noqa: E731
        op = n.op
        if op == "bin":
            self.line(ind, f"{name} = {r(n.kids[0])} {n.a['sym']} {r(n.kids[1])}")
        elif op == "div":
            self.line(ind, f"{name} = {r(n.kids[0])} / (kit.abs({r(n.kids[1])}) + 1.0)")
        elif op == "minmax":
            self.line(ind, f"{name} = kit.{n.a['fn']}({r(n.kids[0])}, {r(n.kids[1])})")
        elif op == "clamp":
            c = n.a["c"]  # (an int literal keeps a float tile's dtype in kit.minimum/maximum)
            c = int(c) if isinstance(c, float) and c == int(c) and abs(c) < 2 ** 31 else c
            if is_unsigned(n.dtype):
                self.line(ind, f"{name} = kit.minimum({r(n.kids[0])}, {c!r})")
            else:
                self.line(ind, f"{name} = kit.minimum(kit.maximum({r(n.kids[0])}, {-c!r}), "
                               f"{c!r})")
        elif op == "where":
            x, y = r(n.kids[0]), r(n.kids[1])
            cs = []
            for j, sym in enumerate(n.a["cmps"]):
                cs.append(f"({r(n.kids[2 + 2 * j])} {sym} {r(n.kids[3 + 2 * j])})")
            cond = f" {n.a['join']} ".join(cs) if cs else f"({n.a['scond']})"
            if not n.a["inline"]:
                c = f"c{next(self.names)}"
                self.line(ind, f"{c} = {cond}")
                cond = c
            self.line(ind, f"{name} = kit.where({cond}, {x}, {y})")
        elif op == "unary":
            a, fn = r(n.kids[0]), n.a["fn"]
            if fn == "abs":
                self.line(ind, f"{name} = kit.abs({a})")
            elif fn == "neg":
                self.line(ind, f"{name} = -{a}")
            else:
                inner = {"exp": f"kit.minimum({a}, 3)", "exp2": f"kit.minimum({a}, 4)",
                         "log": f"(kit.abs({a}) + 1.0)", "log2": f"(kit.abs({a}) + 1.0)",
                         "sqrt": f"(kit.abs({a}) + 1.0)"}.get(fn, a)
                if n.a["method"]:
                    self.line(ind, f"{name} = {inner}.{fn}()")
                else:
                    self.line(ind, f"{name} = kit.{fn}({inner})")
        elif op == "cast":
            a = r(n.kids[0])
            if n.a["style"] == "cast":
                self.line(ind, f"{name} = kit.cast({a}, {KIT[n.dtype]})")
            else:
                self.line(ind, f"{name} = {a}.to({KIT[n.dtype]})")
        elif op == "reduce":
            a = r(n.kids[0])
            fn, axis, style = n.a["fn"], n.a["axis"], n.a["style"]
            rank = len(n.kids[0].shape)
            ax = axis - rank if n.a["neg"] else axis
            if style == "method":
                e = f"{a}.{fn}(axis={ax})"
            elif style == "keep":
                e = f"kit.{fn}({a}, axis={ax}, keep_dims=True)"
            else:
                e = f"kit.{fn}({a}, axis={ax})"
            if style == "sub" or style == "method" and rank == 2:
                e += "[:, None]" if axis == 1 else "[None, :]"
            elif style == "expand":
                e = f"kit.expand_dims({e}, {axis})"
            self.line(ind, f"{name} = {e}")
        elif op == "loop":
            i, kind, form = n.a["i"].a["name"], n.a["kind"], n.a["form"]
            if kind == "sum":
                self.line(ind, f"{name} = kit.zeros({self.full_text}, kit.float32)")
            else:
                self.line(ind, f"{name} = kit.full({self.full_text}, -1024.0, kit.float32)")
            if form.startswith("while"):
                self.line(ind, f"{i} = 0")
                extra = " and n_extra < 100" if form == "while-and" else ""
                self.line(ind, f"while {i} < iters{extra}:")
            else:
                rng = {"range": "range(iters)", "range1": "range(1, iters + 1)",
                       "step2": "range(0, 2 * iters, 2)", "static": "kit.static_range(3)",
                       "reverse": "range(iters - 1, -1, -1)"}[form]
                self.line(ind, f"for {i} in {rng}:")
            c = self.ref(n.kids[0], ind + 1)
            if kind == "max":
                self.line(ind + 1, f"{name} = kit.maximum({name}, {c} - {i})")
            elif n.a["aug"]:
                self.line(ind + 1, f"{name} += {c} * {i}")
            else:
                self.line(ind + 1, f"{name} = {name} + {c} * {i}")
            if form.startswith("while"):
                self.line(ind + 1, f"{i} += 1")
        elif op == "if":
            self.line(ind, f"if {n.a['cond']}:")
            for j, k in enumerate(n.kids):
                if j == 1:
                    self.line(ind, "else:")
                v = self.ref(k, ind + 1)
                self.line(ind + 1, f"{name} = kit.broadcast_to({v}.to(kit.float32), "
                                   f"{self.full_text})")
        elif op == "scan":
            a, fn, axis = r(n.kids[0]), n.a["fn"], n.a["axis"]
            ax = axis - len(n.shape) if n.a["neg"] else axis
            rev = ", reverse=True" if n.a["rev"] else ""
            self.line(ind, f"{name} = kit.{fn}({a}, axis={ax}{rev})")
        elif op == "shape":
            a, form, full = r(n.kids[0]), n.a["form"], n.a["full"]
            if n.kids[0].shape != full:
                a = f"kit.broadcast_to({a}, {full!r})"
            if form == "flip":
                e = f"kit.flip({a}, {n.a['dim']})"
            elif form == "trans":
                e = f"kit.trans(kit.reshape({a}, ({full[1]}, {full[0]})))"
            elif form == "permute":
                e = f"kit.permute(kit.reshape({a}, ({full[1]}, {full[0]})), 1, 0)"
            elif form == "ravel":
                e = f"kit.reshape(kit.flip(kit.reshape({a}, ({full[0] * full[1]},)), 0), {full!r})"
            else:  # interleave the halves
                e = (f"kit.reshape(kit.trans(kit.reshape({a}, (2, {full[0] // 2}))), "
                     f"({full[0]},))")
            self.line(ind, f"{name} = {e}")
        elif op == "join":
            x, y = r(n.kids[0]), r(n.kids[1])
            other = f"q{next(self.names)}"
            lhs = f"{name}, {other}" if n.a["which"] == 0 else f"{other}, {name}"
            self.line(ind, f"{lhs} = kit.split(kit.join({x}, {y}))")
        elif op == "libm":
            args = [r(k) for k in n.kids]
            fn = n.a["fn"]
            if fn == "log1p":
                args = [f"kit.abs({args[0]})"]
            self.line(ind, f"{name} = kit.math.{fn}({', '.join(args)})")
        elif op == "ihash":
            self.line(ind, f"{name} = {r(n.kids[0])} * {n.a['m']} + {n.a['k']}")
        elif op == "idiv":
            self.line(ind, f"{name} = {r(n.kids[0])} {n.a['sym']} (({r(n.kids[1])} & 7) + 1)")
        elif op == "umulhi":
            self.line(ind, f"{name} = kit.umulhi({r(n.kids[0])}, {r(n.kids[1])})")
        elif op == "kclamp":
            self.line(ind, f"{name} = kit.clamp({r(n.kids[0])}, {n.a['lo']!r}, {n.a['hi']!r})")
        elif op == "fp8":
            self.line(ind, f"{name} = {r(n.kids[0])}.to({KIT[n.a['f8']]}).to({KIT[n.dtype]})")
        elif op in ("atomic", "contend"):
            v, fn = r(n.kids[0]), n.a["fn"]
            kw = "".join(f", {k}={n.a[k]!r}" for k in ("sem", "scope") if n.a[k] is not None)
            if n.a["mask"] and fn != "cas":
                kw = ", mask=mask" + kw
            if op == "contend":
                self.line(ind, f"{name} = {v}")
                self.line(ind, f"kit.atomic_{fn}(Cnt + {self.out_idx} % 4, {name}{kw})")
            elif fn == "cas":  # the compare value: -4..4 (0..8 unsigned) by the lane's index
                lo = 0 if is_unsigned(n.dtype) else 4
                cmp = f"({self.acc_idx} % 9 - {lo}).to({KIT[n.dtype]})"
                self.line(ind, f"{name} = kit.atomic_cas(Acc + {self.acc_idx}, {cmp}, {v}{kw})")
            else:
                self.line(ind, f"{name} = kit.atomic_{fn}(Acc + {self.acc_idx}, {v}{kw})")
        elif op == "call":
            args = [r(k) for k in n.kids]
            if n.a.get("early"):
                args.append("flag")
            if n.a["has_c"]:
                args.append(f"C={n.a['c']!r}" if n.a["kw"] else repr(n.a["c"]))
            self.calls[n.a["name"]] = self.line(ind, f"{name} = {n.a['name']}({', '.join(args)})")
        else:
            raise AssertionError(op)


@dataclass
class Kernel:
    mode: str                    # "1d" | "2d"
    dims: dict                   # BLOCK or BM, BN
    inputs: list                 # (dtype, kind, other) per input; kind: full | row | col
    out_dtype: str
    root: Node
    helpers: list                # (name, params, body, has_c, cval)
    num_warps: int
    sizes: dict                  # n or M, N
    alpha: float
    iters: int
    flag: int
    n_extra: int
    seed: int
    side: dict = field(default_factory=dict)   # "atomic"/"contend" -> its Node (Gen.side)
    early: tuple | None = None   # (conditions, Node): `if c1: [if c2:] store it; return`
    parts: dict = field(default_factory=dict)  # filled by build()

    @property
    def full(self) -> tuple:
        return (self.dims["BLOCK"],) if self.mode == "1d" else (self.dims["BM"], self.dims["BN"])

    @property
    def grid(self) -> int:
        if self.mode == "1d":
            return -(-self.sizes["n"] // self.dims["BLOCK"])
        return -(-self.sizes["M"] // self.dims["BM"])

    @property
    def tile_size(self) -> int:
        return math.prod(self.full)

    def params(self) -> list[str]:
        ps = [f"X{k}" for k in range(len(self.inputs))] + ["Out"]
        ps += [p for p, s in (("Acc", "atomic"), ("Cnt", "contend")) if s in self.side]
        ps += ["n"] if self.mode == "1d" else ["M", "N"]
        ps += ["alpha", "iters", "flag", "n_extra"]
        return ps

    def constexprs(self) -> dict:
        return dict(self.dims)

    # -------------------------------------------------------------- source
    def build(self) -> None:
        """The pieces of the source: helper bodies and the kernel body, as line lists."""
        names = itertools.count()
        full_text = f"({', '.join(self.dims)},)" if self.mode == "1d" else "(BM, BN)"
        helpers = []
        for h in self.helpers:
            em = Emitter(full_text, names, h.cval if h.has_c else None, self.mode)
            if h.early:
                to = f".to({KIT[h.body.dtype]})"
                em.line(1, f"if {h.early['cond']}:")
                res = em.ref(h.early["body"], 2)
                em.line(2, f"return kit.broadcast_to({res}{to}, {self.full!r})")
                res = em.ref(h.body, 1)
                em.line(1, f"return kit.broadcast_to({res}{to}, {self.full!r})")
            else:
                em.line(1, f"return {em.ref(h.body, 1)}")
            sig = ", ".join(x + ": kit.constexpr" if x == "C" else x for x in h.arg_names())
            helpers.append((h.name, sig, em))
        em = Emitter(full_text, names, mode=self.mode)
        pre = []
        if self.mode == "1d":
            pre += ["offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)",
                    "mask = offs < n"]
        else:
            pre += ["rm = kit.program_id(0) * BM + kit.arange(0, BM)",
                    "rn = kit.arange(0, BN)",
                    "mask = (rm[:, None] < M) & (rn[None, :] < N)"]
        for k, (dt, kind, other) in enumerate(self.inputs):
            o = repr(int(other)) if not (is_float(dt) or is_fp8(dt)) else repr(other)
            to = f".to({KIT[self.leaf_dtype(k)]})" if is_fp8(dt) else ""
            if self.mode == "1d":
                pre.append(f"x{k} = kit.load(X{k} + offs, mask=mask, other={o}){to}")
            elif kind == "full":
                pre.append(f"x{k} = kit.load(X{k} + rm[:, None] * N + rn[None, :], mask=mask, "
                           f"other={o}){to}")
            elif kind == "row":
                pre.append(f"x{k} = kit.load(X{k} + rn, mask=rn < N, other={o}){to}[None, :]")
            else:
                pre.append(f"x{k} = kit.load(X{k} + rm, mask=rm < M, other={o}){to}[:, None]")
        for p in pre:
            em.line(1, p)
        n_pre = len(em.lines)
        res = em.ref(self.root, 1)
        offs = "offs" if self.mode == "1d" else "rm[:, None] * N + rn[None, :]"
        if self.early is not None:
            conds, alt = self.early
            for d, c in enumerate(conds):
                em.line(1 + d, f"if {c}:")
            ind = 1 + len(conds)
            v = em.ref(alt, ind)
            em.line(ind, f"kit.store(Out + {offs}, {self.stored(v, alt.dtype)}, mask=mask)")
            em.line(ind, "return")
        shape = repr(tuple(self.root.shape))
        post = [f"kit.static_assert({res}.dtype == {KIT[self.root.dtype]}, "
                f"\"fuzz: the result's dtype\")",
                f"kit.static_assert({res}.shape == {shape}, \"fuzz: the result's shape\")"]
        post.append(f"kit.store(Out + {offs}, {self.stored(res, self.root.dtype)}, mask=mask)")
        self.parts = {"helpers": helpers, "kernel": em, "n_pre": n_pre, "post": post}

    def insertion_points(self) -> list[tuple[str, int, list]]:
        """(body, line index, values in scope there) for every place a statement can go: the
        top level of the kernel after the loads, and anywhere before a helper's return."""
        full = self.full
        pre = [(f"x{k}", self.leaf_dtype(k),
                {"full": full, "row": (1, full[-1]), "col": (full[0], 1)}[kind]
                if self.mode == "2d" else full)
               for k, (_, kind, _) in enumerate(self.inputs)]
        pre += [("alpha", "fp32", ()), ("mask", "i1", full)]
        pre += [("offs", "i32", full)] if self.mode == "1d" else \
            [("rm", "i32", full[:1]), ("rn", "i32", full[1:])]
        em = self.parts["kernel"]
        points = []
        def top(lines, idx):  # a statement at the body's top level starts at line idx
            return idx == len(lines) or lines[idx][0] == 1 and lines[idx][1] != "else:"

        for idx in range(self.parts["n_pre"], len(em.lines) + 1):
            if top(em.lines, idx):
                points.append(("kernel", idx, pre + [v[:3] for v in em.vars if v[3] <= idx]))
        for h, (_, _, hem) in zip(self.helpers, self.parts["helpers"]):
            ps = [(p.a["name"], p.dtype, p.shape) for p in h.params]
            for idx in range(len(hem.lines)):
                if top(hem.lines, idx):
                    points.append((h.name, idx, ps + [v[:3] for v in hem.vars if v[3] <= idx]))
        return points

    def leaf_dtype(self, k: int) -> str:
        """The dtype input k has in the kernel: fp8 inputs are converted as they load."""
        dt = self.inputs[k][0]
        return ("fp16", "bf16", "fp32")[k % 3] if is_fp8(dt) else dt

    def stored(self, v: str, dt: str) -> str:
        """`v` as the value of the kernel's store: explicitly converted to an fp8 output
        (from ints through fp32); other outputs convert implicitly."""
        if not is_fp8(self.out_dtype):
            return v
        via = ".to(kit.float32)" if not is_float(dt) else ""
        return f"{v}{via}.to({KIT[self.out_dtype]})"

    def render(self, extra: dict | None = None) -> tuple[str, dict]:
        """The source text, with `extra` lines inserted: {("kernel"|helper name, index): [(indent,
        text), ...]} inserts before that line of that body. Returns the text and a map
        (body, index of a body line or ("extra", key, j)) -> line number in the file."""
        extra = extra or {}
        out = ["import kitjit as kit", "", ""]
        where: dict = {}

        def body(key, lines):
            for idx in range(len(lines) + 1):
                for j, (ind, text) in enumerate(extra.get((key, idx), [])):
                    out.append("    " * ind + text)
                    where[("extra", key, idx, j)] = len(out)
                if idx < len(lines):
                    ind, text = lines[idx]
                    out.append("    " * ind + text)
                    where[(key, idx)] = len(out)

        for name, sig, em in self.parts["helpers"]:
            out += ["@kit.jit", f"def {name}({sig}):"]
            body(name, em.lines)
            out += ["", ""]
        consts = ", ".join(f"{d}: kit.constexpr" for d in self.dims)
        out += ["@kit.jit", f"def fuzz_kernel({', '.join(self.params())}, {consts}):"]
        em = self.parts["kernel"]
        body("kernel", em.lines + [(1, p) for p in self.parts["post"]])
        out.append("")
        return "\n".join(out), where

    # -------------------------------------------------------------- inputs
    def tensors(self) -> list[torch.Tensor]:
        rng = np.random.default_rng(self.seed)
        ts = []
        for dt, kind, _ in self.inputs:
            if self.mode == "1d":
                shape = (self.sizes["n"],)
            else:
                shape = {"full": (self.sizes["M"], self.sizes["N"]), "row": (self.sizes["N"],),
                         "col": (self.sizes["M"],)}[kind]
            if not (is_float(dt) or is_fp8(dt)):
                lo = 0 if is_unsigned(dt) else -8
                t = torch.from_numpy(rng.integers(lo, lo + 17, shape)).to(TORCH[dt])
            else:
                t = torch.from_numpy(rng.uniform(-2, 2, shape)).to(TORCH[dt])
            ts.append(t)
        return ts

    def side_tensors(self) -> dict:
        """Fresh Acc / Cnt for the atomics: small integer values (exact in every dtype),
        Acc one element per lane of the grid (every lane's address is in bounds)."""
        rng = np.random.default_rng(self.seed + 1)
        out = {}
        for p, s, size in (("Acc", "atomic", self.grid * self.tile_size), ("Cnt", "contend", 4)):
            if s in self.side:
                dt = self.side[s].dtype
                lo = 0 if is_unsigned(dt) or s == "contend" else -4
                out[p] = torch.from_numpy(rng.integers(lo, lo + 9, size)).to(TORCH[dt])
        return out

    def args(self, ts, out, side: dict | None = None) -> list:
        """The launch's arguments; `side`: the Acc / Cnt tensors (default: fresh ones)."""
        side = self.side_tensors() if side is None else side
        s = [self.sizes["n"]] if self.mode == "1d" else [self.sizes["M"], self.sizes["N"]]
        return [*ts, out, *side.values(), *s, self.alpha, self.iters, self.flag,
                self.n_extra]


@st.composite
def kernels(draw, depth=None) -> Kernel:
    mode = draw(st.sampled_from(["2d", "1d"]))
    if mode == "1d":
        B = draw(st.sampled_from([64, 16, 32, 128]))
        dims = {"BLOCK": B}
        sizes = {"n": 3 * B - draw(st.integers(0, 3 * B - 1))}
        full = (B,)
    else:
        BM = draw(st.sampled_from([4, 16, 1, 2, 8]))
        BN = draw(st.sampled_from([32, 4, 8, 16, 64]))
        dims = {"BM": BM, "BN": BN}
        sizes = {"M": 3 * BM - draw(st.integers(0, 3 * BM - 1)),
                 "N": BN - draw(st.integers(0, BN - 1))}
        full = (BM, BN)
    n_in = draw(st.integers(1, 3))
    inputs, leaves = [], []
    for k in range(n_in):
        dt = draw(st.sampled_from(["fp32", "fp16", "bf16", "i32", "fp32", "i8", "u8", "fp64",
                                   "i16", "i64", "u32", "f8e4", "f8e5"]))
        kind = "full" if mode == "1d" or k == 0 else draw(st.sampled_from(["full", "row",
                                                                            "col"]))
        other = draw(st.sampled_from([0.0, 1.0, 0.5, -2.0]))
        if is_unsigned(dt):
            other = abs(other)
        inputs.append((dt, kind, other))
        shape = {"full": full, "row": (1, full[-1]), "col": (full[0], 1)}[kind]
        ldt = ("fp16", "bf16", "fp32")[k % 3] if is_fp8(dt) else dt  # Kernel.leaf_dtype
        leaves.append(Node("var", ldt, shape, a={"name": f"x{k}"}, mag=8.0))
    leaves.append(Node("var", "fp32", (), a={"name": "alpha"}, mag=2.0))
    if mode == "1d":
        leaves.append(Node("var", "i32", full, a={"name": "offs"}, mag=3 * full[0]))
    else:
        leaves.append(Node("var", "i32", (full[0], 1), a={"name": "rm[:, None]"},
                           mag=3 * full[0]))
        leaves.append(Node("var", "i32", (1, full[1]), a={"name": "rn[None, :]"}, mag=full[1]))
    helpers: list = []
    gen = Gen(draw, full, leaves, helpers, itertools.count())
    d = depth if depth is not None else draw(st.sampled_from([4, 5, 3, 6, 2]))
    root = gen.tree(d, top=True)
    out_dtype = draw(st.sampled_from(["fp32", "fp32", "fp32", "fp16", "bf16", "fp64", "f8e4",
                                      "f8e5"]))
    early = None
    if draw(st.integers(0, 4)) == 0:  # an early exit that stores another value
        conds = draw(st.sampled_from([["flag > 2"], ["n_extra > 0"], ["flag == 0"],
                                      ["alpha < 0.0"], ["flag > 0", "n_extra > 0"]]))
        early = (conds, gen.in_control(lambda: gen.tree(max(1, d - 2), top=True)))
    roots = [root] + ([early[1]] if early else [])
    if out_dtype in ("fp16", "bf16") and any(r.mag > LIMIT for r in roots):
        root = gen.clamp(root, LIMIT)  # a wrapped int: no overflow
        if early:
            early = (early[0], gen.clamp(early[1], LIMIT))
    return Kernel(mode=mode, dims=dims, inputs=inputs,
                  out_dtype=out_dtype,
                  root=root, helpers=helpers, num_warps=draw(st.sampled_from([4, 1, 2, 8])),
                  sizes=sizes, alpha=draw(st.sampled_from([0.5, 0.75, -1.25, 2.0])),
                  iters=draw(st.sampled_from([3, 0, 1, 2])),
                  flag=draw(st.sampled_from([5, 0, 1])), n_extra=draw(st.sampled_from([-2, 3])),
                  seed=draw(st.integers(0, 2 ** 16)), side=gen.side, early=early)

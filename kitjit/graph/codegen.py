"""kitjit source for one fused group of graph nodes: row kernels (elementwise chains,
reductions, softmax and norms along one axis, whole rows in registers), matmul kernels
(kit.dot over K tiles, rms_norm prologue, several matmuls sharing A, elementwise epilogue)
and attention kernels (matmul -> elementwise -> softmax -> matmul with online softmax,
split over the keys with a combine kernel). Shapes and strides are baked in as constants."""

from __future__ import annotations

import math

import torch

from .graph import ELEMENTWISE_BINARY, ELEMENTWISE_UNARY, Tensor, buffer_strides

LOG2E = 1.4426950408889634
KIT_DTYPE = {torch.float16: "kit.float16", torch.bfloat16: "kit.bfloat16",
             torch.float32: "kit.float32"}


def p2(n: int, lo: int = 1) -> int:
    return max(lo, 1 << (max(n, 1) - 1).bit_length())


def buf(t: Tensor) -> str:
    """The kernel argument holding t's buffer (its base node's)."""
    return f"t{t.base().id}"


def aligned_strides(t: Tensor, space) -> list[int]:
    """t's stride along each axis of `space` (right-aligned broadcast; 0 where t is 1)."""
    st, sh = buffer_strides(t), t.shape
    off = len(space) - len(sh)
    return [0 if i < off or sh[i - off] == 1 else st[i - off] for i in range(len(space))]


def flat_offset(sizes, strides, idx: str) -> str:
    """Offset expression of flat index `idx` over axes (sizes, strides), adjacent axes merged
    where they are contiguous in memory; '0' if it does not move."""
    axes = [[s, t] for s, t in zip(sizes, strides) if s != 1]
    merged: list[list[int]] = []
    for s, t in axes:
        if merged and merged[-1][1] == t * s:
            merged[-1] = [merged[-1][0] * s, t]
        else:
            merged.append([s, t])
    terms, div = [], 1
    for k in range(len(merged) - 1, -1, -1):
        s, t = merged[k]
        if t:
            e = idx if div == 1 else f"{idx} // {div}"
            if k:
                e = f"{e} % {s}"
            terms.append(e if t == 1 else f"({e}) * {t}" if "%" in e or "/" in e else
                         f"{e} * {t}")
        div *= s
    return " + ".join(reversed(terms)) or "0"


def elementwise(t: Tensor, a: list[str]) -> str:
    op = t.op
    if op in ELEMENTWISE_BINARY:
        sym = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[op]
        return f"{a[0]} {sym} {a[1]}"
    assert op in ELEMENTWISE_UNARY, op
    x = a[0]
    return {"exp": f"kit.exp2({x} * {LOG2E})",
            "neg": f"-{x}",
            "silu": f"{x} / (1.0 + kit.exp2(-{x} * {LOG2E}))",
            "gelu": f"0.5 * {x} * (1.0 + kit.erf({x} * 0.7071067811865476))",
            "sqrt": f"kit.sqrt({x})", "rsqrt": f"kit.rsqrt({x})"}[op]


class Emitter:
    """Collects lines of one kernel body; values of group nodes live in variables vN."""

    def __init__(self, group):
        self.g = group
        self.lines: list[str] = []
        self.loaded: dict[int, str] = {}

    def line(self, s: str) -> None:
        self.lines.append("    " + s)

    def operand(self, x) -> str:
        if not isinstance(x, Tensor):
            return repr(float(x))
        if x.id in self.g.node_ids:
            return f"v{x.id}"
        if x.id not in self.loaded:
            name = f"x{x.id}"
            self.line(f"{name} = {self.load(x)}.to(kit.float32)")
            self.loaded[x.id] = name
        return self.loaded[x.id]

    def load(self, x: Tensor) -> str:
        raise NotImplementedError


def kernel_header(name: str, args: list[str]) -> list[str]:
    return ["@kit.jit", f"def {name}({', '.join(args)}):"]


# ----------------------------------------------------------------------------- row kernels
class RowEmitter(Emitter):
    def __init__(self, group):
        super().__init__(group)
        self.S, self.a = group.space, group.axis
        self.rows_axes = [i for i in range(len(self.S)) if i != self.a]

    def full(self, t: Tensor) -> bool:
        return aligned_strides(t, self.S)[self.a] != 0 or (
            self.S[self.a] == 1 and len(t.shape) == len(self.S))

    def roff(self, t: Tensor) -> str:
        st = aligned_strides(t, self.S)
        e = flat_offset([self.S[i] for i in self.rows_axes], [st[i] for i in self.rows_axes],
                        "rows")
        return "rows * 0" if e == "0" else e

    def ptr(self, t: Tensor) -> tuple[str, str]:
        cs = aligned_strides(t, self.S)[self.a]
        if self.full(t):
            col = "cols[None, :]" if cs == 1 else f"cols[None, :] * {cs}"
            return f"{buf(t)} + ({self.roff(t)})[:, None] + {col}", "mask"
        return f"{buf(t)} + ({self.roff(t)})[:, None]", "rmask[:, None]"

    def load(self, x: Tensor) -> str:
        p, m = self.ptr(x)
        return f"kit.load({p}, mask={m}, other=0.0)"


def row_kernel(group, name: str) -> tuple[list[str], list[str]]:
    e = RowEmitter(group)
    R = math.prod(e.S[i] for i in e.rows_axes)
    C = e.S[e.a]
    ROWS, BLOCK = group.params["ROWS"], p2(C)
    e.line(f"rows = kit.program_id(0) * {ROWS} + kit.arange(0, {ROWS})")
    e.line(f"cols = kit.arange(0, {BLOCK})")
    e.line(f"rmask = rows < {R}")
    e.line(f"mask = rmask[:, None] & (cols[None, :] < {C})")
    for t in group.nodes:
        v = f"v{t.id}"
        if t.op in ELEMENTWISE_BINARY or t.op in ELEMENTWISE_UNARY:
            e.line(f"{v} = {elementwise(t, [e.operand(x) for x in t.inputs])}")
        elif t.op in ("sum", "max"):
            x = e.operand(t.inputs[0])
            if t.op == "sum":
                e.line(f"{v} = kit.sum(kit.where(mask, {x}, 0.0), axis=1, keep_dims=True)")
            else:
                e.line(f"{v} = kit.max(kit.where(mask, {x}, -float('inf')), axis=1, "
                       "keep_dims=True)")
        elif t.op == "softmax":
            x = e.operand(t.inputs[0])
            e.line(f"m{t.id} = kit.max(kit.where(mask, {x}, -float('inf')), axis=1, "
                   "keep_dims=True)")
            e.line(f"e{t.id} = kit.where(mask, kit.exp2(({x} - m{t.id}) * {LOG2E}), 0.0)")
            e.line(f"{v} = e{t.id} / kit.sum(e{t.id}, axis=1, keep_dims=True)")
        elif t.op == "rms_norm":
            x = e.operand(t.inputs[0])
            e.line(f"ms{t.id} = kit.sum(kit.where(mask, {x} * {x}, 0.0), axis=1, "
                   f"keep_dims=True) / {C}")
            y = f"{x} * kit.rsqrt(ms{t.id} + {t.attrs['eps']!r})"
            if t.attrs["weight"]:
                y += f" * {e.operand(t.inputs[1])}"
            e.line(f"{v} = {y}")
        elif t.op == "layer_norm":
            x = e.operand(t.inputs[0])
            e.line(f"mu{t.id} = kit.sum(kit.where(mask, {x}, 0.0), axis=1, keep_dims=True)"
                   f" / {C}")
            e.line(f"xc{t.id} = kit.where(mask, {x} - mu{t.id}, 0.0)")
            e.line(f"var{t.id} = kit.sum(xc{t.id} * xc{t.id}, axis=1, keep_dims=True) / {C}")
            y = f"xc{t.id} * kit.rsqrt(var{t.id} + {t.attrs['eps']!r})"
            k = 1
            if t.attrs["weight"]:
                y += f" * {e.operand(t.inputs[k])}"
                k += 1
            if t.attrs["bias"]:
                y += f" + {e.operand(t.inputs[k])}"
            e.line(f"{v} = {y}")
        else:
            raise AssertionError(t.op)
        if t.id in group.store_ids:
            p, m = e.ptr(t)
            e.line(f"kit.store({p}, {v}.to({buf(t)}.dtype.element_ty), mask={m})")
    args = group.args()
    launch = [f"{name}[({-(-R // ROWS)},)]({', '.join(args)}, "
              f"num_warps={group.params['num_warps']})"]
    return kernel_header(name, args) + e.lines, launch


# ----------------------------------------------------------------------------- matmuls
class TileEmitter(Emitter):
    """Values are [BM, BN] tiles of the output space (*batch, M, N)."""

    def __init__(self, group, space):
        super().__init__(group)
        self.S = space

    def boff(self, t: Tensor, space) -> str:
        st = aligned_strides(t, space)
        return flat_offset(space[:-2], st[:-2], "b")

    def tile_ptr(self, t: Tensor, space, r: str, c: str) -> str:
        st = aligned_strides(t, space)
        parts = [buf(t)]
        b = self.boff(t, space)
        if b != "0":
            parts.append(f"({b})")
        for idx, s in ((r, st[-2]), (c, st[-1])):
            # a zero stride (a dim of size 1) keeps its term: the pointers must have the
            # tile's full shape, as a store's value never broadcasts them (Triton's rule)
            parts.append(idx if s == 1 else f"{idx} * {s}")
        return " + ".join(parts)

    def load(self, x: Tensor) -> str:
        p = self.tile_ptr(x, self.S, "rm[:, None]", "rn[None, :]")
        return f"kit.load({p}, mask=mask, other=0.0)"


def matmul_kernel(group, name: str) -> tuple[list[str], list[str]]:
    mm0 = group.mms[0]
    S = mm0.shape
    M, N = S[-2], S[-1]
    K = mm0.inputs[0].shape[-1]
    BM, BN, BK = group.params["BM"], group.params["BN"], group.params["BK"]
    e = TileEmitter(group, S)
    nbn = -(-N // BN)
    aspace = (*S[:-2], M, K)
    bspace = (*S[:-2], K, N)
    e.line("pid = kit.program_id(0)")
    e.line("b = kit.program_id(1)")
    e.line(f"rm = pid // {nbn} * {BM} + kit.arange(0, {BM})")
    e.line(f"rn = pid % {nbn} * {BN} + kit.arange(0, {BN})")
    e.line(f"rk = kit.arange(0, {BK})")
    e.line(f"mask = (rm[:, None] < {M}) & (rn[None, :] < {N})")
    pro = group.prologue
    A = pro.inputs[0] if pro is not None else mm0.inputs[0]
    a_ptr = e.tile_ptr(A, aspace, "rm[:, None]", "k[None, :]")
    amask = f"(rm[:, None] < {M}) & (k[None, :] < {K})"
    if pro is not None:   # rms_norm(x, w) @ B: a first pass over K for the row scale
        e.line(f"ss = kit.zeros(({BM},), kit.float32)")
        e.line(f"for k0 in range(0, {K}, {BK}):")
        e.line("    k = k0 + rk")
        e.line(f"    x = kit.load({a_ptr}, mask={amask}, other=0.0).to(kit.float32)")
        e.line("    ss += kit.sum(x * x, axis=1)")
        e.line(f"rstd = kit.rsqrt(ss / {K} + {pro.attrs['eps']!r})")
    for i in range(len(group.mms)):
        e.line(f"acc{i} = kit.zeros(({BM}, {BN}), kit.float32)")
    e.line(f"for k0 in range(0, {K}, {BK}):")
    e.line("    k = k0 + rk")
    e.line(f"    a = kit.load({a_ptr}, mask={amask}, other=0.0)")
    if pro is not None:
        y = "a.to(kit.float32) * rstd[:, None]"
        if pro.attrs["weight"]:
            w = pro.inputs[1]
            y += f" * kit.load({buf(w)} + k, mask=k < {K}, other=0.0).to(kit.float32)[None, :]"
        e.line(f"    a = ({y}).to({KIT_DTYPE[mm0.dtype]})")
    for i, mm in enumerate(group.mms):
        B = mm.inputs[1]
        b_ptr = e.tile_ptr(B, bspace, "k[:, None]", "rn[None, :]")
        e.line(f"    w{i} = kit.load({b_ptr}, mask=(k[:, None] < {K}) & (rn[None, :] < {N}),"
               " other=0.0)")
        e.line(f"    acc{i} = kit.dot(a, w{i}, acc{i})")
    for i, mm in enumerate(group.mms):
        e.line(f"v{mm.id} = acc{i}")
    for t in group.epilogue:
        e.line(f"v{t.id} = {elementwise(t, [e.operand(x) for x in t.inputs])}")
    for t in [*group.mms, *group.epilogue]:
        if t.id in group.store_ids:
            p = e.tile_ptr(t, S, "rm[:, None]", "rn[None, :]")
            e.line(f"kit.store({p}, v{t.id}.to({buf(t)}.dtype.element_ty), mask=mask)")
    args = group.args()
    grid = f"({-(-M // BM) * nbn}, {math.prod(S[:-2])})"
    launch = [f"{name}[{grid}]({', '.join(args)}, num_warps={group.params['num_warps']})"]
    return kernel_header(name, args) + e.lines, launch


# ----------------------------------------------------------------------------- attention
def attention_kernel(group, name: str) -> tuple[list[str], list[str]]:
    """O = softmax(f(Q @ K)) @ V, flash-decoding style: grid (M blocks, batch, SPLIT);
    SPLIT > 1 writes fp32 partials (acc, max, sum) that a combine kernel merges."""
    mm1, sm, mm2 = group.mm1, group.softmax, group.mm2
    Q, Kt = mm1.inputs
    V = mm2.inputs[1]
    O = mm2
    S = O.shape
    batch = S[:-2]
    M, Dv = S[-2], S[-1]
    D, N = Q.shape[-1], Kt.shape[-1]
    BM, BN, SPLIT = group.params["BM"], group.params["BN"], group.params["SPLIT"]
    DP, DVP = p2(D, 16), p2(Dv, 16)
    nb = -(-N // BN)
    chunk = -(-nb // SPLIT) * BN
    e = TileEmitter(group, S)
    qs, ks, vs = (*batch, M, D), (*batch, D, N), (*batch, N, Dv)
    e.line("pm = kit.program_id(0)")
    e.line("b = kit.program_id(1)")
    e.line("sp = kit.program_id(2)")
    e.line(f"rm = pm * {BM} + kit.arange(0, {BM})")
    e.line(f"rd = kit.arange(0, {DP})")
    e.line(f"rv = kit.arange(0, {DVP})")
    e.line(f"q = kit.load({e.tile_ptr(Q, qs, 'rm[:, None]', 'rd[None, :]')}, "
           f"mask=(rm[:, None] < {M}) & (rd[None, :] < {D}), other=0.0)")
    e.line(f"m_i = kit.full(({BM},), -float('inf'), kit.float32)")
    e.line(f"l_i = kit.zeros(({BM},), kit.float32)")
    e.line(f"acc = kit.zeros(({BM}, {DVP}), kit.float32)")
    e.line(f"for n0 in range(sp * {chunk}, kit.minimum(sp * {chunk} + {chunk}, {N}), {BN}):")
    e.line(f"    rn = n0 + kit.arange(0, {BN})")
    e.line(f"    kt = kit.load({e.tile_ptr(Kt, ks, 'rd[:, None]', 'rn[None, :]')}, "
           f"mask=(rd[:, None] < {D}) & (rn[None, :] < {N}), other=0.0)")
    e.line(f"    v{mm1.id} = kit.dot(q, kt)")
    for t in group.chain:
        e.line(f"    v{t.id} = {elementwise(t, [e.operand(x) for x in t.inputs])}")
    s = f"v{sm.inputs[0].id}"
    e.line(f"    s = kit.where(rn[None, :] < {N}, {s}, -float('inf'))")
    e.line("    m_new = kit.maximum(m_i, kit.max(s, axis=1))")
    e.line(f"    p = kit.exp2((s - m_new[:, None]) * {LOG2E})")
    e.line(f"    alpha = kit.exp2((m_i - m_new) * {LOG2E})")
    e.line("    l_i = l_i * alpha + kit.sum(p, axis=1)")
    e.line(f"    v = kit.load({e.tile_ptr(V, vs, 'rn[:, None]', 'rv[None, :]')}, "
           f"mask=(rn[:, None] < {N}) & (rv[None, :] < {Dv}), other=0.0)")
    e.line(f"    acc = kit.dot(p.to({KIT_DTYPE[V.dtype]}), v, acc * alpha[:, None])")
    e.line("    m_i = m_new")
    omask = f"(rm[:, None] < {M}) & (rv[None, :] < {Dv})"
    nbatch = math.prod(batch)
    args = group.args()
    grid = f"({-(-M // BM)}, {nbatch}, {SPLIT})"
    nw = group.params["num_warps"]
    if SPLIT == 1:
        e.line(f"kit.store({e.tile_ptr(O, S, 'rm[:, None]', 'rv[None, :]')}, "
               f"(acc / l_i[:, None]).to({buf(O)}.dtype.element_ty), mask={omask})")
        return kernel_header(name, args) + e.lines, [
            f"{name}[{grid}]({', '.join(args)}, num_warps={nw})"]
    # partials: W_acc[sp, b, m, dv], W_m / W_l[sp, b, m] (fp32, contiguous)
    ws = f"(sp * {nbatch} + b) * {M} + rm"
    e.line(f"kit.store(wacc + ({ws})[:, None] * {Dv} + rv[None, :], acc, mask={omask})")
    e.line(f"kit.store(wm + {ws}, m_i, mask=rm < {M})")
    e.line(f"kit.store(wl + {ws}, l_i, mask=rm < {M})")
    SP = p2(SPLIT)
    cargs = ["wacc", "wm", "wl", buf(O)]
    comb = kernel_header(f"{name}_combine", cargs) + [
        "    row = kit.program_id(0)   # b * M + m",
        f"    rs = kit.arange(0, {SP})",
        f"    rv = kit.arange(0, {DVP})",
        f"    ms = kit.load(wm + rs * {nbatch * M} + row, mask=rs < {SPLIT}, "
        "other=-float('inf'))",
        f"    ls = kit.load(wl + rs * {nbatch * M} + row, mask=rs < {SPLIT}, other=0.0)",
        "    m = kit.max(ms, axis=0)",
        f"    w = kit.exp2((ms - m) * {LOG2E})",
        f"    a = kit.load(wacc + (rs[:, None] * {nbatch * M} + row) * {Dv} + rv[None, :], "
        f"mask=(rs[:, None] < {SPLIT}) & (rv[None, :] < {Dv}), other=0.0)",
        "    o = kit.sum(a * w[:, None], axis=0) / kit.sum(ls * w, axis=0)",
        f"    b = row // {M}",
        f"    rm = row % {M}",
        f"    kit.store({e.tile_ptr(O, S, 'rm', 'rv')}, o.to({buf(O)}.dtype.element_ty), "
        f"mask=rv < {Dv})",
    ]
    dev = f"{buf(O)}.device"
    launch = [
        f"wacc = torch.empty(({SPLIT}, {nbatch}, {M}, {Dv}), dtype=torch.float32, "
        f"device={dev})",
        f"wm = torch.empty(({SPLIT}, {nbatch}, {M}), dtype=torch.float32, device={dev})",
        f"wl = torch.empty(({SPLIT}, {nbatch}, {M}), dtype=torch.float32, device={dev})",
        f"{name}[{grid}]({', '.join(args)}, wacc, wm, wl, num_warps={nw})",
        f"{name}_combine[({nbatch * M},)]({', '.join(cargs)}, num_warps=4)",
    ]
    header = kernel_header(name, [*args, "wacc", "wm", "wl"])
    return header + e.lines + [""] + comb, launch

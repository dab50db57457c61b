"""The search space: how the graph's nodes split into kernels (fusion boundaries), each
kernel's tile shapes and grid (split-KV for decode attention), pruned by shared-memory and
register budgets and ranked by a roofline cost model of the H100 (bytes at ~3 TB/s, tensor
FLOPs at ~700 TFLOP/s, a launch cost per kernel, idle SMs when the grid is small)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import torch

from . import codegen
from .graph import ELEMENTWISE_BINARY, ELEMENTWISE_UNARY, REDUCTIONS, ROW_OPS, KernelGraph, Tensor

ELEMENTWISE = ELEMENTWISE_BINARY + ELEMENTWISE_UNARY
HBM_BPS, TENSOR_FLOPS, LAUNCH_S, SMS = 3.0e12, 7.0e11 * 1e3, 4e-6, 132
SMEM_BYTES, MAX_REGS = 227 * 1024, 200


@dataclass(eq=False)
class Group:
    kind: str                      # "row" | "matmul" | "attention"
    nodes: list[Tensor]            # in graph order
    params: dict = field(default_factory=dict)
    store_ids: set = field(default_factory=set)
    # row
    space: tuple = ()
    axis: int = -1
    # matmul
    mms: list = field(default_factory=list)
    prologue: Tensor | None = None
    epilogue: list = field(default_factory=list)
    # attention
    mm1: Tensor | None = None
    chain: list = field(default_factory=list)
    softmax: Tensor | None = None
    mm2: Tensor | None = None

    @property
    def node_ids(self) -> set:
        return {t.id for t in self.nodes}

    def loads(self) -> list[Tensor]:
        ids, out = self.node_ids, []
        for t in self.nodes:
            for x in t.inputs:
                if isinstance(x, Tensor) and x.id not in ids and x not in out:
                    out.append(x)
        return out

    def args(self) -> list[str]:
        names = []
        for t in [*self.loads(), *(t for t in self.nodes if t.id in self.store_ids)]:
            n = codegen.buf(t)
            if n not in names:
                names.append(n)
        return names

    def describe(self) -> str:
        ops = "+".join(t.op for t in self.nodes)
        return f"{self.kind}[{ops}]{self.params}"


# ----------------------------------------------------------------------------- partitions
def consumers(g: KernelGraph) -> dict[int, list[Tensor]]:
    """Each node's consumers, looking through views (a view's consumers are its base's)."""
    out: dict[int, list[Tensor]] = {t.id: [] for t in g.nodes}
    for t in g.nodes:
        for x in t.inputs:
            if isinstance(x, Tensor):
                out[x.base().id].append(t)
    return out


def row_space(t: Tensor):
    if t.op in REDUCTIONS or t.op == "softmax":
        return t.inputs[0].shape, t.attrs["dim"]
    if t.op in ROW_OPS:
        return t.shape, len(t.shape) - 1
    return t.shape, len(t.shape) - 1


def partition(g: KernelGraph, attn: bool, prologue: bool, epilogue: bool, dual: bool,
              merge_rows: bool) -> list[Group] | None:
    cons = consumers(g)
    outs = {t.base().id for t in g.outputs}
    owner: dict[int, Group] = {}
    groups: list[Group] = []

    def single_use(t: Tensor) -> bool:   # consumed once, not viewed, not an output
        return len(cons[t.id]) == 1 and t.id not in outs and not cons[t.id][0].is_view

    def add(grp: Group, t: Tensor) -> None:
        grp.nodes.append(t)
        owner[t.id] = grp

    def deps(grp: Group) -> set:
        """Groups grp reads from, transitively."""
        seen, todo = set(), [grp]
        while todo:
            h = todo.pop()
            for x in h.loads():
                o = owner.get(x.base().id)
                if o is not None and id(o) not in seen:
                    seen.add(id(o))
                    todo.append(o)
        return seen

    def can_join(grp: Group, t: Tensor) -> bool:
        # t may join grp if none of its operands comes from a group that reads grp
        for x in t.inputs:
            if isinstance(x, Tensor):
                o = owner.get(x.base().id)
                if x.is_view and o is grp:
                    return False            # a view of a value inside grp: needs a buffer
                if o is not None and o is not grp and id(grp) in deps(o):
                    return False
        return True

    for t in g.nodes:
        if t.op == "input" or t.is_view or t.id in owner:
            continue
        if t.op == "matmul":
            if attn and (grp := _attention(t, cons, single_use)) is not None:
                for n in grp.nodes:
                    owner[n.id] = grp
                groups.append(grp)
                continue
            grp = Group("matmul", [], mms=[t])
            a = t.inputs[0]
            if dual:
                for o in cons[a.base().id]:
                    if (o is not t and o.op == "matmul" and o.inputs[0] is a
                            and o.shape == t.shape and o.id not in owner
                            and o.inputs[1].dtype == t.inputs[1].dtype):
                        grp.mms.append(o)
            grp.nodes = sorted(grp.mms, key=lambda n: n.id)
            for n in grp.nodes:
                owner[n.id] = grp
            groups.append(grp)
            continue
        if t.op in ELEMENTWISE:
            # epilogue of a matmul group whose output space it shares
            prods = [owner.get(x.id) for x in t.inputs if isinstance(x, Tensor)]
            mg = next((p for p in prods if p is not None and p.kind == "matmul"), None)
            if (epilogue and mg is not None and t.shape == mg.mms[0].shape
                    and can_join(mg, t)):
                mg.epilogue.append(t)
                add(mg, t)
                continue
        if t.op in ELEMENTWISE or t.op in REDUCTIONS or t.op in ROW_OPS:
            S, a = row_space(t)
            joined = False
            if merge_rows:
                for x in t.inputs:
                    if not isinstance(x, Tensor) or x.is_view:
                        continue
                    o = owner.get(x.id)
                    if o is None or o.kind != "row":
                        continue
                    fits = (o.space, o.axis) == (S, a) or (
                        t.op in ELEMENTWISE and _reduced_in(t.shape, o.space, o.axis)
                        and all(not isinstance(y, Tensor) or y.shape in
                                (o.space, _red(o.space, o.axis)) for y in t.inputs))
                    if t.op in ELEMENTWISE and t.shape not in (o.space, _red(o.space, o.axis)):
                        fits = False
                    if fits and can_join(o, t):
                        add(o, t)
                        joined = True
                        break
            if not joined:
                grp = Group("row", [], space=S, axis=a)
                add(grp, t)
                groups.append(grp)
            continue
        raise NotImplementedError(f"op {t.op} is not supported yet by the search")
    # prologue fusion: rms_norm whose only consumers are this group's matmuls on A
    if prologue:
        for grp in groups:
            if grp.kind != "matmul":
                continue
            a = grp.mms[0].inputs[0]
            o = owner.get(a.id)
            if (a.op == "rms_norm" and not a.is_view and o is not None and o.kind == "row"
                    and o.nodes == [a] and a.id not in outs
                    and all(c in grp.mms for c in cons[a.id])):
                grp.prologue = a
                grp.nodes.insert(0, a)
                owner[a.id] = grp
                groups.remove(o)
    # stores: nodes needed outside their group or as outputs
    for grp in groups:
        ids = grp.node_ids
        for t in grp.nodes:
            if t.id in outs or any(c.id not in ids or c.is_view for c in cons[t.id]):
                grp.store_ids.add(t.id)
    return _order(groups, owner)


def _red(S, a):
    return tuple(1 if i == a else s for i, s in enumerate(S))


def _reduced_in(shape, S, a) -> bool:
    return shape == _red(S, a)


def _attention(mm1: Tensor, cons, single_use) -> Group | None:
    """matmul -> (elementwise with scalars)* -> softmax(last dim) -> matmul(P, V)."""
    chain, t = [], mm1
    if not single_use(mm1):
        return None
    nxt = cons[t.id][0]
    while nxt.op in ELEMENTWISE and all(not isinstance(x, Tensor) or x is t
                                        for x in nxt.inputs):
        chain.append(nxt)
        if not single_use(nxt):
            return None
        t, nxt = nxt, cons[nxt.id][0]
    if nxt.op != "softmax" or nxt.attrs["dim"] != len(nxt.shape) - 1 or not single_use(nxt):
        return None
    sm, mm2 = nxt, cons[nxt.id][0]
    if mm2.op != "matmul" or mm2.inputs[0] is not sm or mm2.inputs[1] is sm:
        return None
    if mm2.shape[:-1] != mm1.shape[:-1]:
        return None
    return Group("attention", [mm1, *chain, sm, mm2], mm1=mm1, chain=chain, softmax=sm,
                 mm2=mm2)


def _order(groups, owner) -> list[Group]:
    """Groups in dependency order (a group's first node order can be wrong after fusion)."""
    done, out = set(), []

    def visit(grp, stack=()):
        if id(grp) in done:
            return
        if id(grp) in stack:
            raise AssertionError("cycle in the fusion plan")
        for x in grp.loads():
            o = owner.get(x.base().id)
            if o is not None:
                visit(o, (*stack, id(grp)))
        done.add(id(grp))
        out.append(grp)

    for grp in groups:
        visit(grp)
    return out


def partitions(g: KernelGraph) -> list[tuple[str, list[Group]]]:
    """Distinct fusion plans, the most fused first; the last is one kernel per op."""
    seen, out = set(), []
    for flags in itertools.product((True, False), repeat=5):
        parts = partition(g, *flags)
        sig = tuple(tuple(t.id for t in grp.nodes) for grp in parts)
        if sig in seen:
            continue
        seen.add(sig)
        out.append((" | ".join(f"{grp.kind}({'+'.join(t.op for t in grp.nodes)})"
                               for grp in parts), parts))
    return out


# ----------------------------------------------------------------------------- parameters
def param_choices(grp: Group) -> list[dict]:
    out = []
    if grp.kind == "row":
        C = grp.space[grp.axis]
        R = math.prod(grp.space) // C
        block = codegen.p2(C)
        for rows in (1, 2, 4, 8, 16):
            if rows > codegen.p2(R):
                break
            for nw in (1, 2, 4, 8, 16):
                live = len(grp.nodes) + 2
                if rows * block * live / (32 * nw) > MAX_REGS or rows * block < 32 * nw // 4:
                    continue
                out.append(dict(ROWS=rows, num_warps=nw))
    elif grp.kind == "matmul":
        M, N = grp.mms[0].shape[-2:]
        for BM, BN, BK, nw in itertools.product((16, 32, 64, 128), (32, 64, 128),
                                                (32, 64), (4, 8)):
            if BM > codegen.p2(M, 16) or BN > codegen.p2(N, 32):
                continue
            n = len(grp.mms)
            regs = (n * BM * BN + BM * BK + n * BK * BN) / (32 * nw)
            smem = (BM * BK + n * BK * BN) * 2 * 3
            if regs > MAX_REGS or smem > SMEM_BYTES:
                continue
            out.append(dict(BM=BM, BN=BN, BK=BK, num_warps=nw))
    else:
        M = grp.mm2.shape[-2]
        N = grp.mm1.shape[-1]
        D, Dv = grp.mm1.inputs[0].shape[-1], grp.mm2.shape[-1]
        nb_max = -(-N // 16)
        for BM, BN, split in itertools.product((16, 64, 128), (16, 32, 64, 128),
                                               (1, 2, 4, 8, 16, 32, 64)):
            if BM > codegen.p2(M, 16) or BN > codegen.p2(N, 16) or split > nb_max:
                continue
            nb = -(-N // BN)
            if split > nb or (split - 1) * -(-nb // split) >= nb:
                continue   # every split gets keys
            nw = 4 if BM <= 64 else 8
            regs = (BM * codegen.p2(Dv, 16) + 2 * BM * BN + BM * codegen.p2(D, 16)) / (32 * nw)
            if regs > MAX_REGS:
                continue
            out.append(dict(BM=BM, BN=BN, SPLIT=split, num_warps=nw))
    return out


def cost(grp: Group, p: dict) -> float:
    """Seconds, by a roofline of the H100: max(bytes / HBM, FLOPs / tensor cores), slowed by
    the share of idle SMs when the grid is small, plus a launch."""
    def nbytes(t):
        return math.prod(t.shape) * t.dtype.itemsize

    loads = sum(nbytes(x) for x in grp.loads())
    stores = sum(nbytes(t) for t in grp.nodes if t.id in grp.store_ids)
    flops, launches = 0.0, 1
    if grp.kind == "row":
        C = grp.space[grp.axis]
        progs = -(-math.prod(grp.space) // C // p["ROWS"])
    elif grp.kind == "matmul":
        *batch, M, N = grp.mms[0].shape
        K = grp.mms[0].inputs[0].shape[-1]
        gm, gn = -(-M // p["BM"]), -(-N // p["BN"])
        progs = gm * gn * math.prod(batch)
        a, bs = grp.mms[0].inputs[0], [m.inputs[1] for m in grp.mms]
        loads += 0.25 * (gn - 1) * nbytes(a) + 0.25 * (gm - 1) * sum(nbytes(b) for b in bs)
        flops = 2.0 * M * N * K * math.prod(batch) * len(grp.mms)
        # padding waste: tiles bigger than M or N still run full MMAs
        flops *= gm * p["BM"] / M * gn * p["BN"] / N
    else:
        *batch, M, Dv = grp.mm2.shape
        N, D = grp.mm1.shape[-1], grp.mm1.inputs[0].shape[-1]
        gm = -(-M // p["BM"])
        progs = gm * math.prod(batch) * p["SPLIT"]
        kv = nbytes(grp.mm1.inputs[1]) + nbytes(grp.mm2.inputs[1])
        loads += (gm - 1) * kv * 0.25
        flops = 2.0 * math.prod(batch) * gm * p["BM"] * N * (D + Dv)
        if p["SPLIT"] > 1:
            launches = 2
            stores += 2 * 4 * p["SPLIT"] * math.prod(batch) * M * (Dv + 2)
    busy = min(1.0, progs / SMS)
    return max((loads + stores) / HBM_BPS, flops / TENSOR_FLOPS) / busy + LAUNCH_S * launches


# ----------------------------------------------------------------------------- module source
def module_source(g: KernelGraph, groups: list[Group], header: str) -> str:
    """A self-contained python module: the kernels and `run(*inputs) -> list of outputs`."""
    kernels, body = [], []
    ins = [f"t{t.id}" for t in g.inputs]
    body.append(f"def run({', '.join(ins)}):")
    body.append(f'    """The graph on torch tensors: {len(ins)} inputs in, '
                f'{len(g.outputs)} outputs out (a list)."""')
    for t in g.inputs:
        body.append(f"    t{t.id} = _input(t{t.id}, {t.shape}, {t.strides}, "
                    f"{_dt(t.dtype)})")
    dev = f"t{g.inputs[0].id}.device"
    for i, grp in enumerate(groups):
        for t in grp.nodes:
            if t.id in grp.store_ids:
                body.append(f"    t{t.id} = _empty({t.shape}, {_dt(t.dtype)}, {dev})")
        name = f"k{i}_{grp.kind}"
        if grp.kind == "row":
            src, launch = codegen.row_kernel(grp, name)
        elif grp.kind == "matmul":
            src, launch = codegen.matmul_kernel(grp, name)
        else:
            src, launch = codegen.attention_kernel(grp, name)
        kernels += [f"# {grp.describe()}", *src, "", ""]
        body += ["    " + ln for ln in launch]
    outs = []
    for t in g.outputs:
        b = t.base()
        outs.append(f"t{b.id}" if t is b else
                    f"t{b.id}.as_strided({t.shape}, {codegen.buffer_strides(t)})")
    body.append(f"    return [{', '.join(outs)}]")
    helpers = [
        "def _empty(shape, dtype, device):",
        "    return torch.empty(shape, dtype=dtype, device=device)",
        "",
        "",
        "def _input(x, shape, strides, dtype):",
        "    if tuple(x.shape) != shape or x.dtype != dtype:",
        "        raise ValueError(f'expected an input of shape {shape} and {dtype}, got '",
        "                         f'{tuple(x.shape)} and {x.dtype}')",
        "    if x.stride() != strides:   # the kernels bake the declared strides in",
        "        x = torch.empty_strided(shape, strides, dtype=dtype, device=x.device).copy_(x)",
        "    return x",
        "", "",
    ]
    return "\n".join([f'"""{header}"""', "", "import torch", "", "import kitjit as kit", "",
                      "", *kernels, *helpers, *body]) + "\n"


def _dt(d: torch.dtype) -> str:
    return str(d)

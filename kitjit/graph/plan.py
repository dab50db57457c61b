"""Fusion plans: how the graph's nodes split into kernels. A group is one kernel (plus, for
split-K / split-KV, its combine kernel) of one of three kinds:

- row: elementwise chains, reductions, softmax and norms along one axis (rows in registers);
- matmul: kit.dot over K tiles, with an rms_norm prologue on A, several matmuls sharing A
  (the gated MLP), a low-rank chain on the same A (LoRA: x W + (x A) B) and an elementwise
  epilogue;
- attention: matmul -> elementwise with scalars -> softmax -> matmul (online softmax), with
  rms_norm prologues on Q, K and V (QK-normalization).

`partitions(g)` lists the distinct plans, the most fused first and one kernel per op last;
the tile and grid choices of each group are in space.py, the kitjit source in codegen*.py."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from .graph import (
    ELEMENTWISE_BINARY,
    ELEMENTWISE_UNARY,
    REDUCTIONS,
    ROW_OPS,
    KernelGraph,
    Tensor,
    buffer_strides,
    contiguous_strides,
)

ELEMENTWISE = ELEMENTWISE_BINARY + ELEMENTWISE_UNARY
LOWRANK_MAX = 64          # x @ A with A's columns up to this many: kept in registers


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
    lowrank: tuple | None = None   # (x @ A, (x @ A) @ B)
    # attention
    mm1: Tensor | None = None
    chain: list = field(default_factory=list)
    softmax: Tensor | None = None
    mm2: Tensor | None = None
    norms: dict = field(default_factory=dict)   # "q" / "k" / "v" -> rms_norm node

    @property
    def node_ids(self) -> set:
        return {t.id for t in self.nodes}

    def loads(self) -> list[Tensor]:
        """Tensors read from outside (a view of a node of the group is not one)."""
        ids, out = self.node_ids, []
        for t in self.nodes:
            for x in t.inputs:
                if isinstance(x, Tensor) and x.base().id not in ids and x not in out:
                    out.append(x)
        return out

    def args(self) -> list[str]:
        from .codegen import buf

        names = []
        for t in [*self.loads(), *(t for t in self.nodes if t.id in self.store_ids)]:
            n = buf(t)
            if n not in names:
                names.append(n)
        return names

    def ops(self) -> str:
        return "+".join(t.op for t in self.nodes)

    def describe(self) -> str:
        return f"{self.kind}[{self.ops()}]{self.params}"


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
    return t.shape, len(t.shape) - 1


def partition(g: KernelGraph, attn: bool, prologue: bool, epilogue: bool, dual: bool,
              merge_rows: bool, lowrank: bool) -> list[Group]:
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
            grp = (_lowrank(t, cons, single_use, owner) if lowrank else None) or \
                Group("matmul", [], mms=[t])
            a = grp.mms[0].inputs[0]
            if dual and grp.lowrank is None:
                for o in cons[a.base().id]:
                    if (o is not t and o.op == "matmul" and o.inputs[0] is a
                            and o.shape == t.shape and o.id not in owner
                            and o.inputs[1].dtype == t.inputs[1].dtype):
                        grp.mms.append(o)
            lr = list(grp.lowrank or ())
            grp.nodes = sorted(grp.mms + lr, key=lambda n: n.id)
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
    if prologue:
        _absorb_norms(groups, owner, cons, outs)
    # stores: nodes needed outside their group or as outputs
    for grp in groups:
        ids = grp.node_ids
        for t in grp.nodes:
            if t.id in outs or any(c.id not in ids or c.is_view for c in cons[t.id]):
                grp.store_ids.add(t.id)
    return _order(groups, owner)


def _absorb_norms(groups, owner, cons, outs) -> None:
    """rms_norm prologues: a norm alone in its row group whose only (non-view) consumer is
    a matmul or attention group's operand moves into that group."""
    def lone_norm(x: Tensor, users) -> Tensor | None:
        n = x.base()
        o = owner.get(n.id)
        if (n.op != "rms_norm" or o is None or o.kind != "row" or o.nodes != [n]
                or n.id in outs or not _feeds_only(n, users, cons)):
            return None
        src = n.inputs[0]
        if buffer_strides(src) != contiguous_strides(src.shape):
            return None    # the operand's view strides assume the norm's contiguous buffer
        return n

    for grp in list(groups):
        if grp.kind == "matmul":
            a = grp.mms[0].inputs[0]
            n = lone_norm(a, grp.mms + list(grp.lowrank or ())[:1])
            if n is not None and a is n:
                grp.prologue = n
                _take(groups, owner, grp, n)
        elif grp.kind == "attention":
            q, kt, v = grp.mm1.inputs[0], grp.mm1.inputs[1], grp.mm2.inputs[1]
            for role, x, users, dim in (("q", q, [grp.mm1], -1), ("k", kt, [grp.mm1], -2),
                                        ("v", v, [grp.mm2], -1)):
                if role == "k" and x.base() is q.base():
                    continue
                n = lone_norm(x, users)
                # the operand's feature dim must walk the norm's last dim, whole
                if (n is not None and buffer_strides(x)[dim] == 1
                        and x.shape[dim] == n.shape[-1]):
                    grp.norms[role] = n
                    _take(groups, owner, grp, n)


def _feeds_only(n: Tensor, users, cons) -> bool:
    ok = [u.id for u in users]
    return all(c.is_view or c.id in ok for c in cons[n.id]) and any(
        c.id in ok for c in cons[n.id])


def _take(groups, owner, grp: Group, n: Tensor) -> None:
    groups.remove(owner[n.id])
    grp.nodes.insert(0, n)
    owner[n.id] = grp


def _lowrank(t: Tensor, cons, single_use, owner) -> Group | None:
    """D = x @ A (A narrow) whose one use is E = D @ B, beside a main C = x @ W of E's
    shape (t is D or C): one group computes C and E from the same tiles of x (LoRA)."""
    x = t.inputs[0]
    sib = [c for c in cons[x.base().id] if c.op == "matmul" and c.inputs[0] is x
           and c.id not in owner and c.inputs[1].dtype == t.inputs[1].dtype]
    for d in sib:
        if d.shape[-1] > LOWRANK_MAX or not single_use(d):
            continue
        e = cons[d.id][0]
        if e.op != "matmul" or e.inputs[0] is not d or e.id in owner:
            continue
        for c in sib:
            if c is not d and c.shape == e.shape and t in (c, d):
                return Group("matmul", [], mms=[c], lowrank=(d, e))
    return None


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
            if o is not None and o is not grp:
                visit(o, (*stack, id(grp)))
        done.add(id(grp))
        out.append(grp)

    for grp in groups:
        visit(grp)
    return out


def plan_name(groups: list[Group]) -> str:
    return " | ".join(f"{grp.kind}({grp.ops()})" for grp in groups)


def partitions(g: KernelGraph) -> list[tuple[str, list[Group]]]:
    """Distinct fusion plans, the most fused first; the last is one kernel per op."""
    seen, out = set(), []
    for flags in itertools.product((True, False), repeat=6):
        parts = partition(g, *flags)
        sig = tuple(tuple(t.id for t in grp.nodes) for grp in parts)
        if sig in seen:
            continue
        seen.add(sig)
        out.append((plan_name(parts), parts))
    return out

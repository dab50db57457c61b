"""Layout inference: give every tile value a register layout.

Values that must share a layout (operands and results of elementwise ops, loads and stores,
loop-carried values) are grouped into classes with union-find. Each class then gets one
layout, highest rank first:
  - a class holding a `dot` accumulator gets the mma accumulator layout (an anchor);
  - the result of `expand_dims` of an accumulator, if nothing else lays its class out, keeps
    the accumulator's registers (Expanded): a 3-d dot's [B, M, N] result stays B mma tiles;
  - a class that is the result of a reduction, or the operand of `expand_dims`, is a slice
    of its parent's layout (so `x - kit.max(x, 1)[:, None]` needs no data movement);
  - the result of a shape op that relabels coordinates (permute, reshape, join, split, cat)
    takes its operand's layout relabeled (kitjit/ir/layouts.py: Permuted, ...), so each
    thread keeps its elements and the op moves no data; flip keeps its operand's layout and
    gather its index's;
  - any other class gets a coalesced blocked layout, 16 bytes per thread along the last dim
    for the widest element the class loads or stores.
Where two demands disagree, an explicit `convert_layout` op goes in (through shared memory
in the backend); `dot` operands are converted to the mma operand layouts the same way. The
IR printer counts the conversions, so a kernel author sees what they cost.
"""

from __future__ import annotations

import dataclasses

from kitjit.ir import ops as O
from kitjit.ir.core import Block, Function, Op, Value
from kitjit.ir.layouts import (
    DotOperand,
    Expanded,
    Halved,
    Joined,
    Layout,
    Mma,
    Permuted,
    Reshaped,
    Slice,
    Stacked,
    default_blocked,
    mma_layout,
    shared_layout,
)

from .ampere import acc_layout, is_ampere
from .errors import CompileError


class _UF:
    def __init__(self):
        self.parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        p = self.parent.setdefault(x, x)
        if p != x:
            p = self.parent[x] = self.find(p)
        return p

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def _tiles(vals):
    return [v for v in vals if not v.type.is_scalar and not v.type.is_shared]


def infer_layouts(fn: Function) -> Function:
    num_warps = fn.attrs["num_warps"]
    uf = _UF()
    values: dict[int, Value] = {}
    slice_edges: list[tuple[str, Op]] = []  # ('reduce'|'expand', op)
    dots: list[Op] = []
    relabels: list[Op] = []  # shape ops whose result layout derives from the operand's

    def see(v: Value):
        if not v.type.is_scalar and not v.type.is_shared and not v.dtype.name == "tmadesc":
            values[v.id] = v
            uf.find(v.id)

    def same(vs):
        vs = _tiles(vs)
        for v in vs:
            see(v)
        for a, b in zip(vs, vs[1:]):
            uf.union(a.id, b.id)

    warps_of: dict[int, int] = {}

    def visit(block: Block, nw: int):
        for a in block.args:
            see(a)
            warps_of[a.id] = nw
        for op in block.ops:
            for v in op.results:
                see(v)
                warps_of[v.id] = nw
            for v in op.operands:
                see(v)
            n = op.name
            if n in O.ELEMENTWISE or n in ("broadcast", "load", "store", "atomic_rmw",
                                             "atomic_cas", "umulhi", "math", "hint",
                                             "inline_asm"):
                same(op.operands + op.results)
            elif n in ("reduce", "reduce_combine"):
                same(op.operands)
                if not op.results[0].type.is_scalar:
                    same(op.results)
                    slice_edges.append(("reduce", op))
            elif n == "scan" or n == "sort" and op.attrs["k"] == op.operands[0].shape[-1]:
                same(op.operands + op.results)
            elif n == "histogram":
                same(op.operands)
            elif n == "expand_dims":
                slice_edges.append(("expand", op))
            elif n in _RELABEL:
                if n in ("join", "cat"):
                    same(op.operands)
                elif n == "gather":
                    same([op.operands[1], op.result])
                elif n == "flip":
                    same(op.operands + op.results)
                if n not in ("gather", "flip"):
                    relabels.append(op)
            elif n in ("dot", "wgmma"):
                same([op.operands[2], op.result])
                dots.append(op)
            elif n == "smem_alloc":
                op.result.type = op.result.type.with_layout(
                    shared_layout(op.result.shape[-2:], op.result.dtype))
            elif n == "for":
                body = op.regions[0]
                y = body.ops[-1]
                for init, arg, yv, res in zip(op.operands[3:], body.args[1:], y.operands,
                                              op.results):
                    same([init, arg, yv, res])
            elif n == "while":
                cond, body = op.regions
                y = body.ops[-1]
                for init, ca, ba, yv, res in zip(op.operands, cond.args, body.args, y.operands,
                                                 op.results):
                    same([init, ca, ba, yv, res])
            elif n == "if":
                yt, ye = op.regions[0].ops[-1], op.regions[1].ops[-1]
                for a, b, r in zip(yt.operands, ye.operands, op.results):
                    same([a, b, r])
            roles = op.attrs.get("roles") if n == "if" else None
            for i, r in enumerate(op.regions):
                visit(r, roles[i][1] * 4 if roles else nw)

    visit(fn.body, num_warps)

    classes: dict[int, list[Value]] = {}
    for vid, v in values.items():
        classes.setdefault(uf.find(vid), []).append(v)

    def cls(v: Value) -> int:
        return uf.find(v.id)

    # the widest element each class moves through memory decides its vector width
    elem_bytes: dict[int, int] = {}
    for vid, v in values.items():
        if v.dtype.is_ptr():
            c = uf.find(vid)
            elem_bytes[c] = max(elem_bytes.get(c, 1), v.dtype.element_ty.itemsize)

    def class_warps(c: int) -> int:
        ws = {warps_of.get(v.id, num_warps) for v in classes[c]}
        if len(ws) > 1:
            v = classes[c][0]
            raise CompileError(f"a tile of shape {list(v.shape)} is used by roles of "
                               f"{' and '.join(str(w) for w in sorted(ws))} warps",
                               _loc_of(classes[c]),
                               "each role (branch of `if kit.warpgroup_id() ...`) makes and "
                               "uses its own tiles; pass data through shared memory")
        return ws.pop()

    def max_shape(c: int) -> tuple[int, ...]:
        best = None
        for v in classes[c]:
            if best is None or _numel(v.shape) > _numel(best):
                best = v.shape
        return best

    layout: dict[int, Layout] = {}
    ampere = is_ampere(fn)
    # classes whose rows are reduced or scaled by row vectors (softmax): see acc_layout.
    # Integer row vectors are indices (a GEMM's `rm[:, None] * N + rn[None, :]` epilogue
    # joins its accumulator's class): they broadcast from any warp grid
    row_classes = {cls(op.operands[0] if kind == "reduce" else op.result)
                   for kind, op in slice_edges if op.attrs["axis"] == 1 and
                   (kind == "reduce" or op.operands[0].dtype.is_floating())} \
        if ampere else set()
    for op in dots:
        c = cls(op.result)
        # wgmma: each warp owns 16 rows of its warpgroup's 64 (the m64nNk16 accumulator);
        # a role of 3 warpgroups holds a 192-row result, one m64 block per warpgroup
        nw = class_warps(c)
        if not (op.name == "wgmma" and not ampere and _three_groups(nw, max_shape(c))):
            nw = _pow2_warps(nw, classes[c])
        if op.name == "wgmma" and ampere:  # kit.mma below sm_90: mma.sync fragments
            layout[c] = acc_layout(op, max_shape(c), nw, c in row_classes)
        else:
            layout[c] = Mma(nw, 1) if op.name == "wgmma" else mma_layout(max_shape(c), nw)

    # children of slice edges, by class: [(parent class, axis, kind)]
    wants: dict[int, list[tuple[int, int, str]]] = {}
    for kind, op in slice_edges:
        if kind == "reduce":
            child, parent, axis = cls(op.results[0]), cls(op.operands[0]), op.attrs["axis"]
        else:
            child, parent, axis = cls(op.operands[0]), cls(op.result), op.attrs["axis"]
        wants.setdefault(child, []).append((parent, axis, kind))
    for w in wants.values():
        w.sort(key=lambda t: t[2] != "reduce")

    # expand_dims of a dot accumulator (a 3-d dot's slices put back): the result's class,
    # when nothing else lays it out, keeps the accumulator's registers (Expanded), so a
    # [B, M, N] accumulator carried through a loop stays B mma tiles and needs no conversion
    anchors = set(layout)
    lifts: dict[int, tuple[int, int]] = {}
    for kind, op in slice_edges:
        if kind == "expand" and cls(op.operands[0]) in anchors and cls(op.result) not in anchors:
            lifts.setdefault(cls(op.result), (cls(op.operands[0]), op.attrs["axis"]))

    # results of relabeling shape ops, by class: [(operand class, layout maker)]
    derives: dict[int, list[tuple[int, object]]] = {}
    for op in relabels:
        src = cls(op.operands[0])
        for r in op.results:
            derives.setdefault(cls(r), []).append((src, _relabeled(op)))

    def derived(c: int) -> Layout | None:
        for src, make in derives.get(c, []):
            if src in layout:
                return make(layout[src])
        for parent, axis, _kind in wants.get(c, []):
            if parent in layout:
                return Slice(layout[parent], axis)
        if c in lifts and not derives.get(c) and not wants.get(c):
            child, axis = lifts[c]
            return Expanded(layout[child], axis)
        return None

    def waits(c: int) -> bool:
        return any(src not in layout for src, _ in derives.get(c, [])) or \
            any(parent not in layout for parent, _, _ in wants.get(c, []))

    def blocked(c: int) -> Layout:
        if any(not _is_pow2(d) for d in max_shape(c)):
            v = classes[c][0]
            raise CompileError(f"a tile of shape {list(v.shape)}: dims that are not powers of "
                               f"two are for kit.mma results of a role of 3 warpgroups "
                               f"(64 rows each) and the tiles derived from them (elementwise, "
                               f"row vectors); this one has no such layout", _loc_of(classes[c]),
                               "round the block up to a power of two and mask the tail")
        vec = 16 // elem_bytes.get(c, 4)
        return default_blocked(max_shape(c), _pow2_warps(class_warps(c), classes[c]), vec)

    # highest rank first; a class derived from one not laid out yet waits for it (without
    # shape ops that relabel, every parent is laid out first and nothing waits)
    pending = [c for c in sorted(classes, key=lambda c: -len(classes[c][0].shape))
               if c not in layout]
    while pending:
        rest = []
        for c in pending:
            lay = derived(c)
            if lay is None and waits(c):
                rest.append(c)
                continue
            layout[c] = lay if lay is not None else blocked(c)
        if len(rest) == len(pending):  # a cycle (a loop-carried relabeling): break it
            layout[rest[0]] = blocked(rest[0])
            rest = rest[1:]
        pending = rest

    for c, vs in classes.items():
        for v in vs:
            v.type = v.type.with_layout(layout[c])

    for op in fn.walk():
        if op.name == "smem_index":
            op.result.type = op.result.type.with_layout(op.operands[0].type.layout)
        elif op.name == "smem_trans":
            lay = op.operands[0].type.layout
            op.result.type = op.result.type.with_layout(
                dataclasses.replace(lay, transposed=not lay.transposed) if lay else None)
    _insert_conversions(fn.body, fn)
    _check_row_blocks(fn)
    return fn


# ops that move data between warps (or relabel coordinates), which the layouts of a tile
# over a role of 3 warpgroups (warps 12-15 absent) cannot take part in
_CROSS_WARP = frozenset({"reduce", "reduce_combine", "scan", "sort", "histogram",
                         "convert_layout", "permute", "reshape", "join", "split", "cat",
                         "flip", "gather"})


def _check_row_blocks(fn: Function) -> None:
    """A tile of 192 rows over 12 warps holds its rows in warps 0-11 of a 16-warp layout:
    elementwise ops, pointer loads and stores, kit.mma and row reductions (no warp bit moves
    along the reduced dim) stay inside each warp; what exchanges data across warps would
    wait for, or read, warps that do not exist, so it is refused here."""
    for op in fn.walk():
        if op.name not in _CROSS_WARP:
            continue
        for v in op.operands:
            if v.type.is_scalar or v.type.is_shared or v.type.layout is None or \
                    all(_is_pow2(d) for d in v.shape):
                continue
            if op.name == "convert_layout" and isinstance(op.result.type.layout, DotOperand):
                continue   # the accumulator to the A fragment: within each thread
            if op.name in ("reduce", "reduce_combine"):
                lin = v.type.layout.to_linear(tuple(v.shape))
                if not any(b[op.attrs["axis"]] for b in lin.warp):
                    continue
            raise CompileError(f"{op.name} of a tile of shape {list(v.shape)} (a kit.mma "
                               f"result over 3 warpgroups) is not supported: only "
                               f"elementwise ops, loads and stores through pointers, kit.mma "
                               f"and reductions along the rows' other dim (axis=1) are",
                               op.loc, "reduce along axis=1, or work on 128- or 256-row "
                               "tiles")


# Shape ops whose result takes its operand's layout relabeled (kitjit/ir/layouts.py), so
# each thread keeps its elements; flip keeps the layout (the same class), gather takes the
# index's.
_RELABEL = frozenset({"permute", "reshape", "join", "split", "cat", "flip", "gather"})


def _relabeled(op: Op):
    n = op.name
    if n == "permute":
        return lambda lay: Permuted(lay, op.attrs["dims"])
    if n == "reshape":
        return lambda lay: Reshaped(lay, op.operands[0].shape, op.result.shape)
    if n == "join":
        return Joined
    if n == "split":
        return Halved
    return Stacked  # cat


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _three_groups(nw: int, shape) -> bool:
    """A wgmma result over a role of a whole number of warpgroups that is not a power of
    two (3: FA4's 192-row tile): one m64 row block per warpgroup, so every warp owns 16
    rows and the layout's fourth warp bit numbers warpgroup 2 (`layouts._bits`)."""
    return nw % 4 == 0 and not _is_pow2(nw) and shape[0] == 16 * nw


def _pow2_warps(nw: int, vals) -> int:
    if nw & (nw - 1):
        raise CompileError(f"a tile is spread over {nw} warps, which is not a power of two",
                           _loc_of(vals), "with num_warps a multiple of 4 (12, 20, ...), keep "
                           "tiles inside roles of 1, 2 or 4 warpgroups "
                           "(if kit.warpgroup_id() == 0: ... else: ...)")
    return nw


def _loc_of(vals):
    for v in vals:
        loc = getattr(v.owner, "loc", None)
        if loc is not None:
            return loc
    return None


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _convert(v: Value, lay: Layout, loc) -> tuple[Op, Value]:
    out = Value(v.type.with_layout(lay), v.name)
    op = Op("convert_layout", [v], [out], {}, [], loc)
    return op, out


def _insert_conversions(block: Block, fn: Function) -> None:
    new_ops: list[Op] = []
    for op in block.ops:
        for r in op.regions:
            _insert_conversions(r, fn)
        if op.name == "expand_dims":
            x, r = op.operands[0], op.result
            want = Slice(r.type.layout, op.attrs["axis"])
            if x.type.layout != want:
                cop, y = _convert(x, want, op.loc)
                new_ops.append(cop)
                op.operands[0] = y
            new_ops.append(op)
        elif op.name in ("reduce", "reduce_combine") and not op.results[0].type.is_scalar:
            want = Slice(op.operands[0].type.layout, op.attrs["axis"])
            new_ops.append(op)
            for i, r in enumerate(list(op.results)):
                if r.type.layout != want:
                    t = Value(r.type.with_layout(want), r.name)
                    op.results[i] = t
                    t.owner = op
                    cop = Op("convert_layout", [t], [r], {}, [], op.loc)
                    r.owner = cop
                    new_ops.append(cop)
        elif op.name == "wgmma" and not op.operands[0].type.is_shared:
            # A from registers: the m64nNk16 A fragment, which is the accumulator layout of
            # a previous wgmma converted to 16 bits (so P stays in registers for P @ V)
            want = DotOperand(0, op.result.type.layout)
            x = op.operands[0]
            if x.type.layout != want:
                cop, y = _convert(x, want, op.loc)
                new_ops.append(cop)
                op.operands[0] = y
            new_ops.append(op)
        elif op.name == "dot":
            mma = op.result.type.layout
            assert isinstance(mma, Mma)
            for i in (0, 1):
                want = DotOperand(i, mma)
                x = op.operands[i]
                if x.type.layout != want:
                    cop, y = _convert(x, want, op.loc)
                    new_ops.append(cop)
                    op.operands[i] = y
            new_ops.append(op)
        else:
            new_ops.append(op)
    block.ops = new_ops

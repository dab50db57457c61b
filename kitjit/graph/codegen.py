"""kitjit source for fused groups: the shared helpers (tile pointers laid out the way memory
runs, masks only where a tile can leave the tensor, elementwise formulas) and the row
kernels (elementwise chains, reductions, softmax and norms along one axis, whole rows in
registers). Matmul kernels are in codegen_mm.py, attention in codegen_attn.py. Shapes and
strides are baked in as constants, so the source reads like a kernel written for one
problem."""

from __future__ import annotations

import math
from dataclasses import dataclass

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
    return Access.of(t).aligned(space)


@dataclass
class Access:
    """A buffer read or written as a tensor of `shape` with `strides` (elements)."""

    name: str
    shape: tuple
    strides: tuple

    @classmethod
    def of(cls, t: Tensor) -> Access:
        return cls(buf(t), t.shape, buffer_strides(t))

    def aligned(self, space) -> list[int]:
        st, sh = self.strides, self.shape
        off = len(space) - len(sh)
        return [0 if i < off or sh[i - off] == 1 else st[i - off] for i in range(len(space))]


@dataclass
class Index:
    """A 1-D index vector `name` that walks `axes` of a space (flattened row-major; the
    product of their sizes is `size`), valid where `mask` holds (None: always)."""

    name: str
    axes: tuple
    mask: str | None = None

    def offset(self, acc: Access, space) -> str:
        st = acc.aligned(space)
        return flat_offset([space[a] for a in self.axes], [st[a] for a in self.axes],
                           self.name)


def _col(e: str, name: str, where: str) -> str:
    """`e` (an offset expression of index `name`) broadcast along a 2-D tile."""
    if e == "0":
        e = f"{name} * 0"      # pointers must have the tile's full shape (Triton's rule)
    if not e.replace("_", "").isalnum():
        e = f"({e})"
    return f"{e}{where}"


def tile_ptr(acc: Access, space, b: Index | None, r: Index, c: Index
             ) -> tuple[str, str | None, bool]:
    """(pointers, mask, transposed) of the [r, c] tile of `acc` seen in `space`; batch
    axes follow `b`. transposed: memory runs along r, so the pointers are built as the
    [c, r] tile (each thread's run stays contiguous: 16-byte loads) and the caller
    transposes the loaded tile in registers (kit.trans)."""
    ro, co = r.offset(acc, space), c.offset(acc, space)
    parts = [acc.name]
    if b is not None:
        bo = b.offset(acc, space)
        if bo != "0":
            parts.append(bo if bo.replace("_", "").isalnum() or " " not in bo else f"({bo})")
    trans = ro == r.name and co != c.name
    if trans:
        r, c, ro, co = c, r, co, ro
    parts += [_col(ro, r.name, "[:, None]"), _col(co, c.name, "[None, :]")]
    masks = [f"({m})[:, None]" if " " in m else f"{m}[:, None]" for m in [r.mask] if m] + \
        [f"({m})[None, :]" if " " in m else f"{m}[None, :]" for m in [c.mask] if m]
    return " + ".join(parts), " & ".join(masks) or None, trans


def load_tile(acc: Access, space, b: Index | None, r: Index, c: Index,
              other: str = "0.0") -> str:
    p, m, trans = tile_ptr(acc, space, b, r, c)
    e = f"kit.load({p}, mask={m}, other={other})" if m else f"kit.load({p})"
    return f"kit.trans({e})" if trans else e


def load_vec(acc: Access, space, b: Index | None, r: Index, other: str = "0.0",
             extra: str = "0") -> str:
    """The 1-D tile of `acc` along r (plus the scalar offset `extra`)."""
    parts = [acc.name]
    for o in (b.offset(acc, space) if b is not None else "0", extra):
        if o != "0":
            parts.append(f"({o})" if " " in o else o)
    ro = r.offset(acc, space)
    parts.append(f"{r.name} * 0" if ro == "0" else ro)
    p = " + ".join(parts)
    return f"kit.load({p}, mask={r.mask}, other={other})" if r.mask else f"kit.load({p})"


def store_tile(acc: Access, space, b: Index | None, r: Index, c: Index, value: str) -> str:
    """A store of the [r, c] tile `value` (fp32 or any dtype: converted to the buffer's)."""
    ro, co = r.offset(acc, space), c.offset(acc, space)
    parts = [acc.name]
    if b is not None and (bo := b.offset(acc, space)) != "0":
        parts.append(f"({bo})" if " " in bo else bo)
    parts += [_col(ro, r.name, "[:, None]"), _col(co, c.name, "[None, :]")]
    masks = [f"({m})[:, None]" if " " in m else f"{m}[:, None]" for m in [r.mask] if m] + \
        [f"({m})[None, :]" if " " in m else f"{m}[None, :]" for m in [c.mask] if m]
    v = f"({value}).to({acc.name}.dtype.element_ty)" if " " in value else \
        f"{value}.to({acc.name}.dtype.element_ty)"
    m = " & ".join(masks)
    return f"kit.store({' + '.join(parts)}, {v}, mask={m})" if m else \
        f"kit.store({' + '.join(parts)}, {v})"


def lin(i: str, n: int, j) -> str:
    """`i * n + j`, written short when n is 1 or j is 0."""
    e = i if n == 1 else f"{i} * {n}"
    e = e if j in (0, "0") else f"{e} + {j}"
    return e if e == i else f"({e})"


def bound(name: str, n: int, block: int, always: bool = False) -> str | None:
    """The mask `name < n` of an index running over blocks of `block`, or None when every
    block is whole."""
    return f"{name} < {n}" if always or n % block else None


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



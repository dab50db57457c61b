"""Register layouts: how a tile's elements are spread over the registers, lanes and warps of
a CTA.

Every layout is lowered to one form, a `LinearLayout`: for a tile of a given (power-of-two)
shape, each bit of the register index, of the lane id and of the warp id contributes a fixed
coordinate vector, and a thread's element coordinates are the XOR (here also the sum, as the
bits never overlap) of the contributions of the bits that are set. A zero vector for a lane
or warp bit means those threads hold copies (broadcast). This one form lets the backend
write every rule once - elementwise ops, broadcasts, reductions over lanes and warps,
conversions through shared memory, mma fragments - by matching coordinates, whatever the
layout kinds involved (the idea of Triton's linear layouts, kept small).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache

Coord = tuple[int, ...]


def _log2(n: int) -> int:
    assert n > 0 and n & (n - 1) == 0, f"{n} is not a power of two"
    return n.bit_length() - 1


def _bits(n: int) -> int:
    """Warp-id bits that number n warps: log2(n), rounded up for a role of 3 warpgroups
    (12 warps: ids 0-11 of a 16-warp layout, whose warps 12-15 do not exist)."""
    return (n - 1).bit_length()


def axis_vec(rank: int, dim: int, val: int) -> Coord:
    """The coordinate `val` along `dim`, zero elsewhere (a layout basis vector)."""
    return tuple(val if d == dim else 0 for d in range(rank))


@dataclass(frozen=True)
class LinearLayout:
    shape: tuple[int, ...]
    reg: tuple[Coord, ...]
    lane: tuple[Coord, ...]
    warp: tuple[Coord, ...]

    @property
    def nregs(self) -> int:
        return 1 << len(self.reg)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def reg_coords(self) -> list[Coord]:
        """The register-index part of the coordinate of every register."""
        return _reg_coords(self.reg, self.rank)

    def reg_index(self) -> dict[Coord, int]:
        return {c: i for i, c in enumerate(self.reg_coords())}

    def thread_terms(self, dim: int) -> list[tuple[str, int, int]]:
        """(('lane'|'warp'), bit, value) for each id bit that moves coordinate `dim`."""
        terms = [("lane", k, b[dim]) for k, b in enumerate(self.lane) if b[dim]]
        terms += [("warp", k, b[dim]) for k, b in enumerate(self.warp) if b[dim]]
        return terms


@cache
def _reg_coords(reg: tuple[Coord, ...], rank: int) -> list[Coord]:
    out = [tuple([0] * rank)]
    for b in reg:
        out = out + [tuple(x ^ y for x, y in zip(c, b)) for c in out]
    return out


def _finish(shape, reg, lane, warp) -> LinearLayout:
    z = tuple([0] * len(shape))
    return LinearLayout(tuple(shape), tuple(r for r in reg if r != z), tuple(lane), tuple(warp))


class Layout:
    """A shape-independent register layout; `to_linear(shape)` makes it concrete."""

    num_warps: int

    def to_linear(self, shape: tuple[int, ...]) -> LinearLayout:
        return _to_linear(self, tuple(shape))

    def _linear(self, shape: tuple[int, ...]) -> LinearLayout:
        raise NotImplementedError


@lru_cache(maxsize=4096)
def _to_linear(layout: Layout, shape: tuple[int, ...]) -> LinearLayout:
    return layout._linear(shape)


@dataclass(frozen=True)
class Blocked(Layout):
    """Triton's blocked layout: `spt` contiguous elements per thread, `tpw` threads per warp and
    `wpc` warps per CTA along each dim; `order` lists dims fastest first; tiles larger than
    spt*tpw*wpc repeat over registers."""

    spt: tuple[int, ...]
    tpw: tuple[int, ...]
    wpc: tuple[int, ...]
    order: tuple[int, ...]

    @property
    def num_warps(self) -> int:
        n = 1
        for w in self.wpc:
            n *= w
        return n

    def _linear(self, shape):
        rank = len(shape)
        assert rank == len(self.spt)

        def clip(d, v):
            return axis_vec(rank, d, v if v < shape[d] else 0)

        reg, lane, warp = [], [], []
        for d in self.order:
            reg += [clip(d, 1 << b) for b in range(_log2(self.spt[d]))]
        for d in self.order:
            lane += [clip(d, self.spt[d] << b) for b in range(_log2(self.tpw[d]))]
        for d in self.order:
            warp += [clip(d, self.spt[d] * self.tpw[d] << b) for b in range(_log2(self.wpc[d]))]
        for d in self.order:
            v = self.spt[d] * self.tpw[d] * self.wpc[d]
            while v < shape[d]:
                reg.append(axis_vec(rank, d, v))
                v <<= 1
        return _finish(shape, reg, lane, warp)

    def __str__(self):
        f = ",".join
        return (f"#blocked<spt=[{f(map(str, self.spt))}] tpw=[{f(map(str, self.tpw))}] "
                f"wpc=[{f(map(str, self.wpc))}] order=[{f(map(str, self.order))}]>")


@dataclass(frozen=True)
class Slice(Layout):
    """The layout of a tile that lost dim `dim` of a `parent`-laid-out tile (a reduction's
    result, or the operand of `x[:, None]`)."""

    parent: Layout
    dim: int

    @property
    def num_warps(self) -> int:
        return self.parent.num_warps

    def _linear(self, shape):
        pshape = shape[: self.dim] + (1,) + shape[self.dim:]
        p = self.parent.to_linear(pshape)

        def drop(b):
            return b[: self.dim] + b[self.dim + 1:]

        return _finish(shape, [drop(b) for b in p.reg], [drop(b) for b in p.lane],
                       [drop(b) for b in p.warp])

    def __str__(self):
        return f"#slice<dim={self.dim}, {self.parent}>"


@dataclass(frozen=True)
class Mma(Layout):
    """The accumulator of `mma.sync.m16n8k16`: `wm` x `wn` warps tile the output, each warp
    owning 16x8 fragments (lane l holds rows l/4 and l/4+8, columns 2(l%4) and 2(l%4)+1).
    A warp's n-tiles are 8 * wn columns apart (the warps' 8-column tiles interleaved), or,
    with `n_contig`, adjacent (each warp owns N / wn consecutive columns: a widened store
    of its rows then fills whole 32-byte sectors)."""

    wm: int
    wn: int
    n_contig: bool = False

    @property
    def num_warps(self) -> int:
        return self.wm * self.wn

    def n_tiles(self, N: int) -> list[int]:
        """Column offsets, from the warp's first column, of a warp's 8-column n-tiles."""
        if self.n_contig:
            return list(range(0, max(8, N // self.wn), 8))
        return list(range(0, N, 8 * self.wn))

    def _n_bases(self, N: int, v) -> tuple[list, list]:
        """(register bases, warp bases) along N: the n-tiles of a warp and the warps."""
        if self.n_contig:   # (a narrower shape, such as a broadcast column: bases past N
            span = max(8, N // self.wn)                 # are 0, as in the interleaved form)
            reg = [v(0, n) for n in (8 << i for i in range(_log2(span // 8)))]
            return reg, [v(0, span << i) for i in range(_log2(self.wn))]
        reg = []
        n = 8 * self.wn
        while n < N:
            reg.append((0, n))
            n <<= 1
        return reg, [v(0, 8 << i) for i in range(_log2(self.wn))]

    def _linear(self, shape):
        assert len(shape) == 2
        M, N = shape

        def v(m, n):
            return (m if m < M else 0, n if n < N else 0)

        reg = [v(0, 1), v(8, 0)]
        lane = [v(0, 2), v(0, 4), v(1, 0), v(2, 0), v(4, 0)]
        n_reg, n_warp = self._n_bases(N, v)
        warp = [v(16 << i, 0) for i in range(_bits(self.wm))] + n_warp
        reg += n_reg
        m = 16 * self.wm
        while m < M:
            reg.append((m, 0))
            m <<= 1
        return _finish(shape, reg, lane, warp)

    def __str__(self):
        contig = ", n_contig" if self.n_contig else ""
        return f"#mma<m16n8, warps=[{self.wm},{self.wn}]{contig}>"


@dataclass(frozen=True)
class DotOperand(Layout):
    """The A (`idx` 0, [M,K]) or B (`idx` 1, [K,N]) fragments of `mma.sync.m16n8k16` for 16-bit
    inputs, matching the accumulator layout `parent`; register pairs pack into 32-bit words
    in the order the instruction reads them."""

    idx: int
    parent: Mma

    @property
    def num_warps(self) -> int:
        return self.parent.num_warps

    def _linear(self, shape):
        assert len(shape) == 2
        R, C = shape
        wm, wn = self.parent.wm, self.parent.wn

        def v(a, b):
            return (a if a < R else 0, b if b < C else 0)

        if self.idx == 0:  # [M, K]
            reg = [v(0, 1), v(8, 0), v(0, 8)]
            lane = [v(0, 2), v(0, 4), v(1, 0), v(2, 0), v(4, 0)]
            warp = [v(16 << i, 0) for i in range(_bits(wm))] + [(0, 0)] * _log2(wn)
            k = 16
            while k < C:
                reg.append((0, k))
                k <<= 1
            m = 16 * wm
            while m < R:
                reg.append((m, 0))
                m <<= 1
        else:  # [K, N]
            reg = [v(1, 0), v(8, 0)]
            lane = [v(2, 0), v(4, 0), v(0, 1), v(0, 2), v(0, 4)]
            n_reg, n_warp = self.parent._n_bases(C, v)
            warp = [(0, 0)] * _bits(wm) + n_warp
            k = 16
            while k < R:
                reg.append((k, 0))
                k <<= 1
            reg += n_reg
        return _finish(shape, reg, lane, warp)

    def __str__(self):
        return f"#dot_op<{'ab'[self.idx]}, {self.parent}>"


def default_blocked(shape: tuple[int, ...], num_warps: int, vec: int) -> Blocked:
    """A coalesced blocked layout for `shape`: `vec` contiguous elements per thread along the
    last dim (16 bytes of the widest element the kernel moves), lanes then warps filling the
    fastest dims first."""
    rank = len(shape)
    order = tuple(range(rank - 1, -1, -1))
    spt = [1] * rank
    tpw = [1] * rank
    wpc = [1] * rank
    spt[rank - 1] = max(1, min(vec, shape[rank - 1]))
    lanes, warps = 32, num_warps
    for d in order:
        room = max(1, shape[d] // (spt[d]))
        t = min(lanes, room)
        tpw[d] = t
        lanes //= t
        room = max(1, room // t)
        w = min(warps, room)
        wpc[d] = w
        warps //= w
    tpw[order[-1]] *= lanes
    wpc[order[-1]] *= warps
    return Blocked(tuple(spt), tuple(tpw), tuple(wpc), order)


def mma_layout(shape: tuple[int, int], num_warps: int) -> Mma:
    """Warps over M first (each warp owns 16 rows), the rest over N."""
    M, N = shape
    wm = 1
    while wm * 2 <= num_warps and 16 * wm * 2 <= M:
        wm *= 2
    wn = num_warps // wm
    while wn > 1 and 8 * wn > N:  # more warps than the tile has: the extra ones hold copies
        wn //= 2
        wm *= 2
    return Mma(wm, num_warps // wm)


@dataclass(frozen=True)
class SharedLayout:
    """How a 2-d tile sits in shared memory: rows of `chunk` columns, `swizzle` bytes wide
    (128/64/32, or 0 for none); tiles wider than one swizzle span are stored as column chunks
    one after the other. One layout serves the TMA box (whose inner dim is one chunk) and the
    WGMMA descriptor."""

    swizzle: int
    chunk: int  # columns per chunk
    transposed: bool = False  # a `.T` view: logical [cols, rows] of the stored [rows, cols]

    def __str__(self):
        t = ", transposed" if self.transposed else ""
        return f"#shared<swizzle={self.swizzle}B, chunk={self.chunk}{t}>"


def shared_layout(shape: tuple[int, ...], dtype) -> SharedLayout | None:
    """The widest swizzle whose span a row fills in whole chunks (for power-of-two rows that
    is the widest the row fills; a 160-byte row takes 32-byte chunks, five of them). Tiles
    of fewer than 8 rows are not swizzled: the pattern is a function of address bits 7.. and
    repeats every 8 rows, so only tiles of 8 rows or more keep their column chunks and stages
    at whole repeats (a (stages, 1, 64) fp32 tile's stage 1 would start 256 bytes into one,
    where TMA XORs differently). Rows need not be a power of two: a multiple of 8 keeps every
    chunk at a whole repeat (`shared_shape_error` says what kit.shared accepts)."""
    if len(shape) != 2:
        return None
    row_bytes = shape[1] * dtype.itemsize
    if shape[0] >= 8:
        for sw in (128, 64, 32):
            if row_bytes >= sw and row_bytes % sw == 0:
                return SharedLayout(sw, sw // dtype.itemsize)
    return SharedLayout(0, shape[1])


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def shared_shape_error(rows: int, cols: int, itemsize: int) -> str | None:
    """Why a (rows, cols) shared tile cannot be laid out, or None. Power-of-two dims always
    can. Other dims are whole swizzle pieces: rows a multiple of 8 (the swizzle atom, so
    each column chunk starts at a whole repeat of the pattern: 1024 bytes for 128-byte
    rows), cols a whole number of chunks of a 32/64/128-byte swizzle (FA4's 192-row Q tile
    and 128x80 K/V tiles)."""
    if rows < 1 or cols < 1:
        return "dims must be positive"
    if not _pow2(rows) and rows % 8:
        return f"rows must be a power of two or a multiple of 8, got {rows}"
    if not _pow2(cols):
        if rows < 8:
            return (f"cols that are not a power of two ({cols}) need a swizzled tile: at "
                    f"least 8 rows, got {rows}")
        if cols * itemsize % 32:
            return (f"cols that are not a power of two must fill whole 32-byte swizzle "
                    f"chunks: {cols} x {itemsize} bytes = {cols * itemsize} bytes a row")
    return None


# ------------------------------------------------------------------ layouts of shape ops
# The result of a shape op that only relabels coordinates (permute, reshape, join, split,
# cat) takes its operand's layout with every basis vector relabeled: each thread keeps the
# elements it had, so the op moves no data (backend/lower/shape.py checks this and falls
# back to shared memory where a result ends up in another layout).
#
# A layout class also holds tiles of other shapes than the op's result: `broadcast` grows a
# dim of size 1 and keeps the layout, `x[None, :]` asks for a Slice of it (the parent at a
# shape with a 1 in that dim). A relabeling is defined at its own (natural) shape only, so
# at any other shape it is `fit` from there, as a blocked layout meets a shape other than
# its tile: bases past a dim's end are dropped (copies) and a larger dim repeats over new
# register bits. Every shape then gets a layout that holds each element, and tiles of one
# class agree on the lane and warp bases (what broadcast and elementwise lowering assume).
def fit(lin: LinearLayout, shape: tuple[int, ...]) -> LinearLayout:
    """`lin` (laid out at `lin.shape`) at `shape`: clipped where smaller, repeated over
    registers where larger."""
    shape = tuple(shape)
    if lin.shape == shape:
        return lin
    rank = len(shape)
    assert rank == lin.rank, (lin, shape)

    def clip(b):
        return tuple(x if x < shape[d] else 0 for d, x in enumerate(b))

    reg = [clip(b) for b in lin.reg]
    for d in range(rank):
        v = lin.shape[d]
        while v < shape[d]:
            reg.append(axis_vec(rank, d, v))
            v <<= 1
    return _finish(shape, reg, [clip(b) for b in lin.lane], [clip(b) for b in lin.warp])


def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    return tuple(strides)


def reshape_coord(c: Coord, src: tuple[int, ...], dst: tuple[int, ...]) -> Coord:
    """The coordinate in `dst` of the element at `c` in `src`, both row-major."""
    flat = sum(x * s for x, s in zip(c, row_major_strides(src)))
    return tuple(flat // s % n for s, n in zip(row_major_strides(dst), dst))


def _mapped(shape, p: LinearLayout, f, extra_reg: tuple[Coord, ...] = (),
            first_reg: tuple[Coord, ...] = ()) -> LinearLayout:
    return _finish(shape, list(first_reg) + [f(b) for b in p.reg] + list(extra_reg),
                   [f(b) for b in p.lane], [f(b) for b in p.warp])


@dataclass(frozen=True)
class Permuted(Layout):
    """`kit.permute(x, dims)` of a `parent`-laid-out x: result dim i is x's dim dims[i]."""

    parent: Layout
    dims: tuple[int, ...]

    @property
    def num_warps(self) -> int:
        return self.parent.num_warps

    def _linear(self, shape):
        src = [0] * len(shape)
        for i, d in enumerate(self.dims):
            src[d] = shape[i]
        p = self.parent.to_linear(tuple(src))
        return _mapped(shape, p, lambda b: tuple(b[d] for d in self.dims))

    def __str__(self):
        return f"#permuted<{list(self.dims)}, {self.parent}>"


@dataclass(frozen=True)
class Reshaped(Layout):
    """`kit.reshape(x, shape)` (row-major) of a `parent`-laid-out x of shape `src`."""

    parent: Layout
    src: tuple[int, ...]
    dst: tuple[int, ...]  # the reshape's result shape (elsewhere: `fit` from it)

    @property
    def num_warps(self) -> int:
        return self.parent.num_warps

    def _linear(self, shape):
        p = self.parent.to_linear(self.src)
        nat = _mapped(self.dst, p, lambda b: reshape_coord(b, self.src, self.dst))
        return fit(nat, shape)

    def __str__(self):
        f = ",".join
        return f"#reshaped<[{f(map(str, self.src))}] to [{f(map(str, self.dst))}], {self.parent}>"


@dataclass(frozen=True)
class Joined(Layout):
    """`kit.join(a, b)` of `parent`-laid-out a and b: the new last dim of size 2 is the
    fastest register bit, so each thread holds a's and b's element side by side."""

    parent: Layout

    @property
    def num_warps(self) -> int:
        return self.parent.num_warps

    def _linear(self, shape):
        nat = tuple(shape[:-1]) + (2,)  # a join's result ends in 2 (elsewhere: `fit`)
        p = self.parent.to_linear(nat[:-1])
        return fit(_mapped(nat, p, lambda b: b + (0,),
                           first_reg=(axis_vec(len(nat), len(nat) - 1, 1),)), shape)

    def __str__(self):
        return f"#joined<{self.parent}>"


@dataclass(frozen=True)
class Halved(Layout):
    """Each result of `kit.split(x)` of a `parent`-laid-out x: x's layout without its last
    dim of size 2 (where that dim sat on lanes or warps, those threads now hold copies)."""

    parent: Layout

    @property
    def num_warps(self) -> int:
        return self.parent.num_warps

    def _linear(self, shape):
        p = self.parent.to_linear(tuple(shape) + (2,))
        return _mapped(shape, p, lambda b: b[:-1])

    def __str__(self):
        return f"#halved<{self.parent}>"


@dataclass(frozen=True)
class Stacked(Layout):
    """`kit.cat(a, b)` of `parent`-laid-out a and b: the top bit of dim 0 (which input) is the
    slowest register bit, so each thread holds a's elements and then b's."""

    parent: Layout

    @property
    def num_warps(self) -> int:
        return self.parent.num_warps

    def _linear(self, shape):
        nat = (max(shape[0], 2),) + tuple(shape[1:])  # a cat's dim 0 is >= 2 (else `fit`)
        half = (nat[0] // 2,) + nat[1:]
        p = self.parent.to_linear(half)
        return fit(_mapped(nat, p, lambda b: b, extra_reg=(axis_vec(len(nat), 0, half[0]),)),
                   shape)

    def __str__(self):
        return f"#stacked<{self.parent}>"


@dataclass(frozen=True)
class Expanded(Layout):
    """`x[None]`-style `expand_dims(x, dim)` of a `parent`-laid-out x, laid out from x: the
    new size-1 dim has no bases, so each thread keeps x's elements (the inverse of Slice).
    Given to the result of an expand_dims of a dot accumulator (a 3-d dot's slices stacked
    back), so a [B, M, N] accumulator is B mma tiles side by side in registers."""

    parent: Layout
    dim: int

    @property
    def num_warps(self) -> int:
        return self.parent.num_warps

    def _linear(self, shape):
        nat = shape[: self.dim] + (1,) + shape[self.dim + 1:]
        p = self.parent.to_linear(nat[: self.dim] + nat[self.dim + 1:])
        return fit(_mapped(nat, p, lambda b: b[: self.dim] + (0,) + b[self.dim:]), shape)

    def __str__(self):
        return f"#expanded<dim={self.dim}, {self.parent}>"

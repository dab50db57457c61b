"""Level 2 below sm_90 (Ampere and Ada: sm_80 / sm_86 / sm_89), the same ops as Hopper's:

- `tma_load`: every thread of the role copies its 16-byte pieces of the box with
  `cp.async.cg` (pieces past the tensor's edge read as zeros: the `src-size` operand), then,
  after the last load of a run on one barrier, `cp.async.mbarrier.arrive.noinc`: the barrier
  completes its phase when every thread's copies have landed (frontend/ampere.py sets its
  arrival count). The tensor comes as a row descriptor (base, rows, cols, row stride) in the
  kernel parameter where Hopper has its CUtensorMap (kitjit/runtime/ampere.py).
- `mbar_wait` spins on `mbarrier.test_wait.parity` (sm_80 has no try_wait); `mbar_arrive`
  arrives once per warp (Hopper: once per warpgroup); no `.shared::cta` forms.
- `wgmma` (`kit.mma`): `ldmatrix.x4` fragments (`.trans` for an operand stored the other
  way round) from the swizzled shared tiles into `mma.sync.m16n8k16`, fp32 accumulation;
  A may come from registers (P @ V). Synchronous: `pending` has nothing to wait for.
- `tma_store`: predicated stores straight from the registers.

Shared tiles keep Hopper's layout (frontend: kitjit/ir/layouts.py `shared_layout`): rows cut
into chunks of `swizzle` bytes stored one after another, the 16-byte unit u of row r at
u ^ (r / (128 / swizzle)) % (swizzle / 16), TMA's pattern. Eight rows of one unit then sit
in eight different bank groups: ldmatrix reads and cp.async writes are conflict-free.

The address formulas are plain functions over `Arith`, which folds Python ints and emits
LLVM for run-time values, so tests/test_ampere.py runs the same formulas on integers to
simulate cp.async and ldmatrix on the CPU and check every fragment.
"""

from __future__ import annotations

import llvmlite.ir as ir

from kitjit.ir.core import Op, Value
from kitjit.ir.layouts import LinearLayout, SharedLayout

from ..nvvm import F32, GPTR, I8, I32, I64, VOID, asm, llvm_type
from .base import LoweringBase, LoweringError, _lin

AMPERE_ARCHS = ("sm_80", "sm_86", "sm_89")

#: True: every copy takes the clamped edge path (benchmarks/ampere.py times the in-bounds fast
#: path against it in one run). Not part of the disk cache's key: set it with the cache off.
_ALWAYS_CLAMP = False

#: True: the in-bounds copies are predicated on the box being inside instead of branched to,
#: and the edge path is a branch after them taken only when it is not: the fast copies then
#: share a basic block with the code before them (a GEMM's MMAs), and ptxas issues them in
#: the HMMAs' stall cycles instead of as a block of their own (benchmarks/NOTES.md, session
#: 11). Opt-in until timed; not part of the disk cache's key either.
_COPIES_IN_LINE = False

#: Ops a deferred edge path may be moved past (`_sm80_load_follows`): no effects, no regions.
_PURE = frozenset(("constant", "add", "sub", "mul", "floordiv", "mod", "smem_index"))


def _log2(n: int) -> int:
    return n.bit_length() - 1


class Arith:
    """i32 arithmetic on Python ints (folded) and LLVM values (emitted with `b`)."""

    def __init__(self, b: ir.IRBuilder | None = None):
        self.b = b

    @staticmethod
    def _c(x):
        return ir.Constant(I32, x) if isinstance(x, int) else x

    def _op(self, name: str, f, x, y):
        if isinstance(x, int) and isinstance(y, int):
            return f(x, y)
        return getattr(self.b, name)(self._c(x), self._c(y))

    def add(self, x, y):
        if isinstance(y, int) and y == 0:
            return x
        if isinstance(x, int) and x == 0:
            return y
        return self._op("add", lambda p, q: p + q, x, y)

    def mul(self, x, y):
        if isinstance(y, int) and y == 1:
            return x
        if isinstance(y, int) and y & (y - 1) == 0 and y:
            return self.shl(x, _log2(y))
        return self._op("mul", lambda p, q: p * q, x, y)

    def shl(self, x, n: int):
        return x if n == 0 else self._op("shl", lambda p, q: p << q, x, n)

    def shr(self, x, n: int):
        return x if n == 0 else self._op("lshr", lambda p, q: p >> q, x, n)

    def and_(self, x, m: int):
        return self._op("and_", lambda p, q: p & q, x, m)

    def xor(self, x, y):
        if isinstance(y, int) and y == 0:
            return x
        if isinstance(x, int) and x == 0:
            return y
        return self._op("xor", lambda p, q: p ^ q, x, y)


# ------------------------------------------------------------------ address formulas
def smem_offset(ar: Arith, lay: SharedLayout | None, rows: int, row_bytes: int, row, unit):
    """Byte offset, in a shared tile stored as [rows, row_bytes], of 16-byte unit `unit` of
    stored row `row` (see the module docstring for the swizzle)."""
    sw = lay.swizzle if lay is not None else 0
    if not sw:
        return ar.add(ar.mul(row, row_bytes), ar.shl(unit, 4))
    upc = sw // 16                                       # units per chunk row
    chunk = ar.shr(unit, _log2(upc))
    inner = ar.and_(unit, upc - 1)
    phase = ar.and_(ar.shr(row, _log2(128 // sw)), upc - 1)
    return ar.add(ar.add(ar.mul(chunk, rows * sw), ar.mul(row, sw)),
                  ar.shl(ar.xor(inner, phase), 4))


def split_const(lay: SharedLayout | None, rows: int, row_bytes: int, row_c: int,
                unit_c: int) -> tuple[int, int]:
    """(xor, add) such that the address of (row_l + row_c, unit_l + unit_c) is
    (address of (row_l, unit_l)) ^ xor + add, for a lane part and a constant part whose
    bits do not overlap and a constant row offset that is a multiple of 8 (the swizzle's
    period): the swizzle is linear over the bits, so the constant's units inside a chunk
    flip address bits 4-6 and its rows and chunks add whole rows. The ldmatrix and
    cp.async then take `[(base ^ xor) + add]`: one register per thread and operand
    instead of one per fragment (the loop-invariant offsets would fill the registers)."""
    sw = lay.swizzle if lay is not None else 0
    assert row_c % 8 == 0, row_c
    if not sw:
        return 0, row_c * row_bytes + 16 * unit_c
    upc = sw // 16
    return (unit_c % upc) << 4, (unit_c // upc) * rows * sw + row_c * sw


def copy_plan(threads: int, rows: int, units_per_row: int) -> tuple[int, int] | None:
    """(w, h): one round of copies covers h rows x w 16-byte units, consecutive threads
    taking consecutive units of a row (coalesced reads), with h a multiple of 8 (the
    swizzle's period, so later rounds are `split_const` offsets) or all the rows; None when
    the threads cannot cover the box that way."""
    upr = units_per_row
    if threads % upr == 0 and ((threads // upr) % 8 == 0 or threads // upr >= rows):
        return upr, threads // upr
    w = threads // 8
    if threads % 8 == 0 and w & (w - 1) == 0 and upr % w == 0:
        return w, 8
    return None


def copy_piece(ar: Arith, tid, w: int):
    """(row, unit) of the first 16-byte piece thread `tid` copies (rounds of `copy_plan`
    add constant rows and units)."""
    return ar.shr(tid, _log2(w)), ar.and_(tid, w - 1)


def ldsm_a(ar: Arith, lane, wrow, transposed: bool):
    """(stored row, stored unit), lane part, that `lane` addresses in ldmatrix.x4 for an A
    fragment (16 rows x 16 k of 16-bit elements: 8 per unit); `ldsm_a_const` is the part
    of the fragment at rows +mi, k +k0. Matrix j of the x4 is a_j of mma.sync: rows +8 when
    j is odd, k +8 when j >= 2. Stored [K, M] (`transposed`): ldmatrix.trans over rows of
    k."""
    if not transposed:
        return ar.add(wrow, ar.and_(lane, 15)), ar.shr(lane, 4)
    row = ar.add(ar.mul(ar.shr(lane, 4), 8), ar.and_(lane, 7))
    return row, ar.add(ar.shr(wrow, 3), ar.and_(ar.shr(lane, 3), 1))


def ldsm_a_const(mi: int, k0: int, transposed: bool) -> tuple[int, int]:
    return (k0, mi // 8) if transposed else (mi, k0 // 8)


def ldsm_b(ar: Arith, lane, wcol, pair: int, transposed: bool):
    """(stored row, stored unit), lane part, that `lane` addresses in ldmatrix.x4 for the B
    fragments (b0, b1) of two n-tiles `pair` columns apart (0: x2, one tile), k 0..15;
    `ldsm_b_const` adds the first tile's n and k0. `transposed`: B stored [N, K] (K
    contiguous: plain ldmatrix over rows of n); else stored [K, N] (.trans over rows of
    k). Lanes 0-15 address the first tile (its b0 then b1), 16-31 the second."""
    second = ar.mul(ar.shr(lane, 4), pair) if pair else 0
    if transposed:
        return ar.add(ar.add(wcol, second), ar.and_(lane, 7)), ar.and_(ar.shr(lane, 3), 1)
    return ar.and_(lane, 15), ar.shr(ar.add(wcol, second), 3)


def ldsm_b_const(nj: int, k0: int, transposed: bool) -> tuple[int, int]:
    return (nj, k0 // 8) if transposed else (k0, nj // 8)


def warp_only(lin: LinearLayout) -> LinearLayout:
    """`lin` with its lane bases zeroed: thread_coord then gives the warp's origin."""
    z = tuple([0] * lin.rank)
    return LinearLayout(lin.shape, lin.reg, tuple(z for _ in lin.lane), lin.warp)


class AmpereLowering(LoweringBase):
    """The sm_80 branches of the level-2 lowerings (called from dot.py and tma.py)."""

    @property
    def ampere(self) -> bool:
        return self.fn.attrs.get("target") in AMPERE_ARCHS

    # ------------------------------------------------------------------ descriptors
    def sm80_desc(self, desc: Value, batched: bool = False) -> tuple:
        """(base i64, rows i32, cols i32, row stride in bytes i64) of a tensor's row
        descriptor, read once at the kernel's entry (kitjit/runtime/ampere.py writes it);
        `batched` (a 3-d tensor: every copy of it is, the frontend checks): then also the
        batch stride in bytes (i64) and the number of batch entries (i32)."""
        cache = self.__dict__.setdefault("_sm80_descs", {})
        got = cache.get(desc.id)
        if got is None:
            p = self.get(desc)[0]
            entry = self.kernel.entry_basic_block
            eb = ir.IRBuilder(entry)
            eb.position_at_start(entry)

            def field(off: int, t: ir.Type):
                return eb.load(eb.gep(p, [ir.Constant(I64, off)], source_etype=I8), typ=t,
                               align=4 if t == I32 else 8)
            got = (field(0, I64), field(8, I32), field(12, I32), field(16, I64))
            if batched:  # batch stride (bytes), batches: kitjit/runtime/ampere.py's row_map3
                got += (field(24, I64), field(32, I32))
            if self.b.block is entry:  # llvmlite inserts at an index: keep ours after them
                self.b._anchor += len(got) * 2
            cache[desc.id] = got
        return got

    def sm80_entry_desc(self, desc: Value, batch: list) -> tuple:
        """(base, rows, cols, row stride, a safe base) of the 2-d tensor a copy addresses:
        the descriptor's, or (a 3-d tensor's (batch, row, col) coordinates) batch entry
        `batch[0]`'s, with no rows when it is past either end (its box reads zeros and
        writes nothing, as TMA's per-dimension bounds do)."""
        d = self.sm80_desc(desc, bool(batch))
        if not batch:
            return (*d[:4], d[0])
        gbase, rows, cols, stride, bstride, nb = d
        b = self.b
        (i,) = self.get(batch[0])
        ok = b.icmp_unsigned("<", i, nb)       # (a negative index is a huge unsigned one)
        base = b.add(gbase, b.mul(b.sext(b.select(ok, i, self.c32(0)), I64), bstride))
        return base, b.select(ok, rows, self.c32(0)), cols, stride, gbase

    # ------------------------------------------------------------------ barriers
    def sm80_mbar_init(self, op: Op, addr) -> None:
        p = self.thread0()
        for i in range(op.result.shape[0]):
            asm(self.b, VOID, "@$0 mbarrier.init.shared.b64 [$1], $2;", "b,r,r,~{memory}",
                [p, self.b.add(addr, self.c32(8 * i)), self.c32(op.attrs["sm80_init"])])
        self.sync()

    def sm80_mbar_wait(self, op: Op) -> None:
        (baddr,) = self.get(op.operands[0])
        (ph,) = self.get(op.operands[1])
        self._sm80_spin_wait(baddr, ph)

    def _sm80_spin_wait(self, baddr, ph) -> None:
        asm(self.b, VOID,
            "{ .reg .pred P1; \nKITWAIT${:uid}: \n"
            "mbarrier.test_wait.parity.shared.b64 P1, [$0], $1; \n"
            "@!P1 bra.uni KITWAIT${:uid}; }",
            "r,r,~{memory}", [baddr, ph])

    def sm80_mbar_arrive(self, op: Op) -> None:
        """One arrival per warp (frontend/ampere.py counts them), once the whole warp is
        past this point: each warp's ldmatrix reads are its own."""
        (baddr,) = self.get(op.operands[0])
        asm(self.b, VOID, "bar.warp.sync -1;", "~{memory}", [])
        p = self.b.icmp_unsigned("==", self.lane, self.c32(0))
        asm(self.b, VOID, "{ .reg .b64 st; @$0 mbarrier.arrive.shared.b64 st, [$1]; }",
            "b,r,~{memory}", [p, baddr])

    # ------------------------------------------------------------------ copies
    def sm80_tma_load(self, op: Op) -> None:
        dst, desc, *batch, row0, col0, bar = op.operands
        b = self.b
        ar = Arith(b)
        (daddr,) = self.get(dst)
        (r0,) = self.get(row0)
        (c0,) = self.get(col0)
        (baddr,) = self.get(bar)
        ed = self.sm80_entry_desc(desc, batch)
        _, rows, cols, _, _ = ed
        if op.attrs.get("expect", 1) and self.role is None and not op.attrs.get("nosync"):
            self.sync()  # every warp is done reading the stage these copies overwrite
        R, C = dst.shape
        e = dst.dtype.itemsize
        upr = C * e // 16
        threads = 32 * self.num_warps
        lay = dst.type.layout
        plan = copy_plan(threads, R, upr)
        if plan is None:
            raise LoweringError(f"kit.tma_load on {self.fn.attrs['target']}: a box of "
                                f"{R}x{C} {dst.dtype} ({upr} pieces of 16 bytes a row) does "
                                f"not split evenly over {threads} threads")
        w, h = plan
        r, u = copy_piece(ar, self.tid, w)
        sbase = b.add(daddr, smem_offset(ar, lay, R, C * e, r, u))
        grow = b.add(r0, r)
        # a box inside the tensor (every box of a GEMM but the edges) needs no bounds: one
        # uniform test picks plain copies at constant offsets; the per-piece clamping of
        # the edge path is ~20 instructions a copy, more than the MMAs can hide
        if _ALWAYS_CLAMP:
            self._sm80_copies(op, ed, sbase, r, u, grow, c0, plan, (rows, cols))
        else:
            inside = b.and_(b.and_(b.icmp_signed(">=", r0, self.c32(0)),
                                   b.icmp_signed("<=", r0, b.sub(rows, self.c32(R)))),
                            b.and_(b.icmp_signed(">=", c0, self.c32(0)),
                                   b.icmp_signed("<=", c0, b.sub(cols, self.c32(C)))))
            if _COPIES_IN_LINE:
                self._sm80_copies(op, ed, sbase, r, u, grow, c0, plan, None, inside)
                edges = self.__dict__.setdefault("_sm80_edges", [])
                edges.append((op, ed, sbase, r, u, grow, c0, plan, inside))
                if op.attrs.get("sm80_arrive") or not self._sm80_load_follows():
                    self._sm80_edge_paths(edges)   # else the next load does
            else:
                with b.if_else(inside) as (fast, edge):
                    with fast:
                        self._sm80_copies(op, ed, sbase, r, u, grow, c0, plan, None)
                    with edge:
                        self._sm80_copies(op, ed, sbase, r, u, grow, c0, plan, (rows, cols))
        if op.attrs.get("sm80_arrive"):
            asm(b, VOID, "cp.async.mbarrier.arrive.noinc.shared.b64 [$0];", "r,~{memory}",
                [baddr])

    def _sm80_load_follows(self) -> bool:
        """Whether the next op of this block with an effect is a `tma_load` (only
        arithmetic, constants and views of shared tiles between: `_PURE`)."""
        for op in getattr(self, "later_ops", ()):
            if op.name == "tma_load":
                return True
            if op.regions or op.name not in _PURE:
                return False
        return False

    def _sm80_edge_paths(self, edges: list) -> None:
        """`_COPIES_IN_LINE`: the clamped copies of the loads in `edges` whose box is not
        inside, one branch each, after all their in-bounds copies (a load followed by another
        on the same barrier leaves its branch to that one: the branches would otherwise
        split the run's copies from the code before them)."""
        b = self.b
        for op, ed, sbase, r, u, grow, c0, plan, inside in edges:
            _, rows, cols, _, _ = ed
            with b.if_then(b.not_(inside)):
                self._sm80_copies(op, ed, sbase, r, u, grow, c0, plan, (rows, cols))
        edges.clear()

    def _sm80_copies(self, op: Op, ed: tuple, sbase, r, u, grow, c0, plan: tuple[int, int],
                     bounds: tuple | None, when=None) -> None:
        """The cp.async pieces of one thread (rows `grow` + rounds of h, units `u` + rounds
        of w). `bounds` (rows, cols): clamp each piece to the tensor, reading zeros past it
        (the `src-size` operand); None: the box is known to be inside. `when`: an i1 every
        piece is predicated on (None: all are issued)."""
        dst = op.operands[0]
        b = self.b
        ar = Arith(b)
        w, h = plan
        gbase, _, _, stride, safe = ed
        R, C = dst.shape
        e = dst.dtype.itemsize
        upr = C * e // 16
        lay = dst.type.layout
        gstep = b.mul(stride, ir.Constant(I64, h))
        row_addr = b.add(gbase, b.mul(b.sext(grow, I64), stride))  # used where row i is in
        for j in range(0, upr, w):
            gcol = b.add(c0, ar.mul(ar.add(u, j), 16 // e))
            if bounds is None:
                src = b.add(row_addr, b.zext(b.mul(gcol, self.c32(e)), I64))
            else:
                rows, cols = bounds
                col_ok = b.icmp_unsigned("<", gcol, cols)
                left = b.mul(b.sub(cols, gcol), self.c32(e))
                size = b.select(col_ok, b.select(b.icmp_signed("<", left, self.c32(16)),
                                                 left, self.c32(16)), self.c32(0))
                col_off = b.zext(b.mul(b.select(col_ok, gcol, self.c32(0)), self.c32(e)), I64)
                src = b.add(row_addr, col_off)
            for i in range(0, R, h):
                x, add = split_const(lay, R, C * e, i, j)
                dst_t = f"[$0+{add}]"
                pre = ""
                if x:
                    pre, dst_t = f".reg .b32 t; xor.b32 t, $0, {x}; ", f"[t+{add}]"
                if bounds is None:
                    args, cons, size_t = [sbase, src], "r,l", ""
                else:
                    gi = b.add(grow, self.c32(i)) if i else grow
                    ok = b.icmp_unsigned("<", gi, rows)
                    args = [sbase, b.select(ok, src, safe), b.select(ok, size, self.c32(0))]
                    cons, size_t = "r,l,r", ", $2"
                pred, on = "", when
                if i + h > R:  # this round has rows past the box
                    past = b.icmp_unsigned("<", r, self.c32(R - i))
                    on = past if on is None else b.and_(on, past)
                if on is not None:
                    pred = f"@${len(args)} "
                    cons += ",b"
                    args.append(on)
                asm(b, VOID, f"{{ {pre}{pred}cp.async.cg.shared.global {dst_t}, [$1], 16"
                    f"{size_t}; }}", cons + ",~{memory}", args)
                if i + h < R:
                    src = b.add(src, gstep)

    def sm80_tma_store(self, op: Op) -> None:
        """Registers straight to global memory, each element predicated on the box being
        inside the tensor (one copy of each element stores)."""
        desc, *batch, row0, col0, value, _staging = op.operands
        b = self.b
        (r0,) = self.get(row0)
        (c0,) = self.get(col0)
        gbase, rows, cols, stride, _ = self.sm80_entry_desc(desc, batch)
        lin = _lin(value.type)
        vals = self.get(value)
        rbase = self.thread_coord(lin, 0)
        cbase = self.thread_coord(lin, 1)
        dup = self.duplicate_pred(lin)
        e = value.dtype.itemsize
        for v, (cr, cc) in zip(vals, lin.reg_coords()):
            grow = b.add(r0, b.add(rbase, self.c32(cr)))
            gcol = b.add(c0, b.add(cbase, self.c32(cc)))
            ok = b.and_(b.icmp_unsigned("<", grow, rows), b.icmp_unsigned("<", gcol, cols))
            if dup is not None:
                ok = b.and_(ok, dup)
            off = b.add(b.mul(b.zext(grow, I64), stride),
                        b.zext(b.mul(gcol, self.c32(e)), I64))
            ptr = b.inttoptr(b.add(gbase, off), GPTR)
            self.store_vec(ptr, [v], ok, value.dtype, 1)

    # ------------------------------------------------------------------ mma
    def _ldsm(self, base, const: tuple[int, int], n: int, trans: bool) -> list:
        """ldmatrix.x`n` at [(base ^ xor) + add] (`const` = (xor, add): split_const)."""
        x, add = const
        outs = ", ".join(f"${i}" for i in range(n))
        t = ".trans" if trans else ""
        ld = f"ldmatrix.sync.aligned.m8n8.x{n}{t}.shared.b16 {{{outs}}}"
        if x:
            text = f"{{ .reg .b32 t; xor.b32 t, ${n}, {x}; {ld}, [t+{add}]; }}"
        else:
            text = f"{ld}, [${n}+{add}];"
        ret = ir.LiteralStructType([I32] * n)
        r = asm(self.b, ret, text, ",".join(["=r"] * n + ["r"]), [base])
        return [self.b.extract_value(r, i) for i in range(n)]

    def sm80_mma(self, op: Op) -> None:
        a, bt, acc = op.operands[:3]     # then kit.mma's next= operands (_sm80_mma_next)
        b = self.b
        ar = Arith(b)
        M, K = a.shape
        N = bt.shape[1]
        mma = op.result.type.layout
        wm = mma.wm
        lc = _lin(acc.type)
        ic = lc.reg_index()
        C = list(self.get(acc))
        wl = warp_only(lc)
        wrow, wcol = self.thread_coord(wl, 0), self.thread_coord(wl, 1)
        lane = self.lane
        kind = "bf16" if a.dtype.name == "bf16" else "f16"
        e = a.dtype.itemsize
        a_regs = not a.type.is_shared
        if a_regs:
            A = self.get(a)
            ia = _lin(a.type).reg_index()
            et = llvm_type(a.dtype)

            def pack2(x, y):
                v = ir.Constant(ir.VectorType(et, 2), ir.Undefined)
                v = b.insert_element(v, x, self.c32(0))
                v = b.insert_element(v, y, self.c32(1))
                return b.bitcast(v, I32)
        else:
            la = a.type.layout
            a_tr = bool(la is not None and la.transposed)
            a_rows, a_rb = (K, M * e) if a_tr else (M, K * e)
            (abase,) = self.get(a)
            row, unit = ldsm_a(ar, lane, wrow, a_tr)
            a_ptr = b.add(abase, smem_offset(ar, la, a_rows, a_rb, row, unit))
        (bbase,) = self.get(bt)
        lb = bt.type.layout
        b_tr = bool(lb is not None and lb.transposed)   # stored [N, K]
        b_rows, b_rb = (N, K * e) if b_tr else (K, N * e)
        ms = list(range(0, M, 16 * wm))
        ns = mma.n_tiles(N)
        step = ns[1] - ns[0] if len(ns) > 1 else 0   # columns between a warp's n-tiles
        b_ptr = {}
        for pair in ({step} if len(ns) > 1 else set()) | ({0} if len(ns) % 2 else set()):
            row, unit = ldsm_b(ar, lane, wcol, pair, b_tr)
            b_ptr[pair] = b.add(bbase, smem_offset(ar, lb, b_rows, b_rb, row, unit))
        text = (f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 "
                "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};")
        cons = "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f"
        ret = ir.LiteralStructType([F32] * 4)
        cidx = {(mi, nj): [ic[(mi, nj)], ic[(mi, nj + 1)], ic[(mi + 8, nj)],
                           ic[(mi + 8, nj + 1)]] for mi in ms for nj in ns}
        if a_regs:  # packed up front: LLVM would sink each pair's cvt to its MMA, and
            # the fp32 values (twice the registers) would stay live through the MMAs
            packed = {(mi, k0): [pack2(A[ia[(mi + r, k0 + c)]], A[ia[(mi + r, k0 + c + 1)]])
                                 for r, c in ((0, 0), (8, 0), (0, 8), (8, 8))]
                      for k0 in range(0, K, 16) for mi in ms}
        if op.attrs.get("next"):
            self._sm80_mma_next(op, C, cidx, ms, ns, text, cons, ret, K, abase, bbase,
                                (a_ptr, la, a_rows, a_rb, a_tr),
                                (b_ptr, lb, b_rows, b_rb, b_tr, step))
            return
        for k0 in range(0, K, 16):
            afr = {}
            for mi in ms:
                if a_regs:
                    afr[mi] = packed[(mi, k0)]
                else:
                    rc, uc = ldsm_a_const(mi, k0, a_tr)
                    afr[mi] = self._ldsm(a_ptr, split_const(la, a_rows, a_rb, rc, uc), 4,
                                         a_tr)
            # B two n-tiles at a time, each used by every m-tile before the next loads:
            # the fragments in flight stay few (a 128-wide N would hold 64 registers)
            for j in range(0, len(ns), 2):
                pair = step if j + 1 < len(ns) else 0
                rc, uc = ldsm_b_const(ns[j], k0, b_tr)
                regs = self._ldsm(b_ptr[pair], split_const(lb, b_rows, b_rb, rc, uc),
                                  4 if pair else 2, not b_tr)
                bfr = {ns[j]: regs[:2]}
                if pair:
                    bfr[ns[j + 1]] = regs[2:]
                for nj, bv in bfr.items():
                    for mi in ms:
                        cv = [C[i] for i in cidx[(mi, nj)]]
                        r = asm(b, ret, text, cons, afr[mi] + bv + cv, side_effect=False)
                        for i, k in enumerate(cidx[(mi, nj)]):
                            C[k] = b.extract_value(r, i)
        self.set(op.result, C)

    def _sm80_slice(self, k0: int, ms: list, ns: list, packed: dict | None,
                    a_sh: tuple | None, b_sh: tuple) -> tuple[dict, dict]:
        """The fragments of k-slice k0: ({m-tile: A x4 regs}, {n-tile: B 2 regs}) (A from
        `packed` registers when given, else ldmatrix at a_sh's pointer)."""
        b_ptr, lb, b_rows, b_rb, b_tr, step = b_sh
        afr = {}
        for mi in ms:
            if packed is not None:
                afr[mi] = packed[(mi, k0)]
            else:
                a_ptr, la, a_rows, a_rb, a_tr = a_sh
                rc, uc = ldsm_a_const(mi, k0, a_tr)
                afr[mi] = self._ldsm(a_ptr, split_const(la, a_rows, a_rb, rc, uc), 4, a_tr)
        bfr = {}
        for j in range(0, len(ns), 2):
            pair = step if j + 1 < len(ns) else 0
            rc, uc = ldsm_b_const(ns[j], k0, b_tr)
            regs = self._ldsm(b_ptr[pair], split_const(lb, b_rows, b_rb, rc, uc),
                              4 if pair else 2, not b_tr)
            bfr[ns[j]] = regs[:2]
            if pair:
                bfr[ns[j + 1]] = regs[2:]
        return afr, bfr

    def _sm80_slice_mmas(self, C: list, cidx: dict, ms: list, ns: list, text: str, cons: str,
                         ret: ir.Type, afr: dict, bfr: dict) -> None:
        """The mma.sync of one k-slice over the warp's m x n tiles (C updated in place)."""
        b = self.b
        for nj in ns:
            for mi in ms:
                cv = [C[i] for i in cidx[(mi, nj)]]
                r = asm(b, ret, text, cons, afr[mi] + bfr[nj] + cv, side_effect=False)
                for i, k in enumerate(cidx[(mi, nj)]):
                    C[k] = b.extract_value(r, i)

    def _sm80_carry(self, op: Op, n: int) -> tuple:
        """Entry-block slots of `kit.mma(..., next=...)`'s carried fragments (n i32), the
        shared addresses of the A and B tiles they were loaded from (-1 at the entry: no
        tile) and a valid flag (0 at the entry): LLVM turns them into registers and loop
        phis (SROA), so the fragments one run of the op loads are the first the next run
        uses."""
        b = self.b
        here = b.block
        b.position_at_start(self.kernel.entry_basic_block)
        slots = [b.alloca(I32) for _ in range(n + 3)]
        for slot, v in zip(slots[n:], (-1, -1, 0)):
            b.store(self.c32(v), slot)
        b.position_at_end(here)
        return slots[:n], slots[n], slots[n + 1], slots[n + 2]

    def _sm80_mma_next(self, op: Op, C: list, cidx: dict, ms: list, ns: list, text: str,
                       cons: str, ret: ir.Type, K: int, abase, bbase, a_sh: tuple,
                       b_sh: tuple) -> None:
        """`kit.mma(a, b, acc, next=(a1, b1, bar, phase, cond))`: each slice's fragments
        loaded before the previous slice's MMAs, and before the MMAs of the last slice,
        when cond holds, the wait for `bar`'s phase and the ldmatrix of a1 / b1's first
        slice, kept for the next run of this op: the stage wait no longer stands between
        a stage's first ldmatrix and its first mma.sync. A run whose tiles are not the ones
        carried (the first, or after a run with cond false) loads its own first slice: the
        carry is checked by address, never trusted."""
        b = self.b
        a1, b1, bar, ph, cond = op.operands[3:]
        (a1base,) = self.get(a1)
        (b1base,) = self.get(b1)
        b_ptr = b_sh[0]
        a1_sh = (b.add(a1base, b.sub(a_sh[0], abase)), *a_sh[1:])
        b1_sh = ({p: b.add(b1base, b.sub(v, bbase)) for p, v in b_ptr.items()}, *b_sh[1:])
        keys = [("a", mi, i) for mi in ms for i in range(4)] + \
               [("b", nj, i) for nj in ns for i in range(2)]
        slots, a_slot, b_slot, valid = self._sm80_carry(op, len(keys))

        def flat(fr: tuple[dict, dict]) -> list:
            return [fr[0 if w == "a" else 1][t][i] for w, t, i in keys]

        def keep(vals: list) -> None:
            for v, slot in zip(vals, slots):
                b.store(v, slot)

        carried = b.and_(b.icmp_unsigned("!=", b.load(valid), self.c32(0)),
                         b.and_(b.icmp_unsigned("==", b.load(a_slot), abase),
                                b.icmp_unsigned("==", b.load(b_slot), bbase)))
        with b.if_then(b.not_(carried)):
            keep(flat(self._sm80_slice(0, ms, ns, None, a_sh, b_sh)))
        vals = [b.load(s) for s in slots]
        cur = ({mi: [] for mi in ms}, {nj: [] for nj in ns})
        for (w, t, _), v in zip(keys, vals):
            cur[0 if w == "a" else 1][t].append(v)
        (baddr,) = self.get(bar)
        (phase,) = self.get(ph)
        (c,) = self.get(cond)
        for k0 in range(0, K, 16):
            nxt = None
            if k0 + 16 < K:
                nxt = self._sm80_slice(k0 + 16, ms, ns, None, a_sh, b_sh)
            else:
                with b.if_else(c) as (then, otherwise):
                    with then:
                        self._sm80_spin_wait(baddr, phase)
                        keep(flat(self._sm80_slice(0, ms, ns, None, a1_sh, b1_sh)))
                        b.store(a1base, a_slot)
                        b.store(b1base, b_slot)
                        b.store(self.c32(1), valid)
                    with otherwise:
                        b.store(self.c32(0), valid)
            self._sm80_slice_mmas(C, cidx, ms, ns, text, cons, ret, *cur)
            cur = nxt
        self.set(op.result, C)

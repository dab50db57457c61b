"""Level 2 on Ampere and Ada (sm_80 / sm_86 / sm_89): what the tile IR needs to know before
it is lowered without TMA or WGMMA.

One kernel text serves both targets. On sm_90a `kit.tma_load` is one thread's bulk tensor
copy and `kit.mma` a warpgroup MMA; below sm_90 the backend (backend/lower/ampere.py) lowers
the same ops to `cp.async` 16-byte copies issued by every thread of the role and to
`ldmatrix` + `mma.sync.m16n8k16`. The mbarriers stay: sm_80 has them, and
`cp.async.mbarrier.arrive.noinc` makes a barrier track each thread's copies, so a
`kit.mbarrier_wait` means the same on both targets. What changes is who arrives: every
issuing thread instead of one, so a barrier that copies complete on counts `arrivals` x
(threads that issue them) per phase. This pass works that out and checks what sm_80 cannot
do:

- each `kit.mbarriers` allocation gets `sm80_init`, its arrivals per phase: copies arrive
  once per issuing thread, and `kit.mbarrier_arrive` once per warp (after the warp syncs),
  not once per warpgroup as on Hopper: on Hopper a warpgroup's WGMMA is done with its tiles
  together, here each warp's ldmatrix reads are its own;
- the last load of each run of loads on one barrier (frontend/tma_groups.py) gets
  `sm80_arrive` (the thread's one `cp.async.mbarrier.arrive` covers all its copies before);
- each tensor copied gets a plain row descriptor (`kind: rows`: base, rows, cols, row
  stride) instead of a CUtensorMap (kitjit/runtime/ampere.py builds it);
- `kit.mma`'s `pending` becomes 0: mma.sync returns with its result;
- `acc_layout`: the register layout of a `kit.mma` accumulator (warps over rows where rows
  are reduced, as on Hopper; a squarer warp grid otherwise, which loads fewer fragments).
"""

from __future__ import annotations

from kitjit.ir.core import Block, Function, Op, Value
from kitjit.ir.layouts import Mma

from .errors import CompileError

#: the targets whose level-2 ops this module prepares (others: Hopper's lowering)
AMPERE_ARCHS = ("sm_80", "sm_86", "sm_89")

#: True: a GEMM accumulator's warps own N / wn consecutive columns each (`Mma.n_contig`)
#: instead of 8-column tiles interleaved with the other warps': the epilogue's 16-byte
#: stores then fill whole 32-byte sectors (interleaved: half of each; benchmarks/NOTES.md,
#: session 11). Opt-in until timed (benchmarks/ampere.py's "ncontig" variants set it for
#: their compile); not part of the disk cache's key: set it with the cache off.
_WARP_COLS_CONTIGUOUS = False


def is_ampere(fn: Function) -> bool:
    return fn.attrs.get("target") in AMPERE_ARCHS


def _alloc_of(bar: Value) -> Op | None:
    """The `kit.mbarriers` allocation a barrier value (`bars[i]`) indexes."""
    o = bar.owner
    while isinstance(o, Op) and o.name == "smem_index":
        o = o.operands[0].owner
    return o if isinstance(o, Op) and o.name == "smem_alloc" else None


def prepare(fn: Function) -> Function:
    """Annotate a laid-out kernel for the sm_80 lowering (see the module docstring)."""
    if not is_ampere(fn):
        return fn
    copiers: dict[int, set[int]] = {}   # barrier allocation id -> threads issuing copies
    arrivers: dict[int, Op] = {}         # barrier allocation id -> a kit.mbarrier_arrive
    per_arrive: dict[int, set[int]] = {}  # barrier allocation id -> warp arrivals per arrival

    def walk(block: Block, warps: int) -> None:
        last: Op | None = None  # the latest load of the current run (tma_groups' runs)
        for op in block.ops:
            roles = op.attrs.get("roles") if op.name == "if" else None
            for i, r in enumerate(op.regions):
                walk(r, roles[i][1] * 4 if roles else warps)
            if op.name == "mbar_arrive":  # Hopper: one per warpgroup; here one per warp
                a = _alloc_of(op.operands[0])
                if a is not None:
                    arrivers[a.result.id] = op
                    per_arrive.setdefault(a.result.id, set()).add(warps // -(-warps // 4))
            if op.name != "tma_load":
                continue
            dst, bar = op.operands[0], op.operands[-1]
            if dst.shape[1] * dst.dtype.itemsize % 16:
                raise CompileError(f"kit.tma_load on {fn.attrs['target']}: rows of "
                                   f"{dst.shape[1] * dst.dtype.itemsize} bytes; cp.async "
                                   "copies 16-byte pieces, so a row must be a multiple of "
                                   "16 bytes", op.loc)
            a = _alloc_of(bar)
            if a is None:
                raise CompileError("kit.tma_load: the barrier must be an element of "
                                   "kit.mbarriers(...)", op.loc)
            copiers.setdefault(a.result.id, set()).add(32 * warps)
            op.attrs.pop("sm80_arrive", None)
            if op.attrs.get("expect", 1) and last is not None:  # a new run starts here
                last.attrs["sm80_arrive"] = True
            last = op
        if last is not None:
            last.attrs["sm80_arrive"] = True

    walk(fn.body, fn.attrs["num_warps"])
    for op in fn.walk():
        if op.name == "smem_alloc" and "init" in op.attrs:
            threads = copiers.get(op.result.id)
            if threads is None:
                warps = per_arrive.get(op.result.id, {1})
                if len(warps) > 1:
                    raise CompileError(f"on {fn.attrs['target']} each warp arrives on its own "
                                       "(warps read shared tiles on their own), and this "
                                       "barrier takes kit.mbarrier_arrive from roles of "
                                       "different sizes", arrivers[op.result.id].loc)
                op.attrs["sm80_init"] = op.attrs["init"] * warps.pop()
                continue
            if len(threads) > 1:
                raise CompileError(f"on {fn.attrs['target']} every thread that issues a copy "
                                   "arrives on its barrier, and this barrier's copies are "
                                   f"issued by roles of {sorted(threads)} threads",
                                   op.loc, "issue all copies that complete on one barrier "
                                   "from one role")
            if op.result.id in arrivers:
                raise CompileError(f"on {fn.attrs['target']}, a barrier that kit.tma_load "
                                   "copies complete on cannot also take kit.mbarrier_arrive "
                                   "arrivals (the copies arrive once per issuing thread)",
                                   arrivers[op.result.id].loc,
                                   "use separate barriers for 'data landed' and 'stage free'")
            op.attrs["sm80_init"] = op.attrs["init"] * threads.pop()
        elif op.name == "wgmma":
            op.attrs["pending"] = 0  # mma.sync is synchronous: nothing is ever in flight
    for entry in fn.attrs.get("tma", {}).values():
        entry["kind"] = "rows"
    return fn


def acc_layout(op: Op, shape: tuple[int, int], num_warps: int, rows_reduced: bool) -> Mma:
    """The accumulator layout of `kit.mma` below sm_90: mma.sync m16n8 fragments.

    Where the accumulator's rows are reduced or scaled by float row vectors (softmax; an
    integer row vector is an index and broadcasts from any grid) or its A operand comes from
    registers (P @ V), warps split the rows only, as Hopper's WGMMA does:
    row reductions then stay inside a warp, and an accumulator converted to 16 bits is the
    A fragment of the next MMA. Otherwise (a GEMM) the warp grid that loads the fewest
    fragments per k-step: warps cover M/wm x N/wn each, and each k-step a warp reads
    M/wm/16 A and N/wn/16 B `ldmatrix.x4`s, so the grid minimizing M/wm + N/wn wins."""
    M, N = shape
    a_regs = not op.operands[0].type.is_shared
    if rows_reduced or a_regs:
        return Mma(num_warps, 1)
    best = None
    wm = 1
    while wm <= num_warps:
        wn = num_warps // wm
        if 16 * wm <= M and 8 * wn <= N:
            cost = (M // wm + N // wn, wn)  # ties: fewer warps across N
            if best is None or cost < best[0]:
                best = (cost, wm, wn)
        wm *= 2
    if best is None:
        return Mma(num_warps, 1)
    return Mma(best[1], best[2], n_contig=_WARP_COLS_CONTIGUOUS and best[2] > 1)

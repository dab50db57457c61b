"""kitjit source for a skinny matmul group on Hopper's level 2 (FORM "wgmma"): TMA copies
K tiles of x and of each weight into a ring of shared-memory stages, each stage landing on
its own mbarrier, and WGMMA runs on the stage that arrived while the copies for the next
STAGES-1 fly.

The rows of x are few (decode: 1-64 tokens), and WGMMA's M side is 64 rows per warpgroup,
so the product is computed transposed ("swap AB"): out^T = W^T x^T. BN columns of the
weights are the MMA's rows (the weights' [BK, BN] tile read through a `.T` view, no copy)
and the M rows of x, padded to MP, are its N (TMA reads rows past M as zeros). The
accumulators come back to the [MP, BN] orientation with one kit.trans, so the epilogue and
split-K's combine kernel are the level-1 matmul's (codegen_mm.py).

With an rms_norm prologue (rms_norm(x, w) @ W = rstd * ((x * w) @ W)) there are two forms:

- NORM "smem" (no row kernel, no extra launch): the swapped product as above, x's tiles
  through the same TMA ring; once a k-step the threads read x's [MP, BK] tile (8 halves a
  thread at MP 16), add its squares to a register tile, write x * w into a tile of its own
  and sync, so WGMMA's B operand is x * w. Three such tiles in turn: the MMA before may
  still read the last one, and the one before that is retired by every warp once all
  threads have passed the last k-step's barrier (a warp's wgmma.wait_group says nothing
  of the others'). Each row's sum of squares is reduced once after the loop,
  and rstd scales the output's rows at the end, or, split-K, the combine (the last split
  program, FUSE) adds the splits' sums beside their partials first.
- NORM "epi" (not swapped): x * w is made in registers (loaded one k-step ahead) and is
  WGMMA's A operand, 64 rows of which M are live, the weights' tiles its B through the
  TMA ring (measured 2.4-4.5x its model: x is re-laid out for WGMMA every k-step).

It applies where TMA can read the operands as they are: one 2-d matmul (no batch), x and
the weights whole contiguous buffers [M, K] and [K, N] with 16-byte rows, fp16 or bf16, no
low-rank chain."""

from __future__ import annotations

import itertools

from .codegen import KIT_DTYPE, Access, Index, bound, kernel_header, p2
from .codegen_mm import TileEmitter, _epilogue, split_tail

BK = 64            # 128-byte rows of fp16/bf16: the 128-byte swizzle
MAX_M = 64         # x's rows: WGMMA's N (and the accumulators) stay small
MAX_SPLIT = 16     # split-K counts searched: 1..16
STAGES = (3, 4, 6, 8, 12)
MAX_RING = 200 * 1024   # bytes of shared memory a ring may take


def mp(M: int) -> int:
    """x's rows padded to WGMMA's N (a multiple of 16 here)."""
    return p2(M, 16)


def eligible(group) -> bool:
    """Whether the group's operands can be read by TMA as they are (module docstring)."""
    if group.kind != "matmul" or group.lowrank:
        return False
    pro = group.prologue
    if pro is not None and (pro.op != "rms_norm" or len(group.mms) != 1):
        return False
    mm0 = group.mms[0]
    if len(mm0.shape) != 2:
        return False
    M, N = mm0.shape
    a = mm0.inputs[0]
    K = a.shape[-1]
    if M > MAX_M or (K * 2) % 16 or (N * 2) % 16:
        return False
    ops = [a, *(mm.inputs[1] for mm in group.mms)]
    if any(t.dtype != a.dtype or KIT_DTYPE.get(t.dtype) in (None, "kit.float32")
           for t in ops):
        return False
    if any(mm.inputs[0] is not a for mm in group.mms):
        return False
    if pro is not None:
        ops[0] = pro.inputs[0]
        if len(pro.inputs) > 1 and Access.of(pro.inputs[1]).strides != (1,):
            return False
    return all(t.base() is t and Access.of(t).strides == (t.shape[1], 1) for t in ops)


def wgmma_kernel(group, name: str, pdl: bool = False) -> tuple[list[str], list[str]]:
    """(source lines, launch lines) of the group's level-2 kernel (and combine kernel).
    `pdl`: x is the previous kernel's output and this kernel its programmatic dependent
    (module.py): the weights' ring fills while that kernel finishes."""
    mm0 = group.mms[0]
    M, N = mm0.shape
    P = group.params
    pro = group.prologue
    if pro is not None and P.get("NORM") != "smem":
        return _norm_kernel(group, name)
    x = mm0.inputs[0] if pro is None else pro.inputs[0]
    K = x.shape[-1]
    pdl = pdl and pro is None and x.base() is x
    BN, STAGES, SPLIT, nw = P["BN"], P["STAGES"], P.get("SPLIT", 1), P["num_warps"]
    MP = mp(M)
    dt = KIT_DTYPE[mm0.dtype]
    nbk = -(-K // BK)
    n_k = -(-nbk // SPLIT)                   # k-steps per program (past K: TMA's zeros)
    gn = -(-N // BN)
    xb = f"t{x.id}"
    ws = [f"t{mm.inputs[1].id}" for mm in group.mms]
    rm = Index("rm", (0,), bound("rm", M, MP))
    rn = Index("rn", (1,), bound("rn", N, BN))
    e = TileEmitter(group, mm0.shape, rm, rn, Index("b", ()))
    e.line(f"# out^T = W^T x^T: {BN} weight columns are WGMMA's rows, x's {M} rows its N")
    if pro is not None:
        e.line("# rms_norm(x, w) @ W = rstd * ((x * w) @ W): x * w is made from x's tile each "
               "k-step,")
        e.line("# each row's sum of squares rides along, rstd scales the rows at the end")
    e.line(f"xs = kit.shared(({STAGES}, {MP}, {BK}), {dt})")
    weighted = pro is not None and len(pro.inputs) > 1
    if weighted:
        e.line(f"xw = kit.shared((3, {MP}, {BK}), {dt})   # x * w, the MMA's operand, in turn")
    for i, _ in enumerate(ws):
        e.line(f"w{i}s = kit.shared(({STAGES}, {BK}, {BN}), {dt})")
    _ring_and_k_start(e, STAGES, BN, SPLIT, n_k * BK)
    # PDL: x is the kernel before's output, so its tiles land on barriers of their own
    # (xready), loaded past kit.gdc_wait; the weights' stream starts at once
    xbar = "xready" if pdl else "ready"
    if pdl:
        e.line(f"xready = kit.mbarriers({STAGES})   # stage s of x has landed")

    l2w = l2_option(P)

    def loads(stage: str, k: str) -> list[str]:
        return [f"kit.tma_load(xs[{stage}], {xb}, (0, {k}), {xbar}[{stage}])"] + [
            f"kit.tma_load(w{i}s[{stage}], {w}, ({k}, n0), ready[{stage}]{l2w})"
            for i, w in enumerate(ws)]

    first = min(STAGES - 1, n_k)
    fill = loads("s", f"k0 + s * {BK}")
    if pdl:
        e.line(f"for s in kit.static_range({first}):   # the weights do not wait")
        for ln in fill[1:]:
            e.line("    " + ln)
        e.line("kit.gdc_wait()   # the kernel before (x's producer) has finished")
        e.line(f"for s in kit.static_range({first}):")
        e.line("    " + fill[0])
    else:
        e.line(f"for s in kit.static_range({first}):   # fill the ring")
        for ln in fill:
            e.line("    " + ln)
    for i, _ in enumerate(ws):
        e.line(f"acc{i} = kit.zeros(({BN}, {MP}), kit.float32)")
    xop = "xs[s]"
    if pro is not None:
        e.line(f"sq = kit.zeros(({MP}, {BK}), kit.float32)   # x * x, summed over k-steps")
    if weighted:
        wb = f"t{pro.inputs[1].id}"
        e.line(f"rk = kit.arange(0, {BK})")
        e.line(f"wv = kit.load({wb} + k0 + rk, mask=k0 + rk < {K}, other=0.0)"
               ".to(kit.float32)   # the norm's weight")
        xop = "xw[i % 3]"
    e.line(f"for i in kit.range({n_k}, loop_unroll_factor=1):   # (unrolled, ptxas "
           "serializes the WGMMAs)")
    e.line(f"    s = i % {STAGES}")
    e.line(f"    kit.mbarrier_wait(ready[s], i // {STAGES} % 2)")
    if pdl:
        e.line(f"    kit.mbarrier_wait(xready[s], i // {STAGES} % 2)")
    if pro is not None:
        e.line("    xf = kit.load(xs[s]).to(kit.float32)")
        e.line("    sq += xf * xf")
    if weighted:
        e.line(f"    kit.store({xop}, xf * wv[None, :])   # fenced for WGMMA (the last "
               "two MMAs read the others)")
        e.line("    kit.barrier()   # every thread's part is written")
    for i, _ in enumerate(ws):
        e.line(f"    acc{i} = kit.mma(w{i}s[s].T, {xop}.T, acc{i}, pending=1)")
    if weighted:   # (after the fence of kit.store, which would wait for it)
        e.line(f"    kn = k0 + (i + 1) * {BK} + rk")
        e.line(f"    wv = kit.load({wb} + kn, mask=kn < {K}, other=0.0)"
               ".to(kit.float32)   # the next k-step's")
    if n_k > STAGES - 1:
        e.line(f"    if i + {STAGES - 1} < {n_k}:   # refill the stage the last MMAs freed")
        e.line(f"        s1 = (i + {STAGES - 1}) % {STAGES}")
        e.line(f"        k = k0 + (i + {STAGES - 1}) * {BK}")
        for ln in loads("s1", "k"):
            e.line("        " + ln)
    if pro is not None:
        e.line("ss = kit.sum(sq, axis=1)   # each row's sum of squares over this part of K")
    e.line(f"rm = kit.arange(0, {MP})")
    e.line(f"rn = n0 + kit.arange(0, {BN})")
    nmm = len(group.mms)
    for i in range(nmm):
        e.line(f"acc{i} = kit.trans(acc{i})   # back to [rows of x, columns]")
    args = group.args()
    grid = f"({gn}{', ' + str(SPLIT) if SPLIT > 1 else ''})"
    if SPLIT > 1:   # (the norm's sums go beside the partials: split_tail's "epi")
        src, launch = split_tail(group, name, e, grid, nw, "epi" if pro else None,
                                 batched=False, fused=P.get("FUSE", False))
        return src, [ln[:-1] + _pdl_option(pdl, xb) + ")" if ln.startswith(f"{name}[")
                     else ln for ln in launch]
    if pro is not None:
        e.line(f"rstd = kit.rsqrt(ss / {K} + {pro.attrs['eps']!r})")
    for i, mm in enumerate(group.mms):
        e.line(f"v{mm.id} = acc{i}" + (" * rstd[:, None]" if pro is not None else ""))
    _epilogue(e, group)
    return kernel_header(name, args) + e.lines, [
        f"{name}[{grid}]({', '.join(args)}, num_warps={nw}{_pdl_option(pdl, xb)})"]


def _norm_kernel(group, name: str) -> tuple[list[str], list[str]]:
    """rms_norm(x, w) @ W with x * w as WGMMA's register A operand (module docstring)."""
    mm0, pro = group.mms[0], group.prologue
    M, N = mm0.shape
    x = pro.inputs[0]
    K = x.shape[-1]
    P = group.params
    BM, BN, STAGES, SPLIT, nw = P["BM"], P["BN"], P["STAGES"], P.get("SPLIT", 1), \
        P["num_warps"]
    dt = KIT_DTYPE[mm0.dtype]
    nbk = -(-K // BK)
    n_k = -(-nbk // SPLIT)
    gn = -(-N // BN)
    wb = f"t{mm0.inputs[1].id}"
    rm = Index("rm", (0,), bound("rm", M, BM))
    rn = Index("rn", (1,), bound("rn", N, BN))
    e = TileEmitter(group, mm0.shape, rm, rn, Index("b", ()))
    e.line(f"# rms_norm(x) @ W = rstd * ((x * w) @ W): x * w in registers is WGMMA's A "
           f"({M} of {BM} rows live)")
    e.line(f"ws0 = kit.shared(({STAGES}, {BK}, {BN}), {dt})")
    _ring_and_k_start(e, STAGES, BN, SPLIT, n_k * BK)
    e.line(f"rm = kit.arange(0, {BM})")
    e.line(f"rk = kit.arange(0, {BK})")
    first = min(STAGES - 1, n_k)
    e.line(f"for s in kit.static_range({first}):   # fill the ring")
    l2w = l2_option(P)
    e.line(f"    kit.tma_load(ws0[s], {wb}, (k0 + s * {BK}, n0), ready[s]{l2w})")
    xm = [f"(rm < {M})[:, None]"] if M % BM else []

    def xload(k: str) -> str:
        m = " & ".join(xm + [f"({k} < {K})[None, :]"])
        return (f"kit.load(t{x.id} + (rm * {K})[:, None] + {k}[None, :], mask={m}, "
                "other=0.0)")

    e.line("k = k0 + rk")
    e.line(f"x = {xload('k')}")
    e.line(f"acc0 = kit.zeros(({BM}, {BN}), kit.float32)")
    e.line(f"ss = kit.zeros(({BM},), kit.float32)")
    e.line(f"for i in kit.range({n_k}, loop_unroll_factor=1):   # (unrolled, ptxas "
           "serializes the WGMMAs)")
    e.line(f"    s = i % {STAGES}")
    e.line(f"    kn = k + {BK}")
    e.line(f"    x_next = {xload('kn')}   # one k-step ahead")
    e.line("    xf = x.to(kit.float32)")
    e.line("    ss += kit.sum(xf * xf, axis=1)")
    if len(pro.inputs) > 1:
        wv = f"kit.load(t{pro.inputs[1].id} + k, mask=k < {K}, other=0.0)"
        e.line(f"    a = (xf * {wv}.to(kit.float32)[None, :]).to({dt})")
    else:
        e.line(f"    a = x.to({dt})")
    e.line(f"    kit.mbarrier_wait(ready[s], i // {STAGES} % 2)")
    e.line("    acc0 = kit.mma(a, ws0[s], acc0, pending=1)")
    if n_k > STAGES - 1:
        e.line(f"    if i + {STAGES - 1} < {n_k}:   # refill the stage the last MMA freed")
        e.line(f"        s1 = (i + {STAGES - 1}) % {STAGES}")
        e.line(f"        kit.tma_load(ws0[s1], {wb}, (k0 + (i + {STAGES - 1}) * {BK}, n0), "
               f"ready[s1]{l2w})")
    e.line("    k, x = kn, x_next")
    e.line(f"rn = n0 + kit.arange(0, {BN})")
    args = group.args()
    grid = f"({gn}{', ' + str(SPLIT) if SPLIT > 1 else ''})"
    if SPLIT > 1:
        return split_tail(group, name, e, grid, nw, "epi", batched=False,
                          fused=P.get("FUSE", False))
    e.line(f"rstd = kit.rsqrt(ss / {K} + {pro.attrs['eps']!r})")
    e.line(f"v{mm0.id} = acc0 * rstd[:, None]")
    _epilogue(e, group)
    return kernel_header(name, args) + e.lines, [
        f"{name}[{grid}]({', '.join(args)}, num_warps={nw})"]


def l2_option(p: dict) -> str:
    """The weights' `l2_promotion=` keyword (none at the default 256 bytes): each weight
    byte is read once, by one program, so the search also times copies that ask L2 for
    the box alone (L2W 0; the decode kernel's K/V stream gained ~7% from it)."""
    return "" if p.get("L2W", 256) == 256 else f", l2_promotion={p['L2W']}"


def choices(group) -> list[dict]:
    """The level-2 parameter sets of an eligible group: BN 64 (one warpgroup) or 128 (two),
    any split-K count up to 16 whose every split keeps two k-steps (so a grid can fill the
    SMs in whole waves: a skinny matmul's column blocks alone leave most of them idle), its
    partials added by a combine kernel or (FUSE) by the last split program of each column
    block; rings of 3-12 stages within shared memory and no deeper than a program's
    k-steps (a deep ring fills with weights while the kernel before finishes, PDL). With an
    rms_norm prologue, each set in both norm forms (NORM "smem" and "epi"). Each set twice:
    the weights' copies with L2's default 256-byte promotion and without (L2W 0)."""
    if not eligible(group):
        return []
    M, N = group.mms[0].shape
    K = group.mms[0].inputs[0].shape[-1]
    nbk = -(-K // BK)
    out = []
    pro = group.prologue is not None
    for BN in (64, 128):
        if BN > p2(N, 64):
            continue
        for split in range(1, MAX_SPLIT + 1):
            ch = -(-nbk // split)
            if split > 1 and (ch < 2 or (split - 1) * ch >= nbk):
                continue
            for stages, norm in itertools.product(STAGES, ("smem", "epi") if pro else (None,)):
                p = dict(FORM="wgmma", BM=64 if norm == "epi" else mp(M), BN=BN, BK=BK,
                         SPLIT=split, STAGES=stages,
                         num_warps=4 if norm == "epi" else 4 * BN // 64)
                if norm:
                    p["NORM"] = norm
                if smem_bytes(group, p) > MAX_RING or (stages > 3 and stages > ch + 1):
                    continue
                fused = [dict(p, FUSE=True)] if split > 1 else []   # the last split
                for q in (p, *fused):                  # program runs the epilogue: one launch
                    out += [q, dict(q, L2W=0)]
    return out


def smem_bytes(group, p: dict) -> int:
    """Shared memory of the ring: each stage holds a [BK, BN] tile of every weight and (but
    for the NORM "epi" form, whose x is in registers) x's [MP, BK] tile; NORM "smem" adds
    its three x * w tiles."""
    M = group.mms[0].shape[0]
    n = len(group.mms)
    norm = p.get("NORM")
    x = 0 if norm == "epi" else mp(M) * BK
    xw = 3 * mp(M) * BK if norm == "smem" else 0
    return (p["STAGES"] * (x + n * BK * p["BN"]) + xw) * 2


def _pdl_option(pdl: bool, x: str) -> str:
    """The launch option of a programmatic dependent (module.py's _pdl: on sm_90 and later;
    the interpreter runs kernels one after the other)."""
    return f", launch_pdl=_pdl({x})" if pdl else ""


def _ring_and_k_start(e, stages: int, bn: int, split: int, k_part: int) -> None:
    """The lines both matmul forms open with: the ring's barriers, this program's columns
    and where its part of K starts (split-K: program_id(1) takes the part)."""
    e.line(f"ready = kit.mbarriers({stages})   # stage s has landed")
    e.line(f"n0 = kit.program_id(0) * {bn}")
    if split > 1:
        e.line("sp = kit.program_id(1)")
        e.line(f"k0 = sp * {k_part}   # this program's part of K")
    else:
        e.line("k0 = 0")

"""The Ampere code path (kit.tma_load on cp.async, kit.mma on ldmatrix + mma.sync) on whatever
GPU this is, through the `arch="sm_80"` launch option: correctness at ragged sizes (outputs
poisoned with NaN, float64 references), then speed against torch's flash SDPA (FA2, itself an
sm_80 kernel) and cuBLAS, with the Hopper path's GEMM beside it.

    python benchmarks/ampere.py [--quick] [--gemm-only] [--variants a,b] [--json out.json]
                                [--rounds 3]

GEMM variants: "ex" is examples/matmul_ampere.py's kernel, "pe" its `persistent=True` one
(one CTA per SM unless "2/SM"; GROUP 8 unless named); "copies only" is the persistent ring
without its MMAs (C = 0, not checked), what the copies alone could feed. "next" is the
example's kernel with NEXT_FRAGS (`kit.mma(..., next=...)`: the next stage's first k-slice
loaded after its wait, before this stage's last MMAs, and carried into the next step in
registers). "nc" is the example's kernel compiled with frontend/ampere.py's
`_WARP_COLS_CONTIGUOUS` (each warp owns N / wn consecutive columns of the accumulator, so
the epilogue's 16-byte stores fill whole 32-byte sectors; the default interleaves the warps'
8-column tiles and fills half of each). "il" is the example with PEEL=True compiled with
backend/lower/ampere.py's `_COPIES_IN_LINE` (the in-bounds cp.async predicated instead of
branched to, so ptxas issues them between the stage's last HMMAs; "il+nc" both flags).
`--variants` keeps the GEMM variants whose names
contain one of the comma-separated strings (or, written "=name", are that name).

The kit.mma ceilings (no copies, no waits) run one warp tile size at several BK: one
`kit.mma` of BK/16 k-slices an iteration, so BK 128 / 256 have a half / a quarter of BK 64's
iteration boundaries (where each warp's first ldmatrix -> mma.sync latency is exposed): the
difference bounds what fragments prefetched across a stage boundary could give.

Every kernel is compiled (first launch) in a thread pool before anything is timed: the
driver assembles the compute_80 PTX of each, which takes seconds. Variants marked "edge" are
the same kernels with every cp.async on the clamped edge path (the lowering before the
in-bounds fast path), compiled first with `_ALWAYS_CLAMP` set: that is why the disk cache is
off here. Timings interleave the variants of a case over `--rounds` rounds (median of each
variant's per-round medians).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import math
import os
import pathlib
import statistics
import sys
import time

os.environ["KITJIT_CACHE_DISABLE"] = "1"   # _ALWAYS_CLAMP is not part of the cache key

import torch  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import kitjit.backend.lower.ampere as sm80_lowering  # noqa: E402
import kitjit.frontend.ampere as sm80_frontend  # noqa: E402

import kitjit as kit  # noqa: E402
from examples.attention_ampere import fa2_kernel, reference  # noqa: E402
from examples.matmul import matmul_kernel  # noqa: E402
from examples.matmul_ampere import matmul as matmul_ampere  # noqa: E402
from examples.matmul_ampere import matmul_ampere_kernel, matmul_ampere_persistent_kernel  # noqa: E402,E501
from kitjit.launcher import record_kernel  # noqa: E402
from kitjit.nn.attention import attention_kernel, attention_ws_kernel  # noqa: E402
from kitjit.testing import bench  # noqa: E402

fa2_edge = kit.jit(fa2_kernel.fn)                 # compiled with every copy clamped
gemm_edge = kit.jit(matmul_ampere_kernel.fn)
gemm_ncontig = kit.jit(matmul_ampere_kernel.fn)   # compiled with _WARP_COLS_CONTIGUOUS
gemm_inline = kit.jit(matmul_ampere_kernel.fn)    # with _COPIES_IN_LINE (and PEEL=True)
gemm_inline_nc = kit.jit(matmul_ampere_kernel.fn)  # with both
# GEMM kernel kind -> (twin, frontend/ampere.py _WARP_COLS_CONTIGUOUS, lower/ampere.py
# _COPIES_IN_LINE) for the kinds compiled with a flag set, one group after the other
FLAGGED = {"ncontig": (gemm_ncontig, True, False), "inline": (gemm_inline, False, True),
           "inline_nc": (gemm_inline_nc, True, True)}

ARCH = "sm_80"
LOG2E = 1.4426950408889634
ATTN_CASES = [(4, 32, 4096, 128, False), (4, 32, 4096, 128, True), (4, 32, 4096, 64, False),
              (4, 32, 4096, 64, True), (2, 16, 16384, 128, False), (2, 16, 16384, 128, True)]
# name -> (config, edge): every config also as its edge-path twin
ATTN_CONFIGS = {128: {"128x64 s1": dict(BM=128, BN=64, STAGES=1),
                      "128x64 s2": dict(BM=128, BN=64, STAGES=2)},
                64: {"128x128 s2": dict(BM=128, BN=128, STAGES=2),
                     "128x128 s1": dict(BM=128, BN=128, STAGES=1),
                     "128x64 s2": dict(BM=128, BN=64, STAGES=2)}}
ATTN_EDGE = {128: ("128x64 s1",), 64: ("128x128 s2", "128x128 s1")}
GEMM_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192)]
# name -> (kernel, config): matmul_ampere.py's kernel ("ampere"), its edge-path twin
# ("edge"), its persistent kernel ("persistent": one CTA per SM, or CTAS per SM); GROUP (L2
# swizzle) 8 unless given
W8, W4 = dict(num_warps=8), dict(num_warps=4)
T256 = dict(BM=256, BN=128, BK=64, STAGES=4, **W8)      # the example's choice on sm_90
T128 = dict(BM=128, BN=256, BK=64, STAGES=4, **W8)
GEMM_CONFIGS = {
    "ex 256x128x64 s4 w8": ("ampere", T256),
    "ex 128x256x64 s4 w8": ("ampere", T128),
    "ex 256x128x64 G4": ("ampere", dict(T256, GROUP=4)),
    "ex 256x128x64 G16": ("ampere", dict(T256, GROUP=16)),
    "ex 256x128x64 s4 w8 next": ("ampere", dict(T256, NEXT_FRAGS=True)),
    "ex 256x128x32 s8 w8": ("ampere", dict(T256, BK=32, STAGES=8)),
    "ex 256x128x32 s8 w8 next": ("ampere", dict(T256, BK=32, STAGES=8, NEXT_FRAGS=True)),
    "ex 128x128x32 s6 w4 edge": ("edge", dict(BM=128, BN=128, BK=32, STAGES=6, **W4)),
    "ex 128x128x32 s6 w4": ("ampere", dict(BM=128, BN=128, BK=32, STAGES=6, **W4)),
    # the example's kernel with each warp's columns contiguous (whole-sector epilogue stores)
    "nc 256x128x64 s4 w8": ("ncontig", T256),
    # 16 warps (32x64 warp tiles, 128 registers: 4 warps a scheduler instead of 2, 1.5x the
    # ldmatrix bytes a flop)
    "ex 256x128x64 s4 w16": ("ampere", dict(T256, num_warps=16)),
    "ex 256x128x32 s8 w16": ("ampere", dict(T256, BK=32, STAGES=8, num_warps=16)),
    "nc 128x128x32 s6 w4": ("ncontig", dict(BM=128, BN=128, BK=32, STAGES=6, **W4)),
    # the example's PEEL (the last STAGES/2 steps in a loop of their own) compiled with the
    # in-bounds copies predicated, not branched to: in one block with the MMAs
    "il 256x128x64 s4 w8": ("inline", dict(T256, PEEL=True)),
    "il 256x128x32 s8 w8": ("inline", dict(T256, BK=32, STAGES=8, PEEL=True)),
    "il+nc 256x128x64 s4 w8": ("inline_nc", dict(T256, PEEL=True)),
    "pe 256x128x64 s4 w8": ("persistent", T256),
    "pe 128x256x64 s4 w8": ("persistent", T128),
    "pe 256x128x64 G4": ("persistent", dict(T256, GROUP=4)),
    "pe 256x128x64 G16": ("persistent", dict(T256, GROUP=16)),
    "pe 256x128x32 s8 w8": ("persistent", dict(BM=256, BN=128, BK=32, STAGES=8, **W8)),
    "pe 128x128x32 s6 w4 2/SM": ("persistent", dict(BM=128, BN=128, BK=32, STAGES=6,
                                                    CTAS=2, **W4)),
    # not a GEMM (C = 0, not checked): the same ring without MMAs, what the copies allow
    "copies only, pe 256x128x64": ("persistent", dict(T256, COPY_ONLY=True)),
}
HOPPER_GEMM = dict(BM=128, BN=256, BK=64, STAGES=4, num_warps=8)
DEV = "cuda"
CHECK_S, CHECK_H, GEMM_CHECK = 1040, 16, (1040, 528, 208)   # the benchmark's specializations


@kit.jit
def mma_ceiling(A, B, C, n, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr):
    """kit.mma on one pair of shared tiles, n times: the ldmatrix + mma.sync rate with no
    copies or barriers (what the GEMM's inner loop could reach)."""
    a = kit.shared((BM, BK), A.dtype.element_ty)
    b = kit.shared((BK, BN), B.dtype.element_ty)
    bar = kit.mbarriers(1)
    kit.tma_load(a, A, (0, 0), bar[0])
    kit.tma_load(b, B, (0, 0), bar[0])
    kit.mbarrier_wait(bar[0], 0)
    acc = kit.zeros((BM, BN), kit.float32)
    for _ in range(n):
        acc = kit.mma(a, b, acc)
    rm, rn = kit.arange(0, BM), kit.arange(0, BN)
    kit.store(C + kit.program_id(0) * BM * BN + rm[:, None] * BN + rn[None, :], acc)


# name -> (BM, BN, BK, num_warps, CTAs per SM): the first is the figure printed since session
# 5; the w8 ones are the GEMM's CTA (256x128 on 8 warps of 64x64, one CTA per SM by
# registers) at a quarter / a half / all of the iteration boundaries per K
CEILINGS = {"128x128x64 w4 2/SM": (128, 128, 64, 4, 2),
            "256x128x64 w8": (256, 128, 64, 8, 1),
            "256x128x128 w8": (256, 128, 128, 8, 1),
            "256x128x256 w8": (256, 128, 256, 8, 1)}


def make_ceiling(sms: int, BM: int, BN: int, BK: int, nw: int, ctas: int):
    """f(n): mma_ceiling with n loop trips on `ctas` programs per SM; f(0) (no launch) gives
    the flop of one trip over the grid."""
    grid = ctas * sms
    a = torch.randn(BM, BK, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(BK, BN, device=DEV, dtype=torch.bfloat16)
    c = torch.empty(grid, BM, BN, device=DEV)

    def f(n=4):
        if n:
            mma_ceiling[(grid,)](a, b, c, n, BM=BM, BN=BN, BK=BK, num_warps=nw, arch=ARCH)
        return 2 * BM * BN * BK * grid
    return f


def fa2(q, k, v, causal, cfg, o=None, lse=None, kernel="fa2"):
    """kernel: "fa2" (the example), "edge" (its clamped twin), "nn" (kitjit.nn's Hopper
    text), "ws" (kitjit.nn's warp-specialized text: setmaxnreg is a no-op on sm_80)."""
    B, H, S, D = q.shape
    if o is None:
        o = torch.empty_like(q)
        lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    # kitjit.nn's texts take K and V per head (B*H_kv, SK, D); the examples' 2-d rows
    kv = (k.view(-1, k.shape[2], D), v.view(-1, k.shape[2], D)) if kernel in ("nn", "ws") \
        else (k.view(-1, D), v.view(-1, D))
    args = (q.view(-1, D), *kv, o, lse, S, k.shape[2], H, H // k.shape[1],
            LOG2E / math.sqrt(D))
    grid = (kit.cdiv(S, cfg["BM"]), B * H)
    if kernel == "ws":
        attention_ws_kernel[grid](*args, D=D, CAUSAL=causal, CONSUMERS=2, num_warps=12,
                                  arch=ARCH, **cfg)
        return o, lse
    kern = {"fa2": fa2_kernel, "edge": fa2_edge, "nn": attention_kernel}[kernel]
    kern[grid](*args, D=D, CAUSAL=causal, num_warps=4, arch=ARCH, **cfg)
    return o, lse


def gemm(a, b, cfg, arch=ARCH, c=None, kernel="ampere"):
    """kernel: "ampere" (examples/matmul_ampere.py), "edge" (its clamped twin),
    "persistent" (its persistent=True kernel), "hopper" (examples/matmul.py, persistent, one
    CTA per SM)."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype) if c is None else c
    cfg = dict(cfg)
    group = cfg.pop("GROUP", 8)
    if kernel == "persistent":
        sms = torch.cuda.get_device_properties(0).multi_processor_count if DEV == "cuda" else 3
        return matmul_ampere(a, b, arch=arch, persistent=True, c=c, GROUP=group,
                             programs=cfg.pop("PROGRAMS", sms * cfg.pop("CTAS", 1)), **cfg)
    tiles = kit.cdiv(M, cfg["BM"]) * kit.cdiv(N, cfg["BN"])
    if kernel in ("ampere", "edge") or kernel in FLAGGED:
        kern = {"ampere": matmul_ampere_kernel, "edge": gemm_edge,
                **{k: v[0] for k, v in FLAGGED.items()}}[kernel]
        kern[(tiles,)](a, b, c, M, N, K, GROUP=group, arch=arch, **cfg)
        return c
    sms = torch.cuda.get_device_properties(0).multi_processor_count if DEV == "cuda" else 4
    matmul_kernel[(min(tiles, sms),)](a, b, c, c, c, M, N, K, GROUP=group, arch=arch, **cfg)
    return c


def timed(fns: dict, rounds: int) -> dict:
    """name -> median over `rounds` interleaved rounds of each fn's median ms."""
    got: dict = {n: [] for n in fns}
    for _ in range(rounds):
        for n, f in fns.items():
            got[n].append(bench(f))
    return {n: statistics.median(t) for n, t in got.items()}


def rel(got, want) -> float:
    if torch.isnan(got).any():
        return float("nan")
    return ((got.double() - want).norm() / want.norm()).item()


def qkv(B, H, S, SK, D, g=1):
    q = torch.randn(B, H, S, D, device=DEV, dtype=torch.bfloat16)
    k, v = (torch.randn(B, H // g, SK, D, device=DEV, dtype=torch.bfloat16) for _ in "kv")
    return q, k, v


def func_regs(ck) -> str:
    """Registers and local memory of the function the driver assembled on this GPU."""
    from cuda.bindings import driver as cu

    f = cu.CUfunction(ck.function(torch.cuda.current_device()))
    _, regs = cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, f)
    _, local = cu.cuFuncGetAttribute(
        cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f)
    return f"{regs} regs, {local} B local (ptxas sm_80: {ck.n_regs} regs, {ck.n_spills} B spilled)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gemm-only", action="store_true", help="no attention kernels")
    ap.add_argument("--variants", default=None,
                    help="comma-separated: only the GEMM variants whose names contain one "
                         "(=name: exactly that one)")
    ap.add_argument("--dry", action="store_true", help="CPU interpreter, tiny sizes, no timing")
    args = ap.parse_args()
    global DEV, CHECK_S, CHECK_H, GEMM_CHECK
    if args.dry:
        os.environ["KITJIT_INTERPRET"] = "1"
        DEV, CHECK_S, CHECK_H, GEMM_CHECK = "cpu", 144, 2, (144, 80, 48)
    torch.manual_seed(0)
    dev = torch.cuda.get_device_name() if DEV == "cuda" else "cpu (dry run)"
    print(f"{dev}, torch {torch.__version__}, kitjit from {kit.__file__}", flush=True)
    out: dict = {"device": dev, "date": time.strftime("%Y-%m-%d"), "check": [], "attn": [],
                 "gemm": []}
    # (D, causal) -> name -> (config, kernel)
    attn_vars = {}
    for D, cfgs in ATTN_CONFIGS.items():
        for causal in (False, True):
            v = {n: (c, "fa2") for n, c in cfgs.items()}
            v.update({f"{n} edge": (cfgs[n], "edge") for n in ATTN_EDGE[D]})
            if not args.gemm_only:
                attn_vars[(D, causal)] = dict(list(v.items())[:1]) if args.quick else v
    gemm_cfgs = dict(list(GEMM_CONFIGS.items())[:2]) if args.quick else GEMM_CONFIGS
    if args.variants:
        keep = [v.strip() for v in args.variants.split(",") if v.strip()]
        gemm_cfgs = {n: c for n, c in gemm_cfgs.items()
                     if any(n == k[1:] if k.startswith("=") else k in n for k in keep)}

    # ---------------------------------------------------------------- compile everything
    t0 = time.perf_counter()
    small = {D: qkv(1, CHECK_H, CHECK_S, CHECK_S, D) for D in (64, 128)}
    M0, N0, K0 = GEMM_CHECK
    ga, gb = (torch.randn(s, device=DEV, dtype=torch.bfloat16) for s in ((M0, K0), (K0, N0)))
    edge_jobs, jobs = [], []
    flag_jobs: dict = {k: [] for k in FLAGGED}
    for (D, causal), vs in attn_vars.items():
        for cfg, kern in vs.values():
            (edge_jobs if kern == "edge" else jobs).append(
                lambda D=D, causal=causal, cfg=cfg, kern=kern: fa2(*small[D], causal, cfg,
                                                                   kernel=kern))
    if not args.gemm_only:
        jobs.append(lambda: fa2(*small[128], True, dict(BM=128, BN=64, STAGES=2),
                                kernel="nn"))
    for kern, cfg in gemm_cfgs.values():
        {"edge": edge_jobs, **flag_jobs}.get(kern, jobs).append(
            lambda cfg=cfg, kern=kern: gemm(ga, gb, cfg, kernel=kern))
    jobs.append(lambda: gemm(ga, gb, HOPPER_GEMM, arch=None, kernel="hopper"))
    sms = torch.cuda.get_device_properties(0).multi_processor_count if DEV == "cuda" else 2
    ceilings = {name: make_ceiling(sms, *cfg) for name, cfg in CEILINGS.items()}
    jobs.extend(ceilings.values())
    groups = [(True, False, False, edge_jobs)] + [
        (False, contig, inline, flag_jobs[k]) for k, (_, contig, inline) in FLAGGED.items()]
    for clamp, contig, inline, js in groups + [(False, False, False, jobs)]:
        sm80_lowering._ALWAYS_CLAMP = clamp          # the twins first, each group alone
        sm80_lowering._COPIES_IN_LINE = inline
        sm80_frontend._WARP_COLS_CONTIGUOUS = contig
        with cf.ThreadPoolExecutor(1 if args.dry else 8) as pool:
            for f in [pool.submit(j) for j in js]:
                f.result()
    sm80_lowering._ALWAYS_CLAMP = sm80_lowering._COPIES_IN_LINE = False
    sm80_frontend._WARP_COLS_CONTIGUOUS = False
    if DEV == "cuda":
        torch.cuda.synchronize()
    n_jobs = len(jobs) + len(edge_jobs) + sum(map(len, flag_jobs.values()))
    # a twin compiled again later (a new specialization) would be compiled without its flag
    twins = [gemm_edge, *(v[0] for v in FLAGGED.values())]
    n_cached = [len(t.cache) for t in twins]
    print(f"compiled {n_jobs} kernels in {time.perf_counter() - t0:.1f} s", flush=True)

    # ---------------------------------------------------------------- correctness
    def check(name, got, want, tol):
        e = rel(got, want)
        ok = e < tol
        out["check"].append({"name": name, "rel_err": e, "ok": ok})
        print(f"  check {name}: rel err {e:.2e} {'ok' if ok else 'FAIL'}", flush=True)
        return ok

    def poisoned(q):
        return (torch.full_like(q, float("nan")),
                torch.full(q.shape[:3], float("nan"), device=DEV))

    for (D, causal), vs in attn_vars.items():
        q, k, v = qkv(1, CHECK_H, CHECK_S, CHECK_S, D)
        ro, rl = reference(q, k, v, causal)
        for name, (cfg, kern) in vs.items():
            o, lse = poisoned(q)
            fa2(q, k, v, causal, cfg, o, lse, kernel=kern)
            check(f"fa2 D{D} {'causal' if causal else 'full'} {name} S{CHECK_S}", o, ro,
                  1e-2)
            check("  lse", lse, rl, 1e-4)
    for S, SK, D, causal, g, cfg in () if args.gemm_only else (
            (333, 333, 128, True, 2, dict(BM=128, BN=64, STAGES=2)),
            (100, 333, 64, False, 4, dict(BM=128, BN=128, STAGES=2))):
        q, k, v = qkv(2, 4, S, SK, D, g)   # ragged, GQA, S != SK
        ro, rl = reference(q, k, v, causal)
        o, lse = poisoned(q)
        fa2(q, k, v, causal, cfg, o, lse)
        check(f"fa2 D{D} S{S} SK{SK} gqa{g} {'causal' if causal else 'full'}", o, ro, 1e-2)
        check("  lse", lse, rl, 1e-4)
    ref = ga.double() @ gb.double()
    for name, (kern, cfg) in gemm_cfgs.items():
        if cfg.get("COPY_ONLY"):
            continue
        c = torch.full((M0, N0), float("nan"), device=DEV, dtype=torch.bfloat16)
        check(f"gemm sm_80 {name} {M0}x{N0}x{K0}", gemm(ga, gb, cfg, c=c, kernel=kern), ref,
              1e-2)
        if kern == "persistent":   # 7 programs: each walks several tiles, the ring across
            c = torch.full((M0, N0), float("nan"), device=DEV, dtype=torch.bfloat16)
            check(f"gemm sm_80 {name} {M0}x{N0}x{K0}, 7 programs",
                  gemm(ga, gb, dict(cfg, PROGRAMS=7), c=c, kernel=kern), ref, 1e-2)
    c = torch.full((M0, N0), float("nan"), device=DEV, dtype=torch.bfloat16)
    check(f"gemm Hopper path {M0}x{N0}x{K0}", gemm(ga, gb, HOPPER_GEMM, arch=None, c=c,
                                                   kernel="hopper"), ref, 1e-2)
    try:  # Hopper kernel texts on sm_80 (warp-specialized: setmaxnreg is a no-op there)
        from tests.test_ampere import roles_kernel
        a = torch.randn(256, 64, device=DEV, dtype=torch.bfloat16)
        c = torch.full((4, 64, 64), float("nan"), device=DEV)
        roles_kernel[(1,)](a, c, BM=64, num_warps=8, arch=ARCH)
        want = torch.stack([a[j * 64:(j + 1) * 64].double() @ a[j * 64:(j + 1) * 64].double().T
                            for j in range(4)])
        check("producer/consumer roles on sm_80 (tests/test_ampere.py roles_kernel)", c, want,
              1e-5)
        if args.gemm_only:
            raise SystemExit("skipped (--gemm-only)")
        q, k, v = qkv(1, CHECK_H, CHECK_S, CHECK_S, 128)
        ro, rl = reference(q, k, v, True)
        o, lse = poisoned(q)
        fa2(q, k, v, True, dict(BM=128, BN=64, STAGES=2), o, lse, kernel="nn")
        check(f"kitjit.nn Hopper text on sm_80, D128 causal S{CHECK_S}", o, ro, 1e-2)
        q, k, v = qkv(1, 4, 300, 300, 128, 2)
        ro, rl = reference(q, k, v, True)
        o, lse = poisoned(q)
        fa2(q, k, v, True, dict(BM=128, BN=128, STAGES=2), o, lse, kernel="ws")
        check("kitjit.nn warp-specialized text (setmaxnreg) on sm_80, D128 causal S300", o,
              ro, 1e-2)
        check("  lse", lse, rl, 1e-4)
    except SystemExit as e:
        print(f"  attention texts on sm_80: {e}")
    except Exception as e:  # a failure here must not hide the timings
        print(f"  check roles: {type(e).__name__}: {e}")
        out["check"].append({"name": "roles", "error": str(e), "ok": False})
    for jf in (fa2_kernel, fa2_edge, matmul_ampere_kernel, gemm_edge,
               *(v[0] for v in FLAGGED.values()),
               matmul_ampere_persistent_kernel) if DEV == "cuda" else ():
        for record in jf.cache.values():
            ck = record_kernel(record)
            if ck is not None and ck.metadata.get("ptx_target"):
                print(f"  {ck.name} {ck.metadata['constexprs']}: {func_regs(ck)}")

    # ---------------------------------------------------------------- timing
    if args.dry:
        print("dry run: checks", [c["ok"] for c in out["check"]])
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for B, H, S, D, causal in () if args.gemm_only else ATTN_CASES:
        q, k, v = qkv(B, H, S, S, D)
        flop = 4 * B * H * S * S * D / (2 if causal else 1) / 1e9

        def flash():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                                       is_causal=causal)
        fns = {name: (lambda cfg=cfg, kern=kern: fa2(q, k, v, causal, cfg, kernel=kern))
               for name, (cfg, kern) in attn_vars[(D, causal)].items()}
        fns["flash"] = flash
        ms = timed(fns, args.rounds)
        res = {n: flop / t for n, t in ms.items() if n != "flash"}
        fl = flop / ms["flash"]
        best = max((n for n in res if "edge" not in n), key=res.get)
        edge = max((n for n in res if "edge" in n), key=res.get, default=None)
        row = {"case": f"B{B} H{H} S{S} D{D}{' causal' if causal else ''}", "flash": fl,
               "kitjit": res, "best": best, "ratio": res[best] / fl,
               "edge_ratio": res[edge] / fl if edge else None}
        out["attn"].append(row)
        print(f"  {row['case']}: " + ", ".join(f"{n} {t:.0f}" for n, t in res.items()) +
              f"; flash {fl:.0f} TFLOP/s -> {row['ratio']:.2f}x", flush=True)
    # loop trips: K = 262144 for every ceiling (4096 trips at BK 64)
    trips = {name: 4096 * 64 // CEILINGS[name][2] for name in ceilings}
    ms = timed({name: (lambda f=f, n=trips[name]: f(n)) for name, f in ceilings.items()},
               args.rounds)
    out["mma_ceiling"] = {name: ceilings[name](0) * trips[name] / ms[name] / 1e9
                          for name in ms}
    for name, t in out["mma_ceiling"].items():
        print(f"  kit.mma ceiling {name} (from shared, no copies): {t:.0f} TFLOP/s", flush=True)
    for M, N, K in GEMM_SHAPES:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        flop = 2 * M * N * K / 1e9
        fns = {name: (lambda cfg=cfg, kern=kern: gemm(a, b, cfg, kernel=kern))
               for name, (kern, cfg) in gemm_cfgs.items()}
        fns["hopper"] = lambda: gemm(a, b, HOPPER_GEMM, arch=None, kernel="hopper")
        fns["cublas"] = lambda: a @ b
        ms = timed(fns, args.rounds)
        res = {n: flop / ms[n] for n in gemm_cfgs}
        hop, cub = flop / ms["hopper"], flop / ms["cublas"]
        best = max((n for n in res if "edge" not in n and "copies" not in n), key=res.get)
        row = {"shape": f"{M}x{N}x{K}", "sm80": res, "best": best, "hopper": hop,
               "cublas": cub, "ratio": res[best] / cub}
        out["gemm"].append(row)
        print(f"  gemm {row['shape']}: " + ", ".join(f"{n} {t:.0f}" for n, t in res.items()) +
              f"; Hopper path {hop:.0f}; cuBLAS {cub:.0f} TFLOP/s -> {row['ratio']:.2f}x",
              flush=True)

    if [len(t.cache) for t in twins] != n_cached:
        raise SystemExit("a flagged twin (edge / nc / il) was compiled again after the compile "
                         "phase, without its flag: its timings are not that variant's")

    # ---------------------------------------------------------------- table
    bad = [c["name"] for c in out["check"] if not c["ok"]]
    print(f"\n{dev} {out['date']}: the sm_80 code path (arch='sm_80'), bf16, TFLOP/s, "
          f"medians of {args.rounds} interleaved rounds")
    print(f"checks: {len(out['check']) - len(bad)}/{len(out['check'])} ok"
          + (f"; FAILED: {bad}" if bad else ""))
    print(f"{'attention fwd':26} {'kitjit best':>22} {'FA2 flash':>9} {'ratio':>6} "
          f"{'edge-path ratio':>15}")
    for r in out["attn"]:
        er = f"{r['edge_ratio']:.2f}" if r["edge_ratio"] else "-"
        print(f"{r['case']:26} {r['kitjit'][r['best']]:>7.0f} ({r['best']:>12}) "
              f"{r['flash']:>9.0f} {r['ratio']:>6.2f} {er:>15}")
    if out["gemm"]:   # one row a variant, one column pair a shape
        shapes = [r["shape"] for r in out["gemm"]]
        print(f"{'gemm (ex: matmul_ampere.py, pe: persistent)':44}"
              + "".join(f" {s:>11} {'/cuBLAS':>7}" for s in shapes))
        rows = [(n, [r["sm80"][n] for r in out["gemm"]]) for n in out["gemm"][0]["sm80"]]
        rows += [(n, [r[k] for r in out["gemm"]]) for n, k in (("Hopper path (WGMMA + TMA)",
                                                                "hopper"), ("cuBLAS", "cublas"))]
        for n, ts in rows:
            print(f"{n:44}" + "".join(f" {t:>11.0f} {t / r['cublas']:>7.2f}"
                                      for t, r in zip(ts, out["gemm"])))
        for r in out["gemm"]:
            print(f"best sm_80 GEMM at {r['shape']}: {r['best']}, {r['ratio']:.3f}x cuBLAS")
    print("kit.mma ceilings (ldmatrix + mma.sync from shared, no copies, no waits): "
          + ", ".join(f"{n} {t:.0f}" for n, t in out["mma_ceiling"].items()))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

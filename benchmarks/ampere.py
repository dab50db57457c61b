"""The Ampere code path (kit.tma_load on cp.async, kit.mma on ldmatrix + mma.sync) on whatever
GPU this is, through the `arch="sm_80"` launch option: correctness at ragged sizes (outputs
poisoned with NaN, float64 references), then speed against torch's flash SDPA (FA2, itself an
sm_80 kernel) and cuBLAS, with the Hopper path's GEMM beside it.

    python benchmarks/ampere.py [--quick] [--json out.json]

Every kernel is compiled (first launch) in a thread pool before anything is timed: the
driver assembles the compute_80 PTX of each, which takes seconds.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import math
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import kitjit as kit  # noqa: E402
from examples.attention_ampere import fa2_kernel, reference  # noqa: E402
from examples.matmul import matmul_kernel  # noqa: E402
from examples.matmul_ampere import matmul_ampere_kernel  # noqa: E402
from kitjit.launcher import record_kernel  # noqa: E402
from kitjit.nn.attention import attention_kernel  # noqa: E402
from kitjit.testing import bench  # noqa: E402

ARCH = "sm_80"
LOG2E = 1.4426950408889634
ATTN_CASES = [(4, 32, 4096, 128, False), (4, 32, 4096, 128, True), (4, 32, 4096, 64, False),
              (4, 32, 4096, 64, True), (2, 16, 16384, 128, False), (2, 16, 16384, 128, True)]
ATTN_CONFIGS = {128: {"128x64 s1": dict(BM=128, BN=64, STAGES=1),
                      "128x64 s2": dict(BM=128, BN=64, STAGES=2)},
                64: {"128x128 s2": dict(BM=128, BN=128, STAGES=2),
                     "128x128 s1": dict(BM=128, BN=128, STAGES=1)}}
GEMM_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192)]
# (kernel, config, CTAs per SM for the persistent kernel's grid)
GEMM_CONFIGS = {"ampere 128x128x32 s6": ("ampere", dict(BM=128, BN=128, BK=32, STAGES=6,
                                                        num_warps=4), 0),
                "ampere 128x128x32 s4": ("ampere", dict(BM=128, BN=128, BK=32, STAGES=4,
                                                        num_warps=4), 0),
                "ampere 128x128x64 s3": ("ampere", dict(BM=128, BN=128, BK=64, STAGES=3,
                                                        num_warps=4), 0),
                "ampere 128x256x32 s6 w8": ("ampere", dict(BM=128, BN=256, BK=32, STAGES=6,
                                                           num_warps=8), 0),
                "matmul.py 128x128x64 s3 2/SM": ("persistent", dict(BM=128, BN=128, BK=64,
                                                                    STAGES=3, num_warps=4), 2)}
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


def fa2(q, k, v, causal, cfg, o=None, lse=None, kernel="fa2"):
    B, H, S, D = q.shape
    if o is None:
        o = torch.empty_like(q)
        lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    args = (*(t.view(-1, D) for t in (q, k, v)), o, lse, S, k.shape[2], H, H // k.shape[1],
            LOG2E / math.sqrt(D))
    grid = (kit.cdiv(S, cfg["BM"]), B * H)
    if kernel == "fa2":
        fa2_kernel[grid](*args, D=D, CAUSAL=causal, num_warps=4, arch=ARCH, **cfg)
    else:  # kitjit.nn's Hopper kernel text, on the sm_80 path
        attention_kernel[grid](*args, D=D, CAUSAL=causal, num_warps=4, arch=ARCH, **cfg)
    return o, lse


def gemm(a, b, cfg, per_sm, arch=ARCH, c=None, kernel="persistent"):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype) if c is None else c
    cfg = dict(cfg)
    if kernel == "ampere":
        grid = (kit.cdiv(M, cfg["BM"]) * kit.cdiv(N, cfg["BN"]),)
        matmul_ampere_kernel[grid](a, b, c, M, N, K, GROUP=8, arch=arch, **cfg)
        return c
    sms = (torch.cuda.get_device_properties(0).multi_processor_count if DEV == "cuda"
           else 4) * per_sm
    grid = (min(kit.cdiv(M, cfg["BM"]) * kit.cdiv(N, cfg["BN"]), sms),)
    matmul_kernel[grid](a, b, c, c, c, M, N, K, GROUP=8, arch=arch, **cfg)
    return c


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
    ap.add_argument("--dry", action="store_true", help="CPU interpreter, tiny sizes, no timing")
    args = ap.parse_args()
    global DEV, CHECK_S, CHECK_H, GEMM_CHECK
    if args.dry:
        import os

        os.environ["KITJIT_INTERPRET"] = "1"
        DEV, CHECK_S, CHECK_H, GEMM_CHECK = "cpu", 144, 2, (144, 80, 48)
    torch.manual_seed(0)
    dev = torch.cuda.get_device_name() if DEV == "cuda" else "cpu (dry run)"
    print(f"{dev}, torch {torch.__version__}, kitjit from {kit.__file__}", flush=True)
    out: dict = {"device": dev, "date": time.strftime("%Y-%m-%d"), "check": [], "attn": [],
                 "gemm": []}
    attn_cfgs = {D: (dict(list(c.items())[:1]) if args.quick else c)
                 for D, c in ATTN_CONFIGS.items()}
    gemm_cfgs = dict(list(GEMM_CONFIGS.items())[:1]) if args.quick else GEMM_CONFIGS

    # ---------------------------------------------------------------- compile everything
    t0 = time.perf_counter()
    small = {D: qkv(1, CHECK_H, CHECK_S, CHECK_S, D) for D in (64, 128)}
    M0, N0, K0 = GEMM_CHECK
    ga, gb = (torch.randn(s, device=DEV, dtype=torch.bfloat16) for s in ((M0, K0), (K0, N0)))
    jobs = []
    for D, cfgs in attn_cfgs.items():
        for causal in (False, True):
            for cfg in cfgs.values():
                jobs.append(lambda D=D, causal=causal, cfg=cfg: fa2(*small[D], causal, cfg))
    for causal in (False, True):
        jobs.append(lambda causal=causal: fa2(*small[128], causal, dict(BM=128, BN=64,
                                                                      STAGES=2), kernel="nn"))
    for kern, cfg, per_sm in gemm_cfgs.values():
        jobs.append(lambda cfg=cfg, per_sm=per_sm, kern=kern: gemm(ga, gb, cfg, per_sm,
                                                                   kernel=kern))
    jobs.append(lambda: gemm(ga, gb, HOPPER_GEMM, 1, arch=None))
    sms = torch.cuda.get_device_properties(0).multi_processor_count if DEV == "cuda" else 2
    ca, cb = ga[:128, :64].contiguous(), gb[:64, :128].contiguous()
    cc = torch.empty(2 * sms, 128, 128, device=DEV)

    def ceiling(n=4):
        mma_ceiling[(2 * sms,)](ca, cb, cc, n, BM=128, BN=128, BK=64, num_warps=4, arch=ARCH)
    jobs.append(ceiling)
    with cf.ThreadPoolExecutor(1 if args.dry else 8) as pool:
        for f in [pool.submit(j) for j in jobs]:
            f.result()
    if DEV == "cuda":
        torch.cuda.synchronize()
    print(f"compiled {len(jobs)} kernels in {time.perf_counter() - t0:.1f} s", flush=True)

    # ---------------------------------------------------------------- correctness
    def check(name, got, want, tol):
        e = rel(got, want)
        ok = e < tol
        out["check"].append({"name": name, "rel_err": e, "ok": ok})
        print(f"  check {name}: rel err {e:.2e} {'ok' if ok else 'FAIL'}", flush=True)
        return ok

    for D, cfgs in attn_cfgs.items():
        q, k, v = qkv(1, CHECK_H, CHECK_S, CHECK_S, D)
        for causal in (False, True):
            ro, rl = reference(q, k, v, causal)
            for name, cfg in cfgs.items():
                o = torch.full_like(q, float("nan"))
                lse = torch.full(q.shape[:3], float("nan"), device=DEV)
                fa2(q, k, v, causal, cfg, o, lse)
                check(f"fa2 D{D} {'causal' if causal else 'full'} {name} S{CHECK_S}", o, ro,
                      1e-2)
                check("  lse", lse, rl, 1e-4)
    q, k, v = qkv(1, CHECK_H, CHECK_S, CHECK_S, 128)
    ro, rl = reference(q, k, v, True)
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device=DEV)
    fa2(q, k, v, True, dict(BM=128, BN=64, STAGES=2), o, lse, kernel="nn")
    check(f"kitjit.nn Hopper text on sm_80, D128 causal S{CHECK_S}", o, ro, 1e-2)
    for S, SK, D, causal, g in ((333, 333, 128, True, 2), (100, 333, 64, False, 4)):
        q, k, v = qkv(2, 4, S, SK, D, g)   # ragged, GQA, S != SK
        ro, rl = reference(q, k, v, causal)
        o = torch.full_like(q, float("nan"))
        lse = torch.full(q.shape[:3], float("nan"), device=DEV)
        fa2(q, k, v, causal, dict(BM=128, BN=64, STAGES=2), o, lse)
        check(f"fa2 D{D} S{S} SK{SK} gqa{g} {'causal' if causal else 'full'}", o, ro, 1e-2)
        check("  lse", lse, rl, 1e-4)
    ref = ga.double() @ gb.double()
    for name, (kern, cfg, per_sm) in gemm_cfgs.items():
        c = torch.full((M0, N0), float("nan"), device=DEV, dtype=torch.bfloat16)
        check(f"gemm sm_80 {name} {M0}x{N0}x{K0}", gemm(ga, gb, cfg, per_sm, c=c,
                                                        kernel=kern), ref, 1e-2)
    c = torch.full((M0, N0), float("nan"), device=DEV, dtype=torch.bfloat16)
    check(f"gemm Hopper path {M0}x{N0}x{K0}", gemm(ga, gb, HOPPER_GEMM, 1, arch=None, c=c),
          ref, 1e-2)
    try:
        from tests.test_ampere import _mma_store
        for tb in (False, True):
            a = torch.randn(300, 200, device=DEV, dtype=torch.bfloat16)
            b = torch.randn(200, 264, device=DEV, dtype=torch.bfloat16)
            check(f"mma + tma_store sm_80 300x264x200 trans_b={tb}",
                  _mma_store(a, b.t().contiguous() if tb else b, tb, arch=ARCH),
                  a.double() @ b.double(), 1e-2)
    except Exception as e:  # a failure here must not hide the timings
        print(f"  check mma + tma_store: {type(e).__name__}: {e}")
        out["check"].append({"name": "mma + tma_store", "error": str(e), "ok": False})
    for jf in (fa2_kernel, matmul_kernel, matmul_ampere_kernel) if DEV == "cuda" else ():
        for record in jf.cache.values():
            ck = record_kernel(record)
            if ck is not None and ck.metadata.get("ptx_target"):
                print(f"  {ck.name} {ck.metadata['constexprs']}: {func_regs(ck)}")

    # ---------------------------------------------------------------- timing
    if args.dry:
        print("dry run: checks", [c["ok"] for c in out["check"]])
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    for B, H, S, D, causal in ATTN_CASES:
        q, k, v = qkv(B, H, S, S, D)
        flop = 4 * B * H * S * S * D / (2 if causal else 1) / 1e9

        def flash():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                                       is_causal=causal)
        res = {}
        for name, cfg in attn_cfgs[D].items():
            res[name] = flop / bench(lambda cfg=cfg: fa2(q, k, v, causal, cfg))
        if D == 128 and causal and not args.quick:
            res["nn text 128x64 s2"] = flop / bench(
                lambda: fa2(q, k, v, causal, dict(BM=128, BN=64, STAGES=2), kernel="nn"))
        fl = flop / bench(flash)
        best = max(res, key=res.get)
        row = {"case": f"B{B} H{H} S{S} D{D}{' causal' if causal else ''}", "flash": fl,
               "kitjit": res, "best": best, "ratio": res[best] / fl}
        out["attn"].append(row)
        rows.append(row)
        print(f"  {row['case']}: " + ", ".join(f"{n} {t:.0f}" for n, t in res.items()) +
              f"; flash {fl:.0f} TFLOP/s -> {row['ratio']:.2f}x", flush=True)
    n_ceil = 4096
    t = bench(lambda: ceiling(n_ceil))
    ceil = 2 * 128 * 128 * 64 * n_ceil * 2 * sms / t / 1e9
    out["mma_ceiling"] = ceil
    print(f"  kit.mma ceiling (128x128x64 from shared, 4 warps, 2 CTAs/SM, no copies): "
          f"{ceil:.0f} TFLOP/s", flush=True)
    for M, N, K in GEMM_SHAPES:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        flop = 2 * M * N * K / 1e9
        res = {name: flop / bench(lambda cfg=cfg, p=p, kern=kern: gemm(a, b, cfg, p,
                                                                       kernel=kern))
               for name, (kern, cfg, p) in gemm_cfgs.items()}
        hop = flop / bench(lambda: gemm(a, b, HOPPER_GEMM, 1, arch=None))
        cub = flop / bench(lambda: a @ b)
        best = max(res, key=res.get)
        row = {"shape": f"{M}x{N}x{K}", "sm80": res, "best": best, "hopper": hop,
               "cublas": cub, "ratio": res[best] / cub}
        out["gemm"].append(row)
        print(f"  gemm {row['shape']}: " + ", ".join(f"{n} {t:.0f}" for n, t in res.items()) +
              f"; Hopper path {hop:.0f}; cuBLAS {cub:.0f} TFLOP/s -> {row['ratio']:.2f}x",
              flush=True)

    # ---------------------------------------------------------------- table
    bad = [c["name"] for c in out["check"] if not c["ok"]]
    print(f"\n{dev} {out['date']}: the sm_80 code path (arch='sm_80'), bf16, TFLOP/s")
    print(f"checks: {len(out['check']) - len(bad)}/{len(out['check'])} ok"
          + (f"; FAILED: {bad}" if bad else ""))
    print(f"{'attention fwd':28} {'kitjit best':>22} {'FA2 flash':>10} {'ratio':>6}")
    for r in rows:
        print(f"{r['case']:28} {r['kitjit'][r['best']]:>8.0f} ({r['best']:>11}) "
              f"{r['flash']:>10.0f} {r['ratio']:>6.2f}")
    print(f"{'gemm':14} {'sm_80 best':>36} {'Hopper path':>12} {'cuBLAS':>8} {'ratio':>6}")
    for r in out["gemm"]:
        print(f"{r['shape']:14} {r['sm80'][r['best']]:>6.0f} ({r['best']:>28}) "
              f"{r['hopper']:>12.0f} {r['cublas']:>8.0f} {r['ratio']:>6.2f}")
    print(f"kit.mma ceiling (ldmatrix + mma.sync from shared, no copies): {ceil:.0f}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

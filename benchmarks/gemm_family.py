"""The GEMM family against torch's best path, in one run on one GPU (issue 15):

- fp8 (examples/matmul_fp8.py) against torch._scaled_mm (cuBLAS fp8), per-tensor scales at
  4096^3, 8192^3, 8192x8192x1024, 16384x1024x4096 for several tile configs; row-wise and
  1x128/128x128 block scales at 8192^3 against what this torch offers for them;
- grouped GEMM for MoE (examples/grouped_matmul.py) against torch._grouped_mm and a loop of
  cuBLAS calls: 8 and 64 experts, 4096 and 16384 routed tokens, hidden 4096 <-> 14336;
- fused epilogues (examples/matmul_epilogue.py) against cuBLAS plus torch's epilogue;
- the bf16 example (examples/matmul.py) at the Llama-3-8B/70B linear layers (QKV, O,
  gate-up, down) for M = 1, 16, 128, 4096, 16384 against cuBLAS.
- `cluster`: the persistent GEMM on 2-CTA clusters with B multicast
  (kitjit/nn/matmul_cluster.py) beside cuBLAS, the example's default and tma-halves, at the
  four large shapes, B [K, N] and [N, K].
- `skinny`: the Llama-3 layers at M = 1, 16, 128 (`--skinny-m`): the example's default
  split-K against cuBLAS and the split-K whose parts add in a cluster's distributed shared
  memory (kitjit/nn/matmul_splitk.py: `cluster`, `cluster-a` with A shared by multicast,
  `cluster-a l2b0`; `--skinny-cluster`), each row's plan (parts P, A sharers CN) printed.

Every timed variant is checked against the peer's output first. Timing: each variant runs
for a moment before it is timed (clocks follow what ran before), medians of CUDA-event
timings with the L2 flushed, two interleaved rounds, best of the two (one in `skinny`).
`skinny` and `llm` also time each variant by CUDA-graph replays and back-to-back calls
over rotating copies of the inputs (benchmarks/skinny_timing.py: per-call events put our
wrapper's host stalls into 15-50 us kernels) and print geomeans x cuBLAS per M of both.

    python benchmarks/gemm_family.py [--only fp8,grouped,epilogue,llm,large,skinny,probe,
        cluster]
        [--json out.json] [--fp8-configs NAME,...] [--no-fp8-scales] [--skinny-m 1,16,128]
        [--skinny-cluster NAME,...]
        [--grouped-variants legacy,tma,bm64,legacy-bal]
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time
import traceback

import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(1, str(ROOT / "benchmarks"))

import grouped_matmul as grp  # noqa: E402
import matmul as mm  # noqa: E402
import matmul_epilogue as epi  # noqa: E402
import matmul_fp8 as f8  # noqa: E402
import skinny_timing as st  # noqa: E402

from kitjit.testing import bench, rel_error  # noqa: E402

results: dict = {}
ROUNDS = 2
DEVICE = "cuda"   # of the skinny and llm sections' tensors (the CPU test mocks a run)


def steady(fn, seconds: float = 0.08) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        torch.cuda.synchronize()
    return bench(fn, warmup=2, rep=_reps(fn))


def _reps(fn) -> int:
    """About 0.15 s of runs, at least 5 and at most 50."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    torch.cuda.synchronize()
    return max(5, min(50, int(150 / max(s.elapsed_time(e), 1e-3))))


def interleaved(runs: dict, rounds: int | None = None) -> dict:
    ms = {n: steady(f) for n, f in runs.items()}
    for _ in range((rounds or ROUNDS) - 1):
        for n, f in runs.items():
            ms[n] = min(ms[n], steady(f))
    return ms


def geomean(xs) -> float | None:
    xs = [x for x in xs if x]
    return round(math.exp(sum(math.log(x) for x in xs) / len(xs)), 3) if xs else None


class poisoned:
    """torch.empty / torch.empty_like hand out NaN-filled float tensors (the wrappers
    allocate their outputs with them), so an unwritten element fails the check instead of
    showing the previous variant's result from a recycled allocation."""

    def __enter__(self):
        self.orig = torch.empty, torch.empty_like

        def poisoning(orig):
            def alloc(*a, **k):
                t = orig(*a, **k)
                if t.dtype.is_floating_point and t.numel():
                    t.fill_(float("nan"))
                return t
            return alloc

        torch.empty, torch.empty_like = (poisoning(f) for f in self.orig)

    def __exit__(self, *exc):
        torch.empty, torch.empty_like = self.orig


def checked(out, ref, tol, what) -> float:
    err = rel_error(out, ref)
    if not err <= tol:
        raise AssertionError(f"{what}: relative error {err:.3g} over {tol:g}")
    return err


# ----------------------------------------------------------------------------- fp8
FP8_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024), (16384, 1024, 4096)]
FP8_CONFIGS = {  # name -> matmul_fp8 config (unnamed keys: the example's DEFAULT's; until
    # session 11 "128x256 s4" here meant DEFAULT itself, tma-halves included, not direct;
    # DEFAULT has OVERLAP=True since session 11)
    "default (tuned)": {},
    "128x256 s4 tma-halves": dict(BM=128, BN=256, STAGES=4, TMA_STORE=2, OVERLAP=False),
    "128x256 s4 direct": dict(BM=128, BN=256, STAGES=4, TMA_STORE=False, OVERLAP=False),
    "128x256 s3 tma-store": dict(BM=128, BN=256, STAGES=3, TMA_STORE=True, OVERLAP=False),
    "256x128 s4 tma-halves": dict(BM=256, BN=128, STAGES=4, TMA_STORE=2, OVERLAP=False),
    "128x128 s6 tma-halves": dict(BM=128, BN=128, STAGES=6, TMA_STORE=2, OVERLAP=False),
    "128x128 s5 tma-store": dict(BM=128, BN=128, STAGES=5, TMA_STORE=True, OVERLAP=False),
    "128x256 s4 overlap": dict(BM=128, BN=256, STAGES=4, TMA_STORE=2, OVERLAP=True),
}


def bench_fp8() -> None:
    rows = results["fp8"] = []
    e4 = torch.float8_e4m3fn
    for M, N, K in FP8_SHAPES:
        a = (torch.randn(M, K, device="cuda") * 2).to(e4)
        b = (torch.randn(N, K, device="cuda") * 2).to(e4)
        sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(0.25, device="cuda")
        flop = 2 * M * N * K / 1e9
        ref = torch._scaled_mm(a, b.T, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)
        runs = {"scaled_mm(fast_accum)": lambda: torch._scaled_mm(
                    a, b.T, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True),
                "scaled_mm": lambda: torch._scaled_mm(a, b.T, sa, sb,
                                                      out_dtype=torch.bfloat16)}
        errs = {}
        for name, cfg in FP8_CONFIGS.items():
            try:
                with poisoned():
                    out = f8.matmul_fp8(a, b, sa, sb, **cfg)
                errs[name] = checked(out.double(), ref.double(), 1e-2, f"fp8 {M}x{N}x{K} {name}")
                runs[name] = lambda cfg=cfg: f8.matmul_fp8(a, b, sa, sb, **cfg)
            except Exception as e:
                errs[name] = f"failed: {type(e).__name__}: {str(e)[:160]}"
        ms = interleaved(runs)
        kit_ms = {n: v for n, v in ms.items() if n in FP8_CONFIGS}
        best = min(kit_ms, key=kit_ms.get)
        row = {"shape": f"{M}x{N}x{K}", "tflops": {n: round(flop / v, 1) for n, v in ms.items()},
               "best": best, "vs_scaled_mm_fast": round(ms["scaled_mm(fast_accum)"] /
                                                        kit_ms[best], 3),
               "vs_scaled_mm": round(ms["scaled_mm"] / kit_ms[best], 3),
               "default_vs_fast": round(ms["scaled_mm(fast_accum)"] /
                                        kit_ms["default (tuned)"], 3)
               if "default (tuned)" in kit_ms else None,
               "errors_vs_cublas": errs}
        rows.append(row)
        print(row, flush=True)
    results["fp8_geomean_vs_scaled_mm_fast"] = geomean(r["vs_scaled_mm_fast"] for r in rows)
    results["fp8_geomean_vs_scaled_mm"] = geomean(r["vs_scaled_mm"] for r in rows)
    for name in FP8_CONFIGS:
        results[f"fp8_geomean_{name}"] = geomean(
            r["tflops"].get(name, 0) / r["tflops"]["scaled_mm(fast_accum)"] for r in rows)
    bench_fp8_scaled()


def bench_fp8_scaled() -> None:
    """Row-wise and block scales at 8192^3 (and 4096^3) against torch's own, where it has
    them."""
    rows = results["fp8_scales"] = []
    e4 = torch.float8_e4m3fn
    for M, N, K in ((4096, 4096, 4096), (8192, 8192, 8192)):
        a = (torch.randn(M, K, device="cuda") * 2).to(e4)
        b = (torch.randn(N, K, device="cuda") * 2).to(e4)
        flop = 2 * M * N * K / 1e9
        sa_r, sb_r = torch.rand(M, 1, device="cuda") + 0.5, torch.rand(1, N, device="cuda") + .5
        sa_b = torch.rand(M, K // 128, device="cuda") + 0.5
        sb_b = torch.rand(N // 128, K // 128, device="cuda") + 0.5
        row = {"shape": f"{M}x{N}x{K}"}
        for mode, (sa, sb) in (("row", (sa_r, sb_r)), ("block", (sa_b, sb_b))):
            ref = f8.reference(a[:512], b, sa[:512], sb).float()   # a slice: float64 is slow
            with poisoned():
                out = f8.matmul_fp8(a, b, sa, sb)
            row[f"{mode}_err"] = checked(out[:512].double(), ref.double(), 1e-2, mode)
            runs = {"kitjit": lambda sa=sa, sb=sb: f8.matmul_fp8(a, b, sa, sb)}
            peer = _torch_scaled(mode, a, b, sa, sb, out)
            if isinstance(peer, str):
                row[f"{mode}_torch"] = peer
            else:
                runs["torch"] = peer
            ms = interleaved(runs)
            row[f"{mode}_tflops"] = {n: round(flop / v, 1) for n, v in ms.items()}
        rows.append(row)
        print(row, flush=True)


def _torch_scaled(mode, a, b, sa, sb, out):
    """torch's path for these scales (a callable that agrees with `out`), or why there is
    none. Block scales: torch wants them in layouts that moved between versions, so a few
    spellings are tried."""
    bf = torch.bfloat16
    if mode == "row":
        cands = [lambda: torch._scaled_mm(a, b.T, sa, sb, out_dtype=bf, use_fast_accum=True)]
    else:
        sa_cm = sa.t().contiguous().t()     # 1x128 scales M-major, as cuBLAS reads them
        cands = [lambda: torch._scaled_mm(a, b.T, sa_cm, sb.T, out_dtype=bf),
                 lambda: torch._scaled_mm(a, b.T, sa, sb.T, out_dtype=bf),
                 lambda: torch._scaled_mm(a, b.T, sa_cm, sb, out_dtype=bf)]
        try:
            from torch.nn.functional import ScalingType  # torch >= 2.10

            for x in (sa_cm, sa):
                for y in (sb.T, sb):
                    cands.append(lambda x=x, y=y: F.scaled_mm(
                        a, b.T, x, ScalingType.BlockWise1x128, y, ScalingType.BlockWise128x128,
                        output_dtype=bf))
        except ImportError:
            pass
    why = []
    for f in cands:
        try:
            r = f()
            torch.cuda.synchronize()
            if rel_error(r, out) <= 2e-2:
                return f
            why.append(f"disagrees ({rel_error(r, out):.3g})")
        except Exception as e:
            why.append(f"{type(e).__name__}: {str(e)[:120]}")
    return "none: " + " | ".join(why)


# ----------------------------------------------------------------------------- grouped
GROUPED = [(E, T, N, K) for E in (8, 64) for T in (4096, 16384)
           for N, K in ((14336, 4096), (4096, 14336))]
# kitjit configs timed side by side (`--grouped-variants`; names start with "kitjit"):
# the kernel before session 11 (register stores; grouped_matmul.default_config's choice,
# the fastest on the H200), whole tiles through the TMA store, 64-row tiles with the TMA
# store, and each expert's row blocks in even groups (BALANCE)
GROUPED_VARIANTS = {"kitjit legacy": grp.LEGACY, "kitjit tma": grp.TMA,
                    "kitjit bm64": grp.BM64,
                    "kitjit legacy-bal": dict(grp.LEGACY, BALANCE=True)}


def bench_grouped() -> None:
    rows = results["grouped"] = []
    for E, T, N, K in GROUPED:
        x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16) * K ** -0.5
        offs = grp.routed(T, E, "cuda", skew=False, seed=E + T)
        bounds = [0] + offs.tolist()
        flop = 2 * T * N * K / 1e9
        out = torch.empty(T, N, device="cuda", dtype=torch.bfloat16)

        def loop():
            for e in range(E):
                torch.mm(x[bounds[e]:bounds[e + 1]], w[e].T, out=out[bounds[e]:bounds[e + 1]])
            return out

        ref = loop().clone()
        runs = {"cublas loop": loop}
        row = {"case": f"E={E} T={T} N={N} K={K}"}
        try:
            wt = w.transpose(1, 2)
            g = torch._grouped_mm(x, wt, offs=offs)
            row["grouped_mm_err"] = checked(g.double(), ref.double(), 1e-2, "torch grouped")
            runs["torch._grouped_mm"] = lambda: torch._grouped_mm(x, wt, offs=offs)
        except Exception as e:
            row["grouped_mm"] = f"none: {type(e).__name__}: {str(e)[:160]}"
        for name, cfg in GROUPED_VARIANTS.items():
            try:
                with poisoned():
                    got = grp.grouped_mm(x, w, offs, **cfg)
                row[f"{name}_err"] = checked(got.double(), ref.double(), 1e-2, name)
                runs[name] = lambda cfg=cfg: grp.grouped_mm(x, w, offs, **cfg)
            except Exception as e:
                row[name] = f"failed: {type(e).__name__}: {str(e)[:160]}"
        ms = interleaved(runs)
        peers = {n: v for n, v in ms.items() if not n.startswith("kitjit")}
        mine = {n: v for n, v in ms.items() if n.startswith("kitjit")}
        row["tflops"] = {n: round(flop / v, 1) for n, v in ms.items()}
        if mine:
            row["vs_best_torch"] = round(min(peers.values()) / min(mine.values()), 3)
        for n in mine:
            row[f"{n}_vs_best_torch"] = round(min(peers.values()) / mine[n], 3)
        auto = grp.default_config(T, E, N)     # the variant grouped_mm runs with no config
        row["auto"] = next((n for n, c in GROUPED_VARIANTS.items() if c == auto), str(auto))
        row["default_vs_best_torch"] = row.get(f"{row['auto']}_vs_best_torch")
        rows.append(row)
        print(row, flush=True)
        runs.clear()
        torch.cuda.empty_cache()
    results["grouped_geomean_vs_best_torch"] = geomean(r.get("vs_best_torch") for r in rows)
    for n in GROUPED_VARIANTS:
        results[f"grouped_geomean_{n}"] = geomean(r.get(f"{n}_vs_best_torch") for r in rows)
    results["grouped_geomean_auto"] = geomean(r.get(f"{r['auto']}_vs_best_torch")
                                              for r in rows)


# ----------------------------------------------------------------------------- epilogues
def bench_epilogue() -> None:
    rows = results["epilogue"] = []
    bf = torch.bfloat16
    M = 8192
    for name, N, K in (("plain", 14336, 4096), ("bias+gelu", 14336, 4096),
                       ("bias+silu", 14336, 4096), ("swiglu", 14336, 4096),
                       ("scale+residual", 4096, 14336)):
        x = torch.randn(M, K, device="cuda", dtype=bf)
        w = torch.randn(N, K, device="cuda", dtype=bf) * K ** -0.5
        bias = torch.randn(N, device="cuda", dtype=bf)
        flop = 2 * M * N * K / 1e9
        kits, torch_runs = {}, {}
        if name == "plain":
            kits = {"kitjit 256x128": lambda: epi.linear(x, w),
                    "kitjit 128x256": lambda: epi.linear(x, w, BM=128, BN=256)}
            torch_runs = {"cublas": lambda: F.linear(x, w)}
        elif name in ("bias+gelu", "bias+silu"):
            act = name.split("+")[1]
            tf = F.gelu if act == "gelu" else F.silu
            kits = {"kitjit": lambda act=act: epi.linear(x, w, bias, act),
                    "kitjit 128x256": lambda act=act: epi.linear(x, w, bias, act, BM=128,
                                                                 BN=256)}
            torch_runs = {"cublas+torch": lambda tf=tf: tf(F.linear(x, w, bias))}
        elif name == "swiglu":
            wu = torch.randn(N, K, device="cuda", dtype=bf) * K ** -0.5
            wgu = torch.cat([w, wu])
            flop *= 2
            kits = {"kitjit": lambda: epi.linear(x, w, act="silu", w_up=wu)}
            torch_runs = {"cublas+torch": lambda: F.silu(F.linear(x, w)) * F.linear(x, wu),
                          "cublas(cat)+torch": lambda: _swiglu_cat(x, wgu, N)}
        else:
            s = torch.rand(M, device="cuda", dtype=bf) + 0.5
            res = torch.randn(M, N, device="cuda", dtype=bf)
            kits = {"kitjit": lambda: epi.linear(x, w, row_scale=s, residual=res)}
            torch_runs = {"cublas+torch": lambda: torch.addcmul(res, F.linear(x, w),
                                                                s[:, None])}
        ref = next(iter(torch_runs.values()))().double()
        row = {"case": f"{name} {M}x{N}x{K}"}
        for n, f in list(kits.items()):
            try:
                with poisoned():
                    got = f()
                row[f"{n}_err"] = checked(got.double(), ref, 2e-2, f"{name} {n}")
            except Exception as e:
                row[n] = f"failed: {type(e).__name__}: {str(e)[:160]}"
                del kits[n]
        ms = interleaved({**kits, **torch_runs})
        row["ms"] = {n: round(v, 3) for n, v in ms.items()}
        row["tflops"] = {n: round(flop / v, 1) for n, v in ms.items()}
        if kits:
            row["vs_torch"] = round(min(ms[n] for n in torch_runs) / min(ms[n] for n in kits), 3)
        rows.append(row)
        print(row, flush=True)


def _swiglu_cat(x, wgu, N):
    h = F.linear(x, wgu)
    return F.silu(h[:, :N]) * h[:, N:]


# ----------------------------------------------------------------------------- LLM shapes
LLAMA = {  # (N, K) of each linear layer: nn.Linear weights [N, K]
    "8B": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096),
           "down": (4096, 14336)},
    "70B": {"qkv": (10240, 8192), "o": (8192, 8192), "gate_up": (57344, 8192),
            "down": (8192, 28672)},
}
LLM_M = (1, 16, 128, 4096, 16384)


def _graph_check(ref):
    """check(i, out) for skinny_timing: the output of a graph's last call against `ref`."""
    return lambda i, out: checked(out.double(), ref.double(), 1e-2, "graph replay")


def bench_llm(deadline: float) -> None:
    """The example against cuBLAS at the Llama-3 layers, M = LLM_M: per-call events after an
    L2 flush (`vs_cublas`, as before) beside CUDA-graph replays and back-to-back calls over
    rotating copies of the inputs (`graph_x`, `b2b_x`: benchmarks/skinny_timing.py)."""
    rows = results["llm"] = []
    for model, layers in LLAMA.items():
        for layer, (N, K) in layers.items():
            w = torch.randn(N, K, device=DEVICE, dtype=torch.bfloat16) * K ** -0.5
            ws = None
            for M in LLM_M:
                if time.perf_counter() > deadline:
                    print(f"llm: deadline reached, skipping {model} {layer} M={M}", flush=True)
                    continue
                a = torch.randn(M, K, device=DEVICE, dtype=torch.bfloat16)
                flop = 2 * M * N * K / 1e9
                row = {"model": model, "layer": layer, "shape": f"{M}x{N}x{K}"}
                try:
                    ref = F.linear(a, w)
                    with poisoned():
                        got = mm.matmul(a, w, trans_b=True)
                    row["err"] = checked(got.double(), ref.double(), 1e-2, f"{model} {layer} M={M}")
                    runs = {"kitjit": lambda a, w: mm.matmul(a, w, trans_b=True),
                            "cublas": F.linear}
                    ms = interleaved({n: lambda fn=fn: fn(a, w) for n, fn in runs.items()})
                    row["kitjit_tflops"] = round(flop / ms["kitjit"], 2)
                    row["cublas_tflops"] = round(flop / ms["cublas"], 2)
                    row["vs_cublas"] = round(ms["cublas"] / ms["kitjit"], 3)
                    n = st.copies_for(w.nbytes + a.nbytes)
                    ws = ws if ws is not None and len(ws) >= n else st.rotating(w, n)
                    st.rotated_columns(row, runs, ms, st.rotating(a, n), ws[:n], _graph_check(ref))
                    split = mm.splitk_for(M, N, K, mm.num_sms(a.device))
                    row["config"] = f"split-K x{split}" if split > 1 else \
                        str(mm.tuned_kernel(N, a.dtype).chosen()[-1]["config"])
                except Exception as e:
                    row["failed"] = f"{type(e).__name__}: {str(e)[:200]}"
                rows.append(row)
                print(row, flush=True)
            del ws
            torch.cuda.empty_cache()
    for M in LLM_M:
        mine = [r for r in rows if r["shape"].startswith(f"{M}x") and "graph_x" in r]
        for col in ("graph", "b2b"):
            results[f"llm_{col}_geomean_M{M}"] = geomean(r[f"{col}_x"]["kitjit"] for r in mine)


# ----------------------------------------------------------------------------- bf16 epilogues
LARGE = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024), (16384, 1024, 4096)]
BF16_EPILOGUES = {  # the example's epilogues at 128x256 tiles (B [K, N], as bench.py gives
    "direct s4": dict(BM=128, BN=256, BK=64, STAGES=4, num_warps=8),      # it; "bt": [N, K])
    "tma-halves s4": dict(BM=128, BN=256, BK=64, STAGES=4, TMA_STORE=2, num_warps=8),
    "bt direct s4": dict(BM=128, BN=256, BK=64, STAGES=4, num_warps=8),
    "bt tma-halves s4": dict(BM=128, BN=256, BK=64, STAGES=4, TMA_STORE=2, num_warps=8),
    "default": {},                 # matmul(a, b) as users call it: the autotuned choice
    "bt default": {},
}


def timed_row(row: dict, runs: dict, M: int, N: int, K: int) -> dict:
    """`row` with the interleaved TFLOP/s of `runs` and each one's ratio to cuBLAS (the "bt"
    variants' to cuBLAS on B [N, K]), printed."""
    ms = interleaved(runs)
    flop = 2 * M * N * K / 1e9
    row["tflops"] = {n: round(flop / v, 1) for n, v in ms.items()}
    row["x_cublas"] = {n: round(ms["bt cublas" if n.startswith("bt") else "cublas"] / v, 3)
                       for n, v in ms.items() if "cublas" not in n}
    print(row, flush=True)
    return row


def bench_large() -> None:
    """The bf16 example's epilogues against cuBLAS at the four large shapes."""
    rows = results["large"] = []
    for M, N, K in LARGE:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        bt = b.t().contiguous()
        ref = a @ b
        runs = {"cublas": lambda: a @ b, "bt cublas": lambda: a @ bt.t()}
        row = {"shape": f"{M}x{N}x{K}"}
        for name, cfg in BF16_EPILOGUES.items():
            try:
                args = (bt, True) if name.startswith("bt") else (b, False)
                if not cfg:
                    mm.matmul(a, *args)         # tune first: only the checked call is poisoned
                with poisoned():
                    out = mm.matmul(a, *args, **cfg)
                row[f"{name}_err"] = checked(out.double(), ref.double(), 1e-2, name)
                runs[name] = lambda cfg=cfg, args=args: mm.matmul(a, *args, **cfg)
            except Exception as e:
                row[name] = f"failed: {type(e).__name__}: {str(e)[:160]}"
        rows.append(timed_row(row, runs, M, N, K))
    for name in BF16_EPILOGUES:
        results[f"large_geomean_{name}"] = geomean(r["x_cublas"].get(name) for r in rows)
        print(f"large geomean {name}: {results[f'large_geomean_{name}']}", flush=True)



# ----------------------------------------------------------------------------- clusters
CLUSTER_VARIANTS = {  # name -> (which kernel, its config); "bt": B given [N, K]
    "default": ("example", {}),
    "tma-halves s4": ("example", BF16_EPILOGUES["tma-halves s4"]),
    "128x128 s4": ("example", dict(BM=128, BN=128, BK=64, STAGES=4, num_warps=8)),
    "cluster": ("cluster", {}),                          # B split, LAG 1, GROUP 8
    "cluster lag2": ("cluster", dict(LAG=2)),
    "cluster g4": ("cluster", dict(GROUP=4)),
    "cluster halves": ("cluster", dict(SPLIT_B=False)),  # two N=128 MMAs per k-step
    "cluster ws": ("cluster", dict(ws=True)),           # producer + 2 consumer warpgroups
}


def _tuner_report(M: int, N: int, K: int) -> dict:
    """What the example's autotuner chose at (M, N, K) for each B layout, and the time it
    measured for every config (ms, in its own short L2-flushed bursts): beside the steady
    figures of the same run, it says whether the default is the tuner's pick being off."""
    tk = mm.tuned_kernel(N, torch.bfloat16)
    out = {}
    for key, cfg in tk.cache.items():
        if tuple(key[:3]) == (M, N, K):
            times = tk.timings.get(key, {})
            out["bt" if key[3] else "b"] = {
                "chosen": str(cfg),
                "ms": {c: round(t, 4) if isinstance(t, float) else t for c, t in times.items()}}
    return out


def _max_active_clusters(a, b, trans_b: bool, ws: bool) -> int | str:
    """How many 2-CTA clusters of the cluster GEMM the driver can keep on the GPU at once
    (cuOccupancyMaxActiveClusters): the persistent grid launches half the SMs' worth, and
    if fewer fit, the clusters left over would run after the others (a second wave)."""
    try:
        from cuda.bindings import driver as cu

        from kitjit.nn import matmul_cluster as mc

        M, K = a.shape
        N = b.shape[0] if trans_b else b.shape[1]
        kern = mc.matmul_cluster_ws_kernel if ws else mc.matmul_cluster_kernel
        cfg = dict(mc.CONFIG, TMA_STORE=True, **(dict(num_warps=12) if ws else {}))
        extra = {} if ws else {"WG": cfg["num_warps"] // 4}
        c = torch.empty(M, N, device=a.device, dtype=a.dtype)
        grid = 2 * mc._clusters(a.device)
        ck = kern.warmup(a, b, c, M, N, K, TRANS_B=trans_b, grid=(grid,), cluster=(2, 1, 1),
                         **extra, **cfg)
        conf = cu.CUlaunchConfig()
        conf.gridDimX, conf.gridDimY, conf.gridDimZ = grid, 1, 1
        conf.blockDimX, conf.blockDimY, conf.blockDimZ = 32 * cfg["num_warps"], 1, 1
        conf.sharedMemBytes = ck.shared
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = 2, 1, 1
        conf.attrs = [attr]
        conf.numAttrs = 1
        err, n = cu.cuOccupancyMaxActiveClusters(cu.CUfunction(ck.function(a.device.index)),
                                                 conf)
        return int(n) if int(err) == 0 else f"{err} (launching {grid // 2})"
    except Exception as e:  # a diagnostic: never fail the section
        return f"{type(e).__name__}: {str(e)[:120]}"


def bench_cluster() -> None:
    """The persistent GEMM on 2-CTA clusters with B multicast (kitjit/nn/matmul_cluster.py)
    beside cuBLAS, the example's default and its tma-halves config, B [K, N] and [N, K],
    interleaved in one run at the four large shapes."""
    from kitjit.nn.matmul_cluster import matmul_cluster

    rows = results["cluster"] = []
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    results["cluster_max_active"] = {
        name: _max_active_clusters(a, a, trans_b, ws)
        for name, trans_b, ws in (("b", False, False), ("bt", True, False), ("ws", False, True))}
    print(f"max active 2-CTA clusters: {results['cluster_max_active']} (grid: "
          f"{torch.cuda.get_device_properties(0).multi_processor_count // 2})", flush=True)
    for M, N, K in LARGE:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        bt = b.t().contiguous()
        ref = (a @ b).double()
        runs = {"cublas": lambda: a @ b, "bt cublas": lambda: a @ bt.t()}
        row = {"shape": f"{M}x{N}x{K}"}
        for prefix, args in (("", (b, False)), ("bt ", (bt, True))):
            for name, (which, cfg) in CLUSTER_VARIANTS.items():
                fn = matmul_cluster if which == "cluster" else mm.matmul
                try:
                    if which == "example" and not cfg:
                        fn(a, *args)            # tune first: only the checked call is poisoned
                    with poisoned():
                        out = fn(a, *args, **cfg)
                    row[f"{prefix}{name}_err"] = checked(out.double(), ref, 1e-2, name)
                    runs[prefix + name] = lambda fn=fn, cfg=cfg, args=args: fn(a, *args, **cfg)
                except Exception as e:
                    row[prefix + name] = f"failed: {type(e).__name__}: {str(e)[:160]}"
        row["tuner"] = _tuner_report(M, N, K)
        rows.append(timed_row(row, runs, M, N, K))
    for name in [p + n for p in ("", "bt ") for n in CLUSTER_VARIANTS]:
        results[f"cluster_geomean_{name}"] = geomean(r["x_cublas"].get(name) for r in rows)
        print(f"cluster geomean {name}: {results[f'cluster_geomean_{name}']}", flush=True)

def _main_example():
    """main's examples/matmul.py, staged beside this file as _matmul_main.py for an A/B run
    (not part of the repository); None when absent."""
    try:
        import _matmul_main
        return _matmul_main
    except ImportError:
        return None


SKINNY_M = [1, 16, 128]
SKINNY_ROUNDS = 1   # of the per-call column (the graph and b2b columns are the figures)


def _cluster_splitk(a, w, trans_b=True, **cfg):
    from kitjit.nn.matmul_splitk import matmul_splitk_cluster
    return matmul_splitk_cluster(a, w, trans_b, **cfg)


# split-K through a cluster's distributed shared memory (kitjit/nn/matmul_splitk.py; what
# matmul(..., split_mode="cluster" / "cluster-a") runs where the example splits K), timed
# where the example splits or where its column blocks alone leave SMs idle: the default
# plan, with A shared by multicast (cluster-a), that with B's copies not promoted in L2 (read
# once: decode's K/V cache gained 7%), with 2 sharers at most (smaller clusters: less
# coupling, fewer SMs left idle in a GPC), and with refills one step later (a sharer a step
# behind does not stall them; the plan's 5-6 stages leave 3-4 steps in flight)
SKINNY_CLUSTER = {
    "cluster": {},
    "cluster-a": dict(share_a=True),
    "cluster-a l2b0": dict(share_a=True, L2_B=0),
    "cluster-a cn2": dict(share_a=True, CN=2),
    "cluster-a lag2": dict(share_a=True, LAG=2),
}


def _skinny_cluster_cfg(name: str, M: int) -> dict:
    return dict(SKINNY_CLUSTER[name])


def bench_skinny() -> None:
    """The Llama-3 layers at M = 1, 16, 128: the example (in-kernel split-K for M <= 64,
    fp32 slabs and a second launch above) against cuBLAS, the split-K variants that add
    the parts in a cluster's distributed shared memory (SKINNY_CLUSTER, where the example
    splits) and, when staged, main's example. Three columns: per-call events after an L2
    flush (`us`, one round: kept for comparison), CUDA-graph replays and back-to-back calls
    over rotating copies of the inputs (`graph_us`, `b2b_us`: benchmarks/skinny_timing.py)."""
    from kitjit.nn.matmul_splitk import splitk_config

    rows = results["skinny"] = []
    old = _main_example()
    for model, layers in LLAMA.items():
        for layer, (N, K) in layers.items():
            w = torch.randn(N, K, device=DEVICE, dtype=torch.bfloat16) * K ** -0.5
            ws = st.rotating(w, st.copies_for(w.nbytes))
            for M in SKINNY_M:
                a = torch.randn(M, K, device=DEVICE, dtype=torch.bfloat16)
                as_ = st.rotating(a, len(ws))
                ref = F.linear(a, w)
                row = {"model": model, "layer": layer, "shape": f"{M}x{N}x{K}",
                       "copies": len(ws)}
                variants = {"cublas": F.linear,
                            "kitjit": lambda a, w: mm.matmul(a, w, trans_b=True)}
                if old is not None:
                    variants["main"] = lambda a, w: old.matmul(a, w, trans_b=True)
                split = mm.splitk_for(M, N, K, mm.num_sms(a.device))
                if split > 1 or mm.kit.cdiv(M, 128) * mm.kit.cdiv(N, 128) <= mm.num_sms(a.device):
                    for name in SKINNY_CLUSTER:
                        cfg = _skinny_cluster_cfg(name, M)
                        variants[name] = lambda a, w, cfg=cfg: _cluster_splitk(a, w, **cfg)
                        try:
                            c = splitk_config(a, w, True, **cfg)
                            row[f"{name}_plan"] = f"P{c['P']} CN{c['CN']} BM{c['BM']}"
                        except Exception as e:
                            row[f"{name}_plan"] = f"failed: {type(e).__name__}: {e}"[:160]
                runs = {}
                for name, fn in variants.items():
                    try:
                        with poisoned():
                            got = fn(a, w)
                        row[f"{name}_err"] = checked(got.double(), ref.double(), 1e-2, name)
                        runs[name] = fn
                    except Exception as e:
                        row[name] = f"failed: {type(e).__name__}: {str(e)[:160]}"
                ms = interleaved({n: lambda fn=fn: fn(a, w) for n, fn in runs.items()},
                                 rounds=SKINNY_ROUNDS)
                row["us"] = {n: round(v * 1e3, 2) for n, v in ms.items()}
                row["x_cublas"] = {n: round(ms["cublas"] / v, 3) for n, v in ms.items()
                                   if n != "cublas"}
                st.rotated_columns(row, runs, ms, as_, ws, _graph_check(ref))
                row["plan"] = f"split {split}" if split > 1 else "autotuned"
                rows.append(row)
                print(row, flush=True)
            del ws
            torch.cuda.empty_cache()
    for name in ("kitjit", "main", *SKINNY_CLUSTER):
        for M in SKINNY_M:
            mine = [r for r in rows if r["shape"].startswith(f"{M}x")]
            results[f"skinny_geomean_{name}_M{M}"] = geomean(
                r["x_cublas"].get(name) for r in mine)
            for col in ("graph", "b2b"):
                results[f"skinny_{col}_geomean_{name}_M{M}"] = geomean(
                    r[f"{col}_x"].get(name) for r in mine)
    for M in SKINNY_M:   # the best path of each row: what a heuristic over them would give
        results[f"skinny_geomean_best_M{M}"] = geomean(
            max(v for n, v in r["x_cublas"].items()) for r in rows
            if r["shape"].startswith(f"{M}x") and r["x_cublas"])


# ----------------------------------------------------------------------------- probe
def bench_probe() -> None:
    """Second-run questions: fp8 per-row scales with their default (256x128 tiles, TMA-store
    epilogue) against torch's row-wise cuBLAS; the bf16 example with 256x128 tiles (which won
    the plain epilogue GEMM) against its autotuned choice and cuBLAS on the four large
    shapes (B given [K, N], as bench.py gives it)."""
    rows = results["probe"] = []
    e4 = torch.float8_e4m3fn
    for M, N, K in ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024)):
        a = (torch.randn(M, K, device="cuda") * 2).to(e4)
        b = (torch.randn(N, K, device="cuda") * 2).to(e4)
        sa, sb = torch.rand(M, 1, device="cuda") + 0.5, torch.rand(1, N, device="cuda") + .5
        with poisoned():
            out = f8.matmul_fp8(a, b, sa, sb)
        peer = _torch_scaled("row", a, b, sa, sb, out)
        runs = {"kitjit": lambda: f8.matmul_fp8(a, b, sa, sb),
                "kitjit 128x256 s4": lambda: f8.matmul_fp8(a, b, sa, sb, **f8.DEFAULT_DIRECT)}
        if not isinstance(peer, str):
            runs["torch rowwise"] = peer
        ms = interleaved(runs)
        flop = 2 * M * N * K / 1e9
        row = {"case": f"fp8 row {M}x{N}x{K}", "tflops": {n: round(flop / v, 1)
                                                          for n, v in ms.items()}}
        rows.append(row)
        print(row, flush=True)
    for M, N, K in FP8_SHAPES:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        ref = a @ b
        cfg = dict(BM=256, BN=128, BK=64, STAGES=4, num_warps=8)
        with poisoned():
            out = mm.matmul(a, b, **cfg)
        err = checked(out.double(), ref.double(), 1e-2, "bf16 256x128")
        mm.matmul(a, b)
        ms = interleaved({"kitjit 256x128": lambda: mm.matmul(a, b, **cfg),
                          "kitjit autotuned": lambda: mm.matmul(a, b), "cublas": lambda: a @ b})
        flop = 2 * M * N * K / 1e9
        row = {"case": f"bf16 {M}x{N}x{K}", "err": err,
               "tflops": {n: round(flop / v, 1) for n, v in ms.items()},
               "tuned": str(mm.tuned_kernel(N, a.dtype).chosen()[-1]["config"])}
        rows.append(row)
        print(row, flush=True)


# ----------------------------------------------------------------------------- report
def table() -> str:
    out = []
    if results.get("large"):
        out.append("bf16 large shapes (TFLOP/s, x cuBLAS)")
        for r in results["large"]:
            out.append(f"  {r['shape']:18} {r['tflops']} {r['x_cublas']}")
        for name in BF16_EPILOGUES:
            out.append(f"  geomean {name}: {results.get(f'large_geomean_{name}')}")
    if results.get("cluster"):
        out.append("bf16 large shapes, 2-CTA clusters vs the example (TFLOP/s, x cuBLAS); "
                   f"max active clusters {results.get('cluster_max_active')}")
        for r in results["cluster"]:
            out.append(f"  {r['shape']:18} {r['tflops']} {r['x_cublas']}")
            for lay, t in r.get("tuner", {}).items():
                out.append(f"    tuner ({lay}): {t['chosen']}  {t['ms']}")
        for name in [p + n for p in ("", "bt ") for n in CLUSTER_VARIANTS]:
            out.append(f"  geomean {name}: {results.get(f'cluster_geomean_{name}')}")
    if results.get("skinny"):
        out += st.table_lines(results["skinny"], SKINNY_M, results, "skinny")
    if results.get("fp8"):
        out.append("fp8 e4m3, per-tensor scales (TFLOP/s)       best cfg       kit   "
                   "scaled_mm(fast)  scaled_mm  x fast  x default")
        for r in results["fp8"]:
            t = r["tflops"]
            out.append(f"  {r['shape']:18} {r['best']:22} {t[r['best']]:7} "
                       f"{t['scaled_mm(fast_accum)']:10} {t['scaled_mm']:10} "
                       f"{r['vs_scaled_mm_fast']:6} {r['vs_scaled_mm']:6}")
        out.append(f"  geomean x scaled_mm(fast) {results['fp8_geomean_vs_scaled_mm_fast']}, "
                   f"x scaled_mm {results['fp8_geomean_vs_scaled_mm']}")
        for name in FP8_CONFIGS:
            out.append(f"    {name}: geomean x fast {results.get(f'fp8_geomean_{name}')}")
    for r in results.get("fp8_scales", []):
        out.append(f"  {r['shape']} row {r.get('row_tflops')} block {r.get('block_tflops')}")
    if results.get("grouped"):
        names = list(results["grouped"][0].get("tflops", {}))
        out.append("grouped (TFLOP/s)  " + " | ".join(names) + " | auto picks | x best torch "
                   "of each kitjit")
        for r in results["grouped"]:
            t = r.get("tflops", {})
            xs = [str(r.get(f"{n}_vs_best_torch")) for n in names if n.startswith("kitjit")]
            out.append(f"  {r['case']:30} " + " ".join(f"{t.get(n, '-'):>6}" for n in names)
                       + f"  {r.get('auto', '')[7:]:9} " + " ".join(xs))
        out.append("  geomean x best torch: " + ", ".join(
            f"{k[16:].replace('vs_best_torch', 'best variant')} {v}"
            for k, v in results.items() if k.startswith("grouped_geomean_")))
    for r in results.get("epilogue", []):
        out.append(f"epilogue {r['case']:28} {r.get('tflops')} x torch {r.get('vs_torch')}")
    if results.get("llm"):
        out.append("LLM shapes (bf16 example vs cuBLAS; per-call TFLOP/s, then x cuBLAS: "
                   "per-call / graph / b2b)")
        for r in results["llm"]:
            out.append(f"  {r['model']:4} {r['layer']:8} {r['shape']:20} "
                       f"{r.get('kitjit_tflops')} / {r.get('cublas_tflops')} = "
                       f"{r.get('vs_cublas')} / {r.get('graph_x', {}).get('kitjit')} / "
                       f"{r.get('b2b_x', {}).get('kitjit')}  "
                       f"{r.get('config', r.get('failed', ''))}")
            if isinstance(r.get("graph_us", {}).get("kitjit"), str):
                out.append(f"    graph: {r['graph_us']['kitjit']}")
        out.append("  geomean x cuBLAS (graph / b2b): " + ", ".join(
            f"M={M} {results.get(f'llm_graph_geomean_M{M}')} / "
            f"{results.get(f'llm_b2b_geomean_M{M}')}" for M in LLM_M))
    for r in results.get("probe", []):
        out.append(f"probe {r['case']:28} {r.get('tflops')}")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="fp8,grouped,epilogue,llm")
    ap.add_argument("--json", default=None)
    ap.add_argument("--fp8-configs", default=None,
                    help="comma-separated names of FP8_CONFIGS to time (default: all)")
    ap.add_argument("--skinny-m", default=None, help="M values of the skinny section")
    ap.add_argument("--skinny-cluster", default=None,
                    help="comma-separated names of SKINNY_CLUSTER to time ('' for none; "
                         "default: all)")
    ap.add_argument("--large-variants", default=None,
                    help="comma-separated names of BF16_EPILOGUES to time (default: all)")
    ap.add_argument("--grouped-variants", default=None,
                    help="comma-separated names of GROUPED_VARIANTS to time, without the "
                         "'kitjit ' prefix (default: all)")
    ap.add_argument("--no-fp8-scales", action="store_true",
                    help="skip the row-wise and block-scale rows of the fp8 section")
    ap.add_argument("--llm-deadline", type=float, default=240.0,
                    help="seconds after the start past which LLM shapes are skipped")
    args = ap.parse_args()
    start = time.perf_counter()
    for variants, names, prefix in ((FP8_CONFIGS, args.fp8_configs, ""),
                                    (BF16_EPILOGUES, args.large_variants, ""),
                                    (GROUPED_VARIANTS, args.grouped_variants, "kitjit "),
                                    (SKINNY_CLUSTER, args.skinny_cluster, "")):
        for name in list(variants) if names is not None else ():  # keep the ones named
            if name not in [prefix + n for n in names.split(",")]:
                del variants[name]
    if args.skinny_m:
        SKINNY_M[:] = [int(m) for m in args.skinny_m.split(",")]
    if args.no_fp8_scales:
        globals()["bench_fp8_scaled"] = lambda: None
    results["device"] = torch.cuda.get_device_name()
    results["torch"] = torch.__version__
    sections = {"fp8": bench_fp8, "grouped": bench_grouped, "epilogue": bench_epilogue,
                "llm": lambda: bench_llm(start + args.llm_deadline), "probe": bench_probe,
                "large": bench_large, "skinny": bench_skinny,
                "cluster": bench_cluster}
    for name in args.only.split(","):
        t0 = time.perf_counter()
        try:
            sections[name]()
        except Exception:
            results[f"{name}_error"] = traceback.format_exc()[-2000:]
            print(f"section {name} failed:\n{results[f'{name}_error']}", flush=True)
        print(f"[{name}: {time.perf_counter() - t0:.0f} s]", flush=True)
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    print(table())


if __name__ == "__main__":
    main()

"""The swapped skinny GEMM (examples/matmul_skinny.py) against the example's split-K path
(examples/matmul.py's `matmul`, forced off the skinny path) and cuBLAS (F.linear) at the
Llama-3-8B / 70B QKV, O, gate-up, down layers, weights [N, K], L2 flushed before each run
(kitjit.testing.bench), the variants timed interleaved in rounds, best round kept; every
variant is first checked against a float64 reference with its output NaN-poisoned.

    python benchmarks/skinny_swap_bench.py              # H200: ~2 minutes
    python benchmarks/skinny_swap_bench.py --m 16 --rounds 2

Columns: us per call and x cuBLAS; "skinny" is skinny_config's choice, "split x2" /
"split /2" the same kernel at twice / half its split (which way the model errs), "l2 256"
with the weights' default L2 promotion, "other bn" with 128 weight rows a program where
the choice is 64 and 64 where it is 128 (M > 16: x's tiles re-read from L2 half or twice
as often); "matmul" is what `matmul` runs by default now,
"example" the split-K path it ran before (`skinny=False`)."""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
import time

import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import matmul as mm  # noqa: E402
import matmul_skinny as sk  # noqa: E402

from kitjit.testing import bench  # noqa: E402

LLAMA = {"8B": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096),
                "down": (4096, 14336)},
         "70B": {"qkv": (10240, 8192), "o": (8192, 8192), "gate_up": (57344, 8192),
                 "down": (8192, 28672)}}


def steady(fn) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.05:      # clocks up
        fn()
    torch.cuda.synchronize()
    return bench(fn, warmup=2, rep=20)


def poisoned(fn):
    orig = torch.empty

    def alloc(*a, **k):
        t = orig(*a, **k)
        return t.fill_(math.nan) if t.dtype.is_floating_point and t.numel() else t
    torch.empty = alloc
    try:
        return fn()
    finally:
        torch.empty = orig


def variants(a, w, M, N, K) -> dict:
    cfg = sk.skinny_config(M, N, K, mm.num_sms(a.device))
    runs = {"cublas": lambda: F.linear(a, w),
            "example": lambda: mm.matmul(a, w, trans_b=True, skinny=False),
            "matmul": lambda: mm.matmul(a, w, trans_b=True)}
    if M > sk.MAX_M:
        return runs
    runs["skinny"] = lambda: sk.matmul_skinny(a, w, trans_b=True)
    s2 = min(cfg["SPLIT"] * 2, sk.MAX_SPLIT)
    runs["split x2"] = lambda: sk.matmul_skinny(a, w, trans_b=True, SPLIT=s2)
    if cfg["SPLIT"] > 1:
        runs["split /2"] = lambda: sk.matmul_skinny(
            a, w, trans_b=True, SPLIT=cfg["SPLIT"] // 2)
    runs["l2 256"] = lambda: sk.matmul_skinny(a, w, trans_b=True, l2_w=256)
    if M > 16:     # BN 64 and 128: x's tiles re-read from L2 twice or once as often
        other = 64 if cfg["BN"] == 128 else 128
        runs["other bn"] = lambda: sk.matmul_skinny(a, w, trans_b=True, BN=other)
    return runs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, nargs="+", default=[1, 16, 128])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(torch.cuda.get_device_name(), flush=True)
    ratios: dict = {}
    for model, layers in LLAMA.items():
        for layer, (N, K) in layers.items():
            w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * K ** -0.5
            for M in args.m:
                a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
                ref = (a.double() @ w.double().t())
                ok = {}
                for n, f in variants(a, w, M, N, K).items():
                    try:
                        out = poisoned(f).double()
                        err = ((out - ref).abs().max() / ref.abs().max()).item()
                        if err <= 1e-2:
                            ok[n] = f
                        else:
                            print(f"  {model} {layer} M{M} {n}: WRONG (rel err {err:.2e})")
                    except Exception as e:  # noqa: BLE001 (reported, not timed)
                        print(f"  {model} {layer} M{M} {n}: failed {type(e).__name__}: "
                              f"{str(e)[:160]}")
                ms = {n: steady(f) for n, f in ok.items()}
                for _ in range(args.rounds - 1):
                    for n, f in ok.items():
                        ms[n] = min(ms[n], steady(f))
                cub = ms.get("cublas", math.nan)
                cfg = sk.skinny_config(M, N, K, 132) if M <= sk.MAX_M else {}
                line = "  ".join(f"{n} {v * 1e3:.1f} ({cub / v:.2f})" for n, v in ms.items())
                print(f"{model:3s} {layer:7s} {M:3d}x{N}x{K} "
                      f"[split {cfg.get('SPLIT', '-')} st {cfg.get('STAGES', '-')}]: {line}",
                      flush=True)
                for n, v in ms.items():
                    ratios.setdefault((M, n), []).append(cub / v)
            del w
            torch.cuda.empty_cache()
    print("\ngeomean x cuBLAS (shapes)")
    for (M, n), xs in sorted(ratios.items(), key=lambda kv: kv[0]):
        if n != "cublas":
            print(f"  M={M:3d} {n:9s} {math.exp(sum(map(math.log, xs)) / len(xs)):.3f} "
                  f"({len(xs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

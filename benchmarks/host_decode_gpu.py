"""Per-call cost of sdpa decode on a GPU, host included: kitjit's sdpa and attention_decode
against torch's SDPA (its own backend choice, and cuDNN / flash forced for the whole loop).

B 1 and 8, H 32/8, Sq 1, Skv 4096, D 128, bf16. Two figures per call, microseconds:
- "events": CUDA events around N back-to-back calls (no sync between): what a decode step
  costs when nothing else hides it, the larger of host and GPU time per call;
- "host": the host time of N calls with no sync (the queue never fills at these N), what
  a call takes before its kernels are queued.
Checks kitjit's output against cuDNN's first (rel. error < 1e-2). Prints one table.

    python benchmarks/host_decode_gpu.py [--n 1000]
"""
from __future__ import annotations

import argparse
import contextlib
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import kitjit.nn.functional as KF
from kitjit.nn import attention_decode as AD
from kitjit.testing import rel_error

F = torch.nn.functional.scaled_dot_product_attention


def per_call(fn, n: int, ctx) -> tuple[float, float]:
    with ctx():
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        host = 1e9
        for _ in range(3):
            s = time.perf_counter()
            for _ in range(min(n, 300)):
                fn()
            host = min(host, (time.perf_counter() - s) / min(n, 300) * 1e6)
            torch.cuda.synchronize()
        ev = 1e9
        for _ in range(3):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(n):
                fn()
            b.record()
            torch.cuda.synchronize()
            ev = min(ev, a.elapsed_time(b) / n * 1e3)
    return ev, host


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    a = ap.parse_args()
    rows = []
    for B in (1, 8):
        g = torch.Generator(device="cuda").manual_seed(B)
        q = torch.randn(B, 32, 1, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(B, 8, 4096, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(B, 8, 4096, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            ref = F(q, k, v, enable_gqa=True)
        for _ in range(2):      # the checked first call, then the direct path
            err = rel_error(KF.sdpa(q, k, v, enable_gqa=True), ref)
            assert err < 1e-2, f"B{B}: kitjit sdpa off by {err:.3g}"
        fns = {
            "kitjit sdpa": (lambda: KF.sdpa(q, k, v, enable_gqa=True), contextlib.nullcontext),
            "kitjit attention_decode": (lambda: AD.attention_decode(q, k, v),
                                        contextlib.nullcontext),
            "kitjit combine kernel": (lambda: AD.attention_decode(q, k, v, fused=False),
                                      contextlib.nullcontext),
            "torch sdpa (default)": (lambda: F(q, k, v, enable_gqa=True),
                                     contextlib.nullcontext),
            "torch sdpa cuDNN": (lambda: F(q, k, v, enable_gqa=True),
                                 lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION)),
            "torch sdpa flash": (lambda: F(q, k, v, enable_gqa=True),
                                 lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)),
        }
        for name, (fn, ctx) in fns.items():
            try:
                ev, host = per_call(fn, a.n, ctx)
                rows.append((f"B{B} {name}", f"{ev:8.1f}", f"{host:8.1f}"))
            except Exception as e:  # a backend that does not take the call
                rows.append((f"B{B} {name}", "n/a", f"{type(e).__name__}"))
            print(rows[-1], flush=True)
    print(f"\n{torch.cuda.get_device_name()}  B H32/8 Sq1 Skv4096 D128 bf16, us per call")
    print(f"{'':32} {'events':>8} {'host':>8}")
    for r in rows:
        print(f"{r[0]:32} {r[1]:>8} {r[2]:>8}")


if __name__ == "__main__":
    main()

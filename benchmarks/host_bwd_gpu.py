"""Per-call cost of kitjit's FA3 backward on a GPU at small shapes, host included: the
route's direct launches (kitjit/nn/attention_backward.py `Route.__call__`) against its
checked path (`Route.slow`: three `kernel[grid](...)` launches and torch allocations, what
every call took before the host path), and torch's flash backward for scale.

"events": CUDA events around N back-to-back calls (no sync between), per call; "host": the
host time of N calls without sync. Checks the direct path's gradients against the checked
path's first.

    python benchmarks/host_bwd_gpu.py [--n 300]
"""
from __future__ import annotations

import argparse
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from kitjit.nn import attention_backward as AB
from kitjit.nn.attention import attention
from kitjit.testing import rel_error

SHAPES = [(1, 4, 2, 128, 128), (2, 16, 4, 512, 128), (2, 16, 4, 512, 64)]


def per_call(fn, n: int) -> tuple[float, float]:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    host = ev = 1e9
    for _ in range(3):
        s = time.perf_counter()
        for _ in range(n):
            fn()
        host = min(host, (time.perf_counter() - s) / n * 1e6)
        torch.cuda.synchronize()
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
    ap.add_argument("--n", type=int, default=300)
    a = ap.parse_args()
    rows = []
    for B, H, Hkv, S, D in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(S)
        q, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
                 for _ in range(2))
        k, v = (torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
                for _ in range(2))
        o, lse = attention(q, k, v)
        r = AB.route(B, H, Hkv, S, S, D, False, D ** -0.5, (), torch.bfloat16, 0)
        want = r.slow(do, q, k, v, o, lse)
        for _ in range(2):      # the site's launchers are made; then the direct path
            got = r(do, q, k, v, o, lse)
        torch.cuda.synchronize()
        # (dQ is reduce-added by many programs in no fixed order: not bitwise repeatable)
        err = max(rel_error(x, y) for x, y in zip(got, want))
        assert err < 1e-3, f"direct vs checked path: {err:.3g}"
        qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, enable_gqa=True)
        fns = {"kitjit direct": lambda: r(do, q, k, v, o, lse),
               "kitjit checked (before)": lambda: r.slow(do, q, k, v, o, lse),
               "torch flash backward": lambda: torch.autograd.grad(out, (qg, kg, vg), do,
                                                                   retain_graph=True)}
        for name, fn in fns.items():
            ev, host = per_call(fn, a.n)
            rows.append((f"B{B} H{H}/{Hkv} S{S} D{D} {name}", ev, host))
            print(rows[-1], flush=True)
    print(f"\n{torch.cuda.get_device_name()}  backward, us per call")
    print(f"{'':48} {'events':>8} {'host':>8}")
    for name, ev, host in rows:
        print(f"{name:48} {ev:8.1f} {host:8.1f}")


if __name__ == "__main__":
    main()

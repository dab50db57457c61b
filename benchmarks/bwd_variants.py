"""Attention backward variants on a GPU: correctness at real sizes, then TFLOP/s (2.5x the
forward's FLOPs) of kitjit's backward (the default configuration and the VARIANTS below)
against torch's flash (FA2) and cuDNN backends, timed interleaved in the same run; plus the
kitjit forward against cuDNN's.

    python benchmarks/bwd_variants.py [--cases all|d256|d128|d64] [--no-fwd] [--no-check]

Prints one line per case and a table last. Not a test: it never fails on a time.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import torch
import torch.nn.functional as F

from kitjit.nn.attention import attention
from kitjit.nn.attention_backward import attention_backward
from kitjit.testing import bench

CASES = [(4, 32, 4096, 128), (4, 32, 4096, 64), (2, 16, 16384, 128), (2, 16, 4096, 256)]
ROUNDS = 2
VARIANTS = {"reorder": dict(REORDER=True), "plain_order": dict(REORDER=False),
            "3_stages": dict(STAGES=3, DSB=1), "no_lpt": dict(LPT=False)}
# D=256 (kitjit/nn/attention_backward_d256.py, one Q and one dO stage): two of either; no
# longest-first order
VARIANTS_D256 = {"q_2_stages": dict(QSTAGES=2), "do_2_stages": dict(DOSTAGES=2),
                 "no_lpt": dict(LPT=False)}


def steady(fn, seconds=0.2):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
    return bench(fn, warmup=3, rep=20)


def interleaved(runs):
    ms = {n: steady(f) for n, f in runs.items()}
    for _ in range(ROUNDS - 1):
        for n, f in runs.items():
            ms[n] = min(ms[n], steady(f))
    return ms


def ref_grads(q, k, v, do, causal):
    qq, kk, vv = (t.detach().double().requires_grad_() for t in (q, k, v))
    o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal,
                                       enable_gqa=q.shape[1] != k.shape[1])
    o.backward(do.double())
    return qq.grad, kk.grad, vv.grad


def rel(a, b):
    """|a - b| / |b|, with |b| floored at an RMS of 1e-3 (a gradient that cancels to ~0, as
    dq and dk of a query that sees one key, is compared absolutely)."""
    a, b = a.double(), b.double()
    if torch.isnan(a).any():
        return float("nan")
    return float((a - b).norm() / b.norm().clamp_min(1e-3 * b.numel() ** 0.5))


def check_all(dims=(64, 128, 256)) -> bool:
    ok = True
    shapes = [(2, 8, 8, 1000, 1000, 128), (2, 8, 2, 1000, 1000, 64), (2, 8, 2, 300, 777, 128),
              (2, 8, 8, 777, 300, 64), (4, 8, 2, 1, 300, 128), (1, 4, 1, 4096, 4096, 128),
              (1, 4, 4, 513, 2049, 64), (3, 6, 3, 700, 900, 128), (3, 6, 3, 300, 300, 64),
              (2, 8, 2, 1000, 1000, 256), (2, 4, 4, 300, 777, 256), (1, 8, 1, 777, 300, 256),
              (1, 4, 4, 4096, 4096, 256), (3, 6, 3, 700, 900, 256), (2, 4, 2, 1, 300, 256)]
    for B, H, Hkv, S, SK, D in (c for c in shapes if c[-1] in dims):
        for causal in (False, True):
            g = torch.Generator(device="cuda").manual_seed(B * 1000 + S + D + causal)
            q = torch.randn(B, H, S, D, device="cuda", generator=g).bfloat16()
            k = torch.randn(B, Hkv, SK, D, device="cuda", generator=g).bfloat16()
            v = torch.randn(B, Hkv, SK, D, device="cuda", generator=g).bfloat16()
            do = torch.randn(B, H, S, D, device="cuda", generator=g).bfloat16()
            o, lse = attention(q, k, v, causal)
            ro = F.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                is_causal=causal, enable_gqa=H != Hkv)
            e = rel(o, ro)
            ok &= e < 1e-2
            print(f"check forward: {e:.2e}" + ("" if e < 1e-2 else "  FAIL"))
            variants = {"fa3": {}}
            if D == 128 and S >= 700:
                variants.update({n: c for n, c in VARIANTS.items() if "LPT" not in c})
            if D == 256 and S >= 700:
                variants.update(VARIANTS_D256)
            for alg, cfg in variants.items():
                got = attention_backward(do, q, k, v, o, lse, causal, config=cfg)
                errs = [rel(a, b) for a, b in zip(got, ref_grads(q, k, v, do, causal))]
                good = all(e < 2e-2 for e in errs)   # NaN fails
                ok &= good
                print(f"check {alg} B{B} H{H} Hkv{Hkv} S{S} SK{SK} D{D} causal={causal}: "
                      + " ".join(f"{e:.2e}" for e in errs) + ("" if good else "  FAIL"),
                      flush=True)
    # the same twice: a race shows as a moving result (dk, dv must not move at all)
    for D in dims:
        q, k, v, do = (torch.randn(2, 16, 2048, D, device="cuda").bfloat16() for _ in range(4))
        o, lse = attention(q, k, v, True)
        a = attention_backward(do, q, k, v, o, lse, True)
        b = attention_backward(do, q, k, v, o, lse, True)
        for x, y, n in zip(a, b, "qkv"):
            d = (x.float() - y.float()).abs().max().item()
            ok &= n == "q" or d == 0
            print(f"repeat D{D} d{n}: max |diff| {d:.3g} (dQ is summed by atomic adds in any "
                  "order)")
    return ok


def time_case(B, H, S, D, causal, fwd: bool) -> dict:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                   for _ in range(4))
    fflop = 4 * B * H * S * S * D / (2 if causal else 1) / 1e9
    flop = 2.5 * fflop
    o, lse = attention(q, k, v, causal)
    runs = {"kitjit": lambda: attention_backward(do, q, k, v, o, lse, causal)}
    for name, cfg in (VARIANTS_D256 if D == 256 else VARIANTS).items():
        if D == 256 and (causal or "LPT" not in cfg):
            runs[name] = (lambda cfg=cfg: attention_backward(do, q, k, v, o, lse, causal,
                                                             config=cfg))
        elif D == 256:
            continue
        elif D > 64 and "LPT" not in cfg or D == 64 and "LPT" in cfg:
            if causal or "LPT" not in cfg:
                runs[name] = (lambda cfg=cfg: attention_backward(do, q, k, v, o, lse, causal,
                                                                 config=cfg))
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION),
                     ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
        try:
            with sdpa_kernel(be):
                out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
            torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
            runs[name] = (lambda out=out, qg=qg, kg=kg, vg=vg:
                          torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True))
        except RuntimeError as e:
            print(f"  {name} n/a: {str(e)[:80]}")
    if fwd:
        runs["fwd_kitjit"] = lambda: attention(q, k, v, causal)

        def cudnn_fwd():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        runs["fwd_cudnn"] = cudnn_fwd
    torch.cuda.synchronize()
    ms = interleaved(runs)
    row = {n: round((fflop if n.startswith("fwd") else flop) / t, 1) for n, t in ms.items()}
    row["case"] = f"B{B} H{H} S{S} D{D}{' causal' if causal else ''}"
    print(row, flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="all")
    ap.add_argument("--no-fwd", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    a = ap.parse_args()
    print(torch.cuda.get_device_name(), flush=True)
    dims = (64, 128, 256) if a.cases == "all" else (int(a.cases[1:]),)
    ok = True if a.no_check else check_all(dims)
    cases = [c for c in CASES if a.cases == "all" or f"d{c[3]}" == a.cases]
    rows = [time_case(*c, causal, fwd=not a.no_fwd)
            for c in cases for causal in (False, True)]
    for r in rows:
        print(r["case"], "variants:", {n: r.get(n) for n in (*VARIANTS, *VARIANTS_D256)})
    print("\ncase                          kitjit  flash  cudnn | x flash  x cudnn"
          " | fwd kitjit cudnn")
    rf, rc = [], []
    for r in rows:
        kf = r["kitjit"] / r["flash"] if "flash" in r else float("nan")
        kc = r["kitjit"] / r["cudnn"] if "cudnn" in r else float("nan")
        rf.append(kf)
        rc.append(kc)
        print(f"{r['case']:28s} {r['kitjit']:7.1f} "
              f"{r.get('flash', float('nan')):6.1f} {r.get('cudnn', float('nan')):6.1f} | "
              f"{kf:7.3f} {kc:8.3f} | {r.get('fwd_kitjit', float('nan')):6.1f} "
              f"{r.get('fwd_cudnn', float('nan')):6.1f}")

    def gm(xs):
        return math.exp(sum(math.log(x) for x in xs) / len(xs))
    print(f"geomean x flash {gm(rf):.3f}  x cudnn {gm(rc):.3f}  (bars 1.5, 1.0)")
    print("correctness:", "all passed" if ok else "FAILURES above")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

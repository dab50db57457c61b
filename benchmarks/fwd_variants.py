"""Attention forward configs against FA4 and cuDNN, per case, in interleaved rounds (issue 20:
which config is fastest where the default trails FA4: D=64 and the long S=16384 rows).

    python benchmarks/fwd_variants.py [d64|d128|s16k|d256|all] [config,config,...]

The second argument keeps only the named configs (the peers always run). Session 8's
variants (CPU-prepared, SASS-checked; benchmarks/NOTES.md): `packed` (P converted where
written and carried as bf16: no PRMT repacking, 517 -> 488 SASS instructions a block at
D=128), `packed_bound` (that, and the causal diagonal's mask as one bound a row) and
`ws192x128s3packed` (FA4's D=64 tile with P packed).

Each config is checked against a float64 reference on two heads before it is timed; a config
that fails to build or is wrong prints why and is left out. FA4 comes from /tmp/peers
(benchmarks/peers.py) and is "not installed" without it.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from bench import interleaved
from peers import fa4_forward, status

from kitjit.nn.attention import attention

WS = dict(ws=True, TURNS=True)
D128 = dict(BM=128, BN=128, STAGES=3, num_warps=8, **WS)   # the D=128 default
CONFIGS = {
    64: {"default": {}, "ws128x128": dict(BM=128, BN=128, STAGES=2, num_warps=8, **WS),
         "ws192x128": dict(BM=192, BN=128, STAGES=2, num_warps=12, **WS),
         "ws192x128s3": dict(BM=192, BN=128, STAGES=3, num_warps=12, **WS),
         "64x128s3": dict(BM=64, BN=128, STAGES=3, num_warps=4),
         "ws192x128s3packed": dict(BM=192, BN=128, STAGES=3, num_warps=12, PACKED=True,
                                   **WS)},
    128: {"default": {}, "s2": dict(BM=128, BN=128, STAGES=2, num_warps=8, **WS),
          "overlap": dict(BM=128, BN=128, STAGES=3, num_warps=8, OVERLAP=True, **WS),
          "bn64s4": dict(BM=128, BN=64, STAGES=4, num_warps=8, **WS),
          "packed": dict(D128, PACKED=True), "packed_bound": dict(D128, PACKED=True, BOUND=True)},
    256: {"default": {}, "bn64s3": dict(BM=128, BN=64, STAGES=3, num_warps=8, SPLIT=True, **WS),
          "packed": dict(BM=128, BN=64, STAGES=2, num_warps=8, SPLIT=True, PACKED=True, **WS)},
}
CASES = {"d128": (4, 32, 4096, 128), "d64": (4, 32, 4096, 64), "s16k": (2, 16, 16384, 128),
         "d256": (2, 16, 4096, 256)}


def reference(q, k, v, causal):
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)


def main() -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    pick = sys.argv[1] if len(sys.argv) > 1 else "all"
    only = set(sys.argv[2].split(",")) if len(sys.argv) > 2 else None
    for name, (B, H, S, D) in CASES.items():
        if pick not in ("all", name):
            continue
        for causal in (False, True):
            q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                       for _ in range(3))
            flop = 4 * B * H * S * S * D / (2 if causal else 1) / 1e9
            ref = reference(q[:1, :2], k[:1, :2], v[:1, :2], causal)
            runs = {}
            for cname, cfg in CONFIGS[D].items():
                if only is not None and cname not in only:
                    continue
                try:
                    o, _ = attention(q, k, v, causal, **cfg)
                    err = ((o[:1, :2].double() - ref).norm() / ref.norm()).item()
                    if not err < 1e-2:
                        raise AssertionError(f"relative error {err:.3g}")
                    runs[cname] = lambda cfg=cfg: attention(q, k, v, causal, **cfg)
                except Exception as e:
                    print(f"  {name} causal={causal} {cname}: {type(e).__name__} {str(e)[:160]}")

            def cudnn():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            runs["cudnn"] = cudnn
            fa4 = fa4_forward(q, k, v, causal)
            if fa4 is not None:
                runs["fa4"] = fa4
            ms = interleaved(runs)
            tf = {n: flop / t for n, t in ms.items()}
            peer = tf.get("fa4", tf["cudnn"])
            print(f"{name:5s} causal={causal!s:5s} " + "  ".join(
                f"{n} {t:.0f} ({t / peer:.3f})" for n, t in tf.items()), flush=True)
    print("peers:", status())
    print("ratios are against FA4 where it ran, else cuDNN")


if __name__ == "__main__":
    main()

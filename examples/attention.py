"""FlashAttention forward on Hopper, as a user calls it.

The kernels live in the package, kitjit/nn/attention.py (read that file first: Q stays in
shared memory, K and V stream through a TMA ring, S = Q Kᵀ and O += P V run on WGMMA with P
kept in registers, online softmax in exp2, causal, GQA, ragged lengths, S != SK). This example
imports them, checks them against a float64 reference and, on a GPU, times them against
torch's SDPA. `sdpa` is `kitjit.nn.functional.scaled_dot_product_attention`: torch's
signature, the kitjit kernel where it covers the call, torch's own (with a warning) elsewhere.
"""

import math

import torch

from kitjit.nn.attention import (  # noqa: F401  (the kernels, re-exported for the tests)
    attend,
    attention,
    attention_kernel,
    attention_ws_kernel,
    consume,
    consume_overlapped,
    overlapped,
    softmax,
    store_out,
)
from kitjit.nn.functional import sdpa
from kitjit.testing import bench, check, device, has_gpu


def reference(q, k, v, causal, scale=None):
    """O and the LSE in float64; causal top-left aligned (query i sees keys 0..i), as torch."""
    B, H, S, D = q.shape
    SK = k.shape[2]
    rep = H // k.shape[1]
    kk = k.double().repeat_interleave(rep, dim=1)
    vv = v.double().repeat_interleave(rep, dim=1)
    s = (q.double() @ kk.transpose(-1, -2)) * (scale or 1.0 / math.sqrt(D))
    if causal:
        s = s.masked_fill(torch.ones(S, SK, dtype=torch.bool, device=q.device).triu(1),
                          float("-inf"))
    return torch.softmax(s, -1) @ vv, torch.logsumexp(s, -1)


def main() -> None:
    dev = device()
    cases = [(1, 2, 200, 64, False, 2), (1, 4, 257, 128, True, 2)] if has_gpu() else \
        [(1, 2, 130, 64, True, 1)]
    for B, H, S, D, causal, g in cases:
        q = torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(B, H // g, S, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(B, H // g, S, D, device=dev, dtype=torch.bfloat16)
        o, lse = attention(q, k, v, causal)
        ro, rl = reference(q, k, v, causal)
        err = check(o, ro, 1e-2)
        check(lse, rl, 1e-4, "lse")
        print(f"attention B{B} H{H} S{S} D{D} causal={causal} gqa={g}: rel err {err:.2e} "
              f"({'GPU' if has_gpu() else 'interpreter'})")
    # as torch users call it: (B, S, H, D) transposed, one query against a KV cache, GQA;
    # is_causal=False: torch's causal mask is top-left aligned (query 0 would see key 0 only)
    q = torch.randn(2, 1, 4, 64, device=dev, dtype=torch.bfloat16).transpose(1, 2)
    k, v = (torch.randn(2, 70, 2, 64, device=dev, dtype=torch.bfloat16).transpose(1, 2)
            for _ in range(2))
    o = sdpa(q, k, v, enable_gqa=True)
    ro = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                          enable_gqa=True)
    print(f"sdpa decode Sq=1 Skv=70 gqa=2 (B, S, H, D) layout: rel err "
          f"{check(o, ro, 1e-2):.2e}")
    if has_gpu():
        for B, H, S, D, causal in ((4, 32, 4096, 128, False), (4, 32, 4096, 128, True)):
            q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                       for _ in range(3))
            flop = 4 * B * H * S * S * D / (2 if causal else 1) / 1e9
            ms_k = bench(lambda: attention(q, k, v, causal))
            ms_t = bench(lambda: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal))
            print(f"  B{B} H{H} S{S} D{D} causal={causal}: kitjit {flop / ms_k:.0f} TFLOP/s, "
                  f"torch SDPA {flop / ms_t:.0f} TFLOP/s")


if __name__ == "__main__":
    main()

"""FlashAttention backward on Hopper, as a user calls it (and as autograd does).

The kernels live in the package, kitjit/nn/attention_backward.py (read it first). FA2's
algorithm, with every matrix product on Hopper's warpgroup tensor cores (WGMMA) fed by TMA:

1. `bwd_preprocess`: delta_i = sum_d dO_id O_id, one fp32 per query row.
2. `dkdv_kernel`: one program per block of keys; K and V stay in shared memory while Q and dO
   stream through a TMA ring over all query blocks of all query heads sharing that K/V head
   (GQA: dK and dV come out summed, no atomics). P = exp(S scale - L) is recomputed from the
   forward's log-sum-exp L instead of being stored (S x S would not fit in memory).
   Hardware note: a WGMMA takes its A operand from registers only in the accumulator layout
   of a previous WGMMA, and there is no cheap register transpose; so this kernel computes Sᵀ
   (keys as rows) directly, and Pᵀ and dSᵀ are the A operands of dV += Pᵀ dO and dK += dSᵀ Q.
3. `dq_kernel`: one program per block of queries, K and V streaming: dQ += dS K.

`kitjit.nn.functional.scaled_dot_product_attention` wires this to autograd: `loss.backward()`
reaches q, k and v, and torch.compile(fullgraph=True) sees two opaque custom ops
(`kitjit::attention_fwd`, `kitjit::attention_bwd`). This example checks the gradients against
float64 torch autograd and, on a GPU, times the backward against torch's flash and cuDNN.
"""

import torch
import torch.nn.functional as F

from kitjit.nn.attention import attention
from kitjit.nn.attention_backward import (  # noqa: F401  (the kernels, for the tests)
    attention_backward,
    bwd_preprocess,
    dkdv_kernel,
    dq_kernel,
)
from kitjit.nn.functional import sdpa
from kitjit.testing import bench, check, device, has_gpu


def reference_grads(q, k, v, do, causal, scale=None):
    """dq, dk, dv from torch autograd in float64 (GQA: enable_gqa sums dk, dv over a group)."""
    qq, kk, vv = (t.detach().double().requires_grad_() for t in (q, k, v))
    o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal, scale=scale,
                                       enable_gqa=q.shape[1] != k.shape[1])
    o.backward(do.double())
    return qq.grad, kk.grad, vv.grad


def main() -> None:
    dev = device()
    cases = [(2, 4, 2, 300, 300, 128, True), (1, 4, 4, 200, 333, 64, False)] if has_gpu() \
        else [(1, 2, 1, 70, 70, 64, True), (1, 2, 2, 40, 96, 128, False)]
    for B, H, Hkv, S, SK, D, causal in cases:
        q = torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(B, Hkv, SK, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(B, Hkv, SK, D, device=dev, dtype=torch.bfloat16)
        do = torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16)
        o, lse = attention(q, k, v, causal)
        grads = attention_backward(do, q, k, v, o, lse, causal)
        errs = [check(g, r, 2e-2, n) for g, r, n in
                zip(grads, reference_grads(q, k, v, do, causal), ("dq", "dk", "dv"))]
        print(f"backward B{B} H{H} Hkv{Hkv} S{S} SK{SK} D{D} causal={causal}: rel err "
              + " ".join(f"{e:.2e}" for e in errs)
              + f" ({'GPU' if has_gpu() else 'interpreter'})")
    # through autograd, as a model trains: (B, S, H, D) transposed, GQA
    q = torch.randn(1, 50, 4, 64, device=dev, dtype=torch.bfloat16).transpose(1, 2)
    k, v = (torch.randn(1, 50, 2, 64, device=dev, dtype=torch.bfloat16).transpose(1, 2)
            for _ in range(2))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    do = torch.randn(1, 4, 50, 64, device=dev, dtype=torch.bfloat16)
    sdpa(q, k, v, is_causal=True, enable_gqa=True).backward(do)
    err = check(q.grad, reference_grads(q, k, v, do, True)[0], 2e-2, "dq")
    print(f"sdpa(...).backward() GQA (B, S, H, D) layout: dq rel err {err:.2e}")
    if has_gpu():
        bench_backward()


def bench_backward(shapes=((4, 32, 4096, 128),)):
    """Backward TFLOP/s (2.5x the forward's FLOPs) of kitjit, torch's flash and cuDNN."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for B, H, S, D in shapes:
        for causal in (False, True):
            q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                           for _ in range(4))
            flop = 2.5 * 4 * B * H * S * S * D / (2 if causal else 1) / 1e9
            o, lse = attention(q, k, v, causal)
            row = [f"B{B} H{H} S{S} D{D} causal={causal}: kitjit "
                   f"{flop / bench(lambda: attention_backward(do, q, k, v, o, lse, causal)):.0f}"]
            for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                                  ("cuDNN", SDPBackend.CUDNN_ATTENTION)):
                qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
                try:
                    with sdpa_kernel(backend):
                        out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
                    ms = bench(lambda: torch.autograd.grad(out, (qg, kg, vg), do,
                                                           retain_graph=True))
                    row.append(f"{name} {flop / ms:.0f}")
                except RuntimeError as e:            # a backend this build lacks
                    row.append(f"{name} n/a ({str(e)[:40]})")
            print("  " + ", ".join(row) + " TFLOP/s (backward)")


if __name__ == "__main__":
    main()

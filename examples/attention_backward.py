"""FlashAttention backward on Hopper, as a user calls it (and as autograd does).

The kernels live in the package, kitjit/nn/attention_backward.py (read it first): FA3's
algorithm in kitjit's level-2 language, where the hardware shapes every step:

1. `bwd_preprocess`: Δ_i = sum_d dO_id O_id and the LSE in log2, one fp32 each per query row,
   padded to whole blocks (LSE = +inf there: P = exp2(S - LSE) is 0 without a mask); it
   also zeroes the fp32 dQ sums, so no memset runs between the kernels.
2. `bwd_kernel`: one program per 128 keys of one K/V head, warp-specialized
   (`kit.warpgroup_id()` roles). The producer warpgroup gives its registers up
   (`kit.setmaxnreg(24)`) and streams Q, dO, LSE and Δ blocks through a TMA ring; the two
   consumer warpgroups take 240 registers each, because dK and dV stay in registers for the
   whole program (128 a thread at D=128). Per block of queries, five WGMMAs:
       Sᵀ = K Qᵀ, dPᵀ = V dOᵀ          (keys as MMA rows: 64 per warpgroup)
       Pᵀ = exp2(Sᵀ·scale − LSE), dSᵀ = Pᵀ ∘ (dPᵀ − Δ)   (under dPᵀ's MMA: `pending=1`)
       dV += Pᵀ dO, dK += dSᵀ Q         (A from registers: the accumulator layout of Sᵀ is
                                         the A-fragment layout of the next MMA)
       dQᵀ = Kᵀ dSᵀ                    (dSᵀ goes through shared memory with `kit.store`, as
                                         each warpgroup holds only its 64 rows; Kᵀ is read
                                         transposed by the MMA itself: `kit.mma(k.T, ...)`)
   and dQᵀ is added into an fp32 buffer by the TMA unit (`kit.tma_store(..., reduce="add")`,
   atomic per element): no second pass over K and V (FA2 needs two more MMAs for dQ).
   GQA: the ring runs over every query head of the group, so dK and dV come out summed.
3. `dq_convert`: dQ = scale · the fp32 sums, in q's dtype.

Head dim 256 (kitjit/nn/attention_backward_d256.py) is where the register file decides the
design: dK and dV of 128 keys x 256 in fp32 would take 256 registers a thread over two
warpgroups for the accumulators alone, and a thread has at most 255. So a program holds
64 keys, and its two consumer warpgroups take different jobs (one computes Sᵀ, Pᵀ and dV,
the other dPᵀ, dSᵀ, dK and dQ, with Pᵀ passed through shared memory), each holding one
64 x 256 accumulator (128 registers a thread); dQ goes out in two halves of 128 columns.

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
    bwd_kernel,
    bwd_preprocess,
    dq_convert,
    keys_as_rows,
    queries_as_rows,
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
    cases = [(2, 4, 2, 300, 300, 128, True), (1, 4, 4, 200, 333, 64, False),
             (2, 4, 2, 300, 250, 256, True)] if has_gpu() \
        else [(1, 2, 1, 70, 70, 64, True), (1, 2, 2, 40, 96, 128, False),
              (1, 2, 1, 70, 100, 256, True)]
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

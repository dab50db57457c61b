"""kit.graph, the seed example of issue 14: decode attention (one query row per head against
a 4096-key cache) written as three graph ops; superoptimize() searches fused kernels
(flash-decoding: online softmax, split over the keys with a combine kernel), verifies each
against a float64 reference, times them on the GPU, and caches the winner."""

import torch

import kitjit as kit
from kitjit.testing import check, device, has_gpu


def build(heads: int, d: int, keys: int):
    g = kit.graph.new_kernel_graph()
    Q = g.new_input(dims=(heads, 1, d), dtype=kit.float16)
    K = g.new_input(dims=(heads, d, keys), dtype=kit.float16)
    V = g.new_input(dims=(heads, keys, d), dtype=kit.float16)
    A = g.matmul(Q, K)
    S = g.softmax(A)
    O = g.matmul(S, V)
    g.mark_output(O)
    return g


def main(heads: int = 64, d: int = 128, keys: int = 4096, **search) -> None:
    if not has_gpu():      # the interpreter: small sizes
        heads, d, keys = 2, 32, 80
    dev = device()
    opt = build(heads, d, keys).superoptimize(**search)
    q = torch.randn(heads, 1, d, device=dev, dtype=torch.float16)
    k = torch.randn(heads, d, keys, device=dev, dtype=torch.float16)
    v = torch.randn(heads, keys, d, device=dev, dtype=torch.float16)
    out = opt(inputs=[q, k, v])
    ref = torch.softmax(q.double() @ k.double(), -1) @ v.double()
    err = check(out[0], ref, 1e-2)
    print(f"graph attention decode {heads}x{d}x{keys}: rel err {err:.2e} plan "
          f"{opt.info['plan']} ({'GPU' if has_gpu() else 'interpreter'})")


if __name__ == "__main__":
    main()

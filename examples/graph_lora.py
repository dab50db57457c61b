"""kit.graph: a linear layer with a LoRA adapter, y = x W + (x A) B (Mirage's shapes: 16
tokens, 256 -> 4096, rank 16). The search may run all three matmuls in one kernel: each
tile of x feeds both x W and the narrow x A, whose product with a tile of B is added in the
epilogue; one read of x, W, A and B, one write of y."""

import torch

import kitjit as kit
from kitjit.testing import check, device, has_gpu


def build(m: int, k: int, n: int, rank: int, dtype=kit.float16):
    g = kit.graph.new_kernel_graph()
    X = g.new_input(dims=(m, k), dtype=dtype)
    W = g.new_input(dims=(k, n), dtype=dtype)
    A = g.new_input(dims=(k, rank), dtype=dtype)
    B = g.new_input(dims=(rank, n), dtype=dtype)
    g.mark_output(g.add(g.matmul(X, W), g.matmul(g.matmul(X, A), B)))
    return g


def torch_lora(x, w, a, b):
    return x @ w + (x @ a) @ b


def main(m: int = 16, k: int = 256, n: int = 4096, rank: int = 16, **search) -> None:
    if not has_gpu():
        m, k, n, rank = 20, 64, 48, 8
    dev = device()
    opt = build(m, k, n, rank).superoptimize(**search)
    x = torch.randn(m, k, device=dev, dtype=torch.float16)
    w = torch.randn(k, n, device=dev, dtype=torch.float16) / k ** 0.5
    a = torch.randn(k, rank, device=dev, dtype=torch.float16) / k ** 0.5
    b = torch.randn(rank, n, device=dev, dtype=torch.float16) / rank ** 0.5
    err = check(opt(x, w, a, b)[0], torch_lora(x.double(), w.double(), a.double(),
                                               b.double()), 1e-2)
    print(f"graph LoRA {m}x{k}x{n} rank {rank}: rel err {err:.2e} plan {opt.info['plan']} "
          f"({'GPU' if has_gpu() else 'interpreter'})")


if __name__ == "__main__":
    main()

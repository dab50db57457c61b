"""kit.graph: the gated MLP of LLaMA-style blocks, SiLU(x W1) * (x W3). The search may run
both matmuls in one kernel (two accumulators sharing the tile of x) with the SiLU and the
product fused into the epilogue: one read of x, one write of the result."""

import torch

import kitjit as kit
from kitjit.testing import check, device, has_gpu


def build(m: int, k: int, n: int):
    g = kit.graph.new_kernel_graph()
    X = g.new_input(dims=(m, k), dtype=kit.float16)
    W1 = g.new_input(dims=(k, n), dtype=kit.float16)
    W3 = g.new_input(dims=(k, n), dtype=kit.float16)
    g.mark_output(g.mul(g.silu(g.matmul(X, W1)), g.matmul(X, W3)))
    return g


def main(m: int = 16, k: int = 4096, n: int = 11008, **search) -> None:
    if not has_gpu():
        m, k, n = 24, 64, 48
    dev = device()
    opt = build(m, k, n).superoptimize(**search)
    x = torch.randn(m, k, device=dev, dtype=torch.float16)
    w1 = torch.randn(k, n, device=dev, dtype=torch.float16) / k ** 0.5
    w3 = torch.randn(k, n, device=dev, dtype=torch.float16) / k ** 0.5
    ref = torch.nn.functional.silu(x.double() @ w1.double()) * (x.double() @ w3.double())
    err = check(opt(x, w1, w3)[0], ref, 1e-2)
    print(f"graph gated MLP {m}x{k}x{n}: rel err {err:.2e} plan {opt.info['plan']} "
          f"({'GPU' if has_gpu() else 'interpreter'})")


if __name__ == "__main__":
    main()

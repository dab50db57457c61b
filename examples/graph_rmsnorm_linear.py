"""kit.graph: y = rms_norm(x, w) @ W. The search may fuse the norm into the matmul's
prologue (a first pass over K for each row's scale, then the scaled tiles feed kit.dot)."""

import torch

import kitjit as kit
from kitjit.testing import check, device, has_gpu


def build(m: int, k: int, n: int):
    g = kit.graph.new_kernel_graph()
    X = g.new_input(dims=(m, k), dtype=kit.float16)
    w = g.new_input(dims=(k,), dtype=kit.float16)
    W = g.new_input(dims=(k, n), dtype=kit.float16)
    g.mark_output(g.matmul(g.rms_norm(X, w, eps=1e-6), W))
    return g


def main(m: int = 2048, k: int = 4096, n: int = 4096, **search) -> None:
    if not has_gpu():
        m, k, n = 20, 64, 40
    dev = device()
    opt = build(m, k, n).superoptimize(**search)
    x = torch.randn(m, k, device=dev, dtype=torch.float16)
    w = torch.randn(k, device=dev, dtype=torch.float16)
    W = torch.randn(k, n, device=dev, dtype=torch.float16) / k ** 0.5
    xd = x.double()
    ref = (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()) @ W.double()
    err = check(opt(x, w, W)[0], ref, 1e-2)
    print(f"graph rms_norm @ W {m}x{k}x{n}: rel err {err:.2e} plan {opt.info['plan']} "
          f"({'GPU' if has_gpu() else 'interpreter'})")


if __name__ == "__main__":
    main()

"""RMSNorm: y = x / sqrt(mean(x^2) + eps) * w, one program per row, one pass over memory."""

import torch

import kitjit as kit
from kitjit.testing import bench, check, device, has_gpu


@kit.jit
def rmsnorm_kernel(X, W, Y, n_cols, eps, BLOCK: kit.constexpr):
    row = kit.program_id(0)
    offs = kit.arange(0, BLOCK)
    mask = offs < n_cols
    x = kit.load(X + row * n_cols + offs, mask=mask, other=0.0).to(kit.float32)
    rstd = kit.rsqrt(kit.sum(x * x, axis=0) / n_cols + eps)
    w = kit.load(W + offs, mask=mask).to(kit.float32)
    kit.store(Y + row * n_cols + offs, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    block = kit.next_power_of_2(n_cols)
    warps = 4 if block <= 2048 else 8  # measured best on an H200 (benchmarks/NOTES.md)
    rmsnorm_kernel[(n_rows,)](x, w, y, n_cols, eps, BLOCK=block, num_warps=warps)
    return y


def reference(x, w, eps=1e-6):
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def main() -> None:
    dev = device()
    for rows, cols in ((33, 1000), (64, 4096)):
        x = torch.randn(rows, cols, device=dev, dtype=torch.bfloat16)
        w = torch.randn(cols, device=dev, dtype=torch.bfloat16)
        err = check(rmsnorm(x, w), reference(x, w), 1e-2)
        print(f"rmsnorm {rows}x{cols} bf16: rel err {err:.2e} "
              f"({'GPU' if has_gpu() else 'interpreter'})")
    if has_gpu():
        for rows, cols in ((32768, 4096), (8192, 16384)):
            x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
            ms_k = bench(lambda: rmsnorm(x, w))
            ms_t = bench(lambda: torch.nn.functional.rms_norm(x, (cols,), w, 1e-6))
            gb = 2 * x.numel() * x.element_size() / 1e6
            print(f"  {rows}x{cols}: kitjit {gb / ms_k:.0f} GB/s, torch {gb / ms_t:.0f} GB/s")


if __name__ == "__main__":
    main()

"""LayerNorm forward: one program per row; mean and variance from two reductions over the
row held in registers (the row is read from memory once), then scale and shift."""

import torch

import kitjit as kit
from kitjit.testing import bench, check, device, has_gpu


@kit.jit
def layernorm_kernel(X, W, B, Y, n_cols, eps, BLOCK: kit.constexpr):
    row = kit.program_id(0)
    offs = kit.arange(0, BLOCK)
    mask = offs < n_cols
    x = kit.load(X + row * n_cols + offs, mask=mask, other=0.0).to(kit.float32)
    mean = kit.sum(x, axis=0) / n_cols
    d = kit.where(mask, x - mean, 0.0)
    rstd = kit.rsqrt(kit.sum(d * d, axis=0) / n_cols + eps)
    w = kit.load(W + offs, mask=mask).to(kit.float32)
    b = kit.load(B + offs, mask=mask).to(kit.float32)
    kit.store(Y + row * n_cols + offs, (d * rstd * w + b).to(Y.dtype.element_ty), mask=mask)


def layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-5):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    block = kit.next_power_of_2(n_cols)
    # measured best on an H200 for bf16 (benchmarks/NOTES.md); wide fp32 rows need more
    # warps or they spill
    warps = 4 if x.element_size() <= 2 or block <= 4096 else 16
    layernorm_kernel[(n_rows,)](x, w, b, y, n_cols, eps, BLOCK=block, num_warps=warps)
    return y


def main() -> None:
    dev = device()
    for rows, cols in ((29, 1000), (64, 4096)):
        x = torch.randn(rows, cols, device=dev, dtype=torch.bfloat16)
        w = torch.randn(cols, device=dev, dtype=torch.bfloat16)
        b = torch.randn(cols, device=dev, dtype=torch.bfloat16)
        ref = torch.nn.functional.layer_norm(x.double(), (cols,), w.double(), b.double(), 1e-5)
        err = check(layernorm(x, w, b), ref, 1e-2)
        print(f"layernorm {rows}x{cols} bf16: rel err {err:.2e} "
              f"({'GPU' if has_gpu() else 'interpreter'})")
    if has_gpu():
        for rows, cols in ((32768, 4096), (8192, 16384)):
            x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
            w, b = (torch.randn(cols, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            ms_k = bench(lambda: layernorm(x, w, b))
            ms_t = bench(lambda: torch.nn.functional.layer_norm(x, (cols,), w, b, 1e-5))
            gb = 2 * x.numel() * x.element_size() / 1e6
            print(f"  {rows}x{cols}: kitjit {gb / ms_k:.0f} GB/s, torch {gb / ms_t:.0f} GB/s")


if __name__ == "__main__":
    main()

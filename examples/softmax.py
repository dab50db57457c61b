"""Row softmax: one program per row, the whole row in registers, one read and one write of
memory. kit.max and kit.sum reduce inside each thread, then across lanes with shuffles and
across warps through shared memory; exp runs on the SFU's exp2."""

import torch

import kitjit as kit
from kitjit.testing import bench, check, device, has_gpu


@kit.jit
def softmax_kernel(X, Y, n_cols, BLOCK: kit.constexpr):
    row = kit.program_id(0)
    offs = kit.arange(0, BLOCK)
    mask = offs < n_cols
    x = kit.load(X + row * n_cols + offs, mask=mask, other=-float("inf")).to(kit.float32)
    e = kit.exp(x - kit.max(x, axis=0))
    y = e / kit.sum(e, axis=0)
    kit.store(Y + row * n_cols + offs, y.to(Y.dtype.element_ty), mask=mask)


def num_warps_for(block: int) -> int:
    # measured on an H200 (benchmarks/NOTES.md): 4 warps up to 4096 columns, 16 at 16384
    return 4 if block <= 4096 else 8 if block <= 8192 else 16


def softmax(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    block = kit.next_power_of_2(n_cols)
    softmax_kernel[(n_rows,)](x, y, n_cols, BLOCK=block, num_warps=num_warps_for(block))
    return y


def main() -> None:
    dev = device()
    for rows, cols in ((37, 1000), (64, 4096)):
        x = torch.randn(rows, cols, device=dev, dtype=torch.bfloat16)
        err = check(softmax(x), torch.softmax(x.double(), dim=1), 1e-2)
        print(f"softmax {rows}x{cols} bf16: rel err {err:.2e} "
              f"({'GPU' if has_gpu() else 'interpreter'})")
    if has_gpu():
        for rows, cols in ((32768, 4096), (8192, 16384)):
            x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
            ms_k = bench(lambda: softmax(x))
            ms_t = bench(lambda: torch.softmax(x, dim=1))
            gb = 2 * x.numel() * x.element_size() / 1e6
            print(f"  {rows}x{cols}: kitjit {gb / ms_k:.0f} GB/s, torch {gb / ms_t:.0f} GB/s")


if __name__ == "__main__":
    main()

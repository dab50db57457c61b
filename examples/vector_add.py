"""Vector add: the smallest kitjit kernel. Each program adds one BLOCK-wide slice; the mask
covers the tail when n is not a multiple of BLOCK. kitjit proves the loads contiguous and
16-byte aligned (the pointers are specialized as 16-byte aligned), so they become 128-bit
LDG.E.128 instructions."""

import torch

import kitjit as kit
from kitjit.testing import bench, check, device, has_gpu


@kit.jit
def add_kernel(X, Y, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    x = kit.load(X + offs, mask=mask)
    y = kit.load(Y + offs, mask=mask)
    kit.store(Out + offs, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor, BLOCK: int = 1024) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(kit.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK, num_warps=4)
    return out


def main(n: int = 98_432, dtype=torch.float32) -> None:
    dev = device()
    x = torch.randn(n, device=dev, dtype=dtype)
    y = torch.randn(n, device=dev, dtype=dtype)
    err = check(add(x, y), x.double() + y.double(), 1e-6 if dtype == torch.float32 else 1e-2)
    print(f"vector_add n={n} {dtype}: rel err {err:.2e} ({'GPU' if has_gpu() else 'interpreter'})")
    if has_gpu():
        n = 1 << 28
        x, y = (torch.randn(n, device="cuda", dtype=dtype) for _ in range(2))
        ms_k, ms_t = bench(lambda: add(x, y)), bench(lambda: x + y)
        gbs = 3 * x.numel() * x.element_size() / 1e6
        print(f"  n={n}: kitjit {ms_k:.3f} ms ({gbs / ms_k:.0f} GB/s), "
              f"torch {ms_t:.3f} ms ({gbs / ms_t:.0f} GB/s)")


if __name__ == "__main__":
    main()

"""Warp-specialized GEMM variants (benchmarks/ws_kernel.py) against the example and cuBLAS."""
import sys

import torch

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "examples")
import matmul  # noqa: E402
import ws_kernel  # noqa: E402

import kitjit as kit  # noqa: E402
from kitjit.testing import bench  # noqa: E402


def ws(a, b, BM=128, BN=256, BK=64, STAGES=4):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    ws_kernel.matmul_ws[(kit.cdiv(M, BM), kit.cdiv(N, BN))](a, b, c, M, N, K, BM=BM, BN=BN,
                                                            BK=BK, STAGES=STAGES, num_warps=12)
    return c


def wsp(a, b, BM=128, BN=256, BK=64, STAGES=4):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    grid = (min(kit.cdiv(M, BM) * kit.cdiv(N, BN), matmul.num_sms(a.device)),)
    ws_kernel.matmul_wsp[grid](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, STAGES=STAGES, GROUP=8,
                               num_warps=12)
    return c


def pp(a, b, BM=128, BN=128, BK=64, STAGES=6):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    grid = (min(kit.cdiv(M, BM) * kit.cdiv(N, BN), matmul.num_sms(a.device)),)
    ws_kernel.matmul_pingpong[grid](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, STAGES=STAGES,
                                    GROUP=8, num_warps=12)
    return c


SHAPES = ((300, 264, 200), (2048, 2048, 1024), (4096, 4096, 4096), (8192, 8192, 1024),
          (8192, 8192, 8192))
for M, N, K in SHAPES:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    c = ws(a, b)
    torch.cuda.synchronize()
    err = ((c.float() - ref).norm() / ref.norm()).item()
    c = wsp(a, b)
    torch.cuda.synchronize()
    err2 = ((c.float() - ref).norm() / ref.norm()).item()
    t_wsp = bench(lambda: wsp(a, b))
    c = pp(a, b)
    torch.cuda.synchronize()
    err3 = ((c.float() - ref).norm() / ref.norm()).item()
    t_pp = bench(lambda: pp(a, b))
    fl = 2 * M * N * K / 1e9
    t_ws = bench(lambda: ws(a, b))
    t_ex = bench(lambda: matmul.matmul(a, b, BM=128, BN=256, BK=64, STAGES=4, num_warps=8))
    t_cb = bench(lambda: a @ b)
    print(f"{M}x{N}x{K}: err {err:.1e} {err2:.1e} {err3:.1e} ws {fl / t_ws:.0f} "
          f"wsp {fl / t_wsp:.0f} pingpong {fl / t_pp:.0f} "
          f"example {fl / t_ex:.0f}  "
          f"cuBLAS {fl / t_cb:.0f} TFLOP/s", flush=True)

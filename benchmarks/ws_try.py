"""Warp-specialized GEMM variants (benchmarks/ws_kernel.py) against the example and cuBLAS,
in one run: correctness on poisoned outputs first, then TFLOP/s; a table last."""
import sys

import torch

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "examples")
import matmul  # noqa: E402
import ws_kernel  # noqa: E402

from kitjit.testing import bench  # noqa: E402

VARIANTS = {
    "example": lambda a, b, c: matmul.matmul(a, b, BM=128, BN=256, BK=64, STAGES=4,
                                             num_warps=8),
    "wsp": lambda a, b, c: ws_kernel.wsp(a, b, c),
    "pp128": lambda a, b, c: ws_kernel.pp(a, b, c, BM=128, BN=128, STAGES=6),
    "pp64": lambda a, b, c: ws_kernel.pp(a, b, c, BM=64, BN=256, STAGES=5),
    "cuBLAS": lambda a, b, c: torch.matmul(a, b, out=c),
}
only = sys.argv[1].split(",") if len(sys.argv) > 1 else list(VARIANTS)
for M, N, K in ((300, 264, 200), (1000, 2056, 1032), (2048, 2048, 1024)):
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    ref = a.double() @ b.double()
    for name in only:
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        c = VARIANTS[name](a, b, c)       # the example allocates its own output
        torch.cuda.synchronize()
        err = ((c.double() - ref).norm() / ref.norm()).item()
        assert err < 1e-2, (name, M, N, K, err)      # NaN fails too
print("all variants correct", flush=True)
rows = []
for M, N, K in ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024),
                (16384, 1024, 4096)):
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    fl = 2 * M * N * K / 1e9
    tf = {n: fl / bench(lambda n=n: VARIANTS[n](a, b, c)) for n in only}
    rows.append((f"{M}x{N}x{K}", tf))
    print(rows[-1], flush=True)
print("| shape | " + " | ".join(only) + " |")
for shape, tf in rows:
    cb = tf.get("cuBLAS", 1.0)
    print(f"| {shape} | " + " | ".join(f"{tf[n]:.0f} ({tf[n] / cb:.2f})" for n in only) + " |")

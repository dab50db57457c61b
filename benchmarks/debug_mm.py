import sys

import torch

sys.path.insert(0, "examples")
import matmul  # noqa: E402

M, N, K = [int(x) for x in sys.argv[1:4]] if len(sys.argv) > 3 else (128, 256, 64)
a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
c = matmul.matmul(a, b, STAGES=2)
torch.cuda.synchronize()
ref = a.double() @ b.double()
print("err", ((c.double() - ref).norm() / ref.norm()).item())
print(c[:2, :8])
print(ref[:2, :8])

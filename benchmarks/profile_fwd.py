"""One launch each of kitjit's attention forward (its default and TURNS) and FA4's, for
Nsight Compute (`ncu ... python benchmarks/profile_fwd.py`): B4 H32 S4096 D128, bf16,
non-causal. The kernels are compiled (and FA4's loaded from its disk cache) before the
profiled launches, which run between cudaProfilerStart/Stop."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import peers  # noqa: E402
import torch  # noqa: E402

from kitjit.nn.attention import attention  # noqa: E402

D = int(sys.argv[1]) if len(sys.argv) > 1 else 128
q, k, v = (torch.randn(4, 32, 4096, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
cfgs = [{}, dict(BM=128, BN=128, STAGES=3, ws=True, TURNS=True, SPLIT=True)]
for cfg in cfgs:
    attention(q, k, v, False, **cfg)
fa4 = peers.fa4_forward(q, k, v, False)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for cfg in cfgs:
    attention(q, k, v, False, **cfg)
if fa4 is not None:
    fa4()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()

"""Try attention configs for head dim 64 (the cases closest to the 1.4x-flash bar)."""
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, "examples")
import attention as at  # noqa: E402

from kitjit.testing import bench  # noqa: E402

F = torch.nn.functional.scaled_dot_product_attention
CONFIGS = [dict(BM=64, BN=128, STAGES=2, num_warps=4), dict(BM=64, BN=128, STAGES=3, num_warps=4),
           dict(BM=64, BN=256, STAGES=2, num_warps=4), dict(BM=128, BN=128, STAGES=3, num_warps=8),
           dict(BM=128, BN=128, STAGES=2, num_warps=8, ws=True),
           dict(BM=128, BN=128, STAGES=3, num_warps=8, ws=True),
           dict(BM=128, BN=64, STAGES=4, num_warps=8, ws=True)]
for causal in (False, True):
    B, H, S, D = 4, 32, 4096, 64
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    flop = 4 * B * H * S * S * D / (2 if causal else 1) / 1e9
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        fl = flop / bench(lambda: F(q, k, v, is_causal=causal))
    ref, _ = at.reference(q[:1, :2], k[:1, :2], v[:1, :2], causal)
    row = []
    for cfg in CONFIGS:
        try:
            o, _ = at.attention(q, k, v, causal, **cfg)
            err = ((o[:1, :2].double() - ref).norm() / ref.norm()).item()
            t = flop / bench(lambda cfg=cfg: at.attention(q, k, v, causal, **cfg))
            row.append(f"{t / fl:.2f}{'!' if err > 1e-2 else ''}")
        except Exception as e:
            row.append(type(e).__name__)
    print(f"D64 causal={causal} flash {fl:.0f}: " + "  ".join(row), flush=True)

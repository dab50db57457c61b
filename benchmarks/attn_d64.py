"""Try attention configs for head dim 64 (the cases nearest the 1.4x-flash bar), each timed
at steady state, in interleaved rounds with the flash backend."""
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, "examples")
sys.path.insert(0, "benchmarks")
import attention as at  # noqa: E402
from bench import interleaved  # noqa: E402

F = torch.nn.functional.scaled_dot_product_attention
CONFIGS = [dict(BM=64, BN=128, STAGES=2, num_warps=4), dict(BM=64, BN=64, STAGES=2, num_warps=4),
           dict(BM=128, BN=128, STAGES=2), dict(BM=128, BN=64, STAGES=3, ws=True, OVERLAP=True)]
for causal in (False, True):
    B, H, S, D = 4, 32, 4096, 64
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    flop = 4 * B * H * S * S * D / (2 if causal else 1) / 1e9
    ref, _ = at.reference(q[:1, :2], k[:1, :2], v[:1, :2], causal)
    runs = {}
    for i, cfg in enumerate(CONFIGS):
        try:
            o, _ = at.attention(q, k, v, causal, **cfg)
            err = ((o[:1, :2].double() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, err
            runs[i] = lambda cfg=cfg: at.attention(q, k, v, causal, **cfg)
        except Exception as e:
            print(cfg, type(e).__name__, str(e)[:200])

    def flash():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F(q, k, v, is_causal=causal)
    runs["flash"] = flash
    ms = interleaved(runs)
    fl = flop / ms.pop("flash")
    print(f"D64 causal={causal} flash {fl:.0f}: " + "  ".join(
        f"[{i}] {flop / t:.0f} ({flop / t / fl:.2f})" for i, t in ms.items()), flush=True)

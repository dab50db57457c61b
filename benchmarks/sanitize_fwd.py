"""The warp-specialized attention forward variants at small, ragged sizes, for
compute-sanitizer (`compute-sanitizer --tool racecheck|synccheck python
benchmarks/sanitize_fwd.py`): each checked against a float64 reference."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

from kitjit.nn.attention import attention  # noqa: E402

CFGS = [dict(BM=128, BN=128, STAGES=3, ws=True, OVERLAP=True),
        dict(BM=128, BN=128, STAGES=3, ws=True, TURNS=True),
        dict(BM=128, BN=128, STAGES=2, ws=True, TURNS=True, SPLIT=True),
        dict(BM=128, BN=64, STAGES=2, ws=True, OVERLAP=True, SPLIT=True),
        dict(BM=192, BN=128, STAGES=2, ws=True, TURNS=True)]
torch.manual_seed(0)
for cfg in CFGS:
    for causal in (False, True):
        q = torch.randn(1, 2, 200, 64, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(1, 1, 333, 64, device="cuda", dtype=torch.bfloat16)
                for _ in range(2))
        o, _ = attention(q, k, v, causal, **cfg)
        s = (q.double() @ k.double().transpose(-1, -2)) / 8.0
        if causal:
            s = s.masked_fill(torch.ones(200, 333, dtype=torch.bool, device="cuda").triu(1),
                              float("-inf"))
        r = torch.softmax(s, -1) @ v.double()
        err = float((o.double() - r).norm() / r.norm())
        print(f"{cfg} causal={causal}: rel err {err:.2e}", flush=True)
        assert err < 1e-2

"""The Hopper kernels in the CPU interpreter at tiny ragged shapes against float64, outputs
poisoned: attention (plain, wrapper, warp-specialized), matmul (split-K, TMA stores) and the
warp-specialized GEMMs; the split-K heuristic and the attention knobs that are refused."""

from __future__ import annotations

import pytest
import torch
from hopper_helpers import (
    CAUSAL,
    DTYPES,
    WS,
    assert_lse_close,
    assert_rows_close,
    attention_direct,
    attn_ex,
    is_poisoned,
    mm_ex,
    poison,
    qkv,
    randn,
)

__all__ = ["poison"]  # the fixture, imported for the tests here


# ============================================================================ interpreter
ATTN_CPU = [  # (B, H, S, D, GQA group)
    (B, H, S, D, g)
    for B, H, S, D in [(1, 2, 130, 64), (1, 1, 64, 64), (2, 2, 70, 64)]
    for g in (1, 2) if H % g == 0
] + [(1, 2, 70, 256, 2)]


@DTYPES
@CAUSAL
@pytest.mark.parametrize("B,H,S,D,g", ATTN_CPU,
                         ids=[f"B{b}H{h}S{s}D{d}g{g}" for b, h, s, d, g in ATTN_CPU])
def test_interp_attention(B, H, S, D, g, causal, dtype):
    q, k, v = qkv(B, H, S, D, g, dtype)
    o, lse = attention_direct(q, k, v, causal, BM=64, BN=64, STAGES=2, num_warps=4)
    ro, rl = attn_ex.reference(q, k, v, causal)
    assert o.dtype == dtype
    assert_rows_close(o, ro, 1e-2, "attention output")
    assert_lse_close(lse, rl)


@pytest.mark.parametrize("B,H,S,D,causal,g,cfg", [
    (1, 2, 130, 64, True, 2, {}),                        # the wrapper's D=64 default
    (1, 2, 100, 128, False, 1, {}),                      # ... and D=128 (BM=128, 8 warps)
    (2, 4, 70, 64, True, 4, dict(BM=64, BN=64, STAGES=3, num_warps=4)),
    (1, 1, 1, 64, False, 1, dict(BM=64, BN=64, STAGES=2, num_warps=4)),   # one row
], ids=["D64-default", "D128-default", "stages3-g4", "S1"])
def test_interp_attention_wrapper(B, H, S, D, causal, g, cfg, poison):
    q, k, v = qkv(B, H, S, D, g, torch.bfloat16, seed=5)
    o, lse = attn_ex.attention(q, k, v, causal, **cfg)
    assert is_poisoned(o, poison) and is_poisoned(lse, poison)
    ro, rl = attn_ex.reference(q, k, v, causal)
    assert_rows_close(o, ro, 1e-2, "attention output")
    assert_lse_close(lse, rl)


@pytest.mark.parametrize("B,H,S,D,causal,g,cfg", [
    (1, 2, 130, 64, True, 2, dict(BM=64, BN=64, STAGES=2, num_warps=4)),   # 8 warps
    (2, 2, 70, 64, False, 1, dict(BM=64, BN=64, STAGES=3, num_warps=4)),
    (1, 2, 100, 128, True, 1, {}),                 # D=128 default: 12 warps, overlapped
    (2, 2, 200, 64, False, 2, dict(BM=128, BN=64, STAGES=3, OVERLAP=True)),
    (1, 2, 130, 64, True, 1, dict(BM=64, BN=64, STAGES=3, OVERLAP=True)),
    (1, 1, 40, 64, True, 1, dict(BM=64, BN=64, STAGES=3, OVERLAP=True)),  # one block
    (1, 2, 100, 128, False, 1, dict(BM=128, BN=64, STAGES=2)),            # plain consumer
    # issue 20's variants (benchmarks/fwd_variants.py): P converted where written, the
    # causal mask as one bound; ragged S (2 row tiles, a masked last block)
    (1, 2, 200, 128, True, 1, dict(BM=128, BN=128, STAGES=3, TURNS=True, PACKED=True,
                                   BOUND=True)),
    (1, 2, 200, 64, False, 2, dict(BM=192, BN=128, STAGES=3, num_warps=12, TURNS=True,
                                   PACKED=True)),
], ids=["causal-g2", "full-stages3", "D128-default", "overlap-g2", "overlap-causal",
        "overlap-one-block", "D128-plain", "D128-packed-bound", "D64-192-packed"])
def test_interp_attention_ws(B, H, S, D, causal, g, cfg, poison):
    q, k, v = qkv(B, H, S, D, g, torch.bfloat16, seed=6)
    o, lse = attn_ex.attention(q, k, v, causal, ws=True, **cfg)
    assert is_poisoned(o, poison) and is_poisoned(lse, poison)
    ro, rl = attn_ex.reference(q, k, v, causal)
    assert_rows_close(o, ro, 1e-2, "attention (ws) output")
    assert_lse_close(lse, rl)


def test_interp_sdpa_scale(poison):
    q, k, v = qkv(1, 2, 96, 64, 1, torch.bfloat16, seed=9)
    out = attn_ex.sdpa(q, k, v, is_causal=True, scale=0.3)
    ro, _ = attn_ex.reference(q, k, v, True, scale=0.3)
    assert is_poisoned(out, poison)
    assert_rows_close(out, ro, 1e-2, "sdpa(scale=0.3)")


MM_CPU = [  # (M, N, K, config): N and K multiples of 8 (TMA rows of 16 bytes)
    (64, 64, 64, dict(BM=64, BN=64, BK=64, STAGES=2, num_warps=4)),
    (200, 136, 72, dict(BM=64, BN=64, BK=32, STAGES=3, num_warps=4)),   # 12 tiles / 4 SMs
    (130, 200, 264, dict(BM=128, BN=128, BK=64, STAGES=3, num_warps=8)),
    (190, 72, 200, dict(BM=64, BN=64, BK=64, STAGES=4, num_warps=4)),
    (70, 64, 40, dict(BM=64, BN=64, BK=64, STAGES=3, num_warps=4)),     # 1 k-step, 3 stages
    # split-K: fp32 partials per split, added by the tile's last split; the last runs past K
    # (7 k-steps in 3 parts of 3: TMA reads zeros), the ring runs across splits
    (100, 72, 200, dict(BM=64, BN=64, BK=32, STAGES=3, num_warps=4, SPLIT_K=3)),
    (16, 136, 264, dict(BM=64, BN=64, BK=32, STAGES=4, num_warps=4, SPLIT_K=4)),
    (130, 64, 512, dict(BM=128, BN=64, BK=64, STAGES=3, num_warps=8, SPLIT_K=2)),
    (130, 72, 512, dict(BM=128, BN=64, BK=64, STAGES=3, num_warps=8, SPLIT_K=2, SLABS=True)),
    # 40 split tiles on 4 programs: each program counts in on several tiles' counters
    (100, 200, 600, dict(BM=64, BN=64, BK=32, STAGES=3, num_warps=4, SPLIT_K=5)),
    # the TMA-store epilogues: the whole tile, or two column halves through one staging
    # tile; the TMA clips rows past M and columns past N (a half may lie wholly past N)
    (130, 200, 136, dict(BM=128, BN=64, BK=64, STAGES=3, num_warps=8, TMA_STORE=1)),
    (200, 136, 264, dict(BM=64, BN=128, BK=64, STAGES=3, num_warps=4, TMA_STORE=2)),
    (70, 200, 72, dict(BM=64, BN=256, BK=32, STAGES=4, num_warps=4, TMA_STORE=2)),
]


@DTYPES
@pytest.mark.parametrize("M,N,K,cfg", MM_CPU, ids=[
    f"{m}x{n}x{k}" + (f"-split{c['SPLIT_K']}" if "SPLIT_K" in c else "") +
    ("-slabs" if c.get("SLABS") else "") +
    (f"-tma{c['TMA_STORE']}" if "TMA_STORE" in c else "") for m, n, k, c in MM_CPU])
def test_interp_matmul(M, N, K, cfg, dtype, poison):
    a, b = randn(M, K, dtype=dtype, seed=1), randn(K, N, dtype=dtype, seed=2)
    c = mm_ex.matmul(a, b, **cfg)
    assert is_poisoned(c, poison) and c.dtype == dtype
    assert_rows_close(c, a.double() @ b.double(), 1e-2, f"matmul {M}x{N}x{K}")


def test_interp_matmul_empty_k(poison):
    """K = 0: zeros (the kernel itself assumes every tile has k-steps)."""
    c = mm_ex.matmul(randn(70, 0, seed=1), randn(0, 72, seed=2))
    assert c.shape == (70, 72) and not c.any()


def test_interp_matmul_splitk_counters_reset(poison):
    """The heuristic's split-K (4 CPU "SMs": 2 tiles, split 2, summed in the kernel): the
    last split of a tile resets its counter, so a second launch adds up right too."""
    assert mm_ex.splitk_for(16, 256, 2048, 4) == 2
    a, b = randn(16, 2048, seed=1), randn(2048, 256, seed=2)
    for _ in range(2):
        c = mm_ex.matmul(a, b)
        assert is_poisoned(c, poison)
        assert_rows_close(c, a.double() @ b.double(), 1e-2, "split-K 16x256x1024")
    assert not mm_ex.tile_counters(a.device, 2).any()


MM_OVERLAP_CPU = [  # (M, N, K, dtype, trans_b, config): OVERLAP stores each tile's C under
    # the next tile's k-step 0 (4 CPU "SMs": the grid is min(tiles, 4) programs)
    (200, 136, 200, torch.bfloat16, False, dict(BK=32, STAGES=3, TMA_STORE=2)),  # 12 tiles
    (130, 200, 72, torch.float16, True, dict(BK=32, STAGES=4, TMA_STORE=1)),     # 12, B^T
    (190, 72, 40, torch.bfloat16, True, dict(BK=64, STAGES=4)),   # K < the ring, direct
    (70, 64, 136, torch.float16, False, dict(BK=64, STAGES=3, TMA_STORE=2)),     # 2 tiles:
    # one per program
]


@pytest.mark.parametrize("M,N,K,dtype,trans_b,cfg", MM_OVERLAP_CPU, ids=[
    f"{m}x{n}x{k}-{str(d)[6:]}" + ("-bt" if t else "") + f"-tma{c.get('TMA_STORE', 0)}"
    for m, n, k, d, t, c in MM_OVERLAP_CPU])
def test_interp_matmul_overlap(M, N, K, dtype, trans_b, cfg, poison):
    """OVERLAP (ragged M/N/K, several tiles per program and one, B [K, N] and [N, K]): right
    against float64 and bit-equal to the same config without it (same sums, same order)."""
    a, b = randn(M, K, dtype=dtype, seed=1), randn(K, N, dtype=dtype, seed=2)
    bb = b.t().contiguous() if trans_b else b
    cfg = dict(cfg, BM=64, BN=64, num_warps=4)
    c = mm_ex.matmul(a, bb, trans_b=trans_b, OVERLAP=True, **cfg)
    assert is_poisoned(c, poison) and c.dtype == dtype
    assert_rows_close(c, a.double() @ b.double(), 1e-2, f"matmul overlap {M}x{N}x{K}")
    assert torch.equal(c, mm_ex.matmul(a, bb, trans_b=trans_b, **cfg))


def test_interp_matmul_overlap_refused():
    a, b = randn(64, 256), randn(256, 64)
    with pytest.raises(ValueError, match="OVERLAP is not supported yet with split-K"):
        mm_ex.matmul(a, b, BM=64, BN=64, BK=64, STAGES=3, num_warps=4, SPLIT_K=2,
                     OVERLAP=True)


# fewer k-steps than STAGES - 1 and more tiles than programs: the ring runs across several
# tiles (this once hung: the refill started the next tile at k-step STAGES - 1 - n_k)
@pytest.mark.parametrize("K,STAGES", [(64, 3), (128, 4)])
def test_interp_matmul_few_k_steps_many_tiles(K, STAGES):
    a, b = randn(128, K, seed=1), randn(K, 192, seed=2)   # 6 tiles on 4 programs
    c = mm_ex.matmul(a, b, BM=64, BN=64, BK=64, STAGES=STAGES, num_warps=4)
    assert_rows_close(c, a.double() @ b.double(), 1e-2, f"matmul 128x192x{K}")


def test_interp_matmul_autotuned(poison):
    a, b = randn(100, 136, seed=3), randn(136, 264, seed=4)
    c = mm_ex.matmul(a, b)
    assert is_poisoned(c, poison)
    assert_rows_close(c, a.double() @ b.double(), 1e-2, "matmul (autotuned)")


WS_CPU = [  # (helper, M, N, K, config)
    ("ws", 300, 264, 200, {}),                      # the helpers' own tile shapes
    ("wsp", 300, 264, 200, {}),
    ("pp", 300, 264, 200, {}),
    ("ws", 200, 136, 200, dict(BM=128, BN=64, BK=32, STAGES=2)),    # 7 k-steps, 2 stages
    ("wsp", 200, 136, 200, dict(BM=128, BN=64, BK=32, STAGES=2)),   # 6 tiles on 4 programs
    ("pp", 200, 136, 104, dict(BM=64, BN=64, BK=32, STAGES=4)),     # 12 tiles, turns
]


@pytest.mark.parametrize("helper,M,N,K,cfg", WS_CPU,
                         ids=[f"{h}-{m}x{n}x{k}-{'own' if not c else 'small'}"
                              for h, m, n, k, c in WS_CPU])
def test_interp_warp_specialized(helper, M, N, K, cfg, poison):
    a, b = randn(M, K, seed=6), randn(K, N, seed=7)
    c = getattr(WS, helper)(a, b, **cfg)
    assert is_poisoned(c, poison)
    assert_rows_close(c, a.double() @ b.double(), 1e-2, f"{helper} {M}x{N}x{K}")


def test_interp_wsp_fp16(poison):
    a, b = randn(136, 72, dtype=torch.float16, seed=8), randn(72, 200, dtype=torch.float16)
    c = WS.wsp(a, b, BM=128, BN=64, BK=32, STAGES=2)
    assert is_poisoned(c, poison) and c.dtype == torch.float16
    assert_rows_close(c, a.double() @ b.double(), 1e-2, "wsp fp16")



def test_splitk_heuristic():
    assert mm_ex.splitk_for(16, 4096, 4096, 132) == 4       # 32 tiles -> 128 programs
    assert mm_ex.splitk_for(128, 4096, 4096, 132) == 4
    assert mm_ex.splitk_for(128, 4096, 1024, 132) == 1      # parts keep >= 16 k-steps
    assert mm_ex.splitk_for(4096, 4096, 512, 132) == 1
    assert mm_ex.splitk_for(512, 14336, 4096, 132) == 1


@pytest.mark.parametrize("config", [
    dict(PACKED=True), dict(ws=True, PACKED=True), dict(ws=True, BOUND=True),
    dict(BM=128, BN=128, STAGES=3, num_warps=8, ws=True, PACKED=True),
    dict(BM=64, BN=128, TURNS=True)])
def test_attention_config_that_would_be_ignored_is_refused(config, monkeypatch):
    """A knob the chosen kernel does not read is an error, never silently dropped: PACKED
    and BOUND act on the overlapped consumers only (the plain warp-specialized consumer and
    the non-ws kernel would ignore them)."""
    from kitjit.nn.attention import attention

    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    q = torch.randn(1, 1, 64, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="PACKED|TURNS|ws=True"):
        attention(q, q, q, **config)

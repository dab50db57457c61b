"""The Hopper kernels on the GPU (`-m gpu`) at real sizes against float64, outputs poisoned:
attention and its configs, the matmul example's configs, split-K, TMA stores, and the
warp-specialized GEMMs."""

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

from kitjit.testing import rel_error

__all__ = ["poison"]  # the fixture, imported for the tests here


# ============================================================================ GPU
ATTN_GPU = [  # (B, H, S, D)
    (2, 4, 1000, 128),
    (1, 8, 2048, 64),
    (1, 4, 1000, 256),
]


def default_config(D):
    """What kitjit.nn.attention's wrapper picks (kept in step by test_gpu_attention_wrapper,
    which goes through the wrapper itself)."""
    return dict(BM=64, BN=64, STAGES=2, num_warps=4) if D > 128 else \
        dict(BM=128, BN=128, STAGES=2, num_warps=8) if D > 64 else \
        dict(BM=64, BN=128, STAGES=2, num_warps=4)


@pytest.mark.gpu
@DTYPES
@pytest.mark.parametrize("g", [1, 2], ids=["mha", "gqa2"])
@CAUSAL
@pytest.mark.parametrize("B,H,S,D", ATTN_GPU, ids=[f"B{b}H{h}S{s}D{d}" for b, h, s, d in ATTN_GPU])
def test_gpu_attention(B, H, S, D, causal, g, dtype):
    q, k, v = qkv(B, H, S, D, g, dtype, device="cuda")
    o, lse = attention_direct(q, k, v, causal, **default_config(D))
    torch.cuda.synchronize()
    ro, rl = attn_ex.reference(q, k, v, causal)
    assert_rows_close(o, ro, 1e-2, "attention output")
    assert_lse_close(lse, rl)


@pytest.mark.gpu
@pytest.mark.parametrize("D,cfg", [
    (128, dict(BM=128, BN=64, STAGES=2, num_warps=8)),
    (128, dict(BM=64, BN=128, STAGES=2, num_warps=4)),
    (128, dict(BM=128, BN=128, STAGES=3, num_warps=8)),
    (64, dict(BM=128, BN=128, STAGES=2, num_warps=8)),
    (64, dict(BM=64, BN=64, STAGES=3, num_warps=4)),
], ids=["D128-BN64", "D128-BM64", "D128-stages3", "D64-BM128", "D64-BN64-stages3"])
@CAUSAL
def test_gpu_attention_configs(D, cfg, causal):
    q, k, v = qkv(2, 4, 1000, D, 2, torch.bfloat16, device="cuda", seed=3)
    o, lse = attention_direct(q, k, v, causal, **cfg)
    torch.cuda.synchronize()
    ro, rl = attn_ex.reference(q, k, v, causal)
    assert_rows_close(o, ro, 1e-2, f"attention {cfg}")
    assert_lse_close(lse, rl)


@pytest.mark.gpu
@pytest.mark.parametrize("B,H,S,D,causal,g", [
    (2, 4, 1000, 128, True, 2), (1, 8, 2048, 64, False, 1), (3, 2, 257, 128, False, 1),
    (1, 4, 1, 64, True, 4), (1, 4, 777, 256, True, 2), (2, 2, 300, 256, False, 1),
])
def test_gpu_attention_wrapper(B, H, S, D, causal, g, poison):
    q, k, v = qkv(B, H, S, D, g, torch.bfloat16, device="cuda", seed=4)
    o, lse = attn_ex.attention(q, k, v, causal)
    torch.cuda.synchronize()
    assert is_poisoned(o, poison) and is_poisoned(lse, poison)
    ro, rl = attn_ex.reference(q, k, v, causal)
    assert_rows_close(o, ro, 1e-2, "attention output")
    assert_lse_close(lse, rl)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1), is_causal=causal)
    assert rel_error(attn_ex.sdpa(q, k, v, is_causal=causal, enable_gqa=g > 1), ref) < 1e-2


@pytest.mark.gpu
@CAUSAL
@pytest.mark.parametrize("B,H,S,D,g", [(2, 4, 1000, 128, 2), (1, 8, 2048, 64, 1)],
                         ids=["B2H4S1000D128g2", "B1H8S2048D64"])
def test_gpu_attention_ws(B, H, S, D, g, causal, poison):
    q, k, v = qkv(B, H, S, D, g, torch.bfloat16, device="cuda", seed=7)
    o, lse = attn_ex.attention(q, k, v, causal, ws=True)
    torch.cuda.synchronize()
    assert is_poisoned(o, poison) and is_poisoned(lse, poison)
    ro, rl = attn_ex.reference(q, k, v, causal)
    assert_rows_close(o, ro, 1e-2, "attention (ws) output")
    assert_lse_close(lse, rl)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [None] + [dict(c.kwargs, num_warps=c.num_warps)
                                          for c in mm_ex.CONFIGS],
                         ids=["autotuned"] + [
                             "BM{BM}BN{BN}BK{BK}S{STAGES}".format(**c.kwargs)
                             for c in mm_ex.CONFIGS])
@DTYPES
def test_gpu_matmul_ragged(cfg, dtype, poison):
    """1000x1016x1032: no side a multiple of the tile; N and K rows of 16-byte multiples (a
    TMA descriptor needs them; 1000x1000x1000 would be refused)."""
    M, N, K = 1000, 1016, 1032
    a = randn(M, K, dtype=dtype, seed=1, device="cuda")
    b = randn(K, N, dtype=dtype, seed=2, device="cuda")
    if cfg is None:
        mm_ex.matmul(a, b)             # tune first: only the checked call is poisoned
        poison.clear()
    c = mm_ex.matmul(a, b, **(cfg or {}))
    torch.cuda.synchronize()
    assert is_poisoned(c, poison)
    assert_rows_close(c, a.double() @ b.double(), 1e-2, f"matmul {M}x{N}x{K} {cfg}")


def check_gpu_matmul(M, N, K, cfg, poison, what):
    """examples/matmul.py's wrapper on fresh inputs against float64, output poisoned."""
    a = randn(M, K, seed=M + K, device="cuda")
    b = randn(K, N, seed=N, device="cuda")
    c = mm_ex.matmul(a, b, **cfg)
    torch.cuda.synchronize()
    assert is_poisoned(c, poison)
    assert_rows_close(c, a.double() @ b.double(), 1e-2, f"{what} {M}x{N}x{K} {cfg}")
    return a, b


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [dict(c.kwargs, num_warps=c.num_warps) for c in mm_ex.CONFIGS],
                         ids=["BM{BM}BN{BN}BK{BK}S{STAGES}".format(**c.kwargs)
                              for c in mm_ex.CONFIGS])
@pytest.mark.parametrize("M,N,K", [(1000, 1040, 1032), (72, 4112, 520)])
def test_gpu_matmul_ragged_wide_stores(cfg, M, N, K, poison):
    """N a multiple of 16 but not of the tile: the epilogue takes the shuffled 16-byte store
    path (see test_sass_matmul_epilogue_16_byte_stores), with the column mask cutting the
    last tile 16 columns in, and rows cut by M."""
    a, b = check_gpu_matmul(M, N, K, cfg, poison, "wide stores")
    ct = mm_ex.matmul(a, b.t().contiguous(), trans_b=True, **cfg)
    torch.cuda.synchronize()
    assert_rows_close(ct, a.double() @ b.double(), 1e-2, f"matmul B^T {M}x{N}x{K} {cfg}")




@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,cfg", [
    (16, 4096, 4096, {}), (128, 4096, 4096, {}), (1, 1040, 2048, {}),      # the heuristic
    (100, 1040, 3000, dict(BM=64, BN=128, BK=64, STAGES=4, num_warps=4, SPLIT_K=4)),
    (300, 264, 1000, dict(BM=128, BN=128, BK=64, STAGES=3, num_warps=8, SPLIT_K=3)),
])
def test_gpu_matmul_splitk(M, N, K, cfg, poison):
    check_gpu_matmul(M, N, K, cfg, poison, "split-K")


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K", [(16, 6144, 4096), (128, 4096, 8192), (3, 1000, 4096)])
def test_gpu_matmul_splitk_trans_b(M, N, K, poison):
    """The heuristic's splits (summed in the kernel for M <= 64, through slabs above) on
    weights given [N, K], five launches in a row on the same tile counters: each must find
    them reset."""
    a = randn(M, K, seed=M, device="cuda")
    w = randn(N, K, seed=N, device="cuda")
    ref = a.double() @ w.double().T
    for i in range(5):
        c = mm_ex.matmul(a, w, trans_b=True)
        torch.cuda.synchronize()
        assert is_poisoned(c, poison)
        assert_rows_close(c, ref, 1e-2, f"split-K {M}x{N}x{K} launch {i}")
    assert not mm_ex.tile_counters(a.device, 1024).any()


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [dict(BM=128, BN=256, BK=64, STAGES=3, TMA_STORE=1),
                                 dict(BM=128, BN=256, BK=64, STAGES=4, TMA_STORE=2),
                                 dict(BM=64, BN=256, BK=64, STAGES=4, TMA_STORE=2)],
                         ids=["whole-s3", "halves-s4", "halves-64x256"])
@pytest.mark.parametrize("M,N,K", [(1000, 1040, 1032), (72, 4112, 520), (520, 136, 264),
                                   (2000, 4104, 1000)])
def test_gpu_matmul_tma_store(cfg, M, N, K, poison):
    """The TMA-store epilogues on ragged shapes (the TMA clips rows and columns; with
    N = 136 the second half of the last tile lies wholly past N), B and B^T; more tiles
    than SMs."""
    cfg = dict(cfg, num_warps=8 if cfg["BM"] == 128 else 4)
    a, b = check_gpu_matmul(M, N, K, cfg, poison, "TMA store")
    ct = mm_ex.matmul(a, b.t().contiguous(), trans_b=True, **cfg)
    torch.cuda.synchronize()
    assert_rows_close(ct, a.double() @ b.double(), 1e-2, f"TMA store B^T {M}x{N}x{K} {cfg}")


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [dict(BM=128, BN=256, STAGES=4, TMA_STORE=2),
                                 dict(BM=128, BN=256, STAGES=3, TMA_STORE=1),
                                 dict(BM=128, BN=256, STAGES=4),
                                 dict(BM=256, BN=128, STAGES=4, TMA_STORE=2)],
                         ids=["halves", "whole-s3", "direct", "256x128-halves"])
@pytest.mark.parametrize("M,N,K", [(1000, 1040, 1032), (4096, 4096, 1024), (2000, 4104, 128),
                                   (520, 136, 264)])
@DTYPES
def test_gpu_matmul_overlap(cfg, M, N, K, dtype, poison):
    """OVERLAP (each tile's C stored under the next tile's k-step 0) on ragged edges, several
    tiles per program (4096x4096x1024: 256 tiles), K shorter than the ring (128: 2 k-steps)
    and one tile per program (520x136), B [K, N] and [N, K]: right against float64 and
    bit-equal to the same config without it (the same sums in the same order)."""
    cfg = dict(cfg, BK=64, num_warps=8)
    a = randn(M, K, dtype=dtype, seed=M + K, device="cuda")
    b = randn(K, N, dtype=dtype, seed=N, device="cuda")
    ref = a.double() @ b.double()
    for bb, tb in ((b, False), (b.t().contiguous(), True)):
        c = mm_ex.matmul(a, bb, trans_b=tb, OVERLAP=True, **cfg)
        torch.cuda.synchronize()
        assert is_poisoned(c, poison)
        assert_rows_close(c, ref, 1e-2, f"overlap {M}x{N}x{K} {cfg} trans_b={tb}")
        d = mm_ex.matmul(a, bb, trans_b=tb, **cfg)
        assert torch.equal(c, d), f"OVERLAP not bit-equal to the default ({cfg}, {tb})"


@pytest.mark.gpu
def test_gpu_matmul_4096_sampled(poison):
    n = 4096
    a = randn(n, n, seed=1, device="cuda")
    b = randn(n, n, seed=2, device="cuda")
    mm_ex.matmul(a, b)
    poison.clear()
    c = mm_ex.matmul(a, b)
    torch.cuda.synchronize()
    assert is_poisoned(c, poison)
    n_nan = int(torch.isnan(c).sum())
    assert n_nan == 0, f"{n_nan} elements of C unwritten"
    rows = torch.cat([torch.tensor([0, 127, 128, n - 1]),
                      torch.randperm(n, generator=torch.Generator().manual_seed(0))[:252]])
    rows = rows.to("cuda")
    ref = a[rows].double() @ b.double()
    assert_rows_close(c[rows], ref, 1e-2, "matmul 4096^3 (sampled rows)")


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K", [(2048, 2048, 1024), (300, 264, 200)])
@pytest.mark.parametrize("helper", ["ws", "wsp", "pp"])
def test_gpu_warp_specialized(helper, M, N, K, poison):
    a = randn(M, K, seed=1, device="cuda")
    b = randn(K, N, seed=2, device="cuda")
    c = getattr(WS, helper)(a, b)
    torch.cuda.synchronize()
    assert is_poisoned(c, poison)
    assert_rows_close(c, a.double() @ b.double(), 1e-2, f"{helper} {M}x{N}x{K}")


@pytest.mark.gpu
@pytest.mark.parametrize("helper", ["wsp", "pp"])
def test_gpu_warp_specialized_fp16_repeat(helper, poison):
    """fp16, and the same launch three times (a barrier phase left wrong by one run would
    hang or corrupt the next: shared memory is not cleared between launches)."""
    a = randn(2048, 1024, dtype=torch.float16, seed=3, device="cuda")
    b = randn(1024, 2048, dtype=torch.float16, seed=4, device="cuda")
    ref = a.double() @ b.double()
    for i in range(3):
        c = getattr(WS, helper)(a, b)
        torch.cuda.synchronize()
        assert is_poisoned(c, poison)
        assert_rows_close(c, ref, 1e-2, f"{helper} fp16 run {i}")


"""The swapped skinny GEMM (examples/matmul_skinny.py, `matmul`'s path at M <= 64):
interpreter runs at ragged M, N, K (K past the last whole k-step, a short last part, parts
wholly past K), both weight layouts, outputs poisoned with NaN, float64 references; the
split choice; sm_90a SASS (HGMMA with the tokens on N, UTMALDG, no spills); GPU runs
(`-m gpu`), two calls in a row giving the same bits (the counters reset)."""

from __future__ import annotations

import importlib
import itertools
import re

import pytest
import torch
from hopper_helpers import assert_rows_close, is_poisoned, mm_ex, needs_sass, poison, randn

sk = importlib.import_module("matmul_skinny")   # examples/, on the path via hopper_helpers

__all__ = ["poison"]  # the fixture, imported for the tests here

CPU_CASES = [  # (M, N, K, trans_b, config)
    # N past the last column block, K's last k-step partly past K, two parts
    (5, 72, 200, True, dict(SPLIT=2)),
    # M = 1 (16 rows padded), weights [K, N] (the `.T` view as WGMMA's A), no split
    (1, 64, 128, False, {}),
    # MP 32; 4 parts of 2 k-steps over 6: the last part wholly past K (adds zeros)
    (20, 136, 328, True, dict(SPLIT=4, STAGES=2)),
    # MP 64, weights [K, N], ragged N, three parts, a ring deeper than a part's k-steps
    (40, 80, 192, False, dict(SPLIT=3, STAGES=4)),
    # BN 128: two warpgroups, 8 warps
    (16, 200, 256, True, dict(BN=128, SPLIT=2)),
    # MP 128 (M = 128's path), the parts added 32 rows at a time
    (100, 72, 392, True, dict(SPLIT=3, STAGES=3, RCH=32)),
]


def _run(M, N, K, trans_b, cfg, poison, device="cpu", fn=None):
    a = randn(M, K, seed=M, device=device)
    w = randn(N, K, seed=N, device=device)
    b = w if trans_b else w.t().contiguous()
    c = (fn or sk.matmul_skinny)(a, b, trans_b, **cfg)
    assert is_poisoned(c, poison) and c.shape == (M, N)
    assert_rows_close(c, a.double() @ w.double().t(), 1e-2, f"skinny {M}x{N}x{K} {cfg}")
    return c


@pytest.mark.parametrize("M,N,K,trans_b,cfg", CPU_CASES)
def test_skinny_interpreter(monkeypatch, poison, M, N, K, trans_b, cfg):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    _run(M, N, K, trans_b, cfg, poison)


def test_skinny_matmul_default_and_counters(monkeypatch, poison):
    """`matmul` takes the skinny kernel at M <= 64 (split 2 on 4 CPU "SMs"), twice in a
    row: the last part of each column block puts its counter back to 0."""
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    assert sk.skinny_config(16, 128, 1024, 4)["SPLIT"] == 2
    outs = [_run(16, 128, 1024, True, {}, poison, fn=mm_ex.matmul) for _ in range(2)]
    assert torch.equal(outs[0], outs[1])
    assert not mm_ex.tile_counters(torch.device("cpu"), 2).any()


def test_skinny_refuses_what_tma_cannot_read():
    with pytest.raises(ValueError, match="not supported yet"):
        sk.matmul_skinny(torch.ones(129, 64, dtype=torch.bfloat16),
                         torch.ones(64, 64, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="not supported yet"):   # 2-byte rows of K = 1
        sk.matmul_skinny(torch.ones(4, 1, dtype=torch.bfloat16),
                         torch.ones(64, 1, dtype=torch.bfloat16), trans_b=True)
    # `matmul` leaves such shapes (and fp32) to the main kernel
    assert not sk.supported(torch.ones(4, 8), torch.ones(8, 8), False)


def test_skinny_config_llm_shapes():
    """The split spreads programs x k-steps over 132 SMs in nearly whole waves: 8B qkv's
    96 column blocks split 4 (384 programs, 3 an SM), 70B gate-up's 896 not at all."""
    cfg = sk.skinny_config(16, 6144, 4096, 132)
    assert (cfg["MP"], cfg["BN"], cfg["SPLIT"], cfg["n_k"]) == (16, 64, 4, 16)
    assert sk.skinny_config(16, 57344, 8192, 132)["SPLIT"] == 1
    assert sk.skinny_config(1, 4096, 4096, 132)["SPLIT"] == 2
    for M, (N, K) in itertools.product((1, 16, 33, 64, 128), [(4096, 14336), (6144, 4096)]):
        c = sk.skinny_config(M, N, K, 132)    # the programs an SM runs at once fit, each
        stage = (c["MP"] + c["BN"]) * sk.BK * 2   # with >= 24 KB in flight
        co = min(3 if c["BN"] == 64 else 2, -(-(-(-N // c["BN"]) * c["SPLIT"]) // 132))
        assert co * (c["STAGES"] * stage + 4096) <= 227 * 1024
        assert (c["STAGES"] - 1) * stage >= 24576


@needs_sass
@pytest.mark.parametrize("MP,BN,STAGES,SPLIT,trans_b", [
    (16, 64, 7, 4, True), (64, 128, 4, 5, False), (32, 128, 6, 8, True), (16, 64, 10, 1, True),
    (128, 64, 2, 4, True), (128, 128, 3, 5, True)])
def test_skinny_sass(MP, BN, STAGES, SPLIT, trans_b):
    from kitjit.tools import disassemble, sass_opcodes

    ck = sk.skinny_kernel.compile(
        [("*bf16", 16)] * 3 + [("*fp32", 16), ("*i32", 16)] + [("i32", 1)] * 4,
        (MP, BN, 64, STAGES, SPLIT, trans_b, 0, 16), 4 * BN // 64, "sm_90a")
    text = disassemble(ck.asm["cubin"])
    ops = sass_opcodes(text)
    assert ck.metadata["spills"] == 0 and ck.metadata["registers"] <= 128   # 2-3 an SM
    # the partials: 16-byte stores, MP * BN * 4 bytes over 32 * 4 * BN / 64 threads
    assert re.findall(r"STG\.E\S*", text).count("STG.E.128") == (SPLIT > 1) * MP // 8
    assert set(re.findall(r"HGMMA\.\S+", text)) == {f"HGMMA.64x{MP}x16.F32.BF16"}
    assert text.count("HGMMA.") == 4                         # one k-step of 64
    assert "UTMALDG.2D" in ops
    assert ("ATOMG.E.ADD.STRONG.GPU" in ops) == (SPLIT > 1)  # the parts' counter


# ---------------------------------------------------------------- GPU
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("M,N,K,trans_b", [
    (16, 6144, 4096, True), (1, 4096, 14336, True), (64, 28672, 4096, True),
    (33, 1000, 2056, True), (7, 1040, 3000, False), (48, 4104, 520, False),
    (128, 6144, 4096, True), (100, 1000, 2056, False)])
def test_skinny_gpu(poison, M, N, K, trans_b):
    """The default config, then the same twice more through `matmul`: identical bits (the
    counters reset; the parts are added in a fixed order)."""
    c = _run(M, N, K, trans_b, {}, poison, device="cuda")
    for _ in range(2):
        c2 = _run(M, N, K, trans_b, {}, poison, device="cuda", fn=mm_ex.matmul)
        torch.cuda.synchronize()
        assert torch.equal(c, c2)
    assert not mm_ex.tile_counters(c.device, 1024).any()


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("cfg", [dict(SPLIT=16), dict(SPLIT=3, STAGES=2), dict(BN=128, SPLIT=5),
                                 dict(SPLIT=1, STAGES=8)])
def test_skinny_gpu_configs(poison, cfg):
    for trans_b in (True, False):
        _run(24, 4096, 4104, trans_b, cfg, poison, device="cuda")   # a short last part


def _nan_inf(device):
    """A NaN and an inf in x reach the output as in the reference (split 2 on 4 CPU SMs)."""
    a = randn(16, 1024, device=device)
    w = randn(512, 1024, seed=1, device=device)
    a[3, 5], a[7, 900] = float("nan"), float("inf")
    c = sk.matmul_skinny(a, w, trans_b=True, SPLIT=2)
    ref = a.double() @ w.double().t()
    assert torch.equal(c.isnan(), ref.isnan()) and torch.equal(c.isinf(), ref.isinf())
    assert c.isnan().any() and c.isinf().any()


def test_skinny_nan_inf_interpreter(monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    _nan_inf("cpu")


@pytest.mark.gpu
@gpu
def test_skinny_gpu_nan_inf():
    _nan_inf("cuda")

"""examples/matmul_ampere.py's persistent kernel (`persistent=True`, opt-in;
benchmarks/ampere.py times it against the default kernel): the interpreter at ragged sizes
(outputs poisoned with NaN, float64 references; the CPU grid has 3 programs, so each walks
several tiles and the ring crosses tile boundaries), and its SASS for sm_80 and sm_89
(ptxas) and for sm_90 from the same compute_80 PTX (what the driver does when an H100 runs
`arch="sm_80"`): HMMA, LDGSTS, LDSM, no barrier in the loop, no spills. Also the example's
default kernel at its config for A100 / Ada, for sm_80 and sm_89.
"""

from __future__ import annotations

import pathlib

import pytest
import torch
from kitjit.backend.compiler import _ptxas

from kitjit.testing import has_gpu
from kitjit.tools import disassemble, find_tool, sass_opcodes

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "matmul_ampere.py"
SIG = ["*bf16:16"] * 3 + ["i32:16"] * 3


def _check(got, want, tol):
    assert not torch.isnan(got).any(), "NaN in the output"
    err = ((got.double() - want).norm() / want.norm()).item()
    assert err < tol, f"relative error {err:.2e}"


def _persistent(a, b, **kw):
    from examples.matmul_ampere import matmul

    return matmul(a, b, persistent=True, **kw)


# (M, N, K, STAGES): 3x3 tiles over 3 programs, K 7 k-steps (the ring crosses tiles);
# K of one k-step under a prefetch of 3 (the "K shorter than the prefetch" refills)
@pytest.mark.parametrize("M,N,K,STAGES", [(150, 136, 200, 4), (130, 72, 24, 6)])
def test_persistent_in_interpreter(M, N, K, STAGES, monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    gen = torch.Generator().manual_seed(M + K)
    a = torch.randn(M, K, generator=gen).to(torch.bfloat16)
    b = torch.randn(K, N, generator=gen).to(torch.bfloat16)
    c = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    _persistent(a, b, arch="sm_80", c=c, BM=64, BN=64, BK=32, STAGES=STAGES, GROUP=2,
                  num_warps=4)
    _check(c, a.double() @ b.double(), 1e-2)


# ------------------------------------------------------------------ SASS
needs_sass = pytest.mark.skipif(
    find_tool("cuobjdump") is None or find_tool("ptxas") is None,
    reason="cuobjdump/nvdisasm/ptxas not found")

# rings that fit each part's shared memory per block: sm_90 (227 KB; the H100 running the
# sm_80 path) 256x128x64 s4 w8, 192 KB; A100 (163 KB) 128x256x32 s6 w8, 144 KB; Ada (99 KB)
# 128x128x32 s6 w4, 96 KB
CASES = [("sm_80", dict(BM=256, BN=128, BK=64, STAGES=4), 8),
         ("sm_80", dict(BM=128, BN=256, BK=32, STAGES=6), 8),
         ("sm_89", dict(BM=128, BN=128, BK=32, STAGES=6), 4)]


def _sass(arch, cfg, nw):
    from tests.test_sass import compile_example

    return compile_example(EXAMPLE, "matmul_ampere_persistent_kernel", SIG, dict(cfg, GROUP=8),
                           nw, arch)


def _level2(c, bars=1):
    assert c.has("HMMA.16816.F32.BF16") and c.has("LDGSTS") and c.has("LDSM.16.M88.4"), \
        c.summary()
    assert c.has("LDSM.16.MT88.4"), "B [K, N] loads with ldmatrix.trans"
    assert not c.has("HGMMA") and not c.has("UTMALDG")
    # bar.sync: the barriers' init (and the example's prologue loads); none in the loop
    assert c.count("BAR.SYNC") <= bars, c.summary()
    assert not c.has("STL") and not c.has("LDL"), "spills"


@needs_sass
@pytest.mark.parametrize("arch,cfg,nw", CASES, ids=[f"{a}-{c['BM']}x{c['BN']}x{c['BK']}"
                                                    for a, c, _ in CASES])
def test_persistent_sass(arch, cfg, nw):
    c = _sass(arch, cfg, nw)
    _level2(c)
    assert c.ck.metadata["spills"] == 0, c.ck.metadata


@needs_sass
def test_persistent_sass_for_sm90_from_compute80_ptx():
    """The H100 runs the compute_80 PTX assembled for sm_90: same instructions, no spills."""
    from tests.test_sass import Compiled

    c80 = _sass(*CASES[0])
    ptx = c80.ck.asm["ptx"]
    assert ".target sm_80" in ptx
    cubin, res = _ptxas(ptx, "sm_90", find_tool("ptxas"))
    c = Compiled.__new__(Compiled)
    c.ck, c.sass = c80.ck, disassemble(cubin)
    c.ops = sass_opcodes(c.sass)
    _level2(c)
    assert res.spills == 0, res


@needs_sass
@pytest.mark.parametrize("arch", ["sm_80", "sm_89"])
def test_example_small_config_sass(arch):
    """examples/matmul_ampere.py's config for parts with less shared memory than an H100
    (A100 163 KB, Ada 99 KB per block: 128x128x32, 6 stages, 96 KB) compiles without
    spills for both."""
    from examples.matmul_ampere import CONFIGS, pick_config, stage_bytes
    from tests.test_sass import compile_example

    cfg = dict(CONFIGS[1])
    assert cfg == pick_config(torch.device("cpu")) and stage_bytes(cfg) + 1024 <= 99 * 1024
    nw = cfg.pop("num_warps")
    c = compile_example(EXAMPLE, "matmul_ampere_kernel", SIG, dict(cfg, GROUP=8), nw, arch)
    _level2(c, cfg["STAGES"] // 2 + 1)
    assert c.ck.metadata["spills"] == 0, c.ck.metadata


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("M,N,K", [(1040, 528, 208), (300, 264, 64)])
def test_persistent_on_gpu_sm80_path(M, N, K):
    """One program per SM, and 2 programs (each walks several tiles, the ring across them);
    K = 64 at BK 32, 8 stages: the prefetch of 4 reaches two tiles ahead."""
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    for cfg in (dict(BM=256, BN=128, BK=64, STAGES=4, num_warps=8),
                dict(BM=256, BN=128, BK=32, STAGES=8, num_warps=8),
                dict(BM=128, BN=128, BK=32, STAGES=6, num_warps=4)):
        for programs in (None, 2):
            c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            _persistent(a, b, arch="sm_80", c=c, programs=programs, **cfg)
            _check(c, a.double() @ b.double(), 1e-2)

"""Variants of the sm_80 GEMM that benchmarks/ampere.py times against the example (issue 16):
the accumulator with each warp's columns contiguous (frontend/ampere.py's
`_WARP_COLS_CONTIGUOUS`, `Mma.n_contig`: the "nc" variants) and 16 warps (32x64 warp tiles,
"w16"); the copies issued between the MMAs (the example's PEEL compiled with
backend/lower/ampere.py's `_COPIES_IN_LINE`: the "il" variants); and the HMMA order of the
example's loop.

Interleaved (the default), a warp's 8-column n-tiles are 8 * wn columns apart, so the
widened epilogue store of a row writes two 16-byte pieces 32 bytes apart: half of each
sector. Contiguous, the four lanes of a quad cover 2 rows x 32 bytes: whole sectors.

Checked: the fragments (tests/test_ampere.py simulates every ldmatrix of both layouts); SASS
for sm_80 / sm_89 and for sm_90 from the compute_80 PTX (HMMA, LDGSTS, LDSM, no spills; 16
warps in 128 registers); that every HMMA of the loop accumulates onto a result at least 8
HMMAs older (no back-to-back chain on one accumulator); on a GPU, the sm_80 path against
float64 references with outputs poisoned, at tile-multiple and ragged sizes.
"""

from __future__ import annotations

import pathlib
import re

import kitjit.backend.lower.ampere as sm80_lowering
import kitjit.frontend.ampere as sm80_frontend
import pytest
import torch
from kitjit.backend.compiler import _ptxas

import kitjit as kit
from kitjit.testing import has_gpu
from kitjit.tools import disassemble, find_tool, sass_opcodes

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "matmul_ampere.py"
SIG = ["*bf16:16"] * 3 + ["i32:16"] * 3
T256 = dict(BM=256, BN=128, BK=64, STAGES=4, GROUP=8)   # the example's H100/H200 config
T128 = dict(BM=128, BN=128, BK=32, STAGES=6, GROUP=8)   # its A100 / Ada config
needs_sass = pytest.mark.skipif(
    find_tool("cuobjdump") is None or find_tool("ptxas") is None,
    reason="cuobjdump/nvdisasm/ptxas not found")


@pytest.fixture
def contiguous(monkeypatch):
    """Compile with the flag set (not part of the disk cache's key: the cache is off)."""
    monkeypatch.setenv("KITJIT_CACHE_DISABLE", "1")
    monkeypatch.setattr(sm80_frontend, "_WARP_COLS_CONTIGUOUS", True)


def _check_poisoned(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *case) -> None:
    """c (poisoned with NaN before the run) is fully written and a @ b within bf16's error."""
    assert not torch.isnan(c).any(), case
    ref = a.double() @ b.double()
    err = ((c.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, (*case, err)


def _compile(arch: str, cfg: dict, nw: int):
    ck = kit.compile_aot(str(EXAMPLE), "matmul_ampere_kernel", SIG, cfg, nw, arch)
    sass = disassemble(ck.asm["cubin"])
    return ck, sass


def _level2(sass: str) -> None:
    ops = sass_opcodes(sass)
    for op in ("HMMA.16816.F32.BF16", "LDGSTS", "LDSM.16.M88.4", "LDSM.16.MT88.4"):
        assert any(o.startswith(op) for o in ops), (op, sorted(ops))
    assert not any(o.startswith(("STL", "LDL")) for o in ops), "spills"


def hmma_chain_distances(sass: str) -> list[int]:
    """For each HMMA that accumulates onto an earlier HMMA's result: how many HMMAs later
    it comes (register renaming followed: the C operand's previous writer)."""
    writer, dist, n = {}, [], 0
    for m in re.finditer(r"HMMA\.\S+\s+R(\d+),\s*R\d+(?:\.reuse)?,\s*R\d+(?:\.reuse)?,\s*R(\d+)",
                         sass):
        d, c = int(m.group(1)), int(m.group(2))
        if c in writer:
            dist.append(n - writer[c])
        writer[d] = n
        n += 1
    return dist


@needs_sass
@pytest.mark.parametrize("arch,cfg,nw", [("sm_80", T256, 8), ("sm_89", T128, 4)],
                         ids=["sm_80", "sm_89"])
@pytest.mark.slow_except("sm_80")
def test_contiguous_sass(arch, cfg, nw, contiguous):
    ck, sass = _compile(arch, cfg, nw)
    _level2(sass)
    assert ck.metadata["spills"] == 0, ck.metadata
    assert min(hmma_chain_distances(sass)) >= 8


@needs_sass
def test_contiguous_changes_the_ptx(monkeypatch):
    monkeypatch.setenv("KITJIT_CACHE_DISABLE", "1")
    default = _compile("sm_80", T256, 8)[0].asm["ptx"]
    monkeypatch.setattr(sm80_frontend, "_WARP_COLS_CONTIGUOUS", True)
    assert _compile("sm_80", T256, 8)[0].asm["ptx"] != default


@needs_sass
@pytest.mark.parametrize("contig", [False, True], ids=["interleaved", "contiguous"])
@pytest.mark.slow_except("interleaved")
def test_sm90_from_compute80_ptx(contig, monkeypatch):
    """What an H100/H200 runs with arch="sm_80" (the driver assembles the compute_80 PTX):
    level-2 SASS without spills, and no accumulator chain of back-to-back HMMAs (the
    k-slices' 32 MMAs of a warp issue between two MMAs on one accumulator)."""
    monkeypatch.setenv("KITJIT_CACHE_DISABLE", "1")
    monkeypatch.setattr(sm80_frontend, "_WARP_COLS_CONTIGUOUS", contig)
    ck, _ = _compile("sm_80", T256, 8)
    cubin, res = _ptxas(ck.asm["ptx"], "sm_90", find_tool("ptxas"))
    sass = disassemble(cubin)
    _level2(sass)
    assert res.spills == 0, res
    assert min(hmma_chain_distances(sass)) >= 8


@needs_sass
@pytest.mark.parametrize("cfg", [T256, dict(T256, BK=32, STAGES=8)], ids=["s4", "s8"])
@pytest.mark.slow_except("s4")
def test_sixteen_warps_sass(cfg, monkeypatch):
    """256x128 on 16 warps (4 a scheduler): 128 registers, the whole register file."""
    monkeypatch.setenv("KITJIT_CACHE_DISABLE", "1")
    ck, sass = _compile("sm_80", cfg, 16)
    _level2(sass)
    assert ck.metadata["spills"] == 0 and ck.metadata["registers"] <= 128, ck.metadata
    _, res = _ptxas(ck.asm["ptx"], "sm_90", find_tool("ptxas"))
    assert res.spill_stores == 0 and res.registers <= 128, res


def _copies_between_mmas(sass: str) -> bool:
    """Some LDGSTS sits between two HMMAs (in the default SASS the copies are a block of
    their own, after the MMAs and a branch)."""
    ops = re.findall(r"\b(HMMA|LDGSTS)\.", sass)
    first, last = ops.index("HMMA"), len(ops) - 1 - ops[::-1].index("HMMA")
    return "LDGSTS" in ops[first:last]


@pytest.fixture
def in_line(monkeypatch):
    monkeypatch.setenv("KITJIT_CACHE_DISABLE", "1")
    monkeypatch.setattr(sm80_lowering, "_COPIES_IN_LINE", True)


@needs_sass
@pytest.mark.parametrize("arch,cfg,nw", [("sm_80", T256, 8), ("sm_80", dict(T256, BK=32,
                                                                            STAGES=8), 8),
                                         ("sm_89", T128, 4)], ids=["sm_80", "sm_80-s8", "sm_89"])
@pytest.mark.slow_except("sm_80")
def test_in_line_copies_sass(arch, cfg, nw, in_line):
    ck, sass = _compile(arch, dict(cfg, PEEL=True), nw)
    _level2(sass)
    assert ck.metadata["spills"] == 0, ck.metadata
    assert _copies_between_mmas(sass)


@needs_sass
def test_in_line_copies_sm90_from_compute80_ptx(in_line):
    ck, _ = _compile("sm_80", dict(T256, PEEL=True), 8)
    cubin, res = _ptxas(ck.asm["ptx"], "sm_90", find_tool("ptxas"))
    sass = disassemble(cubin)
    _level2(sass)
    assert res.spills == 0, res
    assert _copies_between_mmas(sass)


@needs_sass
def test_default_copies_are_a_block_of_their_own(monkeypatch):
    """What the "il" variants change (the default example, flag off)."""
    monkeypatch.setenv("KITJIT_CACHE_DISABLE", "1")
    assert not _copies_between_mmas(_compile("sm_80", T256, 8)[1])


# (M, N, K): ragged tiles and K steps; K of one step (shorter than the prefetch: the peeled
# main loop runs no step)
@pytest.mark.parametrize("M,N,K", [(150, 136, 200), (130, 72, 24), (64, 64, 64)])
def test_peel_in_interpreter(M, N, K, monkeypatch):
    from examples.matmul_ampere import matmul

    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    gen = torch.Generator().manual_seed(M + N + K)
    a = torch.randn(M, K, generator=gen).to(torch.bfloat16)
    b = torch.randn(K, N, generator=gen).to(torch.bfloat16)
    c = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    matmul(a, b, arch="sm_80", c=c, BM=64, BN=64, BK=32, STAGES=4, num_warps=4, PEEL=True)
    assert not torch.isnan(c).any()
    ref = a.double() @ b.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-2


def test_peel_refuses_next_frags():
    from examples.matmul_ampere import matmul

    a, b = torch.randn(64, 64).to(torch.bfloat16), torch.randn(64, 64).to(torch.bfloat16)
    with pytest.raises(ValueError, match="PEEL"):
        matmul(a, b, arch="sm_80", PEEL=True, NEXT_FRAGS=True)


gpu = pytest.mark.skipif(not has_gpu(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
def test_contiguous_gemm_on_gpu_sm80_path(contiguous):
    """Tile-multiple and ragged sizes; the H100 config and the A100/Ada one, on a twin of
    the example's kernel compiled with the flag set."""
    from examples.matmul_ampere import matmul_ampere_kernel

    twin = kit.jit(matmul_ampere_kernel.fn)
    for M, N, K in ((1024, 512, 1024), (300, 264, 200), (256, 128, 64)):
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        for cfg, nw in ((T256, 8), (T128, 4), (dict(T256, BK=32, STAGES=8), 8)):
            c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            tiles = kit.cdiv(M, cfg["BM"]) * kit.cdiv(N, cfg["BN"])
            twin[(tiles,)](a, b, c, M, N, K, num_warps=nw, arch="sm_80", **cfg)
            _check_poisoned(c, a, b, M, N, K, cfg)


@pytest.mark.gpu
@gpu
def test_sixteen_warps_gemm_on_gpu_sm80_path():
    from examples.matmul_ampere import matmul

    for M, N, K in ((1024, 512, 1024), (300, 264, 200)):
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        for cfg in (dict(BM=256, BN=128, BK=64, STAGES=4), dict(BM=256, BN=128, BK=32, STAGES=8)):
            c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            matmul(a, b, arch="sm_80", c=c, num_warps=16, **cfg)
            _check_poisoned(c, a, b, M, N, K, cfg)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("peel", [True, False])
def test_in_line_copies_gemm_on_gpu_sm80_path(peel, in_line, monkeypatch):
    """The deferred edge paths (ragged M, N and K tails) and the in-bounds copies
    predicated, on twins compiled with the flag set, with and without PEEL; n_contig too."""
    from examples.matmul_ampere import matmul_ampere_kernel

    for contig in (False, True):
        monkeypatch.setattr(sm80_frontend, "_WARP_COLS_CONTIGUOUS", contig)
        twin = kit.jit(matmul_ampere_kernel.fn)
        for M, N, K in ((1024, 512, 1024), (300, 264, 200), (256, 128, 64), (200, 136, 40)):
            a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
            for cfg, nw in ((T256, 8), (T128, 4), (dict(T256, BK=32, STAGES=8), 8)):
                c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                tiles = kit.cdiv(M, cfg["BM"]) * kit.cdiv(N, cfg["BN"])
                twin[(tiles,)](a, b, c, M, N, K, num_warps=nw, arch="sm_80", PEEL=peel, **cfg)
                _check_poisoned(c, a, b, M, N, K, cfg, contig)

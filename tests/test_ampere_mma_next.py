"""Fragments prefetched across the stage wait below sm_90 (backend/lower/ampere.py), the GEMM
example's NEXT_FRAGS (benchmarks/ampere.py times it against the default):
`kit.mma(..., next=(a1, b1, bar, phase, cond))` loads the next stage's first k-slice after
that stage's wait and before this stage's last MMAs, carried to the next run of the op in
registers.

Checked: the PTX order; the SASS for sm_80 / sm_89 and for sm_90 from the compute_80 PTX
(HMMA, LDGSTS, LDSM, no spills; the loop's first HMMA before any LDSM of its own and the
next stage's LDSMs before the last slice's HMMAs); `next=` refused on Hopper; the
interpreter (results, and the misuses that would be wrong on the GPU: a prefetched tile
rewritten, a wait nothing arrives on); on a GPU the sm_80 path against float64 references
with outputs poisoned.
"""

from __future__ import annotations

import pathlib
import re

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
needs_sass = pytest.mark.skipif(
    find_tool("cuobjdump") is None or find_tool("ptxas") is None,
    reason="cuobjdump/nvdisasm/ptxas not found")


def _check(got, want, tol, what="result"):
    assert not torch.isnan(got).any(), f"{what}: NaN in the output"
    err = ((got.double() - want).norm() / want.norm()).item()
    assert err < tol, f"{what}: relative error {err:.2e}"


def _example(arch, cfg, nw, nxt):
    from tests.test_sass import compile_example

    return compile_example(EXAMPLE, "matmul_ampere_kernel", SIG, dict(cfg, NEXT_FRAGS=nxt), nw,
                           arch)


def _level2(c):
    assert c.has("HMMA.16816.F32.BF16") and c.has("LDGSTS") and c.has("LDSM.16.M88.4") \
        and c.has("LDSM.16.MT88.4"), c.summary()
    assert not c.has("STL") and not c.has("LDL"), "spills"


def _on_sm90(nxt: bool):
    """The example's compute_80 PTX assembled for sm_90 (what the driver does on a Hopper),
    checked as a level-2 kernel without spills."""
    from tests.test_sass import Compiled

    c80 = _example("sm_80", T256, 8, nxt)
    cubin, res = _ptxas(c80.ck.asm["ptx"], "sm_90", find_tool("ptxas"))
    c = Compiled.__new__(Compiled)
    c.ck, c.sass = c80.ck, disassemble(cubin)
    c.ops = sass_opcodes(c.sass)
    _level2(c)
    assert res.spills == 0, res
    return c


# (M, N, K): tiles and K steps (7, K ragged), and K of one step (the only step's cond false)
@pytest.mark.parametrize("M,N,K", [(150, 136, 200), (130, 72, 24)])
def test_gemm_in_interpreter(M, N, K, monkeypatch):
    from examples.matmul_ampere import matmul

    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    gen = torch.Generator().manual_seed(M + K)
    a = torch.randn(M, K, generator=gen).to(torch.bfloat16)
    b = torch.randn(K, N, generator=gen).to(torch.bfloat16)
    c = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    matmul(a, b, arch="sm_80", c=c, BM=64, BN=64, BK=32, STAGES=4, num_warps=4,
           NEXT_FRAGS=True)
    _check(c, a.double() @ b.double(), 1e-2)


@kit.jit
def rewrite_kernel(A, B, C, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr):
    """Misuse: stage 1 is prefetched by the first run of the kit.mma, then refilled with
    other data before the second run uses it (on the GPU: the old fragments)."""
    a = kit.shared((2, BM, BK), A.dtype.element_ty)
    b = kit.shared((2, BK, BN), B.dtype.element_ty)
    ready = kit.mbarriers(2)
    for s in kit.static_range(2):
        kit.tma_load(a[s], A, (0, s * BK), ready[s])
        kit.tma_load(b[s], B, (s * BK, 0), ready[s])
    acc = kit.zeros((BM, BN), kit.float32)
    for i in range(2):
        kit.mbarrier_wait(ready[i], i)
        acc = kit.mma(a[i], b[i], acc, next=(a[1], b[1], ready[1], 0, i == 0))
        if i == 0:
            kit.tma_load(a[1], A, (0, 2 * BK), ready[1])
            kit.tma_load(b[1], B, (2 * BK, 0), ready[1])
    kit.tma_store(C, (0, 0), acc)


def test_interpreter_catches_a_rewritten_prefetched_tile(monkeypatch):
    from kitjit.interpreter.errors import RaceError

    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    a, b = torch.randn(64, 96).to(torch.bfloat16), torch.randn(96, 64).to(torch.bfloat16)
    c = torch.empty(64, 64)
    with pytest.raises(RaceError, match="rewritten after kit.mma's next= prefetch"):
        rewrite_kernel[(1,)](a, b, c, BM=64, BN=64, BK=32, num_warps=4, arch="sm_80")


def test_interpreter_catches_a_wait_for_copies_not_issued(monkeypatch):
    """NEXT_FRAGS with 2 stages: step i + 1's copies come after step i's kit.mma,
    whose next= waits for them (on the GPU: a hang). The example's wrapper refuses it."""
    from examples.matmul_ampere import matmul, matmul_ampere_kernel
    from kitjit.interpreter.errors import DeadlockError

    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    a, b = torch.randn(64, 96).to(torch.bfloat16), torch.randn(96, 64).to(torch.bfloat16)
    c = torch.empty(64, 64, dtype=torch.bfloat16)
    cfg = dict(BM=64, BN=64, BK=32, STAGES=2, GROUP=1, NEXT_FRAGS=True, num_warps=4)
    with pytest.raises(DeadlockError):
        matmul_ampere_kernel[(1,)](a, b, c, 64, 64, 96, arch="sm_80", **cfg)
    with pytest.raises(ValueError, match="STAGES must be at least 4"):
        matmul(a, b, arch="sm_80", **{k: v for k, v in cfg.items() if k != "GROUP"})


def test_next_is_refused_on_hopper():
    from kitjit.frontend.errors import CompileError

    with pytest.raises(CompileError, match=r"next=.*not supported yet"):
        kit.compile_aot(str(EXAMPLE), "matmul_ampere_kernel", SIG,
                        dict(BM=128, BN=128, BK=64, STAGES=4, GROUP=8, NEXT_FRAGS=True), 4,
                        "sm_90a")


@needs_sass
@pytest.mark.parametrize("arch,cfg,nw", [
    ("sm_80", T256, 8),
    ("sm_89", dict(BM=128, BN=128, BK=32, STAGES=6, GROUP=8), 4)], ids=["sm_80", "sm_89"])
@pytest.mark.slow_except("sm_80")
def test_next_sass(arch, cfg, nw):
    c = _example(arch, cfg, nw, True)
    _level2(c)
    assert c.ck.metadata["spills"] == 0, c.ck.metadata
    _check_next_schedule(c.sass)


def _check_next_schedule(sass: str) -> None:
    """From next='s wait (a spin loop: the last backward branch before the loop's last
    HMMA) to that HMMA: LDSMs (the next stage's first slice), then HMMAs with no LDSM
    between them (the last slice, issued under those loads)."""
    ins = [(int(m.group(1), 16), m.group(2), m.group(3)) for m in re.finditer(
        r"^\s+/\*([0-9a-f]{4})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)[^;]*?(?:0x([0-9a-f]+))?"
        r"\s*;", sass, re.M)]
    last = max(i for i, (_, o, _) in enumerate(ins) if o == "HMMA")
    spins = [i for i, (a, o, t) in enumerate(ins[:last]) if o == "BRA" and t and int(t, 16) < a]
    tail = [o for _, o, _ in ins[spins[-1]:last + 1]]
    first_hmma = tail.index("HMMA")
    assert tail[:first_hmma].count("LDSM") >= 4, tail[:first_hmma]
    assert "LDSM" not in tail[first_hmma:], "the last slice's HMMAs follow the prefetch"


@needs_sass
def test_next_sass_for_sm90_from_compute80_ptx():
    c = _on_sm90(True)
    _check_next_schedule(c.sass)


@kit.jit
def pipe_kernel(A, B, C, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
                TRANS_B: kit.constexpr):
    """A 4-stage ring (loads 2 steps ahead) with next=, B stored [N, K] when TRANS_B (the
    .T view), one program per BM x BN tile of C."""
    m0, n0 = kit.program_id(0) * BM, kit.program_id(1) * BN
    a = kit.shared((4, BM, BK), A.dtype.element_ty)
    b = kit.shared((4, BN, BK) if TRANS_B else (4, BK, BN), B.dtype.element_ty)
    ready = kit.mbarriers(4)
    n_k = kit.cdiv(K, BK)
    for s in kit.static_range(2):
        if s < n_k:
            kit.tma_load(a[s], A, (m0, s * BK), ready[s])
            kit.tma_load(b[s], B, (n0, s * BK) if TRANS_B else (s * BK, n0), ready[s])
    acc = kit.zeros((BM, BN), kit.float32)
    for i in range(n_k):
        s, s1 = i % 4, (i + 1) % 4
        kit.mbarrier_wait(ready[s], i // 4 % 2)
        bs, bn = (b[s].T, b[s1].T) if TRANS_B else (b[s], b[s1])
        acc = kit.mma(a[s], bs, acc, next=(a[s1], bn, ready[s1], (i + 1) // 4 % 2, i + 1 < n_k))
        j = i + 2
        if j < n_k:
            kit.tma_load(a[j % 4], A, (m0, j * BK), ready[j % 4], sync=False)
            kit.tma_load(b[j % 4], B, (n0, j * BK) if TRANS_B else (j * BK, n0), ready[j % 4],
                         sync=False)
    kit.tma_store(C, (m0, n0), acc)


# (BM, BN, BK, TRANS_B): one 16-deep slice and one n-tile a warp (x2 B loads), B [N, K];
# two slices, B [N, K] and [K, N]. (ptxas gives some small ones a register target it then
# spills to reach: 64x64x32 with B [K, N] at 80 registers, 8 bytes; 64x64x16, 24 bytes)
PIPE = [(64, 8, 16, True), (64, 64, 32, True), (128, 64, 32, False)]


def _pipe(a, b, cfg, **kw):
    BM, BN, BK, tb = cfg
    M, K = a.shape
    N = b.shape[0] if tb else b.shape[1]
    c = torch.full((M, N), float("nan"), device=a.device)
    pipe_kernel[(kit.cdiv(M, BM), kit.cdiv(N, BN))](a, b, c, K, BM=BM, BN=BN, BK=BK,
                                                    TRANS_B=tb, num_warps=4, **kw)
    return c


@pytest.mark.parametrize("cfg", PIPE, ids=str)
def test_pipe_in_interpreter(cfg, monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    gen = torch.Generator().manual_seed(11)
    a = torch.randn(70, 104, generator=gen).to(torch.bfloat16)
    b = torch.randn(104, 24, generator=gen).to(torch.bfloat16)
    bb = b.t().contiguous() if cfg[3] else b
    _check(_pipe(a, bb, cfg, arch="sm_80"), a.double() @ b.double(), 1e-2)


@needs_sass
@pytest.mark.parametrize("cfg", PIPE, ids=str)
def test_pipe_compiles_for_sm80_without_spills(cfg):
    BM, BN, BK, tb = cfg
    ck = kit.compile_aot(__file__, "pipe_kernel", ["*bf16:16", "*bf16:16", "*fp32:16", "i32"],
                         dict(BM=BM, BN=BN, BK=BK, TRANS_B=tb), 4, "sm_80")
    assert ck.asm["ptx"].count("ldmatrix") > 0 and ck.metadata["spills"] == 0, ck.metadata


gpu = pytest.mark.skipif(not has_gpu(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
def test_gemm_on_gpu_sm80_path():
    """Tile-multiple and ragged sizes; the H100 config and the A100/Ada one."""
    from examples.matmul_ampere import matmul

    for M, N, K in ((1024, 512, 1024), (300, 264, 200), (256, 128, 64)):
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        ref = a.double() @ b.double()
        for cfg in (dict(BM=256, BN=128, BK=64, STAGES=4, num_warps=8),
                    dict(BM=256, BN=128, BK=32, STAGES=8, num_warps=8),
                    dict(BM=128, BN=128, BK=32, STAGES=6, num_warps=4)):
            c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            matmul(a, b, arch="sm_80", c=c, NEXT_FRAGS=True, **cfg)
            _check(c, ref, 1e-2, f"{M}x{N}x{K} {cfg} NEXT_FRAGS")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("cfg", PIPE, ids=str)
def test_pipe_on_gpu_sm80_path(cfg):
    a = torch.randn(300, 200, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(200, 72, device="cuda", dtype=torch.bfloat16)
    bb = b.t().contiguous() if cfg[3] else b
    _check(_pipe(a, bb, cfg, arch="sm_80"), a.double() @ b.double(), 1e-2)

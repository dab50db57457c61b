"""`kit.mma(..., frag_prefetch=True)` below sm_90 (backend/lower/ampere.py): every ldmatrix
of k-slice j + 16 is issued before the mma.sync of slice j, in the PTX. The GEMM example
takes it as FRAG_PREFETCH (benchmarks/ampere.py times it against the default). Checked
here: the PTX order, SASS for sm_80 / sm_89 and for sm_90 from the compute_80 PTX (HMMA,
LDGSTS, LDSM, no spills), Hopper's PTX untouched by the flag, the interpreter, and on a GPU
the sm_80 path against float64 references with outputs poisoned, shared and register A.
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


def _example(arch, cfg, nw, prefetch):
    from tests.test_sass import compile_example

    return compile_example(EXAMPLE, "matmul_ampere_kernel", SIG,
                           dict(cfg, FRAG_PREFETCH=prefetch), nw, arch)


def _ldmatrix_before_first_mma(ptx: str) -> int:
    body = ptx[ptx.index("ldmatrix"):]
    return len(re.findall(r"\bldmatrix", body[:body.index("mma.sync")]))


@needs_sass
def test_ptx_loads_the_next_slice_first():
    """Default: one slice's A fragments (4 x4 loads of a 64x64 warp tile) and one B pair
    before the first mma.sync; prefetched: all of slices 0 and 1 (2 x (4 A + 4 B))."""
    assert _ldmatrix_before_first_mma(_example("sm_80", T256, 8, False).ck.asm["ptx"]) == 5
    assert _ldmatrix_before_first_mma(_example("sm_80", T256, 8, True).ck.asm["ptx"]) == 16


def _level2(c):
    assert c.has("HMMA.16816.F32.BF16") and c.has("LDGSTS") and c.has("LDSM.16.M88.4") \
        and c.has("LDSM.16.MT88.4"), c.summary()
    assert not c.has("STL") and not c.has("LDL"), "spills"


@needs_sass
@pytest.mark.parametrize("arch,cfg,nw", [
    ("sm_80", T256, 8),
    ("sm_89", dict(BM=128, BN=128, BK=32, STAGES=6, GROUP=8), 4)], ids=["sm_80", "sm_89"])
def test_prefetched_sass_has_no_spills(arch, cfg, nw):
    c = _example(arch, cfg, nw, True)
    _level2(c)
    assert c.ck.metadata["spills"] == 0, c.ck.metadata


@needs_sass
def test_prefetched_sass_for_sm90_from_compute80_ptx():
    """What an H100/H200 runs with arch="sm_80": the driver assembles the compute_80 PTX."""
    from tests.test_sass import Compiled

    c80 = _example("sm_80", T256, 8, True)
    cubin, res = _ptxas(c80.ck.asm["ptx"], "sm_90", find_tool("ptxas"))
    c = Compiled.__new__(Compiled)
    c.ck, c.sass = c80.ck, disassemble(cubin)
    c.ops = sass_opcodes(c.sass)
    _level2(c)
    assert res.spills == 0, res


def test_hopper_ignores_the_flag():
    """On sm_90a kit.mma is a WGMMA reading shared memory: no fragments, same PTX."""
    ptx = [kit.compile_aot(str(EXAMPLE), "matmul_ampere_kernel", SIG,
                           dict(BM=128, BN=128, BK=64, STAGES=4, GROUP=8, FRAG_PREFETCH=p), 4,
                           "sm_90a").asm["ptx"] for p in (False, True)]
    assert "wgmma.mma_async" in ptx[0] and ptx[0] == ptx[1]


@kit.jit
def pv_kernel(Q, K, V, O, BM: kit.constexpr, BN: kit.constexpr, D: kit.constexpr,
              PREFETCH: kit.constexpr):
    """O = bf16(Q @ K^T) @ V for one block: the second kit.mma takes A from registers (P of
    attention), the first from shared memory, both with frag_prefetch=PREFETCH. K and V
    may have fewer than BN rows (their boxes read zeros past the edge)."""
    q = kit.shared((BM, D), Q.dtype.element_ty)
    k = kit.shared((BN, D), K.dtype.element_ty)
    v = kit.shared((BN, D), V.dtype.element_ty)
    bar = kit.mbarriers(1)
    kit.tma_load(q, Q, (0, 0), bar[0])
    kit.tma_load(k, K, (0, 0), bar[0])
    kit.tma_load(v, V, (0, 0), bar[0])
    kit.mbarrier_wait(bar[0], 0)
    s = kit.mma(q, k.T, kit.zeros((BM, BN), kit.float32), frag_prefetch=PREFETCH)
    p = s.to(Q.dtype.element_ty)
    o = kit.mma(p, v, kit.zeros((BM, D), kit.float32), frag_prefetch=PREFETCH)
    kit.tma_store(O, (0, 0), o)


def _pv(q, k, v, prefetch, **kw):
    o = torch.full((q.shape[0], v.shape[1]), float("nan"), device=q.device)
    pv_kernel[(1,)](q, k, v, o, BM=q.shape[0], BN=64, D=q.shape[1],
                    PREFETCH=prefetch, num_warps=4, **kw)
    return o


def _pv_ref(q, k, v):
    return (q.double() @ k.double().T).to(q.dtype).double() @ v.double()


def test_pv_in_interpreter(monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(n, 64, generator=gen).to(torch.bfloat16) for n in (64, 48, 48))
    _check(_pv(q, k, v, True, arch="sm_80"), _pv_ref(q, k, v), 1e-2)


@needs_sass
def test_pv_compiles_for_sm80_without_spills():
    ck = kit.compile_aot(__file__, "pv_kernel", ["*bf16:16"] * 3 + ["*fp32:16"],
                         dict(BM=64, BN=64, D=64, PREFETCH=True), 4, "sm_80")
    assert "ldmatrix" in ck.asm["ptx"] and ck.metadata["spills"] == 0, ck.metadata


gpu = pytest.mark.skipif(not has_gpu(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
def test_gemm_on_gpu_sm80_path():
    """Tile-multiple and ragged sizes; the H100 config and the A100/Ada one."""
    from examples.matmul_ampere import matmul

    for M, N, K in ((1024, 512, 1024), (300, 264, 200)):
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        ref = a.double() @ b.double()
        for cfg in (dict(BM=256, BN=128, BK=64, STAGES=4, num_warps=8),
                    dict(BM=128, BN=128, BK=32, STAGES=6, num_warps=4)):
            c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            matmul(a, b, arch="sm_80", c=c, FRAG_PREFETCH=True, **cfg)
            _check(c, ref, 1e-2, f"{M}x{N}x{K} {cfg}")


@pytest.mark.gpu
@gpu
def test_pv_on_gpu_sm80_path():
    """Register A and shared A, against float64; NaN/inf pass through as the default's."""
    q, k, v = (torch.randn(n, 64, device="cuda", dtype=torch.bfloat16) for n in (64, 48, 48))
    _check(_pv(q, k, v, True, arch="sm_80"), _pv_ref(q, k, v), 1e-2)
    q[3, 5], v[7, 2] = float("nan"), float("inf")
    got, want = _pv(q, k, v, True, arch="sm_80"), _pv(q, k, v, False, arch="sm_80")
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())

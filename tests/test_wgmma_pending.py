"""A `pending=1` WGMMA accumulator read first inside a branch or a loop body.

The wait for the MMAs (wgmma.wait_group, with the accumulator registers tied through) is
emitted where the value is first read. Read first inside an if branch, that wait dominates
neither the other branch nor the code after the if; inside a loop body that may run zero
times, not the code after the loop. The backend used to keep the waited registers after the
block anyway, and LLVM's verifier rejected the module ("Instruction does not dominate all
uses", found by the GEMM helper in session 5). Now a value retired inside a block is in
flight again after it, with its registers from before (backend/lower/base.py, `block`).

Each case compiles for sm_90a (no GPU needed) and runs in the interpreter against float64;
the GPU test runs the same kernel on the device.
"""

from __future__ import annotations

import pathlib

import pytest
import torch

import kitjit as kit
from kitjit.testing import has_gpu, rel_error

SRC = pathlib.Path(__file__)
WHERE = {0: "if-else", 1: "if-then-after", 2: "loop-then-after"}


@kit.jit
def pending_reads(A, B, C, M, N, K, flag, reps, BM: kit.constexpr, BN: kit.constexpr,
                  BK: kit.constexpr, WHERE: kit.constexpr):
    a = kit.shared((2, BM, BK), A.dtype.element_ty)     # two stages: the MMA of k-step
    b = kit.shared((2, BK, BN), B.dtype.element_ty)     # kk - 2 is done (pending=1) when
    ready = kit.mbarriers(2)                            # k-step kk loads over its stage
    m0 = kit.program_id(0) * BM
    n0 = kit.program_id(1) * BN
    acc = kit.zeros((BM, BN), kit.float32)
    for kk in range(kit.cdiv(K, BK)):
        s = kk % 2
        kit.tma_load(a[s], A, (m0, kk * BK), ready[s])
        kit.tma_load(b[s], B, (kk * BK, n0), ready[s])
        kit.mbarrier_wait(ready[s], kk // 2 % 2)
        acc = kit.mma(a[s], b[s], acc, pending=1)      # still in flight after the loop
    out = kit.full((BM, BN), 0.25, kit.float32)
    if WHERE == 0:        # first read in both branches of a run-time if
        if flag > 0:
            out = acc * 2.0
        else:
            out = acc + 1.0
    elif WHERE == 1:      # first read in one branch, then after the if
        if flag > 0:
            out = acc * 2.0
        out = out + acc
    else:                 # first read in a loop that may run zero times, then after it
        for _ in range(reps):
            out = out + acc
        out = out - acc
    rm = m0 + kit.arange(0, BM)
    rn = n0 + kit.arange(0, BN)
    kit.store(C + rm[:, None] * N + rn[None, :], out.to(C.dtype.element_ty),
              mask=(rm[:, None] < M) & (rn[None, :] < N))


def reference(a, b, where: int, flag: int, reps: int) -> torch.Tensor:
    acc = a.double() @ b.double()
    if where == 0:
        return acc * 2.0 if flag > 0 else acc + 1.0
    if where == 1:
        return (acc * 2.0 if flag > 0 else torch.full_like(acc, 0.25)) + acc
    return 0.25 + reps * acc - acc


def randn(*shape, seed: int) -> torch.Tensor:
    """Normal values, never zero."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    return torch.where(x.abs() < 1e-3, 0.5, x)


def run(where: int, flag: int, reps: int, device: str) -> None:
    M, N, K, BM, BN, BK = 100, 72, 136, 64, 64, 64      # none a multiple of the tile
    # A as a column slice of a wider tensor (rows 16-byte aligned, not contiguous)
    a = randn(M, K + 8, seed=1).to(torch.bfloat16).to(device)[:, :K]
    b = randn(K, N, seed=2).to(torch.bfloat16).to(device)
    c = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device=device)
    grid = (kit.cdiv(M, BM), kit.cdiv(N, BN))
    pending_reads[grid](a, b, c, M, N, K, flag, reps, BM=BM, BN=BN, BK=BK, WHERE=where,
                        num_warps=4)
    ref = reference(a.cpu(), b.cpu(), where, flag, reps)
    assert not c.isnan().any(), "an element of C was never written"
    assert rel_error(c.cpu(), ref) < 1e-2, (where, flag, reps)


CASES = [(0, 1, 0), (0, 0, 0), (1, 1, 0), (1, 0, 0), (2, 0, 0), (2, 0, 3)]
IDS = [f"{WHERE[w]}-flag{f}-reps{r}" for w, f, r in CASES]


@pytest.mark.parametrize("where", sorted(WHERE), ids=list(WHERE.values()))
def test_compiles_for_sm90a(where):
    """Was: InternalCompilerError, LLVM 'Instruction does not dominate all uses'."""
    ck = kit.compile_aot(str(SRC), "pending_reads", ["*bf16:16"] * 3 + ["i32"] * 5,
                         dict(BM=64, BN=64, BK=64, WHERE=where), 4, arch="sm_90a")
    ptx = ck.asm["ptx"]
    assert "wgmma.mma_async" in ptx
    # every path to a read of acc waits for all its MMAs
    assert "wgmma.wait_group.sync.aligned 0;" in ptx


@pytest.mark.parametrize("where,flag,reps", CASES, ids=IDS)
def test_interpreter(where, flag, reps):
    run(where, flag, reps, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
@pytest.mark.parametrize("where,flag,reps", CASES, ids=IDS)
def test_gpu(where, flag, reps):
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("WGMMA needs sm_90a")
    run(where, flag, reps, "cuda")

"""The interpreter's race check for writes to shared memory under an MMA in flight.

An MMA issued with `pending=` reads its shared tiles until a `wgmma.wait_group` retires it;
a `kit.store` or TMA load into those tiles before then is a race on the GPU. The wait the
backend puts before a read of an MMA result retires only that MMA and older ones (the
newer ones of the same stretch of code run on): the interpreter keeps the same ones in
flight (kitjit/interpreter/mma_waits.py), so a store over a newer MMA's tile is flagged and
a store over a retired one is not. Each racy kernel is next to its fixed form, which must
give the float64 reference's numbers (outputs poisoned with NaN first).
"""

from __future__ import annotations

import pytest
import torch

import kitjit as kit
from kitjit.interpreter import RaceError
from kitjit.testing import rel_error

HERE = __file__.rsplit("/", 1)[-1]


def randn(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    return torch.where(x.abs() < 1e-3, 0.5, x).to(torch.bfloat16)


@kit.jit
def two_pending(A, C, M: kit.constexpr, K: kit.constexpr, OVER: kit.constexpr,
                TMA: kit.constexpr):
    """C[:M] = A0 @ A0.T and C[M:] = A1 @ A1.T by two MMAs in flight together; reading the
    first's result waits for it alone, then a kit.store (TMA: a TMA load) overwrites stage
    OVER."""
    x = kit.shared((2, M, K), A.dtype.element_ty)
    bar = kit.mbarriers(1)
    kit.tma_load(x[0], A, (0, 0), bar[0])
    kit.tma_load(x[1], A, (M, 0), bar[0])
    kit.mbarrier_wait(bar[0], 0)
    z = kit.zeros((M, M), kit.float32)
    p = kit.mma(x[0], x[0].T, z, pending=2)
    q = kit.mma(x[1], x[1].T, z, pending=2)
    rm = kit.arange(0, M)
    kit.store(C + rm[:, None] * M + rm[None, :], p)  # wait_group 1: q runs on
    if TMA:
        kit.tma_load(x[OVER], A, (M, 0), bar[0])
        kit.mbarrier_wait(bar[0], 1)
    else:
        kit.store(x[OVER], kit.zeros((M, K), kit.float32))
    kit.store(C + (M + rm[:, None]) * M + rm[None, :], q)


def run_two_pending(over, tma=False):
    M = K = 64
    a = randn(2 * M, K, seed=1)
    c = torch.full((2 * M, M), float("nan"))
    two_pending[(1,)](a, c, M=M, K=K, OVER=over, TMA=tma, num_warps=4)
    a0, a1 = a[:M].double(), a[M:].double()
    return c, torch.cat([a0 @ a0.T, a1 @ a1.T])


def test_store_over_the_newer_of_two_mmas_is_a_race():
    with pytest.raises(RaceError) as e:
        run_two_pending(1)
    msg = str(e.value)
    assert "race on shared memory at " in msg and f"{HERE}:" in msg
    assert "this kit.store overwrites shared memory that the kit.mma at" in msg
    assert "(issued with pending=2) may still be reading" in msg
    assert "two_pending" in msg and "kit.store(x[OVER]" in msg


def test_tma_load_over_the_newer_of_two_mmas_is_a_race():
    with pytest.raises(RaceError, match=r"this TMA load overwrites shared memory that the "
                                        r"kit.mma at .*\(issued with pending=2\)"):
        run_two_pending(1, tma=True)


@pytest.mark.parametrize("tma", [False, True])
def test_store_over_the_retired_mma_passes(tma):
    c, ref = run_two_pending(0, tma)
    assert not torch.isnan(c).any()
    assert rel_error(c, ref) < 1e-5


@kit.jit
def carried(A, B, C, M, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
            STAGES: kit.constexpr):
    """C = A @ B with the k-blocks staged through shared memory by kit.store and each
    block's partial product added one iteration later (the MMA of block i runs while the
    partial of block i - 1 is added). With one stage the next block's store overwrites the
    tile the running MMA reads: a race."""
    x = kit.shared((STAGES, BM, BK), A.dtype.element_ty)
    y = kit.shared((STAGES, BK, BN), B.dtype.element_ty)
    rm, rk, rn = kit.arange(0, BM), kit.arange(0, BK), kit.arange(0, BN)
    am = rm[:, None] < M
    kit.store(x[0], kit.load(A + rm[:, None] * K + rk[None, :], mask=am, other=0.0))
    kit.store(y[0], kit.load(B + rk[:, None] * BN + rn[None, :]))
    z = kit.zeros((BM, BN), kit.float32)
    acc = z
    part = z
    n_k = K // BK
    for i in range(n_k):
        s = i % STAGES
        nxt = kit.mma(x[s], y[s], z, pending=1)
        acc = acc + part  # waits for the previous MMA only
        part = nxt
        if i + 1 < n_k:
            t = (i + 1) % STAGES
            k0 = (i + 1) * BK
            kit.store(x[t], kit.load(A + rm[:, None] * K + (k0 + rk[None, :]), mask=am,
                                     other=0.0))
            kit.store(y[t], kit.load(B + (k0 + rk[:, None]) * BN + rn[None, :]))
    acc = acc + part
    kit.store(C + rm[:, None] * BN + rn[None, :], acc, mask=am)


def run_carried(stages, M=50, K=96, BN=64):
    a, b = randn(M, K, seed=2), randn(K, BN, seed=3)
    c = torch.full((M, BN), float("nan"))
    carried[(1,)](a, b, c, M, K, BM=64, BN=BN, BK=32, STAGES=stages, num_warps=4)
    return c, a.double() @ b.double()


def test_store_under_the_mma_a_loop_runs_on_is_a_race():
    with pytest.raises(RaceError, match=r"pending=1\) may still be reading") as e:
        run_carried(1)
    msg = str(e.value)
    assert "kit.store(x[t]" in msg and "in the loop at line" in msg and "i = 0" in msg


def test_store_into_the_other_stage_passes():
    c, ref = run_carried(2)
    assert not torch.isnan(c).any()
    assert rel_error(c, ref) < 1e-5


@kit.jit
def handoff(A, C, M: kit.constexpr, K: kit.constexpr, RETIRE: kit.constexpr):
    """Warpgroup 1 multiplies a tile warpgroup 0 staged, then hands it back (an arrive) for
    warpgroup 0 to overwrite; without RETIRE the MMA is still in flight at the hand-off."""
    x = kit.shared((M, K), A.dtype.element_ty)
    ready = kit.mbarriers(1)
    free = kit.mbarriers(1)
    rm, rk = kit.arange(0, M), kit.arange(0, K)
    if kit.warpgroup_id() == 0:
        kit.store(x, kit.load(A + rm[:, None] * K + rk[None, :]))
        kit.mbarrier_arrive(ready[0])
        kit.mbarrier_wait(free[0], 0)
        kit.store(x, kit.zeros((M, K), kit.float32))
    else:
        kit.mbarrier_wait(ready[0], 0)
        c = kit.mma(x, x.T, kit.zeros((M, M), kit.float32), pending=1)
        if RETIRE:
            c = c * 1.0  # reads the result: waits for the MMA
        kit.mbarrier_arrive(free[0])
        kit.store(C + rm[:, None] * M + rm[None, :], c)


@pytest.mark.parametrize("retire", [False, True])
def test_overwrite_by_another_warpgroup(retire):
    M = K = 64
    a = randn(M, K, seed=4)
    c = torch.full((M, M), float("nan"))
    if not retire:
        with pytest.raises(RaceError, match=r"race on shared memory(.|\n)*kit.mma"):
            handoff[(1,)](a, c, M=M, K=K, RETIRE=retire, num_warps=8)
        return
    handoff[(1,)](a, c, M=M, K=K, RETIRE=retire, num_warps=8)
    assert rel_error(c, a.double() @ a.double().T) < 1e-5


@pytest.mark.parametrize("name,sig,consts,waits", [
    ("two_pending", ["*bf16:16", "*fp32:16"], dict(M=64, K=64, OVER=0, TMA=False),
     ["2", "2", "1", "0"]),
    ("carried", ["*bf16:16", "*bf16:16", "*fp32:16", "i32", "i32"],
     dict(BM=64, BN=64, BK=32, STAGES=2), ["1", "1", "0"])])
def test_the_backend_waits_as_the_interpreter_assumes(name, sig, consts, waits):
    """The compiled kernels wait for the MMAs the interpreter retires (mma_waits.py): in
    two_pending, the read of p waits for p alone (wait_group 1); in carried, the read of the
    previous partial leaves the new MMA running (wait_group 1)."""
    import re

    ck = kit.compile_aot(__file__, name, sig, consts, 4, arch="sm_90a")
    assert re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+);", ck.asm["ptx"]) == waits

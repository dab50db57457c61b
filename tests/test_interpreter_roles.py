"""Warp-specialized kernels in the CPU interpreter: roles (`if kit.warpgroup_id() ...`) run
as coroutines that take turns at mbarrier waits, with real mbarrier phases.

`matmul_ws` from benchmarks/ws_kernel.py (a TMA producer warpgroup and two WGMMA consumer
warpgroups) against a float64 reference; hand-written role kernels pin down the rest: a
stage ring whose phases wrap many times, waits on the wrong parity (a deadlock, reported with
each wait, its barrier and its loop iteration instead of hanging), races the schedule here
would hide (a stage freed before or while its MMA reads it, a producer that does not wait
for a free stage, a consumer that does not wait for its stage to land), arrivals counted per
warpgroup of the role, `kit.warpgroup_id()` inside and outside roles, roles within roles,
and TMA loads that arrive more often than a barrier expects.
"""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch

import kitjit as kit
from kitjit.interpreter import DeadlockError, MBarrierError, RaceError
from kitjit.testing import rel_error

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))


@pytest.fixture(autouse=True)
def _interpret(monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")


def randn(*shape, dtype=torch.bfloat16, seed=0):
    """Normal values, never zero (a zero input could hide an element that was never read)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    return torch.where(x.abs() < 1e-3, 0.5, x).to(dtype)


# ----------------------------------------------------------------------------- matmul_ws
@pytest.mark.parametrize("M,N,K,BN,BK,STAGES", [
    (128, 64, 64, 64, 64, 2),      # one tile, one k-step: fewer k-steps than stages
    (100, 72, 136, 64, 64, 2),     # ragged M, N, K: 1 x 2 tiles, 3 k-steps
    (300, 264, 200, 128, 32, 3),   # 3 x 3 tiles, 7 k-steps over 3 stages
    (200, 40, 520, 64, 32, 2),     # 17 k-steps: each barrier goes through 8-9 phases
])
def test_matmul_ws(M, N, K, BN, BK, STAGES):
    ws_kernel = pytest.importorskip("ws_kernel")
    a, b = randn(M, K, seed=1), randn(K, N, seed=2)
    c = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    try:  # a producer warpgroup and two consumers: 12 warps
        ws_kernel.matmul_ws[(kit.cdiv(M, 128), kit.cdiv(N, BN))](
            a, b, c, M, N, K, BM=128, BN=BN, BK=BK, STAGES=STAGES, num_warps=12)
    except ValueError as e:
        if "num_warps must be a power of two" not in str(e):
            raise
        pytest.xfail("kit.jit refuses num_warps=12, which 3 warpgroups need")
    assert not torch.isnan(c).any(), f"{int(torch.isnan(c).sum())} elements of C unwritten"
    assert rel_error(c, a.double() @ b.double()) < 1e-2  # bf16 output


# ----------------------------------------------------------------------------- a stage ring
@kit.jit
def ring_copy(X, E, Y, n, R: kit.constexpr, C: kit.constexpr, STAGES: kit.constexpr,
              BUG: kit.constexpr, PENDING: kit.constexpr):
    """Y block i = X block i @ E for n blocks of R rows, through a ring of STAGES stages:
    warpgroup 0 loads, warpgroup 1 multiplies and stores. BUG > 0 breaks it (see below)."""
    x = kit.shared((STAGES, R, C), X.dtype.element_ty)
    e = kit.shared((C, C), E.dtype.element_ty)
    ready = kit.mbarriers(STAGES)
    empty = kit.mbarriers(STAGES)
    got_e = kit.mbarriers(1)
    if kit.warpgroup_id() == 0:
        kit.setmaxnreg(40)
        kit.tma_load(e, E, (0, 0), got_e[0])
        for i in range(n):
            s = i % STAGES
            if BUG == 1:    # waits for the wrong parity
                kit.mbarrier_wait(empty[s], i // STAGES % 2)
            elif BUG != 4:  # (4: does not wait for the stage to be free)
                kit.mbarrier_wait(empty[s], i // STAGES % 2 ^ 1)
            kit.tma_load(x[s], X, (i * R, 0), ready[s])
    else:
        kit.setmaxnreg(232)
        kit.mbarrier_wait(got_e[0], 0)
        for i in range(n):
            s = i % STAGES
            if BUG == 2:    # waits for the wrong parity
                kit.mbarrier_wait(ready[s], i // STAGES % 2 ^ 1)
            elif BUG != 5:  # (5: does not wait for the stage to land)
                kit.mbarrier_wait(ready[s], i // STAGES % 2)
            if BUG == 3:    # frees the stage before the MMA reads it
                kit.mbarrier_arrive(empty[s])
            y = kit.mma(x[s], e, kit.zeros((R, C), kit.float32), pending=PENDING)
            if BUG != 3:
                kit.mbarrier_arrive(empty[s])
            kit.barrier()  # the role's own named barrier
            r = i * R + kit.arange(0, R)
            c = kit.arange(0, C)
            kit.store(Y + r[:, None] * C + c[None, :], y)  # with PENDING=1: retires the MMA


def run_ring(n, stages, bug=0, pending=0, R=64, C=64):
    X = randn(n * R, C, seed=3)
    Y = torch.full((n * R, C), float("nan"))
    ring_copy[(1,)](X, torch.eye(C, dtype=torch.bfloat16), Y, n, R=R, C=C, STAGES=stages,
                    BUG=bug, PENDING=pending, num_warps=8)
    return X, Y


@pytest.mark.parametrize("n,stages", [(1, 2), (2, 2), (13, 2), (14, 3), (9, 4)])
def test_stage_ring_phases_wrap(n, stages):
    X, Y = run_ring(n, stages)
    assert torch.equal(Y, X.float())  # X @ I is exact: every block from its own stage


def test_consumer_waiting_for_the_wrong_parity_deadlocks():
    with pytest.raises(DeadlockError) as e:
        run_ring(5, 2, bug=2)
    msg = str(e.value)
    assert msg.startswith("deadlock in program (0, 0, 0): every role waits")
    assert "this would hang the GPU" in msg
    # the producer filled both stages and waits for the consumer to free stage 0 ...
    assert "warpgroup 0 at " in msg and "in 'ring_copy' waits for empty[0] to complete " \
        "phase 0 (parity 0), which still needs 1 of 1 arrival" in msg
    assert "kit.mbarrier_wait(empty[s], i // STAGES % 2 ^ 1)" in msg
    assert "i = 2 (range(0, 5, 1))" in msg
    # ... while the consumer waits for the phase after the one that landed
    assert "warpgroup 1 at " in msg and "waits for ready[0] to complete phase 1 (parity 1), " \
        "which still needs 1 of 1 arrival" in msg
    assert "kit.mbarrier_wait(ready[s], i // STAGES % 2 ^ 1)" in msg
    assert "i = 0 (range(0, 5, 1))" in msg
    assert "hint: the k-th phase of a barrier" in msg


def test_producer_waiting_for_the_wrong_parity_deadlocks():
    # a fresh barrier is in phase 0: waiting for parity 0 blocks until a phase completes
    with pytest.raises(DeadlockError, match=r"warpgroup 0 at .* waits for empty\[0\] to "
                                            r"complete phase 0 \(parity 0\)") as e:
        run_ring(3, 2, bug=1)
    assert "kit.mbarrier_wait(empty[s], i // STAGES % 2)\n" in str(e.value)
    assert "warpgroup 1 at " in str(e.value) and "ready[0]" in str(e.value)


# Races: the schedule here happens to give the right numbers (the producer runs until it
# waits), but the GPU may not; the interpreter tracks what the barriers order (vector
# clocks) and raises where nothing does.
def test_freeing_a_stage_before_the_mma_reads_it_is_a_race():
    with pytest.raises(RaceError) as e:
        run_ring(5, 2, bug=3)
    msg = str(e.value)
    assert "race on shared memory" in msg and "kit.tma_load(x[s], X, (i * R, 0), ready[s])" in msg
    assert "overwrites shared memory that warpgroup 1 reads in the kit.mma at line" in msg
    assert "nothing orders that read before this load" in msg
    assert "i = 2 (range(0, 5, 1))" in msg  # the first reuse of stage 0


def test_freeing_a_stage_while_its_mma_is_in_flight_is_a_race():
    # pending=1: the MMA still reads x[s] when the consumer arrives; the store retires it
    with pytest.raises(RaceError, match="overwrites shared memory that warpgroup 1 reads"):
        run_ring(5, 2, pending=1)


def test_producer_not_waiting_for_a_free_stage_is_a_race():
    with pytest.raises(RaceError, match=r"(?s)overwrites shared memory that the TMA load at "
                                        r"line \d+ \(kit.tma_load\(x\[s\].*may still be "
                                        r"writing.*i = 2 \(range"):
        run_ring(5, 2, bug=4)


def test_consumer_not_waiting_for_its_stage_is_a_race():
    with pytest.raises(RaceError, match=r"(?s)the A tile of this kit.mma is written by the TMA "
                                        r"load at line \d+.*warpgroup 1 has not seen ready\[0\] "
                                        r"complete phase 0.*kit.mbarrier_wait\(ready\[0\], 0\)"):
        run_ring(5, 2, bug=5)


@kit.jit
def no_wait(X, Y, LOAD: kit.constexpr, WAIT: kit.constexpr):
    x = kit.shared((64, 64), X.dtype.element_ty)
    bar = kit.mbarriers(1)
    if LOAD:
        kit.tma_load(x, X, (0, 0), bar[0])
    if WAIT:
        kit.mbarrier_wait(bar[0], 0)
    acc = kit.mma(x, x, kit.zeros((64, 64), kit.float32))
    kit.store(Y + kit.arange(0, 64)[:, None] * 64 + kit.arange(0, 64)[None, :], acc)


def test_reads_of_shared_memory_without_roles():
    X, Y = randn(64, 64), torch.zeros(64, 64)
    no_wait[(1,)](X, Y, LOAD=True, WAIT=True, num_warps=4)
    assert rel_error(Y, X.double() @ X.double()) < 1e-5
    with pytest.raises(RaceError, match="its copy is still in flight: nothing has waited"):
        no_wait[(1,)](X, Y, LOAD=True, WAIT=False, num_warps=4)
    with pytest.raises(RaceError, match="read of uninitialized shared memory"):
        no_wait[(1,)](X, Y, LOAD=False, WAIT=False, num_warps=4)


# ----------------------------------------------------------------------------- arrivals
@kit.jit
def arrive_split(Y, ARRIVALS: kit.constexpr, SPLIT: kit.constexpr):
    """Warpgroups below SPLIT arrive (once per warpgroup), the rest wait for the phase."""
    bar = kit.mbarriers(1, arrivals=ARRIVALS)
    if kit.warpgroup_id() < SPLIT:
        kit.mbarrier_arrive(bar[0])
    else:
        kit.mbarrier_wait(bar[0], 0)
        kit.store(Y + kit.arange(0, 16), kit.full((16,), 1.0, kit.float32))


@pytest.mark.parametrize("num_warps,split,arrivals,ok", [
    (16, 2, 2, True),    # a role of two warpgroups arrives twice
    (16, 2, 3, False),   # two of three
    (8, 1, 1, True),
    (8, 1, 2, False),    # one warpgroup arrives once
    (16, 3, 3, True),
])
def test_mbarrier_arrive_counts_once_per_warpgroup(num_warps, split, arrivals, ok):
    Y = torch.zeros(16)
    if ok:
        arrive_split[(2,)](Y, ARRIVALS=arrivals, SPLIT=split, num_warps=num_warps)
        assert torch.equal(Y, torch.ones(16))
    else:
        got = split
        with pytest.raises(DeadlockError, match=rf"waits? for bar\[0\] to complete phase 0 "
                                                rf"\(parity 0\), which still needs "
                                                rf"{arrivals - got} of {arrivals} arrivals"):
            arrive_split[(2,)](Y, ARRIVALS=arrivals, SPLIT=split, num_warps=num_warps)


@kit.jit
def arrive_plain(Y, ARRIVALS: kit.constexpr):
    """No roles: every warpgroup of the CTA arrives, then all wait."""
    bar = kit.mbarriers(1, arrivals=ARRIVALS)
    kit.mbarrier_arrive(bar[0])
    kit.mbarrier_wait(bar[0], 0)
    kit.store(Y + kit.arange(0, 16), kit.full((16,), 1.0, kit.float32))


def test_mbarrier_arrive_without_roles():
    Y = torch.zeros(16)
    arrive_plain[(1,)](Y, ARRIVALS=2, num_warps=8)
    assert torch.equal(Y, torch.ones(16))
    with pytest.raises(DeadlockError) as e:
        arrive_plain[(1,)](Y, ARRIVALS=2, num_warps=4)
    msg = str(e.value)
    assert msg.startswith("deadlock at ") and "in 'arrive_plain', program (0, 0, 0)" in msg
    assert "kit.mbarrier_wait(bar[0], 0)" in msg
    assert "still needs 1 of 2 arrivals; nothing else runs in this program (it has no " \
        "roles)" in msg


@kit.jit
def wait_twice(X, Y, FRESH: kit.constexpr, P0: kit.constexpr, P1: kit.constexpr):
    """No roles: one load, then waits for parities P0 and P1 (FRESH: first a wait for
    parity 1 before the load)."""
    x = kit.shared((64, 64), X.dtype.element_ty)
    bar = kit.mbarriers(1)
    if FRESH:
        kit.mbarrier_wait(bar[0], 1)
    kit.tma_load(x, X, (0, 0), bar[0])
    for i in range(3):
        if i == 2:
            kit.mbarrier_wait(bar[0], P0)
            kit.mbarrier_wait(bar[0], P1)
    kit.store(Y + kit.arange(0, 16), kit.full((16,), 1.0, kit.float32))


def test_waits_without_roles_follow_the_phases():
    X, Y = randn(64, 64), torch.zeros(16)
    wait_twice[(1,)](X, Y, FRESH=False, P0=0, P1=0, num_warps=4)  # phase 0 is done, twice
    wait_twice[(1,)](X, Y, FRESH=True, P0=0, P1=0, num_warps=4)  # parity 1 of a fresh one
    with pytest.raises(DeadlockError, match=r"(?s)waits for bar\[0\] to complete phase 1 "
                                            r"\(parity 1\).*in the loop at line \d+: i = 2"):
        wait_twice[(1,)](X, Y, FRESH=False, P0=0, P1=1, num_warps=4)


@kit.jit
def two_groups(X, Y, SPLIT: kit.constexpr, ARRIVALS: kit.constexpr):
    """Two TMA loads on one barrier; SPLIT puts an MMA between them (two groups)."""
    x = kit.shared((2, 64, 64), X.dtype.element_ty)
    bar = kit.mbarriers(1, arrivals=ARRIVALS)
    kit.tma_load(x[0], X, (0, 0), bar[0])
    if SPLIT:
        kit.barrier()
    kit.tma_load(x[1], X, (64, 0), bar[0])
    kit.mbarrier_wait(bar[0], 0)
    acc = kit.mma(x[0], x[1], kit.zeros((64, 64), kit.float32))
    kit.store(Y + kit.arange(0, 64)[:, None] * 64 + kit.arange(0, 64)[None, :], acc)


def test_tma_groups_arrive_once():
    X, Y = randn(128, 64), torch.zeros(64, 64)
    ref = X[:64].double() @ X[64:].double()
    two_groups[(1,)](X, Y, SPLIT=False, ARRIVALS=1, num_warps=4)  # one group, one arrival
    assert rel_error(Y, ref) < 1e-5
    two_groups[(1,)](X, Y, SPLIT=True, ARRIVALS=2, num_warps=4)   # two groups, two arrivals
    assert rel_error(Y, ref) < 1e-5
    # two arrivals on a barrier that expects one, before the first copy has landed
    with pytest.raises(MBarrierError, match=r"(?s)too many arrivals on an mbarrier.*"
                                            r"kit.tma_load\(x\[1\], X, \(64, 0\), bar\[0\]\)"
                                            r".*bar\[0\] expects 1 arrival per phase"):
        two_groups[(1,)](X, Y, SPLIT=True, ARRIVALS=1, num_warps=4)


# ----------------------------------------------------------------------------- role identity
@kit.jit
def who(Y, K: kit.constexpr):
    kit.store(Y + kit.arange(0, 16), kit.full((16,), 0, kit.int32) + kit.warpgroup_id())
    if kit.warpgroup_id() >= K:
        kit.store(Y + 16 + kit.arange(0, 16), kit.full((16,), 0, kit.int32) +
                  kit.warpgroup_id())
    else:
        kit.store(Y + 32 + kit.arange(0, 16), kit.full((16,), 0, kit.int32) +
                  kit.warpgroup_id())


def test_tile_in_a_role_of_three_warpgroups_is_a_compile_error():
    from kitjit.frontend.errors import CompileError

    Y = torch.full((48,), -1, dtype=torch.int32)
    with pytest.raises(CompileError, match="not a power of two"):
        who[(1,)](Y, K=3, num_warps=16)


@pytest.mark.parametrize("num_warps,k", [(8, 1), (16, 2)])
def test_warpgroup_id_inside_roles(num_warps, k):
    # the then role is (k, n - k), the else role (0, k); a role of several warpgroups gives
    # its first (on an H200 the 8- and 16-warp cases with k <= 2 stored the same)
    Y = torch.full((48,), -1, dtype=torch.int32)
    who[(1,)](Y, K=k, num_warps=num_warps)
    assert Y.tolist() == [0] * 16 + [k] * 16 + [0] * 16


@kit.jit
def chain(Y):
    """Roles within a role (16 warps): warpgroups 2-3 -> 1 -> 0, each waiting for the one
    before."""
    a = kit.mbarriers(1, arrivals=2)
    b = kit.mbarriers(1)
    if kit.warpgroup_id() == 0:
        kit.mbarrier_wait(b[0], 0)
        offs = kit.arange(0, 16)
        kit.store(Y + offs, kit.load(Y + 16 + offs) + 1)
    else:
        if kit.warpgroup_id() == 1:
            kit.mbarrier_wait(a[0], 0)
            offs = kit.arange(0, 16)
            kit.store(Y + 16 + offs, kit.load(Y + 32 + offs) + 1)
            kit.mbarrier_arrive(b[0])
        else:
            offs = kit.arange(0, 16)
            kit.store(Y + 32 + offs, kit.full((16,), 1, kit.int32))
            kit.mbarrier_arrive(a[0])


def test_roles_within_a_role():
    Y = torch.zeros(48, dtype=torch.int32)
    chain[(2,)](Y, num_warps=16)
    assert Y.tolist() == [3] * 16 + [2] * 16 + [1] * 16


# ------------------------------------------------------------------ named barriers
@kit.jit
def turns_kernel(X, Y, ID: kit.constexpr, THREADS: kit.constexpr):
    """Two consumer warpgroups take turns (kit.named_barrier_*): an execution order only,
    so the interpreter, which runs a role as one program, computes the plain result."""
    if kit.warpgroup_id() == 0:
        kit.setmaxnreg(24)
    else:
        wg = kit.warpgroup_id() - 1
        if wg == 0:
            kit.named_barrier_arrive(ID, THREADS)
        kit.named_barrier_wait(wg, THREADS)
        offs = kit.arange(0, 128)
        kit.store(Y + offs, kit.load(X + offs) * 2.0)
        kit.named_barrier_arrive((wg + 1) % 2, THREADS)


def test_named_barriers_order_only():
    x = randn(128, dtype=torch.float32)
    y = torch.full((128,), float("nan"))
    turns_kernel[(1,)](x, y, ID=0, THREADS=256, num_warps=12)
    assert torch.equal(y, x * 2)


@pytest.mark.parametrize("ID,THREADS,msg", [(8, 256, "0-7"), (0, 100, "multiple of 32")])
def test_named_barrier_arguments_are_checked(ID, THREADS, msg):
    from kitjit.frontend.errors import CompileError

    with pytest.raises(CompileError, match=msg):
        turns_kernel[(1,)](randn(128, dtype=torch.float32), torch.empty(128), ID=ID,
                           THREADS=THREADS, num_warps=12)

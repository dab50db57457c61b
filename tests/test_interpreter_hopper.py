"""Level-2 (Hopper) ops in the CPU interpreter: shared tiles, TMA loads, mbarriers, WGMMA.

The matmul example runs through its torch-facing wrapper against a float64 reference; small
hand-written kernels pin down what the interpreter promises: TMA loads read zero outside the
tensor (negative coordinates too) and TMA stores write nothing there, what stops a TMA copy
on the GPU (a box starting a non-multiple of 16 bytes into a row; a store box starting at a
negative coordinate) raises here, strided tensors, the launcher's checks on TMA tensors,
`.T` views, shared memory that is each program's own,
`pending` MMAs (a TMA load over a stage an MMA may still read raises `RaceError`), and shared
values carried by loops and branches (built by hand: the frontend does not write those yet).
"""

from __future__ import annotations

import pathlib
import sys
import types

import pytest
import torch

import kitjit as kit
from kitjit.interpreter import OutOfBoundsError, RaceError, run
from kitjit.ir.core import Block, Function, Op, Value
from kitjit.ir.types import (
    PointerDType,
    TileType,
    bfloat16,
    float32,
    int1,
    int32,
    mbarrier,
    tma_desc,
)
from kitjit.testing import rel_error

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


def randn(*shape, dtype=torch.bfloat16, seed=0):
    """Normal values, never zero (a zero input could hide an element that was never read)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    return torch.where(x.abs() < 1e-3, 0.5, x).to(dtype)


class _PoisonedTorch(types.ModuleType):
    """`torch` for the example module, with `empty` handing out NaN-filled tensors."""

    def __init__(self):
        super().__init__("torch")
        self.made: list[torch.Tensor] = []

    def __getattr__(self, name):
        return getattr(torch, name)

    def empty(self, *args, **kwargs):
        out = torch.empty(*args, **kwargs).fill_(float("nan"))
        self.made.append(out)
        return out


def run_matmul(monkeypatch, a, b, **opts):
    mm = pytest.importorskip("matmul")
    poisoned = _PoisonedTorch()
    monkeypatch.setattr(mm, "torch", poisoned)
    c = mm.matmul(a, b, **opts)
    assert any(c.data_ptr() == t.data_ptr() for t in poisoned.made), "output not poisoned"
    assert not torch.isnan(c).any(), f"{int(torch.isnan(c).sum())} elements of C unwritten"
    return c


# ----------------------------------------------------------------------------- matmul example
SMALL = dict(BM=64, BN=64, BK=64, STAGES=2, num_warps=4)
MATMUL_CASES = [  # M, N, K, dtype, tile options
    (128, 256, 64, torch.bfloat16, {}),                  # one tile; fewer k-steps than stages
    (200, 264, 136, torch.bfloat16, {}),                 # ragged M, N and K: 2 x 2 tiles
    (200, 296, 200, torch.bfloat16, SMALL),              # 4 x 5 tiles, 4 k-steps, 2 stages
    (136, 72, 264, torch.float16,
     dict(BM=64, BN=128, BK=64, STAGES=4, num_warps=4)),  # fp16, 4 stages
    (64, 64, 40, torch.bfloat16, SMALL),                 # K smaller than one k-step
]


@pytest.mark.parametrize("M,N,K,dtype,opts", MATMUL_CASES,
                         ids=[f"{m}x{n}x{k}-{str(d)[6:]}-{o.get('BM', 128)}x{o.get('BN', 256)}"
                              for m, n, k, d, o in MATMUL_CASES])
def test_matmul_example(monkeypatch, M, N, K, dtype, opts):
    a, b = randn(M, K, dtype=dtype, seed=1), randn(K, N, dtype=dtype, seed=2)
    c = run_matmul(monkeypatch, a, b, **opts)
    assert c.shape == (M, N) and c.dtype == dtype
    assert rel_error(c, a.double() @ b.double()) < 1e-2


def test_matmul_example_on_strided_views(monkeypatch):
    """TMA tensors that are views: an offset start and rows longer than the view."""
    M, N, K = 96, 136, 72
    big_a = randn(M + 3, K + 24, seed=3)
    big_b = randn(K + 5, N + 40, seed=4)
    a, b = big_a[2:2 + M, 8:8 + K], big_b[1:1 + K, 16:16 + N]
    assert not a.is_contiguous() and not b.is_contiguous()
    c = run_matmul(monkeypatch, a, b, **SMALL)
    assert rel_error(c, a.double() @ b.double()) < 1e-2


@pytest.mark.parametrize("what", ["rows_not_16B_apart", "transposed", "3d"])
def test_tma_tensors_are_checked_like_on_the_gpu(what):
    """What the GPU launcher refuses (kitjit.runtime.driver.tensor_map), the interpreter
    refuses too, so a kernel that runs here also launches there."""
    X = randn(64, 64)
    if what == "rows_not_16B_apart":
        X = randn(64, 65)[:, :64]   # rows 130 bytes apart
        match = "rows a multiple of 16 bytes apart"
    elif what == "transposed":
        X = X.t()
        match = "contiguous in its last dim"
    else:
        X = X.reshape(1, 64, 64)
        match = "must be 2-d"
    Y = torch.full((64, 64), float("nan"))
    with pytest.raises(ValueError, match=match):
        box_kernel[(1,)](X, torch.eye(64, dtype=torch.bfloat16), Y, 0, 0, R=64, C=64,
                         num_warps=4)


# ----------------------------------------------------------------------------- TMA boxes
@kit.jit
def box_kernel(X, E, Y, r0, c0, R: kit.constexpr, C: kit.constexpr):
    """Y = the box of X at (r0, c0), read back through an MMA with the identity E."""
    x = kit.shared((R, C), X.dtype.element_ty)
    e = kit.shared((C, C), E.dtype.element_ty)
    bars = kit.mbarriers(1)
    kit.tma_load(x, X, (r0, c0), bars[0])
    kit.tma_load(e, E, (0, 0), bars[0])
    kit.mbarrier_wait(bars[0], 0)
    kit.barrier()
    acc = kit.mma(x, e, kit.zeros((R, C), kit.float32))
    r = kit.arange(0, R)
    c = kit.arange(0, C)
    kit.store(Y + r[:, None] * C + c[None, :], acc)


def box_ref(X, r0, c0, R, C):
    out = torch.zeros(R, C, dtype=torch.float64)
    h, w = X.shape
    rs, re, cs, ce = max(r0, 0), min(r0 + R, h), max(c0, 0), min(c0 + C, w)
    if rs < re and cs < ce:
        out[rs - r0:re - r0, cs - c0:ce - c0] = X[rs:re, cs:ce].double()
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("r0,c0", [(0, 0), (36, 8), (64, 32), (-8, -16), (-64, 0), (100, 0),
                                   (0, 72)])
def test_tma_box_reads_zero_outside_the_tensor(dtype, r0, c0):
    X = randn(100, 72, dtype=dtype, seed=5)   # 100 rows; 72 columns = 144 bytes per row
    Y = torch.full((64, 64), float("nan"))
    box_kernel[(1,)](X, torch.eye(64, dtype=dtype), Y, r0, c0, R=64, C=64, num_warps=4)
    assert torch.equal(Y.double(), box_ref(X, r0, c0, 64, 64))  # x @ I is exact


@kit.jit
def per_program_kernel(X, E, Y, R: kit.constexpr, C: kit.constexpr):
    """Each program loads its own block of X into its own shared memory."""
    pid = kit.program_id(0)
    x = kit.shared((R, C), X.dtype.element_ty)
    e = kit.shared((C, C), E.dtype.element_ty)
    bars = kit.mbarriers(1)
    kit.tma_load(x, X, (pid * R, 0), bars[0])
    kit.tma_load(e, E, (0, 0), bars[0])
    kit.mbarrier_wait(bars[0], 0)
    acc = kit.mma(x, e, kit.zeros((R, C), kit.float32))
    r = kit.arange(0, R)
    c = kit.arange(0, C)
    kit.store(Y + pid * R * C + r[:, None] * C + c[None, :], acc)


def test_shared_memory_is_each_programs_own():
    X = randn(3 * 64, 64, seed=6)
    Y = torch.full((3, 64, 64), float("nan"))
    per_program_kernel[(3,)](X, torch.eye(64, dtype=torch.bfloat16), Y, R=64, C=64,
                             num_warps=4)
    assert torch.equal(Y.reshape(3 * 64, 64), X.float())


@kit.jit
def store_kernel(X, P, Y, r0, c0, R: kit.constexpr, C: kit.constexpr):
    """Y[box at (r0, c0)] = X[:R, :C] @ P.T, with P.T a transposed view of a shared tile."""
    x = kit.shared((R, C), X.dtype.element_ty)
    p = kit.shared((C, C), P.dtype.element_ty)
    bars = kit.mbarriers(1)
    kit.tma_load(x, X, (0, 0), bars[0])
    kit.tma_load(p, P, (0, 0), bars[0])
    kit.mbarrier_wait(bars[0], 0)
    acc = kit.mma(x, p.T, kit.zeros((R, C), kit.float32))
    kit.tma_store(Y, (r0, c0), acc.to(Y.dtype.element_ty))


def run_store(r0, c0, R=64, C=64, H=100, W=72):
    X = randn(R, C, seed=10)
    perm = torch.randperm(C, generator=torch.Generator().manual_seed(11))
    P = torch.eye(C, dtype=torch.bfloat16)[perm]          # P.T is another permutation
    big = torch.full((H + 2, W + 16), float("nan"), dtype=torch.bfloat16)
    Y = big[1:1 + H, 8:8 + W]                             # a view with longer rows
    store_kernel[(1,)](X, P, Y, r0, c0, R=R, C=C, num_warps=4)
    return X, P, perm, big


@pytest.mark.parametrize("r0,c0", [(0, 0), (36, 8), (37, 8), (60, 16), (99, 64), (100, 0),
                                   (0, 72)])
def test_tma_store_writes_only_inside_the_tensor(r0, c0):
    R = C = 64
    H, W = 100, 72
    X, P, perm, big = run_store(r0, c0)
    box = X.double() @ P.double().t()
    assert torch.equal(box, X.double()[:, perm]) and not torch.equal(P, P.t())
    ref = torch.full((H + 2, W + 16), float("nan"), dtype=torch.float64)
    rs, re, cs, ce = max(r0, 0), min(r0 + R, H), max(c0, 0), min(c0 + C, W)
    if rs < re and cs < ce:
        ref[1 + rs:1 + re, 8 + cs:8 + ce] = box[rs - r0:re - r0, cs - c0:ce - c0]
    assert torch.equal(big.double().nan_to_num(-1e9), ref.nan_to_num(-1e9))


# On an H200 these stop the kernel with an illegal instruction; the interpreter says why.
@pytest.mark.parametrize("r0,c0", [(0, 1), (3, 5), (0, 4), (0, 71), (-3, -5)])
def test_tma_box_columns_must_start_16_bytes_apart(r0, c0):
    X, Y = randn(100, 72), torch.full((64, 64), float("nan"))
    with pytest.raises(OutOfBoundsError, match=rf"misaligned TMA load(.|\n)*starts at column "
                                               rf"{c0} of 'X', {2 * c0} bytes into a row"):
        box_kernel[(1,)](X, torch.eye(64, dtype=torch.bfloat16), Y, r0, c0, R=64, C=64,
                         num_warps=4)
    with pytest.raises(OutOfBoundsError, match="misaligned TMA store"):
        run_store(r0, c0)


@pytest.mark.parametrize("r0,c0", [(-1, 0), (0, -8), (-64, 0), (-8, -16)])
def test_tma_store_at_negative_coordinates(r0, c0):
    with pytest.raises(OutOfBoundsError, match=rf"out-of-bounds TMA store(.|\n)*the box "
                                               rf"starts at \({r0}, {c0}\) of 'Y'"):
        run_store(r0, c0)


# ----------------------------------------------------------------------------- pending MMAs
@kit.jit
def ring_kernel(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
                STAGES: kit.constexpr, AHEAD: kit.constexpr, PENDING: kit.constexpr,
                TOUCH: kit.constexpr):
    """One tile of C = A @ B through a ring of STAGES stages with loads AHEAD k-steps ahead
    and MMAs issued with PENDING: right when PENDING <= STAGES - AHEAD (the load refills the
    stage of MMA i + AHEAD - STAGES). With TOUCH the loop reads the accumulator (a store),
    which waits for every MMA."""
    a = kit.shared((STAGES, BM, BK), A.dtype.element_ty)
    b = kit.shared((STAGES, BK, BN), B.dtype.element_ty)
    ready = kit.mbarriers(STAGES)
    n_k = kit.cdiv(K, BK)
    for s in kit.static_range(AHEAD):
        if s < n_k:
            kit.tma_load(a[s], A, (0, s * BK), ready[s])
            kit.tma_load(b[s], B, (s * BK, 0), ready[s])
    rm = kit.arange(0, BM)
    rn = kit.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    acc = kit.zeros((BM, BN), kit.float32)
    for i in range(n_k):
        s = i % STAGES
        kit.mbarrier_wait(ready[s], i // STAGES % 2)
        acc = kit.mma(a[s], b[s], acc, pending=PENDING)
        if TOUCH:
            kit.store(C + rm[:, None] * N + rn[None, :], acc, mask=mask)
        j = i + AHEAD
        if j < n_k:
            kit.tma_load(a[j % STAGES], A, (0, j * BK), ready[j % STAGES])
            kit.tma_load(b[j % STAGES], B, (j * BK, 0), ready[j % STAGES])
    kit.store(C + rm[:, None] * N + rn[None, :], acc, mask=mask)


def ring(stages, ahead, pending, touch=False, K=200):
    M, N = 50, 40
    a, b = randn(M, K, seed=7), randn(K, N, seed=8)
    c = torch.full((M, N), float("nan"))
    ring_kernel[(1,)](a, b, c, M, N, K, BM=64, BN=64, BK=32, STAGES=stages, AHEAD=ahead,
                      PENDING=pending, TOUCH=touch, num_warps=4)
    return c, a.double() @ b.double()


@pytest.mark.parametrize("stages,ahead,pending", [(2, 1, 0), (2, 1, 1), (3, 2, 1), (3, 2, 0),
                                                 (4, 2, 2), (3, 1, 2), (4, 1, 3)])
def test_pending_mmas(stages, ahead, pending):
    c, ref = ring(stages, ahead, pending)
    assert rel_error(c, ref) < 1e-5  # fp32 output: only summation order differs


@pytest.mark.parametrize("stages,ahead,pending", [(2, 1, 2), (3, 2, 2), (4, 2, 3), (4, 3, 2)])
def test_tma_load_over_a_stage_an_mma_may_read_is_a_race(stages, ahead, pending):
    with pytest.raises(RaceError, match=rf"pending={pending}\) may still be reading") as e:
        ring(stages, ahead, pending)
    # the first load into the stage of MMA i + ahead - stages, while that MMA is in flight
    assert "in the loop at line" in str(e.value)
    assert f"i = {stages - ahead} (range(0, 7, 1))" in str(e.value)
    assert "ring_kernel" in str(e.value) and "kit.tma_load" in str(e.value)


def test_reading_the_accumulator_waits_for_every_mma():
    c, ref = ring(2, 1, 2, touch=True)  # the store in the loop retires MMA i before the load
    assert rel_error(c, ref) < 1e-5


@kit.jit
def stage_kernel(X, E, Y, i, R: kit.constexpr, C: kit.constexpr):
    x = kit.shared((2, R, C), X.dtype.element_ty)
    bars = kit.mbarriers(2)
    kit.tma_load(x[i], X, (0, 0), bars[0])


def test_runtime_stage_index_out_of_range():
    X = randn(64, 64)
    stage_kernel[(1,)](X, X, X, 1, R=64, C=64, num_warps=4)
    with pytest.raises(OutOfBoundsError, match="index 2 of a shared tile with 2 stages"):
        stage_kernel[(1,)](X, X, X, 2, R=64, C=64, num_warps=4)


# ----------------------------------------------------------------------------- IR by hand
class _B:
    """A tiny IR builder for what the frontend cannot write yet (shared values carried by
    loops and branches)."""

    def __init__(self, block):
        self.block = block

    def op(self, name, operands, rtype=None, attrs=None, regions=None):
        results = [Value(rtype)] if rtype is not None else []
        self.block.append(Op(name, list(operands), results, dict(attrs or {}),
                             list(regions or [])))
        return results[0] if results else None

    def const(self, v, dt=int32):
        return self.op("constant", [], TileType(dt), {"value": v})


def test_shared_values_through_loops_and_ifs():
    """for i in range(n): acc = mma(cur, e, acc); cur = x[1]  (cur enters as x[0]);
    then cur = x[0] if flag else cur; acc = mma(cur, e, acc)."""
    R = 64
    smem = TileType(bfloat16, (2, R, R), space="smem")
    tile = TileType(bfloat16, (R, R), space="smem")
    acc_t = TileType(float32, (R, R))
    X, E, Y = (Value(TileType(PointerDType(dt)), n) for dt, n in
               ((bfloat16, "X"), (bfloat16, "E"), (float32, "Y")))
    n, flag = Value(TileType(int32), "n"), Value(TileType(int1), "flag")
    xd, ed = Value(TileType(tma_desc), "X.desc"), Value(TileType(tma_desc), "E.desc")
    fn = Function("k", [X, E, Y, n, flag, xd, ed], {"num_warps": 4})
    b = _B(fn.body)
    x = b.op("smem_alloc", [], smem)
    e = b.op("smem_alloc", [], tile)
    bars = b.op("smem_alloc", [], TileType(mbarrier, (2,), space="smem"), {"init": 1})
    c0, c1, cR = b.const(0), b.const(1), b.const(R)
    x0, x1 = b.op("smem_index", [x, c0], tile), b.op("smem_index", [x, c1], tile)
    bar = b.op("smem_index", [bars, c0], TileType(mbarrier, (), space="smem"))
    for dst, desc, row in ((x0, xd, c0), (x1, xd, cR), (e, ed, c0)):
        b.op("tma_load", [dst, desc, row, c0, bar], None, {"bytes": R * R * 2})
    b.op("mbar_wait", [bar, c0])
    acc0 = b.op("splat", [b.const(0.0, float32)], acc_t)

    body = Block()
    body.add_arg(TileType(int32), "i")
    cur_in, acc_in = body.add_arg(tile, "cur"), body.add_arg(acc_t, "acc")
    bb = _B(body)
    acc_next = bb.op("wgmma", [cur_in, e, acc_in], acc_t, {"pending": 1})
    bb.op("yield", [x1, acc_next])
    loop = Op("for", [c0, n, c1, x0, acc0], [Value(tile), Value(acc_t)], {}, [body])
    fn.body.append(loop)
    cur_l, acc_l = loop.results

    then_b, else_b = Block(), Block()
    _B(then_b).op("yield", [x0])
    _B(else_b).op("yield", [cur_l])
    br = Op("if", [flag], [Value(tile)], {}, [then_b, else_b])
    fn.body.append(br)
    acc = b.op("wgmma", [br.result, e, acc_l], acc_t, {"pending": 0})

    # Y[r, c] = acc[r, c]
    i32t = TileType(int32, (R,))
    ar = b.op("arange", [], i32t, {"start": 0, "end": R})
    rows = b.op("expand_dims", [ar], TileType(int32, (R, 1)), {"axis": 1})
    cols = b.op("expand_dims", [ar], TileType(int32, (1, R)), {"axis": 0})
    rows = b.op("mul", [rows, b.op("splat", [cR], TileType(int32, (R, 1)))],
                TileType(int32, (R, 1)))
    offs = b.op("add", [b.op("broadcast", [rows], TileType(int32, (R, R))),
                        b.op("broadcast", [cols], TileType(int32, (R, R)))],
                TileType(int32, (R, R)))
    pt = TileType(PointerDType(float32), (R, R))
    ptrs = b.op("addptr", [b.op("splat", [Y], pt), offs], pt)
    b.op("store", [ptrs, acc], None, {"has_mask": False})

    Xt = randn(2 * R, R, seed=9)
    x0r, x1r = Xt[:R].double(), Xt[R:].double()
    eye = torch.eye(R, dtype=torch.bfloat16)
    for steps, fl in ((0, False), (1, False), (3, False), (3, True)):
        out = torch.full((R, R), float("nan"))
        run(fn, (2, 1, 1), [Xt, eye, out, steps, fl, Xt, eye])
        terms = [x0r] + [x1r] * (steps - 1) if steps else []
        terms.append(x0r if fl or steps == 0 else x1r)
        assert rel_error(out, sum(terms)) < 1e-6, (steps, fl)

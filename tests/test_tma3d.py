"""3-d TMA copies: kit.tma_load / kit.tma_store with (batch, row, col) coordinates.

A 3-d descriptor keeps each batch entry's rows apart: a box that runs past an entry's last
row reads zeros (a store drops those rows) instead of the next entry's rows, as the GPU's
per-dimension bounds do. Attention reads K/V per head this way (issue 12: a NaN in one
head's V must not reach another head's output). Checked in the interpreter, in the PTX of
an sm_90a compile, and (gpu marker) on the device.
"""

from __future__ import annotations

import pytest
import torch

import kitjit as kit
from kitjit.testing import has_gpu


@kit.jit
def box3_kernel(X, E, Y, b, r0, R: kit.constexpr, C: kit.constexpr, STORE: kit.constexpr):
    """Y = the box of X at (b, r0, 0) @ I through shared memory; STORE: written back (a
    store box may run past the tensor's ends, not start before them)."""
    x = kit.shared((R, C), X.dtype.element_ty)
    e = kit.shared((C, C), E.dtype.element_ty)
    bars = kit.mbarriers(1)
    kit.tma_load(x, X, (b, r0, 0), bars[0])
    kit.tma_load(e, E, (0, 0), bars[0])
    kit.mbarrier_wait(bars[0], 0)
    acc = kit.mma(x, e, kit.zeros((R, C), kit.float32))
    r = kit.arange(0, R)
    c = kit.arange(0, C)
    kit.store(Y + r[:, None] * C + c[None, :], acc)          # the box as read
    if STORE:
        kit.tma_store(X, (b, r0, 0), acc.to(X.dtype.element_ty))  # and written back


def _box_ref(X, b, r0, R):
    """The box as the GPU reads it: rows of entry b only, zeros past its ends."""
    out = torch.zeros(R, X.shape[2], dtype=torch.float64)
    if 0 <= b < X.shape[0]:
        lo, hi = max(r0, 0), min(r0 + R, X.shape[1])
        if lo < hi:
            out[lo - r0:hi - r0] = X[b, lo:hi].double()
    return out


@pytest.mark.parametrize("b,r0", [(0, 0), (1, 40), (2, 70), (1, -16), (3, 0), (-1, 0)])
def test_box_stays_in_its_batch_entry(b, r0):
    R = C = 64
    g = torch.Generator().manual_seed(3)
    X = torch.randn(3, 100, C, generator=g).to(torch.bfloat16)
    X[(b + 1) % 3] = float("nan")                 # a neighbour's rows must not leak in
    X0 = X.clone()
    Y = torch.full((R, C), float("nan"))
    dev = "cuda" if has_gpu() else "cpu"
    Xd, Yd = X.to(dev), Y.to(dev)
    if b == (b + 1) % 3:
        pytest.skip("no neighbour")
    box3_kernel[(1,)](Xd, torch.eye(C, dtype=torch.bfloat16, device=dev), Yd, b, r0,
                      R=R, C=C, STORE=b >= 0 and r0 >= 0, num_warps=4)
    ref = _box_ref(X0, b, r0, R)
    assert torch.equal(Yd.cpu().double(), ref)
    # the store writes back entry b's own rows (the same values) and nothing else
    assert torch.equal(Xd.cpu().view(torch.int16), X0.view(torch.int16))


def test_store_before_the_first_batch_entry_raises():
    from kitjit.interpreter import OutOfBoundsError

    X = torch.zeros(3, 100, 64, dtype=torch.bfloat16)
    with pytest.raises(OutOfBoundsError, match="batch entry -1"):
        box3_kernel[(1,)](X, torch.eye(64, dtype=torch.bfloat16), torch.empty(64, 64), -1, 0,
                          R=64, C=64, STORE=True, num_warps=4)


def test_3d_tensor_with_2d_coords_is_refused():
    @kit.jit
    def mixed(X, Y, C: kit.constexpr):
        x = kit.shared((64, C), X.dtype.element_ty)
        bars = kit.mbarriers(1)
        kit.tma_load(x, X, (0, 0, 0), bars[0])
        kit.tma_load(x, X, (0, 0), bars[0])
        kit.mbarrier_wait(bars[0], 0)
        kit.store(Y + kit.arange(0, 64)[:, None] * C + kit.arange(0, C)[None, :], kit.load(x))

    X = torch.zeros(2, 64, 64, dtype=torch.bfloat16)
    with pytest.raises(Exception, match="3 here|2 here"):
        mixed[(1,)](X, torch.empty(64, 64, dtype=torch.bfloat16), C=64, num_warps=4)


def test_2d_tensor_for_3d_coords_is_refused():
    X = torch.zeros(128, 64, dtype=torch.bfloat16)
    with pytest.raises(Exception, match="3-d"):
        box3_kernel[(1,)](X, torch.eye(64, dtype=torch.bfloat16), torch.empty(64, 64), 0, 0,
                          R=64, C=64, STORE=True, num_warps=4)


def test_ptx_has_3d_bulk_copies():
    sig = ["*bf16:16", "*bf16:16", "*fp32:16", "i32", "i32"]
    ck = kit.compile_aot(__file__, "box3_kernel", sig, {"R": 64, "C": 64, "STORE": True}, 4,
                         "sm_90a")
    ptx = ck.asm["ptx"]
    assert "cp.async.bulk.tensor.3d.shared::cluster.global.tile" in ptx
    assert "cp.async.bulk.tensor.3d.global.shared::cta" in ptx
    assert "cp.async.bulk.tensor.2d.shared::cluster" in ptx   # E stays 2-d
    assert [t.get("batched", False) for t in ck.metadata["tma"]] == [True, False]


def test_sm80_copies_bound_each_batch_entry():
    """Below sm_90 (cp.async by every thread): the row descriptor carries the batch stride
    and count, the copy's rows are bounded by the entry (zero-filled past it), the store's
    too; the launcher builds that descriptor from a 3-d tensor."""
    sig = ["*bf16:16", "*bf16:16", "*fp32:16", "i32", "i32"]
    ck = kit.compile_aot(__file__, "box3_kernel", sig, {"R": 64, "C": 64, "STORE": True}, 4,
                         "sm_80")
    ptx = ck.asm["ptx"]
    assert "cp.async.cg.shared.global" in ptx and "cp.async.bulk" not in ptx
    assert [(t.get("kind"), t.get("batched", False)) for t in ck.metadata["tma"]] == \
        [("rows", True), ("rows", False)]
    from kitjit.runtime.ampere import row_map, row_map3, unpack

    X = torch.zeros(3, 100, 64, dtype=torch.bfloat16)
    addr = row_map3(X, 64, 64, 128, "bf16")
    assert unpack(addr) == (X.data_ptr(), 100, 64, 128)
    import ctypes
    extra = (ctypes.c_uint64 * 5).from_address(addr)
    assert (extra[3], extra[4]) == (100 * 64 * 2, 3)
    with pytest.raises(ValueError, match="3-d"):
        row_map3(X.view(300, 64), 64, 64, 128, "bf16")
    with pytest.raises(ValueError, match="2-d"):
        row_map(X, 64, 64, 128, "bf16")


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
@pytest.mark.parametrize("arch", [None, "sm_80"])
def test_box_stays_in_its_batch_entry_gpu(arch):
    R = C = 64
    for b, r0 in [(1, 40), (2, 70), (3, 0), (1, -16), (0, 90)]:
        g = torch.Generator().manual_seed(b + 7)
        X = torch.randn(3, 100, C, generator=g).to(torch.bfloat16)
        X[(b + 1) % 3] = float("nan")
        X0 = X.clone()
        Xd = X.cuda()
        Y = torch.full((R, C), float("nan"), device="cuda")
        box3_kernel[(1,)](Xd, torch.eye(C, dtype=torch.bfloat16, device="cuda"), Y, b, r0,
                          R=R, C=C, STORE=r0 >= 0 and b < 3, num_warps=4, arch=arch)
        assert torch.equal(Y.cpu().double(), _box_ref(X0, b, r0, R)), (b, r0)
        assert torch.equal(Xd.cpu().view(torch.int16), X0.view(torch.int16)), (b, r0)


@kit.jit
def stream_kernel(X, Y, L2: kit.constexpr):
    """A box of X read with the given L2 promotion and written to Y (64 x 64 bf16)."""
    x = kit.shared((64, 64), X.dtype.element_ty)
    bars = kit.mbarriers(1)
    kit.tma_load(x, X, (0, 0, 0), bars[0], l2_promotion=L2)
    kit.mbarrier_wait(bars[0], 0)
    r = kit.arange(0, 64)
    kit.store(Y + r[:, None] * 64 + r[None, :], kit.load(x))


def test_l2_promotion_is_the_descriptors_and_changes_no_value():
    """kit.tma_load(..., l2_promotion=): a property of the tensor argument's descriptor (in
    the kernel's TMA metadata, 256 by default and then absent), passed to the encoding, a
    hint only: the interpreter's values are the same."""
    sig = ["*bf16:16", "*bf16:16"]
    metas = {L2: kit.compile_aot(__file__, "stream_kernel", sig, {"L2": L2}, 4,
                                 "sm_90a").metadata["tma"] for L2 in (0, 128, 256)}
    assert metas[0][0]["l2"] == 0 and metas[128][0]["l2"] == 128 and "l2" not in metas[256][0]
    X = torch.randn(2, 64, 64).to(torch.bfloat16)
    for L2 in (0, 256):
        Y = torch.full((64, 64), float("nan"), dtype=torch.bfloat16)
        stream_kernel[(1,)](X, Y, L2=L2, num_warps=4)
        assert torch.equal(Y, X[0])


def test_l2_promotion_refuses_bad_values_and_disagreement():
    from kitjit.frontend.errors import CompileError

    X = torch.zeros(2, 64, 64, dtype=torch.bfloat16)
    Y = torch.empty(64, 64, dtype=torch.bfloat16)
    with pytest.raises(CompileError, match="l2_promotion must be a constexpr 0, 64, 128"):
        stream_kernel[(1,)](X, Y, L2=100, num_warps=4)

    @kit.jit
    def two(X, Y):
        x = kit.shared((64, 64), X.dtype.element_ty)
        bars = kit.mbarriers(1)
        kit.tma_load(x, X, (0, 0, 0), bars[0], l2_promotion=0)
        kit.tma_load(x, X, (1, 0, 0), bars[0])
        kit.mbarrier_wait(bars[0], 0)
        kit.store(Y + kit.arange(0, 64)[:, None] * 64 + kit.arange(0, 64)[None, :],
                  kit.load(x))

    with pytest.raises(CompileError, match="l2_promotion=0 elsewhere and 256 here"):
        two[(1,)](X, Y, num_warps=4)

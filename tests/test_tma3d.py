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


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
def test_box_stays_in_its_batch_entry_gpu():
    for b, r0 in [(1, 40), (2, 70), (3, 0), (1, -16)]:
        test_box_stays_in_its_batch_entry(b, r0)

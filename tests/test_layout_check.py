"""Layouts thread by thread, without a GPU (kitjit/ir/layout_check.py): every tile of the
shape-op and scan kernels, at the specializations their tests launch, holds each element,
stores it once, and broadcasts rename registers of the same thread. The first H100 run
found `kit.unsqueeze(x, 1).broadcast_to(B, 2)` storing one column of two per row: the
broadcast's tile took a reshape's relabeled layout at a shape it was not made for.
A scan is also run as the GPU runs it (butterfly over register, lane and warp bits) on a
numpy model of the CTA's threads."""

from __future__ import annotations

import numpy as np
import pytest
import test_scan as SC
import test_shape_ops as SH
import torch
from lang_helpers import spec_of

from kitjit.ir.layout_check import lin_problems, problems, stores
from kitjit.ir.layouts import Blocked, Joined, Reshaped, Slice, Stacked, default_blocked


def ir_of(jf, *args, num_warps=4, **consts):
    specs = [spec_of(a) for a in args]
    return jf.build_ir(specs, tuple(consts[c] for c in jf.constexprs), num_warps)


f32, i32 = torch.zeros(8), torch.zeros(8, dtype=torch.int32)
f16, i8 = torch.zeros(8, dtype=torch.float16), torch.zeros(8, dtype=torch.int8)
KERNELS = [
    *[(SH.dims_kernel, (f32,) * 4, {"BLOCK": b}, w) for b in (16, 128, 256) for w in (1, 4)],
    (SH.join_split, (f32,) * 6 + (50,), {"BLOCK": 64}, 4),
    (SH.join_split, (f16,) * 5 + (f32, 64), {"BLOCK": 512}, 4),
    (SH.split_loaded, (f32,) * 3 + (29,), {"BLOCK": 32}, 4),
    (SH.cat_kernel, (f32,) * 3 + (21,), {"BLOCK": 32}, 4),
    (SH.reshape_sum, (f32,) * 3 + (77,), {"M": 8, "N": 16}, 4),
    (SH.reshape_only, (f32,) * 2, {"M": 16, "N": 32}, 4),
    (SH.permute3, (f32,) * 2, {"A": 4, "B": 8, "C": 2}, 4),
    (SH.transpose, (f32,) * 2 + (13, 30), {"BM": 16, "BN": 32}, 4),
    *[(SH.flip_kernel, (f32,) * 2, {"M": m, "N": n, "DIM": d}, 4)
      for m, n in ((4, 8), (64, 4)) for d in (0, 1, 2)],
    (SH.gather_kernel, (f32, i32, f32), {"M": 8, "N": 16, "M2": 4, "N2": 16, "AXIS": 0}, 4),
    *[(SC.scan2d, (x, x, 100, 1000), {"AXIS": a, "REV": a == 1, "KIND": "cumsum", "BM": bm,
                                       "BN": bn}, w)
      for x in (f32, i8) for a in (0, 1)
      for bm, bn, w in ((4, 1024, 4), (16, 32, 4), (128, 8, 4), (8, 128, 2))],
    (SC.affine_scan, (f32,) * 4 + (45,), {"REV": True, "BLOCK": 64}, 4),
    (SC.affine_scan, (f32,) * 4 + (1000,), {"REV": False, "BLOCK": 1024}, 4),
    (SC.reduce_rows, (i32,) * 5 + (11, 27), {"BM": 16, "BN": 32}, 4),
    (SC.max_idx, (f32, f32, i32, 9, 20), {"BM": 16, "BN": 32}, 4),
    (SC.sort_rows, (f32, f32, 6, 32), {"DESC": True, "K": 8, "BM": 8, "BN": 32}, 4),
    (SC.hist, (i32, i32, 200), {"BINS": 16, "BLOCK": 256}, 4),
]


@pytest.mark.parametrize("jf,args,consts,warps", KERNELS,
                         ids=[f"{k[0].__name__}-{'-'.join(map(str, k[2].values()))}-w{k[3]}"
                              for k in KERNELS])
def test_every_tile_holds_and_stores_each_element_once(jf, args, consts, warps):
    fn = ir_of(jf, *args, num_warps=warps, **consts)
    assert problems(fn) == [], str(fn)


def test_relabeled_layouts_at_broadcast_shapes():
    """A relabeling met at another shape than its own (a broadcast of its size-1 dim, a
    Slice for `x[None, :]`) keeps the lane/warp bases of its own shape."""
    B = Blocked((1,), (32,), (4,), (0,))
    r = Reshaped(B, (128,), (128, 1))
    nat, wide = r.to_linear((128, 1)), r.to_linear((128, 2))
    assert wide.lane == nat.lane and wide.warp == nat.warp and wide.reg == ((0, 1),)
    assert lin_problems(wide) == [] and lin_problems(Slice(r, 0).to_linear((2,))) == []
    j = Joined(default_blocked((64,), 4, 4))
    assert j.to_linear((64, 2)).reg[0] == (0, 1)
    for s in ((64, 1), (64, 4), (1, 2)):
        assert lin_problems(j.to_linear(s)) == [], s
    st = Stacked(default_blocked((32, 8), 4, 4))
    for s in ((64, 8), (1, 8), (64, 1)):
        assert lin_problems(st.to_linear(s)) == [], s


def test_checker_finds_the_old_broadcast_layout():
    """The layout the broadcast of the H100 failure had: lanes 0..31 over rows 0..7 and both
    columns, rows 8..15 held by nobody (each row then got one column from the pointers)."""
    from kitjit.ir.layouts import LinearLayout

    bad = LinearLayout((16, 2), (), ((0, 1), (1, 0), (2, 0), (4, 0), (0, 0)),
                       ((0, 0), (0, 0)))
    assert any("held by no thread" in p for p in lin_problems(bad))
    twice = LinearLayout((4,), ((1,),), ((1,), (2,)), ())
    assert any("more than once" in p for p in lin_problems(twice))
    assert all(len(h) == 1 for h in stores(default_blocked((16, 2), 4, 4).to_linear((16, 2)))
               .values())


# ------------------------------------------------------------- a scan on the model CTA
class _CTA:
    """backend/lower/scan.py's `op_scan` with every register a numpy array over the CTA's
    threads (thread t: lane t % 32, warp t // 32): shuffles and the shared-memory warp
    exchange become permutations, lane/warp bits become boolean arrays."""

    def __init__(self, lin, nw):
        from kitjit.backend.lower.scan import ScanLowering

        self.S, self.lin = ScanLowering, lin
        self.t = np.arange(32 * nw)

    def run(self, x, axis, reverse, comb):
        lin, t = self.lin, self.t
        lane, warp = t % 32, t // 32
        coords = np.zeros((len(t), lin.rank), dtype=np.int64)
        for k, b in enumerate(lin.lane):
            coords ^= ((lane >> k) & 1)[:, None] * np.array(b)
        for k, b in enumerate(lin.warp):
            coords ^= ((warp >> k) & 1)[:, None] * np.array(b)
        regs = [x[tuple((coords ^ np.array(c)).T)] for c in lin.reg_coords()]
        p, tt = list(regs), list(regs)
        for k, (kind, i) in enumerate(self.S.axis_bits(None, lin, axis, "a scan")):
            if kind == "reg":
                q = [tt[r ^ (1 << i)] for r in range(len(regs))]
            else:
                perm = t ^ ((1 << i) if kind == "lane" else (32 << i))
                q = [v[perm] for v in tt]
            newp, newt = [], []
            for r in range(len(regs)):
                if kind == "reg":
                    up = np.full(len(t), bool(lin.reg_coords()[r][axis] >> k & 1))
                else:
                    up = (((lane if kind == "lane" else warp) >> i) & 1).astype(bool)
                up = ~up if reverse else up
                newp.append(np.where(up, comb(q[r], p[r]), p[r]))
                newt.append(np.where(up, comb(q[r], tt[r]), comb(tt[r], q[r])))
            p, tt = newp, newt
        out = np.full(x.shape, np.nan, dtype=x.dtype)
        for c, v in zip(lin.reg_coords(), p):
            out[tuple((coords ^ np.array(c)).T)] = v
        return out


@pytest.mark.parametrize("shape,axis,nw", [((4, 1024), 1, 4), ((4, 1024), 0, 4),
                                           ((128, 8), 0, 4), ((16, 32), 1, 4),
                                           ((64,), 0, 4), ((2, 8), 1, 2)])
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_butterfly_on_model_threads(shape, axis, nw, reverse):
    """Affine maps (associative, not commutative) scanned as the GPU does, against the
    sequential composition, on the layout the layout pass gives a scan of that shape."""
    lin = default_blocked(shape, nw, 4).to_linear(shape)
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0.5, 1.5, shape), rng.standard_normal(shape)
    x = a + 1j * b  # (a, b): x -> a x + b, packed in one complex array

    def comb(u, v):  # first u, then v
        return u.real * v.real + 1j * (u.imag * v.real + v.imag)

    got = _CTA(lin, nw).run(x, axis, reverse, comb)
    xs = np.moveaxis(x, axis, -1)
    ref = np.empty_like(xs)
    idx = range(xs.shape[-1] - 1, -1, -1) if reverse else range(xs.shape[-1])
    acc = None
    for i in idx:
        acc = xs[..., i] if acc is None else comb(acc, xs[..., i])
        ref[..., i] = acc
    assert np.allclose(got, np.moveaxis(ref, -1, axis))

"""Three consumer warpgroups in one role (FA4's D=64 forward: a 192-row Q tile, each
warpgroup 64 rows of every MMA). A kit.mma result of 192 rows over the role's 12 warps is
laid out as a 256-row tile over 16 warps whose warps 12-15 do not exist (one m64 block per
warpgroup), and so are its row vectors and A fragments; other tiles of such dims are a
compile error. The attention config (kitjit/nn/attention.py, BM=192) is checked in the
interpreter by tests/test_sdpa.py (`ws-turns-3`, `ws-overlap-3`), here for its layouts and
SASS; on the GPU by `pytest -m gpu tests/test_sdpa.py -k "turns-3 or overlap-3"`."""

from __future__ import annotations

import collections
import re

import pytest
import torch
from kitjit.frontend.errors import CompileError

import kitjit as kit
from kitjit.ir.layout_check import lin_problems, problems
from kitjit.ir.layouts import DotOperand, Mma, Slice
from kitjit.nn import attention as attention_module
from kitjit.nn.attention import attention_ws_kernel
from kitjit.testing import rel_error
from kitjit.tools import ToolError, disassemble, find_tool

ATTN_SPECS = [("*bf16", 16)] * 4 + [("*fp32", 16), ("i32", 16), ("i32", 16), ("i32", 1),
                                    ("i32", 1), ("fp32", 1)]
ATTN_SIG = ["*bf16:16"] * 4 + ["*fp32:16", "i32:16", "i32:16", "i32", "i32", "fp32"]


def attn_consts(causal, stages=2, turns=True, BN=128):
    return dict(BM=192, BN=BN, D=64, CAUSAL=causal, STAGES=stages, CONSUMERS=3,
                OVERLAP=not turns, TURNS=turns, SPLIT=False, PACKED=False, BOUND=False)


def test_twelve_warp_layouts_hold_each_element_once():
    acc = Mma(12, 1)
    for shape in ((192, 128), (192, 64)):
        lin = acc.to_linear(shape)
        assert len(lin.warp) == 4               # warps 0-11 of a 16-warp numbering
        assert lin_problems(lin, 12) == []
        # counted as 16 warps, the absent ones would hold rows 192-255
        assert any("outside" in p for p in lin_problems(lin))
        assert lin_problems(DotOperand(0, acc).to_linear(shape), 12) == []
    assert lin_problems(Slice(acc, 1).to_linear((192,)), 12) == []
    assert lin_problems(Slice(acc, 0).to_linear((128,)), 12) == []   # copies per warp
    # powers of two: the same bases as before
    assert Mma(8, 1).to_linear((128, 128)).warp == ((16, 0), (32, 0), (64, 0))


@pytest.mark.usefixtures("memo_layout_check")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("turns", [True, False], ids=["turns", "overlap"])
def test_attention_192_layouts(causal, turns):
    c = attn_consts(causal, turns=turns)
    fn = attention_ws_kernel.build_ir(ATTN_SPECS, tuple(c[n] for n in
                                                        attention_ws_kernel.constexprs),
                                      16, tma=True, arch="sm_90a")
    assert problems(fn) == []
    lays = {str(v.type.layout) for op in fn.walk() for v in op.results
            if v.type.layout is not None and 192 in v.type.shape}
    assert "#mma<m16n8, warps=[12,1]>" in lays
    assert not any("blocked" in s for s in lays), lays
    convs = [op for op in fn.walk() if op.name == "convert_layout"]
    assert all("dot_op" in str(op.result.type.layout) for op in convs)   # P only


@kit.jit
def rows192_outside_a_role(X, Y):
    r = kit.arange(0, 192)
    kit.store(Y + r, kit.load(X + r))


def test_other_tiles_of_192_rows_are_refused():
    x = torch.randn(192)
    with pytest.raises(CompileError, match=r"a tile of shape \[192\]: dims that are not powers "
                                           r"of two are for kit.mma results of a role of 3 "
                                           r"warpgroups"):
        rows192_outside_a_role[(1,)](x, torch.empty(192))


@kit.jit
def arange_100(X):
    kit.store(X + kit.arange(0, 100), 1.0)


def test_other_dims_keep_their_error():
    with pytest.raises(CompileError, match=r"kit.arange\(0, 100\) has 100 elements; tiles "
                                           r"need a power of two"):
        arange_100[(1,)](torch.empty(128))


@kit.jit
def col_sum_192(A, B, Y, AXIS: kit.constexpr):
    a = kit.shared((192, 64), A.dtype.element_ty)
    b = kit.shared((64, 64), B.dtype.element_ty)
    bar = kit.mbarriers(1)
    if kit.warpgroup_id() == 0:
        kit.tma_load(a, A, (0, 0), bar[0])
        kit.tma_load(b, B, (0, 0), bar[0])
    else:
        kit.mbarrier_wait(bar[0], 0)
        acc = kit.mma(a, b, kit.zeros((192, 64), kit.float32))
        if AXIS == 0:
            kit.store(Y + kit.arange(0, 64), kit.sum(acc, axis=0))
        else:
            kit.store(Y + kit.arange(0, 192), kit.sum(acc, axis=1))


def test_cross_warp_ops_on_192_rows_are_refused():
    """A column sum would combine the partials of 16 warps, 4 of which do not exist."""
    a = torch.randn(192, 64).to(torch.bfloat16)
    b = torch.randn(64, 64).to(torch.bfloat16)
    y = torch.full((192,), float("nan"))
    with pytest.raises(CompileError, match=r"reduce of a tile of shape \[192, 64\] \(a "
                                           r"kit.mma result over 3 warpgroups\) is not "
                                           r"supported"):
        col_sum_192[(1,)](a, b, y, AXIS=0, num_warps=16)
    col_sum_192[(1,)](a, b, y, AXIS=1, num_warps=16)       # row sums stay in each warp
    assert rel_error(y, (a.double() @ b.double()).sum(1)) < 1e-3


# ----------------------------------------------------------------------------- a GEMM
@kit.jit
def rows192_kernel(A, B, C, R, M, N, K, scale, BK: kit.constexpr):
    """C = scale * A @ B and R = its row sums for 192 rows of A per program: a producer
    warpgroup streams (192, BK) tiles of A and (BK, 64) tiles of B through two stages, three
    consumer warpgroups multiply (64 rows each) and store through pointers."""
    m0 = kit.program_id(0) * 192
    a = kit.shared((2, 192, BK), A.dtype.element_ty)
    b = kit.shared((2, BK, 64), B.dtype.element_ty)
    ready = kit.mbarriers(2)
    empty = kit.mbarriers(2, arrivals=3)
    n_k = kit.cdiv(K, BK)
    if kit.warpgroup_id() == 0:
        for i in range(n_k):
            s = i % 2
            kit.mbarrier_wait(empty[s], i // 2 % 2 ^ 1)
            kit.tma_load(a[s], A, (m0, i * BK), ready[s])
            kit.tma_load(b[s], B, (i * BK, 0), ready[s])
    else:
        acc = kit.zeros((192, 64), kit.float32)
        for i in range(n_k):
            s = i % 2
            kit.mbarrier_wait(ready[s], i // 2 % 2)
            acc = kit.mma(a[s], b[s], acc)
            kit.mbarrier_arrive(empty[s])
        acc = acc * scale
        rows = m0 + kit.arange(0, 192)
        cols = kit.arange(0, 64)
        live = rows < M
        kit.store(C + rows[:, None] * N + cols[None, :], acc.to(C.dtype.element_ty),
                  mask=live[:, None] & (cols[None, :] < N))
        kit.store(R + rows, kit.sum(kit.where(cols[None, :] < N, acc, 0.0), axis=1), mask=live)


def run_rows192(M, N, K, BK, device="cpu"):
    g = torch.Generator().manual_seed(5)
    a = torch.randn(M, K + 8, generator=g).to(torch.bfloat16)[:, :K]    # rows 16 B apart
    b = torch.randn(K, N, generator=g).to(torch.bfloat16)
    c = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    r = torch.full((M,), float("nan"))
    a, b, c, r = (t.to(device) for t in (a, b, c, r))
    rows192_kernel[(kit.cdiv(M, 192),)](a, b, c, r, M, N, K, 0.5, BK=BK, num_warps=16)
    ref = 0.5 * (a.double() @ b.double())
    assert not torch.isnan(c).any() and not torch.isnan(r).any()
    return c.cpu(), r.cpu(), ref.cpu()


@pytest.mark.parametrize("M,N,K,BK", [(400, 64, 296, 96), (200, 48, 136, 64)],
                         ids=["400x64x296-bk96", "200x48x136-bk64"])
def test_rows192_gemm_interpreter(M, N, K, BK):
    c, r, ref = run_rows192(M, N, K, BK)
    assert rel_error(c, ref) < 1e-2
    assert rel_error(r, ref.sum(1)) < 1e-3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or
                    torch.cuda.get_device_capability() < (9, 0),
                    reason="needs a Hopper GPU (TMA, WGMMA)")
@pytest.mark.parametrize("M,N,K,BK", [(400, 64, 296, 96), (200, 48, 136, 64),
                                      (1000, 64, 1000, 96)])
def test_rows192_gemm_gpu(M, N, K, BK):
    c, r, ref = run_rows192(M, N, K, BK, device="cuda")
    assert rel_error(c, ref) < 1e-2
    assert rel_error(r, ref.sum(1)) < 1e-3


# ----------------------------------------------------------------------------- SASS
needs_sass = pytest.mark.skipif(
    find_tool("cuobjdump") is None or find_tool("nvdisasm") is None,
    reason="cuobjdump/nvdisasm not found (pip install nvidia-cuda-cuobjdump "
           "nvidia-cuda-nvdisasm)")
_INSN = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([^;]*);", re.M)


def attn_sass(causal, stages, turns=True, BN=128):
    ck = kit.compile_aot(attention_module.__file__, "attention_ws_kernel", ATTN_SIG,
                         attn_consts(causal, stages, turns, BN), 16, arch="sm_90a")
    try:
        text = disassemble(ck.asm["cubin"])
    except ToolError as e:  # a broken tool install is not a kitjit failure
        pytest.skip(str(e))
    ops = collections.Counter(m.group(1).split()[0] for m in _INSN.finditer(text))
    return ck, ops


@needs_sass
@pytest.mark.parametrize("causal,stages,turns,BN,spill_cap",
                         [(False, 2, True, 128, 0), (False, 3, True, 128, 0),
                          (False, 2, False, 128, 0), (True, 2, True, 128, 128),
                          (True, 3, True, 128, 128), (True, 3, True, 64, 0)],
                         ids=["full-s2", "full-s3", "full-s2-overlap", "causal-s2",
                              "causal-s3", "causal-s3-bn64"])
@pytest.mark.slow_except("full-s2", "causal-s3-bn64")
def test_attention_192_sass(causal, stages, turns, BN, spill_cap):
    """One 192-row Q box, each warpgroup's S = Q Kᵀ as 4 HGMMA.64xBNx16 and P V as BN/16
    HGMMA.64x64x16 per site, the scheduler barrier's bar.sync / bar.arrive. Non-causal
    fits the consumers' 160 registers; causal at BN=128 spills a little there (64-76 bytes
    with ptxas 13.0), capped here until the GPU says whether it matters; at BN=64 it fits."""
    ck, ops = attn_sass(causal, stages, turns, BN)
    md = ck.metadata
    assert {t["param"]: t["box"] for t in md["tma"]} == {0: [192, 64], 1: [BN, 64],
                                                         2: [BN, 64]}
    # S: the first block and two loops (unmasked, masked), 4 k-steps of 16 (D=64) each;
    # P V: the two loops and the last block, BN/16 k-steps each
    want = collections.Counter({f"HGMMA.64x{BN}x16.F32.BF16": 3 * 4})
    want["HGMMA.64x64x16.F32.BF16"] += 3 * BN // 16
    assert {k: v for k, v in ops.items() if k.startswith("HGMMA")} == dict(want), ops
    assert ops["UTMALDG.2D"] >= 1 and ops["UTMALDG.3D"] >= 2, ops   # Q; K, V per head
    assert not any(k.startswith(("STS", "LDS")) for k in ops), ops   # P stays in registers
    if turns:
        assert ops["BAR.ARV"] >= 3, ops
    assert md["spills"] <= spill_cap, md
    if not spill_cap:
        assert not any(k.startswith(("LDL", "STL")) for k in ops), ops


@needs_sass
@pytest.mark.parametrize("BK", [64, 96])
def test_rows192_gemm_sass(BK):
    ck = kit.compile_aot(__file__, "rows192_kernel", ["*bf16:16"] * 3 + ["*fp32:16"] +
                         ["i32:16"] * 3 + ["fp32"], dict(BK=BK), 16, arch="sm_90a")
    try:
        text = disassemble(ck.asm["cubin"])
    except ToolError as e:
        pytest.skip(str(e))
    ops = collections.Counter(m.group(1).split()[0] for m in _INSN.finditer(text))
    assert ops["HGMMA.64x64x16.F32.BF16"] == BK // 16, ops   # one m64 block per warpgroup
    assert ops["UTMALDG.2D"] >= 2, ops
    assert not any(k.startswith(("LDL", "STL", "STS", "LDS")) for k in ops), ops
    sw = 128 if BK == 64 else 64
    assert {t["param"]: (t["box"], t["swizzle"]) for t in ck.metadata["tma"]} == \
        {0: ([192, sw // 2], sw), 1: ([BK, 64], 128)}

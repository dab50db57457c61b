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
from kitjit.tools import ToolError, disassemble, find_tool

ATTN_SPECS = [("*bf16", 16)] * 4 + [("*fp32", 16), ("i32", 16), ("i32", 16), ("i32", 1),
                                    ("i32", 1), ("fp32", 1)]
ATTN_SIG = ["*bf16:16"] * 4 + ["*fp32:16", "i32:16", "i32:16", "i32", "i32", "fp32"]


def attn_consts(causal, stages=2, turns=True, BN=128):
    return dict(BM=192, BN=BN, D=64, CAUSAL=causal, STAGES=stages, CONSUMERS=3,
                OVERLAP=not turns, TURNS=turns, SPLIT=False)


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
    assert ops["UTMALDG.2D"] >= 3, ops
    assert not any(k.startswith(("STS", "LDS")) for k in ops), ops   # P stays in registers
    if turns:
        assert ops["BAR.ARV"] >= 3, ops
    assert md["spills"] <= spill_cap, md
    if not spill_cap:
        assert not any(k.startswith(("LDL", "STL")) for k in ops), ops

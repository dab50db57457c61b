"""The Hopper kernels compiled for sm_90a and disassembled (no GPU): warpgroup MMAs of the
expected shapes, TMA loads, no spills, shared memory, setmaxnreg and its register budgets."""

from __future__ import annotations

import pathlib
import re

import pytest
from hopper_helpers import (
    ATTN_SRC,
    BENCH,
    DT,
    EXAMPLES,
    SMEM_48K,
    SMEM_MAX,
    Sass,
    attn_sig,
    gemm_sig,
    mm_sig,
    needs_sass,
    sass,
)
from kitjit.frontend.errors import CompileError

import kitjit as kit
from kitjit.tools import ToolError, find_tool


# ----------------------------------------------------------------------------- matmul
@needs_sass
@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_sass_matmul(dt):
    c = sass(EXAMPLES / "matmul.py", "matmul_kernel", mm_sig(dt),
             dict(BM=128, BN=256, BK=64, STAGES=3, GROUP=8), 8)
    # two warpgroups, 64 rows each, the whole 256-wide tile per instruction, B from shared
    # memory transposed (N-major tile): HGMMA.64x256x16.F32.BF16 R24, gdesc[UR56].tnspB, R24
    mma = c.find(rf"HGMMA\.64x256x16\.F32{re.escape(DT[dt])} R\d+, gdesc\[")
    assert len(mma) >= 64 // 16, f"no 64x256x16 {dt} warpgroup MMA from shared memory: " \
                                 f"{c.hgmma()[:4]} / {c.summary()}"
    assert len(mma) == len(c.hgmma()), c.hgmma()
    assert c.has("UTMALDG"), f"no TMA loads: {c.summary()}"
    assert not c.has("HMMA"), "fell back to mma.sync"
    c.assert_no_spills()
    md = c.md
    assert md["shared"] >= 3 * (128 * 64 + 64 * 256) * 2 > SMEM_48K
    assert md["shared"] <= SMEM_MAX
    assert {t["param"] for t in md["tma"]} == {0, 1}, md["tma"]   # A and B; C is stored


@needs_sass
@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_sass_matmul_epilogue_16_byte_stores(dt):
    """The accumulator holds column pairs per thread; the store swaps register and lane
    bits (shuffles) so that each thread writes 8 consecutive columns: 16 STG.E.128 per
    thread for a 128x256 tile instead of 64 4-byte stores (the epilogue was bound by the
    number of memory requests)."""
    c = sass(EXAMPLES / "matmul.py", "matmul_kernel", mm_sig(dt),
             dict(BM=128, BN=256, BK=64, STAGES=3, GROUP=8), 8)
    assert len(re.findall(r"st\.global\.v4\.b32", c.ptx)) == 16, c.summary()
    assert not re.search(r"st\.global(\.v2)?\.b32", c.ptx)
    assert len(re.findall(r"shfl\.sync\.bfly", c.ptx)) == 64
    assert len(c.find(r"STG\.E\.128")) == 16, c.summary()


@needs_sass
@pytest.mark.parametrize("extra", [dict(STAGES=4), dict(STAGES=4, TMA_STORE=2),
                                   dict(STAGES=4, TRANS_B=True, TMA_STORE=2)],
                         ids=["direct", "tma-halves", "tma-halves-bt"])
def test_sass_matmul_wgmma_not_serialized(extra):
    """The four HGMMAs of a k-step issue back to back (one WARPGROUP.ARRIVE per k-step):
    ptxas serializes them (an ARRIVE and a DEPBAR around each, C7515) when some path writes
    the accumulator's registers while MMAs may be in flight; found on the H100, where the
    TMA-store epilogue with B [K, N] ran 20% slower until the kernel told the compiler that
    every tile has k-steps (kit.assume(n_k > 0))."""
    c = sass(EXAMPLES / "matmul.py", "matmul_kernel", mm_sig("bf16"),
             dict(BM=128, BN=256, BK=64, GROUP=8, **extra), 8)
    assert len(c.hgmma()) == 4 * len(c.find(r"WARPGROUP\.ARRIVE")), c.summary()
    assert_not_serialized(c)
    assert c.md["shared"] <= SMEM_MAX
    c.assert_no_spills()


@needs_sass
@pytest.mark.parametrize("extra", [
    dict(STAGES=4, TMA_STORE=2), dict(STAGES=3, TMA_STORE=1), dict(STAGES=4),
    dict(STAGES=4, TMA_STORE=2, TRANS_B=True), dict(BM=256, BN=128, STAGES=4, TMA_STORE=2)],
    ids=["tma-halves", "tma-whole-s3", "direct", "tma-halves-bt", "256x128-halves"])
@pytest.mark.slow_except("tma-halves")
def test_sass_matmul_overlap(extra):
    """OVERLAP: k-step 0 is peeled (twice the HGMMAs, one ARRIVE per k-step's group, none
    serialized: C7514 / C7515) and the last tile's 16-bit C (registers beside the
    accumulator: no spills) goes out between the peeled HGMMAs' issue and their wait, so no
    `gsb0, 0x0` stands between them and the first store."""
    cfg = dict(dict(BM=128, BN=256), BK=64, GROUP=8, OVERLAP=True, **extra)
    c = sass(EXAMPLES / "matmul.py", "matmul_kernel", mm_sig("bf16"), cfg, 8)
    per_k = cfg["BM"] // 128 * cfg["BK"] // 16         # HGMMAs per k-step per warpgroup
    assert len(c.hgmma()) == 2 * per_k, c.hgmma()
    assert len(c.find(r"WARPGROUP\.ARRIVE")) == 2 == c.ptx.count("wgmma.fence"), c.summary()
    warned = [w for w in c.md.get("ptxas_warnings", []) if "C7514" in w or "C7515" in w]
    assert not warned, warned
    c.assert_no_spills()
    assert "cvt.rn.bf16x2.f32" in c.ptx     # packed: scalar cvts of acc serialize (C7514)
    assert c.has("UTMASTG") == bool(cfg.get("TMA_STORE")), c.summary()
    assert c.md["shared"] <= SMEM_MAX
    lines = c.text.splitlines()
    first = next(i for i, ln in enumerate(lines) if "HGMMA" in ln and "RZ, !UPT" in ln)
    store = next(i for i, ln in enumerate(lines) if i > first and re.search(r"\b(STS|STG)", ln))
    between = "\n".join(lines[first:store])
    assert "gsb0, 0x0" not in between and between.count("HGMMA") == per_k, between


def assert_not_serialized(c: Sass) -> None:
    """ptxas issued each kit.mma's WGMMAs as one group: one WARPGROUP.ARRIVE per
    wgmma.fence kitjit wrote (a serialized group gets one per HGMMA), and no C7515 in the
    assembler's warnings (kept in the metadata: kitjit/jit.py, backend/compiler.py)."""
    warned = [w for w in c.md.get("ptxas_warnings", []) if "C7515" in w]
    assert not warned, warned
    assert len(c.find(r"WARPGROUP\.ARRIVE")) == c.ptx.count("wgmma.fence"), c.summary()


# ----------------------------------------------------------------------------- attention
ATTN_SASS = [  # (D, BM, BN, num_warps): the unspecialized kernel's configs per head dim
    (128, 128, 128, 8),
    (64, 64, 128, 4),
    (256, 64, 64, 4),
]


@needs_sass
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D,BM,BN,warps", ATTN_SASS, ids=["D128", "D64", "D256"])
@pytest.mark.slow_except("D128-full", "D128-causal")
def test_sass_attention_wgmma_not_serialized(D, BM, BN, warps, causal):
    c = sass(ATTN_SRC, "attention_kernel", attn_sig("bf16"),
             dict(BM=BM, BN=BN, D=D, CAUSAL=causal, STAGES=2), warps)
    assert_not_serialized(c)


@needs_sass
@pytest.mark.parametrize("dt,causal", [("bf16", False), ("bf16", True), ("fp16", True)],
                         ids=["bf16-full", "bf16-causal", "fp16-causal"])
@pytest.mark.parametrize("D,BM,BN,warps", ATTN_SASS, ids=["D128", "D64", "D256"])
@pytest.mark.slow_except("D128-bf16-full", "D128-bf16-causal", "D128-fp16-causal")
def test_sass_attention(D, BM, BN, warps, dt, causal):
    c = sass(ATTN_SRC, "attention_kernel", attn_sig(dt),
             dict(BM=BM, BN=BN, D=D, CAUSAL=causal, STAGES=2), warps)
    t = re.escape(DT[dt])
    # S = Q Kᵀ: both operands in shared memory, one descriptor pair
    #   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], R24
    ss = c.find(rf"HGMMA\.64x{BN}x16\.F32{t} R\d+, gdesc\[")
    # O += P V: P from registers (A operand), V from shared memory (N-major, transposed)
    #   HGMMA.64x128x16.F32.BF16 R88, R24, gdesc[UR16].tnspB, R88
    rs = c.find(rf"HGMMA\.64x{D}x16\.F32{t} R\d+, R\d+, gdesc\[")
    assert len(ss) >= D // 16, f"Q Kᵀ as shared-memory WGMMA: {c.hgmma()}"
    assert len(rs) >= BN // 16, f"P V as register-A WGMMA: {c.hgmma()}"
    assert len(ss) + len(rs) == len(c.hgmma()), c.hgmma()
    assert c.has("UTMALDG"), f"no TMA loads: {c.summary()}"
    assert c.has("MUFU.EX2"), "the online softmax should run on the SFU's exp2"
    assert not c.has("HMMA"), "fell back to mma.sync"
    c.assert_no_spills()
    md = c.md
    assert {t["param"] for t in md["tma"]} == {0, 1, 2}, md["tma"]   # Q, K, V
    need = (BM * D + 2 * 2 * BN * D) * 2   # Q, and 2 stages of K and V
    assert md["shared"] >= need > SMEM_48K and md["shared"] <= SMEM_MAX, md["shared"]


ATTN_WS_SASS = [  # (D, BM, BN, num_warps, stages, overlap): what attention(..., ws=True)
    (128, 128, 128, 12, 3, True),                  # OVERLAP (the default adds TURNS)
    (64, 64, 128, 8, 2, False),
    (256, 128, 64, 12, 2, False),
    (128, 128, 128, 12, 2, False),                 # the plain consumer at D=128
]


def attn_ws_sass(D, BM, BN, warps, stages=2, overlap=False, causal=True, dt="bf16") -> Sass:
    return sass(ATTN_SRC, "attention_ws_kernel", attn_sig(dt),
                dict(BM=BM, BN=BN, D=D, CAUSAL=causal, STAGES=stages,
                     CONSUMERS=warps // 4 - 1, OVERLAP=overlap), warps)


@needs_sass
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D,BM,BN,warps,stages,overlap", ATTN_WS_SASS,
                         ids=["D128-overlap", "D64", "D256", "D128"])
@pytest.mark.slow_except("D128-overlap-causal")
def test_sass_attention_ws(D, BM, BN, warps, stages, overlap, causal):
    c = attn_ws_sass(D, BM, BN, warps, stages, overlap, causal)
    ss = c.find(rf"HGMMA\.64x{BN}x16\.F32\.BF16 R\d+, gdesc\[")
    rs = c.find(rf"HGMMA\.64x{D}x16\.F32\.BF16 R\d+, R\d+, gdesc\[")
    assert len(ss) >= D // 16 and len(rs) >= BN // 16, c.hgmma()
    assert len(ss) + len(rs) == len(c.hgmma()), c.hgmma()
    assert c.has("UTMALDG") and c.has("MUFU.EX2") and not c.has("HMMA"), c.summary()
    c.assert_no_spills()
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+24;", c.ptx), "producer"
    assert re.search(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+240;", c.ptx), "consumers"
    need = (BM * D + stages * 2 * BN * D) * 2
    assert c.md["shared"] >= need > SMEM_48K and c.md["shared"] <= SMEM_MAX, c.md["shared"]


ATTN_TURNS_SASS = [  # (D, BN, stages, SPLIT): the scheduler-barrier consumers (TURNS=True)
    (128, 128, 3, False),
    (128, 128, 2, True),
    (64, 128, 3, True),
    (256, 64, 2, True),
]


@needs_sass
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D,BN,stages,split", ATTN_TURNS_SASS,
                         ids=["D128", "D128-split", "D64-split", "D256-split"])
@pytest.mark.slow_except("D128-split-causal")
def test_sass_attention_turns(D, BN, stages, split, causal):
    """Two consumer warpgroups taking turns through kit.named_barrier_wait / _arrive: one
    copy of the loop (the barrier id is a register), barriers 8 and 9 of 256 threads."""
    c = sass(ATTN_SRC, "attention_ws_kernel", attn_sig("bf16"),
             dict(BM=128, BN=BN, D=D, CAUSAL=causal, STAGES=stages, CONSUMERS=2, TURNS=True,
                  SPLIT=split), 12)
    ss = c.find(rf"HGMMA\.64x{BN}x16\.F32\.BF16 R\d+, gdesc\[")
    rs = c.find(rf"HGMMA\.64x{D}x16\.F32\.BF16 R\d+, R\d+, gdesc\[")
    assert len(ss) + len(rs) == len(c.hgmma()) and len(ss) <= 3 * D // 16, c.hgmma()
    assert c.has("UTMALDG") and c.has("MUFU.EX2") and not c.has("HMMA"), c.summary()
    c.assert_no_spills()
    assert c.find(r"BAR\.SYNC(\.DEFER_BLOCKING)? R\d+, 0x100"), "no turn wait (bar.sync id, 256)"
    assert c.find(r"BAR\.ARV (R\d+|0x8), 0x100"), "no turn pass (bar.arrive id, 256)"
    assert re.search(r"bar\.sync\s+%r\d+, 256;", c.ptx) and "bar.arrive" in c.ptx, "ptx"
    kv = (2 if split else 1) * stages
    assert c.ptx.count("mbarrier.init") >= 1 + 2 * kv, "K and V barriers"


@needs_sass
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D,BN,split", [(128, 128, False), (256, 64, True)], ids=["D128", "D256"])
@pytest.mark.slow_except("D128-causal")
def test_sass_attention_packed(D, BN, split, causal):
    """PACKED (P converted where written, kept 16-bit through the loop) and BOUND (the
    causal mask as one bound): no PRMT repacking P's halves (the default has 32 a block at
    D=128), no spills, the same MMAs."""
    c = sass(ATTN_SRC, "attention_ws_kernel", attn_sig("bf16"),
             dict(BM=128, BN=BN, D=D, CAUSAL=causal, STAGES=2 if split else 3, CONSUMERS=2,
                  TURNS=True, SPLIT=split, PACKED=True, BOUND=causal), 12)
    ss = c.find(rf"HGMMA\.64x{BN}x16\.F32\.BF16 R\d+, gdesc\[")
    rs = c.find(rf"HGMMA\.64x{D}x16\.F32\.BF16 R\d+, R\d+, gdesc\[")
    assert ss and rs and len(ss) + len(rs) == len(c.hgmma()), c.hgmma()
    assert c.has("UTMALDG") and c.has("MUFU.EX2") and not c.has("HMMA"), c.summary()
    c.assert_no_spills()
    assert not c.has("PRMT"), c.summary()
    assert re.search(r"cvt\.rn\.bf16\.f32 %rs\d+, %r\d+;", c.ptx), "the pinned cvt"


# ----------------------------------------------------------------------------- roles
WS_SASS = {  # kernel: the constexprs its host wrapper launches it with
    "matmul_wsp": dict(BM=128, BN=256, BK=64, STAGES=4, GROUP=8),
    "matmul_pingpong": dict(BM=128, BN=128, BK=64, STAGES=6, GROUP=8),
    "matmul_ws": dict(BM=128, BN=256, BK=64, STAGES=4),
}


def ws_sass(kernel, dt="bf16") -> Sass:
    return sass(BENCH / "ws_kernel.py", kernel, gemm_sig(dt), WS_SASS[kernel], 12)


@needs_sass
@pytest.mark.parametrize("kernel,dt", [("matmul_wsp", "bf16"), ("matmul_wsp", "fp16"),
                                       ("matmul_pingpong", "bf16"),
                                       ("matmul_pingpong", "fp16"), ("matmul_ws", "bf16")])
@pytest.mark.slow_except("matmul_wsp-bf16", "matmul_pingpong-bf16", "matmul_ws-bf16")
def test_sass_warp_specialized(kernel, dt):
    cfg = WS_SASS[kernel]
    c = ws_sass(kernel, dt)
    mma = c.find(rf"HGMMA\.64x{cfg['BN']}x16\.F32{re.escape(DT[dt])} R\d+, gdesc\[")
    assert mma and len(mma) == len(c.hgmma()), f"{c.hgmma()} / {c.summary()}"
    assert c.has("UTMALDG"), f"no TMA loads: {c.summary()}"
    assert not c.has("HMMA"), "fell back to mma.sync"
    c.assert_no_spills()
    # the producer gives registers back, the consumers take them
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+40;", c.ptx), "no setmaxnreg.dec"
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+232;", c.ptx), "no setmaxnreg.inc"
    md = c.md
    assert md["num_warps"] == 12
    ring = cfg["STAGES"] * (cfg["BM"] * cfg["BK"] + cfg["BK"] * cfg["BN"]) * 2
    assert md["shared"] >= ring > SMEM_48K and md["shared"] <= SMEM_MAX, md["shared"]


def find_tool_or_none(name: str):
    try:
        return find_tool(name)
    except ToolError:
        return None


def _nvjitlink_assembles() -> bool:
    try:
        from cuda.bindings import nvjitlink  # noqa: F401
    except ImportError:
        return False
    return True


@needs_sass
@pytest.mark.skipif(find_tool_or_none("ptxas") is None, reason=(
    "nvJitLink assembles PTX as a separate compilation unit and drops setmaxnreg (C7504); "
    "kitjit assembles kernels with roles with a whole-program ptxas, and there is none here"))
@pytest.mark.parametrize("kernel", ["matmul_wsp", "matmul_pingpong", "attention_ws_kernel"])
def test_sass_setmaxnreg_survives(kernel):
    c = attn_ws_sass(*ATTN_WS_SASS[0]) if kernel.startswith("attention") else ws_sass(kernel)
    assert c.has("USETMAXREG"), f"setmaxnreg is in the PTX but not in the SASS: {c.summary()}"


# A warpgroup that owns 128 rows of a WGMMA (two m64 row blocks). kitjit writes the second
# block's accumulator registers (here the zeros) after `wgmma.fence` and after the first
# block's wgmmas: ptxas then waits between the blocks ("(C7517) wgmma.wait_group is
# injected ... to allow use of registers defined by GMMA"); with the accumulator set up
# before the fence (checked by editing the PTX) it issues all 8 and waits once.
@kit.jit
def one_warpgroup_128_rows(A, B, C, BM: kit.constexpr, BN: kit.constexpr,
                           BK: kit.constexpr):
    a = kit.shared((BM, BK), A.dtype.element_ty)
    b = kit.shared((BK, BN), B.dtype.element_ty)
    ready = kit.mbarriers(1)
    kit.tma_load(a, A, (0, 0), ready[0])
    kit.tma_load(b, B, (0, 0), ready[0])
    kit.mbarrier_wait(ready[0], 0)
    acc = kit.mma(a, b, kit.zeros((BM, BN), kit.float32))
    rm = kit.arange(0, BM)
    rn = kit.arange(0, BN)
    kit.store(C + rm[:, None] * BN + rn[None, :], acc.to(C.dtype.element_ty))


@needs_sass
def test_sass_two_row_blocks_one_wait():
    c = sass(pathlib.Path(__file__), "one_warpgroup_128_rows", ["*bf16:16"] * 3,
             dict(BM=128, BN=128, BK=64), 4)
    assert len(c.hgmma()) == 2 * 64 // 16, c.hgmma()
    waits = c.find(r"WARPGROUP\.DEPBAR")
    assert len(waits) == 1, f"{len(waits)} waits for one kit.mma: {c.hgmma()}"


@needs_sass
@pytest.mark.parametrize("kernel", ["matmul_pingpong", "attention_ws_kernel-D128",
                                    "attention_ws_kernel-D64"])
def test_sass_role_mmas_not_serialized(kernel):
    if kernel == "matmul_pingpong":
        c = ws_sass(kernel)
    else:
        c = attn_ws_sass(*ATTN_WS_SASS[0 if kernel.endswith("D128") else 1])
    mma = c.hgmma()
    waited = [i for i in mma if "gsb0" in i]
    # a K step of 64 is 4 HGMMAs (per 64-row block) issued together: at most half may carry
    # the scoreboard that a wait is on
    assert len(waited) * 2 <= len(mma), f"{len(waited)} of {len(mma)} HGMMAs wait: {mma}"



# ============================================================================ register budgets
@kit.jit
def budgets(X, P: kit.constexpr, C: kit.constexpr):
    """A producer warpgroup at P registers and two consumers at C: setmaxnreg only."""
    if kit.warpgroup_id() == 0:
        kit.setmaxnreg(P)
    else:
        kit.setmaxnreg(C)
        offs = kit.arange(0, 256)
        kit.store(X + offs, offs.to(kit.float32))


def _budgets_ptx(P, C):
    ck = kit.compile_aot(__file__, "budgets", ["*fp32:16"], dict(P=P, C=C), 12, arch="sm_90a")
    return ck.asm["ptx"]


@pytest.mark.parametrize("P,C,ctas,cap", [(24, 240, 1, 168), (40, 232, 1, 168),
                                          (24, 104, 2, 80)])
def test_setmaxnreg_budgets_plan_ctas_per_sm(P, C, ctas, cap):
    """setmaxnreg moves registers within a CTA only: the budgets (128 x (P + 2C)) must fit
    in what the CTA holds at entry (384 threads x the cap); when they fit twice, the entry
    cap halves and two CTAs share an SM. (24, 112) would need 31744 > 384 x 80: one CTA
    (two hung on an H100: the consumers waited for registers their producer never had)."""
    ptx = _budgets_ptx(P, C)
    assert re.search(rf"\.minnctapersm\s+{ctas}\b", ptx), ptx[:400]
    kind = "inc" if C > cap else "dec"
    assert re.search(rf"setmaxnreg\.{kind}\.sync\.aligned\.u32\s+{C};", ptx)


def test_setmaxnreg_budgets_over_the_cta_are_an_error():
    with pytest.raises(CompileError, match="would wait forever"):
        _budgets_ptx(24, 248)          # 128 x (24 + 496) = 66560 > 384 x 168

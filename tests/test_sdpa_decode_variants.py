"""The decode kernel's opt-in variants (issue 12, kitjit/nn/attention_decode.py), timed against
cuDNN by `benchmarks/decode_sweep.py --variants`: `kv_barriers` (K and V of a stage on
barriers of their own, K refilled right after S = Q Kᵀ) and `persistent` (programs per SM
walking (K/V head, row tile, key chunk) items with one K/V ring streaming across them).

Interpreter against float64 torch with poisoned outputs, with the SM count patched to 2 so a
persistent program walks many items: ragged key lengths, Sq 1 and 4, GQA, causal, items
shorter than the ring (one key, many splits), merged in the split kernel or by the combine
kernel. Compile-to-SASS for sm_90a (WGMMA, TMA, no spills, the shared memory the grid's
programs per SM need); the default kernel keeps its own meta (no SEPKV key). GPU (`-m gpu`):
the same variants at decode shapes. `swap` (operands swapped: Sᵀ = K Qᵀ, Pᵀ through shared
memory) is in every list.
"""

from __future__ import annotations

import pathlib
import sys

import pytest

import kitjit as kit
from kitjit.nn import attention_decode as AD
from kitjit.tools import ToolError, disassemble, find_tool, sass_opcodes

ROOT = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
import test_sdpa as base  # noqa: E402
from test_sdpa_decode import check_decode  # noqa: E402

poison = base.poison   # fixture

VARIANTS = {  # name: attention_decode's keywords
    "kvbar": dict(kv_barriers=True),
    "pers1": dict(persistent=1),
    "pers2s3": dict(persistent=2, STAGES=3),
    "pers1s4kv": dict(persistent=1, STAGES=4, kv_barriers=True),
    "swap": dict(swap=True),
}
CASES = {  # name: (B, H, Hkv, Sq, Skv, causal, extra keywords)
    "gqa4-q1-ragged": (3, 8, 2, 1, 150, False, {}),            # 3 splits, the last ragged
    "gqa4-q4-combine": (2, 8, 2, 4, 200, False, dict(splits=3, fused=False)),
    "gqa4-q4-causal": (2, 8, 2, 4, 70, True, {}),
    "items-shorter-than-ring": (3, 4, 2, 1, 1, False, {}),     # one block per item
    "mqa-q16-2tiles": (1, 8, 1, 16, 130, False, dict(splits=2)),
}


@pytest.fixture
def two_sms(monkeypatch):
    """Two SMs: a persistent program then walks several items (routes made here are dropped
    after the test, as they hold this SM count's split plan)."""
    monkeypatch.setattr(AD, "_sm_count", lambda device: 2)
    AD.route.cache_clear()
    yield
    AD.route.cache_clear()


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_decode_variant(variant, case, two_sms, poison):
    B, H, Hkv, Sq, Skv, causal, extra = CASES[case]
    q, k, v = base.llm_qkv(B, Sq, H, 64, Hkv=Hkv, Skv=Skv, seed=60)
    check_decode(q, k, v, causal, poison, f"{variant} {case}", **VARIANTS[variant], **extra)


def test_variant_plans():
    """The persistent grid is 1-d, at most programs-per-SM x SMs; the default's meta has no
    SEPKV key (its cache key and PTX are the same as before the variants)."""
    grid, splits, _, meta, _ = AD._plan(64, 32, 8, 1, 4096, 128, False, None, None, None, 132)
    assert grid == (1, 1, 512) and "SEPKV" not in meta
    grid, *_ = AD._plan(64, 32, 8, 1, 4096, 128, False, None, None, 4, 132, None, False, 1)
    assert grid == (132,)
    grid, *_ = AD._plan(1, 32, 8, 1, 300, 128, False, None, None, None, 132, None, True, 2)
    assert grid == (8 * 5,)                            # fewer items than programs
    *_, meta, _ = AD._plan(64, 32, 8, 1, 4096, 128, False, None, None, None, 132, None, True)
    assert meta["SEPKV"] is True
    grid, *_, meta, _ = AD._plan(2, 32, 8, 1, 300, 128, False, None, None, None, 132, None,
                                 False, 0, True)
    assert meta["BM"] == 8 and meta["BN"] == 64 and grid[1:] == (1, 16)   # 4 rows -> N 8
    q, k, v = base.bhsd(1, 2, 1, 64, Skv=8)
    with pytest.raises(ValueError, match="programs per SM"):
        AD.attention_decode(q, k, v, persistent=-1)
    with pytest.raises(ValueError, match="not supported yet"):
        AD.attention_decode(q, k, v, swap=True, persistent=1)
    q, k, v = base.bhsd(1, 2, 1, 256, Skv=8)
    with pytest.raises(ValueError, match="swap=True .* head dim 256 is not supported yet"):
        AD.attention_decode(q, k, v, swap=True)


needs_sass = pytest.mark.skipif(
    find_tool("cuobjdump") is None or find_tool("nvdisasm") is None,
    reason="cuobjdump/nvdisasm not found")
NN = ROOT.parent / "kitjit" / "nn"
SRC, VSRC = str(NN / "attention_decode.py"), str(NN / "decode_variants.py")
SASS_VARIANTS = {  # name: kernel, its variant constexprs, programs per SM the shared memory
    # and registers must allow, merged in-kernel (fused) or partials for the combine kernel
    "kvbar": ("decode_kernel", dict(SEPKV=True), 2, False),
    "pers1s5": ("decode_persistent_kernel", dict(STAGES=5), 1, True),
    "pers2s2": ("decode_persistent_kernel", {}, 2, False),
    "pers1s4kv": ("decode_persistent_kernel", dict(STAGES=4, SEPKV=True), 1, True),
    "swap-q8": ("decode_swap_kernel", dict(BM=8), 3, True),
    "swap-q64-s4": ("decode_swap_kernel", dict(BM=64, STAGES=4), 1, False),
    "swap-d64-q16": ("decode_swap_kernel", dict(BM=16, D=64), 3, False),
}


@needs_sass
@pytest.mark.parametrize("name", list(SASS_VARIANTS))
@pytest.mark.slow_except("kvbar", "pers1s4kv", "swap-q8")
def test_sass_decode_variant(name):
    kernel, extra, per_sm, fused = SASS_VARIANTS[name]
    ptrs = ("fp32", "fp32", "bf16", "fp32", "i32") if fused else ("fp32",) * 5
    sig = ["*bf16:16"] * 3 + [f"*{t}:16" for t in ptrs] + ["i32"] * 7 + ["fp32"]
    meta = {**dict(BM=64, BN=64, D=128, CAUSAL=False, STAGES=2, SPLIT=True, FUSED=fused,
                   NS=32 if fused else 1, RB=4 if fused else 1), **extra}
    ck = kit.compile_aot(SRC if kernel == "decode_kernel" else VSRC, kernel, sig, meta, 4,
                         "sm_90a")
    try:
        ops = sass_opcodes(disassemble(ck.asm["cubin"]))
    except ToolError as e:
        pytest.skip(str(e))
    assert any(o.startswith("HGMMA") for o in ops), "no warpgroup MMA"
    assert any(o.startswith("UTMALDG") for o in ops), "no TMA loads"
    assert not any(o.startswith(("HMMA", "LDL", "STL")) for o in ops)
    assert ck.metadata["spills"] == 0 and ck.n_spills == 0, ck.metadata
    assert per_sm * (ck.metadata["shared"] + 1024) <= 228 * 1024, ck.metadata["shared"]
    assert per_sm * 128 * ck.metadata["registers"] <= 65536


# ============================================================================ GPU
GPU_CASES = [  # (B, H, Hkv, Sq, Skv, D, causal)
    (64, 32, 8, 1, 1000, 128, False),    # many items per persistent program, one split
    (8, 32, 8, 1, 5000, 128, False),     # splits, ragged chunks
    (3, 32, 8, 4, 777, 128, True),
    (2, 16, 16, 16, 333, 64, False),
]
GPU_VARIANTS = {**VARIANTS, "pers1s5": dict(persistent=1, STAGES=5),
                "pers1-many-splits": dict(persistent=1, STAGES=4, splits=9, fused=False)}


@pytest.mark.gpu
@pytest.mark.parametrize("variant", list(GPU_VARIANTS))
@pytest.mark.parametrize("B,H,Hkv,Sq,Skv,D,causal", GPU_CASES)
def test_gpu_decode_variant(B, H, Hkv, Sq, Skv, D, causal, variant, poison):
    q, k, v = base.bhsd(B, H, Sq, D, Hkv=Hkv, Skv=Skv, device="cuda", seed=70)
    for _ in range(2):   # the second call: the route's direct launch path
        check_decode(q, k, v, causal, poison, f"{variant} B{B} Skv{Skv}",
                     **GPU_VARIANTS[variant])

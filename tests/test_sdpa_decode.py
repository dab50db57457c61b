"""The split-KV decode path of issue 12 (kitjit/nn/attention_decode.py): a few query rows
against a long KV cache, GQA heads packed into the tile rows, partial O and LSE per key chunk
merged by a combine kernel.

Against float64 torch on fresh random inputs with every allocation poisoned (NaN), so an
unwritten row or a partial the combine skipped fails: Sq 1 and > 1, GQA / MQA / MHA, key
lengths that are not multiples of the block or of the chunk, one split (no combine) and many,
group rows over one tile (G*Sq > 64), causal (top-left, as torch), fp16 and bf16; the sdpa
wrapper choosing it by query length (and autograd through it); the split-count heuristic;
compile-to-SASS for sm_90a (WGMMA, TMA, no spills, two programs per SM); the same on a GPU
(`-m gpu`) at the issue's decode shapes.
"""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch
import torch.nn.functional as F

import kitjit as kit
import kitjit.nn.functional as KF
from kitjit.nn import attention_decode as AD
from kitjit.testing import rel_error
from kitjit.tools import ToolError, disassemble, find_tool, sass_opcodes

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import test_sdpa as base  # noqa: E402  (its fixtures and input makers)

assert_close, bhsd, from_kernel, llm_qkv = (base.assert_close, base.bhsd, base.from_kernel,
                                            base.llm_qkv)
poison, no_fallback = base.poison, base.no_fallback   # fixtures


def ref_lse(q, k, causal, scale=None):
    """The natural-log log-sum-exp per query row, float64 (GQA: K repeated per group)."""
    kk = k.double().repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    s = q.double() @ kk.transpose(-1, -2) * (scale or q.shape[-1] ** -0.5)
    if causal:
        s = s.masked_fill(torch.ones(q.shape[2], k.shape[2], dtype=torch.bool,
                                     device=q.device).triu(1), float("-inf"))
    return torch.logsumexp(s, -1)


def check_decode(q, k, v, causal, made, what, refs=None, **kw):
    o, lse = AD.attention_decode(q, k, v, causal, **kw)
    assert from_kernel(o, made) and from_kernel(lse, made), "not the kernel's own output"
    assert o.shape == q.shape and o.dtype == q.dtype and lse.shape == q.shape[:3]
    r, rl = refs or (base.ref(q, k, v, is_causal=causal, enable_gqa=True),
                     ref_lse(q, k, causal))
    assert_close(o, r, what)
    assert not torch.isnan(lse).any(), f"{what}: NaN in the LSE"
    assert rel_error(lse, rl) < 1e-3, what


# ============================================================================ interpreter
CASES = {  # name: (B, H, Hkv, Sq, Skv, splits)
    "gqa4-q1-ragged": (1, 8, 2, 1, 150, None),      # 3 blocks, 3 splits, last one ragged
    "gqa4-q1-chunk2": (2, 4, 1, 1, 300, 2),         # chunks of 3 blocks, the last ragged
    "mha-q3": (2, 2, 2, 3, 200, 3),
    "mqa-q16-2tiles": (1, 8, 1, 16, 130, 2),        # 128 group rows: two tiles of 64
    "gqa2-q5-rows80": (1, 32, 2, 5, 70, None),      # 80 group rows: the second tile 16 live
    "one-split": (2, 4, 2, 2, 100, 1),              # no combine: the output directly
    "one-key": (1, 4, 2, 1, 1, None),
}


@pytest.mark.parametrize("fused", [None, False], ids=["auto", "combine-kernel"])
@pytest.mark.parametrize("name", list(CASES))
def test_decode_kernels(name, fused, poison):
    """`fused`: None merges in the split kernel (the last program of a group) where its
    tile fits, False through the combine kernel."""
    B, H, Hkv, Sq, Skv, splits = CASES[name]
    q, k, v = llm_qkv(B, Sq, H, 64, Hkv=Hkv, Skv=Skv, seed=30)
    check_decode(q, k, v, False, poison, name, splits=splits, fused=fused)


def test_plan_fuses_when_the_tile_fits():
    """One launch where the last program can hold all (split, row) partials of its tile
    (FUSE_MAX): B8 (2 splits x 4 rows) and B1 (16 x 4); with more splits (asked for) the
    combine kernel, one program per row, merged faster on an H100."""
    meta = AD._plan(8, 32, 8, 1, 4096, 128, False, None, None, None, 132)[3]
    assert meta["SPLIT"] and meta["FUSED"] and (meta["NS"], meta["RB"]) == (2, 4)
    meta = AD._plan(8, 32, 8, 1, 4096, 128, False, None, None, None, 132, False)[3]
    assert meta["SPLIT"] and not meta["FUSED"]
    meta = AD._plan(1, 32, 8, 1, 4096, 128, False, None, None, None, 132)[3]
    assert meta["SPLIT"] and meta["FUSED"] and (meta["NS"], meta["RB"]) == (16, 4)
    meta = AD._plan(1, 32, 8, 1, 4096, 128, False, 32, None, None, 132)[3]
    assert meta["SPLIT"] and not meta["FUSED"]
    meta = AD._plan(1, 32, 8, 1, 4096, 128, False, 32, None, None, 132, True)[3]
    assert meta["FUSED"] and (meta["NS"], meta["RB"]) == (32, 4)     # asked for: fused
    # 16 query rows per head x G=4: 64 live rows, too many splits for one tile: the kernel
    meta = AD._plan(1, 32, 8, 16, 4096, 128, False, None, None, None, 132)[3]
    assert meta["SPLIT"] and not meta["FUSED"]
    # one split: nothing to merge
    meta = AD._plan(64, 32, 8, 1, 4096, 128, False, None, None, None, 132)[3]
    assert not meta["SPLIT"] and not meta["FUSED"]


def test_plan_stages_and_key_blocks():
    """Three K/V stages where the grid is one program per SM or fewer (split grids); two, and
    128-key blocks for caches of 16K keys or more, where the programs outnumber the SMs."""
    def meta(B, SK, **kw):
        return AD._plan(B, 32, 8, 1, SK, 128, False, None, None, None, 132, **kw)[3]
    assert (meta(1, 32768)["STAGES"], meta(1, 32768)["BN"]) == (3, 64)
    assert (meta(8, 32768)["STAGES"], meta(8, 32768)["BN"]) == (3, 64)
    assert (meta(64, 4096)["STAGES"], meta(64, 4096)["BN"]) == (2, 64)
    assert (meta(64, 16384)["STAGES"], meta(64, 16384)["BN"]) == (2, 128)
    assert meta(64, 16384, persistent=1)["BN"] == 64          # the variants keep theirs
    assert AD._plan(64, 32, 8, 1, 16384, 256, False, None, None, None, 132)[3]["BN"] == 32


@pytest.mark.parametrize("cfg", [dict(BN=128, STAGES=2), dict(STAGES=3)], ids=["bn128", "s3"])
def test_decode_default_configs_at_ragged_lengths(cfg, poison):
    """The configs the plan picks for long caches (128-key blocks) and split grids (three
    stages), forced at lengths the interpreter runs: ragged last blocks, one and two splits."""
    for Skv, splits in ((300, 1), (333, 2)):
        q, k, v = llm_qkv(2, 1, 8, 128, Hkv=2, Skv=Skv, seed=Skv)
        check_decode(q, k, v, False, poison, f"{cfg} Skv {Skv}", splits=splits, **cfg)


def test_fused_counters_are_left_zero(monkeypatch, poison):
    """The last program of each group sets its counter back to 0, so that the next call on
    a workspace (the direct path reuses them) counts from 0; two calls on one counter
    buffer, the second with new values, both right."""
    made = []
    zeros = torch.zeros

    def record(*a, **kw):
        t = zeros(*a, **kw)
        if t.dtype == torch.int32:
            made.append(t)
        return t
    monkeypatch.setattr(torch, "zeros", record)
    for seed in (37, 38):
        q, k, v = bhsd(2, 8, 3, 64, Hkv=2, Skv=333, seed=seed)
        check_decode(q, k, v, False, poison, f"seed {seed}", splits=5)
    assert len(made) == 2 and all(t.numel() == 2 * 2 and not t.any() for t in made)


@pytest.mark.parametrize("Sq,Skv", [(1, 90), (4, 90), (16, 70), (12, 5)],
                         ids=["q1", "q4", "q16", "keys<q"])
def test_decode_causal_top_left(Sq, Skv, poison):
    """torch's is_causal with Sq != Skv: query i sees keys 0..i (Sq=1: key 0 only)."""
    q, k, v = bhsd(1, 4, Sq, 64, Hkv=2, Skv=Skv, seed=31)
    check_decode(q, k, v, True, poison, f"causal {Sq}x{Skv}", splits=4)


@pytest.mark.parametrize("dtype,D", [(torch.float16, 128), (torch.bfloat16, 256)],
                         ids=["fp16-D128", "bf16-D256"])
def test_decode_dtypes_and_head_dims(dtype, D, poison):
    q, k, v = bhsd(1, 4, 2, D, Hkv=1, Skv=97, dtype=dtype, seed=32)
    check_decode(q, k, v, False, poison, f"{dtype} D{D}", splits=2)


def test_decode_scale(poison):
    q, k, v = bhsd(1, 4, 1, 64, Hkv=2, Skv=80, seed=33)
    o, _ = AD.attention_decode(q, k, v, sm_scale=0.3, splits=2)
    assert_close(o, base.ref(q, k, v, scale=0.3, enable_gqa=True), "scale=0.3")


@pytest.mark.parametrize("Sq,decode", [(1, True), (16, True), (17, False)])
def test_sdpa_chooses_decode_by_query_length(Sq, decode, monkeypatch, poison, no_fallback):
    calls = []
    real = AD.Route.__call__   # every decode call, through sdpa's fast path or not
    monkeypatch.setattr(AD.Route, "__call__", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    q, k, v = llm_qkv(1, Sq, 4, 64, Hkv=2, Skv=80, seed=34)
    out = KF.sdpa(q, k, v, enable_gqa=True)
    assert bool(calls) == decode
    assert from_kernel(out, poison)
    assert_close(out, base.ref(q, k, v, enable_gqa=True), f"sdpa Sq={Sq}")


def kv_cache_views(B, Hkv, Skv, D, layout, device="cpu", seed=0):
    """k, v of Skv positions as a decode loop holds them: "sliced": a (B, Hkv, Smax, D)
    cache cut to the filled length; "llm": a (B, Smax, Hkv, D) cache cut and transposed;
    "expanded": one K/V head broadcast over Hkv heads (stride 0). The rest of each cache is
    NaN (never-written slots must not reach the result)."""
    Smax = Skv + 37
    if layout == "expanded":
        k, v = (base.randn(B, 1, Skv, D, seed=seed + i, device=device).expand(B, Hkv, Skv, D)
                for i in (1, 2))
        return k, v
    shape = (B, Hkv, Smax, D) if layout == "sliced" else (B, Smax, Hkv, D)
    out = []
    for i in (1, 2):
        cache = torch.full(shape, float("nan"), dtype=torch.bfloat16, device=device)
        t = cache[:, :, :Skv] if layout == "sliced" else cache[:, :Skv].transpose(1, 2)
        t.copy_(base.randn(B, Hkv, Skv, D, seed=seed + i, device=device))
        out.append(t)
    return tuple(out)


@pytest.mark.parametrize("layout", ["sliced", "llm", "expanded"])
def test_sdpa_decode_kv_cache_layouts(layout, poison, no_fallback):
    """Caches that are not contiguous (copied first, never read past their views)."""
    k, v = kv_cache_views(2, 2, 150, 64, layout, seed=39)
    assert not k.is_contiguous()
    for Sq in (1, 5):
        q = base.randn(2, 8, Sq, 64, seed=40 + Sq)
        out = KF.sdpa(q, k, v, enable_gqa=True)
        assert from_kernel(out, poison)
        assert_close(out, base.ref(q, k, v, enable_gqa=True), f"{layout} Sq={Sq}")


def test_sdpa_decode_backward(no_fallback):
    """A decode-length forward saved for autograd: its LSE feeds the backward kernels."""
    q, k, v = (t.requires_grad_() for t in bhsd(1, 4, 3, 64, Hkv=2, Skv=70, seed=35))
    do = base.randn(1, 4, 3, 64, seed=36)
    KF.sdpa(q, k, v, enable_gqa=True).backward(do)
    qq, kk, vv = (t.detach().double().requires_grad_() for t in (q, k, v))
    F.scaled_dot_product_attention(qq, kk, vv, enable_gqa=True).backward(do.double())
    for got, want, n in ((q.grad, qq.grad, "dq"), (k.grad, kk.grad, "dk"), (v.grad, vv.grad,
                                                                            "dv")):
        assert not torch.isnan(got).any() and rel_error(got, want) < 2e-2, n


def test_decode_errors():
    q, k, v = bhsd(1, 4, 1, 64, Hkv=2, Skv=8)
    with pytest.raises(ValueError, match="no keys"):
        AD.attention_decode(q, k[:, :, :0], v[:, :, :0])
    with pytest.raises(ValueError, match="multiple of H_kv"):
        AD.attention_decode(q, k[:, :1].expand(1, 3, 8, 64), v[:, :1].expand(1, 3, 8, 64))
    with pytest.raises(TypeError, match="fp16 or all bf16"):
        AD.attention_decode(q.float(), k.float(), v.float())
    with pytest.raises(ValueError, match="head dim 32"):
        AD.attention_decode(q[..., :32], k[..., :32], v[..., :32])


@pytest.mark.parametrize("programs,blocks,want", [
    (8, 64, range(12, 17)),        # B=1, H_kv 8, 4096 keys: about a wave of 132 programs
    (64, 512, range(2, 3)),        # B=8, 32768 keys
    (512, 512, range(1, 2)),       # B=64: already two waves, no split
    (8, 1, range(1, 2)),           # one block: nothing to split
    (1, 1000, range(100, 129)),    # one group: at most MAX_SPLITS
])
def test_num_splits(programs, blocks, want):
    s = AD.num_splits(programs, blocks, 132)
    assert s in want, s
    assert s <= AD.MAX_SPLITS


# ============================================================================ SASS
needs_sass = pytest.mark.skipif(
    find_tool("cuobjdump") is None or find_tool("nvdisasm") is None,
    reason="cuobjdump/nvdisasm not found")
SRC = str(ROOT / "kitjit" / "nn" / "attention_decode.py")


SASS_MODES = {  # mode: (O, L, Out, Lse, Cnt) as the route passes them, SPLIT, FUSED, NS, RB
    "partials": ("fp32", "fp32", "fp32", "fp32", "fp32", True, False, 1, 1),
    "fused": ("fp32", "fp32", "bf16", "fp32", "i32", True, True, 32, 4),
    "direct": ("bf16", "fp32", "bf16", "fp32", "fp32", False, False, 1, 1),
}


@needs_sass
@pytest.mark.parametrize("mode", list(SASS_MODES))
def test_sass_decode(mode):
    *ptrs, split, fused, ns, rb = SASS_MODES[mode]
    sig = ["*bf16:16"] * 3 + [f"*{t}:16" for t in ptrs] + ["i32"] * 7 + ["fp32"]
    ck = kit.compile_aot(SRC, "decode_kernel", sig, dict(BM=64, BN=64, D=128, CAUSAL=False,
                                                         STAGES=2, SPLIT=split, FUSED=fused,
                                                         NS=ns, RB=rb), 4, "sm_90a")
    try:
        ops = sass_opcodes(disassemble(ck.asm["cubin"]))
    except ToolError as e:
        pytest.skip(str(e))
    assert any(o.startswith("HGMMA") for o in ops), "no warpgroup MMA"
    assert any(o.startswith("UTMALDG") for o in ops), "no TMA loads"
    assert not any(o.startswith(("HMMA", "LDL", "STL")) for o in ops)
    assert ck.metadata["spills"] == 0 and ck.n_spills == 0, ck.metadata
    # two programs per SM: 2 x (shared + 1 KB reserved) within the SM's 228 KB
    assert 2 * (ck.metadata["shared"] + 1024) <= 228 * 1024, ck.metadata["shared"]
    assert 2 * 128 * ck.metadata["registers"] <= 65536


@needs_sass
def test_sass_combine():
    ck = kit.compile_aot(SRC, "combine_kernel", ["*fp32:16", "*fp32:16", "*bf16:16", "*fp32:16",
                                                 "i32", "i32"], dict(NS=128, D=128), 8,
                         "sm_90a")
    try:
        ops = sass_opcodes(disassemble(ck.asm["cubin"]))
    except ToolError as e:
        pytest.skip(str(e))
    assert "LDG.E.128" in ops, "the partials should load 16 bytes at a time"
    assert ck.metadata["spills"] == 0 and not any(o.startswith(("LDL", "STL")) for o in ops)


# ============================================================================ GPU
GPU_CASES = [  # (B, H, Hkv, Sq, Skv, D): the decode shapes (smaller B) and more
    (1, 32, 8, 1, 4096, 128),
    (8, 32, 8, 1, 16384, 128),
    (2, 32, 8, 1, 32768, 128),
    (3, 32, 8, 4, 5000, 128),          # speculative decoding: 4 rows per head, ragged cache
    (2, 16, 16, 16, 3333, 64),
    (1, 8, 1, 1, 2049, 256),
    (64, 32, 8, 1, 1000, 128),         # many programs: one split, no combine
]


GPU_VARIANTS = [  # (causal, splits, fused): the heuristic's, one split, 7 merged in-kernel
    (False, None, None), (False, 1, None), (False, 7, None), (False, 7, False),  # or not
    (True, None, None)]


@pytest.mark.gpu
@pytest.mark.parametrize("B,H,Hkv,Sq,Skv,D", GPU_CASES,
                         ids=[f"B{b}H{h}kv{hk}q{sq}k{sk}D{d}" for b, h, hk, sq, sk, d in GPU_CASES])
def test_gpu_decode(B, H, Hkv, Sq, Skv, D, poison):
    q, k, v = base.bhsd(B, H, Sq, D, Hkv=Hkv, Skv=Skv, device="cuda", seed=40)
    refs = {}
    for causal, splits, fused in GPU_VARIANTS:
        if causal not in refs:
            refs[causal] = (base.ref(q, k, v, is_causal=causal, enable_gqa=True),
                            ref_lse(q, k, causal))
        check_decode(q, k, v, causal, poison, f"causal={causal} splits={splits} "
                     f"fused={fused}", refs[causal], splits=splits, fused=fused)
        torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.parametrize("Sq", [1, 2, 3, 8, 16])
def test_gpu_decode_query_lengths(Sq, poison):
    """1 to 16 query rows per head (speculative decoding), GQA 4, a ragged cache: the rows
    of a group packed in one tile, merged in-kernel where the (split, row) tile fits."""
    q, k, v = base.bhsd(2, 32, Sq, 128, Hkv=8, Skv=5003, device="cuda", seed=45 + Sq)
    check_decode(q, k, v, False, poison, f"Sq={Sq}")
    torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["sliced", "llm", "expanded"])
def test_gpu_sdpa_decode_kv_cache_layouts(layout, poison, no_fallback):
    """A KV cache as decode loops hold it (a preallocated cache cut to its filled length,
    the (B, S, H_kv, D) layout transposed, one head broadcast), the rest NaN."""
    k, v = kv_cache_views(2, 8, 4099, 128, layout, device="cuda", seed=46)
    q = base.randn(2, 32, 1, 128, device="cuda", seed=47)
    for _ in range(2):        # the checked call, then the direct path's (which copies too)
        out = KF.sdpa(q, k, v, enable_gqa=True)
        torch.cuda.synchronize()
        assert from_kernel(out, poison)
        assert_close(out, base.ref(q, k, v, enable_gqa=True), f"{layout}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_gpu_sdpa_decode_llm_layout(dtype, poison, no_fallback):
    q, k, v = llm_qkv(4, 1, 32, 128, Hkv=8, Skv=4097, dtype=dtype, device="cuda", seed=41)
    out = KF.sdpa(q, k, v, enable_gqa=True)
    torch.cuda.synchronize()
    assert from_kernel(out, poison)
    assert_close(out, base.ref(q, k, v, enable_gqa=True), "sdpa decode (B, S, H, D)")


@pytest.mark.gpu
def test_gpu_sdpa_decode_cuda_graph():
    """Captured once (the split kernel and its PDL-launched combine), replayed on new values:
    each replay matches the float64 reference of the values it saw."""
    q, k, v = base.bhsd(2, 32, 1, 128, Hkv=8, Skv=3000, device="cuda", seed=42)
    assert AD.num_splits(16, 47, torch.cuda.get_device_properties(0).multi_processor_count) > 1
    # merged in-kernel when called eagerly; captured, the split and combine kernels
    assert AD.route(2, 32, 8, 1, 3000, 128, False, 128 ** -0.5, None, None, None, True,
                    torch.bfloat16, torch.cuda.current_device()).fused
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        KF.sdpa(q, k, v, enable_gqa=True)          # compiled before the capture
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            out = KF.sdpa(q, k, v, enable_gqa=True)
    torch.cuda.current_stream().wait_stream(s)
    for seed in (43, 44):
        for t, new in zip((q, k, v), base.bhsd(2, 32, 1, 128, Hkv=8, Skv=3000, device="cuda",
                                                seed=seed)):
            t.copy_(new)
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert_close(out, base.ref(q, k, v, enable_gqa=True), f"graph replay seed {seed}")


@pytest.mark.gpu
def test_gpu_direct_path_repeated_calls(poison, no_fallback):
    """sdpa's direct path (kitjit/nn/_host.py): from the second call of a shape on, the
    kernels launch through their own launchers with the TMA operands by pointer and the
    partials in the workspace. Each call sees fresh values (a new q every step, the cache
    rewritten in place, a new cache, a strided one that is copied) and matches float64."""
    B, H, Hkv, D, SK = 2, 32, 8, 128, 3000
    _, k, v = base.bhsd(B, H, 1, D, Hkv=Hkv, Skv=SK, device="cuda", seed=50)
    for step in range(6):
        q = base.randn(B, H, 1, D, device="cuda", seed=60 + step)
        if step == 2:                                  # the cache rewritten in place
            k.copy_(base.randn(B, Hkv, SK, D, device="cuda", seed=70))
        if step == 3:                                  # a new cache: new pointers, rows
            _, k, v = base.bhsd(B, H, 1, D, Hkv=Hkv, Skv=SK + 7, device="cuda", seed=71)
        kk = k
        if step == 4:                                  # strided: the checked path copies it
            kk = base.randn(B, Hkv, SK + 7, 2 * D, device="cuda", seed=72)[..., :D]
        out = KF.sdpa(q, kk, v, enable_gqa=True)
        torch.cuda.synchronize()
        assert from_kernel(out, poison), step
        assert_close(out, base.ref(q, kk, v, enable_gqa=True), f"step {step}")
    from kitjit.nn import _host
    assert AD.route(B, H, Hkv, 1, SK, D, False, D ** -0.5, None, None, None, True,
                    torch.bfloat16, torch.cuda.current_device()).fused
    # the in-kernel merge leaves every counter of the workspace at 0 for the next call
    assert _host._WS and all(not ws[3].any() for ws in _host._WS.values())


@pytest.mark.gpu
def test_gpu_direct_path_streams_and_threads(no_fallback):
    """Calls queued on two streams at once, and from two threads on one stream, each with
    its own q: every output is its own call's (the workspace and its counters are per
    stream and thread)."""
    import threading

    B, H, Hkv, D, SK = 2, 32, 8, 128, 3000        # 16 splits: merged in-kernel
    _, k, v = base.bhsd(B, H, 1, D, Hkv=Hkv, Skv=SK, device="cuda", seed=80)
    qs = [base.randn(B, H, 1, D, device="cuda", seed=81 + i) for i in range(8)]
    KF.sdpa(qs[0], k, v, enable_gqa=True)               # the checked first call
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    outs = [None] * 8
    for i, q in enumerate(qs):                          # no sync between: both queues full
        with torch.cuda.stream(streams[i % 2]):
            outs[i] = KF.sdpa(q, k, v, enable_gqa=True)
    torch.cuda.synchronize()
    for i, (q, o) in enumerate(zip(qs, outs)):
        assert_close(o, base.ref(q, k, v, enable_gqa=True), f"stream {i % 2} call {i}")

    touts: list = [None] * 8
    barrier = threading.Barrier(2)

    def work(j):
        barrier.wait()
        for i in range(j, 8, 2):
            touts[i] = KF.sdpa(qs[i], k, v, enable_gqa=True)

    ths = [threading.Thread(target=work, args=(j,)) for j in range(2)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    torch.cuda.synchronize()
    for i, (q, o) in enumerate(zip(qs, touts)):
        assert_close(o, base.ref(q, k, v, enable_gqa=True), f"thread {i % 2} call {i}")


@pytest.mark.gpu
def test_gpu_direct_path_forward_backward(no_fallback):
    """The forward and backward routes, called again on new values (their direct path):
    outputs and gradients against float64 each time."""
    from test_sdpa_backward import assert_grads, ref_grads

    for step in range(3):
        q, k, v = (t.requires_grad_() for t in base.bhsd(2, 8, 300, 128, Hkv=2, Skv=333,
                                                          device="cuda", seed=90 + step))
        do = base.randn(2, 8, 300, 128, device="cuda", seed=95 + step)
        out = KF.sdpa(q, k, v, enable_gqa=True)
        out.backward(do)
        torch.cuda.synchronize()
        assert_close(out.detach(), base.ref(q.detach(), k.detach(), v.detach(),
                                            enable_gqa=True), f"forward step {step}")
        assert_grads((q.grad, k.grad, v.grad), ref_grads(q, k, v, do, False),
                     f"backward step {step}")
        with torch.no_grad():                        # sdpa's route without autograd
            o2 = KF.sdpa(q, k, v, enable_gqa=True)
        assert_close(o2, base.ref(q.detach(), k.detach(), v.detach(), enable_gqa=True),
                     f"no-grad forward step {step}")

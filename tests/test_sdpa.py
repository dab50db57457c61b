"""kitjit.nn.functional.scaled_dot_product_attention against torch's, in float64 (issue 12).

What a user of torch's SDPA does, on the CPU interpreter at small sizes and (`-m gpu`) at real
ones: the (B, S, H, D).transpose(1, 2) layout of LLMs, a query length other than the key
length (decode against a KV cache, cross-attention) with and without causal (top-left, as
torch), GQA with and without enable_gqa (torch's error), torch's full call, and the calls the
kernel does not cover (mask, dropout, fp32, other head dims) running torch's own with one
warning per reason. Outputs are poisoned (torch.empty hands out NaN) and inputs are fresh
random numbers, so an unwritten element or a stale result fails.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import kitjit.nn.functional as KF
from kitjit.nn import attention as A
from kitjit.testing import rel_error

NAN = float("nan")
TOL = 1e-2


def randn(*shape, dtype=torch.bfloat16, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to(device)


def ref(q, k, v, **kw):
    """torch's SDPA in float64 (on q's device)."""
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kw)


def assert_close(out, r, what):
    assert out.shape == r.shape, (what, out.shape, r.shape)
    n_nan = int(torch.isnan(out).sum())
    assert n_nan == 0, f"{what}: {n_nan} NaN (unwritten) of {out.numel()}"
    err = rel_error(out, r)
    assert err <= TOL, f"{what}: relative error {err:.3g}"
    worst = float((out.double() - r).abs().amax(dim=-1).max() / r.abs().amax().clamp_min(1e-6))
    assert worst < 5e-2, f"{what}: worst element off by {worst:.3g} of the largest"


def assert_honest(out):
    """The strides describe the data: a contiguous tensor of its own."""
    assert out.is_contiguous(), out.stride()


@pytest.fixture
def poison(monkeypatch):
    made: list[torch.Tensor] = []

    def poisoning(orig):
        def alloc(*args, **kwargs):
            out = orig(*args, **kwargs)
            if out.dtype.is_floating_point and out.numel():
                out.fill_(NAN)
                made.append(out)
            return out
        return alloc

    monkeypatch.setattr(torch, "empty", poisoning(torch.empty))
    monkeypatch.setattr(torch, "empty_like", poisoning(torch.empty_like))
    # kitjit.nn's hot paths allocate with new_empty; their workspaces start fresh (and so
    # poisoned) in each test
    monkeypatch.setattr(torch.Tensor, "new_empty", poisoning(torch.Tensor.new_empty))
    from kitjit.nn import _host

    _host.reset()
    return made


def from_kernel(out, made) -> bool:
    return any(out.data_ptr() == m.data_ptr() for m in made)


@pytest.fixture
def fresh_warnings(monkeypatch):
    """A process that has warned about nothing yet; every warning recorded."""
    monkeypatch.setattr(KF, "_warned", set())
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        yield w


@pytest.fixture
def no_fallback():
    with warnings.catch_warnings():
        warnings.simplefilter("error", KF.KitjitFallbackWarning)
        yield


def llm_qkv(B, S, H, D, Hkv=None, Skv=None, dtype=torch.bfloat16, device="cpu", seed=0):
    """q, k, v made (B, S, H, D) and transposed to (B, H, S, D), as LLMs lay them out."""
    Hkv, Skv = Hkv or H, S if Skv is None else Skv
    return (randn(B, S, H, D, dtype=dtype, seed=seed, device=device).transpose(1, 2),
            randn(B, Skv, Hkv, D, dtype=dtype, seed=seed + 1, device=device).transpose(1, 2),
            randn(B, Skv, Hkv, D, dtype=dtype, seed=seed + 2, device=device).transpose(1, 2))


def bhsd(B, H, S, D, Hkv=None, Skv=None, dtype=torch.bfloat16, device="cpu", seed=0):
    Hkv, Skv = Hkv or H, S if Skv is None else Skv
    return (randn(B, H, S, D, dtype=dtype, seed=seed, device=device),
            randn(B, Hkv, Skv, D, dtype=dtype, seed=seed + 1, device=device),
            randn(B, Hkv, Skv, D, dtype=dtype, seed=seed + 2, device=device))


CAUSAL = pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])


# ============================================================================ interpreter
@CAUSAL
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_llm_layout(causal, dtype, poison, no_fallback):
    q, k, v = llm_qkv(2, 70, 2, 64, dtype=dtype, seed=1)
    assert not q.is_contiguous()
    out = KF.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert from_kernel(out, poison) and out.dtype == dtype
    assert_honest(out)
    assert_close(out, ref(q, k, v, is_causal=causal), "(B, S, H, D).transpose(1, 2)")


@CAUSAL
@pytest.mark.parametrize("Sq,Skv", [(1, 70), (40, 96), (96, 40), (65, 130)],
                         ids=["decode-1x70", "cross-40x96", "40keys-96q", "65x130"])
def test_query_length_other_than_key_length(Sq, Skv, causal, poison, no_fallback):
    q, k, v = bhsd(1, 2, Sq, 64, Skv=Skv, seed=2)
    out = KF.sdpa(q, k, v, is_causal=causal)
    assert from_kernel(out, poison)
    assert_close(out, ref(q, k, v, is_causal=causal), f"Sq={Sq} Skv={Skv}")


KERNEL_CFGS = {  # both kernels, and both consumers of the warp-specialized one
    "plain": dict(BM=64, BN=64, STAGES=2, num_warps=4),
    "ws": dict(BM=64, BN=64, STAGES=2, ws=True),
    "ws-overlap": dict(BM=64, BN=64, STAGES=3, ws=True, OVERLAP=True),
    # two consumer warpgroups taking turns on the tensor cores (named barriers)
    "ws-turns": dict(BM=128, BN=64, STAGES=3, ws=True, TURNS=True),
    # overlapped, K and V stages on barriers of their own (with and without turns)
    "ws-split": dict(BM=64, BN=64, STAGES=2, ws=True, SPLIT=True),
    "ws-split-turns": dict(BM=128, BN=64, STAGES=2, ws=True, TURNS=True, SPLIT=True),
    # three consumer warpgroups on a 192-row Q tile (FA4's D=64 tile), taking turns
    "ws-turns-3": dict(BM=192, BN=64, STAGES=2, ws=True, TURNS=True),
    "ws-overlap-3": dict(BM=192, BN=128, STAGES=3, ws=True, OVERLAP=True),
}


@CAUSAL
@pytest.mark.parametrize("cfg", list(KERNEL_CFGS))
@pytest.mark.parametrize("Sq,Skv", [(1, 70), (40, 96), (96, 40)],
                         ids=["decode-1x70", "cross-40x96", "40keys-96q"])
def test_kernels_query_length_other_than_key_length(Sq, Skv, cfg, causal, poison):
    q, k, v = llm_qkv(2, Sq, 4, 64, Hkv=2, Skv=Skv, seed=3)
    o, lse = A.attention(q, k, v, causal, **KERNEL_CFGS[cfg])
    assert from_kernel(o, poison) and from_kernel(lse, poison)
    assert o.shape == (2, 4, Sq, 64) and lse.shape == (2, 4, Sq)
    r = ref(q, k, v, is_causal=causal, enable_gqa=True)
    assert_close(o, r, f"{cfg} Sq={Sq} Skv={Skv}")
    s = q.double() @ k.double().repeat_interleave(2, dim=1).transpose(-1, -2) / 8.0
    if causal:
        s = s.masked_fill(torch.ones(Sq, Skv, dtype=torch.bool).triu(1), float("-inf"))
    assert rel_error(lse, torch.logsumexp(s, -1)) < 1e-3


@pytest.mark.parametrize("Hkv,gqa", [(2, True), (1, True), (1, False), (4, False)],
                         ids=["gqa2", "mqa", "mqa-broadcast", "mha"])
def test_gqa(Hkv, gqa, poison, no_fallback):
    q, k, v = llm_qkv(1, 40, 4, 64, Hkv=Hkv, Skv=70, seed=4)
    out = KF.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    assert from_kernel(out, poison)
    assert_close(out, ref(q, k, v, is_causal=True, enable_gqa=gqa), f"H=4 Hkv={Hkv}")


def test_gqa_without_enable_gqa_raises_like_torch(fresh_warnings):
    q, k, v = bhsd(1, 4, 16, 64, Hkv=2)
    with pytest.raises(Exception) as theirs:
        F.scaled_dot_product_attention(q, k, v)
    with pytest.raises(type(theirs.value)) as ours:
        KF.scaled_dot_product_attention(q, k, v)
    assert str(ours.value) == str(theirs.value)
    assert not fresh_warnings


def test_torch_call_and_signature(poison, no_fallback):
    q, k, v = llm_qkv(1, 33, 4, 128, Hkv=2, Skv=50, seed=5)
    out = KF.sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True, scale=None,
                  enable_gqa=True)
    assert from_kernel(out, poison)
    assert_close(out, ref(q, k, v, is_causal=True, enable_gqa=True), "torch's call")
    out = KF.sdpa(q, k, v, None, 0.0, False, scale=0.3, enable_gqa=True)
    assert_close(out, ref(q, k, v, scale=0.3, enable_gqa=True), "scale=0.3")
    for f in (KF.sdpa, F.scaled_dot_product_attention):   # scale, enable_gqa: keyword-only
        with pytest.raises(TypeError):
            f(q, k, v, None, 0.0, False, 0.3, True)
    assert KF.sdpa is KF.scaled_dot_product_attention


@pytest.mark.parametrize("shape", [(2, 24, 64), (2, 1, 2, 24, 64)], ids=["3d", "5d"])
def test_other_ranks(shape, poison, no_fallback):
    q, k, v = (randn(*shape, seed=s) for s in (6, 7, 8))
    out = KF.sdpa(q, k, v, is_causal=True)
    assert from_kernel(out, poison)
    assert_close(out, ref(q, k, v, is_causal=True), f"{len(shape)}-d")


def test_misaligned_contiguous_input(poison, no_fallback):
    """A contiguous view at an offset that is not 16-byte aligned (TMA needs alignment)."""
    buf = randn(1 * 2 * 24 * 64 + 1, seed=9)
    q = buf[1:].view(1, 2, 24, 64)
    assert q.is_contiguous() and q.data_ptr() % 16
    k, v = randn(1, 2, 24, 64, seed=10), randn(1, 2, 24, 64, seed=11)
    assert_close(KF.sdpa(q, k, v), ref(q, k, v), "misaligned q")


# ----------------------------------------------------------------------------- fallbacks
def mask_bool(q, k):
    g = torch.Generator().manual_seed(12)
    m = torch.rand(q.shape[-2], k.shape[-2], generator=g) > 0.3
    m[:, 0] = True
    return m


FALLBACKS = {  # name: (inputs and kwargs, what the warning says)
    "bool-mask": (lambda: (bhsd(1, 2, 24, 64, Skv=40), {"mask": "bool"}), "attn_mask"),
    "float-mask": (lambda: (bhsd(1, 2, 24, 64, Skv=40), {"mask": "float"}), "attn_mask"),
    "dropout": (lambda: (bhsd(1, 2, 24, 64), {"dropout_p": 0.25}), "dropout_p"),
    "fp32": (lambda: (bhsd(1, 2, 24, 64, dtype=torch.float32), {}), "dtype"),
    "head-dim-32": (lambda: (bhsd(1, 2, 24, 32), {}), "head dim 32"),
    "head-dim-96": (lambda: (bhsd(1, 2, 24, 96), {"is_causal": True}), "head dim 96"),
    "value-dim": (lambda: ((randn(1, 2, 24, 64), randn(1, 2, 24, 64), randn(1, 2, 24, 128)),
                           {}), "shapes"),
    "scale<=0": (lambda: (bhsd(1, 2, 24, 64), {"scale": -0.5}), "scale"),
}


@pytest.mark.parametrize("name", list(FALLBACKS))
def test_fallback_matches_torch_and_warns_once(name, fresh_warnings):
    make, says = FALLBACKS[name]
    (q, k, v), kw = make()
    kw = dict(kw)
    if kw.pop("mask", None) is not None:
        m = mask_bool(q, k)
        kw["attn_mask"] = m if name == "bool-mask" else torch.where(m, 0.5, float("-inf"))
    for _ in range(2):
        torch.manual_seed(13)
        out = KF.scaled_dot_product_attention(q, k, v, **kw)
        torch.manual_seed(13)
        theirs = F.scaled_dot_product_attention(q, k, v, **kw)
        assert torch.equal(out, theirs), name        # torch's own result, bit for bit
    ws = [w for w in fresh_warnings if issubclass(w.category, KF.KitjitFallbackWarning)]
    assert len(ws) == 1, [str(w.message) for w in ws]
    assert says in str(ws[0].message)
    if name not in ("dropout",):
        kwd = {k2: (v2.double() if isinstance(v2, torch.Tensor) and v2.is_floating_point()
                    else v2) for k2, v2 in kw.items()}
        r = ref(q, k, v, **kwd)
        assert rel_error(out, r) < (1e-5 if q.dtype == torch.float32 else TOL), name


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["kernel", "fallback"])
def test_no_keys_gives_zeros(dtype, monkeypatch):
    """torch's CPU kernel leaves the output uninitialized for S = 0 (it is zeros only when
    the memory happens to be): kitjit returns zeros, in torch's shape."""
    monkeypatch.setattr(KF, "_warned", set())
    q, k, v = bhsd(1, 2, 24, 64, Skv=0, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KF.KitjitFallbackWarning)
        out = KF.sdpa(q, k, v, is_causal=True)
    assert out.shape == q.shape and out.dtype == dtype and not out.any()


def test_requires_grad_head_dim_256(fresh_warnings):
    """Head dim 256 has its backward kernel (kitjit/nn/attention_backward_d256.py): with grad
    wanted, no fallback warning and torch's gradient; without, the forward kernel (the
    gradients at every head dim: tests/test_sdpa_backward.py)."""
    q, k, v = (t.requires_grad_() for t in bhsd(1, 2, 24, 256, dtype=torch.float16))
    out = KF.sdpa(q, k, v, is_causal=True)
    assert out.requires_grad
    w = randn(1, 2, 24, 256, seed=9)
    (out.float() * w).sum().backward()
    qq, kk, vv = (t.detach().double().requires_grad_() for t in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=True).backward(
        w.double())
    for got, want in ((q.grad, qq.grad), (k.grad, kk.grad), (v.grad, vv.grad)):
        assert_close(got, want, "grad")
    assert not [str(w.message) for w in fresh_warnings
                if issubclass(w.category, KF.KitjitFallbackWarning)]
    with torch.no_grad():                          # no grad wanted: the kernel runs
        with warnings.catch_warnings():
            warnings.simplefilter("error", KF.KitjitFallbackWarning)
            assert_close(KF.sdpa(q, k, v, is_causal=True), ref(q, k, v, is_causal=True),
                         "no_grad")


def test_fallback_cpu_without_interpreter(monkeypatch, fresh_warnings):
    monkeypatch.delenv("KITJIT_INTERPRET")
    q, k, v = bhsd(1, 2, 24, 64)
    assert torch.equal(KF.sdpa(q, k, v), F.scaled_dot_product_attention(q, k, v))
    assert len(fresh_warnings) == 1 and "KITJIT_INTERPRET" in str(fresh_warnings[0].message)


def test_distinct_reasons_warn_separately(fresh_warnings):
    q, k, v = bhsd(1, 2, 24, 64, dtype=torch.float32)
    KF.sdpa(q, k, v, dropout_p=0.1)                # two reasons: dropout and fp32
    KF.sdpa(q, k, v)                               # fp32 again: nothing new
    KF.sdpa(q, k, v, attn_mask=mask_bool(q, k))    # a third
    msgs = [str(w.message) for w in fresh_warnings]
    assert len(msgs) == 3, msgs
    assert sum("dtype" in m for m in msgs) == 1


def test_example_sdpa_is_the_functional():
    import importlib
    import pathlib
    import sys

    ex = str(pathlib.Path(__file__).resolve().parents[1] / "examples")
    if ex not in sys.path:
        sys.path.insert(0, ex)
    m = importlib.import_module("attention")
    assert m.sdpa is KF.scaled_dot_product_attention
    assert m.attention_kernel is A.attention_kernel          # one copy of the kernels


# ============================================================================ GPU
GPU_CASES = [  # (B, H, Hkv, Sq, Skv, D)
    (2, 8, 8, 1000, 1000, 128),
    (2, 8, 2, 1000, 1000, 64),
    (1, 4, 2, 777, 777, 256),
    (4, 8, 2, 1, 300, 128),            # decode against a KV cache
    (2, 8, 8, 128, 320, 128),          # cross-attention
    (2, 8, 8, 320, 128, 64),
    (1, 4, 4, 1, 4097, 64),
]


@pytest.mark.gpu
@CAUSAL
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("B,H,Hkv,Sq,Skv,D", GPU_CASES,
                         ids=[f"B{b}H{h}kv{hk}q{sq}k{sk}D{d}" for b, h, hk, sq, sk, d in GPU_CASES])
def test_gpu_sdpa(B, H, Hkv, Sq, Skv, D, layout, causal, poison, no_fallback):
    make = llm_qkv if layout == "bshd" else bhsd
    q, k, v = (make(B, Sq, H, D, Hkv=Hkv, Skv=Skv, device="cuda", seed=20) if layout == "bshd"
               else make(B, H, Sq, D, Hkv=Hkv, Skv=Skv, device="cuda", seed=20))
    gqa = H != Hkv
    out = KF.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    torch.cuda.synchronize()
    assert from_kernel(out, poison)
    assert_honest(out)
    assert_close(out, ref(q, k, v, is_causal=causal, enable_gqa=gqa), f"{layout}")


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", list(KERNEL_CFGS) + ["D128-default"])
@CAUSAL
def test_gpu_kernels_query_length_other_than_key_length(cfg, causal, poison):
    D = 128 if cfg == "D128-default" else 64
    for Sq, Skv in ((1, 300), (128, 320), (320, 128)):
        q, k, v = llm_qkv(2, Sq, 8, D, Hkv=2, Skv=Skv, device="cuda", seed=21)
        o, lse = A.attention(q, k, v, causal, **KERNEL_CFGS.get(cfg, {}))
        torch.cuda.synchronize()
        assert from_kernel(o, poison) and from_kernel(lse, poison)
        assert_close(o, ref(q, k, v, is_causal=causal, enable_gqa=True), f"{cfg} {Sq}x{Skv}")


@pytest.mark.gpu
def test_gpu_gqa_without_enable_gqa_raises_like_torch():
    q, k, v = bhsd(1, 4, 16, 64, Hkv=2, device="cuda")
    with pytest.raises(Exception) as theirs:
        F.scaled_dot_product_attention(q, k, v)
    with pytest.raises(type(theirs.value)) as ours:
        KF.scaled_dot_product_attention(q, k, v)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(FALLBACKS))
def test_gpu_fallback_matches_torch(name, fresh_warnings):
    make, says = FALLBACKS[name]
    (q, k, v), kw = make()
    q, k, v = q.cuda(), k.cuda(), v.cuda()
    kw = dict(kw)
    if kw.pop("mask", None) is not None:
        m = mask_bool(q, k).cuda()
        kw["attn_mask"] = m if name == "bool-mask" else torch.where(m, 0.5, float("-inf"))
    torch.manual_seed(13)
    out = KF.scaled_dot_product_attention(q, k, v, **kw)
    if "attn_mask" in kw:   # not torch's default answer: its cuDNN masked kernel is wrong on
        m = kw["attn_mask"]  # the H200 (kitjit's fallback leaves it out): float64 instead
        r = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **dict(
            kw, attn_mask=m if m.dtype == torch.bool else m.double()))
        assert rel_error(out, r) < TOL, name
    else:
        torch.manual_seed(13)
        ref = F.scaled_dot_product_attention(q, k, v, **kw)
        assert torch.allclose(out, ref, rtol=0, atol=0, equal_nan=True), name  # NaN: scale<=0
    assert any(says in str(w.message) for w in fresh_warnings)

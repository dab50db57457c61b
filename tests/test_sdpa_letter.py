"""kitjit.nn.functional.sdpa is torch's to the letter (issue 12, item 2): every call torch
takes gives torch's answer (the kernel's, within bf16 rounding of the float64 reference, or
torch's own bits where it falls back), every call torch refuses raises torch's error.

Swept as a user would call it: argument types, every broadcast shape of a bool or additive
mask (with rows masked out entirely), causal with Sq > Skv and Sq < Skv (top-left), scale,
GQA, dropout, 3-d and 5-d inputs, empty dims, head dims without a kernel, fp32/fp64, mixed
dtypes, strides (expanded, permuted, strided), gradients of some inputs only, NaN/inf.
CPU: the interpreter at tiny shapes; `-m gpu`: the same table on the GPU.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kitjit.nn.functional as KF
from kitjit.testing import rel_error

TOL = 2e-2
NEG = float("-inf")


def rnd(*shape, dtype=torch.bfloat16, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to(device)


def qkv(B, H, Sq, Skv, D=64, Hkv=None, dtype=torch.bfloat16, device="cpu", seed=0):
    lead = (B,) if isinstance(B, int) else tuple(B)
    return (rnd(*lead, H, Sq, D, dtype=dtype, seed=seed, device=device),
            rnd(*lead, Hkv or H, Skv, D, dtype=dtype, seed=seed + 1, device=device),
            rnd(*lead, Hkv or H, Skv, D, dtype=dtype, seed=seed + 2, device=device))


def outcome(fn, *args, **kw):
    try:
        return fn(*args, **kw), None
    except Exception as e:     # noqa: BLE001  (compared with torch's own)
        return None, e


def same_as_torch(q, k, v, *args, **kw) -> torch.Tensor | None:
    """kitjit's sdpa against torch's on one call: the same exception type where torch
    raises; else the same shape, dtype and NaN pattern as torch's float64 result and values
    within bf16 rounding of it (bit for bit equal to torch's where kitjit fell back)."""
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        KF._warned.clear()   # kitjit warns once per reason per process: see every fallback
        torch.manual_seed(5)
        got, err = outcome(KF.scaled_dot_product_attention, q, k, v, *args, **kw)
    torch.manual_seed(5)
    theirs, terr = outcome(F.scaled_dot_product_attention, q, k, v, *args, **kw)
    if terr is not None and q.is_cuda and kw.get("attn_mask") is not None:
        # torch's GPU kernels refuse some masks its documented semantics (and its CPU
        # kernel) accept: a 1-d (Skv,) mask, an fp32 mask with bf16 inputs (H200, torch
        # 2.11); kitjit's fallback computes them (math kernel): held to torch's CPU answer
        # held to torch's CPU answer; where its CPU fused kernel refuses too (a 1-d mask,
        # torch 2.11 with bf16), to its math kernel, the documented semantics
        cpu = {n: (x.cpu() if isinstance(x, torch.Tensor) else x) for n, x in kw.items()}
        theirs, cerr = outcome(F.scaled_dot_product_attention, q.cpu(), k.cpu(), v.cpu(),
                               *args, **cpu)
        if cerr is not None and kw["attn_mask"].dim() < 2:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            with sdpa_kernel([SDPBackend.MATH]):
                theirs, cerr = outcome(F.scaled_dot_product_attention, q.cpu(), k.cpu(),
                                       v.cpu(), *args, **cpu)
        if cerr is None:
            theirs, terr = theirs.to(q.device), None
    if terr is not None:
        assert err is not None and type(err) is type(terr), (err, terr)
        return None
    assert err is None, err
    if theirs is None:   # torch's GPU kernels return nothing for B=0 (torch 2.11, H200)
        theirs = F.scaled_dot_product_attention(*(t.cpu() for t in (q, k, v)), *args, **{
            n: (x.cpu() if isinstance(x, torch.Tensor) else x) for n, x in kw.items()})
    assert got.shape == theirs.shape and got.dtype == theirs.dtype, (got.shape, theirs.shape)
    fell_back = any(issubclass(w.category, KF.KitjitFallbackWarning) for w in ws)
    # a masked call on a GPU goes to torch without its cuDNN kernel (wrong there): checked
    # against float64 below, not against torch's default answer
    if fell_back and k.shape[-2] and not (q.is_cuda and kw.get("attn_mask") is not None):
        assert torch.equal(got.isnan(), theirs.isnan())   # e.g. on fully masked rows)
        assert torch.equal(got.nan_to_num(), theirs.nan_to_num())
        return got
    if not got.numel() or (kw.get("dropout_p", 0.0) or 0.0) > 0:
        return got
    d64 = {n: (t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t)
           for n, t in kw.items()}
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), *args, **d64)
    if k.shape[-2] == 0:
        ref = torch.zeros_like(ref)
    assert torch.equal(got.isnan(), ref.isnan()), (int(got.isnan().sum()), int(ref.isnan().sum()))
    assert torch.equal(got.isinf(), ref.isinf())
    fin = ref.isfinite()
    if fin.any():
        assert rel_error(got[fin], ref[fin]) <= TOL
    return got


# ---------------------------------------------------------------- arguments
ARGS = {
    "is_causal=1": ({"is_causal": 1}, TypeError),
    "enable_gqa=1": ({"enable_gqa": 1}, TypeError),
    "is_causal=np.True_": ({"is_causal": np.True_}, TypeError),
    "scale=np.float32": ({"scale": np.float32(0.3)}, None),
    "scale=tensor0d": ({"scale": torch.tensor(0.3)}, None),
    "scale=tensor1d": ({"scale": torch.tensor([0.3])}, TypeError),
    "scale=True": ({"scale": True}, None),
    "scale=int": ({"scale": 1}, None),
    "scale=inf": ({"scale": float("inf")}, None),
    "dropout=tensor0": ({"dropout_p": torch.tensor(0.0)}, None),
}


@pytest.mark.parametrize("name", list(ARGS))
def test_argument_types(name):
    kw, raises = ARGS[name]
    q, k, v = qkv(1, 2, 5, 7)
    got = same_as_torch(q, k, v, **kw)
    assert (got is None) == (raises is not None)
    if raises:
        with pytest.raises(raises):
            KF.sdpa(q, k, v, **kw)


def test_scale_and_enable_gqa_are_keyword_only():
    q, k, v = qkv(1, 2, 5, 7)
    with pytest.raises(TypeError):
        F.scaled_dot_product_attention(q, k, v, None, 0.0, False, 0.3)
    with pytest.raises(TypeError):
        KF.sdpa(q, k, v, None, 0.0, False, 0.3)


# ---------------------------------------------------------------- masks
def masks(B, H, Sq, Skv, seed=3):
    """(name, mask) in every broadcast shape, bool and additive; one query row masked out
    entirely in the full ones (torch gives a NaN row in float64 and for additive masks)."""
    g = torch.Generator().manual_seed(seed)
    full = torch.rand(B, H, Sq, Skv, generator=g) > 0.4
    full[0, 0, 1] = False
    shapes = {"(Skv,)": full[0, 0, 0], "(Sq,Skv)": full[0, 0], "(1,1,Sq,Skv)": full[:1, :1],
              "(B,1,1,Skv)": full[:, :1, :1], "(B,H,Sq,Skv)": full, "(H,1,Skv)": full[0, :, :1]}
    for name, m in shapes.items():
        yield f"bool{name}", m
        yield f"add{name}", torch.where(m, torch.randn(m.shape, generator=g), NEG)


MASKS = list(masks(2, 2, 5, 7))


@pytest.mark.parametrize("i", range(len(MASKS)), ids=[n for n, _ in MASKS])
def test_masks(i):
    _, m = MASKS[i]
    q, k, v = qkv(2, 2, 5, 7)
    same_as_torch(q, k, v, attn_mask=m)
    same_as_torch(q, k, v, attn_mask=m, is_causal=True)      # torch raises: mask and causal


# ---------------------------------------------------------------- shapes, dtypes, strides
def _shapes():
    e = (1, 2, 7, 64)
    return {
        "causal Sq>Skv": (qkv(1, 2, 20, 9), {"is_causal": True}),
        "causal Sq<Skv": (qkv(1, 2, 20, 33), {"is_causal": True}),
        "causal Sq1": (qkv(1, 2, 1, 9), {"is_causal": True}),
        "scale": (qkv(1, 2, 20, 9), {"scale": 0.2}),
        "gqa": (qkv(1, 4, 5, 9, Hkv=2), {"enable_gqa": True}),
        "gqa without flag": (qkv(1, 4, 5, 9, Hkv=2), {}),
        "gqa 3/2": (qkv(1, 3, 5, 9, Hkv=2), {"enable_gqa": True}),
        "Hkv1 without flag": (qkv(1, 4, 5, 9, Hkv=1), {}),
        "3-d": (tuple(t[0] for t in qkv(1, 2, 5, 9)), {"is_causal": True}),
        "5-d": (qkv((2, 1), 2, 5, 9), {}),
        "batch broadcast": ((rnd(2, 2, 5, 64), *qkv(1, 2, 5, 9)[1:]), {}),
        "Sq0": (qkv(1, 2, 0, 9), {}),
        "Skv0": (qkv(1, 2, 5, 0), {}),
        "B0": (qkv(0, 2, 5, 9), {}),
        "D80": (qkv(1, 2, 5, 9, D=80), {}),
        "D40": (qkv(1, 2, 20, 9, D=40), {"is_causal": True}),
        "fp32": (qkv(1, 2, 5, 9, dtype=torch.float32), {}),
        "fp64": (qkv(1, 2, 5, 9, dtype=torch.float64), {}),
        "fp16": (qkv(1, 2, 20, 9, dtype=torch.float16), {}),
        "mixed dtypes": ((rnd(1, 2, 5, 64), rnd(1, 2, 7, 64, dtype=torch.float16),
                          rnd(1, 2, 7, 64)), {}),
        "value dim 128": ((rnd(1, 2, 5, 64), rnd(1, 2, 7, 64), rnd(1, 2, 7, 128)), {}),
        "k/v expanded over keys": ((rnd(1, 2, 5, 64), rnd(1, 2, 1, 64).expand(e),
                                    rnd(1, 2, 1, 64).expand(e)), {}),
        "k/v expanded over heads": ((rnd(1, 2, 5, 64), rnd(1, 1, 7, 64).expand(e),
                                     rnd(1, 1, 7, 64).expand(e)), {}),
        "k expanded over dim": ((rnd(1, 2, 5, 64), rnd(1, 2, 7, 1).expand(e), rnd(*e)), {}),
        "strided keys": ((rnd(1, 2, 20, 64), rnd(1, 2, 14, 64)[:, :, ::2],
                          rnd(1, 2, 14, 64)[:, :, ::2]), {"is_causal": True}),
        "permuted q": ((rnd(1, 64, 2, 5).permute(0, 2, 3, 1), *qkv(1, 2, 5, 7)[1:]), {}),
        "dropout no_grad": (qkv(1, 2, 5, 9), {"dropout_p": 0.5}),
        "dropout 1.5": (qkv(1, 2, 5, 9), {"dropout_p": 1.5}),
    }


SHAPES = _shapes()


@pytest.mark.parametrize("name", list(SHAPES))
def test_shapes_dtypes_strides(name):
    (q, k, v), kw = SHAPES[name]
    with torch.no_grad():
        same_as_torch(q, k, v, **kw)


def test_key_and_value_lengths_differ_raise():
    """torch's math path raises; its CPU flash kernel returns values read past the end of v
    (different each run): kitjit raises."""
    q, k, v = rnd(1, 2, 5, 64), rnd(1, 2, 7, 64), rnd(1, 2, 8, 64)
    with pytest.raises(RuntimeError, match="same length"):
        KF.sdpa(q, k, v)


# ---------------------------------------------------------------- NaN / inf
def _poisoned(where, value, causal=False):
    q, k, v = qkv(1, 2, 20, 9)
    {"q": q, "k": k, "v": v}[where][0, 1, 3, 5] = value
    return (q, k, v), {"is_causal": causal}


NONFINITE = {f"{w} {x}{' causal' if c else ''}": _poisoned(w, float(x), c)
             for w in "qkv" for x in ("nan", "inf") for c in (False, True)}
# The kernels read K/V (and, in the backward, Q/dO) tiles per head through 3-D TMA
# descriptors (issue 12): a tile past a head's last row reads zeros, never another head's
# rows, so a NaN/inf in one head stays there (tests/test_sdpa_cross_head.py checks the
# other heads bit for bit).
NONFINITE_PARAMS = list(NONFINITE)


@pytest.mark.parametrize("name", NONFINITE_PARAMS)
def test_nan_inf_propagate_as_float64(name):
    """As torch's float64 (math) result, NaN/inf pattern included (torch's own fp16/bf16
    CPU kernel drops a NaN query row; kitjit keeps it, as its GPU kernels do)."""
    (q, k, v), kw = NONFINITE[name]
    got = KF.sdpa(q, k, v, **kw)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kw)
    assert torch.equal(got.isnan(), ref.isnan()), (int(got.isnan().sum()), int(ref.isnan().sum()))
    assert torch.equal(got.isinf(), ref.isinf())
    fin = ref.isfinite()
    assert rel_error(got[fin], ref[fin]) <= TOL


# ---------------------------------------------------------------- gradients
def grads_vs_float64(q, k, v, wants, **kw):
    """Gradients (and the output) of kitjit's sdpa against torch's in float64, for the
    inputs in `wants`; None where torch gives None."""
    g = torch.Generator().manual_seed(9)
    own = [t.detach().clone().requires_grad_(w) for t, w in zip((q, k, v), wants)]
    _, terr = outcome(lambda: F.scaled_dot_product_attention(*own, **kw).sum().backward())
    if terr is not None:       # torch's own kernel refuses the call (e.g. no keys on a GPU)
        with pytest.raises(type(terr)):
            KF.sdpa(*own, **kw).sum().backward()
        return
    ins = [t.detach().clone().requires_grad_(w) for t, w in zip((q, k, v), wants)]
    ref_in = [t.detach().double().requires_grad_(w) for t, w in zip((q, k, v), wants)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KF.KitjitFallbackWarning)
        out = KF.sdpa(*ins, **kw)
    d64 = {n: (t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t)
           for n, t in kw.items()}
    ref = F.scaled_dot_product_attention(*ref_in, **d64)
    do = torch.randn(ref.shape, generator=g, dtype=torch.float64).to(ref.device)
    (out.double() * do).sum().backward()
    (ref * do).sum().backward()
    assert rel_error(out, ref) <= TOL
    for n, a, b in zip("qkv", ins, ref_in):
        assert (a.grad is None) == (b.grad is None), n
        if b.grad is not None and b.grad.numel():
            assert a.grad.shape == b.grad.shape and not a.grad.isnan().any(), n
            assert rel_error(a.grad, b.grad) <= 3e-2, f"d{n}: {rel_error(a.grad, b.grad):.3g}"


def _grad_cases():
    m = next(mm for n, mm in MASKS if n == "add(B,1,1,Skv)")
    return {
        "causal Sq>Skv": (qkv(2, 2, 20, 9), (1, 1, 1), {"is_causal": True}),
        "causal Sq<Skv": (qkv(1, 2, 20, 33), (1, 1, 1), {"is_causal": True}),
        "decode causal": (qkv(1, 2, 3, 33), (1, 1, 1), {"is_causal": True}),
        "gqa causal": (qkv(1, 4, 20, 20, Hkv=2), (1, 1, 1),
                       {"is_causal": True, "enable_gqa": True}),
        "only k": (qkv(1, 2, 20, 20), (0, 1, 0), {}),
        "q and v": (qkv(1, 2, 20, 20), (1, 0, 1), {"scale": 0.3}),
        "additive mask": (qkv(2, 2, 5, 7), (1, 1, 1), {"attn_mask": m}),
        "5-d": (qkv((2, 1), 2, 20, 20), (1, 1, 1), {}),
        "no keys": (qkv(1, 2, 5, 0), (1, 1, 1), {}),
        "no queries": (qkv(1, 2, 0, 9), (1, 1, 1), {}),
    }


GRADS = _grad_cases()


@pytest.mark.parametrize("name", list(GRADS))
def test_grads(name):
    (q, k, v), wants, kw = GRADS[name]
    grads_vs_float64(q, k, v, [bool(w) for w in wants], **kw)


def test_grads_of_expanded_keys():
    """k/v expanded (stride 0) from a tensor that requires grad: the gradient sums over the
    copies, as torch's."""
    q = rnd(1, 4, 20, 64).requires_grad_()
    kb, vb = rnd(1, 1, 20, 64, seed=1).requires_grad_(), rnd(1, 1, 20, 64, seed=2).requires_grad_()
    out = KF.sdpa(q, kb.expand(1, 4, 20, 64), vb.expand(1, 4, 20, 64), is_causal=True)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, kb, vb))
    ref = F.scaled_dot_product_attention(q64, k64.expand(1, 4, 20, 64), v64.expand(1, 4, 20, 64),
                                         is_causal=True)
    do = torch.randn(ref.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    (out.double() * do).sum().backward()
    (ref * do).sum().backward()
    for a, b in ((q, q64), (kb, k64), (vb, v64)):
        assert rel_error(a.grad, b.grad) <= 3e-2


def test_dropout_statistics_in_training():
    """dropout_p runs torch's own kernel (one warning): its bits for the same seed, and the
    kept fraction of a value of ones is 1 - p in expectation."""
    q, k, _ = qkv(1, 4, 16, 16)
    v = torch.ones(1, 4, 16, 64, dtype=torch.bfloat16)
    q.requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KF.KitjitFallbackWarning)
        torch.manual_seed(0)
        out = KF.sdpa(q, k, v, dropout_p=0.25)
    torch.manual_seed(0)
    assert torch.equal(out, F.scaled_dot_product_attention(q, k, v, dropout_p=0.25))
    mean = float(out.detach().float().mean())       # E[out] = 1: kept weights are scaled by 1/(1-p)
    assert abs(mean - 1.0) < 0.1, mean
    out.sum().backward()
    assert q.grad is not None and q.grad.isfinite().all()


# ============================================================================ GPU
def _cuda(t):
    return t.cuda() if isinstance(t, torch.Tensor) else t


# The H200 runs of 2026-11-28/29 (benchmarks/NOTES.md, session 7) found here: torch's cuDNN
# masked attention wrong (kitjit's fallback now avoids it), the cross-head NaN leak (3-d TMA
# now), torch returning None for B=0 on a GPU, and torch 2.11's math kernel letting a hidden
# NaN key reach the rows it is hidden from (see _hidden_keys_dropped).


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(SHAPES))
def test_gpu_shapes_dtypes_strides(name):
    (q, k, v), kw = SHAPES[name]
    with torch.no_grad():
        same_as_torch(*map(_cuda, (q, k, v)), **{n: _cuda(x) for n, x in kw.items()})


@pytest.mark.gpu
@pytest.mark.parametrize("i", range(len(MASKS)), ids=[n for n, _ in MASKS])
def test_gpu_masks(i):
    q, k, v = (t.cuda() for t in qkv(2, 2, 5, 7))
    same_as_torch(q, k, v, attn_mask=MASKS[i][1].cuda())


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(ARGS))
def test_gpu_argument_types(name):
    kw, raises = ARGS[name]
    got = same_as_torch(*(t.cuda() for t in qkv(1, 2, 5, 7)), **kw)
    assert (got is None) == (raises is not None)


@pytest.mark.gpu
@pytest.mark.parametrize("name", NONFINITE_PARAMS)
def test_gpu_nan_inf(name):
    (q, k, v), kw = NONFINITE[name]
    q, k, v = q.cuda(), k.cuda(), v.cuda()
    got = KF.sdpa(q, k, v, **kw)
    ref = _hidden_keys_dropped(q.double(), k.double(), v.double(), kw["is_causal"])
    assert torch.equal(got.isnan(), ref.isnan()) and torch.equal(got.isinf(), ref.isinf())


def _hidden_keys_dropped(q, k, v, causal):
    """float64 attention where a key the causal mask hides is dropped from the scores (as
    torch 2.13's math kernel, and its flash and cuDNN kernels, do); torch 2.11's math kernel
    on CUDA adds -inf to the score instead, so a NaN key there reaches the rows it is hidden
    from (NaN + -inf), which kitjit's kernels (and the interpreter) do not do."""
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        keep = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(GRADS))
def test_gpu_grads(name):
    (q, k, v), wants, kw = GRADS[name]
    grads_vs_float64(*(t.cuda() for t in (q, k, v)), [bool(w) for w in wants],
                     **{n: _cuda(x) for n, x in kw.items()})


@pytest.mark.gpu
def test_gpu_inputs_on_cpu_and_gpu_raise_like_torch():
    q, k, v = qkv(1, 2, 20, 9)
    same_as_torch(q.cuda(), k, v.cuda())

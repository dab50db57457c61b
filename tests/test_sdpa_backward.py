"""Attention a model can train with (issue 12): the backward kernels of
kitjit/nn/attention_backward.py and the autograd path of kitjit.nn.functional.sdpa.

Gradients against float64 torch autograd on fresh random inputs, with every allocation
poisoned (NaN) so an unwritten element fails: ragged lengths, causal or not (top-left), GQA,
Sq != Skv, D 64, 128 and 256; torch.compile(fullgraph=True) with no graph break; a tiny
transformer block trained with kitjit attention against the same block with torch's;
compile-to-SASS for sm_90a (WGMMA, TMA loads and reduce-adds, no spills); the same on a GPU
(`-m gpu`) at real sizes.
"""

from __future__ import annotations

import copy
import pathlib
import re
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import kitjit as kit
import kitjit.nn.functional as KF
from kitjit.nn import attention_backward as AB
from kitjit.nn.attention import attention
from kitjit.testing import rel_error
from kitjit.tools import ToolError, disassemble, find_tool

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import test_sdpa as base  # noqa: E402  (its fixtures and input makers)

from_kernel, llm_qkv, randn = base.from_kernel, base.llm_qkv, base.randn
poison, no_fallback = base.poison, base.no_fallback   # fixtures

TOL = 2e-2   # bf16 gradients (rounded dS, P) against float64


def ref_grads(q, k, v, do, causal, scale=None):
    qq, kk, vv = (t.detach().double().requires_grad_() for t in (q, k, v))
    o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal, scale=scale,
                                       enable_gqa=q.shape[-3] != k.shape[-3])
    o.backward(do.double())
    return qq.grad, kk.grad, vv.grad


def assert_grads(got, want, what):
    for g, r, n in zip(got, want, ("dq", "dk", "dv")):
        assert g.shape == r.shape, (what, n, g.shape, r.shape)
        assert not torch.isnan(g).any(), f"{what} {n}: NaN (unwritten)"
        err = rel_error(g, r)
        assert err < TOL, f"{what} {n}: relative error {err:.3g}"


CASES = [  # (B, H, Hkv, Sq, Skv, D): ragged, GQA, Sq != Skv both ways, decode, D 64-256
    (1, 2, 2, 70, 70, 64),
    (2, 4, 2, 40, 96, 64),
    (1, 4, 1, 96, 40, 64),
    (1, 2, 2, 1, 70, 64),
    (1, 2, 1, 65, 130, 128),
    (3, 6, 3, 40, 130, 64),    # 9 K/V heads: causal programs go in groups of 8 heads
    (1, 2, 1, 70, 130, 256),   # D=256: its own kernel (attention_backward_d256.py)
    (1, 4, 2, 130, 40, 256),
]
CAUSAL = pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])


# ============================================================================ interpreter
@CAUSAL
@pytest.mark.parametrize("B,H,Hkv,Sq,Skv,D", CASES,
                         ids=[f"B{b}H{h}kv{k}q{s}k{t}D{d}" for b, h, k, s, t, d in CASES])
def test_backward_kernels(B, H, Hkv, Sq, Skv, D, causal, poison):
    q, k, v = llm_qkv(B, Sq, H, D, Hkv=Hkv, Skv=Skv, seed=30)
    do = randn(B, Sq, H, D, seed=34).transpose(1, 2)            # strided, as autograd may
    o, lse = attention(q, k, v, causal)
    got = AB.attention_backward(do, q, k, v, o, lse, causal)
    assert all(from_kernel(g, poison) for g in got)
    assert all(g.dtype == q.dtype and g.is_contiguous() for g in got)
    assert_grads(got, ref_grads(q, k, v, do, causal), f"Sq={Sq} Skv={Skv} D={D}")


def test_backward_kernels_other_configs_scale_fp16(poison):
    """Another pipeline (3 stages, one dS buffer, the dQ store under dK's MMA, causal), fp16,
    a scale."""
    cfg = dict(STAGES=3, DSB=1, REORDER=True)
    q, k, v = llm_qkv(1, 100, 4, 128, Hkv=2, Skv=177, dtype=torch.float16, seed=35)
    do = randn(1, 4, 100, 128, dtype=torch.float16, seed=36)
    o, lse = attention(q, k, v, True, 0.3)
    got = AB.attention_backward(do, q, k, v, o, lse, True, 0.3, config=cfg)
    assert_grads(got, ref_grads(q, k, v, do, True, 0.3), "fp16 scale=0.3")


@pytest.mark.parametrize("Hkv,gqa", [(2, True), (4, False)], ids=["gqa", "mha"])
def test_autograd_through_sdpa(Hkv, gqa, no_fallback):
    q, k, v = (t.requires_grad_() for t in llm_qkv(2, 33, 4, 64, Hkv=Hkv, Skv=50, seed=37))
    w = randn(2, 4, 33, 64, seed=38)
    out = KF.sdpa(q, k, v, is_causal=True, enable_gqa=gqa)
    (out.float() * w).sum().backward()
    assert_grads((q.grad, k.grad, v.grad), ref_grads(q, k, v, w, True), "sdpa autograd")


def test_autograd_5d_and_one_input_requiring_grad(no_fallback):
    q, k, v = (randn(2, 1, 2, 24, 128, seed=s) for s in (40, 41, 42))
    k.requires_grad_()
    do = randn(2, 1, 2, 24, 128, seed=43)
    KF.sdpa(q, k, v).backward(do)
    assert q.grad is None and v.grad is None
    assert rel_error(k.grad, ref_grads(q, k, v, do, False)[1]) < TOL


def test_torch_compile_fullgraph_autograd(no_fallback):
    """One graph (fullgraph: no break), the kitjit ops in it, the same gradients as eager."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        from torch._dynamo.backends.debugging import aot_eager
        return aot_eager(gm, example_inputs)

    def f(q, k, v):
        return (KF.sdpa(q, k, v, is_causal=True, enable_gqa=True).float() ** 2).sum()

    q, k, v = (t.requires_grad_() for t in llm_qkv(1, 40, 4, 64, Hkv=2, Skv=70, seed=44))
    f(q, k, v).backward()
    eager = [t.grad for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    torch._dynamo.reset()
    torch.compile(f, fullgraph=True, backend=backend)(q, k, v).backward()
    assert len(graphs) == 1 and "kitjit.attention_fwd" in graphs[0], graphs
    for a, t in zip(eager, (q, k, v)):
        assert torch.equal(a, t.grad)


def test_head_dim_256_with_grad_runs_kitjit(no_fallback):
    """D=256 with autograd: kitjit's forward and backward (no fallback warning), GQA."""
    q, k, v = (t.requires_grad_() for t in llm_qkv(1, 24, 4, 256, Hkv=2, Skv=50, seed=45))
    w = randn(1, 4, 24, 256, seed=48)
    (KF.sdpa(q, k, v, is_causal=True, enable_gqa=True).float() * w).sum().backward()
    assert_grads((q.grad, k.grad, v.grad), ref_grads(q, k, v, w, True), "sdpa D=256")


def test_head_dim_of_no_kernel_with_grad_falls_back(monkeypatch):
    monkeypatch.setattr(KF, "_warned", set())
    q, k, v = (randn(1, 2, 24, 96, seed=s).requires_grad_() for s in (45, 46, 47))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        KF.sdpa(q, k, v, is_causal=True).float().sum().backward()
    assert q.grad is not None
    assert any("head dim 96" in str(x.message) for x in w)


@pytest.mark.parametrize("qst,dost", [(2, 1), (1, 2)], ids=["q2", "do2"])
def test_backward_d256_two_stages_fp16_scale(qst, dost, poison):
    """The D=256 kernel with two Q or two dO stages, fp16, a scale, causal, Sq < Skv, 3 query
    heads a K/V head, no longest-first order."""
    q, k, v = llm_qkv(1, 50, 3, 256, Hkv=1, Skv=150, dtype=torch.float16, seed=52)
    do = randn(1, 50, 3, 256, dtype=torch.float16, seed=53).transpose(1, 2)
    o, lse = attention(q, k, v, True, 0.2)
    got = AB.attention_backward(do, q, k, v, o, lse, True, 0.2,
                                config=dict(QSTAGES=qst, DOSTAGES=dost, LPT=False))
    assert_grads(got, ref_grads(q, k, v, do, True, 0.2), "D=256 fp16 scale=0.2")


# ------------------------------------------------------------------- training (interpreter)
class Block(torch.nn.Module):
    """Pre-norm transformer block: causal GQA attention (bf16 q, k, v) + MLP."""

    def __init__(self, d, heads, kv_heads, sdpa):
        super().__init__()
        self.h, self.hkv, self.dh, self.sdpa = heads, kv_heads, d // heads, sdpa
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, (heads + 2 * kv_heads) * self.dh)
        self.proj = torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.GELU(),
                                       torch.nn.Linear(2 * d, d))

    def forward(self, x):
        B, S, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).to(torch.bfloat16).split(
            [self.h * self.dh, self.hkv * self.dh, self.hkv * self.dh], dim=-1)
        q = q.view(B, S, self.h, self.dh).transpose(1, 2)
        k = k.view(B, S, self.hkv, self.dh).transpose(1, 2)
        v = v.view(B, S, self.hkv, self.dh).transpose(1, 2)
        a = self.sdpa(q, k, v, is_causal=True, enable_gqa=self.hkv != self.h)
        x = x + self.proj(a.transpose(1, 2).reshape(B, S, d).float())
        return x + self.mlp(self.norm2(x))


def train_pair(B, S, d, heads, kv_heads, steps, device):
    torch.manual_seed(50)
    ours = Block(d, heads, kv_heads, KF.sdpa).to(device)
    theirs = copy.deepcopy(ours)
    theirs.sdpa = F.scaled_dot_product_attention
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (ours, theirs)]
    g = torch.Generator().manual_seed(51)
    losses = ([], [])
    for step in range(steps):
        x = torch.randn(B, S, d, generator=g).to(device)
        y = torch.randn(B, S, d, generator=g).to(device)
        for i, (m, opt) in enumerate(zip((ours, theirs), opts)):
            opt.zero_grad()
            loss = F.mse_loss(m(x), y)
            loss.backward()
            losses[i].append(float(loss.detach()))
            if step == 0:
                grads = [p.grad.clone() for p in m.parameters()]
                if i == 0:
                    first = grads
                else:
                    for (n, _), a, b in zip(m.named_parameters(), first, grads):
                        assert rel_error(a, b.double()) < 3e-2, f"step 0 grad of {n}"
            opt.step()
    for a, b in zip(*losses):
        assert abs(a - b) <= 2e-2 * abs(b), (losses)
    assert losses[0][-1] < losses[0][0]


def test_train_tiny_block(no_fallback):
    train_pair(B=2, S=24, d=128, heads=2, kv_heads=1, steps=4, device="cpu")


# ============================================================================ SASS
needs_sass = pytest.mark.skipif(
    find_tool("cuobjdump") is None or find_tool("nvdisasm") is None,
    reason="cuobjdump/nvdisasm not found")
SRC = ROOT / "kitjit" / "nn" / "attention_backward.py"


@needs_sass
@pytest.mark.parametrize("D,causal", [(64, False), (128, True)], ids=["D64", "D128-causal"])
@pytest.mark.slow_except("D128-causal")
def test_sass_bwd_kernel(D, causal):
    """The warp-specialized kernel: SS and RS HGMMAs (for D=128 one with a transposed A: Kᵀ),
    TMA loads and reduce-adds, setmaxnreg budgets, no spills at 240 registers a consumer."""
    cfg = dict(AB.bwd_config(D), D=D, CAUSAL=causal)
    sig = ["*bf16:16"] * 6 + ["*fp32:16"] * 3 + ["i32:16", "i32:16", "i32", "i32", "i32:16",
                                                 "i32", "fp32", "fp32"]
    ck = kit.compile_aot(str(SRC), "bwd_kernel", sig, cfg, 12, arch="sm_90a")
    try:
        text = disassemble(ck.asm["cubin"])
    except ToolError as e:
        pytest.skip(str(e))
    insns = re.findall(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([^;]*);", text, re.M)
    ss = [i for i in insns if re.match(r"HGMMA\.\S+ R\d+, gdesc\[", i)]
    rs = [i for i in insns if re.match(r"HGMMA\.\S+ R\d+, R\d+, gdesc\[", i)]
    assert ss and rs, "S, dP (and dQᵀ or dV, dK) from shared memory; dV, dK (or dQ) from registers"
    assert any(i.startswith("UTMALDG") for i in insns), "no TMA loads"
    assert any(i.startswith("UTMAREDG") for i in insns), "no TMA reduce-add of dQ"
    assert any(i.startswith("USETMAXREG") for i in insns)
    assert not any(i.startswith(("HMMA", "LDL", "STL")) for i in insns)
    assert ck.metadata["spills"] == 0 and ck.n_spills == 0, ck.metadata
    if D == 128:
        assert "p, 1, 1, 1, 1; }" in ck.asm["ptx"], "dQᵀ = Kᵀ dSᵀ reads Kᵀ transposed"


@needs_sass
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.slow_except("causal")
def test_sass_bwd_kernel_d256(causal):
    """D=256: 64-row HGMMAs only (one warpgroup's: Sᵀ, dPᵀ 64x64 from shared memory; dV
    64x256 and dK 64x128 halves from registers; dQ 64x128 halves with A transposed), TMA
    loads and reduce-adds, no spills, shared memory within the 227 KB of an H100 SM."""
    from kitjit.nn import attention_backward_d256 as AB256

    cfg = dict(AB256.bwd_config_d256(causal), D=256, CAUSAL=causal)
    sig = ["*bf16:16"] * 6 + ["*fp32:16"] * 3 + ["i32:16", "i32:16", "i32", "i32", "i32:16",
                                                 "i32", "fp32", "fp32"]
    ck = kit.compile_aot(AB256.__file__, "bwd_kernel_d256", sig, cfg, 12, arch="sm_90a")
    try:
        text = disassemble(ck.asm["cubin"])
    except ToolError as e:
        pytest.skip(str(e))
    insns = re.findall(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([^;]*);", text, re.M)
    shapes = {m.group(1) for i in insns for m in [re.match(r"HGMMA\.64x(\d+)x16", i)] if m}
    assert shapes == {"64", "128", "256"}, shapes
    assert any(re.match(r"HGMMA\.64x256x16\S* R\d+, R\d+, gdesc\[", i) for i in insns), \
        "dV += Pᵀ dO with Pᵀ from registers"
    assert any(i.startswith("UTMALDG") for i in insns)
    assert any(i.startswith("UTMAREDG") for i in insns), "no TMA reduce-add of dQ"
    assert not any(i.startswith(("HMMA", "LDL", "STL")) for i in insns)
    assert ck.metadata["spills"] == 0 and ck.n_spills == 0, ck.metadata
    assert ck.metadata["shared"] <= 227 * 1024, ck.metadata["shared"]


def test_backward_causal_head_groups(poison):
    """Causal programs go longest first in groups of K/V heads: 3 groups of 2, 2 and 1."""
    q, k, v = llm_qkv(1, 70, 10, 64, Hkv=5, Skv=200, seed=39)
    do = randn(1, 10, 70, 64, seed=40)
    o, lse = attention(q, k, v, True)
    got = AB.attention_backward(do, q, k, v, o, lse, True, config=dict(HG=2))
    assert_grads(got, ref_grads(q, k, v, do, True), "HG=2")


# ============================================================================ GPU
GPU_CASES = [  # (B, H, Hkv, Sq, Skv, D)
    (2, 8, 8, 1000, 1000, 128),
    (2, 8, 2, 1000, 1000, 64),
    (2, 8, 2, 300, 777, 128),
    (2, 8, 8, 777, 300, 64),
    (4, 8, 2, 1, 300, 128),
    (2, 8, 2, 1000, 1000, 256),
    (2, 4, 4, 300, 777, 256),
    (1, 8, 1, 777, 300, 256),
]


@pytest.mark.gpu
@CAUSAL
@pytest.mark.parametrize("B,H,Hkv,Sq,Skv,D", GPU_CASES,
                         ids=[f"B{b}H{h}kv{k}q{s}k{t}D{d}" for b, h, k, s, t, d in GPU_CASES])
def test_gpu_backward(B, H, Hkv, Sq, Skv, D, causal, poison, no_fallback):
    q, k, v = (t.requires_grad_() for t in
               llm_qkv(B, Sq, H, D, Hkv=Hkv, Skv=Skv, device="cuda", seed=60))
    do = randn(B, H, Sq, D, seed=61, device="cuda")
    KF.sdpa(q, k, v, is_causal=causal, enable_gqa=H != Hkv).backward(do)
    torch.cuda.synchronize()
    assert_grads((q.grad, k.grad, v.grad), ref_grads(q, k, v, do, causal), "gpu")


@pytest.mark.gpu
def test_gpu_train_block(no_fallback):
    train_pair(B=4, S=1024, d=1024, heads=8, kv_heads=2, steps=5, device="cuda")


@pytest.mark.gpu
def test_gpu_torch_compile_autograd(no_fallback):
    def f(q, k, v):
        return (KF.sdpa(q, k, v, is_causal=True).float() ** 2).sum()

    q, k, v = (t.requires_grad_() for t in llm_qkv(2, 500, 4, 128, device="cuda", seed=62))
    torch._dynamo.reset()
    torch.compile(f, fullgraph=True)(q, k, v).backward()
    do = 2 * KF.sdpa(q.detach(), k.detach(), v.detach(), is_causal=True).float()
    assert_grads((q.grad, k.grad, v.grad), ref_grads(q, k, v, do, True), "compiled")


@pytest.mark.gpu
@pytest.mark.parametrize("D,causal", [(64, True), (128, True), (64, False)],
                         ids=["D64-causal", "D128-causal", "D64"])
def test_gpu_backward_direct_path(D, causal, poison, no_fallback):
    """The backward's route called again on new values (its direct launches, the dQ sums,
    Δ and LSE in the workspace, the sums zeroed by the preprocess): against float64 each
    time, with the workspace poisoned before the first call."""
    for step in range(3):
        q, k, v = (t.requires_grad_() for t in
                   llm_qkv(2, 333, 8, D, Hkv=2, Skv=401, device="cuda", seed=70 + step))
        do = randn(2, 8, 333, D, seed=75 + step, device="cuda")
        KF.sdpa(q, k, v, is_causal=causal, enable_gqa=True).backward(do)
        torch.cuda.synchronize()
        assert_grads((q.grad, k.grad, v.grad), ref_grads(q, k, v, do, causal), f"step {step}")

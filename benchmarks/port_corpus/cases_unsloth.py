"""unsloth (unslothai/unsloth): its Triton kernels (SwiGLU/GeGLU forward and the fused
backward, (RMS) layer norm, RoPE, cross entropy). References in float64 torch.

Harness: unsloth's `__init__`s not run; `UNSLOTH_ALLOW_CPU=1` (unsloth's own switch: its
device check then answers "cuda" on the CPU); modules its kernel files import for other
purposes stood in for (`unsloth_zoo` helpers: `Version`, a logger, no-op patchers and
`torch_compile`; `transformers`' `LlamaRMSNorm` and logger)."""

from __future__ import annotations

import logging
import types

import torch
import torch.nn.functional as F
from corpus_harness import check, close, rnd, source


def _module(name: str, **attrs) -> types.ModuleType:
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    m.__path__ = []  # a package, so submodules resolve
    return m


def _stubs() -> dict[str, types.ModuleType]:
    from packaging.version import Version

    log = logging.getLogger("unsloth_stub")
    noop = lambda *a, **k: None  # noqa: E731
    mods = {
        "unsloth_zoo": _module("unsloth_zoo"),
        "unsloth_zoo.utils": _module("unsloth_zoo.utils", Version=Version),
        "unsloth_zoo.log": _module("unsloth_zoo.log", logger=log),
        "unsloth_zoo.temporary_patches": _module("unsloth_zoo.temporary_patches"),
        "unsloth_zoo.temporary_patches.common": _module(
            "unsloth_zoo.temporary_patches.common", torch_compile=lambda f=None, **k: f
            if f is not None else (lambda g: g)),
        "unsloth_zoo.patching_utils": _module("unsloth_zoo.patching_utils",
                                              patch_layernorm=noop),
        "unsloth_zoo.loss_utils": _module("unsloth_zoo.loss_utils",
                                          patch_loss_functions=noop,
                                          post_patch_loss_function=noop),
        "transformers": _module("transformers"),
        "transformers.models": _module("transformers.models"),
        "transformers.models.llama": _module("transformers.models.llama"),
        "transformers.models.llama.modeling_llama": _module(
            "transformers.models.llama.modeling_llama", LlamaRMSNorm=torch.nn.Module,
            logger=log),
    }
    return mods


case = source("unsloth", "unsloth", skip_init=("unsloth", "unsloth.kernels"), stubs=_stubs,
              env={"UNSLOTH_ALLOW_CPU": "1"})
K = "unsloth.kernels"


def _glu_forward(mod, fn, ref_act):
    def run(imp, device):
        m = imp(f"{K}.{mod}")
        e, g = rnd(3, 7, 130, device=device), rnd(3, 7, 130, device=device)
        check(getattr(m, fn), lambda e, g: ref_act(e) * g, (e, g), rtol=1e-4, atol=1e-4)
    return run


def _glu_backward(mod, fn, ref_act):
    """unsloth's fused backward: given DW (upstream grad), e, g it writes in place
    h = act(e) * g, df = DW * act(e), de = DW * g * act'(e) (into DW, e, g's memory)."""
    def run(imp, device):
        m = imp(f"{K}.{mod}")
        dw, e, g = (rnd(21, 130, device=device) for _ in range(3))
        ed = e.double().requires_grad_()
        f = ref_act(ed)
        (de,) = torch.autograd.grad(f, ed, dw.double())
        want = (f * g.double(), dw.double() * f, de * g.double())
        got = getattr(m, fn)(dw, e, g)
        for i, (a, b) in enumerate(zip(got, want)):
            close(a, b.detach(), f"output {i}", 1e-4, 1e-4)
    return run


def _gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


case("swiglu_forward", quick=True)(_glu_forward("swiglu", "swiglu_fg_kernel", F.silu))
case("swiglu_backward")(_glu_backward("swiglu", "swiglu_DWf_DW_dfg_kernel", F.silu))
case("geglu_exact_forward")(_glu_forward("geglu", "geglu_exact_forward_kernel", F.gelu))
case("geglu_exact_backward")(_glu_backward("geglu", "geglu_exact_backward_kernel", F.gelu))
case("geglu_approx_forward")(_glu_forward("geglu", "geglu_approx_forward_kernel",
                                          _gelu_tanh))
case("geglu_approx_backward")(_glu_backward("geglu", "geglu_approx_backward_kernel",
                                            _gelu_tanh))


@case("layernorm")
def _layernorm(imp, device):
    m = imp(f"{K}.layernorm")
    x, w, b = rnd(3, 7, 200, device=device), rnd(200, device=device), rnd(200, device=device)
    check(lambda x, w, b: m.Fast_Layernorm.apply(x, w, b, 1e-5),
          lambda x, w, b: F.layer_norm(x, (200,), w, b, 1e-5), (x, w, b), grad_of=(0,))


def _rms(gemma):
    def run(imp, device):
        m = imp(f"{K}.rms_layernorm")
        x, w = rnd(3, 7, 200, device=device), rnd(200, device=device)

        def ref(x, w):
            n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
            return n * (1 + w) if gemma else n * w

        check(lambda x, w: m.Fast_RMS_Layernorm.apply(x, w, 1e-6, gemma), ref, (x, w),
              grad_of=(0,))
    return run


case("rms_layernorm")(_rms(False))
case("rms_layernorm_gemma")(_rms(True))


def rope_ref(x, cos, sin):  # x [B, T, H, D], cos/sin [T, D/2]: rotate halves
    h = x.shape[-1] // 2
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


@case("rope_qk")
def _rope(imp, device):
    m = imp(f"{K}.rope_embedding")
    q, k = rnd(2, 4, 37, 64, device=device), rnd(2, 2, 37, 64, device=device)
    ang = torch.rand(37, 32, device=device) * 6
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)

    def ref(q, k):
        c, s = ang.double().cos(), ang.double().sin()
        return (rope_ref(q.transpose(1, 2), c, s).transpose(1, 2),
                rope_ref(k.transpose(1, 2), c, s).transpose(1, 2))

    check(lambda q, k: m.fast_rope_embedding(q, k, cos, sin), ref, (q, k), grad_of=(0, 1))


def _ce(softcap, scaling, vocab):
    def run(imp, device):
        m = imp(f"{K}.cross_entropy_loss")
        x = rnd(2, 9, vocab, device=device, scale=2)
        t = torch.randint(0, vocab, (2, 9), device=device)
        t[0, 3] = -100

        def ref(x, t):
            z = x * scaling if scaling else x
            z = softcap * torch.tanh(z / softcap) if softcap else z
            return F.cross_entropy(z.view(-1, vocab), t.view(-1))

        check(lambda x, t: m.fast_cross_entropy_loss(x, t, softcap, scaling), ref, (x, t),
              grad_of=(0,))
    return run


case("cross_entropy")(_ce(0, 0, 3001))
case("cross_entropy_softcap")(_ce(30.0, 0, 3001))
case("cross_entropy_scaling")(_ce(0, 0.5, 3001))
case("cross_entropy_chunked")(_ce(0, 0, 70001))  # past unsloth's 65536 chunk

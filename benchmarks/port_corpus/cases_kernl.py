"""kernl (ELS-RD/kernl, archived 2023): inference kernels, forward only (kernl has no
backward). fp16 where kernl requires it, references in float64 torch."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from corpus_harness import check, rnd, source

case = source("kernl", "kernl", skip_init=("kernl", "kernl.implementations"))

F16 = torch.float16
# kernl's skinny kernel masks the padded key lanes by the block-local offset (n_range_offs,
# not block_n_offs): wrong past the first block whatever compiles it, so a multiple of 128
N_SKINNY = 256


def _layer_norm(impl, rms=False):
    def run(imp, device):
        m = imp("kernl.implementations.layer_norm")
        x, w, b = rnd(5, 7, 300, device=device), rnd(300, device=device), rnd(300, device=device)

        def ref(x, w, b):
            if rms:
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
            return F.layer_norm(x, (300,), w, b, 1e-5)

        check(lambda x, w, b: m.layer_norm(x, w, None if rms else b, 1e-5,
                                           getattr(m, impl), use_rms_norm=rms),
              ref, (x, w, b))
    return run


case("layer_norm_single_pass", quick=True)(_layer_norm("_layer_norm_fwd_fused_single_pass"))
case("layer_norm_multi_pass")(_layer_norm("_layer_norm_fwd_fused_multi_pass"))
case("layer_norm_xformers")(_layer_norm("layer_norm_xformers"))
case("rms_norm")(_layer_norm("_layer_norm_fwd_fused_single_pass", rms=True))


def attn_ref(q, k, v, scale, causal=False, mask=None):
    s = q @ k.transpose(-1, -2) * scale
    if mask is not None:
        s = s + mask
    if causal:
        t = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~t, float("-inf"))
    return s.softmax(-1) @ v


def _attention(fn_module, fn, causal=False, masked=False, m_size=77, n_size=77):
    def run(imp, device):
        f = getattr(imp(f"kernl.implementations.{fn_module}"), fn)
        q = rnd(2, 3, m_size, 64, device=device, dtype=F16)
        k, v = (rnd(2, 3, n_size, 64, device=device, dtype=F16) for _ in range(2))
        # a mask broadcast over batch and heads (kernl binds a 1-tuple where the batch is not 1)
        mask = (torch.randn(1, 1, 1, n_size, device=device) * 2).to(F16) if masked else None
        out = torch.empty_like(q)
        check(lambda q, k, v: f(q, k, v, out, 0.125, causal, mask),
              lambda q, k, v: attn_ref(q, k, v, 0.125, causal,
                                       None if mask is None else mask.double()),
              (q, k, v), rtol=2e-2, atol=2e-2)
    return run


case("attention")(_attention("attention", "attention_forward"))
case("attention_causal")(_attention("attention", "attention_forward", causal=True))
case("attention_mask")(_attention("attention", "attention_forward", masked=True))
case("attention_skinny")(_attention("attention_skinny", "skinny_attention_forward",
                                    m_size=1, n_size=N_SKINNY))
# kernl's vec-mat softmax counts its padded lanes: a power-of-two key length (its own tests')
case("attention_vec_mat")(_attention("attention_vec_mat", "attention_vec_mat_forward",
                                     m_size=1, n_size=256))


@case("batched_matmul")
def _bmm(imp, device):
    m = imp("kernl.implementations.batched_matmul")
    a, b = rnd(3, 70, 96, device=device, dtype=F16), rnd(3, 96, 50, device=device, dtype=F16)
    check(m.batched_matmul, torch.bmm, (a, b), rtol=1e-2, atol=1e-2)

# Not here: kernl's linear_layer imports triton.ops.matmul_perf_model (removed in Triton 3.0).

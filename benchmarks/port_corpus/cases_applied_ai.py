"""pytorch-labs/applied-ai: training and inference kernels (RMS norm, softmax, causal conv1d
for Mamba, fp8 group quantization, fp8 split-K GEMMs). The repository has no package
`__init__`s: modules import as namespace packages from `.corpus/applied_ai/`.

Not here (bugs of the package, whatever compiles it): the softmax backward passes its
pointers in the wrong order; the vector-add tutorial calls `a.is_cuda()`. The split-K fp8
GEMMs load without masks, so their sizes are multiples of the tiles."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from corpus_harness import check, close, rnd, source

case = source("applied_ai", "kernels")
TRITON = "kernels.triton"
FP8 = torch.float8_e4m3fn


@case("rms_norm", quick=True)
def _rms_norm(imp, device):
    m = imp(f"{TRITON}.training.rms_norm.fused_rms_norm")
    x, w = rnd(3, 7, 333, device=device), rnd(333, device=device)
    check(lambda x, w: m.fused_rms_norm_fn(x, w, 1e-6),
          lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, (x, w),
          grad_of=(0, 1))


@case("softmax")
def _softmax(imp, device):
    m = imp(f"{TRITON}.training.fused_softmax.softmax")
    x = rnd(9, 301, device=device, scale=3)
    check(m.triton_softmax.apply, lambda x: x.softmax(-1), (x,))


def _conv1d(activation):
    def run(imp, device):
        m = imp(f"{TRITON}.inference.mamba.causal_1d_conv.causal_1d_conv.causal_1d_conv")
        x = rnd(2, 45, 70, device=device).transpose(1, 2)  # (batch, dim, seqlen), channel last
        w, b = rnd(70, 4, device=device), rnd(70, device=device)

        def ref(x, w, b):
            y = F.conv1d(x, w[:, None, :], b, padding=3, groups=70)[..., :45]
            return F.silu(y) if activation else y

        check(lambda x, w, b: m.causal_conv1d_fn(x, w, b, activation=activation), ref,
              (x, w, b))
    return run


# forward only: the file calls a causal_conv1d_bwd it does not define
case("causal_conv1d")(_conv1d(None))
case("causal_conv1d_silu")(_conv1d("silu"))


@case("fp8_groupwise_quant")
def _fp8_quant(imp, device):
    m = imp(f"{TRITON}.inference.fp8.float8_groupwise_quant")
    x = rnd(5, 384, device=device, scale=3)
    out, scales = m.float8_groupwise_quantize(x, 128)
    g = x.double().view(5, 3, 128)
    want_s = g.abs().amax(-1).clamp_min(1e-12) / 448.0
    close(scales, want_s, "scales", 1e-6, 0)
    want = (g.float() / scales.view(5, 3, 1)).clamp(-448, 448).to(FP8).view(5, 384)
    close(out.float(), want.float(), "quantized", 0, 0)


def _fp8_gemm(fn_module, fn, k, scaled=False):
    def run(imp, device):
        m = imp(f"{TRITON}.inference.fp8.{fn_module}")
        a = rnd(128, k, device=device).to(FP8)
        b = rnd(k, 64, device=device).to(FP8).T.contiguous().T  # column major, as its tests
        args = (0.5, 3.0) if scaled else ()
        got = getattr(m, fn)(a, b, *args)
        want = a.double() @ b.double() * (1.5 if scaled else 1.0)
        close(got, want, "output", 2e-2, 2e-1)
    return run


case("fp8_splitk_gemm")(_fp8_gemm("splitk_gemm_fp8", "gemm_split_k", 2048))
case("fp8_scaled_splitk_gemm")(_fp8_gemm("scaled_fp8_gemm", "scaled_mm_splitk", 1024,
                                         scaled=True))

"""mamba (state-spaces/mamba): its Triton layer norms, gated RMS norm, the decode step
(selective state update) and Mamba-2's SSD chunked scan, forward and backward. References:
mamba's own `selective_state_update_ref` (plain torch, run in float64) and this file's
float64 token-by-token SSD recurrence (mamba's chunked `ssd_*_ref` upcast to float32).
Harness: `mamba_ssm/__init__.py` is not run (it imports the CUDA extension's modules)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from corpus_harness import check, rnd, source

case = source("mamba", "mamba_ssm", skip_init=("mamba_ssm", "mamba_ssm.ops"))
TRITON = "mamba_ssm.ops.triton"


@case("layer_norm_residual", quick=True)
def _layer_norm(imp, device):
    m = imp(f"{TRITON}.layer_norm")
    x, r = rnd(3, 7, 200, device=device), rnd(3, 7, 200, device=device)
    w, b = rnd(200, device=device), rnd(200, device=device)

    def ref(x, r, w, b):
        s = x + r
        return F.layer_norm(s, (200,), w, b, 1e-6), s

    check(lambda x, r, w, b: m.layer_norm_fn(x, w, b, residual=r, eps=1e-6, prenorm=True),
          ref, (x, r, w, b), grad_of=(0, 1, 2, 3))


@case("rms_norm")
def _rms_norm(imp, device):
    m = imp(f"{TRITON}.layer_norm")
    x, w = rnd(3, 7, 200, device=device), rnd(200, device=device)
    check(lambda x, w: m.rms_norm_fn(x, w, None, eps=1e-6),
          lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, (x, w),
          grad_of=(0, 1))


@case("rms_norm_gated")
def _rms_norm_gated(imp, device):
    m = imp(f"{TRITON}.layernorm_gated")
    x, z, w = rnd(9, 96, device=device), rnd(9, 96, device=device), rnd(96, device=device)

    def ref(x, z, w):  # groups of 32 channels, gate after the norm
        g = x.view(9, 3, 32)
        y = (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + 1e-6)).view(9, 96) * w
        return y * F.silu(z)

    check(lambda x, z, w: m.rmsnorm_fn(x, w, None, z=z, eps=1e-6, group_size=32), ref,
          (x, z, w), grad_of=(0, 1, 2))


@case("selective_state_update")
def _ssu(imp, device):
    m = imp(f"{TRITON}.selective_state_update")
    b, h, d, n, g = 3, 4, 24, 16, 2
    state = rnd(b, h, d, n, device=device)
    x, dt, z = (rnd(b, h, d, device=device) for _ in range(3))
    A = -torch.rand(h, d, n, device=device) - 0.5
    Bm, Cm = rnd(b, g, n, device=device), rnd(b, g, n, device=device)
    D, dt_bias = rnd(h, d, device=device), rnd(h, d, device=device)
    ref_state = state.double()
    want = m.selective_state_update_ref(ref_state, x.double(), dt.double(), A.double(),
                                        Bm.double(), Cm.double(), D.double(), z.double(),
                                        dt_bias.double(), dt_softplus=True)
    got = m.selective_state_update(state, x, dt, A, Bm, Cm, D, z, dt_bias, dt_softplus=True)
    from corpus_harness import close

    close(got, want, "output", 1e-4, 1e-4)
    close(state, ref_state, "state", 1e-4, 1e-4)


def ssd_ref(x, dt, A, Bm, Cm, D, z, dt_bias, h0=None):
    """float64 Mamba-2 recurrence: h <- exp(dt A) h + dt x B^T; y = h C + D x, * silu(z)."""
    b, t, nh, p = x.shape
    g = Bm.shape[2]
    rep = nh // g
    Bh, Ch = Bm.repeat_interleave(rep, 2), Cm.repeat_interleave(rep, 2)
    dt = F.softplus(dt + dt_bias)
    h = x.new_zeros(b, nh, p, Bm.shape[-1]) if h0 is None else h0
    ys = []
    for i in range(t):
        h = h * (dt[:, i] * A).exp()[..., None, None] \
            + (dt[:, i][..., None] * x[:, i])[..., None] * Bh[:, i][:, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", h, Ch[:, i]))
    y = (torch.stack(ys, 1) + x * D) * F.silu(z)
    return y if h0 is None else (y, h)


@case("ssd_chunk_scan_combined")
def _ssd(imp, device):
    m = imp(f"{TRITON}.ssd_combined")
    b, t, nh, p, g, n = 2, 100, 4, 16, 2, 16
    x, z = rnd(b, t, nh, p, device=device), rnd(b, t, nh, p, device=device)
    dt = rnd(b, t, nh, device=device) - 1
    A = -torch.rand(nh, device=device) - 0.5
    Bm, Cm = rnd(b, t, g, n, device=device), rnd(b, t, g, n, device=device)
    D, dt_bias = rnd(nh, p, device=device), rnd(nh, device=device)
    check(lambda *a: m.mamba_chunk_scan_combined(*a[:5], 32, D=a[5], z=a[6], dt_bias=a[7],
                                                 dt_softplus=True),
          ssd_ref, (x, dt, A, Bm, Cm, D, z, dt_bias), grad_of=(0, 1, 2, 3, 4, 5, 6, 7),
          rtol=1e-3, atol=1e-3)


@case("ssd_chunk_scan_states")
def _ssd_states(imp, device):
    m = imp(f"{TRITON}.ssd_combined")
    b, t, nh, p, g, n = 1, 77, 2, 16, 1, 32
    x, z = rnd(b, t, nh, p, device=device), rnd(b, t, nh, p, device=device)
    dt = rnd(b, t, nh, device=device) - 1
    A = -torch.rand(nh, device=device) - 0.5
    Bm, Cm = rnd(b, t, g, n, device=device), rnd(b, t, g, n, device=device)
    D, dt_bias = rnd(nh, p, device=device), rnd(nh, device=device)
    h0 = rnd(b, nh, p, n, device=device)
    check(lambda *a: m.mamba_chunk_scan_combined(
        *a[:5], 64, D=a[5], z=a[6], dt_bias=a[7], initial_states=a[8], dt_softplus=True,
        return_final_states=True),
          ssd_ref, (x, dt, A, Bm, Cm, D, z, dt_bias, h0), grad_of=(0, 1, 2, 3, 4, 5, 6, 7, 8),
          rtol=1e-3, atol=1e-3)

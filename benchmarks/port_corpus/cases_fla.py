"""flash-linear-attention (fla-org): linear-attention family kernels and fused modules.

References are this file's float64 recurrences (the state update written once, token by
token: what every chunked/parallel kernel must equal) or plain torch; fla's own `naive_*`
functions compute in float32, so they are not used as references. Layout [B, T, H, K];
T ragged against the 64-token chunks. Harness: fla's `__init__` files of `fla`, `fla.ops`,
`fla.modules`, `fla.layers`, `fla.models` are not run (they import transformers); the empty
`fla` package gets the `__version__` its `__init__` defines (fla.utils imports it); fla's
guard against Triton 3.4-3.7.0's Hopper bug is lifted (see `_setup`).
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from corpus_harness import CACHE, check, rnd, source


def _setup(device: str) -> None:
    import importlib
    import os

    with open(os.path.join(CACHE, "fla", "fla", "__init__.py")) as f:
        version = re.search(r'__version__ = "([^"]+)"', f.read()).group(1)
    importlib.import_module("fla").__version__ = version
    # fla refuses Triton 3.4-3.7.0 on Hopper for its gated chunk backward (a bug of Triton's
    # compiler, fla #640); kitjit reports Triton 3.6's language but is not that compiler:
    # the guard is lifted (kernel text unchanged) so the result is checked instead
    for name in ("fla.utils._compat", "fla.utils"):
        importlib.import_module(name).TRITON_ABOVE_3_7_1 = True


case = source("fla", "fla", skip_init=("fla", "fla.ops", "fla.modules", "fla.layers",
                                       "fla.models"), setup=_setup)

B, T, H, K, V = 2, 100, 2, 32, 32


def recurrence(q, k, v, scale, gk=None, g=None, beta=None, h0=None):
    """float64 reference: h <- h * exp(gate); (delta rule: v <- v - h^T k; v <- beta v);
    h <- h + k v^T; o = scale * h^T q. Shapes [B, T, H, *]; returns (o, final h)."""
    b, t, nh, dk = q.shape
    h = q.new_zeros(b, nh, dk, v.shape[-1]) if h0 is None else h0.clone()
    outs = []
    for i in range(t):
        if gk is not None:
            h = h * gk[:, i].exp()[..., None]
        if g is not None:
            h = h * g[:, i].exp()[..., None, None]
        vi = v[:, i]
        if beta is not None:
            vi = (vi - torch.einsum("bhk,bhkv->bhv", k[:, i], h)) * beta[:, i][..., None]
        h = h + k[:, i][..., None] * vi[..., None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, i] * scale, h))
    return torch.stack(outs, 1), h


def inputs(device, gate=None, delta=False):
    q, k, v = rnd(B, T, H, K, device=device), rnd(B, T, H, K, device=device), \
        rnd(B, T, H, V, device=device)
    if delta:
        k = F.normalize(k, dim=-1)
    h0 = rnd(B, H, K, V, device=device)
    extra = []
    if gate == "gk":  # per key channel, log space
        extra.append(F.logsigmoid(rnd(B, T, H, K, device=device) + 2))
    elif gate == "g":  # per head
        extra.append(F.logsigmoid(rnd(B, T, H, device=device) + 2))
    if delta:
        extra.append(torch.rand(B, T, H, device=device))
    return q, k, v, extra, h0


def _linear_family(fn_path, gate=None, delta=False, gate_kw=None, beta_kw="beta",
                   state=True, kw=None, tol=2e-3, dtype=torch.float32, backward=True,
                   qk_l2norm=False):
    """A case for `fla.ops.<mod>.<fn>(q, k, v, [gate], [beta], scale=, initial_state=,
    output_final_state=)` against `recurrence`, forward and backward (q, k, v, gates, h0)."""
    mod, fn = fn_path.rsplit(".", 1)

    def run(imp, device):
        f = getattr(imp(f"fla.ops.{mod}"), fn)
        q, k, v, extra, h0 = inputs(device, gate, delta)
        if dtype != torch.float32:  # the inputs the kernel takes, made in float32 first
            q, k, v, *extra = (x.to(dtype) for x in (q, k, v, *extra))
        scale = K ** -0.5
        names = ([gate_kw or gate] if gate else []) + ([beta_kw] if delta else [])

        def mine(q, k, v, *rest):
            named = dict(zip(names, rest))
            if state:
                named.update(initial_state=rest[-1], output_final_state=True)
            return f(q, k, v, scale=scale, **named, **(kw or {}))

        def ref(q, k, v, *rest):
            if qk_l2norm:  # the kernel normalizes q and k itself
                q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
            gates = dict(zip([gate] if gate else [], rest))
            return recurrence(q, k, v, scale, gk=gates.get("gk"), g=gates.get("g"),
                              beta=rest[len(gates)] if delta else None,
                              h0=rest[-1] if state else None)

        args = (q, k, v, *extra, *([h0] if state else []))
        grads = tuple(i for i in range(len(args)) if not (delta and i == 1)) if backward \
            else ()
        check(mine, ref, args, grad_of=grads, rtol=tol, atol=tol,
              outputs=None if state else (0,))
    return run


case("gla_chunk", quick=True)(_linear_family("gla.chunk_gla", "gk", gate_kw="g"))
case("gla_fused_recurrent")(_linear_family("gla.fused_recurrent_gla", "gk"))
case("simple_gla_chunk")(_linear_family("simple_gla.chunk_simple_gla", "g"))
case("simple_gla_fused_recurrent")(
    _linear_family("simple_gla.fused_recurrent_simple_gla", "g"))
case("linear_attn_chunk")(_linear_family("linear_attn.chunk_linear_attn",
                                         kw={"normalize": False}))
case("linear_attn_fused_recurrent")(
    _linear_family("linear_attn.fused_recurrent_linear_attn"))
case("linear_attn_fused_chunk")(_linear_family("linear_attn.fused_chunk_linear_attn",
                                               kw={"normalize": False}))
# fla refuses float32 here ("does not support float32. Please use bfloat16"): bf16 inputs.
case("delta_rule_chunk")(_linear_family("delta_rule.chunk_delta_rule", delta=True,
                                        dtype=torch.bfloat16, tol=1e-1))
case("delta_rule_fused_recurrent")(
    _linear_family("delta_rule.fused_recurrent_delta_rule", delta=True))
case("gated_delta_rule_chunk")(
    _linear_family("gated_delta_rule.chunk_gated_delta_rule", "g", delta=True))
# fused_recurrent_gated_delta_rule has no backward (fla raises NotImplementedError)
case("gated_delta_rule_fused_recurrent")(
    _linear_family("gated_delta_rule.fused_recurrent_gated_delta_rule", "g", delta=True,
                   backward=False))
case("kda_chunk")(_linear_family("kda.chunk_kda", "gk", delta=True, gate_kw="g"))
# fused_recurrent_kda is forward only (its output has no grad_fn)
case("kda_fused_recurrent")(_linear_family("kda.fused_recurrent_kda", "gk", delta=True,
                                           gate_kw="g", backward=False))


def _retention(fn_path, state=True):
    mod, fn = fn_path.rsplit(".", 1)

    def run(imp, device):
        f = getattr(imp(f"fla.ops.{mod}"), fn)
        q, k, v, _, h0 = inputs(device)
        gamma = torch.log(1 - 2 ** (-5.0 - torch.arange(H, dtype=torch.float64)))
        scale = K ** -0.5

        def mine(q, k, v, h0):
            if state:
                return f(q, k, v, scale=scale, initial_state=h0, output_final_state=True)
            return f(q, k, v, scale=scale)

        def ref(q, k, v, h0):
            g = gamma.to(q.device).expand(B, T, H)
            return recurrence(q, k, v, scale, g=g, h0=h0 if state else None)

        check(mine, ref, (q, k, v, h0), grad_of=(0, 1, 2, 3) if state else (0, 1, 2),
              rtol=2e-3, atol=2e-3, outputs=None if state else (0,))
    return run


case("retention_chunk")(_retention("retention.chunk_retention"))
case("retention_fused_recurrent")(_retention("retention.fused_recurrent_retention"))
case("retention_fused_chunk")(_retention("retention.fused_chunk_retention"))
case("retention_parallel")(_retention("retention.parallel_retention", state=False))


@case("simple_gla_parallel")
def _simple_gla_parallel(imp, device):
    f = imp("fla.ops.simple_gla").parallel_simple_gla
    q, k, v, (g,), _ = inputs(device, "g")
    check(lambda q, k, v, g: f(q, k, v, g, scale=0.2),
          lambda q, k, v, g: recurrence(q, k, v, 0.2, g=g),
          (q, k, v, g), grad_of=(0, 1, 2, 3), rtol=2e-3, atol=2e-3, outputs=(0,))


def hgrn_ref(x, g, h0):
    h, outs = h0.clone(), []
    for i in range(x.shape[1]):
        h = g[:, i].exp() * h + x[:, i]
        outs.append(h)
    return torch.stack(outs, 1), h


def _hgrn(fn_path, final_state_grad=True):
    mod, fn = fn_path.rsplit(".", 1)

    def run(imp, device):
        f = getattr(imp(f"fla.ops.{mod}"), fn)
        x, h0 = rnd(B, T, 70, device=device), rnd(B, 70, device=device)
        g = F.logsigmoid(rnd(B, T, 70, device=device) + 2)
        check(lambda x, g, h0: f(x, g, initial_state=h0, output_final_state=True), hgrn_ref,
              (x, g, h0), grad_of=(0, 1, 2) if final_state_grad else (0, 1), rtol=1e-3,
              atol=1e-3, outputs=None if final_state_grad else (0,))
    return run


case("hgrn_fused_recurrent")(_hgrn("hgrn.fused_recurrent_hgrn"))
# chunk_hgrn's backward takes no gradient of the final state, returns none for h0
case("hgrn_chunk")(_hgrn("hgrn.chunk_hgrn", final_state_grad=False))


def attn_ref(q, k, v, scale, g=None, window=None):
    """Causal softmax attention, GQA by repeating kv heads, with fla's forgetting gate
    (logits + cumsum(g)_i - cumsum(g)_j)."""
    rep = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
    s = torch.einsum("bihd,bjhd->bhij", q * scale, k)
    t = q.shape[1]
    if g is not None:
        c = g.cumsum(1).transpose(1, 2)
        s = s + c[..., :, None] - c[..., None, :]
    i = torch.arange(t, device=q.device)
    mask = i[None, :] <= i[:, None]
    if window is not None:
        mask &= i[:, None] - i[None, :] < window
    s = s.masked_fill(~mask, float("-inf"))
    return torch.einsum("bhij,bjhd->bihd", s.softmax(-1), v)


@case("attn_parallel_gqa")
def _attn(imp, device):
    f = imp("fla.ops.attn").parallel_attn
    q = rnd(B, T, 4, K, device=device)
    k, v = rnd(B, T, 2, K, device=device), rnd(B, T, 2, V, device=device)
    check(lambda q, k, v: f(q, k, v, scale=0.3), lambda q, k, v: attn_ref(q, k, v, 0.3),
          (q, k, v), grad_of=(0, 1, 2), rtol=2e-3, atol=2e-3)


@case("forgetting_attn_parallel")
def _forgetting(imp, device):
    f = imp("fla.ops.forgetting_attn").parallel_forgetting_attn
    q, k, v = (rnd(B, T, H, K, device=device) for _ in range(3))
    g = F.logsigmoid(rnd(B, T, H, device=device) + 2)
    check(lambda q, k, v, g: f(q, k, v, g, scale=0.3),
          lambda q, k, v, g: attn_ref(q, k, v, 0.3, g=g),
          (q, k, v, g), grad_of=(0, 1, 2, 3), rtol=2e-3, atol=2e-3)


def based_ref(q, k, v, scale):
    """Based: causal linear attention with the 2nd-order Taylor feature map
    1 + s + s^2 / 2 of s = scale * q.k, normalized by its row sums."""
    s = torch.einsum("bihd,bjhd->bhij", q * scale, k)
    a = 1 + s + s * s / 2
    t = q.shape[1]
    a = a.masked_fill(~torch.ones(t, t, dtype=torch.bool, device=q.device).tril(), 0)
    o = torch.einsum("bhij,bjhd->bihd", a, v)
    return o / (a.sum(-1).transpose(1, 2)[..., None] + 1e-6)


@case("based_parallel")
def _based(imp, device):
    f = imp("fla.ops.based").parallel_based
    q, k = rnd(B, T, H, 16, device=device), rnd(B, T, H, 16, device=device)
    v = rnd(B, T, H, V, device=device)
    check(lambda q, k, v: f(q, k, v, scale=0.25), lambda q, k, v: based_ref(q, k, v, 0.25),
          (q, k, v), grad_of=(0, 1, 2), rtol=2e-3, atol=2e-3)


# ---- modules -----------------------------------------------------------------------------

@case("layer_norm")
def _layer_norm(imp, device):
    m = imp("fla.modules.layernorm")
    x, w, b = rnd(3, 7, 90, device=device), rnd(90, device=device), rnd(90, device=device)
    check(lambda x, w, b: m.layer_norm(x, w, b, eps=1e-5),
          lambda x, w, b: F.layer_norm(x, (90,), w, b, 1e-5), (x, w, b), grad_of=(0, 1, 2))


@case("rms_norm_residual")
def _rms_norm(imp, device):
    m = imp("fla.modules.layernorm")
    x, r, w = rnd(3, 7, 90, device=device), rnd(3, 7, 90, device=device), rnd(90, device=device)

    def ref(x, r, w):
        s = x + r
        return s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-5) * w, s

    check(lambda x, r, w: m.rms_norm(x, w, None, residual=r, prenorm=True, eps=1e-5), ref,
          (x, r, w), grad_of=(0, 1, 2))


@case("group_norm")
def _group_norm(imp, device):
    m = imp("fla.modules.layernorm")
    x, w, b = rnd(5, 96, device=device), rnd(96, device=device), rnd(96, device=device)
    check(lambda x, w, b: m.group_norm(x, w, b, num_groups=4, eps=1e-5),
          lambda x, w, b: F.group_norm(x, 4, w, b, 1e-5), (x, w, b), grad_of=(0, 1, 2))


@case("rms_norm_gated")
def _rms_norm_gated(imp, device):
    m = imp("fla.modules.fused_norm_gate")
    x, g, w = rnd(9, 80, device=device), rnd(9, 80, device=device), rnd(80, device=device)
    check(lambda x, g, w: m.rms_norm_gated(x, g, w, None, activation="swish", eps=1e-5),
          lambda x, g, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
          * F.silu(g), (x, g, w), grad_of=(0, 1, 2))


@case("l2norm")
def _l2norm(imp, device):
    m = imp("fla.modules.l2norm")
    x = rnd(3, 11, 70, device=device)
    check(m.l2norm, lambda x: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6), (x,),
          grad_of=(0,))


@case("rotary")
def _rotary(imp, device):
    m = imp("fla.modules.rotary")
    x = rnd(2, 37, 3, 32, device=device)
    ang = torch.rand(37, 16, device=device) * 6
    cos, sin = ang.cos(), ang.sin()

    def ref(x):
        x1, x2 = x[..., :16], x[..., 16:]
        c, s = cos.double()[None, :, None], sin.double()[None, :, None]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)

    check(lambda x: m.rotary_embedding(x, cos, sin), ref, (x,), grad_of=(0,))


@case("cross_entropy")
def _cross_entropy(imp, device):
    m = imp("fla.modules.fused_cross_entropy")
    x, t = rnd(13, 301, device=device), torch.randint(0, 301, (13,), device=device)
    t[3] = -100
    check(lambda x, t: m.cross_entropy_loss(x, t, label_smoothing=0.1)[0],
          lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1, reduction="none"), (x, t),
          grad_of=(0,))


@case("token_shift")
def _token_shift(imp, device):
    m = imp("fla.modules.token_shift")
    x = rnd(2, 37, 48, device=device)
    check(m.token_shift, lambda x: F.pad(x, (0, 0, 1, -1)) - x, (x,), grad_of=(0,))


@case("swiglu")
def _swiglu(imp, device):
    m = imp("fla.modules.activations")
    a, b = rnd(7, 99, device=device), rnd(7, 99, device=device)
    check(m.swiglu, lambda a, b: F.silu(a) * b, (a, b), grad_of=(0, 1))


@case("logsigmoid")
def _logsigmoid(imp, device):
    m = imp("fla.modules.activations")
    x = rnd(7, 99, device=device, scale=4)
    check(lambda x: m.logsigmoid(x, 2.0), lambda x: F.logsigmoid(x) / 2.0, (x,), grad_of=(0,))


@case("chunk_local_cumsum")
def _cumsum(imp, device):
    m = imp("fla.ops.utils.cumsum")
    g = rnd(B, T, H, device=device)

    def ref(g):
        out = torch.empty_like(g)
        for s in range(0, T, 64):
            out[:, s:s + 64] = g[:, s:s + 64].cumsum(1)
        return out

    check(lambda g: m.chunk_local_cumsum(g, chunk_size=64), ref, (g,))


@case("solve_tril")
def _solve_tril(imp, device):
    m = imp("fla.ops.utils.solve_tril")
    a = rnd(B, T, H, 64, device=device, scale=0.1)
    idx = torch.arange(T, device=device)
    pos = idx[:, None] % 64 > torch.arange(64, device=device)[None, :]  # strictly lower
    a = a * pos[None, :, None, :]

    def ref(a):  # (I + A)^-1 per 64-token chunk, A strictly lower triangular
        out = torch.zeros_like(a)
        for s in range(0, T, 64):
            n = min(64, T - s)
            blk = a[:, s:s + n, :, :n].permute(0, 2, 1, 3)
            inv = torch.linalg.inv(torch.eye(n, dtype=a.dtype, device=a.device) + blk)
            out[:, s:s + n, :, :n] = inv.permute(0, 2, 1, 3)
        return out

    check(lambda a: m.solve_tril(a, output_dtype=torch.float32), ref, (a,),
          rtol=1e-3, atol=1e-3)


def rwkv6_ref(r, k, v, w, u, h0, scale):
    """float64 RWKV-6: o_t = scale r_t^T (h + diag(u) k_t v_t^T); h <- h exp(w_t) + k_t v_t^T
    (w per key channel, log space; u per head and key)."""
    h, outs = h0.clone(), []
    for i in range(r.shape[1]):
        kv = k[:, i][..., None] * v[:, i][..., None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", r[:, i] * scale, h + u[None, ..., None] * kv))
        h = h * w[:, i].exp()[..., None] + kv
    return torch.stack(outs, 1), h


def _rwkv6(fn, final_state_grad=True):
    def run(imp, device):
        f = getattr(imp("fla.ops.rwkv6"), fn)
        r, k, v, _, h0 = inputs(device)
        w = F.logsigmoid(rnd(B, T, H, K, device=device) + 2)
        u = rnd(H, K, device=device, scale=0.5)
        check(lambda *a: f(*a[:5], scale=0.25, initial_state=a[5], output_final_state=True),
              lambda *a: rwkv6_ref(*a, 0.25), (r, k, v, w, u, h0),
              grad_of=(0, 1, 2, 3, 4, 5), rtol=2e-3, atol=2e-3,
              outputs=None if final_state_grad else (0,))
    return run


# fused_recurrent_rwkv6's backward takes no gradient of the final state (no dht argument)
case("rwkv6_fused_recurrent")(_rwkv6("fused_recurrent_rwkv6", final_state_grad=False))
case("rwkv6_chunk")(_rwkv6("chunk_rwkv6"))


@case("rebased_parallel")
def _rebased(imp, device):
    f = imp("fla.ops.rebased").parallel_rebased
    q, k = rnd(B, T, H, 16, device=device), rnd(B, T, H, 16, device=device)
    v = rnd(B, T, H, V, device=device)

    def ref(q, k, v):  # causal (scale q.k)^2 attention, unnormalized (normalized, the
        # first rows' gradients are ill-conditioned: o / (s^2 + 1e-6) with s^2 near 0)
        s = torch.einsum("bihd,bjhd->bhij", q * 0.25, k) ** 2
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=q.device).tril(), 0)
        return torch.einsum("bhij,bjhd->bihd", s, v)

    check(lambda q, k, v: f(q, k, v, use_scale=True, use_normalize=False), ref, (q, k, v),
          grad_of=(0, 1, 2), rtol=2e-3, atol=2e-3)


@case("lightning_attn_chunk")
def _lightning(imp, device):
    f = imp("fla.ops.lightning_attn").chunk_lightning_attn
    q, k, v, _, h0 = inputs(device)
    gamma = -(8 / H * (1 - 1 / 4)) * torch.arange(H, dtype=torch.float64)  # layer 1 of 4

    def ref(q, k, v, h0):
        return recurrence(q, k, v, 0.2, g=gamma.to(q.device).expand(B, T, H), h0=h0)

    check(lambda q, k, v, h0: f(q, k, v, 1, 4, scale=0.2, initial_state=h0,
                                output_final_state=True),
          ref, (q, k, v, h0), grad_of=(0, 1, 2, 3), rtol=2e-3, atol=2e-3)


@case("attn_parallel_window")
def _attn_window(imp, device):
    f = imp("fla.ops.attn").parallel_attn
    q, k, v = (rnd(B, T, H, K, device=device) for _ in range(3))
    check(lambda q, k, v: f(q, k, v, scale=0.3, window_size=17),
          lambda q, k, v: attn_ref(q, k, v, 0.3, window=17), (q, k, v), grad_of=(0, 1, 2),
          rtol=2e-3, atol=2e-3)


@case("gated_delta_product_chunk")
def _gdp(imp, device):
    f = imp("fla.ops.gated_delta_product").chunk_gated_delta_product
    nh = 2  # Householder steps per token: k, v, beta are [B, T * nh, H, *]
    q = rnd(B, T, H, K, device=device)
    k = F.normalize(rnd(B, T * nh, H, K, device=device), dim=-1)
    v, beta = rnd(B, T * nh, H, V, device=device), torch.rand(B, T * nh, H, device=device)
    g = F.logsigmoid(rnd(B, T, H, device=device) + 2)
    h0 = rnd(B, H, K, V, device=device)
    # fla refuses float32 here ("does not support float32. Please use bfloat16")
    q, k, v, g, beta = (x.to(torch.bfloat16) for x in (q, k, v, g, beta))

    def ref(q, k, v, g, beta, h0):
        h, outs = h0, []
        for i in range(T):
            h = h * g[:, i].exp()[..., None, None]
            for j in range(i * nh, i * nh + nh):
                u = (v[:, j] - torch.einsum("bhk,bhkv->bhv", k[:, j], h)) * beta[:, j][..., None]
                h = h + k[:, j][..., None] * u[..., None, :]
            outs.append(torch.einsum("bhk,bhkv->bhv", q[:, i] * 0.2, h))
        return torch.stack(outs, 1), h

    check(lambda q, k, v, g, beta, h0: f(q, k, v, g, beta, nh, scale=0.2, initial_state=h0,
                                         output_final_state=True),
          ref, (q, k, v, g, beta, h0), grad_of=(0, 2, 3, 4, 5), rtol=1e-1, atol=1e-1)


case("gated_delta_rule_chunk_l2norm")(
    _linear_family("gated_delta_rule.chunk_gated_delta_rule", "g", delta=True,
                   kw={"use_qk_l2norm_in_kernel": True}, qk_l2norm=True))


@case("simple_gla_chunk_g_gamma")
def _simple_gla_gamma(imp, device):
    f = imp("fla.ops.simple_gla").chunk_simple_gla
    q, k, v, _, h0 = inputs(device)
    gamma = -torch.rand(H, device=device) * 0.2 - 0.01  # a fixed log decay per head

    def ref(q, k, v, h0):
        return recurrence(q, k, v, 0.2, g=gamma.double().expand(B, T, H), h0=h0)

    check(lambda q, k, v, h0: f(q, k, v, g_gamma=gamma, scale=0.2, initial_state=h0,
                                output_final_state=True),
          ref, (q, k, v, h0), grad_of=(0, 1, 2, 3), rtol=2e-3, atol=2e-3)

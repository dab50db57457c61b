"""torch.nn.functional's attention, on kitjit's Hopper kernels where they cover the call.

`scaled_dot_product_attention` has torch's signature and semantics. Calls the kernels do not
cover run through torch's own implementation, with one `KitjitFallbackWarning` per distinct
reason (per process): never a silently different result.
"""

from __future__ import annotations

import math
import numbers
import warnings

import torch

from .. import launcher as _launcher
from . import attention as _attention
from . import attention_decode as _decode
from ._host import on_reset
from .attention import attention
from .attention_backward import BWD_HEAD_DIMS, attention_backward

__all__ = ["KitjitFallbackWarning", "scaled_dot_product_attention", "sdpa"]

HEAD_DIMS = (64, 128, 256)
DECODE_MAX_Q = 16   # query lengths up to this run the split-KV decode kernels
DTYPES = (torch.float16, torch.bfloat16)


class KitjitFallbackWarning(UserWarning):
    """A kitjit.nn call ran torch's implementation because no kitjit kernel covers it."""


_warned: set[str] = set()   # reasons already warned about in this process


def _warn_once(reason: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"kitjit.nn.functional.scaled_dot_product_attention: {reason}; running "
                      "torch.nn.functional.scaled_dot_product_attention instead",
                      KitjitFallbackWarning, stacklevel=3)


def _interpreting() -> bool:
    from ..jit import _env_flag

    return _env_flag("KITJIT_INTERPRET")


_CAPS: dict = {}


def _capability(dev: torch.device) -> tuple[int, int]:
    """The device's compute capability, asked once per device (this runs on every call)."""
    i = dev.index if dev.index is not None else torch.cuda.current_device()
    if i not in _CAPS:
        _CAPS[i] = torch.cuda.get_device_capability(i)
    return _CAPS[i]


def _fallback_reasons(query, key, value, attn_mask, dropout_p, scale, enable_gqa,
                      is_causal: bool = False) -> list[str]:
    """Why the kitjit kernel cannot run this call (empty: it can). Shapes torch rejects
    also land here; torch then raises its own error."""
    why = []
    if type(is_causal) is not bool or type(enable_gqa) is not bool \
            or not (scale is None or type(scale) in (float, int)):
        # torch's argument parser decides (its TypeError, or its result for a 0-d tensor scale)
        return ["is_causal, enable_gqa or scale of a type other than bool, bool, float"]
    if attn_mask is not None:
        why.append("attn_mask is not supported by the kitjit kernel")
    if dropout_p != 0.0:
        why.append("dropout_p > 0 is not supported by the kitjit kernel")
    ts = (query, key, value)
    if not all(isinstance(t, torch.Tensor) for t in ts) or any(t.is_nested for t in ts):
        return [*why, "inputs that are not plain tensors"]
    if not (query.dtype == key.dtype == value.dtype) or query.dtype not in DTYPES:
        why.append(f"dtype {query.dtype} (the kernel takes fp16 and bf16)")
    if scale is not None and not scale > 0:
        why.append("a softmax scale that is not positive")
    dev = query.device
    if key.device != dev or value.device != dev:
        why.append("inputs on different devices")
    elif dev.type == "cuda":
        if _capability(dev) != (9, 0):
            why.append("a GPU other than Hopper (sm_90)")
    elif dev.type != "cpu" or not _interpreting():
        why.append(f"{dev.type} tensors (the kernels run on Hopper GPUs; KITJIT_INTERPRET=1 "
                   "runs them on CPU tensors in the interpreter)")
    if not (query.dim() == key.dim() == value.dim() >= 3) \
            or not (query.shape[:-3] == key.shape[:-3] == value.shape[:-3]) \
            or key.shape != value.shape or query.shape[-1] != key.shape[-1]:
        why.append("shapes other than (..., H, L, E) queries with (..., H_kv, S, E) keys and "
                   "values of the same leading dims")
        return why
    E, Hq, Hkv = query.shape[-1], query.shape[-3], key.shape[-3]
    if E not in HEAD_DIMS:
        why.append(f"head dim {E} (the kernel takes {', '.join(map(str, HEAD_DIMS))})")
    elif _wants_grad(ts) and E not in BWD_HEAD_DIMS:
        why.append(f"head dim {E} with inputs that require grad (the backward kernels take "
                   f"{', '.join(map(str, BWD_HEAD_DIMS))})")
    if _wants_grad(ts) and key.shape[-2] == 0:
        why.append("no keys (S = 0) with inputs that require grad")
    # torch broadcasts a single K/V head; other head counts need enable_gqa (else it raises)
    if Hkv == 0 or Hq % Hkv or not (Hq == Hkv or Hkv == 1 or enable_gqa):
        why.append(f"{Hq} query heads with {Hkv} key/value heads")
    return why


def _wants_grad(ts) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


def _forward(q, k, v, causal: bool, scale):
    """(o, lse) from the forward kernels: split-KV (kitjit/nn/attention_decode.py) for a few
    query rows, whose one program per head would leave most SMs idle and read each K/V head
    once per query head of its group; the FlashAttention forward otherwise."""
    if q.shape[2] <= DECODE_MAX_Q:       # _fallback_reasons made attention_decode's checks
        return _decode.decode(q, k, v, causal,
                              scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    return attention(q, k, v, causal=causal, sm_scale=scale)


# ------------------------------------------------------------------ autograd (custom ops)
# The forward and the backward are torch.library custom ops, so that autograd reaches q, k, v
# and torch.compile(fullgraph=True) records each as one opaque call (its fake gives shapes).
@torch.library.custom_op("kitjit::attention_fwd", mutates_args=())
def _attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                   scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    return _forward(q, k, v, causal, scale)


@_attention_fwd.register_fake
def _(q, k, v, causal, scale):
    return q.new_empty(q.shape), q.new_empty(q.shape[:-1], dtype=torch.float32)


@torch.library.custom_op("kitjit::attention_bwd", mutates_args=())
def _attention_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   o: torch.Tensor, lse: torch.Tensor, causal: bool,
                   scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return attention_backward(do, q, k, v, o, lse, causal=causal, sm_scale=scale)


@_attention_bwd.register_fake
def _(do, q, k, v, o, lse, causal, scale):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, ctx.causal, ctx.scale = inputs
    ctx.save_for_backward(q, k, v, *output)


def _backward(ctx, do, _dlse):
    """The log-sum-exp is an internal output (sdpa never returns it): its gradient is not
    propagated."""
    q, k, v, o, lse = ctx.saved_tensors
    if do is None:
        return None, None, None, None, None
    dq, dk, dv = _attention_bwd(do, q, k, v, o, lse, ctx.causal, ctx.scale)
    return dq, dk, dv, None, None


_attention_fwd.register_autograd(_backward, setup_context=_setup_context)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, *, scale=None, enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention, with a backward.

    query (..., H, L, E), key and value (..., H_kv, S, E) with H_kv == H, or H_kv dividing H
    when enable_gqa=True (torch's rule; H_kv == 1 broadcasts). `is_causal` is top-left
    aligned as in torch: query i sees keys 0..i, also when L != S (so one query against a KV
    cache sees key 0 only: decoding passes is_causal=False). The result has torch's shape and
    values, in a new contiguous tensor.

    The kitjit kernel runs for fp16/bf16 inputs with head dim 64, 128 or 256, no attn_mask,
    dropout_p == 0 (with inputs that require grad, `loss.backward()` runs kitjit's backward
    kernels, kitjit/nn/attention_backward.py and, for head dim 256, its own kernel in
    attention_backward_d256.py), on a Hopper GPU (or
    on CPU tensors under KITJIT_INTERPRET=1). Inputs that are not contiguous, such as the
    (B, L, H, E) layout of LLMs transposed to (B, H, L, E), are copied to contiguous first
    (the kernels read rows through 2-D TMA descriptors): one extra read and write of each
    such tensor. Query lengths up to 16 (decoding against a KV cache) run the split-KV kernels
    of kitjit/nn/attention_decode.py, longer ones the FlashAttention forward. Everything else
    runs through torch's own implementation with a KitjitFallbackWarning per reason.

    No keys (S == 0): zeros (the empty sum over keys; torch's CPU kernel leaves that output
    uninitialized), with a grad_fn where an input requires grad (its gradients are zeros).
    NaN/inf in the inputs propagate as in torch's float64 (math) reference: a NaN in a query
    row makes that output row NaN (torch's fp16/bf16/fp32 CPU kernel drops it).

    As torch's: `scale` and `enable_gqa` are keyword-only; `is_causal` and `enable_gqa` must
    be bool (torch's TypeError otherwise); a numpy or bool `scale` is taken as a float, a
    tensor `scale` goes to torch (which takes a 0-d one).
    """
    if isinstance(dropout_p, numbers.Real) and not 0.0 <= dropout_p <= 1.0:
        # torch's own message; its CUDA kernels were seen to crash the process on 1.5 (H200)
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got "
                           f"{dropout_p}")
    if scale is not None and type(scale) not in (float, int) and \
            isinstance(scale, numbers.Real):   # numpy scalars, bool: torch's parser takes them
        scale = float(scale)
    if attn_mask is None and dropout_p == 0.0 and query.__class__ is torch.Tensor and \
            is_causal.__class__ is bool and enable_gqa.__class__ is bool and \
            key.__class__ is torch.Tensor and value.__class__ is torch.Tensor and \
            not (torch.is_grad_enabled() and (query.requires_grad or key.requires_grad
                                              or value.requires_grad)) and \
            not _launcher._is_compiling():   # (traced: kernel[grid] records opaque ops)
        try:   # (a nested tensor has no shape: the general path)
            facts = (query.shape, key.shape, value.shape, query.dtype, key.dtype, value.dtype,
                     query.device, key.device, value.device, is_causal, scale, enable_gqa)
            fast = _FAST.get(facts, _UNSEEN)
        except (RuntimeError, TypeError):
            fast = None
        if fast is _UNSEEN:
            fast = _FAST[facts] = _fast_path(query, key, value, is_causal, scale, enable_gqa)
        if fast is not None and (fast.device >= 0 or _interpreting()):
            return fast.out(query, key, value)
    return _general(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def _torch_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """torch's own sdpa for the calls kitjit's kernels do not take, without its cuDNN
    backend when there is a mask on a GPU: with torch 2.11 on an H200 (2026-11-29) cuDNN's
    masked attention returned relative errors of 0.13-1.06 against float64 (bool and
    additive masks of 2-4 dims; an fp32 mask with bf16 inputs is read as bf16, pytorch
    PR 191612), where torch's CPU, efficient and math kernels are right. A float mask of
    another dtype than the query goes to the math kernel (the efficient one refuses it)."""
    def call():
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
            scale=scale, enable_gqa=enable_gqa)

    if not (isinstance(attn_mask, torch.Tensor) and isinstance(query, torch.Tensor)
            and query.is_cuda):
        return call()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if attn_mask.dim() < 2 and key.dim() >= 2 and query.dim() >= 2 and \
            (attn_mask.dim() == 0 or attn_mask.shape[-1] in (1, key.shape[-2])):
        # torch's fused kernels (GPU; CPU for fp32/bf16) index a (Skv,) mask's dim -2
        # (IndexError, torch 2.11-2.13) where its math kernel broadcasts it, as documented:
        # broadcast it to (Sq, Skv) here (the documented answer, not torch's error)
        attn_mask = attn_mask.expand(query.shape[-2], key.shape[-2])
    if attn_mask.dtype not in (torch.bool, query.dtype):
        backends = [SDPBackend.MATH]
    else:
        backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                    SDPBackend.MATH]
    with sdpa_kernel(backends):
        return call()


def _no_keys(out: torch.Tensor) -> torch.Tensor:
    """Zeros for an output over no keys, keeping torch's grad_fn (gradients of zero reach
    q, k, v): torch's CPU kernel leaves such an output uninitialized."""
    if not out.requires_grad:
        return torch.zeros_like(out)
    return torch.where(torch.zeros((), dtype=torch.bool, device=out.device), out, 0.0)


_FAST: dict = {}
_UNSEEN = object()


def _fast_path(query, key, value, is_causal, scale, enable_gqa):
    """For the facts of a call without autograd (shapes, dtypes, devices, flags): the decode
    or forward route that runs it, or None (the general path). Made once per facts (a
    decode loop asks the same ones every step), so a call skips `_fallback_reasons` and the
    reshapes."""
    if len(_FAST) >= 4096:
        _FAST.clear()
    if query.dim() != 4 or key.shape[2] == 0 or \
            _fallback_reasons(query, key, value, None, 0.0, scale, enable_gqa, is_causal):
        return None
    B, H, S, D = query.shape
    dev = query.device
    index = -1 if dev.type != "cuda" else dev.index if dev.index is not None \
        else torch.cuda.current_device()
    if S <= DECODE_MAX_Q:
        return _decode.route(B, H, key.shape[1], S, key.shape[2], D, bool(is_causal),
                             scale if scale is not None else 1.0 / math.sqrt(D), None, None,
                             None, True, query.dtype, index)
    return _attention.route(B, H, key.shape[1], S, key.shape[2], D, bool(is_causal),
                            scale if scale is not None else 1.0 / math.sqrt(D), (),
                            query.dtype, index)


def _general(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """Every call the fast path does not take: fallbacks, autograd, the forward kernels."""
    why = _fallback_reasons(query, key, value, attn_mask, dropout_p, scale, enable_gqa,
                            is_causal)
    if why:
        if all(isinstance(t, torch.Tensor) and t.dim() >= 2 for t in (key, value)) and \
                not key.is_nested and key.shape[-2] != value.shape[-2]:
            # torch's math path raises here; its CPU kernel reads past the values' end
            raise RuntimeError(f"scaled_dot_product_attention: key and value must have the "
                               f"same length, got {key.shape[-2]} and {value.shape[-2]}")
        out = _torch_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale,
                          enable_gqa)   # raises torch's error for bad calls
        for reason in why:
            _warn_once(reason)
        return _no_keys(out) if out.numel() and key.shape[-2] == 0 else out
    if key.shape[-2] == 0:
        return query.new_zeros(query.shape)
    lead = query.shape[:-3]
    B = math.prod(lead)
    q, k, v = (t.reshape(B, *t.shape[-3:]) for t in (query, key, value))
    # through the op autograd knows; traced by torch.compile, also without autograd (one
    # opaque call in the graph: the host path reads pointers, which dynamo cannot trace)
    if _wants_grad((q, k, v)) or _launcher._is_compiling():
        sm = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
        o, _ = _attention_fwd(q, k, v, bool(is_causal), float(sm))
    else:
        o, _ = _forward(q, k, v, bool(is_causal), scale)
    return o.view(query.shape)


sdpa = scaled_dot_product_attention
on_reset(_FAST.clear)

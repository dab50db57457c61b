"""The strongest installable peers on Hopper, timed beside kitjit when they are importable.

FlashAttention-4's sm90 kernels (`flash_attn.cute`, CuTe DSL) and quack's sm90 GEMM
(`quack.gemm_interface`) are not on the GPU image: `../shared/peers/cute_wheels.sh` stages
them into /tmp/peers in two device runs (its header says how). Each getter returns a
callable, or the reason it cannot (printed as "not installed" in the benchmark's table),
so the benchmark runs the same with or without them.
"""
from __future__ import annotations

import os
import site

import torch

PEERS_DIR = os.environ.get("KITJIT_PEERS_DIR", "/tmp/peers")
_status: dict[str, str] = {}


def _import(name: str):
    if os.path.isdir(PEERS_DIR):
        site.addsitedir(PEERS_DIR)
    try:
        if name == "fa4":
            from flash_attn.cute import flash_attn_func
            _status[name] = "ok"
            return flash_attn_func
        if name == "quack":
            from quack.gemm_interface import gemm
            _status[name] = "ok"
            return gemm
    except Exception as e:  # ImportError, or a CuTe DSL that does not load on this machine
        _status[name] = f"not installed ({type(e).__name__}: {str(e)[:80]})"
    return None


def status() -> dict[str, str]:
    """name -> "ok" or why not, for the benchmark's JSON."""
    return dict(_status)


def fa4_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool):
    """A zero-argument callable running FA4's forward on (B, H, S, D) inputs, or None.

    FA4 takes (B, S, H, D); the transposed copies are made here, once, outside the timing."""
    fn = _import("fa4")
    if fn is None:
        return None
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))

    def run():
        with torch.no_grad():
            return fn(qt, kt, vt, causal=causal)
    try:
        run()
    except Exception as e:
        _status["fa4"] = f"failed: {type(e).__name__}: {str(e)[:80]}"
        return None
    return run


def fa4_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool):
    """A callable timing FA4's backward alone (the forward runs once, here), or None."""
    fn = _import("fa4")
    if fn is None:
        return None
    qt, kt, vt = (t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
    try:
        out = fn(qt, kt, vt, causal=causal)
        out = out[0] if isinstance(out, tuple) else out
        do = torch.randn_like(out)

        def run():
            return torch.autograd.grad(out, (qt, kt, vt), do, retain_graph=True)
        run()
    except Exception as e:
        _status["fa4_bwd"] = f"failed: {type(e).__name__}: {str(e)[:80]}"
        return None
    return run


def quack_gemm(a: torch.Tensor, b: torch.Tensor, tuned: bool):
    """quack's sm90 GEMM on (M, K) x (K, N), default config or autotuned, or None."""
    fn = _import("quack")
    if fn is None:
        return None

    def run():
        return fn(a, b, tuned=tuned)
    try:
        run()
    except Exception as e:
        _status["quack"] = f"failed: {type(e).__name__}: {str(e)[:80]}"
        return None
    return run

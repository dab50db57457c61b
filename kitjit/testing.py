"""Helpers the examples, tests and benchmarks share: checking against a float64 reference,
and timing with CUDA events."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def has_gpu() -> bool:
    """A CUDA device that both torch and kitjit's driver can use, and no KITJIT_INTERPRET."""
    import torch

    from .jit import _env_flag
    from .runtime import driver

    return torch.cuda.is_available() and driver.available() and not _env_flag("KITJIT_INTERPRET")


def device() -> str:
    return "cuda" if has_gpu() else "cpu"


def rel_error(out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref|| in float64; NaN anywhere gives inf."""
    o = out.detach().double().cpu()
    r = ref.detach().double().cpu()
    if not bool(o.isfinite().all()) and bool(r.isfinite().all()):
        return math.inf
    d = float((o - r).norm())
    n = float(r.norm())
    return d / n if n else d


def check(out: Any, ref: Any, tol: float, what: str = "result") -> float:
    err = rel_error(out, ref)
    if not err <= tol:
        raise AssertionError(f"{what}: relative error {err:.3g} over {tol:g}")
    return err


def bench(fn: Callable[[], Any], warmup: int = 10, rep: int = 50,
          flush_l2: bool = True) -> float:
    """Median milliseconds of `fn()` over `rep` runs timed with CUDA events."""
    import torch

    cache = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda") if flush_l2 \
        else None
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rep):
        if cache is not None:
            cache.zero_()
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]

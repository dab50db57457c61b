"""kit.testing.do_bench / do_bench_cudagraph: Triton's signatures and semantics. The
argument checks run on the CPU; timing needs a GPU (marked `gpu`)."""

from __future__ import annotations

import inspect

import pytest
import torch

import kitjit as kit
from kitjit import testing


def test_signatures_match_triton():
    sig = inspect.signature(kit.testing.do_bench)
    assert [(p.name, p.default) for p in sig.parameters.values()] == [
        ("fn", inspect.Parameter.empty), ("warmup", 25), ("rep", 100), ("grad_to_none", None),
        ("quantiles", None), ("return_mode", "mean")]
    sig = inspect.signature(kit.testing.do_bench_cudagraph)
    assert [(p.name, p.default) for p in sig.parameters.values()] == [
        ("fn", inspect.Parameter.empty), ("rep", 20), ("grad_to_none", None),
        ("quantiles", None), ("return_mode", "mean")]


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(fn=42), TypeError, "fn must be callable"),
    (dict(return_mode="average"), ValueError, "return_mode must be one of"),
    (dict(quantiles=[0.5, 1.5]), ValueError, r"quantiles must lie in \[0, 1\]"),
    (dict(quantiles=0.5), TypeError, "quantiles must be a non-empty list"),
    (dict(quantiles=[]), TypeError, "quantiles must be a non-empty list"),
    (dict(grad_to_none=3), TypeError, "grad_to_none must be a sequence"),
    (dict(rep=-1), ValueError, "rep is a time in milliseconds"),
    (dict(warmup="25"), ValueError, "warmup is a time in milliseconds"),
])
def test_bad_arguments(kwargs, error, match):
    kw = dict(fn=lambda: None, **{k: v for k, v in kwargs.items() if k != "fn"})
    if "fn" in kwargs:
        kw["fn"] = kwargs["fn"]
    with pytest.raises(error, match=match):
        testing.do_bench(**kw)
    if "warmup" not in kw:
        with pytest.raises(error, match=match):
            testing.do_bench_cudagraph(**kw)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_without_a_gpu_a_clear_error():
    calls = []
    for bench in (testing.do_bench, testing.do_bench_cudagraph):
        with pytest.raises(RuntimeError, match="CUDA GPU.*torch.cuda.is_available"):
            bench(lambda: calls.append(1))
    assert calls == []  # nothing ran


def test_summaries():
    times = [4.0, 1.0, 2.0, 3.0]
    assert testing._summarize(times, None, "mean") == 2.5
    assert testing._summarize(times, None, "median") == 2.5
    assert testing._summarize(times, None, "min") == 1.0
    assert testing._summarize(times, None, "max") == 4.0
    assert testing._summarize(times, None, "all") == times
    assert testing._summarize(times, [0.5], "mean") == pytest.approx(2.5)
    assert testing._summarize(times, [0.0, 1.0], "mean") == pytest.approx([1.0, 4.0])


@pytest.mark.gpu
def test_do_bench_times_a_copy():
    x = torch.randn(64 * 1024 * 1024, device="cuda")
    y = torch.empty_like(x)
    ms = kit.testing.do_bench(lambda: y.copy_(x))
    assert 0.01 < ms < 100  # 512 MB moved: ~0.2 ms on an H100
    med, lo, hi = kit.testing.do_bench(lambda: y.copy_(x), quantiles=[0.5, 0.2, 0.8])
    assert lo <= med <= hi
    assert len(kit.testing.do_bench(lambda: y.copy_(x), rep=5, return_mode="all")) >= 1
    w = torch.randn(16, device="cuda", requires_grad=True)
    w.grad = torch.ones_like(w)
    kit.testing.do_bench(lambda: None, grad_to_none=[w], rep=1)
    assert w.grad is None


@pytest.mark.gpu
def test_do_bench_cudagraph_times_a_kitjit_kernel():
    @kit.jit
    def add_one(X, n, BLOCK: kit.constexpr):
        offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
        kit.store(X + offs, kit.load(X + offs, mask=offs < n) + 1.0, mask=offs < n)

    x = torch.zeros(1 << 20, device="cuda")
    fn = lambda: add_one[(x.numel() // 1024,)](x, x.numel(), BLOCK=1024)  # noqa: E731
    fn()
    ms = kit.testing.do_bench_cudagraph(fn, rep=5)
    assert 0 < ms < 10

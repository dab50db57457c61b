"""The benchmark's peers that run without a GPU: Triton's tutorial attention
(benchmarks/triton_fused_attention.py), run through the import swap (kitjit under the name
`triton`) in the interpreter against torch in float64, so the kernel the bench times beside
kitjit's backward computes the gradients; and the backward table with its Triton column."""

from __future__ import annotations

import importlib
import pathlib
import sys

import pytest
import torch
import torch.nn.functional as F

import kitjit
import kitjit.language
from kitjit.testing import rel_error

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def tutorial(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", kitjit)
    monkeypatch.setitem(sys.modules, "triton.language", kitjit.language)
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.delitem(sys.modules, "triton_fused_attention", raising=False)
    mod = importlib.import_module("triton_fused_attention")
    yield mod
    sys.modules.pop("triton_fused_attention", None)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_tutorial_attention_forward_backward(tutorial, causal):
    g = torch.Generator().manual_seed(1)
    q, k, v, do = (torch.randn(1, 1, 256, 64, generator=g).to(torch.bfloat16) for _ in range(4))
    o, m = tutorial.forward(q, k, v, causal, 0.3)
    dq, dk, dv = tutorial.backward(do, q, k, v, o, m, causal, 0.3)
    ts = [t.double().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*ts, is_causal=causal, scale=0.3)
    ref.backward(do.double())
    assert rel_error(o, ref) < 1e-2
    for name, got, t in zip(("dq", "dk", "dv"), (dq, dk, dv), ts):
        assert rel_error(got, t.grad) < 2e-2, name


def test_tutorial_refuses_lengths_off_its_blocks(tutorial):
    q = torch.randn(1, 1, 100, 64).to(torch.bfloat16)
    with pytest.raises(ValueError, match="multiple of 128"):
        tutorial.forward(q, q, q, False, 0.1)


def test_backward_table_has_the_triton_column(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.syspath_prepend(str(BENCH.parent / "examples"))
    bench_attn = importlib.import_module("bench_attn")
    rows = [{"case": "B4 H32 S4096 D128", "kitjit_tflops": 400.0, "rel_err": 1e-3,
             "peers": {"flash": 300.0, "cudnn": 420.0, "fa4": "not installed",
                       "triton": 250.0}, "vs_flash": 1.33, "vs_cudnn": 0.95,
             "vs_triton": 1.6},
            {"case": "B2 H16 S4096 D256", "kitjit_tflops": 380.0, "rel_err": None,
             "peers": {"triton": "n/a: OutOfResources: shared memory"}}]
    lines = bench_attn.table_lines({"attention_bwd": rows,
                                    "attention_bwd_geomean_vs_triton": 1.6})
    text = "\n".join(lines)
    assert "Triton" in lines[0] and "x Triton" in lines[0]
    assert "250" in lines[1] and "1.60" in lines[1]
    assert "x Triton tutorial 1.6" in text and "OutOfResources" in text


@pytest.mark.gpu
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_tutorial_attention_with_real_triton(monkeypatch, D, causal):
    """The peer as the bench runs it: real Triton on the GPU, bf16, against float64."""
    pytest.importorskip("triton")
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.delitem(sys.modules, "triton_fused_attention", raising=False)
    tutorial = importlib.import_module("triton_fused_attention")
    g = torch.Generator().manual_seed(2)
    q, k, v, do = (torch.randn(2, 3, 384, D, generator=g).to(torch.bfloat16).cuda()
                   for _ in range(4))
    o, m = tutorial.forward(q, k, v, causal, D ** -0.5)
    dq, dk, dv = tutorial.backward(do, q, k, v, o, m, causal, D ** -0.5)
    ts = [t.double().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*ts, is_causal=causal)
    ref.backward(do.double())
    assert rel_error(o, ref) < 1e-2
    for name, got, t in zip(("dq", "dk", "dv"), (dq, dk, dv), ts):
        assert rel_error(got, t.grad) < 2e-2, name

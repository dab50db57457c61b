"""The differential mode on the examples (issue 19 item 6): each example's wrapper on CUDA
tensors at small ragged sizes, every kernel launch shadowed by the interpreter on copies of
the same inputs and compared (tests/fuzz/shadow.py). The random kernels' differential mode
is tests/test_fuzz_long.py; the port suite's is `pytest -m gpu --shadow tests/ports`."""

from __future__ import annotations

import pytest
import test_examples as E
import torch
from fuzz.shadow import Shadow, _compare, _mirror, shadowed, summary

RECORDS: list[Shadow] = []


def _run(fn, *args):
    n = len(RECORDS)
    with shadowed(RECORDS):
        out = fn(*args)
    mine = RECORDS[n:]
    assert any(r.verdict == "agree" for r in mine), summary(mine)
    return out


def cuda(*shape, dtype=torch.float32):
    g = torch.Generator().manual_seed(sum(shape))
    return torch.randn(*shape, generator=g).to(dtype).cuda()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_examples_on_both_paths(dtype):
    E.example("vector_add").add(cuda(4097, dtype=dtype), cuda(4097, dtype=dtype))
    _run(E.example("vector_add").add, cuda(1000, dtype=dtype), cuda(1000, dtype=dtype))
    _run(E.example("softmax").softmax, cuda(7, 1000, dtype=dtype) * 3)
    _run(E.example("softmax").softmax, cuda(3, 64, dtype=dtype))
    _run(E.example("layernorm").layernorm, cuda(5, 1000, dtype=dtype),
         cuda(1000, dtype=dtype), cuda(1000, dtype=dtype))
    _run(E.example("rmsnorm").rmsnorm, cuda(9, 513, dtype=dtype), cuda(513, dtype=dtype))


@pytest.mark.gpu
def test_matmul_on_both_paths():
    m = E.example("matmul")
    _run(m.matmul, cuda(100, 72, dtype=torch.bfloat16), cuda(72, 200, dtype=torch.bfloat16))


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_on_both_paths(causal):
    m = E.example("attention")
    q = cuda(1, 2, 130, 64, dtype=torch.bfloat16)
    k, v = (cuda(1, 1, 130, 64 + i, dtype=torch.bfloat16)[..., :64] for i in (0, 1))
    o, lse = _run(m.attention, q, k.contiguous(), v.contiguous(), causal)
    mb = E.example("attention_backward")
    do = cuda(1, 2, 130, 64, dtype=torch.bfloat16)
    _run(mb.attention_backward, do, q, k.contiguous(), v.contiguous(), o, lse, causal)


@pytest.mark.gpu
def test_zz_summary(capsys):
    """(last in the file) the record of every shadowed launch of this module."""
    with capsys.disabled():
        print("\ndifferential (examples):", summary(RECORDS))
    assert not [r for r in RECORDS if r.verdict == "DISAGREE"]


def test_mirror_keeps_views_and_aliasing():
    """(CPU) the copies share one storage per original storage, with the views' offsets and
    strides (run with fake CUDA tensors: the real ones are on the GPU tests' side)."""
    base = torch.arange(24.0).reshape(4, 6)

    class FakeCuda(torch.Tensor):
        __torch_function__ = torch._C._disabled_torch_function_impl
        is_cuda = True

    a = torch.Tensor._make_subclass(FakeCuda, base)
    b = torch.Tensor._make_subclass(FakeCuda, base.t()[1:])
    (ca, cb, n), _, pairs = _mirror([a, b, 3], {})
    assert n == 3 and len(pairs) == 2
    assert torch.equal(cb, base.t()[1:]) and cb.stride() == base.t()[1:].stride()
    assert ca.untyped_storage().data_ptr() == cb.untyped_storage().data_ptr()
    assert ca.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()


def test_compare_tolerances():
    x = torch.randn(100)
    assert _compare(x, x.clone()) is None
    assert _compare(x, x * (1 + 1e-6)) is None
    assert "largest value" in _compare(x, x + 1e-2 * x.abs().max())
    y = x.clone()
    y[3] = float("nan")
    assert "NaN/inf" in _compare(x, y)
    i = torch.arange(10)
    assert _compare(i, i.clone()) is None
    j = i.clone()
    j[4] = 7
    assert "differ" in _compare(i, j)

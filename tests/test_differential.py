"""The differential mode on the examples (issue 19 item 6): each example's wrapper on CUDA
tensors at small ragged sizes, every kernel launch shadowed by the interpreter on copies of
the same inputs and compared (tests/fuzz/shadow.py). The random kernels' differential mode
is tests/test_fuzz_long.py; the port suite's is `pytest -m gpu --shadow tests/ports`."""

from __future__ import annotations

import pytest
import test_examples as E
import torch
from fuzz.shadow import Shadow, _compare, _mirror, shadowed, summary

import kitjit as kit

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


# ------------------------------------------------------------------ the harness, on the CPU
@kit.jit
def _scale_kernel(X, Out, n, s, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    kit.store(Out + offs, kit.load(X + offs, mask=mask) * s, mask=mask)


_tuned_kernel = kit.autotune([kit.Config({"BLOCK": 16}), kit.Config({"BLOCK": 32})],
                             key=["n"])(_scale_kernel)


def test_shadow_wraps_every_launch_entry():
    """(CPU) launches through kernel[grid], the autotuner and `run` are all shadowed; the
    "GPU" here is the interpreter on CPU tensors that answer is_cuda (so the harness
    mirrors them), so they agree; the kernels get their own launch entries back after."""
    class LooksCuda(torch.Tensor):
        __torch_function__ = torch._C._disabled_torch_function_impl
        is_cuda = True

    x, out = (torch.Tensor._make_subclass(LooksCuda, t)
              for t in (torch.randn(40), torch.full((40,), float("nan"))))
    n_keys = len(_scale_kernel.cache)
    records: list[Shadow] = []
    with shadowed(records):
        _scale_kernel[(3,)](x, out, 40, 2.0, BLOCK=16)
        _tuned_kernel[lambda m: (kit.cdiv(40, m["BLOCK"]),)](x, out, 40, 3.0)
        _scale_kernel.run(x, out, 40, 0.5, grid=(2,), BLOCK=32)
    assert [r.verdict for r in records] == ["agree"] * 3, summary(records)
    assert torch.equal(out, x * 0.5)
    assert len(_scale_kernel.cache) == n_keys + 2, "the copies' launchers stayed"
    assert not getattr(_scale_kernel._launch, "_kit_shadow", False)

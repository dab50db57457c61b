"""Every example in examples/ through its torch-facing wrapper, in the CPU interpreter, against
float64 torch references.

The wrappers allocate their outputs with `torch.empty_like`; the tests make that allocation
return a NaN-filled tensor, so an element the kernel forgets to write fails the check (the
relative error of anything with a NaN is inf). Widths are chosen on both sides of the block
(powers of two and ragged ones), and rows are few so the interpreter stays fast.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import pathlib
import sys

import pytest
import torch

import kitjit as kit
from kitjit.testing import check, rel_error

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-2}
DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16],
                                 ids=["fp32", "bf16", "fp16"])


def example(name: str):
    return importlib.import_module(name)


@contextlib.contextmanager
def poisoned_outputs():
    """Make `torch.empty_like` (what the wrappers allocate with) return NaN-filled tensors;
    yields the list of tensors handed out."""
    made: list[torch.Tensor] = []
    orig = torch.empty_like

    def empty_like(t, *args, **kwargs):
        out = orig(t, *args, **kwargs)
        out.fill_(float("nan") if out.dtype.is_floating_point else -7)
        made.append(out)
        return out

    torch.empty_like = empty_like
    try:
        yield made
    finally:
        torch.empty_like = orig


def run_poisoned(fn, *args, **kwargs):
    with poisoned_outputs() as made:
        out = fn(*args, **kwargs)
    assert made, "the wrapper did not allocate its output with torch.empty_like"
    assert any(out.data_ptr() == m.data_ptr() for m in made), "output is not the poisoned one"
    return out


def assert_close(out, ref, dtype, what):
    assert out.dtype == dtype and out.shape == ref.shape
    assert not torch.isnan(out).any(), f"{what}: {int(torch.isnan(out).sum())} elements unwritten"
    err = check(out, ref, TOL[dtype], what)  # NaN or inf anywhere never passes
    assert math.isfinite(err)
    return err


# ----------------------------------------------------------------------------- vector add
@DTYPES
@pytest.mark.parametrize("n", [1, 1000, 1024, 4097])
def test_vector_add(n, dtype):
    m = example("vector_add")
    x = torch.randn(n, dtype=dtype)
    y = torch.randn(n, dtype=dtype)
    out = run_poisoned(m.add, x, y)
    assert_close(out, x.double() + y.double(), dtype, f"add n={n}")


@pytest.mark.parametrize("block", [16, 128])
def test_vector_add_small_blocks(block):
    """Many programs, tail program partly masked: n = 5 blocks + 3."""
    m = example("vector_add")
    n = 5 * block + 3
    x, y = torch.randn(n), torch.randn(n)
    out = run_poisoned(m.add, x, y, BLOCK=block)
    assert_close(out, x.double() + y.double(), torch.float32, f"add n={n} BLOCK={block}")


def test_vector_add_leaves_memory_past_n_alone():
    """The tail mask: a view of the first n elements of a bigger buffer; the rest untouched."""
    m = example("vector_add")
    n = 1000
    x, y = torch.randn(n), torch.randn(n)
    out = torch.full((n + 100,), -3.0)
    m.add_kernel[(kit.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    check(out[:n], x.double() + y.double(), 1e-5)
    assert bool((out[n:] == -3.0).all())


# ----------------------------------------------------------------------------- softmax
@DTYPES
@pytest.mark.parametrize("rows,cols", [(7, 1000), (16, 513), (3, 64), (5, 1), (2, 4097)])
def test_softmax(rows, cols, dtype):
    m = example("softmax")
    x = torch.randn(rows, cols, dtype=dtype) * 3
    out = run_poisoned(m.softmax, x)
    assert_close(out, torch.softmax(x.double(), dim=1), dtype, f"softmax {rows}x{cols}")


def test_softmax_large_values_are_stable():
    """Max subtraction: inputs near the top of fp32's exp range must not overflow."""
    m = example("softmax")
    x = torch.randn(4, 300) * 10 + 80
    out = run_poisoned(m.softmax, x)
    assert_close(out, torch.softmax(x.double(), dim=1), torch.float32, "softmax +80")


# ----------------------------------------------------------------------------- layernorm
@DTYPES
@pytest.mark.parametrize("rows,cols", [(5, 1000), (9, 513), (3, 64), (2, 4097), (4, 2048)])
def test_layernorm(rows, cols, dtype):
    m = example("layernorm")
    x = torch.randn(rows, cols, dtype=dtype) * 2 + 0.5
    w = torch.randn(cols, dtype=dtype)
    b = torch.randn(cols, dtype=dtype)
    out = run_poisoned(m.layernorm, x, w, b)
    ref = torch.nn.functional.layer_norm(x.double(), (cols,), w.double(), b.double(), 1e-5)
    assert_close(out, ref, dtype, f"layernorm {rows}x{cols}")


def test_layernorm_eps_is_used():
    """A constant row has variance 0: the output is exactly b (x - mean = 0), and eps keeps
    rstd finite."""
    m = example("layernorm")
    x = torch.full((3, 100), 2.5)
    w, b = torch.randn(100), torch.randn(100)
    out = run_poisoned(m.layernorm, x, w, b, eps=1e-2)
    ref = torch.nn.functional.layer_norm(x.double(), (100,), w.double(), b.double(), 1e-2)
    assert rel_error(out, ref) <= 1e-6


# ----------------------------------------------------------------------------- rmsnorm
@DTYPES
@pytest.mark.parametrize("rows,cols", [(5, 1000), (9, 513), (3, 64), (2, 4097), (4, 2048)])
def test_rmsnorm(rows, cols, dtype):
    m = example("rmsnorm")
    x = torch.randn(rows, cols, dtype=dtype)
    w = torch.randn(cols, dtype=dtype)
    out = run_poisoned(m.rmsnorm, x, w)
    ref = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    assert_close(out, ref, dtype, f"rmsnorm {rows}x{cols}")
    # the example's own reference agrees with ours
    assert rel_error(m.reference(x, w), ref) < 1e-12


# ----------------------------------------------------------------------------- main()
@pytest.mark.parametrize("name", ["vector_add", "softmax", "layernorm", "rmsnorm"])
def test_example_main(name, capsys):
    """Each example's main() runs (it self-checks with kitjit.testing.check) and reports."""
    m = example(name)
    m.main()
    out = capsys.readouterr().out
    assert "rel err" in out and "interpreter" in out
    errs = [float(tok) for tok in out.replace(")", " ").split() if _is_float(tok)]
    assert errs and all(math.isfinite(e) for e in errs)


def _is_float(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return "e" in tok  # the "rel err 1.23e-03" figures

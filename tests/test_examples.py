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

# every example in examples/ has its tests here: a new one must be added
# the graph_* examples are tested in tests/test_graph.py
KNOWN_EXAMPLES = {"vector_add", "softmax", "layernorm", "rmsnorm", "matmul", "attention",
                  "attention_backward", "graph_attention_decode", "graph_rmsnorm_linear",
                  "graph_gated_mlp", "graph_gqa_decode", "graph_lora", "graph_qk_norm",
                  "attention_ampere", "matmul_ampere",  # (tested in tests/test_ampere.py)
                  "matmul_fp8", "matmul_epilogue", "grouped_matmul",  # (test_gemm_family.py)
                  # (test_distributed.py)
                  "allgather_matmul", "matmul_reducescatter", "matmul_comm"}

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
    """Make `torch.empty_like`, `torch.empty` and `Tensor.new_empty` (what the wrappers
    allocate their outputs with) return NaN-filled float tensors; yields the list of tensors
    handed out."""
    made: list[torch.Tensor] = []
    originals = {"empty_like": torch.empty_like, "empty": torch.empty}

    def poisoning(orig):
        def alloc(*args, **kwargs):
            out = orig(*args, **kwargs)
            if out.dtype.is_floating_point and out.numel():
                out.fill_(float("nan"))
                made.append(out)
            return out
        return alloc

    new_empty = torch.Tensor.new_empty   # (the host fast paths allocate with q.new_empty)
    for name, orig in originals.items():
        setattr(torch, name, poisoning(orig))
    torch.Tensor.new_empty = poisoning(new_empty)
    try:
        yield made
    finally:
        for name, orig in originals.items():
            setattr(torch, name, orig)
        torch.Tensor.new_empty = new_empty


def run_poisoned(fn, *args, **kwargs):
    with poisoned_outputs() as made:
        out = fn(*args, **kwargs)
    assert made, "the wrapper did not allocate its output with torch.empty(_like)"
    for o in (out if isinstance(out, tuple) else (out,)):
        assert any(o.data_ptr() == m.data_ptr() for m in made), "output is not a poisoned one"
    return out


def assert_close(out, ref, dtype, what):
    assert out.dtype == dtype and out.shape == ref.shape
    assert not torch.isnan(out).any(), f"{what}: {int(torch.isnan(out).sum())} elements unwritten"
    err = check(out, ref, TOL[dtype], what)  # NaN or inf anywhere never passes
    assert math.isfinite(err)
    return err


def test_every_example_is_tested():
    found = {p.stem for p in EXAMPLES.glob("*.py") if not p.stem.startswith("_")}
    assert found == KNOWN_EXAMPLES, f"untested examples: {sorted(found - KNOWN_EXAMPLES)}"


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


# ----------------------------------------------------------------------------- matmul
MATMUL_SHAPES = [  # (M, N, K, tile options): one program, ragged edges, several programs
    (128, 256, 128, {}),
    (100, 200, 72, {}),
    (64, 64, 64, dict(BM=64, BN=64, BK=32, STAGES=2, num_warps=4)),
    (200, 136, 200, dict(BM=64, BN=64, BK=32, STAGES=3, num_warps=4)),
]


@pytest.mark.parametrize("M,N,K,opts", MATMUL_SHAPES,
                         ids=[f"{m}x{n}x{k}" for m, n, k, _ in MATMUL_SHAPES])
def test_matmul(M, N, K, opts):
    m = example("matmul")
    a = torch.randn(M, K, dtype=torch.bfloat16)
    b = torch.randn(K, N, dtype=torch.bfloat16)
    out = run_poisoned(m.matmul, a, b, **opts)
    assert_close(out, a.double() @ b.double(), torch.bfloat16, f"matmul {M}x{N}x{K}")


def test_matmul_tuner_keys_and_prune():
    """The example's tuner: one record per B layout (different kernels), and where 128x256
    tiles fill an H100/H200 (132 SMs) in nearly whole waves only they are timed."""
    m = example("matmul")
    assert "TRANS_B" in m.matmul_tuned.key and "TRANS_B" in m.matmul_tuned_tma.key
    dev = torch.device("cuda", 7)            # a device this test owns in the SM table
    m._SMS[dev] = 132
    a = type("A", (), {"device": dev})()
    try:
        for M, N, pruned in [(4096, 4096, True), (8192, 8192, True), (16384, 1024, True),
                             (2048, 2048, False), (4096, 2304, False), (128, 4096, False)]:
            kept = m.big_tiles_where_they_fill(m.CONFIGS_TMA, dict(M=M, N=N, A=a))
            shapes = {(c.kwargs["BM"], c.kwargs["BN"]) for c in kept}
            assert shapes == ({(128, 256)} if pruned else
                              {(c.kwargs["BM"], c.kwargs["BN"]) for c in m.CONFIGS_TMA}), (M, N)
    finally:
        del m._SMS[dev]


# ----------------------------------------------------------------------------- attention
ATTENTION = [  # (B, H, S, D, causal, GQA group): ragged S, causal or not, grouped KV heads
    (1, 2, 130, 64, True, 1),
    (1, 2, 130, 64, False, 2),
    (2, 2, 64, 128, True, 2),
    (1, 1, 1, 64, False, 1),
    (1, 2, 200, 64, False, 1),
]


@pytest.mark.parametrize("B,H,S,D,causal,g", ATTENTION,
                         ids=[f"B{b}H{h}S{s}D{d}-{'causal' if c else 'full'}-g{g}"
                              for b, h, s, d, c, g in ATTENTION])
def test_attention(B, H, S, D, causal, g):
    m = example("attention")
    q = torch.randn(B, H, S, D, dtype=torch.bfloat16)
    k = torch.randn(B, H // g, S, D, dtype=torch.bfloat16)
    v = torch.randn(B, H // g, S, D, dtype=torch.bfloat16)
    o, lse = run_poisoned(m.attention, q, k, v, causal)
    ro, rl = m.reference(q, k, v, causal)
    assert_close(o, ro, torch.bfloat16, "attention output")
    assert_close(lse, rl, torch.float32, "attention logsumexp")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_backward(causal):
    m = example("attention_backward")
    q, k, v = (torch.randn(1, H, 70, 64, dtype=torch.bfloat16) for H in (4, 2, 2))
    do = torch.randn(1, 4, 70, 64, dtype=torch.bfloat16)
    o, lse = m.attention(q, k, v, causal)
    grads = run_poisoned(m.attention_backward, do, q, k, v, o, lse, causal)
    for g, r, n in zip(grads, m.reference_grads(q, k, v, do, causal), ("dq", "dk", "dv")):
        assert_close(g, r, torch.bfloat16, f"attention backward {n}")


# ----------------------------------------------------------------------------- main()
@pytest.mark.parametrize("name", sorted(KNOWN_EXAMPLES))
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

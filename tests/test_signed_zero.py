"""Float max/min on -0.0 and +0.0 (and NaN): the interpreter gives the GPU's bits.

The GPU's max.f32/min.f32 (LLVM maxnum/minnum; fp16 and bf16 go through fp32) order
-0.0 < +0.0 and return the other operand for a NaN (IEEE 754-2019 maximumNumber /
minimumNumber). The table below is what an H200 gave (2026-11-29, fp32/fp16/bf16 alike):
kit.maximum / kit.minimum (also propagate_nan=ALL), libdevice fmax / fmin, kit.clamp,
kit.max / kit.min, argmax / argmin (-0.0 == +0.0: a tie, the
first index), kit.reduce and kit.associative_scan with kit.maximum / kit.minimum, and
atomic_max / atomic_min (Triton's integer trick: also -0.0 < +0.0, but a +NaN wins).
kit.max / kit.min with return_indices give the element at the index (torch.max(x, dim)'s
pair), and kit.sum of a row of -0.0 gives -0.0.
numpy's fmax / fmin return either zero (by argument order, dtype, SIMD path): the
interpreter fixes the sign (kitjit/interpreter/floats.py). The gpu test runs the same
kernels on the GPU and compares bits with the interpreter.
"""

from __future__ import annotations

import os
from unittest import mock

import numpy as np
import pytest
import torch
from lang_helpers import compile_gpu  # (tests/ is on sys.path)

import kitjit as kit
from kitjit.interpreter.floats import maxnum, minnum, reduce_maxnum
from kitjit.language.extra import libdevice
from kitjit.testing import has_gpu

NAN, INF = float("nan"), float("inf")
#: (x, y) pairs: both orders of the zeros, NaN on either side, NaN/NaN, and numbers
PAIRS = [(-0.0, 0.0), (0.0, -0.0), (0.0, 0.0), (-0.0, -0.0), (NAN, -0.0), (0.0, NAN),
         (-0.0, NAN), (NAN, 0.0), (NAN, NAN), (1.5, -0.0), (-1.5, 0.0), (-INF, -0.0)]
#: maximum(x, y) / minimum(x, y) on the GPU (the first eight measured on an H200)
MAX = [0.0, 0.0, 0.0, -0.0, -0.0, 0.0, -0.0, 0.0, NAN, 1.5, 0.0, -0.0]
MIN = [-0.0, -0.0, 0.0, -0.0, -0.0, 0.0, -0.0, 0.0, NAN, -0.0, -1.5, -INF]
#: propagate_nan=ALL: a NaN on either side gives NaN
MAX_ALL = [NAN if x != x or y != y else m for (x, y), m in zip(PAIRS, MAX)]
MIN_ALL = [NAN if x != x or y != y else m for (x, y), m in zip(PAIRS, MIN)]
#: clamp(x, y, inf) = fmin(fmax(x, y), inf): a NaN from fmax gives inf
CLAMP = [INF if m != m else m for m in MAX]
#: atomic_max / atomic_min of memory x with y (fp32): the sign-split integer max/min
ATOMIC_MAX = [0.0, 0.0, 0.0, -0.0, NAN, NAN, NAN, NAN, NAN, 1.5, 0.0, -0.0]
ATOMIC_MIN = [-0.0, -0.0, 0.0, -0.0, -0.0, 0.0, -0.0, 0.0, NAN, -0.0, -1.5, -INF]
#: rows of 16 for the reductions; (max, min, argmax, argmin) of each
ROWS = [([-0.0, 0.0] * 8, (0.0, -0.0, 0, 0)),
        ([0.0, -0.0] * 8, (0.0, -0.0, 0, 0)),
        ([-0.0] * 15 + [0.0], (0.0, -0.0, 0, 0)),
        ([0.0] * 15 + [-0.0], (0.0, -0.0, 0, 0)),
        ([-0.0] * 16, (-0.0, -0.0, 0, 0)),
        ([0.0] * 16, (0.0, 0.0, 0, 0)),
        ([NAN, -0.0, 0.0, NAN] * 4, (0.0, -0.0, 0, 0)),
        ([-1.0, -0.0] * 8, (-0.0, -1.0, 1, 0)),
        ([1.0] + [0.0, -0.0] * 7 + [NAN], (1.0, -0.0, 15, 15))]
#: kit.sum of each row: -0.0 only for a row of -0.0 (the GPU's fadd tree has no +0.0 identity)
SUM = [0.0, 0.0, 0.0, 0.0, -0.0, 0.0, NAN, -8.0, NAN]
DTYPES = pytest.mark.parametrize("dt", [torch.float32, torch.float16, torch.bfloat16],
                                 ids=["fp32", "fp16", "bf16"])
BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


# --------------------------------------------------------------------------- kernels
@kit.jit
def _max(a, b):
    return kit.maximum(a, b).to(a.dtype)  # bf16: maximum computes in fp32


@kit.jit
def _min(a, b):
    return kit.minimum(a, b).to(a.dtype)


@kit.jit
def pairs(X, Y, O, N: kit.constexpr):
    """Row k of O: the k-th op on (x, y)."""
    r = kit.arange(0, N)
    x = kit.load(X + r)
    y = kit.load(Y + r)
    kit.store(O + r, kit.maximum(x, y))
    kit.store(O + N + r, kit.minimum(x, y))
    kit.store(O + 2 * N + r, kit.maximum(x, y, propagate_nan=kit.PropagateNan.ALL))
    kit.store(O + 3 * N + r, kit.minimum(x, y, propagate_nan=kit.PropagateNan.ALL))
    kit.store(O + 4 * N + r, kit.clamp(x, y, float("inf")))  # fmin(fmax(x, y), inf)
    kit.store(O + 5 * N + r, kit.clamp(y, x, float("inf")))
    xf = x.to(kit.float32)
    yf = y.to(kit.float32)
    kit.store(O + 6 * N + r, libdevice.fmax(xf, yf))
    kit.store(O + 7 * N + r, libdevice.fmin(xf, yf))


@kit.jit
def rows(X, O, I, R: kit.constexpr, N: kit.constexpr):
    """O[k, :]: max, min, max and min with return_indices, kit.reduce with maximum and
    minimum, sum; I[k, :]: argmax, argmin, the two return_indices' indices."""
    r = kit.arange(0, R)
    x = kit.load(X + r[:, None] * N + kit.arange(0, N)[None, :])
    vmax, imax = kit.max(x, axis=1, return_indices=True)
    vmin, imin = kit.min(x, axis=1, return_indices=True)
    kit.store(O + r, kit.max(x, axis=1))
    kit.store(O + R + r, kit.min(x, axis=1))
    kit.store(O + 2 * R + r, vmax)
    kit.store(O + 3 * R + r, vmin)
    kit.store(O + 4 * R + r, kit.reduce(x, 1, _max))
    kit.store(O + 5 * R + r, kit.reduce(x, 1, _min))
    kit.store(O + 6 * R + r, kit.sum(x, axis=1))
    kit.store(I + r, kit.argmax(x, axis=1))
    kit.store(I + R + r, kit.argmin(x, axis=1))
    kit.store(I + 2 * R + r, imax)
    kit.store(I + 3 * R + r, imin)


@kit.jit
def scans(X, O, R: kit.constexpr, N: kit.constexpr):
    """Running max / min along the rows (kit.associative_scan with maximum / minimum)."""
    o = kit.arange(0, R)[:, None] * N + kit.arange(0, N)[None, :]
    x = kit.load(X + o)
    kit.store(O + o, kit.associative_scan(x, 1, _max))
    kit.store(O + R * N + o, kit.associative_scan(x, 1, _min))


@kit.jit
def atomics(MX, MN, Y, OX, ON, N: kit.constexpr):
    r = kit.arange(0, N)
    y = kit.load(Y + r)
    kit.store(OX + r, kit.atomic_max(MX + r, y))
    kit.store(ON + r, kit.atomic_min(MN + r, y))


@kit.jit
def folded(O):
    """kit.maximum/minimum of two numbers (folded at compile time) by the same rule."""
    kit.store(O, kit.maximum(-0.0, 0.0))
    kit.store(O + 1, kit.maximum(0.0, -0.0))
    kit.store(O + 2, kit.minimum(0.0, -0.0))
    kit.store(O + 3, kit.minimum(-0.0, 0.0))
    kit.store(O + 4, kit.maximum(float("nan"), -0.0))
    kit.store(O + 5, kit.minimum(1.5, float("nan")))
    kit.store(O + 6, kit.maximum(float("nan"), 1.0, propagate_nan=kit.PropagateNan.ALL))
    kit.store(O + 7, kit.maximum(-0.0, -0.0))


# --------------------------------------------------------------------------- runs
def _run(device: str, fn, grid_args: tuple, **consts) -> None:
    # CPU tensors run in the interpreter (in the gpu test too: its references)
    with mock.patch.dict(os.environ, {"KITJIT_INTERPRET": "1"} if device == "cpu" else {}):
        fn[(1,)](*grid_args, **consts)


def _pairs(dt: torch.dtype, device: str) -> torch.Tensor:
    x = torch.tensor([p[0] for p in PAIRS], dtype=dt, device=device)
    y = torch.tensor([p[1] for p in PAIRS], dtype=dt, device=device)
    n = 16  # a power of two: the pairs, then copies of the first
    x, y = x.repeat(2)[:n].contiguous(), y.repeat(2)[:n].contiguous()
    o = torch.full((8, n), NAN, dtype=dt, device=device)
    _run(device, pairs, (x, y, o), N=n)
    return o[:, :len(PAIRS)].cpu()


def _rows(dt: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.tensor([r for r, _ in ROWS] + [ROWS[0][0]] * (16 - len(ROWS)), dtype=dt,
                     device=device)
    o = torch.full((7, 16), NAN, dtype=dt, device=device)
    i = torch.full((4, 16), -7, dtype=torch.int32, device=device)
    _run(device, rows, (x, o, i), R=16, N=16)
    return o[:, :len(ROWS)].cpu(), i[:, :len(ROWS)].cpu()


def _scan_input(dt: torch.dtype) -> torch.Tensor:
    """Rows of -0.0, +0.0 and NaN in every order, and a row with numbers."""
    g = torch.Generator().manual_seed(11)
    x = torch.tensor([-0.0, 0.0, NAN])[torch.randint(0, 3, (4, 32), generator=g)]
    x[0, :4] = torch.tensor([-0.0, 0.0, -0.0, NAN])
    x[1, :4] = torch.tensor([0.0, -0.0, NAN, -0.0])
    x[3] = torch.randint(-2, 3, (32,), generator=g) * 0.5
    return x.to(dt)


def _scans(dt: torch.dtype, device: str) -> torch.Tensor:
    x = _scan_input(dt).to(device)
    o = torch.full((2,) + tuple(x.shape), NAN, dtype=dt, device=device)
    _run(device, scans, (x, o), R=4, N=32)
    return o.cpu()


def _atomics(device: str) -> tuple[torch.Tensor, ...]:
    n = 16
    x = torch.tensor([p[0] for p in PAIRS]).repeat(2)[:n]
    y = torch.tensor([p[1] for p in PAIRS]).repeat(2)[:n].to(device)
    mx, mn = x.clone().to(device), x.clone().to(device)
    ox = torch.full((n,), NAN, device=device)
    on = torch.full((n,), NAN, device=device)
    _run(device, atomics, (mx, mn, y, ox, on), N=n)
    k = len(PAIRS)
    return mx[:k].cpu(), mn[:k].cpu(), ox[:k].cpu(), on[:k].cpu()


def _same(got: torch.Tensor, want) -> None:
    """Same bits, NaNs as NaNs (of any payload)."""
    want = torch.as_tensor(want, dtype=got.dtype)
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan), f"{got} != {want}"
    bits = BITS[got.element_size()]
    assert torch.equal(got[~nan].view(bits), want[~nan].view(bits)), f"{got} != {want}"


# --------------------------------------------------------------------------- CPU
@DTYPES
def test_elementwise_pairs(dt):
    o = _pairs(dt, "cpu")
    for row, want in zip(o, (MAX, MIN, MAX_ALL, MIN_ALL, CLAMP, CLAMP)):
        _same(row, want)
    for row, want in zip(o[6:], (MAX, MIN)):  # libdevice on the fp32 values, stored back
        _same(row, want)


@DTYPES
def test_reductions(dt):
    o, i = _rows(dt, "cpu")
    vmax, vmin, amax, amin = (list(c) for c in zip(*(w for _, w in ROWS)))
    # with return_indices the value is the element at the index (torch.max(x, dim)'s pair:
    # NaN where argmax found one, the first zero's sign on a -0.0 / +0.0 tie)
    at_max = [r[a] for (r, _), a in zip(ROWS, amax)]
    at_min = [r[a] for (r, _), a in zip(ROWS, amin)]
    for row, want in zip(o, (vmax, vmin, at_max, at_min, vmax, vmin, SUM)):
        _same(row, want)
    assert i.tolist() == [amax, amin, amax, amin]


@DTYPES
def test_scans(dt):
    x = _scan_input(dt).float().numpy()
    o = _scans(dt, "cpu")
    for k, largest in enumerate((True, False)):
        want = x.copy()
        for j in range(1, x.shape[1]):
            want[:, j] = (maxnum if largest else minnum)(want[:, j - 1], x[:, j])
        _same(o[k], torch.from_numpy(want))


def test_atomics():
    mx, mn, ox, on = _atomics("cpu")
    _same(mx, ATOMIC_MAX)
    _same(mn, ATOMIC_MIN)
    old = [p[0] for p in PAIRS]
    _same(ox, old)
    _same(on, old)


def test_folded_numbers():
    o = torch.full((8,), 7.0)
    _run("cpu", folded, (o,))
    _same(o, [0.0, 0.0, -0.0, -0.0, -0.0, 1.5, NAN, -0.0])


@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64])
def test_helpers_on_big_tiles(dt):
    """maxnum/minnum/reduce_maxnum against a plain rule on random ±0/NaN/number tiles."""
    g = np.random.default_rng(5)
    vals = np.array([-0.0, 0.0, np.nan, 1.0, -1.0], dt)
    a, b = vals[g.integers(0, 5, (64, 256))], vals[g.integers(0, 5, (64, 256))]
    for f, largest in ((maxnum, True), (minnum, False)):
        r = f(a, b)
        gt = (a > b) if largest else (a < b)
        tie = (a == b) & (np.signbit(b) if largest else ~np.signbit(b))
        want = np.where(gt | tie | np.isnan(b), a, b)
        assert r.dtype == a.dtype and np.array_equal(r.view(f"u{r.itemsize}"),
                                                     want.view(f"u{r.itemsize}"))
        red = reduce_maxnum(a, 1, largest)
        want = a[:, 0]
        for j in range(1, a.shape[1]):
            want = f(want, a[:, j])
        assert np.array_equal(np.signbit(red), np.signbit(want))
        assert np.array_equal(red, want, equal_nan=True)
    assert np.signbit(maxnum(dt(-0.0), dt(0.0))) == np.False_
    assert np.signbit(minnum(0.0, -0.0))


def test_compile_for_sm90a():
    """The kernels of the table compile for sm_90a without spills, and max/min are the
    FMNMX instruction (whose -0.0 < +0.0 and NaN rule the table records)."""
    from kitjit.tools import ToolError, disassemble, find_tool, sass_opcodes

    x, i = torch.empty(256), torch.empty(256, dtype=torch.int32)
    cks = [compile_gpu(pairs, x, x, x, N=16), compile_gpu(rows, x, x, i, R=16, N=16)]
    if find_tool("cuobjdump") is None:
        pytest.skip("cuobjdump not found")
    for ck in cks:
        try:
            ops = sass_opcodes(disassemble(ck.asm["cubin"]))
        except ToolError as e:
            pytest.skip(str(e))
        assert any(o.startswith("FMNMX") for o in ops), sorted(ops)
        assert not any(o.startswith(("STL", "LDL")) for o in ops)


# --------------------------------------------------------------------------- GPU
def _same_bits(got: torch.Tensor, want: torch.Tensor) -> None:
    _same(got, want)  # NaN payloads aside (max.f32 of two NaNs is the canonical NaN)


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("dt", [torch.float32, torch.float16, torch.bfloat16, torch.float64],
                         ids=["fp32", "fp16", "bf16", "fp64"])
def test_gpu_bits_as_interpreter(dt):
    _same_bits(_pairs(dt, "cuda"), _pairs(dt, "cpu"))
    for got, want in zip(_rows(dt, "cuda"), _rows(dt, "cpu")):
        if got.dtype.is_floating_point:
            _same_bits(got, want)
        else:
            assert torch.equal(got, want), f"{got}\n{want}"
    _same_bits(_scans(dt, "cuda"), _scans(dt, "cpu"))
    if dt is torch.float32:
        o = torch.full((8,), 7.0, device="cuda")
        _run("cuda", folded, (o,))
        _same(o.cpu(), [0.0, 0.0, -0.0, -0.0, -0.0, 1.5, NAN, -0.0])
        for got, want in zip(_atomics("cuda"), _atomics("cpu")):
            _same_bits(got, want)

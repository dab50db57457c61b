"""The kitjit language's control flow: range and static_range loops, ifs on constexprs and on
run-time values, values and pointers merged after them, scalar expression forms, and calls of
@kit.jit functions."""

from __future__ import annotations

import pytest
import torch
from lang_helpers import cdiv, close, compile_gpu, poisoned, rand, same

import kitjit as kit


# ============================================================================ control flow
@kit.jit
def row_sum_loop_kernel(X, Out, n_cols, stride, BLOCK: kit.constexpr):
    """range loop over column chunks with a loop-carried tile and a loop-carried scalar."""
    row = kit.program_id(0)
    offs = kit.arange(0, BLOCK)
    acc = kit.zeros((BLOCK,), kit.float32)
    biggest = kit.full((BLOCK,), float("-inf"), kit.float32)
    count = 0
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        x = kit.load(X + row * stride + cols, mask=cols < n_cols, other=0.0).to(kit.float32)
        acc += x
        biggest = kit.maximum(biggest, kit.where(cols < n_cols, x, float("-inf")))
        count = count + 1
    kit.store(Out + row * 3, kit.sum(acc, axis=0))
    kit.store(Out + row * 3 + 1, kit.max(biggest, axis=0))
    kit.store(Out + row * 3 + 2, count)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("n_cols", [64, 200, 1, 65])
def test_range_loop_carried(n_cols, dtype):
    rows = 5
    x = rand((rows, n_cols), dtype)
    out = poisoned((rows, 3), torch.float32)
    row_sum_loop_kernel[(rows,)](x, out, n_cols, x.stride(0), BLOCK=64)
    a = x.double().cpu()
    close(out[:, 0], a.sum(1), 1e-5)
    close(out[:, 1], a.amax(1), 0)
    same(out[:, 2].long(), torch.full((rows,), cdiv(n_cols, 64)))


@kit.jit
def loop_forms_kernel(Out, lo, hi, step, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    acc = kit.zeros((BLOCK,), kit.int32)
    for i in range(lo, hi, step):  # run-time bounds and step
        acc += i
    for j in range(3):  # constant bound: still a loop
        for k in range(j, 4):  # nested, inner bound from the outer induction variable
            acc += offs * k
    for _ in range(hi, lo):  # empty
        acc += 1000
    kit.store(Out + offs, acc)


@pytest.mark.parametrize("lo,hi,step", [(0, 10, 1), (3, 40, 7), (10, 0, -3), (5, 5, 1)])
def test_loop_forms(lo, hi, step):
    out = poisoned(16, torch.int32)
    loop_forms_kernel[(1,)](out, lo, hi, step, BLOCK=16)
    inner = sum(k for j in range(3) for k in range(j, 4))
    empty = 1000 * len(range(hi, lo))
    same(out, sum(range(lo, hi, step)) + torch.arange(16) * inner + empty)


@kit.jit
def static_range_kernel(X, Out, n, BLOCK: kit.constexpr, UNROLL: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    acc = kit.zeros((BLOCK,), kit.float32)
    for i in kit.static_range(UNROLL):
        # i is a Python int: it can index into compile-time things and pick constexpr branches
        x = kit.load(X + i * n + offs, mask=offs < n, other=0.0)
        if i % 2 == 0:
            acc += x * (i + 1)
        else:
            acc -= x
    for i in kit.static_range(1, 8, 3):  # 1, 4, 7
        acc += i
    kit.store(Out + offs, acc, mask=offs < n)


def test_static_range():
    n, U = 50, 5
    x = rand((U, n))
    out = poisoned(n, torch.float32)
    static_range_kernel[(1,)](x, out, n, BLOCK=64, UNROLL=U)
    a = x.double().cpu()
    ref = sum(a[i] * (i + 1) if i % 2 == 0 else -a[i] for i in range(U)) + 12
    close(out, ref)
    ck = compile_gpu(static_range_kernel, x, out, n, BLOCK=64, UNROLL=U)
    assert "scf.for" not in ck.asm["tir"]  # unrolled: no loop left
    assert " for " not in ck.asm["tir"] and "for(" not in ck.asm["tir"]


@kit.jit
def const_if_kernel(X, Out, n, MODE: kit.constexpr, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    x = kit.load(X + offs, mask=offs < n)
    if MODE == 0:
        y = x * 2
    elif MODE == 1:
        y = x + 1
    else:
        y = this_name_does_not_exist  # noqa: F821 - never compiled: MODE is a constexpr
    kit.store(Out + offs, y, mask=offs < n)


@pytest.mark.parametrize("mode", [0, 1])
def test_if_on_constexpr_compiles_one_branch(mode):
    n = 40
    x = rand(n)
    out = poisoned(n, torch.float32)
    const_if_kernel[(1,)](x, out, n, MODE=mode, BLOCK=64)
    close(out, x.double().cpu() * 2 if mode == 0 else x.double().cpu() + 1)
    if mode == 0:
        compile_gpu(const_if_kernel, x, out, n, MODE=0, BLOCK=64)


@kit.jit
def runtime_if_kernel(X, Out, n, threshold, BLOCK: kit.constexpr):
    pid = kit.program_id(0)
    offs = pid * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    x = kit.load(X + offs, mask=mask)
    scale = 1.0
    shift = kit.zeros((BLOCK,), kit.float32)
    if pid % 2 == 1:  # a run-time scalar condition
        y = x * 2.0
        scale = 3.0
    else:
        y = x - 1.0
        shift = shift + 0.5
    if threshold > 0:  # no else: values from before the if flow into the merge
        y = y + threshold
    s = kit.sum(kit.where(mask, x, 0.0), axis=0)
    if s > 0.0:  # a condition computed from a reduction
        flag = 1
    else:
        flag = -1
    kit.store(Out + offs, (y * scale + shift) * flag, mask=mask)


@pytest.mark.parametrize("threshold", [5, -2])
def test_if_on_runtime_scalars(threshold):
    n, B = 300, 64
    x = rand(n)
    out = poisoned(n, torch.float32)
    runtime_if_kernel[(cdiv(n, B),)](x, out, n, threshold, BLOCK=B)
    a = x.double().cpu()
    ref = torch.empty_like(a)
    for p in range(cdiv(n, B)):
        sl = slice(p * B, min(n, (p + 1) * B))
        y = a[sl] * 2.0 * 3.0 if p % 2 == 1 else (a[sl] - 1.0) + 0.5
        if p % 2 == 1:
            y = (a[sl] * 2.0 + (threshold if threshold > 0 else 0)) * 3.0
        else:
            y = (a[sl] - 1.0 + (threshold if threshold > 0 else 0)) + 0.5
        ref[sl] = y * (1 if a[sl].sum() > 0 else -1)
    close(out, ref)
    compile_gpu(runtime_if_kernel, x, out, n, threshold, BLOCK=B)


@kit.jit
def loop_with_if_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    acc = kit.zeros((BLOCK,), kit.float32)
    for i in range(0, n):
        x = kit.load(X + i * BLOCK + offs)
        if i % 3 == 0:
            acc = acc + x
        else:
            acc = kit.maximum(acc, x)
    kit.store(Out + offs, acc)


def test_if_inside_loop():
    n, B = 7, 32
    x = rand((n, B))
    out = poisoned(B, torch.float32)
    loop_with_if_kernel[(1,)](x, out, n, BLOCK=B)
    acc = torch.zeros(B, dtype=torch.float64)
    for i in range(n):
        acc = acc + x[i].double().cpu() if i % 3 == 0 else torch.maximum(acc, x[i].double().cpu())
    close(out, acc)
    compile_gpu(loop_with_if_kernel, x, out, n, BLOCK=B)


# ============================================================================ more forms
@kit.jit
def merge_consts_kernel(Out, n):
    if n > 3:  # a Python int in one branch, a float in the other: they meet at fp32
        s = 2
    else:
        s = 3.5
    t = 1
    if n > 10:  # only one branch assigns: the other keeps the value from before
        t = 7
    kit.store(Out, s)
    kit.store(Out + 1, t)


@pytest.mark.parametrize("n", [2, 5, 11])
def test_if_merges_python_numbers(n):
    out = poisoned(2, torch.float32)
    merge_consts_kernel[(1,)](out, n)
    close(out, torch.tensor([2.0 if n > 3 else 3.5, 7 if n > 10 else 1]), 0)


@kit.jit
def pointer_loop_kernel(X, Out, n_rows, stride, BLOCK: kit.constexpr):
    """Pointers carried through a loop (`X += stride`) and chosen by a run-time if."""
    offs = kit.arange(0, BLOCK)
    acc = kit.zeros((BLOCK,), kit.float32)
    for _ in range(n_rows):
        acc += kit.load(X + offs)
        X += stride
    if n_rows > 2:
        P = Out
    else:
        P = Out + BLOCK
    kit.store(P + offs, acc)


@pytest.mark.parametrize("n_rows", [2, 5])
def test_pointers_in_loops_and_ifs(n_rows):
    B = 32
    x = rand((n_rows, B + 3))
    out = poisoned(2 * B, torch.float32)
    pointer_loop_kernel[(1,)](x, out, n_rows, x.stride(0), BLOCK=B)
    half = slice(0, B) if n_rows > 2 else slice(B, 2 * B)
    close(out[half], x[:, :B].double().cpu().sum(0))
    assert torch.isnan(out[slice(B, 2 * B) if n_rows > 2 else slice(0, B)]).all()


@kit.jit
def scalar_forms_kernel(X, Out, n, lo, hi):
    x = kit.load(X)  # a scalar load through a plain pointer
    a = x if n > 3 else -x  # a run-time conditional expression
    b = max(x, 0.5) + min(x, -0.5) + abs(x)  # Python builtins on values
    c = 1.0 if lo < n < hi else 0.0  # a chained comparison on run-time values
    d = (n > 0 and n < 100) or not (lo < 0)  # boolean operators on run-time scalars
    kit.store(Out, a)
    kit.store(Out + 1, b)
    kit.store(Out + 2, c)
    kit.store(Out + 3, d.to(kit.float32))
    kit.store(Out + 4 + kit.arange(0, 4), 9.0)  # a number stored to a tile of pointers


@pytest.mark.parametrize("n,lo,hi", [(5, 0, 10), (2, -1, 1), (200, 3, 300)])
def test_scalar_forms(n, lo, hi):
    x = rand(1)
    out = poisoned(8, torch.float32)
    scalar_forms_kernel[(1,)](x, out, n, lo, hi)
    v = float(x.cpu())
    d = (0 < n < 100) or not (lo < 0)
    ref = [v if n > 3 else -v, max(v, 0.5) + min(v, -0.5) + abs(v),
           1.0 if lo < n < hi else 0.0, float(d), 9, 9, 9, 9]
    close(out, torch.tensor(ref), 1e-6)


# ============================================================================ calls
@kit.jit
def _scale_shift(x, scale, SHIFT: kit.constexpr):
    return x * scale + SHIFT


@kit.jit
def _stats(x, mask, n):
    mean = kit.sum(kit.where(mask, x, 0.0), axis=0) / n
    d = kit.where(mask, x - mean, 0.0)
    var = kit.sum(d * d, axis=0) / n
    return mean, var  # a tuple


@kit.jit
def _nested(x, k: kit.constexpr):
    return _scale_shift(x, 2.0, SHIFT=k) - k  # calls another @kit.jit function


@kit.jit
def _store_row(Ptr, offs, v, mask):  # no return value
    kit.store(Ptr + offs, v, mask=mask)


@kit.jit
def calls_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    mask = offs < n
    x = kit.load(X + offs, mask=mask, other=0.0)
    y = _scale_shift(x, 3.0, 1.5)
    y = _scale_shift(y, scale=0.5, SHIFT=-1)  # keywords
    mean, var = _stats(x, mask, n)
    z = _nested(y, 4)
    _store_row(Out, offs, z + mean * 0.0, mask)
    kit.store(Out + n, mean)
    kit.store(Out + n + 1, var)


def test_calls_of_jit_functions():
    n = 100
    x = rand(n) + 2  # a mean well away from 0, so its relative error is meaningful
    out = poisoned(n + 2, torch.float32)
    calls_kernel[(1,)](x, out, n, BLOCK=128)
    a = x.double().cpu()
    y = (a * 3.0 + 1.5) * 0.5 - 1
    z = (y * 2.0 + 4) - 4
    close(out[:n], z)
    mean = a.mean()
    close(out[n:n + 1], mean.reshape(1))
    close(out[n + 1:], ((a - mean) ** 2).mean().reshape(1))
    compile_gpu(calls_kernel, x, out, n, BLOCK=128)


def test_jit_function_called_from_python_raises():
    with pytest.raises(RuntimeError, match="grid"):
        calls_kernel(torch.zeros(1), torch.zeros(1), 1, BLOCK=1)
    with pytest.raises(RuntimeError, match="inside a @kit.jit"):
        kit.load(None)

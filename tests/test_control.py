"""Control flow beyond `for`/`if`: early `return` (also under a run-time `if`), `while` on a
run-time condition, `kit.range` with Triton's loop hints, the unroll limit of
`kit.static_range`, and the constructs Triton refuses (`break`, `continue`, `return` in a
loop), each an error at the statement. Interpreter runs against torch, compiles for sm_90a,
and the same kernels on the GPU (marked gpu)."""

from __future__ import annotations

import pytest
import torch
from kitjit.frontend.errors import CompileError
from lang_helpers import close, compile_gpu, poisoned, rand, same

import kitjit as kit


def expect_compile_error(jf, args, *, match, line_has, at, hint=None, **consts):
    """The launch raises a CompileError matching `match` located in this file at the line of
    `jf` containing `line_has`, with its caret under `at` (and a hint containing `hint`)."""
    import inspect
    import re

    with pytest.raises(CompileError) as ei:
        jf[(1,)](*args, **consts)
    e, msg = ei.value, str(ei.value)
    assert re.search(match, msg), msg
    lines, first = inspect.getsourcelines(jf.fn)
    i = next(i for i, t in enumerate(lines) if line_has in t)
    text = lines[i].rstrip("\n")
    assert e.loc.file == __file__ and e.loc.line == first + i, msg
    assert e.loc.col == text.index(at), msg
    body = msg.splitlines()
    k = body.index("    " + text.strip())
    assert body[k + 1].index("^") - 4 == text.strip().index(at), msg
    if hint is not None:
        assert hint in (e.hint or ""), msg
    return e


@kit.jit
def early_return_kernel(X, Out, n, BLOCK: kit.constexpr):
    pid = kit.program_id(0)
    offs = pid * BLOCK + kit.arange(0, BLOCK)
    if pid * BLOCK >= n:
        return
    x = kit.load(X + offs, mask=offs < n)
    kit.store(Out + offs, x * 2.0, mask=offs < n)


@kit.jit
def _clamp_or_scale(x, lo):
    if lo > 0.0:
        return kit.maximum(x, lo), 1
    y = x * 3.0
    return y, 2


@kit.jit
def nested_return_kernel(X, Out, Tag, lo, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    x = kit.load(X + offs, mask=offs < n, other=0.0)
    y, tag = _clamp_or_scale(x, lo)
    kit.store(Out + offs, y, mask=offs < n)
    kit.store(Tag, tag)


@kit.jit
def while_kernel(X, Out, n, BLOCK: kit.constexpr):
    """Sums x while the running total stays under 10, counting the steps."""
    offs = kit.arange(0, BLOCK)
    mask = offs < n
    x = kit.abs(kit.load(X + offs, mask=mask, other=0.0)) + 0.5
    acc = kit.zeros((BLOCK,), kit.float32)
    steps = 0
    while kit.max(acc, axis=0) < 10.0:
        acc += x
        steps += 1
    kit.store(Out + offs, acc + steps, mask=mask)


@kit.jit
def range_hints_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    acc = kit.zeros((BLOCK,), kit.float32)
    for i in kit.range(0, n, 2, num_stages=3, loop_unroll_factor=2, flatten=True,
                       warp_specialize=False, disallow_acc_multi_buffer=True):
        acc += kit.load(X + i * BLOCK + offs)
    for i in kit.range(3):
        acc += i
    kit.store(Out + offs, acc)


@kit.jit
def unroll_kernel(X, Out, BLOCK: kit.constexpr, UNROLL: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    acc = kit.zeros((BLOCK,), kit.float32)
    for i in kit.range(6, loop_unroll_factor=UNROLL):
        acc = acc * 0.5 + kit.load(X + i * BLOCK + offs)
    kit.store(Out + offs, acc)


def test_loop_unroll_factor_reaches_llvm():
    """kit.range's loop_unroll_factor is LLVM loop metadata on the back edge: 1 keeps a loop
    of constant trip count rolled (LLVM unrolls 6 steps whole by default), n unrolls it n
    times; both run as written in the interpreter."""
    x = rand(6 * 16)
    ref = torch.zeros(16, dtype=torch.float64)
    for i in range(6):
        ref = ref * 0.5 + x.double()[i * 16:(i + 1) * 16]
    for unroll in (1, 2):
        out = poisoned(16, torch.float32)
        unroll_kernel[(1,)](x, out, BLOCK=16, UNROLL=unroll)
        close(out, ref)
    loads = {}
    for unroll in (None, 1, 2):
        ck = compile_gpu(unroll_kernel, x, x, BLOCK=16, UNROLL=unroll)
        loads[unroll] = ck.asm["ptx"].count("ld.global")
        llir = ck.asm["llir"]
        assert ('"llvm.loop.unroll.disable"' in llir) == (unroll == 1)
        assert ('"llvm.loop.unroll.count", i32 2' in llir) == (unroll == 2)
    assert loads == {None: 6, 1: 1, 2: 2}, loads


def test_early_return_interpreter():
    for n in (64, 50):
        x = rand(n)
        out = poisoned(128, torch.float32, 7.0)
        early_return_kernel[(4,)](x, out, n, BLOCK=32)
        close(out[:n], x.double() * 2)
        assert (out[n:] == 7.0).all()


def test_return_under_runtime_if_in_callee():
    x = rand(16)
    for lo, tag in ((0.25, 1), (-1.0, 2)):
        out, t = poisoned(16, torch.float32), poisoned(1, torch.int32)
        nested_return_kernel[(1,)](x, out, t, lo, 13, BLOCK=16)
        ref = torch.clamp(x.double(), min=lo) if tag == 1 else x.double() * 3
        close(out[:13], ref[:13])
        same(t, torch.tensor([tag], dtype=torch.int32))


def test_while_interpreter():
    for n in (16, 11):
        x = rand(16)
        out = poisoned(16, torch.float32)
        while_kernel[(1,)](x, out, n, BLOCK=16)
        xs = x[:n].double().abs() + 0.5
        acc, steps = torch.zeros(n, dtype=torch.float64), 0
        while acc.max() < 10.0:
            acc += xs
            steps += 1
        close(out[:n], acc + steps)


def test_kit_range_with_hints():
    x = rand(6 * 16)
    out = poisoned(16, torch.float32)
    range_hints_kernel[(1,)](x, out, 6, BLOCK=16)
    ref = x.double().view(6, 16)[0::2].sum(0) + 3
    close(out, ref)
    fn = range_hints_kernel.build_ir([("*fp32", 16), ("*fp32", 16), ("i32", 1)], (16,), 4)
    loop = next(op for op in fn.walk() if op.name == "for")
    assert loop.attrs["num_stages"] == 3 and loop.attrs["flatten"] is True
    assert list(kit.range(1, 7, 2)) == [1, 3, 5]  # plain Python outside a kernel


def test_control_flow_compiles_for_sm90():
    x, out = rand(64), poisoned(64, torch.float32)
    ptx = compile_gpu(while_kernel, x, out, 50, BLOCK=16).asm["ptx"]
    assert ptx.count("bra") >= 2
    compile_gpu(early_return_kernel, x, out, 50, BLOCK=16)
    compile_gpu(nested_return_kernel, x, out, out, 0.5, 13, BLOCK=16)
    compile_gpu(range_hints_kernel, x, out, 2, BLOCK=16)


# ---------------------------------------------------------------- errors, at the statement
@kit.jit
def return_in_while_kernel(Out, n):
    i = 0
    while i < n:
        if i > 3:
            return
        i += 1
    kit.store(Out, i)


@kit.jit
def continue_kernel(Out, n):
    acc = 0.0
    for _i in range(n):
        continue
    kit.store(Out, acc)


@kit.jit
def return_under_if_in_static_range_kernel(Out, n):
    for i in kit.static_range(4):
        if n > i:
            return
    kit.store(Out, n)


@kit.jit
def huge_static_range_kernel(Out, n):
    acc = 0
    for i in kit.static_range(10 ** 9):
        acc += i
    kit.store(Out, acc)


@kit.jit
def while_true_kernel(Out, n):
    i = 0
    while True:
        i += 1
    kit.store(Out, i)


@kit.jit
def return_mismatch_kernel(Out, n):
    if n > 2:
        return
    kit.store(Out, _returns_on_one_path(n))


@kit.jit
def _returns_on_one_path(n):
    if n > 1:
        return 1.0
    return None


@kit.jit
def range_bad_hint_kernel(Out, n):
    for _i in kit.range(n, num_stages=n):
        kit.store(Out, 1.0)


def X(n=4):
    return torch.randn(n)


@pytest.mark.parametrize("jf,match,line_has,at,hint", [
    (return_in_while_kernel, "`return` inside a loop is not supported", "    return",
     "return", "after the loop"),
    (continue_kernel, "`continue` is not supported", "    continue", "continue", "under an `if`"),
    (return_under_if_in_static_range_kernel, "`return` inside a loop", "    return",
     "return", None),
    (huge_static_range_kernel, "unroll limit of 4096", "static_range(10", "kit.static_range",
     "range(...)"),
    (while_true_kernel, "never ends", "while True", "True", None),
    (range_bad_hint_kernel, "'num_stages' must be known at compile time", "kit.range(",
     "kit.range", None),
], ids=["return-in-while", "continue", "return-static-range", "unroll-limit", "while-true",
        "range-hint"])
def test_control_errors(jf, match, line_has, at, hint):
    expect_compile_error(jf, [X(), 3], match=match, line_has=line_has, at=at, hint=hint)


def test_return_mismatch_is_located():
    with pytest.raises(CompileError, match="return different kinds of values"):
        return_mismatch_kernel[(1,)](X(), 3)


# ---------------------------------------------------------------- on the GPU
@pytest.mark.gpu
def test_control_flow_gpu():
    x = torch.randn(64, device="cuda")
    out = torch.full((128,), 7.0, device="cuda")
    early_return_kernel[(4,)](x, out, 50, BLOCK=32)
    close(out[:50].cpu(), x[:50].cpu().double() * 2)
    assert (out[50:] == 7.0).all()
    out = torch.full((16,), float("nan"), device="cuda")
    x16 = x[:16].contiguous()
    while_kernel[(1,)](x16, out, 11, BLOCK=16)
    xs = x16[:11].cpu().double().abs() + 0.5
    acc, steps = torch.zeros(11, dtype=torch.float64), 0
    while acc.max() < 10.0:
        acc += xs
        steps += 1
    close(out[:11].cpu(), acc + steps)


@kit.jit
def _countdown_kernel(X, Out, n, iters, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    x = kit.load(X + offs, mask=offs < n, other=0.0)
    acc = kit.zeros((BLOCK,), kit.float32)
    for i in range(iters - 1, -1, -1):   # a negative constant step, run-time start
        acc = acc + x * i
    for _i in range(iters, 0, -2):       # and another negative step
        acc = acc + x
    kit.store(Out + offs, acc, mask=offs < n)


def _countdown(device):
    x = torch.randn(50).to(device)
    out = torch.full((50,), float("nan"), device=device)
    _countdown_kernel[(1,)](x, out, 50, 5, BLOCK=64)
    # sum(4..0) = 10, plus range(5, 0, -2) = 5, 3, 1: three more
    torch.testing.assert_close(out.cpu(), x.cpu() * 13)


def test_negative_step_loops():
    """The GPU ran `range(a, b, -1)` zero times (the step constant was read unsigned); the
    differential fuzzer found it. The PTX must compare with sgt."""
    _countdown("cpu")
    ck = kit.compile_aot(__file__, "_countdown_kernel", ["*fp32:16", "*fp32:16", "i32", "i32"],
                         {"BLOCK": 64}, 4, "sm_90a")
    assert "setp.gt.s32" in ck.asm["ptx"] or "icmp sgt" in ck.asm["llir"]
    assert "icmp slt i32 %\"i\", 4294967295" not in ck.asm["llir"]


@pytest.mark.gpu
def test_gpu_negative_step_loops():
    _countdown("cuda")

"""User mistakes are reported well, and before anything runs.

Compile errors: `kitjit.frontend.errors.CompileError`, whose message names
`file:line:col`, quotes the source line, puts a caret under the offending expression and
says what to do (`hint:`); errors inside a called @kit.jit function also name the call site
(`note:`). Launch errors (bad arguments, bad grids): TypeError / ValueError raised before a
kernel runs, so poisoned outputs stay poisoned. A failed compile leaves nothing in the
on-disk cache.
"""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from kitjit.frontend.errors import CompileError

import kitjit as kit

# ============================================================================ helpers


def source_line(jf, needle: str) -> tuple[int, str]:
    """(line number in this file, text) of the first line of `jf` containing `needle`."""
    lines, first = inspect.getsourcelines(jf.fn)
    for i, text in enumerate(lines):
        if needle in text:
            return first + i, text.rstrip("\n")
    raise AssertionError(f"{needle!r} is not in {jf.__name__}")


def check_located(msg: str, jf, line_has: str, at: str, kind: str = "error"):
    """`msg` has a `file:line:col: <kind>:` head at the line of `jf` containing `line_has`,
    with col at the start of `at`, then the source line and a caret under `at`."""
    lineno, text = source_line(jf, line_has)
    col = text.index(at) + 1
    head = f"{__file__}:{lineno}:{col}: {kind}:"
    lines = msg.splitlines()
    idx = [i for i, ln in enumerate(lines) if ln.startswith(head)]
    assert idx, f"no line starting with {head!r} in:\n{msg}"
    i = idx[0]
    stripped = text.strip()
    assert lines[i + 1].strip() == stripped, lines[i + 1]
    caret = lines[i + 2]
    assert set(caret.strip()) == {"^"}, caret
    # the caret starts under `at` (both lines are indented by the same 4 spaces)
    start = len(caret) - len(caret.lstrip())
    assert start - 4 == stripped.index(at), f"caret at {start - 4}, expected " \
        f"{stripped.index(at)}:\n{lines[i + 1]}\n{caret}"
    n = caret.count("^")
    assert n >= 1 and stripped[stripped.index(at):].startswith(stripped[start - 4:][:n][:len(at)])


def expect_compile_error(jf, args, consts=None, *, match: str, line_has: str, at: str,
                         hint: str | None = "", in_fn=None) -> CompileError:
    """Launch `jf` (in the interpreter) and check the CompileError: message, location (the
    line of `in_fn`, default `jf`, that contains `line_has`, column at `at`), and a hint
    containing `hint` (None: no hint required)."""
    with pytest.raises(CompileError) as ei:
        jf[(1,)](*args, **(consts or {}))
    e = ei.value
    msg = str(e)
    assert re.search(match, msg), f"{match!r} not in:\n{msg}"
    where = in_fn or jf
    check_located(msg, where, line_has, at)
    if hint is not None:
        assert "\nhint: " in msg, f"no hint in:\n{msg}"
        assert e.hint and hint in e.hint, f"{hint!r} not in hint {e.hint!r}"
    lineno, _ = source_line(where, line_has)
    assert e.loc is not None and e.loc.line == lineno and e.loc.file == __file__
    return e


def X(n=64, dtype=torch.float32):
    return torch.randn(n).to(dtype)


# ============================================================================ kernels with mistakes
@kit.jit
def while_kernel(Out, n):
    i = 0
    while i < n:
        i += 1
        break
    kit.store(Out, i)


@kit.jit
def lambda_kernel(Out, n):
    f = lambda v: v + 1  # noqa: E731
    kit.store(Out, f(n))


@kit.jit
def undefined_kernel(Out, n):
    kit.store(Out, n + no_such_name)  # noqa: F821


@kit.jit
def not_pow2_kernel(Out, n):
    offs = kit.arange(0, 100)
    kit.store(Out + offs, 1.0, mask=offs < n)


@kit.jit
def zeros_not_pow2_kernel(Out, n):
    z = kit.zeros((16, 24), kit.float32)
    kit.store(Out, kit.sum(kit.sum(z, axis=0), axis=0))


@kit.jit
def broadcast_kernel(Out, n):
    a = kit.arange(0, 16)
    b = kit.arange(0, 32)
    kit.store(Out + a, a + b)


@kit.jit
def broadcast_2d_kernel(Out, n):
    a = kit.arange(0, 16)
    b = kit.arange(0, 32)
    t = a[:, None] + b[None, :]  # [16, 32]
    kit.store(Out + a[None, :], t)  # [1, 16] with [16, 32]


@kit.jit
def ptr_plus_float_kernel(Out, n):
    kit.store(Out + 1.5, 1.0)


@kit.jit
def ptr_plus_float_tile_kernel(Out, n):
    offs = kit.arange(0, 16).to(kit.float32)
    kit.store(Out + offs, 1.0)


@kit.jit
def ptr_plus_ptr_kernel(Out, n):
    kit.store(Out + Out, 1.0)


@kit.jit
def float_bitwise_kernel(Out, n):
    x = kit.load(Out)
    kit.store(Out, x & 1)


@kit.jit
def runtime_arange_kernel(Out, n):
    offs = kit.arange(0, n)
    kit.store(Out + offs, 1.0)


@kit.jit
def runtime_static_range_kernel(Out, n):
    for i in kit.static_range(n):
        kit.store(Out + i, 1.0)


@kit.jit
def runtime_zeros_kernel(Out, n):
    z = kit.zeros((n,), kit.float32)
    kit.store(Out, kit.sum(z, axis=0))


@kit.jit
def loop_type_change_kernel(Out, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    acc = 0
    for _ in range(n):
        acc += kit.load(Out + offs)
    kit.store(Out + offs, acc)


@kit.jit
def loop_float_into_int_kernel(Out, n):
    x = 0
    for _ in range(n):
        x = 2.5
    kit.store(Out, x)


@kit.jit
def if_type_mismatch_kernel(Out, n):
    offs = kit.arange(0, 16)
    if n > 2:
        y = offs
    else:
        y = offs.to(kit.float32)
    kit.store(Out + offs, y)


@kit.jit
def if_float_into_int_tile_kernel(Out, n):
    offs = kit.arange(0, 16)
    if n > 2:
        y = offs
    else:
        y = 0.5
    kit.store(Out + offs, y)


@kit.jit
def if_on_tile_kernel(Out, n):
    offs = kit.arange(0, 16)
    if offs > 2:
        kit.store(Out, 1.0)


@kit.jit
def axis_kernel(Out, n, AXIS: kit.constexpr):
    x = kit.load(Out + kit.arange(0, 16))
    kit.store(Out, kit.sum(x, axis=AXIS))


@kit.jit
def axis_2d_kernel(Out, n):
    a = kit.arange(0, 16)
    t = a[:, None] + a[None, :]
    kit.store(Out + a, kit.max(t, axis=-3))


@kit.jit
def dot_shape_kernel(Out, n):
    a = kit.zeros((32, 16), kit.float16)
    b = kit.zeros((32, 32), kit.float16)
    c = kit.dot(a, b)
    kit.store(Out, kit.sum(kit.sum(c, axis=0), axis=0))


@kit.jit
def dot_dtype_kernel(Out, n):
    a = kit.zeros((32, 32), kit.int32)
    b = kit.zeros((32, 32), kit.int32)
    c = kit.dot(a, b)
    kit.store(Out, kit.sum(kit.sum(c, axis=0), axis=0))


@kit.jit
def dot_mixed_kernel(Out, n):
    a = kit.zeros((32, 32), kit.float16)
    b = kit.zeros((32, 32), kit.bfloat16)
    c = kit.dot(a, b)
    kit.store(Out, kit.sum(kit.sum(c, axis=0), axis=0))


@kit.jit
def dot_small_kernel(Out, n):
    a = kit.zeros((8, 16), kit.float16)
    b = kit.zeros((16, 16), kit.float16)
    c = kit.dot(a, b)
    kit.store(Out, kit.sum(kit.sum(c, axis=0), axis=0))


@kit.jit
def dot_1d_kernel(Out, n):
    a = kit.zeros((32,), kit.float16)
    b = kit.zeros((32, 32), kit.float16)
    c = kit.dot(a, b)
    kit.store(Out, kit.sum(kit.sum(c, axis=0), axis=0))


@kit.jit
def dot_acc_kernel(Out, n):
    a = kit.zeros((32, 32), kit.float16)
    b = kit.zeros((32, 32), kit.float16)
    acc = kit.zeros((32, 32), kit.float16)
    c = kit.dot(a, b, acc)
    kit.store(Out, kit.sum(kit.sum(c, axis=0), axis=0))


@kit.jit
def _bad_helper(x):
    return x + kit.arange(0, 32)


@kit.jit
def _middle_helper(x):
    y = _bad_helper(x)
    return y


@kit.jit
def callee_error_kernel(Out, n):
    offs = kit.arange(0, 16)
    kit.store(Out + offs, _middle_helper(offs))


@kit.jit
def _needs_constexpr(x, BLOCK: kit.constexpr):
    return x + kit.arange(0, BLOCK)


@kit.jit
def callee_constexpr_kernel(Out, n):
    kit.store(Out + kit.arange(0, 16), _needs_constexpr(1, n))


@kit.jit
def callee_arity_kernel(Out, n):
    kit.store(Out, _bad_helper(n, n))


@kit.jit
def assign_index_kernel(Out, n):
    offs = kit.arange(0, 16)
    offs[0] = 1
    kit.store(Out + offs, 1.0)


@kit.jit
def pow_kernel(Out, n):
    x = kit.load(Out)
    kit.store(Out, x ** 2)


@kit.jit
def load_non_pointer_kernel(Out, n):
    kit.store(Out, kit.load(n))


@kit.jit
def return_in_loop_kernel(Out, n):
    for _ in range(n):
        return


@kit.jit
def static_assert_kernel(Out, n, BLOCK: kit.constexpr):
    kit.static_assert(BLOCK % 32 == 0, "BLOCK must be a multiple of 32")
    kit.store(Out, n)


@kit.jit
def unknown_attr_kernel(Out, n):
    x = kit.load(Out)
    kit.store(Out, x.shape_of)


@kit.jit
def bad_builtin_args_kernel(Out, n):
    kit.store(Out, kit.program_id(0, 1, 2))


# ============================================================================ compile errors
def test_break_in_while_loop():
    expect_compile_error(while_kernel, [X(4), 3], match="`break` is not supported",
                         line_has="break", at="break", hint="while cond")


def test_lambda():
    expect_compile_error(lambda_kernel, [X(4), 3], match="'Lambda' expressions are not "
                         "supported", line_has="lambda v", at="lambda", hint="@kit.jit")


def test_undefined_name():
    e = expect_compile_error(undefined_kernel, [X(4), 3], match="'no_such_name' is not defined",
                             line_has="no_such_name", at="no_such_name", hint="argument")
    assert e.loc.end_col - e.loc.col == len("no_such_name")


def test_tile_shape_not_power_of_two():
    expect_compile_error(not_pow2_kernel, [X(128), 100], match=r"kit.arange\(0, 100\) has 100 "
                         "elements; tiles need a power of two", line_has="arange(0, 100)",
                         at="kit.arange", hint="mask")
    expect_compile_error(zeros_not_pow2_kernel, [X(4), 3], match=r"power of two.*\[16, 24\]",
                         line_has="kit.zeros", at="kit.zeros", hint="power of two")


def test_shapes_that_cannot_broadcast():
    expect_compile_error(broadcast_kernel, [X(64), 3], match=r"shapes \[16\] and \[32\] cannot "
                         "broadcast", line_has="a + b", at="a + b", hint="x[:, None]")
    expect_compile_error(broadcast_2d_kernel, [X(600), 3], match=r"cannot broadcast",
                         line_has="Out + a[None, :], t", at="kit.store", hint="")


@pytest.mark.parametrize("jf,match,line_has,at", [
    (ptr_plus_float_kernel, "a pointer offset must be an integer, got 1.5", "Out + 1.5",
     "Out + 1.5"),
    (ptr_plus_float_tile_kernel, "a pointer offset must be an integer tile, got fp32",
     "Out + offs", "Out + offs"),
    (ptr_plus_ptr_kernel, r"pointers can only be offset by integers", "Out + Out",
     "Out + Out"),
], ids=["ptr+1.5", "ptr+fp32-tile", "ptr+ptr"])
def test_dtypes_that_cannot_meet(jf, match, line_has, at):
    expect_compile_error(jf, [X(64), 3], match=match, line_has=line_has, at=at,
                         hint="integer")


def test_bitwise_on_floats():
    expect_compile_error(float_bitwise_kernel, [X(4), 3], match="bitwise '&' needs integer",
                         line_has="x & 1", at="x & 1", hint=".to(kit.int32)")


@pytest.mark.parametrize("jf,match,line_has,at", [
    (runtime_arange_kernel, r"kit.arange: 'end' must be a constexpr, got an i32 scalar",
     "kit.arange(0, n)", "kit.arange"),
    (runtime_static_range_kernel, "kit.static_range needs constexpr bounds", "static_range(n)",
     "kit.static_range"),
    (runtime_zeros_kernel, "constexpr", "kit.zeros((n,)", "kit.zeros"),
], ids=["arange", "static_range", "zeros"])
def test_runtime_value_where_constexpr_needed(jf, match, line_has, at):
    expect_compile_error(jf, [X(64), 37], match=match, line_has=line_has, at=at, hint="")


def test_runtime_value_for_constexpr_of_a_callee():
    # as in Triton, a run-time argument to a constexpr-annotated parameter of a callee is
    # passed as it is; the use that needs a constant is the error, with the call noted
    with pytest.raises(CompileError) as ei:
        callee_constexpr_kernel[(1,)](X(64), 16)
    msg = str(ei.value)
    line, _ = source_line(_needs_constexpr, "kit.arange(0, BLOCK)")
    assert f"{__file__}:{line}:" in msg.splitlines()[0]
    assert "kit.arange: 'end' must be a constexpr, got an i32 scalar" in msg
    assert "in the call of '_needs_constexpr'" in msg


def test_loop_carried_type_change():
    e = expect_compile_error(loop_type_change_kernel, [X(64), 3], {"BLOCK": 16},
                             match=r"loop-carried variable 'acc' changes type in the loop: it "
                             r"enters as an i32 scalar and is reassigned as a fp32 tile of "
                             r"shape \[16\]", line_has="acc += kit.load", at="acc",
                             hint="initialise 'acc' before the loop")
    assert "kit.zeros" in e.hint and "kit.float32" in e.hint
    expect_compile_error(loop_float_into_int_kernel, [X(4), 3], match="'x' changes type",
                         line_has="x = 2.5", at="x", hint="initialise")


def test_if_branches_disagree():
    expect_compile_error(if_type_mismatch_kernel, [X(64), 3],
                         match=r"'y' is an i32 tile of shape \[16\] in one branch and a fp32 "
                         r"tile of shape \[16\] in the other", line_has="y = offs.to",
                         at="y", hint="same dtype")
    expect_compile_error(if_float_into_int_tile_kernel, [X(64), 3],
                         match=r"'y' is an i32 tile of shape \[16\] in one branch and the "
                         r"number 0.5", line_has="y = 0.5", at="y", hint=".to()")
    expect_compile_error(if_on_tile_kernel, [X(64), 3], match="an `if` needs a scalar "
                         "condition", line_has="if offs > 2", at="offs > 2",
                         hint="kit.where")


@pytest.mark.parametrize("axis", [1, -2, 5])
def test_reduction_axis_out_of_range(axis):
    expect_compile_error(axis_kernel, [X(64), 3], {"AXIS": axis},
                         match=rf"axis {axis} is out of range for a 1-d tile of shape \[16\]",
                         line_has="kit.sum(x, axis=AXIS)", at="kit.sum", hint="[-1, 0]")


def test_reduction_axis_out_of_range_2d():
    expect_compile_error(axis_2d_kernel, [X(64), 3], match=r"axis -3 is out of range for a "
                         r"2-d tile", line_has="axis=-3", at="kit.max", hint="[-2, 1]")


@pytest.mark.parametrize("jf,match,hint", [
    (dot_shape_kernel, r"kit.dot: inner dims differ: a is \[32, 16\], b is \[32, 32\]",
     "[K, N]"),
    (dot_dtype_kernel, "kit.dot takes fp16, bf16, fp32 or int8 inputs of one dtype for now, got "
     "i32 and i32",
     ".to(kit.bfloat16)"),
    (dot_mixed_kernel, "kit.dot: a is fp16 but b is bf16", "match"),
    (dot_small_kernel, r"kit.dot needs M >= 16, K >= 16 and N >= 8 .*got M=8", "pad"),
    (dot_1d_kernel, "kit.dot: 'a' must be a 2-d tile", None),
    (dot_acc_kernel, r"acc must be an fp32 tile of shape \[32, 32\], got a fp16 tile",
     "kit.zeros((32, 32), kit.float32)"),
], ids=["inner-dims", "i32-inputs", "mixed-dtypes", "too-small", "1d", "acc-dtype"])
def test_dot_misuse(jf, match, hint):
    expect_compile_error(jf, [X(4), 3], match=match, line_has="kit.dot(", at="kit.dot",
                         hint=hint)


def test_error_inside_called_function_names_every_call_site():
    e = expect_compile_error(callee_error_kernel, [X(64), 3],
                             match=r"shapes \[16\] and \[32\] cannot broadcast",
                             line_has="return x + kit.arange(0, 32)", at="x + kit.arange",
                             hint="x[:, None]", in_fn=_bad_helper)
    # the error is in _bad_helper; the notes name _middle_helper's call of it, then the
    # kernel's call of _middle_helper
    assert e.loc.func == "_bad_helper"
    msg = str(e)
    check_located(msg, _middle_helper, "_bad_helper(x)", "_bad_helper", kind="note")
    check_located(msg, callee_error_kernel, "_middle_helper(offs)", "_middle_helper",
                  kind="note")
    assert "note: in the call of '_bad_helper' from here" in msg
    assert "note: in the call of '_middle_helper' from here" in msg
    assert msg.index("_bad_helper' from") < msg.index("_middle_helper' from") < \
        msg.index("hint:")


def test_callee_arity():
    expect_compile_error(callee_arity_kernel, [X(4), 3], match="'_bad_helper' takes 1 "
                         "arguments, got 2", line_has="_bad_helper(n, n)", at="_bad_helper",
                         hint=None)


@pytest.mark.parametrize("jf,match,line_has,at,hint", [
    (assign_index_kernel, "only plain names can be assigned", "offs[0] = 1", "offs[0]",
     "compute a new tile"),
    (pow_kernel, r"'\*\*' on tiles is not supported", "x ** 2", "x ** 2", "x * x"),
    (load_non_pointer_kernel, "kit.load needs a pointer", "kit.load(n)", "kit.load",
     "tensor argument"),
    (return_in_loop_kernel, "`return` inside a loop is not supported", "    return", "return",
     "after the loop"),
    (unknown_attr_kernel, "a tile has no attribute 'shape_of'", "x.shape_of", "x.shape_of",
     ".dtype"),
    (bad_builtin_args_kernel, "kit.program_id:", "program_id(0, 1, 2)", "kit.program_id",
     None),
], ids=["index-assign", "pow", "load-int", "return-in-loop", "attr", "builtin-args"])
def test_other_mistakes(jf, match, line_has, at, hint):
    expect_compile_error(jf, [X(4), 3], match=match, line_has=line_has, at=at, hint=hint)


def test_static_assert_message():
    e = expect_compile_error(static_assert_kernel, [X(4), 3], {"BLOCK": 48},
                             match="static assertion failed: BLOCK must be a multiple of 32",
                             line_has="kit.static_assert", at="kit.static_assert", hint=None)
    assert e.loc.func == "static_assert_kernel"
    out = torch.full((1,), -1.0)
    static_assert_kernel[(1,)](out, 3, BLOCK=64)  # fine when it holds
    assert out.item() == 3.0


def test_compile_error_is_not_an_internal_error():
    """A user's mistake never surfaces as InternalCompilerError (which says 'bug in
    kitjit')."""
    from kitjit.frontend.errors import InternalCompilerError

    assert not issubclass(CompileError, InternalCompilerError)
    with pytest.raises(CompileError) as ei:
        broadcast_kernel[(1,)](X(64), 3)
    assert "bug in kitjit" not in str(ei.value)


_NOT_DOMINATING = """define i32 @f(i1 %c) {
entry:
  br i1 %c, label %a, label %b
a:
  %x = add i32 1, 2
  br label %b
b:
  ret i32 %x
}
"""


def test_invalid_llvm_ir_is_an_internal_error_naming_the_kernel(monkeypatch, cache_dir):
    """IR that LLVM's verifier rejects (a lowering bug, as the session-5 WGMMA dominance
    bug was) is an InternalCompilerError naming the kernel and the stage, with the first
    problems only, and caches nothing; never an LLVM abort or llvmlite's bare error."""
    from kitjit.backend.compiler import InvalidLLVMIR, llvm_to_ptx
    from kitjit.backend.lower import Lowering
    from kitjit.frontend.errors import InternalCompilerError

    with pytest.raises(InvalidLLVMIR, match="does not dominate all uses"):
        llvm_to_ptx(_NOT_DOMINATING, "sm_90a")
    monkeypatch.setattr(Lowering, "llvm_ir", lambda self: _NOT_DOMINATING)
    with pytest.raises(InternalCompilerError) as ei:
        kit.compile_aot(__file__, "copy_kernel", ["*fp32:16", "*fp32:16", "i32"],
                        {"BLOCK": 64}, 4, arch="sm_90a")
    msg = str(ei.value)
    assert "generating PTX for kernel 'copy_kernel'" in msg
    assert "LLVM rejected the generated IR: Instruction does not dominate" in msg
    assert len(msg.splitlines()) < 12
    assert _entries(cache_dir) == [], _entries(cache_dir)


# ============================================================================ launch errors
@kit.jit
def copy_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    kit.store(Out + offs, kit.load(X + offs, mask=offs < n), mask=offs < n)


def _launch_setup():
    x = torch.randn(64)
    out = torch.full((64,), float("nan"))
    return x, out


@pytest.mark.parametrize("call,exc,match", [
    (lambda x, o: copy_kernel[(1,)](x, o, BLOCK=64), TypeError, "missing.*'n'"),
    (lambda x, o: copy_kernel[(1,)](x, o, 64, 64, 5, BLOCK=64), TypeError, "argument"),
    (lambda x, o: copy_kernel[(1,)](x, o, 64, BLOCK=64, BLOKC=3), TypeError,
     "unexpected keyword argument 'BLOKC'"),
    (lambda x, o: copy_kernel[(1,)](x, o, 64), TypeError, "missing.*'BLOCK'"),
    (lambda x, o: copy_kernel[(1,)](x, o, [64], BLOCK=64), TypeError,
     "argument 'n'.*cannot pass list"),
    (lambda x, o: copy_kernel[(1,)](x, o, {"n": 64}, BLOCK=64), TypeError, "cannot pass dict"),
    (lambda x, o: copy_kernel[(1,)](x.to(torch.complex64), o, 64, BLOCK=64), TypeError,
     "argument 'X'.*complex64.*not supported"),
    (lambda x, o: copy_kernel[(-1,)](x, o, 64, BLOCK=64), ValueError, "grid dim 0 is negative"),
    (lambda x, o: copy_kernel[(1, -2)](x, o, 64, BLOCK=64), ValueError,
     "grid dim 1 is negative"),
    (lambda x, o: copy_kernel[(2 ** 31,)](x, o, 64, BLOCK=64), ValueError,
     "grid dim 0 is 2147483648, over the hardware limit 2147483647"),
    (lambda x, o: copy_kernel[(1, 65536)](x, o, 64, BLOCK=64), ValueError,
     "grid dim 1 is 65536, over the hardware limit 65535"),
    (lambda x, o: copy_kernel[(1, 1, 70000)](x, o, 64, BLOCK=64), ValueError, "grid dim 2"),
    (lambda x, o: copy_kernel[(1, 1, 1, 1)](x, o, 64, BLOCK=64), ValueError,
     "the grid has 4 dims; it takes 1 to 3"),
    (lambda x, o: copy_kernel[()](x, o, 64, BLOCK=64), ValueError, "the grid has 0 dims"),
    (lambda x, o: copy_kernel[lambda meta: (1, 1, 1, 1)](x, o, 64, BLOCK=64), ValueError,
     "4 dims"),
    (lambda x, o: copy_kernel[None](x, o, 64, BLOCK=64), TypeError, "grid"),
], ids=["too-few-args", "too-many-args", "unknown-keyword", "missing-constexpr", "list-arg",
        "dict-arg", "complex64", "negative-grid", "negative-grid-y", "grid-x-over-limit",
        "grid-y-over-limit", "grid-z-over-limit", "grid-4-dims", "grid-0-dims",
        "callable-grid-4-dims", "grid-None"])
def test_launch_errors(call, exc, match, cache_dir):
    x, out = _launch_setup()
    with pytest.raises(exc, match=match):
        call(x, out)
    assert torch.isnan(out).all(), "the kernel ran (partly) before the error"
    assert not _entries(cache_dir)


def test_calling_a_kernel_without_a_grid():
    with pytest.raises(RuntimeError, match=r"copy_kernel\[grid\]"):
        copy_kernel(torch.zeros(4), torch.zeros(4), 4, BLOCK=4)


def test_missing_constexpr_says_keyword():
    x, out = _launch_setup()
    with pytest.raises(TypeError, match="keyword"):
        copy_kernel[(1,)](x, out, 64)


def test_int_argument_out_of_range():
    x, out = _launch_setup()
    with pytest.raises((ValueError, OverflowError, TypeError)):
        copy_kernel[(1,)](x, out, 2 ** 70, BLOCK=64)


@pytest.mark.parametrize("num_warps", [0, 3, -4])
def test_bad_num_warps(num_warps):
    x, out = _launch_setup()
    with pytest.raises(ValueError, match="num_warps"):
        copy_kernel[(1,)](x, out, 64, BLOCK=64, num_warps=num_warps)


@pytest.mark.parametrize("grid", [(1.5,), ("a",)])
def test_grid_of_non_ints(grid):
    x, out = _launch_setup()
    with pytest.raises(TypeError, match="grid"):
        copy_kernel[grid](x, out, 64, BLOCK=64)


# ============================================================================ the cache
def _specs(*args):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append((f"*{kit.float32.name}" if a.dtype == torch.float32 else "*fp16", 16))
        else:
            out.append(("i32", 1))
    return out


def _entries(cache_dir):
    """Cache entries and pieces of entries (the cache's own stats files do not count)."""
    if not cache_dir.exists():
        return []
    return [p for p in cache_dir.rglob("*")
            if p.name == "meta.json" or p.name.startswith(("kernel.", ".tmp-"))]


@pytest.mark.parametrize("jf,consts", [
    (broadcast_kernel, ()), (loop_type_change_kernel, (16,)), (dot_shape_kernel, ()),
    (runtime_arange_kernel, ()), (callee_error_kernel, ()),
], ids=["broadcast", "loop-type", "dot", "constexpr", "callee"])
def test_failed_compile_writes_nothing_to_the_cache(jf, consts, cache_dir):
    """The sm_90a compile path (the one that writes the disk cache) fails cleanly."""
    x = torch.randn(64)
    with pytest.raises(CompileError):
        jf.compile(_specs(x, 3), consts, 4, "sm_90a")
    with pytest.raises(CompileError):  # and the interpreter path
        jf[(1,)](x, 3, **dict(zip(jf.constexprs, consts)))
    assert _entries(cache_dir) == [], _entries(cache_dir)
    # a good kernel does write an entry: the check above can see one
    copy_kernel.compile(_specs(x, x, 3), (64,), 4, "sm_90a")
    assert any(p.name == "meta.json" for p in _entries(cache_dir))


def test_compile_error_is_raised_again_not_cached():
    """A kernel that failed once fails again the same way (no stale half-state in memory)."""
    x = torch.randn(64)
    msgs = []
    for _ in range(2):
        with pytest.raises(CompileError) as ei:
            broadcast_kernel[(1,)](x, 3)
        msgs.append(str(ei.value))
    assert msgs[0] == msgs[1]


@kit.jit
def _two_consts(X, N: kit.constexpr, M: kit.constexpr = 3):
    kit.store(X + kit.arange(0, N), kit.zeros((N,), kit.float32) + M)


def test_compile_fills_trailing_constexpr_defaults():
    """`compile(specs, consts, ...)` with trailing constexprs left out takes their defaults
    (a kernel that gained a defaulted constexpr keeps its callers); too many values, or a
    missing one with no default, is a CompileError naming the parameters, not an internal
    error."""
    ck = _two_consts.compile([("*fp32", 16)], (16,), 4, "sm_90a")
    assert ck.metadata["constexprs"] == {"N": 16, "M": 3}
    with pytest.raises(CompileError, match=r"3 constexpr values for 2 .*\(N, M\)"):
        _two_consts.compile([("*fp32", 16)], (16, 3, 4), 4, "sm_90a")
    with pytest.raises(CompileError, match="no value for constexpr N"):
        _two_consts.compile([("*fp32", 16)], (), 4, "sm_90a")

"""Broken kernels: a valid generated kernel with one known mistake inserted (in the kernel
or a called helper), which must raise a CompileError located at the mistake's line, the
same from the interpreter's launch and from the sm_90a compile; and the launch mistakes,
which must raise TypeError / ValueError before anything runs."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
from hypothesis import note
from hypothesis import strategies as st
from kitjit.frontend.errors import CompileError, InternalCompilerError

from .kernel import Kernel, kernels
from .model import FLOATS, KIT
from .runner import compile_sm90, fresh_output, launch, load_kernel

NOT_POW2 = st.integers(3, 300).filter(lambda x: x & (x - 1) != 0)


def mistakes(draw, k: Kernel, body: str, scope: list) -> tuple[str, list, set]:
    """One known mistake to insert at a place with `scope` in view: (its name, the lines
    (relative indent, text), the indices of the lines the error may point at).

    Mistakes that crash the frontend today are left out here and kept as reproducers at the
    end of this file (a non-number where a constant goes, kit.cdiv(x, 0) on constants,
    static_range(0, n, 0), comparisons of unrelated compile-time objects, ...)."""
    pick = lambda xs: draw(st.sampled_from(xs))  # noqa: E731
    in_kernel = body == "kernel"
    values = [v for v in scope if v[1] != "i1"]
    tiles = [v for v in values if v[2] != ()]
    floats = [v for v in values if v[1] in FLOATS]
    v = pick(values)[0]
    t = pick(tiles)[0] if tiles else "kit.arange(0, 8)"
    f = pick(floats)[0] if floats else "kit.arange(0, 8).to(kit.float32)"
    rt = pick(["n_extra", "alpha", "flag"]) if in_kernel else pick(values)[0]
    bad = f"bad{draw(st.integers(0, 9))}"
    npow = draw(NOT_POW2)
    one = lambda *lines: ([(0, x) for x in lines], {0})  # noqa: E731
    kinds = {
        "undefined": lambda: one(pick([f"{bad} = {v} + nope_{npow}",
                                       f"{bad} = kit.nope_{npow}({v})",
                                       f"{bad} = nope_{npow}({v})"])),
        "not-pow2": lambda: one(pick([f"{bad} = kit.arange(0, {npow})",
                                      f"{bad} = kit.arange({npow}, {2 * npow})",
                                      f"{bad} = kit.zeros(({npow},), kit.float32)",
                                      f"{bad} = kit.full((2, {npow}), 1.0, kit.float16)",
                                      f"{bad} = kit.broadcast_to({v}, ({npow}, 4))"])),
        "broadcast": lambda: broadcast(),
        "constexpr": lambda: constexpr(),
        "axis": lambda: axis(),
        "loop-type": lambda: loop_type(),
        "if-tile": lambda: ([(0, f"if {t} > 0:"), (1, f"{bad} = 1")], {0}),
        "syntax": lambda: syntax(),
        "misuse": lambda: misuse(),
        "new-ops": lambda: new_ops(),
        "loop-exit": lambda: loop_exit(),
    }
    if in_kernel:
        kinds["pointer"] = lambda: one(pick([f"{bad} = kit.load(X0 + 1.5)",
                                             f"{bad} = kit.load(X0 + {f})",
                                             f"{bad} = kit.load(X0 + Out)",
                                             f"{bad} = kit.load(Out - X0)",
                                             f"{bad} = -X0", f"{bad} = X0 < Out",
                                             f"{bad} = kit.exp(X0)",
                                             f"{bad} = kit.where(mask, X0, 1.0)",
                                             f"{bad} = kit.sum(X0 + {t}, axis=0)",
                                             f"{bad} = {f}.to(X0.dtype)",
                                             "kit.store(Out, X0)",
                                             f"{bad} = kit.load({v})",
                                             f"kit.store({v}, 1.0)"]))
        kinds["if-type"] = lambda: if_type()
        if k.helpers:
            kinds["call"] = lambda: call()
    else:
        kinds["recursion"] = lambda: one(f"{bad} = {body}({', '.join(helper_args())})")

    def broadcast():
        ok = [x for x in tiles if x[2][-1] > 1]
        if not ok:
            return one(f"{bad} = kit.arange(0, 16)[:, None] + kit.arange(0, 32)[None, :] + "
                       f"kit.arange(0, 8)")
        name, _, shape = pick(ok)
        s = pick([x for x in (2, 4, 8, 16, 32, 64, 128) if x != shape[-1]])
        return one(pick([f"{bad} = {name} + kit.arange(0, {s})",
                         f"{bad} = kit.where({name} > 0, {name}, kit.arange(0, {s}))",
                         f"{bad} = kit.maximum(kit.arange(0, {s}), {name})"]))

    def constexpr():  # in a helper, `rt` is a parameter: a run-time value too
        return one(pick([f"{bad} = kit.arange(0, {rt})", f"{bad} = kit.zeros(({rt},), "
                         "kit.float32)", f"{bad} = kit.full(({rt}, 2), 0.0, kit.float32)",
                         f"{bad} = kit.sum({t}, axis={rt})", f"{bad} = kit.program_id({rt})",
                         f"{bad} = kit.expand_dims({t}, {rt})",
                         f"{bad} = kit.max({t}, axis=0, keep_dims={rt})"])) \
            if draw(st.integers(0, 5)) else \
            ([(0, f"for {bad} in kit.static_range({rt}):"), (1, "pass")], {0})

    def axis():
        name, _, shape = pick(tiles) if tiles else ("kit.arange(0, 8)", "i32", (8,))
        r = len(shape)
        a = pick([r, r + 1, -r - 1, 5, -7])
        fn = pick(["sum", "max", "min", "argmax", "argmin"])
        return one(pick([f"{bad} = kit.{fn}({name}, axis={a})",
                         f"{bad} = {name}.{fn}(axis={a})",
                         f"{bad} = kit.expand_dims({name}, {r + 2})",
                         f"{bad} = {name}[:, :, :, None]"]))

    def loop_type():
        rng = "range(n_extra)" if in_kernel else "range(3)"
        form = draw(st.integers(0, 2))
        if form == 0:  # starts as a Python int, becomes a tile or a float
            init, upd = "0", pick([f"{bad} + {f}", f"{bad} + 0.5", f"{f} * 2.0"])
        elif form == 1:  # fp16 in, fp32 out
            init, upd = f"kit.zeros({k.full!r}, kit.float16)", f"{bad} + {f}.to(kit.float32)"
        else:  # another shape
            wide = [x[0] for x in floats if math.prod(x[2]) > 1] or ["kit.full((4,), 2.0, "
                                                                     "kit.float32)"]
            init, upd = "kit.zeros((1, 1, 1), kit.float32)", f"{bad} + {pick(wide)}"
        aug = draw(st.booleans()) and upd.startswith(f"{bad} + ")
        last = f"{bad} += {upd[len(bad) + 3:]}" if aug else f"{bad} = {upd}"
        return [(0, f"{bad} = {init}"), (0, f"for i_{bad} in {rng}:"), (1, last)], {2}

    def if_type():
        name, dt, _ = pick(values)
        other = pick([d for d in ("fp32", "fp16", "i32") if d != dt])
        alt = pick([f"{name}.to({KIT[other]})"] + ([f"{name}[None, :]"] if dt == "i32" else []))
        return ([(0, "if n_extra > 0:"), (1, f"{bad} = {name}"), (0, "else:"),
                 (1, f"{bad} = {alt}")], {1, 3})

    def syntax():
        forms = [
            ([(0, "while n_extra < 0: break")] if in_kernel else
             [(0, f"while {v} < 0: continue")]),
            [(0, f"{bad} = lambda q: q + 1")],
            [(0, "try:"), (1, f"{bad} = {v} + 1"), (0, "except Exception:"), (1, "pass")],
            [(0, "with open('f') as fh:"), (1, "pass")],
            [(0, f"del {v}")], [(0, "import math")], [(0, "from math import sqrt")],
            [(0, f"global nope_{npow}")], [(0, f"{bad} = [q for q in range(3)]")],
            [(0, f"{bad} = {{1: {v}}}")], [(0, f"{bad} = {{1, 2}}")],
            [(0, f"{bad} = {v} ** 2")], [(0, f"{t}[0] = 1.0")],
            [(0, "raise ValueError('no')")], [(0, f"def {bad}(q):"), (1, "return q")],
            [(0, f"class {bad.upper()}:"), (1, "pass")],
            [(0, f"{bad} = (q := {v})")], [(0, f"{bad} = input({v})")],
            [(0, f"assert {v} > 0")], [(0, f"{bad} = {t}[0]")], [(0, f"{bad} = {t}[1:2]")],
            [(0, f"{bad} = {v}.nope")],
            [(0, f"for {bad} in [1, 2]:"), (1, "pass")],
            [(0, f"for {bad} in range(3):"), (1, "pass"), (0, "else:"), (1, "pass")],
            [(0, f"for {bad}, q in range(3):"), (1, "pass")],
            [(0, f"for {bad} in range({t}):"), (1, "pass")],
            [(0, f"for {bad} in range(0, 4, 0):"), (1, "pass")],
            [(0, f"{bad}, q = {t}")], [(0, f"{bad} = {v} is {v}")], [(0, f"{bad} = 3 in {t}")],
            [(0, f"{bad} = (1, 2, 3)[{rt if in_kernel else v}]")],
            [(0, f"{bad} = kit.maximum(*{t})")],
            [(0, f"{bad} = kit.maximum(**{{'x': {v}, 'y': {v}}})")],
        ]
        return pick(forms), {0}

    def new_ops():  # scans, shape ops, atomics, umulhi, clamp, libdevice
        name, _, shape = pick(tiles) if tiles else ("kit.arange(0, 8)", "i32", (8,))
        r = len(shape)
        return one(pick([
            f"{bad} = kit.cumsum({name}, axis={r})", f"{bad} = kit.cumprod({name}, axis={-r - 1})",
            f"{bad} = kit.cumsum({name}, axis={rt})", f"{bad} = kit.reshape({name}, ({npow},))",
            f"{bad} = kit.flip({name}, {r})", f"{bad} = kit.split({name})",
            f"{bad} = kit.atomic_add({v}, 1.0)", f"{bad} = kit.umulhi({f}, {f})",
            f"{bad} = kit.atomic_and(X0 + {t}, 1)" if in_kernel and k.inputs[0][0] not in
            ("i32", "u32", "i64") else f"{bad} = kit.atomic_max({t}, 1)",
            f"{bad} = kit.atomic_cas(X0 + {t}, 1, 2, sem='bogus')" if in_kernel else
            f"{bad} = kit.atomic_xchg(1, {t})",
            f"{bad} = kit.atomic_add(X0 + {t}, 1, scope='planet')" if in_kernel else
            f"{bad} = kit.atomic_or({t}, {t})",
            f"{bad} = kit.umulhi({t}.to(kit.int16), {t}.to(kit.int16))",
            f"{bad} = kit.umulhi(kit.arange(0, 8).to(kit.int8), 3)",
            f"{bad} = kit.clamp(kit.arange(0, 8), 0, 1)", f"{bad} = kit.math.tanh({v}, {v})",
            f"{bad} = kit.join({f}, kit.arange(0, 8) > 2)"]))

    def misuse():
        return one(pick([
            f"{bad} = {t} @ {t}", f"{bad} = kit.dot({t}, {t})", f"{bad} = ~{f}",
            f"{bad} = {f} & 1", f"{bad} = {f} << 2", f"{bad} = kit.exp({v}, {v})",
            f"{bad} = kit.sum({t}, axis=0, bogus=1)", f"{bad} = kit.where({v})",
            f"{bad} = {v}.to(3)", f"{bad} = {v}.to(kit.float8)", f"{bad} = {v}.to()",
            f"{bad} = 1 // 0",
            f"{bad} = kit.arange(0, 16.0)", f"{bad} = kit.program_id(3)",
            f"kit.static_assert(False, 'fuzz: {bad}')", f"{bad} = 's' + {v}",
            f"{bad} = {v} + (1, 2)", f"{bad} = kit.full((2,), 2 ** 70, kit.int32)",
            f"{bad} = min({v}, {v}, {v})", f"{bad} = len({t})",
            f"{bad} = kit.zeros((4, 4), 3)", f"{bad} = kit.full((4,), {v}, kit.float32)"
            if v in [x[0] for x in tiles] else f"{bad} = kit.full((4,), {t}, kit.float32)",
            f"{bad} = kit.load({v}, mask='yes')", f"{bad} = kit.sum({v}, 0, False, 3)",
        ]))

    def helper_args():
        return next(h for h in k.helpers if h.name == body).arg_names()

    def call():
        h = pick(k.helpers)
        n = len(h.arg_names())
        return one(pick([f"{bad} = {h.name}()",
                         f"{bad} = {h.name}({', '.join([v] * (n + 2))})",
                         f"{bad} = {h.name}({', '.join([v] * n)}, zz={v})"]))

    def loop_exit():  # break / continue / return in a loop body, maybe under an `if`
        rng = pick([f"range({'n_extra' if in_kernel else '3'})", "kit.static_range(2)"] +
                   ([None] if in_kernel else []))  # (helpers have no run-time scalar)
        head = f"for {bad} in {rng}:" if rng else f"while n_extra < {npow}:"
        # (a `return` in kit.static_range's body is legal: it unrolls)
        what = pick(["break", "continue"] + (["return"] if in_kernel and rng != "kit."
                                             "static_range(2)" else []))
        if draw(st.booleans()):
            return [(0, head), (1, f"if {rt if in_kernel else 'True'}:"), (2, what)], {2}
        return [(0, head), (1, what)], {1}

    kind = pick(sorted(kinds))
    lines, expect = kinds[kind]()
    return kind, lines, expect


@dataclass
class Broken:
    k: Kernel
    body: str          # "kernel" or a helper's name
    idx: int           # the mistake goes before this line of that body
    kind: str
    lines: list
    expect: set

    def render(self) -> tuple[str, set, int | None]:
        """The source, the file lines the error may point at, and (for a mistake in a
        helper) the line of the kernel that calls it."""
        extra = {(self.body, self.idx): [(ind + 1, text) for ind, text in self.lines]}
        src, where = self.k.render(extra)
        lines = {where[("extra", self.body, self.idx, j)] for j in self.expect}
        call = None
        if self.body != "kernel":
            call = where[("kernel", self.k.parts["kernel"].calls[self.body])]
        return src, lines, call


@st.composite
def broken_kernels(draw) -> Broken:
    k = draw(kernels(depth=draw(st.sampled_from([2, 3, 1]))))
    k.flag = 5  # a run-time `if`: both branches compile, so every helper call is reached
    k.build()
    points = k.insertion_points()
    # helpers the kernel calls (a helper whose call was folded away is never compiled)
    in_helper = [p for p in points if p[0] != "kernel" and
                 p[0] in k.parts["kernel"].calls]
    body, idx, scope = draw(st.sampled_from(in_helper)) if in_helper and draw(
        st.booleans()) else draw(st.sampled_from([p for p in points if p[0] == "kernel"]))
    kind, lines, expect = mistakes(draw, k, body, scope)
    return Broken(k, body, idx, kind, lines, expect)


def check_compile_error(e: BaseException, path: str, lines: set, call: int | None,
                        source: str) -> None:
    if isinstance(e, InternalCompilerError):
        raise AssertionError(f"internal compiler error on a broken kernel (expected a "
                             f"CompileError):\n{source}\n{e}") from e
    if not isinstance(e, CompileError):
        raise AssertionError(f"{type(e).__name__} on a broken kernel (expected a "
                             f"CompileError):\n{source}\n{e}") from e
    msg = str(e)
    assert e.loc is not None and e.loc.file == path, f"no location in the file:\n{msg}"
    assert e.loc.line in lines, f"the error points at line {e.loc.line}, the mistake is on " \
                                f"{sorted(lines)}:\n{msg}\n{source}"
    head = f"{path}:{e.loc.line}:{e.loc.col + 1}: error: "
    assert msg.startswith(head), f"{head!r} does not start:\n{msg}"
    text = source.splitlines()[e.loc.line - 1].strip()
    got = msg.splitlines()
    assert got[1].strip() == text and set(got[2].strip()) == {"^"}, \
        f"no quoted source line with a caret:\n{msg}"
    if call is not None:
        assert f"{path}:{call}:" in msg and "note: in the call of '" in msg, \
            f"the call site (line {call}) is not named:\n{msg}"


def run_broken(b: Broken, workdir) -> str:
    source, lines, call = b.render()
    note(source)
    jf, path = load_kernel(source, workdir)
    k = b.k
    ts = k.tensors()
    out = fresh_output(k)
    args = k.args(ts, out)
    msgs = []
    for run in (lambda: launch(jf, k, args), lambda: compile_sm90(jf, k, args)):
        try:
            run()
        except BaseException as e:  # noqa: BLE001 - anything but a CompileError fails
            check_compile_error(e, path, lines, call, source)
            msgs.append(re.sub(r"%[\w.]+", "%", str(e)))
        else:
            raise AssertionError(f"no error for a broken kernel ({b.kind}):\n{source}")
    assert msgs[0] == msgs[1], f"the interpreter and the sm_90a compile disagree:\n{msgs}"
    assert torch.isnan(out.float()).all(), "the kernel ran"
    return msgs[0]


LAUNCH_MISTAKES = {
    # name: (how the call changes, the exception, a regex its message matches)
    "missing-argument": (lambda a, kw: (a[:-1], kw), TypeError, r"missing required argument"),
    "extra-argument": (lambda a, kw: (a + [3], kw), TypeError, r"argument"),
    "unknown-keyword": (lambda a, kw: (a, {**kw, "BLOKC": 4}), TypeError, r"'BLOKC'"),
    "missing-constexpr": (lambda a, kw: (a, {}), TypeError, r"missing required argument.*"
                          r"keyword"),
    "list-argument": (lambda a, kw: (a[:-1] + [[3]], kw), TypeError, r"'n_extra'.*list"),
    "string-argument": (lambda a, kw: (a[:-2] + ["5", a[-1]], kw), TypeError, r"'flag'.*str"),
    "complex-tensor": (lambda a, kw: ([a[0].to(torch.complex64)] + a[1:], kw), TypeError,
                       r"'X0'.*complex64"),
    "int-out-of-range": (lambda a, kw: (a[:-1] + [2 ** 70], kw), ValueError, r"'n_extra'"),
    "negative-grid": (lambda a, kw: (a, {**kw, "_grid": (-1,)}), ValueError, r"negative"),
    "4-d-grid": (lambda a, kw: (a, {**kw, "_grid": (1, 1, 1, 1)}), ValueError, r"4 dims"),
    "grid-over-limit": (lambda a, kw: (a, {**kw, "_grid": (1, 70000)}), ValueError,
                        r"hardware limit"),
    "grid-of-floats": (lambda a, kw: (a, {**kw, "_grid": (1.5,)}), TypeError, r"grid"),
    "num-warps-3": (lambda a, kw: (a, {**kw, "num_warps": 3}), ValueError, r"num_warps"),
    "num-warps-64": (lambda a, kw: (a, {**kw, "num_warps": 64}), ValueError, r"num_warps"),
}


def run_launch_mistake(k: Kernel, mistake: str, workdir) -> None:
    """Wrong arguments, grids or launch options on a valid kernel: TypeError / ValueError
    naming the kernel or the parameter, and nothing runs (the output stays NaN)."""
    k.build()
    source, _ = k.render()
    jf, _ = load_kernel(source, workdir)
    ts = k.tensors()
    out = fresh_output(k)
    change, exc, pattern = LAUNCH_MISTAKES[mistake]
    args, kw = change(k.args(ts, out), {**k.constexprs(), "num_warps": k.num_warps})
    grid = kw.pop("_grid", (k.grid,))
    try:
        jf[grid](*args, **kw)
    except exc as e:
        err = e
    else:
        raise AssertionError(f"no {exc.__name__} for the launch mistake {mistake}")
    msg = str(err)
    assert not isinstance(err, InternalCompilerError), msg
    assert re.search(pattern, msg), f"{pattern!r} not in {msg!r}"
    assert "fuzz_kernel" in msg or re.search(r"argument '\w+'", msg), \
        f"names neither the kernel nor the parameter: {msg}"
    assert torch.isnan(out.float()).all(), "the kernel ran (partly) before the error"

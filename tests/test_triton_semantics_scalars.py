"""Tiles of every dtype with run-time scalars and Python literals, against Triton 3.6 itself.

tests/data/triton36_scalar_matrix.json holds Triton's answers (result dtype and values, or
its error) for `+ - * / // % & >> < ==`, kit.maximum and kit.where between a tile of each of
the 13 dtypes and a run-time scalar argument (int 3, int 2**40, float 2.5) or a literal
written in the expression (3, 3000000000, -2, 2.5, 2**70);
tests/data/gen_triton36_scalar_matrix.py ran them in Triton 3.6.0's interpreter (bf16 rows
keep the dtype only; rows its interpreter cannot run, a bool argument and bf16 with a
literal, are left out). One kernel per (tile dtype, scalar) computes every operator Triton
computes there; what Triton refuses kitjit must refuse too, each checked alone, but for the
known differences in KITJIT_COMPUTES.
"""

from __future__ import annotations

import linecache
import math

import pytest
import torch
from kitjit.frontend.errors import CompileError
from triton_tables import KIT_NAME, NAMES, TORCH, load_table

import kitjit as kit
from kitjit.testing import has_gpu

TABLE = load_table("triton36_scalar_matrix.json")
KIT = KIT_NAME
OPS = {"add": "a + b", "sub": "a - b", "mul": "a * b", "div": "a / b", "fdiv": "a // b",
       "mod": "a % b", "and": "a & b", "shr": "a >> b", "lt": "a < b", "eq": "a == b",
       "max": "kit.maximum(a, b)", "where": "kit.where(a > 0, a, b)"}
SCALARS = {"s_i": 3, "s_i64": 2**40, "s_f": 2.5}
LITERALS = {"il_i": "3", "il_big": "3000000000", "il_neg": "-2", "il_f": "2.5",
            "il_huge": "2**70"}
RHS = list(SCALARS) + list(LITERALS)


def values(name: str) -> torch.Tensor:
    """The generator's tile operand."""
    if name == "i1":
        return torch.tensor([True, False, True, True])
    if name in ("fp16", "bf16", "fp32", "fp64"):
        return torch.tensor([1.5, -2.25, 3.0, 0.5], dtype=torch.float64).to(TORCH[name])
    v = [7, 3, 200, 1] if name[0] == "u" else [7, -3, 100, 1]
    return torch.tensor(v, dtype=torch.int32).to(TORCH[name])


def _expr(op: str, rhs: str) -> str:
    e = OPS[op]
    if rhs in LITERALS:
        e = e[:e.rindex("b")] + LITERALS[rhs] + e[e.rindex("b") + 1:]
    return e


def _source(name: str, body: list[str]) -> object:
    src = "\n".join(["def kern(A, s, Z):", "    a = kit.load(A + kit.arange(0, 4))",
                     "    b = s"] + body) + "\n"
    path = f"<triton-scalars {name}>"
    linecache.cache[path] = (len(src), None, src.splitlines(True), path)
    ns = {"kit": kit}
    exec(compile(src, path, "exec"), ns)
    return kit.jit(ns["kern"])


_KERNELS: dict = {}


def _rows(x: str, rhs: str) -> list[tuple[str, dict]]:
    return [(op, TABLE[k]) for op in OPS
            if (k := f"{op}|{x}|{rhs}") in TABLE and "error" not in TABLE[k]]


def _check(x: str, rhs: str, device: str) -> list[str]:
    rows = _rows(x, rhs)
    if (x, rhs) not in _KERNELS:
        body = []
        for i, (op, want) in enumerate(rows):
            body += [f"    z = {_expr(op, rhs)}",
                     f"    kit.static_assert(z.dtype == kit.{KIT[want['dtype']]}, "
                     f"'{op}: Triton gives {want['dtype']}')",
                     f"    kit.store(Z + {4 * i} + kit.arange(0, 4), z.to(kit.float64))"]
        _KERNELS[(x, rhs)] = _source(f"{x} {rhs}", body)
    z = torch.full((4 * len(rows),), math.nan, dtype=torch.float64, device=device)
    _KERNELS[(x, rhs)][(1,)](values(x).to(device), SCALARS.get(rhs, 1), z)
    bad = []
    for (op, want), g in zip(rows, z.cpu().view(-1, 4).tolist()):
        if "z" in want and not all(
                (w is None and math.isnan(v)) or (w is not None and (
                    v == w or abs(v - w) <= 1e-6 * abs(w))) for v, w in zip(g, want["z"])):
            bad.append(f"{op}|{x}|{rhs}: kitjit {g} != Triton's {want['z']}")
    return bad


@pytest.mark.parametrize("x", NAMES)
def test_as_triton_interpreter(x):
    bad = [b for rhs in RHS for b in _check(x, rhs, "cpu")]
    assert not bad, "\n".join(bad)


# Triton refuses these and kitjit computes them (known differences): / // % of ints of mixed
# signedness or of int1 ("Cannot use /, #, or % with ..."), // on floats ("unexpected type")
KITJIT_COMPUTES = ("Cannot use /, #, or %", "unexpected type fp")
REFUSED = sorted(k for k, w in TABLE.items() if "error" in w and
                 not any(m in w["error"] for m in KITJIT_COMPUTES))


@pytest.mark.parametrize("key", REFUSED)
def test_refused_as_triton(key):
    op, x, rhs = key.split("|")
    k = _source(f"refused {key}", [f"    z = {_expr(op, rhs)}"])
    with pytest.raises(CompileError):
        k[(1,)](values(x), SCALARS.get(rhs, 1), torch.empty(4, dtype=torch.float64))


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
def test_as_triton_gpu():
    bad = [b for x in NAMES for rhs in RHS for b in _check(x, rhs, "cuda")]
    assert not bad, "\n".join(bad)


@kit.jit
def _shr_u64(X, s, Z, BLOCK: kit.constexpr):
    i = kit.arange(0, BLOCK)
    kit.store(Z + i, kit.load(X + i) >> s)


def test_wide_shift_amount_reaches_the_gpu_whole():
    """u64 >> an i64 amount of 2**40 is 0 (the interpreter's rule): NVPTX folds the
    out-of-range select into PTX's shr but passes it only the amount's low 32 bits (2**40
    read as 0: x unchanged on an H200), so the lowering clamps the amount in 64 bits first."""
    ck = _shr_u64.compile([("*u64", 16), ("i64", 1), ("*u64", 16)], (128,), 4, "sm_90a")
    ptx = ck.asm["ptx"]
    assert "setp.lt.u64" in ptx and "min.u64" in ptx, ptx

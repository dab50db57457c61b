"""Every binary operator between tiles of every pair of dtypes, against Triton 3.6 itself.

tests/data/triton36_binary_matrix.json holds Triton's answers for `+ - * / // % & | ^ << >>`,
the six comparisons, kit.maximum/minimum and kit.where over the 13x13 pairs of int1, int8..64,
uint8..64, fp16, bf16, fp32 and fp64 tiles (tests/data/gen_triton36_binary_matrix.py ran
them in Triton 3.6.0's interpreter; bf16 rows keep the dtype only; a signed tile shifted
right by an unsigned one holds Triton's GPU answer, its interpreter keeps the signed bits).
To stay fast, one kernel per dtype pair computes every operator Triton computes for it.

Known differences, checked as such: `+` and `<<` on two int1 tiles (int1 in both, but
Triton's interpreter and GPU disagree on the values: numpy's bool + is or, the GPU's i1 add
is xor, and 1 << 1 is the int 2 in the interpreter, poison on the GPU; kitjit gives the GPU's
xor and a & ~b, test_bool_arithmetic_as_tritons_gpu); operations
Triton refuses that kitjit computes (`/ // %` of ints of mixed signedness or with int1,
`//` on floats).
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

TABLE = load_table("triton36_binary_matrix.json")
KIT = KIT_NAME
OPS = {"add": "a + b", "sub": "a - b", "mul": "a * b", "div": "a / b", "fdiv": "a // b",
       "mod": "a % b", "and": "a & b", "or": "a | b", "xor": "a ^ b", "shl": "a << b",
       "shr": "a >> b", "lt": "a < b", "le": "a <= b", "gt": "a > b", "ge": "a >= b",
       "eq": "a == b", "ne": "a != b", "max": "kit.maximum(a, b)",
       "min": "kit.minimum(a, b)", "where": "kit.where(a > 0, a, b)"}
# int1 with int1: the dtype is int1 as Triton's, the values its GPU code's where its
# interpreter differs (sub is an error row: numpy refuses bool -)
KNOWN_BOOL = {"add", "shl"}


def values(name: str, side: str) -> torch.Tensor:
    """The generator's operands."""
    if name == "i1":
        return torch.tensor([True, False, True, True] if side == "a" else
                            [True, True, False, True])
    if name in ("fp16", "bf16", "fp32", "fp64"):
        v = [1.5, -2.25, 3.0, 0.5] if side == "a" else [2.0, 0.75, -1.5, 4.0]
        return torch.tensor(v, dtype=torch.float64).to(TORCH[name])
    v = [2, 3, 1, 5] if side == "b" else [7, 3, 200, 1] if name[0] == "u" else [7, -3, 100, 1]
    return torch.tensor(v, dtype=torch.int32).to(TORCH[name])


def _rows(x: str, y: str) -> list[tuple[str, dict]]:
    """The pair's operators that Triton computes, less the known differences."""
    out = []
    for op in OPS:
        want = TABLE[f"{op}|{x}|{y}"]
        if "error" in want or x == y == "i1" and op in KNOWN_BOOL:
            continue
        out.append((op, want))
    return out


_KERNELS: dict = {}


def _pair_kernel(x: str, y: str):
    """One kernel computing every row of the pair: each result's dtype is asserted at
    compile time, its values stored as float64 in row i of Z."""
    if (x, y) not in _KERNELS:
        lines = ["def kern(A, B, Z):",
                 "    a = kit.load(A + kit.arange(0, 4))",
                 "    b = kit.load(B + kit.arange(0, 4))"]
        for i, (op, want) in enumerate(_rows(x, y)):
            lines += [f"    z = {OPS[op]}",
                      f"    kit.static_assert(z.dtype == kit.{KIT[want['dtype']]}, "
                      f"'{op}: Triton gives {want['dtype']}')",
                      f"    kit.store(Z + {4 * i} + kit.arange(0, 4), z.to(kit.float64))"]
        src = "\n".join(lines) + "\n"
        path = f"<triton-matrix {x} {y}>"
        linecache.cache[path] = (len(src), None, src.splitlines(True), path)
        ns = {"kit": kit}
        exec(compile(src, path, "exec"), ns)
        _KERNELS[(x, y)] = kit.jit(ns["kern"])
    return _KERNELS[(x, y)]


def _check_pair(x: str, y: str, device: str) -> list[str]:
    rows = _rows(x, y)
    z = torch.full((4 * len(rows),), math.nan, dtype=torch.float64, device=device)
    _pair_kernel(x, y)[(1,)](values(x, "a").to(device), values(y, "b").to(device), z)
    got = z.cpu().view(-1, 4).tolist()
    # an integer // or % by zero is undefined on the GPU (Triton's interpreter, which made
    # the table, gives numpy's 0): not compared there
    ints = not any(n.startswith(("fp", "bf", "f8")) for n in (x, y))
    zero = [v == 0 for v in values(y, "b").tolist()]
    bad = []
    for (op, want), g in zip(rows, got):
        if device != "cpu" and ints and op in ("fdiv", "mod") and "z" in want:
            want = {"z": [None if zb else w for w, zb in zip(want["z"], zero)]}
            g = [math.nan if zb else v for v, zb in zip(g, zero)]
        if "z" in want and not all(
                (w is None and math.isnan(v)) or (w is not None and (
                    v == w or abs(v - w) <= 1e-6 * abs(w))) for v, w in zip(g, want["z"])):
            bad.append(f"{op}|{x}|{y}: kitjit {g} != Triton's {want['z']}")
    return bad


@pytest.mark.parametrize("x", NAMES)
def test_as_triton_interpreter(x):
    bad = [b for y in NAMES for b in _check_pair(x, y, "cpu")]
    assert not bad, "\n".join(bad)


# a sample of what Triton refuses (bitwise ops and shifts on floats): kitjit refuses too
REFUSED = [k for k, w in TABLE.items() if "error" in w and k.split("|")[0] in
           ("and", "shl") and k.split("|")[1] in ("fp16", "i32") and
           k.split("|")[2] in ("fp32", "i8", "bf16")]


@pytest.mark.parametrize("key", REFUSED)
def test_refused_as_triton(key):
    op, x, y = key.split("|")
    src = (f"def kern(A, B):\n    a = kit.load(A + kit.arange(0, 4))\n"
           f"    b = kit.load(B + kit.arange(0, 4))\n    z = {OPS[op]}\n")
    path = f"<triton-matrix refused {key}>"
    linecache.cache[path] = (len(src), None, src.splitlines(True), path)
    ns = {"kit": kit}
    exec(compile(src, path, "exec"), ns)
    with pytest.raises(CompileError):
        kit.jit(ns["kern"])[(1,)](values(x, "a"), values(y, "b"))


# int1 with int1 as Triton's GPU code computes it (LLVM i1: one bit that wraps), for
# a = [1, 0, 1, 1], b = [1, 1, 0, 1]; where that code is undefined (b == 0 for // and %,
# b == 1 for shifts) kitjit's choice, the value Triton's interpreter gives as a bool
BOOL_GPU = {"add": [0, 1, 1, 0], "sub": [0, 1, 1, 0], "mul": [1, 0, 0, 1],
            "fdiv": [1, 0, 0, 1], "mod": [0, 0, 0, 0], "shl": [0, 0, 1, 0],
            "shr": [0, 0, 1, 0]}


def _bool_kernel():
    lines = ["def kern(A, B, Z, S):", "    a = kit.load(A + kit.arange(0, 4))",
             "    b = kit.load(B + kit.arange(0, 4))"]
    for i, op in enumerate(BOOL_GPU):
        lines += [f"    z = {OPS[op]}", "    kit.static_assert(z.dtype == kit.int1)",
                  f"    kit.store(Z + {4 * i} + kit.arange(0, 4), z.to(kit.int32))"]
    lines += ["    s = kit.sum(a, 0)", "    kit.static_assert(s.dtype == kit.uint32)",
              "    x = kit.xor_sum(a, 0)", "    kit.static_assert(x.dtype == kit.int1)",
              "    m = kit.max(a, 0)", "    kit.static_assert(m.dtype == kit.int32)",
              "    kit.store(S + kit.arange(0, 4), kit.where(kit.arange(0, 4) == 0, "
              "s.to(kit.int32), kit.where(kit.arange(0, 4) == 1, x.to(kit.int32), "
              "m.to(kit.int32))))"]
    src = "\n".join(lines) + "\n"
    path = "<triton-matrix bool gpu>"
    linecache.cache[path] = (len(src), None, src.splitlines(True), path)
    ns = {"kit": kit}
    exec(compile(src, path, "exec"), ns)
    return kit.jit(ns["kern"])


def _check_bool(device: str) -> None:
    z = torch.full((4 * len(BOOL_GPU),), -7, dtype=torch.int32, device=device)
    s = torch.full((4,), -7, dtype=torch.int32, device=device)
    _bool_kernel()[(1,)](values("i1", "a").to(device), values("i1", "b").to(device), z, s)
    got = dict(zip(BOOL_GPU, z.cpu().view(-1, 4).tolist()))
    assert got == BOOL_GPU
    assert s.cpu().tolist() == [3, 1, 1, 1]  # sum (Triton: uint32), xor_sum (int1), max


def test_bool_arithmetic_as_tritons_gpu():
    _check_bool("cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
def test_bool_arithmetic_as_tritons_gpu_on_gpu():
    _check_bool("cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
def test_as_triton_gpu():
    bad = [b for x in NAMES for y in NAMES for b in _check_pair(x, y, "cuda")]
    assert not bad, "\n".join(bad)

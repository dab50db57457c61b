"""Type promotion and values against Triton 3.6 itself, not against our reading of it.

tests/data/triton36_semantics.json holds Triton's answers (result dtype and values, or the
error it raises) for binary operators, tl.maximum and tl.where between tiles of every dtype,
inline literals (`x + 3`), numbers assigned to a name (`b = 3; x + b`: a to_tensor scalar in
Triton), and run-time scalar arguments. They were produced by running the kernels below in
Triton 3.6.0's interpreter (TRITON_INTERPRET=1 on CPU tensors: its type rules are the
compiler's semantic.py); bf16 rows keep only the dtype (Triton's interpreter computes bf16
arithmetic wrongly). Here the same kernels run in kitjit's interpreter (and with -m gpu on
the GPU) and must give the same dtype and values, or raise where Triton raises.

Known differences, not in the table: arithmetic on two bool tiles (int1 in both; the values
are Triton's GPU code's, tests/test_triton_semantics_matrix.py); a bool assigned to a name
next to bf16 (Triton: fp32); operations Triton refuses that kitjit computes (`/` of ints of
mixed signedness, `//` on floats).
"""

from __future__ import annotations

import json
import linecache
import math
import os

import pytest
import torch

import kitjit as kit
from kitjit.testing import has_gpu

TABLE = json.load(open(os.path.join(os.path.dirname(__file__), "data",
                                    "triton36_semantics.json")))
TABLE.pop("_about")

DT = {"i8": torch.int8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64,
      "u8": torch.uint8, "u32": torch.uint32, "f16": torch.float16, "bf16": torch.bfloat16,
      "f32": torch.float32, "f64": torch.float64, "b": torch.bool}
OPS = {"add": "a + b", "sub": "a - b", "mul": "a * b", "div": "a / b", "fdiv": "a // b",
       "mod": "a % b", "and": "a & b", "or": "a | b", "xor": "a ^ b", "shl": "a << b",
       "shr": "a >> b", "lt": "a < b", "eq": "a == b", "max": "kit.maximum(a, b)",
       "where": "kit.where(a > 0, a, b)"}
LITERALS = {"i": "3", "f": "2.5", "big": "3000000000", "neg": "-2", "bool": "True"}
NAMES = {"i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "u8": "u8",
         "u32": "u32", "fp16": "fp16", "bf16": "bf16", "fp32": "fp32", "fp64": "fp64"}


def _values(name: str) -> torch.Tensor:
    dt = DT[name]
    if dt == torch.bool:
        return torch.tensor([True, False, True, True])
    if dt.is_floating_point:
        return torch.tensor([1.5, -2.25, 3.0, 0.5], dtype=dt)
    return torch.tensor([7, 3, 200, 1] if name.startswith("u") else [7, -3, 100, 1], dtype=dt)


_KERNELS: dict = {}


def _kernel(op: str, rhs: str):
    """The kernel of one table row: `b` is a tile, a run-time scalar `s`, an assigned number
    (`lit_*`) or, for `il_*`, the literal written inline in the expression."""
    key = (op, rhs)
    if key in _KERNELS:
        return _KERNELS[key]
    expr = OPS[op]
    if rhs.startswith("il_"):
        lit = LITERALS[rhs[3:]]
        expr = expr[:expr.rindex("b")] + lit + expr[expr.rindex("b") + 1:]
        bload = "pass"
    elif rhs.startswith("lit_"):
        bload = f"b = {LITERALS[rhs[4:]]}"
    elif rhs.startswith("s_"):
        bload = "b = s"
    else:
        bload = "b = kit.load(B + kit.arange(0, 4))"
    src = (f"def kern(A, B, Z, s, DT: kit.constexpr):\n"
           f"    a = kit.load(A + kit.arange(0, 4))\n"
           f"    {bload}\n"
           f"    z = {expr}\n"
           f"    kit.static_assert(z.dtype == DT, 'result dtype')\n"
           f"    kit.store(Z + kit.arange(0, 4), z.to(kit.float64))\n")
    path = f"<triton-semantics {op} {rhs}>"
    linecache.cache[path] = (len(src), None, src.splitlines(True), path)
    ns = {"kit": kit}
    exec(compile(src, path, "exec"), ns)
    _KERNELS[key] = kit.jit(ns["kern"])
    return _KERNELS[key]


def _dtype(name: str):
    return {"i1": kit.int1, "i8": kit.int8, "i16": kit.int16, "i32": kit.int32,
            "i64": kit.int64, "u8": kit.uint8, "u32": kit.uint32, "fp16": kit.float16,
            "bf16": kit.bfloat16, "fp32": kit.float32, "fp64": kit.float64}[name]


def _check(key: str, want: dict, device: str) -> None:
    op, lhs, rhs = key.split("|")
    a = _values(lhs).to(device)
    b = _values(rhs).to(device) if rhs in DT else a
    s = 2.5 if rhs == "s_f32" else 3
    z = torch.full((4,), float("nan"), dtype=torch.float64, device=device)
    k = _kernel(op, rhs)
    if "error" in want:
        from kitjit.frontend.errors import CompileError
        with pytest.raises(CompileError, match=want["error"]):
            k[(1,)](a, b, z, s, DT=kit.int32)
        return
    try:
        k[(1,)](a, b, z, s, DT=_dtype(want["dtype"]))
    except Exception as e:
        raise AssertionError(f"{key}: Triton gives {want['dtype']}: {e}") from None
    if "z" in want:
        got = z.cpu().tolist()
        for g, w in zip(got, want["z"]):
            assert (w is None and math.isnan(g)) or (w is not None and (
                g == w or abs(g - w) <= 1e-6 * abs(w))), f"{key}: {got} != Triton's {want['z']}"


@pytest.mark.parametrize("op", sorted({k.split("|")[0] for k in TABLE}))
def test_as_triton_interpreter(op):
    for key, want in TABLE.items():
        if key.startswith(op + "|"):
            _check(key, want, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
def test_as_triton_gpu():
    for key, want in TABLE.items():
        _check(key, want, "cuda")

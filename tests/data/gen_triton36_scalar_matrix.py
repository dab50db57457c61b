"""Regenerate tests/data/triton36_scalar_matrix.json from Triton 3.6.0 itself (not run by CI).

    PYTHONPATH=/work/triton-ref TRITON_INTERPRET=1 python tests/data/gen_triton36_scalar_matrix.py

Operators between a tile of each of the 13 dtypes and a run-time scalar argument (int 3,
int 2**40, float 2.5) or a Python literal written in the expression (3,
3000000000, -2, 2.5, 2**70): the result dtype and values (as float64), or the error Triton
raises. bf16 rows keep the dtype only (Triton's interpreter computes bf16 wrongly).
"""

from __future__ import annotations

import json
import math
import os
import sys

import torch
import triton
import triton.language as tl

NAMES = ["i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "fp16", "bf16", "fp32",
         "fp64"]
TORCH = {"i1": torch.bool, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32,
         "i64": torch.int64, "u8": torch.uint8, "u16": torch.uint16, "u32": torch.uint32,
         "u64": torch.uint64, "fp16": torch.float16, "bf16": torch.bfloat16,
         "fp32": torch.float32, "fp64": torch.float64}
OPS = {"add": "a + b", "sub": "a - b", "mul": "a * b", "div": "a / b", "fdiv": "a // b",
       "mod": "a % b", "and": "a & b", "shr": "a >> b", "lt": "a < b", "eq": "a == b",
       "max": "tl.maximum(a, b)", "where": "tl.where(a > 0, a, b)"}
# run-time scalar arguments and inline literals
SCALARS = {"s_i": 3, "s_i64": 2**40, "s_f": 2.5}
LITERALS = {"il_i": "3", "il_big": "3000000000", "il_neg": "-2", "il_f": "2.5",
            "il_huge": "2**70"}
# failures of Triton's interpreter, not Triton's rules (its compiler takes these): a bool
# argument ("numpy data itemsize (32 bits) exceeds ..."), bf16 with a literal; left out
INTERPRETER_FAILS = ("exceeds dtype primitive", "'InterpreterBuilder' object")
DTNAME = {"int1": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
          "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "fp16": "fp16",
          "bf16": "bf16", "fp32": "fp32", "fp64": "fp64"}


def values(name: str) -> torch.Tensor:
    """The tile operand (kept in sync with tests/test_triton_semantics_scalars.py)."""
    if name == "i1":
        return torch.tensor([True, False, True, True])
    if name in ("fp16", "bf16", "fp32", "fp64"):
        return torch.tensor([1.5, -2.25, 3.0, 0.5], dtype=torch.float64).to(TORCH[name])
    v = [7, 3, 200, 1] if name[0] == "u" else [7, -3, 100, 1]
    return torch.tensor(v, dtype=torch.int32).to(TORCH[name])


SEEN: list = []


def record(x) -> None:
    SEEN.append(str(x))


def kernel(op: str, rhs: str, cache: dict = {}):  # noqa: B006 (a memo)
    if (op, rhs) not in cache:
        expr = OPS[op]
        if rhs in LITERALS:
            expr = expr[:expr.rindex("b")] + LITERALS[rhs] + expr[expr.rindex("b") + 1:]
        src = ("def kern(A, s, Z):\n"
               "    a = tl.load(A + tl.arange(0, 4))\n"
               "    b = s\n"
               f"    z = {expr}\n"
               "    record(z.dtype)\n"
               "    tl.store(Z + tl.arange(0, 4), z.to(tl.float64))\n")
        path = f"/tmp/triton36_scalars_{op}_{rhs}.py"  # triton.jit reads the source
        with open(path, "w") as f:
            f.write(src)
        ns = {"tl": tl, "record": record}
        exec(compile(src, path, "exec"), ns)
        cache[(op, rhs)] = triton.jit(ns["kern"])
    return cache[(op, rhs)]


def main(path: str) -> None:
    table: dict = {"_about": "Triton 3.6.0's answers, see gen_triton36_scalar_matrix.py"}
    for op in OPS:
        for x in NAMES:
            for rhs in list(SCALARS) + list(LITERALS):
                SEEN.clear()
                z = torch.full((4,), math.nan, dtype=torch.float64)
                try:
                    kernel(op, rhs)[(1,)](values(x), SCALARS.get(rhs, 1), z)
                except Exception as e:
                    msg = str(e).strip().splitlines()
                    msg = (msg[-1] if msg else "")[:60]
                    if not any(m in msg for m in INTERPRETER_FAILS):
                        table[f"{op}|{x}|{rhs}"] = {"error": msg}
                    continue
                dt = DTNAME[SEEN[-1].replace("triton.language.", "")]
                row: dict = {"dtype": dt}
                if "bf16" not in (x, dt):
                    row["z"] = [None if math.isnan(v) else v for v in z.tolist()]
                table[f"{op}|{x}|{rhs}"] = row
    with open(path, "w") as f:  # a row a line
        f.write("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(table[k])}"
                                    for k in sorted(table)) + "\n}\n")
    print(len(table) - 1, "rows")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else
         os.path.join(os.path.dirname(__file__), "triton36_scalar_matrix.json"))

"""Regenerate tests/data/triton36_binary_matrix.json from Triton 3.6.0 itself (not run by CI).

    PYTHONPATH=/work/triton-ref TRITON_INTERPRET=1 python tests/data/gen_triton36_binary_matrix.py

Every binary operator, tl.maximum/minimum and tl.where between tiles of every pair of the 13
dtypes: the result dtype and values (as float64), or the error Triton raises. bf16 rows keep
the dtype only (Triton's interpreter computes bf16 wrongly). Rows where Triton's interpreter
differs from its GPU code hold the GPU's answer, marked "gpu": a signed tile shifted right by
an unsigned one (the result is unsigned; the interpreter kept the signed bits, -1 where the
GPU's unsigned result reads 255).
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
       "mod": "a % b", "and": "a & b", "or": "a | b", "xor": "a ^ b", "shl": "a << b",
       "shr": "a >> b", "lt": "a < b", "le": "a <= b", "gt": "a > b", "ge": "a >= b",
       "eq": "a == b", "ne": "a != b", "max": "tl.maximum(a, b)", "min": "tl.minimum(a, b)",
       "where": "tl.where(a > 0, a, b)"}
DTNAME = {"int1": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
          "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "fp16": "fp16",
          "bf16": "bf16", "fp32": "fp32", "fp64": "fp64"}


def values(name: str, side: str) -> torch.Tensor:
    """The operands (kept in sync with tests/test_triton_semantics_matrix.py)."""
    if name == "i1":
        return torch.tensor([True, False, True, True] if side == "a" else
                            [True, True, False, True])
    if name in ("fp16", "bf16", "fp32", "fp64"):
        v = [1.5, -2.25, 3.0, 0.5] if side == "a" else [2.0, 0.75, -1.5, 4.0]
        return torch.tensor(v, dtype=torch.float64).to(TORCH[name])
    v = [2, 3, 1, 5] if side == "b" else [7, 3, 200, 1] if name[0] == "u" else [7, -3, 100, 1]
    return torch.tensor(v, dtype=torch.int32).to(TORCH[name])


SEEN: list = []


def record(x) -> None:
    SEEN.append(str(x))


def kernel(op: str, cache: dict = {}):  # noqa: B006 (a memo)
    if op not in cache:
        src = ("def kern(A, B, Z):\n"
               "    a = tl.load(A + tl.arange(0, 4))\n"
               "    b = tl.load(B + tl.arange(0, 4))\n"
               f"    z = {OPS[op]}\n"
               "    record(z.dtype)\n"
               "    tl.store(Z + tl.arange(0, 4), z.to(tl.float64))\n")
        path = f"/tmp/triton36_matrix_{op}.py"  # triton.jit reads the source from a file
        with open(path, "w") as f:
            f.write(src)
        ns = {"tl": tl, "record": record}
        exec(compile(src, path, "exec"), ns)
        cache[op] = triton.jit(ns["kern"])
    return cache[op]


def main(path: str) -> None:
    table: dict = {"_about": "Triton 3.6.0's answers, see gen_triton36_binary_matrix.py"}
    for op in OPS:
        for x in NAMES:
            for y in NAMES:
                SEEN.clear()
                z = torch.full((4,), math.nan, dtype=torch.float64)
                try:
                    kernel(op)[(1,)](values(x, "a"), values(y, "b"), z)
                except Exception as e:
                    msg = str(e).strip().splitlines()
                    table[f"{op}|{x}|{y}"] = {"error": (msg[-1] if msg else "")[:60]}
                    continue
                dt = DTNAME[SEEN[-1].replace("triton.language.", "")]
                row: dict = {"dtype": dt}
                if "bf16" not in (x, y, dt):
                    row["z"] = [None if math.isnan(v) else v for v in z.tolist()]
                if op == "shr" and x[0] == "i" and dt[0] == "u":
                    bits = int(dt[1:])
                    row.update(gpu=True, z=[v % 2**bits for v in row["z"]])
                table[f"{op}|{x}|{y}"] = row
    with open(path, "w") as f:  # a row a line
        f.write("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(table[k])}"
                                    for k in sorted(table)) + "\n}\n")
    print(len(table) - 1, "rows")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else
         os.path.join(os.path.dirname(__file__), "triton36_binary_matrix.json"))

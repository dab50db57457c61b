"""Regenerate tests/data/triton36_unary_casts.json from Triton 3.6.0 itself (not run by CI).

    pip install --no-deps --target /work/triton-ref triton-3.6.0-cp311-*.whl
    PYTHONPATH=/work/triton-ref TRITON_INTERPRET=1 python tests/data/gen_triton36_unary_casts.py

Each row runs one kernel in Triton's interpreter (its type rules are the compiler's
semantic.py) and records the result dtype and the result's bits, or the error Triton raises.
Float -> integer conversions of NaN, inf and out-of-range values are undefined in LLVM and
Triton's interpreter (numpy's astype) and GPU disagree there; those rows hold what Triton's
GPU code does (PTX read from triton.compile for sm_90a: cvt.rzi to the destination, or to 16
bits and the low byte for 8-bit destinations; cvt.rzi saturates and makes NaN 0), marked
"gpu": true.
"""

from __future__ import annotations

import json
import math
import os
import sys

import numpy as np
import torch
import triton
import triton.language as tl

N = 8
TL = {"i1": tl.int1, "i8": tl.int8, "i16": tl.int16, "i32": tl.int32, "i64": tl.int64,
      "u8": tl.uint8, "u16": tl.uint16, "u32": tl.uint32, "u64": tl.uint64,
      "fp16": tl.float16, "bf16": tl.bfloat16, "fp32": tl.float32, "fp64": tl.float64}
TORCH = {"i1": torch.bool, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32,
         "i64": torch.int64, "u8": torch.uint8, "u16": torch.uint16, "u32": torch.uint32,
         "u64": torch.uint64, "fp16": torch.float16, "bf16": torch.bfloat16,
         "fp32": torch.float32, "fp64": torch.float64}
BITS = {"i1": 8, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "u8": 8, "u16": 16, "u32": 32,
        "u64": 64, "fp16": 16, "bf16": 16, "fp32": 32, "fp64": 64}
UINT = {8: torch.uint8, 16: torch.int16, 32: torch.int32, 64: torch.int64}
# the inputs of every row: kept in sync with tests/test_triton_semantics_casts.py
INTS = {"i8": [0, 1, -1, 100, -100, 127, -128, 50],
        "i16": [0, 1, -1, 200, -300, 32767, -32768, 1000],
        "i32": [0, 1, -1, 200, -300, 2**31 - 1, -2**31, 70000],
        "i64": [0, 1, -1, 200, -300, 2**63 - 1, -2**63, 2**40 + 3],
        "u8": [0, 1, 255, 200, 100, 128, 127, 3],
        "u16": [0, 1, 65535, 200, 300, 32768, 1000, 3],
        "u32": [0, 1, 2**32 - 1, 200, 300, 2**31, 70000, 3],
        "u64": [0, 1, 2**64 - 1, 200, 300, 2**63, 2**40 + 3, 3],
        "i1": [1, 0, 1, 0, 1, 1, 0, 0]}
FLOATS = [1.5, -2.75, 300.7, -200.5, math.nan, math.inf, -math.inf, 3e9]
ROUNDING = [1 / 3, -0.1, 65519.0, 65520.0, 1e-8, -1e-40, math.nan, 1e300]


def inputs(name: str, values=None) -> torch.Tensor:
    if name in INTS:
        a = np.array([v % 2**64 for v in INTS[name]], dtype=np.uint64)
        t = torch.from_numpy(a.view(np.int64).copy())
        return t.to(torch.bool) if name == "i1" else t.to(UINT[BITS[name]]).view(TORCH[name]) \
            if BITS[name] < 64 else t.view(TORCH[name])
    return torch.tensor(values or FLOATS, dtype=torch.float64).to(TORCH[name])


def bits(t: torch.Tensor, name: str) -> list[int]:
    if name == "i1":
        return [int(v) for v in t.tolist()]
    u = t.view(UINT[BITS[name]]).to(torch.int64).tolist()
    return [v % 2**BITS[name] for v in u]


SEEN: list = []


def record(x):
    SEEN.append(x)


@triton.jit
def k_unary(A, Z, OP: tl.constexpr):
    a = tl.load(A + tl.arange(0, 8))
    if OP == "neg":
        z = -a
    elif OP == "inv":
        z = ~a
    else:
        z = tl.abs(a)
    record(z.dtype)
    tl.store(Z + tl.arange(0, 8), z)


@triton.jit
def k_to(A, Z, DST: tl.constexpr, BITCAST: tl.constexpr, RND: tl.constexpr):
    a = tl.load(A + tl.arange(0, 8))
    if RND == "":
        z = a.to(DST, bitcast=BITCAST)
    else:
        z = a.to(DST, fp_downcast_rounding=RND)
    record(z.dtype)
    tl.store(Z + tl.arange(0, 8), z)


@triton.jit
def k_minmax(A, B, Z, OP: tl.constexpr):
    a = tl.load(A + tl.arange(0, 8))
    b = tl.load(B + tl.arange(0, 8))
    if OP == "min":
        z = tl.minimum(a, b)
    else:
        z = tl.maximum(a, b)
    record(z.dtype)
    tl.store(Z + tl.arange(0, 8), z)


def tl_name(dt) -> str:
    return {v: k for k, v in TL.items()}[dt]


def run(kernel, args: list, out: str | None = None, **kw) -> dict:
    """One row: the kernel's result dtype and bits (a first run learns the dtype)."""
    SEEN.clear()
    try:
        z = torch.zeros(N, dtype=TORCH[out or "fp64"])
        kernel[(1,)](*args, z, **kw)
    except Exception as e:  # Triton's own refusal: keep its message's last line
        msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        return {"error": msg[:160]}
    dt = tl_name(SEEN[-1])
    if out != dt:
        return run(kernel, args, dt, **kw)
    return {"dtype": dt, "bits": bits(z, dt)}


def gpu_f2i(x: float, dst: str) -> int:
    """Triton's GPU float -> int (cvt.rzi, to 16 bits for 8-bit destinations)."""
    b = 16 if BITS[dst] == 8 else BITS[dst]
    lo, hi = (0, 2**b - 1) if dst.startswith("u") else (-2**(b - 1), 2**(b - 1) - 1)
    v = 0 if math.isnan(x) else min(max(math.trunc(x) if math.isfinite(x) else
                                        (hi if x > 0 else lo), lo), hi)
    return v % 2**BITS[dst]


def torch_bits(key: str) -> list[int]:
    """A bf16 row's values from torch (IEEE, round to nearest even; rtz by dropping the low
    16 bits of the fp32 value): Triton's interpreter keeps bf16 as raw 16-bit integers and
    computes wrong values (int64 -> bf16 wrapped, -x of 1.5 was -3.0)."""
    parts = key.split("|")
    if parts[0] == "un":
        x = inputs(parts[2]).float()
        y = {"neg": -x, "abs": x.abs()}[parts[1]].to(torch.bfloat16)
        return bits(y, "bf16")
    s, d = parts[1], parts[2]
    if parts[0] == "rd" and parts[3] == "rtz":
        return rtz_bits(s, d)
    x = inputs(s, ROUNDING if parts[0] == "rd" else None)
    if d == "bf16":
        return bits(x.to(torch.float64).to(torch.bfloat16)
                    if x.dtype.is_floating_point else x.to(torch.bfloat16), "bf16")
    if d == "i1" or d.startswith("fp"):
        return bits(x.to(TORCH[d]), d)
    return [gpu_f2i(v, d) for v in x.to(torch.float64).tolist()]


def rtz_bits(s: str, d: str) -> list[int]:
    """x.to(d, fp_downcast_rounding="rtz") as PTX's cvt.rz does: the nearest value toward
    zero (a finite value never becomes inf). Triton's interpreter is wrong on subnormals
    and overflow (fp32 -1e-40 to fp16 gave -5.4e-6)."""
    out = []
    for x in inputs(s, ROUNDING).to(torch.float64).tolist():
        if math.isnan(x):
            out.append(bits(torch.tensor([x]).to(TORCH[d]), d)[0])
            continue
        r = torch.tensor([x], dtype=torch.float64).to(TORCH[d])
        if math.isinf(r.item()) and not math.isinf(x) or abs(r.item()) > abs(x):
            u = bits(r, d)[0]  # one step toward zero: the magnitude's bits less one
            out.append(u - 1)
        else:
            out.append(bits(r, d)[0])
    return out


def gpu_minmax(key: str, row: dict) -> None:
    """tl.minimum/maximum of floats (propagate_nan=NONE) are minnum/maxnum on the GPU: the
    non-NaN operand wins. Triton's interpreter (np.minimum) returns the NaN."""
    _, op, s, t = key.split("|")
    d = row["dtype"]
    if not d.startswith("fp"):
        return
    a = inputs(s).to(torch.float64).numpy()
    b = inputs(t).to(torch.float64).numpy()[::-1]
    z = (np.fmin if op == "min" else np.fmax)(a, b)
    want = bits(torch.from_numpy(z.copy()).to(TORCH[d]), d)
    if want != row["bits"]:
        row.update(bits=want, gpu=True)


def interpreter_gaps(table: dict) -> None:
    """Rows where Triton's interpreter is wrong and its compiler is not: bf16 values (see
    torch_bits), `~x` of unsigned ints (the interpreter's all-ones constant -1 overflows
    numpy's uint; the compiler XORs with all ones), `-x` of int1 (numpy refuses; the
    compiler subtracts in int1, so -x is x)."""
    for key, row in table.items():
        if key.startswith("_") or "error" in row:
            continue
        if "bf16" in key.split("|")[1:3] or row["dtype"] == "bf16":
            if key.startswith(("un|", "to|", "rd|")) and not key.startswith("to|bf16|bf16"):
                row.update(bits=torch_bits(key), torch=True)
    for key, row in table.items():
        if key.startswith("mm|") and "bits" in row:
            gpu_minmax(key, row)
        if key.startswith("rd|") and key.endswith("rtz") and "bits" in row:
            want = rtz_bits(*key.split("|")[1:3])
            if want != row["bits"]:
                row.update(bits=want, gpu=True)
            if key.startswith("rd|fp64"):
                row["note"] = "Triton's compiler fails on fp64 rtz (ConvertTritonGPUToLLVM)"
    for s in ("u8", "u16", "u32", "u64"):
        table[f"un|inv|{s}"] = {"dtype": s, "gpu": True, "bits": [
            (~v) % 2**BITS[s] for v in INTS[s]]}
    table["un|neg|i1"] = {"dtype": "i1", "gpu": True, "bits": INTS["i1"]}


def main(path: str) -> None:
    table: dict = {"_about": "Triton 3.6.0's answers, see gen_triton36_unary_casts.py"}
    names = list(TL)
    for op in ("neg", "inv", "abs"):
        for s in names:
            table[f"un|{op}|{s}"] = run(k_unary, [inputs(s)], OP=op)
    for s in names:
        for d in names:
            row = run(k_to, [inputs(s)], DST=TL[d], BITCAST=False, RND="")
            if s.startswith(("fp", "bf")) and d[0] in "iu" and d != "i1" and "bits" in row:
                xs = inputs(s).to(torch.float64).tolist()
                gpu = [gpu_f2i(x, d) for x in xs]
                if gpu != row["bits"]:
                    row = {"dtype": d, "bits": gpu, "gpu": True}
            table[f"to|{s}|{d}"] = row
            if BITS[s] == BITS[d] and s != d and "i1" not in (s, d):
                table[f"bc|{s}|{d}"] = run(k_to, [inputs(s)], DST=TL[d], BITCAST=True, RND="")
    for s in ("fp32", "fp64"):
        for d in ("fp16", "bf16", "fp32"):
            if BITS[d] < BITS[s]:
                for rnd in ("rtne", "rtz"):
                    table[f"rd|{s}|{d}|{rnd}"] = run(
                        k_to, [inputs(s, ROUNDING)], DST=TL[d], BITCAST=False, RND=rnd)
    for op in ("min", "max"):
        for s, t in (("fp32", "fp32"), ("fp16", "fp16"), ("fp64", "fp32"), ("i32", "u32"),
                     ("i8", "u8"), ("i64", "i64"), ("u64", "u64"), ("i16", "fp16")):
            b = torch.from_numpy(inputs(t).numpy()[::-1].copy())
            table[f"mm|{op}|{s}|{t}"] = run(k_minmax, [inputs(s), b], OP=op)
    interpreter_gaps(table)
    with open(path, "w") as f:
        json.dump(table, f, indent=0, sort_keys=True)
    print(len(table) - 1, "rows")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else
         os.path.join(os.path.dirname(__file__), "triton36_unary_casts.json"))

"""Unary operators, conversions and minimum/maximum against Triton 3.6 itself.

tests/data/triton36_unary_casts.json holds Triton's answers (result dtype and the result's
bits, or the error Triton raises) for `-x`, `~x`, `kit.abs(x)` and `x.to(dtype)` (plain,
`bitcast=True`, `fp_downcast_rounding=`) over every dtype pair, and tl.minimum/maximum with
NaN and mixed signedness. tests/data/gen_triton36_unary_casts.py made it by running Triton
3.6.0's interpreter; rows marked "gpu" hold what Triton's GPU code computes where its
interpreter differs (float -> int of NaN/inf/out-of-range: cvt.rzi, to 16 bits and the low
byte for 8-bit ints; `~` of unsigned ints; `-` of int1), rows marked "torch" hold torch's
bf16 values where Triton's interpreter computes bf16 wrongly. Here the same kernels run in
kitjit's interpreter (and with -m gpu on the GPU) and must give the same dtype and bits (any
NaN matches any NaN), or raise where Triton raises.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from triton_tables import KIT, TORCH, load_table

import kitjit as kit
from kitjit.testing import has_gpu

TABLE = load_table("triton36_unary_casts.json")

BITS = {"i1": 8, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "u8": 8, "u16": 16, "u32": 32,
        "u64": 64, "fp16": 16, "bf16": 16, "fp32": 32, "fp64": 64}
UINT = {8: torch.uint8, 16: torch.int16, 32: torch.int32, 64: torch.int64}
# the generator's inputs (tests/data/gen_triton36_unary_casts.py)
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
        if name == "i1":
            return t.to(torch.bool)
        return t.to(UINT[BITS[name]]).view(TORCH[name]) if BITS[name] < 64 else \
            t.view(TORCH[name])
    return torch.tensor(values or FLOATS, dtype=torch.float64).to(TORCH[name])


def bits(t: torch.Tensor, name: str) -> list[int]:
    t = t.cpu()
    if name == "i1":
        return [int(v) for v in t.tolist()]
    return [v % 2**BITS[name] for v in t.view(UINT[BITS[name]]).to(torch.int64).tolist()]


def _is_nan(b: int, name: str) -> bool:
    e, m = {"fp16": (0x7C00, 0x3FF), "bf16": (0x7F80, 0x7F), "fp32": (0x7F800000, 0x7FFFFF),
            "fp64": (0x7FF0000000000000, 0xFFFFFFFFFFFFF)}[name]
    return b & e == e and b & m != 0


@kit.jit
def k_unary(A, Z, OP: kit.constexpr, DT: kit.constexpr):
    a = kit.load(A + kit.arange(0, 8))
    if OP == "neg":
        z = -a
    elif OP == "inv":
        z = ~a
    else:
        z = kit.abs(a)
    kit.static_assert(z.dtype == DT, "result dtype")
    kit.store(Z + kit.arange(0, 8), z)


@kit.jit
def k_to(A, Z, DST: kit.constexpr, BITCAST: kit.constexpr, RND: kit.constexpr,
         DT: kit.constexpr):
    a = kit.load(A + kit.arange(0, 8))
    if RND == "":
        z = a.to(DST, bitcast=BITCAST)
    else:
        z = a.to(DST, fp_downcast_rounding=RND)
    kit.static_assert(z.dtype == DT, "result dtype")
    kit.store(Z + kit.arange(0, 8), z)


@kit.jit
def k_minmax(A, B, Z, OP: kit.constexpr, DT: kit.constexpr):
    a = kit.load(A + kit.arange(0, 8))
    b = kit.load(B + kit.arange(0, 8))
    if OP == "min":
        z = kit.minimum(a, b)
    else:
        z = kit.maximum(a, b)
    kit.static_assert(z.dtype == DT, "result dtype")
    kit.store(Z + kit.arange(0, 8), z)


def _launch(key: str, want: dict, device: str):
    p = key.split("|")
    dt = want.get("dtype", "i32")
    z = torch.zeros(8, dtype=TORCH[dt], device=device)
    if p[0] == "un":
        k_unary[(1,)](inputs(p[2]).to(device), z, OP=p[1], DT=KIT[dt])
    elif p[0] == "mm":
        b = torch.from_numpy(inputs(p[3]).numpy()[::-1].copy())
        k_minmax[(1,)](inputs(p[2]).to(device), b.to(device), z, OP=p[1], DT=KIT[dt])
    else:
        x = inputs(p[1], ROUNDING if p[0] == "rd" else None).to(device)
        k_to[(1,)](x, z, DST=KIT[p[2]], BITCAST=p[0] == "bc", RND=p[3] if p[0] == "rd" else "",
                   DT=KIT[dt])
    return z


def _check(key: str, want: dict, device: str) -> str | None:
    """The row's difference from Triton, or None."""
    try:
        z = _launch(key, want, device)
    except Exception as e:
        if "error" in want:
            return None
        return f"{key}: Triton gives {want['dtype']} {want['bits']}; kitjit raises {e}"
    if "error" in want:
        return f"{key}: Triton raises {want['error']}; kitjit computes"
    dt = want["dtype"]
    got = bits(z, dt)
    same = [g == w or dt.startswith(("fp", "bf")) and _is_nan(g, dt) and _is_nan(w, dt)
            for g, w in zip(got, want["bits"])]
    return None if all(same) else f"{key}: kitjit {got} != Triton's {want['bits']}"


FAMILIES = sorted({"|".join(k.split("|")[:2]) for k in TABLE})


@pytest.mark.parametrize("family", FAMILIES)
def test_as_triton_interpreter(family):
    bad = [d for k, w in TABLE.items() if k.startswith(family + "|")
           if (d := _check(k, w, "cpu"))]
    assert not bad, "\n".join(bad)


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
def test_as_triton_gpu():
    bad = [d for k, w in TABLE.items() if (d := _check(k, w, "cuda"))]
    assert not bad, "\n".join(bad)


@kit.jit
def k_to_every(A, Z1, Z8, Z16, Z32, Z64, U8, U16, U32, U64, H, BH, F, D):
    o = kit.arange(0, 128)
    a = kit.load(A + o)
    kit.store(Z1 + o, a.to(kit.int1))
    kit.store(Z8 + o, a.to(kit.int8))
    kit.store(Z16 + o, a.to(kit.int16))
    kit.store(Z32 + o, a.to(kit.int32))
    kit.store(Z64 + o, a.to(kit.int64))
    kit.store(U8 + o, a.to(kit.uint8))
    kit.store(U16 + o, a.to(kit.uint16))
    kit.store(U32 + o, a.to(kit.uint32))
    kit.store(U64 + o, a.to(kit.uint64))
    kit.store(H + o, a.to(kit.float16))
    kit.store(BH + o, a.to(kit.bfloat16))
    kit.store(F + o, a.to(kit.float32))
    kit.store(D + o, a.to(kit.float64))


def test_every_conversion_lowers_for_sm90a():
    """Every table's conversion compiles for sm_90a; float -> 8-bit ints take Triton's
    instruction (cvt.rzi to 16 bits, the low byte kept)."""
    outs = ["*i1", "*i8", "*i16", "*i32", "*i64", "*u8", "*u16", "*u32", "*u64", "*fp16",
            "*bf16", "*fp32", "*fp64"]
    for src in outs:
        ck = kit.compile_aot(__file__, "k_to_every", [src] + outs, {}, 4, "sm_90a")
        if src in ("*fp32", "*fp64"):  # (fp16 converts through fp32: the same values)
            ptx = ck.asm["ptx"]
            s = src[1:].replace("fp", "f")
            assert f"cvt.rzi.s16.{s}" in ptx and f"cvt.rzi.u16.{s}" in ptx, src


@pytest.mark.parametrize("kind", ["un", "rd", "mm"])
def test_table_kernels_lower_for_sm90a(kind):
    """The unary, rounding and min/max rows' kernels compile for sm_90a."""
    for key, want in TABLE.items():
        p = key.split("|")
        if p[0] != kind or "error" in want:
            continue
        dt = KIT[want["dtype"]]
        if kind == "un":
            kit.compile_aot(__file__, "k_unary", [f"*{p[2]}", f"*{want['dtype']}"],
                            {"OP": p[1], "DT": dt}, 4, "sm_90a")
        elif kind == "rd":
            kit.compile_aot(__file__, "k_to", [f"*{p[1]}", f"*{p[2]}"],
                            {"DST": KIT[p[2]], "BITCAST": False, "RND": p[3], "DT": dt}, 4,
                            "sm_90a")
        else:
            kit.compile_aot(__file__, "k_minmax", [f"*{p[2]}", f"*{p[3]}",
                                                   f"*{want['dtype']}"],
                            {"OP": p[1], "DT": dt}, 4, "sm_90a")

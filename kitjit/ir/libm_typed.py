"""libdevice functions whose operand or result types are not one float type (Triton's
libdevice names): the integer functions (clz, popc, brev, byte_perm, mulhi, mul24, sad,
hadd, rhadd, ffs), the conversions with an explicit rounding mode (float2int_rn, ...,
ull2double_ru), llrint/llround/ilogb, the double <-> int-halves ones and rcp64h.

Each is a `math` op whose `fn` is a key of `TYPED`; its overloads are Triton 3.6's
(triton/language/extra/cuda/libdevice.py), operand dtypes matched exactly as Triton does
(a Python int is int32, or uint32/int64 where it does not fit), result dtypes included:
Triton types the unsigned conversions float2uint_*/double2uint_* as int32 and
float2ull_*/double2ull_* as int64 (the bits are the unsigned result's), and so does kitjit.
The backend calls `symbol`; the interpreter (kitjit/interpreter/libm_typed.py) gives the
GPU's bits for every one of them but rcp64h (rcp.approx.ftz.f64, which reads only the top
20 mantissa bits: relative error ~2**-19; the GPU test allows 2**-18).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sig:
    args: tuple[str, ...]   # operand dtype names (kitjit's: "i32", "u32", "fp32", ...)
    ret: str                # result dtype name
    symbol: str             # the libdevice function


_MODES = ("rn", "rz", "rd", "ru")


def _sigs(*rows: tuple) -> tuple[Sig, ...]:
    return tuple(Sig(tuple(a), r, s) for a, r, s in rows)


TYPED: dict[str, tuple[Sig, ...]] = {
    "clz": _sigs((["i32"], "i32", "__nv_clz"), (["i64"], "i32", "__nv_clzll")),
    "popc": _sigs((["i32"], "i32", "__nv_popc"), (["i64"], "i32", "__nv_popcll")),
    "ffs": _sigs((["i32"], "i32", "__nv_ffs"), (["i64"], "i32", "__nv_ffsll")),
    "brev": _sigs((["i32"], "i32", "__nv_brev"), (["i64"], "i64", "__nv_brevll")),
    "byte_perm": _sigs((["i32"] * 3, "i32", "__nv_byte_perm")),
    "mulhi": _sigs((["i32", "i32"], "i32", "__nv_mulhi"), (["u32", "u32"], "u32", "__nv_umulhi"),
                   (["i64", "i64"], "i64", "__nv_mul64hi"),
                   (["u64", "u64"], "u64", "__nv_umul64hi")),
    "mul24": _sigs((["i32", "i32"], "i32", "__nv_mul24"), (["u32", "u32"], "u32", "__nv_umul24")),
    "sad": _sigs((["i32", "i32", "u32"], "i32", "__nv_sad"),
                 (["u32", "u32", "u32"], "u32", "__nv_usad")),
    "hadd": _sigs((["i32", "i32"], "i32", "__nv_hadd"), (["u32", "u32"], "u32", "__nv_uhadd")),
    "rhadd": _sigs((["i32", "i32"], "i32", "__nv_rhadd"),
                   (["u32", "u32"], "u32", "__nv_urhadd")),
    "llrint": _sigs((["fp32"], "i64", "__nv_llrintf"), (["fp64"], "i64", "__nv_llrint")),
    "llround": _sigs((["fp32"], "i64", "__nv_llroundf"), (["fp64"], "i64", "__nv_llround")),
    "ilogb": _sigs((["fp32"], "i32", "__nv_ilogbf"), (["fp64"], "i32", "__nv_ilogb")),
    "hiloint2double": _sigs((["i32", "i32"], "fp64", "__nv_hiloint2double")),
    "double2loint": _sigs((["fp64"], "i32", "__nv_double2loint")),
    "double2hiint": _sigs((["fp64"], "i32", "__nv_double2hiint")),
    "rcp64h": _sigs((["fp64"], "fp64", "__nv_rcp64h")),
    "int2double_rn": _sigs((["i32"], "fp64", "__nv_int2double_rn")),
    "uint2double_rn": _sigs((["u32"], "fp64", "__nv_uint2double_rn")),
}

# name -> (source dtype, the C type's signedness/width for the value, Triton's result dtype)
_CONV = {
    "double2float": ("fp64", "fp32", "fp32"), "double2int": ("fp64", "i32", "i32"),
    "double2uint": ("fp64", "u32", "i32"), "float2int": ("fp32", "i32", "i32"),
    "float2uint": ("fp32", "u32", "i32"), "int2float": ("i32", "fp32", "fp32"),
    "uint2float": ("u32", "fp32", "fp32"), "float2ll": ("fp32", "i64", "i64"),
    "float2ull": ("fp32", "u64", "i64"), "double2ll": ("fp64", "i64", "i64"),
    "double2ull": ("fp64", "u64", "i64"), "ll2float": ("i64", "fp32", "fp32"),
    "ull2float": ("u64", "fp32", "fp32"), "ll2double": ("i64", "fp64", "fp64"),
    "ull2double": ("u64", "fp64", "fp64"),
}
# what a conversion computes: name -> (source, destination as C sees it, rounding mode)
CONVERSIONS: dict[str, tuple[str, str, str]] = {
    "int2double_rn": ("i32", "fp64", "rn"), "uint2double_rn": ("u32", "fp64", "rn"),
}
for _base, (_src, _dst, _ret) in _CONV.items():
    for _m in _MODES:
        TYPED[f"{_base}_{_m}"] = _sigs(([_src], _ret, f"__nv_{_base}_{_m}"))
        CONVERSIONS[f"{_base}_{_m}"] = (_src, _dst, _m)


def signature(name: str, args: tuple[str, ...]) -> Sig | None:
    """The overload of `name` for operand dtypes `args` (names), or None."""
    return next((s for s in TYPED[name] if s.args == args), None)

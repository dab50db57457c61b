"""What a compiled kernel's metadata says, and assembling it: the specialization as text,
argument kinds, TMA records, the checks a cache hit runs on meta.json (split from jit.py)."""

from __future__ import annotations

from typing import Any

from .ir.types import dtype_from_name


def _assemble(ptx: str, target, name: str):
    """ptx_to_cubin for `target` (a `kitjit.toolchain.Target`), with the assembler failures
    a user can act on said as CompileErrors: kit.setmaxnreg budgets too small for what a
    role's code holds live, and no assembler installed that can build the kernel. For a GPU
    newer than kitjit knows the PTX itself is shipped (the driver compiles it at load), after
    assembling it for sm_90 once to check it and read its resource use."""
    import re

    from kitjit.backend.compiler import AssemblerMissing, ptx_to_cubin
    from kitjit.frontend.errors import CompileError

    try:
        cubin, res = ptx_to_cubin(ptx, target.ptx_arch, name)
    except AssemblerMissing as e:
        raise CompileError(str(e), hint="install ptxas: pip install 'kitjit[cu13]' (or "
                           "'kitjit[cu12]' for a CUDA 12 driver)") from None
    except RuntimeError as e:
        m = re.search(r"Insufficient registers \((\d+)\)[^\n]*?(\d+) or higher", str(e))
        if m is None:
            raise
        ctas = re.search(r"\.minnctapersm\s+(\d+)", ptx)
        raise CompileError(
            f"kernel '{name}' needs at least {m.group(2)} registers per thread where it has "
            f"{m.group(1)}: the kit.setmaxnreg budgets are too small for what the code keeps "
            f"live" + (f" ({ctas.group(1)} CTAs per SM were planned from them)" if ctas
                       and ctas.group(1) != "1" else ""),
            hint="raise the kit.setmaxnreg counts, or use smaller tiles") from None
    if target.driver_jit:  # cuModuleLoadData takes NUL-terminated PTX as well as a cubin
        res.extra["assembler"] = f"driver JIT (compute_{target.ptx_arch[3:]} PTX)"
        return ptx.encode() + b"\0", res
    return cubin, res


# What a cache hit reads from meta.json, with the types it needs.
_META_TYPES: dict[str, type | tuple[type, ...]] = {
    "name": str, "num_warps": int, "arch": str, "shared": int, "registers": int,
    "spills": int, "arg_kinds": list, "tma": list}


def _meta_problem(meta: dict) -> str | None:
    """Why `meta` (a cache entry's meta.json) cannot describe a kernel, or None."""
    for field, ty in _META_TYPES.items():
        v = meta.get(field)
        if not isinstance(v, ty) or isinstance(v, bool):
            return f"'{field}' is {type(v).__name__}, expected {getattr(ty, '__name__', ty)}"
    if not all(isinstance(k, str) for k in meta["arg_kinds"]):
        return "'arg_kinds' holds a non-string"
    for t in meta["tma"]:
        if not (isinstance(t, dict) and isinstance(t.get("param"), int)
                and isinstance(t.get("box"), list) and len(t["box"]) == 2
                and all(isinstance(b, int) for b in t["box"])
                and isinstance(t.get("swizzle"), int) and isinstance(t.get("dtype"), str)
                and t.get("l2", 256) in (0, 64, 128, 256)):
            return "a 'tma' record is malformed"
    return None


def _tma_meta(param: int, entry: dict) -> dict:
    """What the launcher needs to build one TMA descriptor: the box is one column chunk of
    the shared tile (the swizzle span), as the layout pass lays it out."""
    from .ir.layouts import shared_layout

    lay = shared_layout(tuple(entry["box"]), dtype_from_name(entry["dtype"]))
    meta = {"param": param, "box": [entry["box"][0], lay.chunk], "swizzle": lay.swizzle,
            "dtype": entry["dtype"]}
    if entry.get("host"):  # a host TensorDescriptor argument, not a tensor
        meta["desc"] = True
    if entry.get("rank") == 3:  # a (batch, rows, cols) tensor, a box of one batch entry
        meta["batched"] = True
    if entry.get("l2", 256) != 256:  # kit.tma_load(..., l2_promotion=): the L2 request size
        meta["l2"] = entry["l2"]
    if "kind" in entry:  # "rows": a row descriptor, below sm_90 (kitjit/runtime/ampere.py)
        meta["kind"] = entry["kind"]
    return meta


def _spec_text(specs: list, consts: tuple, jf: Any) -> str:
    """`X=*fp32, n=i32, BLOCK=128`: one specialization, short, for log records."""
    parts = [f"{n}={_spec_str(s)}" for n, s in zip(jf.runtime_params, specs)]
    parts += [f"{n}={_const_repr(v)}" for n, v in zip(jf.constexprs, consts)]
    return ", ".join(parts)


def _spec_str(s) -> str:
    """One argument's specialization as text: `*fp32`, `i32`, `1`, `tensordesc<fp16[64, 64]>`."""
    if s[0] == "const":
        return repr(s[1])
    if s[0] == "desc":
        return f"tensordesc<{s[1]}{list(s[3])}>"
    return s[0]


def _kind(spec) -> str:
    if spec[0] == "const":
        return "const"
    if spec[0] == "desc":
        return f"desc{spec[2]}"
    if spec[0].startswith("*"):
        return "ptr"
    return spec[0]


def _const_repr(v) -> Any:
    if isinstance(v, (int, float, bool, str)) or v is None:
        return v
    return repr(v)

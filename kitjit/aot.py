"""`kit.compile_aot`: a kernel from a file compiled for a target without a GPU (what
`kitjit compile` runs), left in the on-disk cache."""

from __future__ import annotations

from .ir.types import dtype_from_name
from .jit import CompiledKernel, JITFunction


def compile_aot(path: str, kernel_name: str, signature: list[str], constexprs: dict,
                num_warps: int = 4, arch: str = "sm_90a",
                maxnreg: int | None = None) -> CompiledKernel:
    """Compile a kernel from a file for `arch` without a GPU and leave it in the cache.

    `signature`: one entry per run-time parameter, in order, optionally `name:type`; types
    are '*bf16', 'i32', 'fp32', 'i1', ...; ':16' after a type promises 16-divisibility
    (alignment for pointers), as Triton writes it.
    """
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_kitjit_aot_{abs(hash(path))}", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    jf = getattr(mod, kernel_name, None)
    if not isinstance(jf, JITFunction):
        raise ValueError(f"{path} has no @kit.jit function named '{kernel_name}'")
    if len(signature) != len(jf.runtime_params):
        raise ValueError(f"{kernel_name} has {len(jf.runtime_params)} run-time parameters "
                         f"({', '.join(jf.runtime_params)}), the signature gives "
                         f"{len(signature)}")
    specs = []
    for name, entry in zip(jf.runtime_params, signature):
        parts = entry.strip().split(":")
        if parts[0] in jf.runtime_params:
            if parts[0] != name:
                raise ValueError(f"signature entry '{entry}' is for '{parts[0]}', expected "
                                 f"'{name}' at that place")
            parts = parts[1:]
        if not parts or len(parts) > 2 or (len(parts) == 2 and parts[1] not in ("1", "16")):
            raise ValueError(f"bad signature entry '{entry}' (write *bf16, i32:16, n:i32)")
        try:
            dtype_from_name(parts[0])
        except KeyError:
            raise ValueError(f"unknown type '{parts[0]}' for '{name}' (use *bf16, i32, fp32, "
                             "...)") from None
        specs.append((parts[0], 16 if len(parts) == 2 and parts[1] == "16" else 1))
    import inspect

    defaults = {n: p.default for n, p in inspect.signature(jf.fn).parameters.items()
                if p.default is not p.empty}
    constexprs = {**{c: defaults[c] for c in jf.constexprs if c in defaults}, **constexprs}
    missing = [c for c in jf.constexprs if c not in constexprs]
    if missing:
        raise ValueError(f"missing constexpr values: {', '.join(missing)}")
    consts = tuple(constexprs[c] for c in jf.constexprs)
    return jf.compile(specs, consts, num_warps, arch, maxnreg=maxnreg)

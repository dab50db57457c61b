"""CUDA's libdevice (libdevice.10.bc): found on disk and linked into a kernel's LLVM module
when its lowering calls a `__nv_*` function (kitjit/ir/libm.py says which do).

The bitcode ships in the `nvidia-cuda-nvcc` wheel (nvidia/cu13/nvvm/libdevice or
nvidia/cuda_nvcc/nvvm/libdevice) and in a CUDA toolkit. After linking, every libdevice
definition becomes internal, so the O3 pipeline inlines what the kernel calls and drops the
rest (the PTX holds no `.func`); the NVPTX target's pass pipeline runs NVVMReflect, which
folds libdevice's `__nvvm_reflect("__CUDA_FTZ")` to 0 (no module flag: denormals kept) and
`__CUDA_ARCH` to the target's.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os

HINT = "pip install nvidia-cuda-nvcc (it ships nvvm/libdevice/libdevice.10.bc)"


def _candidates() -> list[str]:
    out = []
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    for root in (list(spec.submodule_search_locations or []) if spec else []):
        out += sorted(glob.glob(os.path.join(root, "*", "nvvm", "libdevice", "libdevice*.bc")))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            out += sorted(glob.glob(os.path.join(os.environ[var], "nvvm", "libdevice",
                                                 "libdevice*.bc")))
    out += sorted(glob.glob("/usr/local/cuda/nvvm/libdevice/libdevice*.bc"))
    return out


@functools.cache
def find_libdevice() -> str | None:
    """The path of libdevice.10.bc (KITJIT_LIBDEVICE overrides), or None."""
    env = os.environ.get("KITJIT_LIBDEVICE")
    if env and os.path.isfile(env):
        return env
    found = _candidates()
    return found[0] if found else None


@functools.cache
def _bitcode() -> bytes:
    path = find_libdevice()
    if path is None:
        raise FileNotFoundError
    with open(path, "rb") as f:
        return f.read()


def needs_libdevice(llir: str) -> bool:
    return "@__nv_" in llir or "@\"__nv_" in llir


def link(mod, llvm) -> None:
    """Link libdevice into the parsed module `mod` and internalize its definitions.
    Raises CompileError when libdevice cannot be found."""
    try:
        bc = _bitcode()
    except FileNotFoundError:
        from kitjit.frontend.errors import CompileError

        wanted = sorted({f.name for f in mod.functions
                         if f.is_declaration and f.name.startswith("__nv_")})
        raise CompileError(f"this kernel calls libdevice ({', '.join(wanted)}) but "
                           "libdevice.10.bc was not found", hint=HINT) from None
    lib = llvm.parse_bitcode(bc)
    lib.triple = mod.triple
    lib.data_layout = mod.data_layout
    ours = {f.name for f in mod.functions if not f.is_declaration}
    mod.link_in(lib)
    for f in mod.functions:
        if not f.is_declaration and f.name not in ours:
            f.linkage = "internal"

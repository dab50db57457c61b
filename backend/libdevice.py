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


@functools.cache
def _subset(names: frozenset[str]) -> bytes:
    """libdevice cut down to `names` and what they call (bitcode, memoized per set): parsing
    and linking all of it cost ~0.3 s per kernel, the cut one a few ms. The O3 pipeline
    would drop the rest after linking anyway, so the PTX is the same."""
    llvm = _llvm()
    lib = llvm.parse_bitcode(_bitcode())
    for f in lib.functions:
        if not f.is_declaration and f.name not in names:
            f.linkage = "internal"
    pm = llvm.create_new_module_pass_manager()
    pm.add_global_dead_code_eliminate_pass()
    pm.run(lib, llvm.create_pass_builder(_tm(), llvm.create_pipeline_tuning_options()))
    return lib.as_bitcode()


def _llvm():
    from .compiler import _llvm as init

    return init()


def _tm():
    llvm = _llvm()
    return llvm.Target.from_triple("nvptx64-nvidia-cuda").create_target_machine()


def link(mod, llvm) -> None:
    """Link libdevice (the functions `mod` calls) into the parsed module `mod` and
    internalize its definitions. Raises CompileError when libdevice cannot be found."""
    wanted = frozenset(f.name for f in mod.functions
                       if f.is_declaration and f.name.startswith("__nv_"))
    try:
        bc = _subset(wanted)
    except FileNotFoundError:
        from kitjit.frontend.errors import CompileError

        raise CompileError(f"this kernel calls libdevice ({', '.join(sorted(wanted))}) but "
                           "libdevice.10.bc was not found", hint=HINT) from None
    lib = llvm.parse_bitcode(bc)
    lib.triple = mod.triple
    lib.data_layout = mod.data_layout
    ours = {f.name for f in mod.functions if not f.is_declaration}
    mod.link_in(lib)
    for f in mod.functions:
        if not f.is_declaration and f.name not in ours:
            f.linkage = "internal"

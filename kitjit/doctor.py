"""What decides how kitjit compiles and runs on this machine (`kitjit doctor`): driver,
GPUs, torch, llvmlite, nvJitLink, ptxas and the disassemblers, the cache. Probes never
raise: a fact that cannot be read is reported as such."""

from __future__ import annotations

import os
import sys
from typing import Any

from kitjit.cache import KernelCache


def _kitjit_version() -> str:
    from kitjit import __kitjit_version__

    return str(__kitjit_version__)



def _probe(thunk) -> Any:
    """thunk(), or 'error: ...' (doctor never fails on what it inspects)."""
    try:
        return thunk()
    except Exception as e:  # noqa: BLE001 - a broken install is a fact to print
        return f"error: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e) else ''}"


def _doctor_driver() -> dict[str, Any]:
    from kitjit.runtime import driver

    if not driver.available():
        return {"available": False, "reason": driver.unavailable_reason()}
    import ctypes

    v = ctypes.c_int(0)
    lib = driver._load()
    version = None
    if hasattr(lib, "cuDriverGetVersion") and lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
        version = f"{v.value // 1000}.{v.value % 1000 // 10}"
    return {"available": True, "cuda_version": version}


def _doctor_gpus() -> list[dict[str, Any]]:
    import torch

    from kitjit.toolchain import SUPPORTED_ARCHS, compute_capability

    out = []
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        major, minor = torch.cuda.get_device_capability(i)
        arch = f"sm_{major}{minor}{'a' if major >= 9 else ''}"
        cc = compute_capability(arch)
        support = ("supported" if arch in SUPPORTED_ARCHS else
                   "newer than kitjit knows: compute_90 PTX, JIT-compiled by the driver"
                   if cc and cc > (9, 0) else "not supported (kitjit needs sm_80 or newer)")
        out.append({"index": i, "name": torch.cuda.get_device_name(i), "arch": arch,
                    "kitjit": support})
    return out


def _doctor_tool(name: str) -> dict[str, Any]:
    from kitjit.tools import find_ptxas, find_tool, ptxas_version

    path = find_ptxas() if name == "ptxas" else find_tool(name)
    rec: dict[str, Any] = {"path": path}
    if name == "ptxas":
        rec["version"] = ptxas_version(path) if path else None
        if path is None:
            from kitjit.tools import PTXAS_HINT

            rec["note"] = f"kernels with kit.setmaxnreg cannot compile: {PTXAS_HINT}"
    return rec


def doctor_report(cache_dir: str | None = None) -> dict[str, Any]:
    """Everything that decides how kitjit compiles and runs here, as a dict of facts."""
    import platform

    def torch_info() -> dict[str, Any]:
        import torch

        return {"version": torch.__version__, "cuda": torch.version.cuda,
                "cuda_available": torch.cuda.is_available()}

    def llvmlite_info() -> dict[str, Any]:
        import llvmlite

        return {"version": llvmlite.__version__}

    def nvjitlink_info() -> dict[str, Any]:
        from kitjit.backend.compiler import nvjitlink_version

        v = nvjitlink_version()
        return {"version": None if v == "none" else v}

    def toolchain_info() -> dict[str, Any]:
        from kitjit import toolchain

        return {"supported_archs": list(toolchain.SUPPORTED_ARCHS),
                "compiler_source_hash": toolchain.compiler_source_hash()[:16],
                "assemblers": toolchain.assembler_fingerprint()}

    def cache_info() -> dict[str, Any]:
        from kitjit.cache import disk_cache_enabled

        st = KernelCache(cache_dir).stats()
        return {**st, "enabled": disk_cache_enabled()}

    return {
        "kitjit": _kitjit_version(),
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "driver": _probe(_doctor_driver),
        "gpus": _probe(_doctor_gpus),
        "torch": _probe(torch_info),
        "llvmlite": _probe(llvmlite_info),
        "nvjitlink": _probe(nvjitlink_info),
        "ptxas": _probe(lambda: _doctor_tool("ptxas")),
        "cuobjdump": _probe(lambda: _doctor_tool("cuobjdump")),
        "nvdisasm": _probe(lambda: _doctor_tool("nvdisasm")),
        "toolchain": _probe(toolchain_info),
        "cache": _probe(cache_info),
        "interpret": os.environ.get("KITJIT_INTERPRET", ""),
    }



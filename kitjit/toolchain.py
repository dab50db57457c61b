"""What builds a kernel, for the cache key and for the checks made before LLVM is asked.

- :func:`compiler_source_hash`: one hash of every ``.py`` of kitjit's own compiler
  (``kitjit/``, ``frontend/``, ``backend/``), read once per process, so a cached cubin built
  by other compiler code is never served.
- :func:`assembler_fingerprint`: nvJitLink's version and the ptxas kitjit would use (its
  version), since either can build the cubin.
- :func:`resolve_target`: the targets kitjit generates code for. llvmlite's NVPTX backend
  aborts the whole process on a target its PTX version does not support (``LLVM ERROR: PTX
  version 7.8 does not support target``: no exception can catch it), so every target is
  checked here first and anything else is a :class:`CompileError` naming the supported ones.
  A GPU newer than kitjit knows (compute capability above 9.0) seen at launch runs
  compute_90 PTX that the driver JITs, with one notice.
"""

from __future__ import annotations

import hashlib
import logging
import pathlib
import re
import time
import warnings
from dataclasses import dataclass

__all__ = ["SUPPORTED_ARCHS", "FALLBACK_PTX_ARCH", "SM90A_ONLY_OPS", "Target",
           "ArchFallbackWarning", "compiler_source_hash", "assembler_fingerprint",
           "resolve_target", "check_target_ops"]

logger = logging.getLogger("kitjit.toolchain")

#: The targets kitjit generates and tests code for.
SUPPORTED_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
#: What a GPU newer than kitjit knows runs: compute_90 PTX, JIT-compiled by the driver.
FALLBACK_PTX_ARCH = "sm_90"
#: Tile-IR ops whose PTX only sm_90a has (no compute_90 PTX can hold them).
SM90A_ONLY_OPS = frozenset({"wgmma", "setmaxnreg"})

_ARCH_RE = re.compile(r"^sm_(\d+)(\d)([af]?)$")


class ArchFallbackWarning(UserWarning):
    """A GPU newer than kitjit knows runs kernels from compute_90 PTX (said once per arch)."""


# --------------------------------------------------------------------------- source hash

_source_hash: str | None = None
#: Seconds the one-time hash took in this process (None until computed).
source_hash_seconds: float | None = None


def _compiler_roots() -> list[pathlib.Path]:
    import kitjit

    roots = [pathlib.Path(kitjit.__file__).resolve().parent]
    for sub in ("frontend", "backend"):
        try:
            mod = __import__(f"kitjit.{sub}", fromlist=["_"])
        except ImportError:
            continue
        roots += [pathlib.Path(p).resolve() for p in getattr(mod, "__path__", [])]
    return roots


def compiler_source_files() -> list[tuple[str, pathlib.Path]]:
    """(name, path) of every .py under kitjit/, frontend/ and backend/, sorted by name."""
    seen: dict[pathlib.Path, str] = {}
    for root in _compiler_roots():
        for p in root.rglob("*.py"):
            if "__pycache__" in p.parts:
                continue
            rp = p.resolve()
            seen.setdefault(rp, f"{root.name}/{p.relative_to(root).as_posix()}")
    return sorted(((name, p) for p, name in seen.items()), key=lambda t: t[0])


def compiler_source_hash() -> str:
    """sha256 over the names and bytes of kitjit's compiler sources: computed once per
    process (a few ms; ``source_hash_seconds`` records it), then memoized."""
    global _source_hash, source_hash_seconds
    if _source_hash is None:
        t0 = time.perf_counter()
        h = hashlib.sha256()
        for name, path in compiler_source_files():
            data = path.read_bytes()
            h.update(f"{name}\0{len(data)}\0".encode())
            h.update(data)
        _source_hash = h.hexdigest()
        source_hash_seconds = time.perf_counter() - t0
    return _source_hash


# --------------------------------------------------------------------------- assembler

_assembler_fp: str | None = None


def assembler_fingerprint() -> str:
    """The assemblers that may build a cubin here, with their versions (memoized)."""
    global _assembler_fp
    if _assembler_fp is None:
        from kitjit.backend.compiler import nvjitlink_version
        from kitjit.tools import find_ptxas, ptxas_version

        exe = find_ptxas()
        _assembler_fp = (f"nvjitlink={nvjitlink_version()};"
                         f"ptxas={ptxas_version(exe) if exe else 'none'}")
    return _assembler_fp


# --------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Target:
    """`arch` as asked for; `ptx_arch` what LLVM generates PTX for; `driver_jit`: ship the
    PTX for the driver to compile (a GPU newer than kitjit knows)."""

    arch: str
    ptx_arch: str
    driver_jit: bool = False


def compute_capability(arch: str) -> tuple[int, int] | None:
    """(major, minor) of 'sm_90a' -> (9, 0); None for a string that is no sm_XY[a|f]."""
    m = _ARCH_RE.match(arch) if isinstance(arch, str) else None
    return (int(m.group(1)), int(m.group(2))) if m else None


_noticed: set[str] = set()


def resolve_target(arch: str, device_fallback: bool = False) -> Target:
    """The target to compile `arch` for, or a CompileError before LLVM sees it.

    `device_fallback`: `arch` is the GPU a kernel is launched on; a GPU newer than kitjit
    knows then gets compute_90 PTX (once-per-arch notice) instead of an error.
    """
    if arch in SUPPORTED_ARCHS:
        return Target(arch, arch)
    cc = compute_capability(arch)
    if device_fallback and cc is not None and cc > (9, 0):
        if arch not in _noticed:
            _noticed.add(arch)
            warnings.warn(
                f"kitjit: this GPU ({arch}) is newer than kitjit knows; kernels run from "
                f"compute_90 PTX that the driver compiles (no {arch}-specific instructions)",
                ArchFallbackWarning, stacklevel=4)
        return Target(arch, FALLBACK_PTX_ARCH, driver_jit=True)
    from kitjit.frontend.errors import CompileError

    supported = ", ".join(SUPPORTED_ARCHS)
    if cc is None:
        hint = "write the target as sm_XY, e.g. sm_90a for H100, sm_80 for A100"
    elif cc < (8, 0):
        hint = "kitjit needs an Ampere (sm_80) or newer GPU"
    elif cc > (9, 0):
        hint = ("ahead of time, compile for sm_90a (or sm_90 for portable PTX); launched on "
                "such a GPU, kernels run from compute_90 PTX that the driver compiles")
    else:
        hint = f"compile for one of {supported}"
    raise CompileError(f"kitjit cannot generate code for {arch!r}; the supported targets "
                       f"are {supported}", hint=hint)


def check_target_ops(kernel: str, target: Target, op_names) -> None:
    """CompileError when a kernel uses sm_90a-only instructions (wgmma, setmaxnreg) and the
    target is not sm_90a."""
    if target.ptx_arch == "sm_90a":
        return
    ops = SM90A_ONLY_OPS
    if target.ptx_arch in ("sm_80", "sm_86", "sm_89"):
        # kit.mma lowers to ldmatrix + mma.sync there; kit.setmaxnreg is a no-op (no
        # register reallocation: every warp keeps the kernel's one allocation)
        ops = ops - {"wgmma", "setmaxnreg"}
    used = sorted(ops.intersection(op_names))
    if not used:
        return
    from kitjit.frontend.errors import CompileError

    if target.driver_jit:
        msg = (f"kernel '{kernel}' uses sm_90a-only instructions ({', '.join(used)}); this "
               f"GPU ({target.arch}) is newer than kitjit knows and runs only compute_90 PTX, "
               "which cannot hold them")
        hint = "use kit.dot without warp-specialized roles on this GPU"
    else:
        msg = (f"kernel '{kernel}' uses sm_90a-only instructions ({', '.join(used)}); the "
               f"target is {target.arch}")
        hint = "compile for sm_90a"
    raise CompileError(msg, hint=hint)


def _reset_for_tests() -> None:  # pragma: no cover - test helper
    global _source_hash, _assembler_fp
    _source_hash = None
    _assembler_fp = None
    _noticed.clear()

"""LLVM IR -> PTX (llvmlite's NVPTX target) -> cubin (nvJitLink in-process; ptxas as the
fallback), with the resource report (registers, spills, shared memory) read from the
assembler's verbose output. Needs no GPU."""

from __future__ import annotations

import functools
import logging
import os
import re
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field

from kitjit.frontend.errors import AssemblerError

from . import libdevice

logger = logging.getLogger("kitjit.compiler")
_lock = threading.Lock()
_init_lock = threading.Lock()  # (its own: libdevice calls _llvm() under _lock)
_tm_cache: dict[str, object] = {}


def _llvm():
    """llvmlite with its targets registered, once per process. Under the lock: the
    autotuner's first compiles run in threads, and LLVM's target registry is not safe to
    fill from two threads at once."""
    import llvmlite.binding as llvm

    if getattr(_llvm, "done", False):
        return llvm
    with _init_lock:
        if not getattr(_llvm, "done", False):
            try:
                llvm.initialize()
            except RuntimeError:
                pass  # llvmlite >= 0.45 initializes itself
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            _llvm.done = True
    return llvm


def ptx_version_feature(arch: str) -> str:
    return "+ptx80" if arch.startswith("sm_9") else "+ptx78"


def llvm_to_ptx(llir: str, arch: str) -> str:
    from kitjit.toolchain import SUPPORTED_ARCHS

    if arch not in SUPPORTED_ARCHS:  # LLVM would abort the process, uncatchably
        raise ValueError(f"llvm_to_ptx: unsupported target {arch!r} (supported: "
                         f"{', '.join(SUPPORTED_ARCHS)})")
    llvm = _llvm()
    with _lock:
        tm = _tm_cache.get(arch)
        if tm is None:
            target = llvm.Target.from_triple("nvptx64-nvidia-cuda")
            tm = target.create_target_machine(cpu=arch, features=ptx_version_feature(arch),
                                              opt=3)
            _tm_cache[arch] = tm
        mod = _parse_and_verify(llvm, llir)
        if libdevice.needs_libdevice(llir):
            libdevice.link(mod, llvm)
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pb = llvm.create_pass_builder(tm, pto)
        pm = pb.getModulePassManager()
        pm.run(mod, pb)
        ptx = tm.emit_assembly(mod)
    if "tensormap.replace" in ptx:  # (kernels that build CUtensorMaps: PTX ISA 8.3's)
        ptx = ptx.replace(".version 8.0\n", ".version 8.3\n", 1)
    return ptx


class InvalidLLVMIR(RuntimeError):
    """kitjit's lowering wrote LLVM IR that llvmlite rejects (a kitjit bug): the message
    keeps the first problems only (the verifier repeats one per register, hundreds of
    lines); jit.py reports it as an InternalCompilerError naming the kernel."""


def _parse_and_verify(llvm, llir: str):
    """Parse and verify the module before any pass runs on it (LLVM's passes may abort the
    process, uncatchably, on IR that does not verify)."""
    try:
        mod = llvm.parse_assembly(llir)
        mod.verify()
    except RuntimeError as e:
        lines = [x for x in str(e).splitlines() if x.strip()]
        heads = [x for x in lines if not x.startswith((" ", "\t"))]
        first = "\n".join(lines[:6])
        more = len(heads) - sum(1 for x in lines[:6] if not x.startswith((" ", "\t")))
        raise InvalidLLVMIR("LLVM rejected the generated IR: " + first +
                            (f"\n  ... and {more} more" if more > 0 else "")) from None
    return mod


@dataclass
class Resources:
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack: int = 0
    shared_static: int = 0
    log: str = ""
    extra: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


# ptxas's numbered diagnostics ("(C7515) Potential Performance Loss: wgmma.mma_async
# instructions are serialized ...") and its warnings: nvJitLink reports them as "info"
_DIAG = re.compile(r"\(C\d{4}\)|\bwarning\b", re.I)


def assembler_warnings(log: str) -> list[str]:
    """The assembler's warnings and numbered performance notes in `log`, one a line, without
    the tool's "ptxas info    :" prefix (the resource lines are left out)."""
    out = []
    for line in log.splitlines():
        if _DIAG.search(line):
            text = re.sub(r"^\s*ptxas\s+\w+\s*:\s*", "", line).strip()
            if text and text not in out:
                out.append(text)
    return out


def parse_ptxas_log(log: str) -> Resources:
    r = Resources(log=log)
    r.warnings = assembler_warnings(log)
    m = re.search(r"Used (\d+) registers", log)
    if m:
        r.registers = int(m.group(1))
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if m:
        r.spill_stores, r.spill_loads = int(m.group(1)), int(m.group(2))
    m = re.search(r"(\d+) bytes stack frame", log)
    if m:
        r.stack = int(m.group(1))
    m = re.search(r"(\d+) bytes smem", log)
    if m:
        r.shared_static = int(m.group(1))
    return r


@functools.cache
def nvjitlink_version() -> str:
    try:
        from cuda.bindings import nvjitlink

        major, minor = nvjitlink.version()
        return f"{major}.{minor}"
    except Exception:
        return "none"


class AssemblerMissing(RuntimeError):
    """No assembler that can build this PTX is installed (the message says what to install)."""


def ptx_to_cubin(ptx: str, arch: str, name: str = "kernel") -> tuple[bytes, Resources]:
    """Assemble `ptx` for `arch`. Kernels with ``setmaxnreg`` need ptxas: nvJitLink assembles
    PTX as a separately compiled unit and drops setmaxnreg (C7504) silently, which spills;
    without ptxas they raise AssemblerMissing. Everything else goes through nvJitLink
    (in-process), else ptxas. ``Resources.extra["assembler"]`` says which built it."""
    from kitjit.tools import PTXAS_HINT, find_ptxas

    if arch in ("sm_80", "sm_86", "sm_89") and "ldmatrix" in ptx:
        # level 2 below sm_90 (backend/lower/ampere.py): nvJitLink 13.5 spills these where
        # ptxas (13.0 and 13.5) does not (FA2 forward, D 64: 876 bytes vs none)
        exe = find_ptxas()
        if exe is not None:
            return _ptxas(ptx, arch, exe)
    if "setmaxnreg" in ptx:
        exe = find_ptxas()
        if exe is None:
            raise AssemblerMissing(
                f"kernel '{name}' uses kit.setmaxnreg, which only ptxas assembles (nvJitLink "
                f"drops the register budgets silently and the kernel spills), and no ptxas "
                f"was found (nvidia-cuda-nvcc wheel, PATH, /usr/local/cuda): {PTXAS_HINT}")
        return _ptxas(ptx, arch, exe)
    try:
        cubin, res = _nvjitlink(ptx, arch, name)
    except ImportError:
        exe = find_ptxas()
        if exe is None:
            raise AssemblerMissing(
                "neither nvJitLink (pip install nvidia-nvjitlink cuda-bindings) nor ptxas "
                f"({PTXAS_HINT}) is available to assemble PTX") from None
        return _ptxas(ptx, arch, exe)
    logger.debug("assembled %s for %s with nvJitLink %s", name, arch, nvjitlink_version())
    return cubin, res


def _nvjitlink(ptx: str, arch: str, name: str) -> tuple[bytes, Resources]:
    from cuda.bindings import nvjitlink

    opts = [f"-arch={arch}", "-O3", "-verbose"]
    h = nvjitlink.create(len(opts), opts)
    try:
        data = ptx.encode()
        try:
            nvjitlink.add_data(h, nvjitlink.InputType.PTX, data, len(data), f"{name}.ptx")
            nvjitlink.complete(h)
        except nvjitlink.nvJitLinkError as e:
            n = nvjitlink.get_error_log_size(h)
            buf = bytearray(n)
            nvjitlink.get_error_log(h, buf)
            raise AssemblerError(f"nvJitLink failed: {e}\n{buf.decode(errors='replace')}") \
                from e
        size = nvjitlink.get_linked_cubin_size(h)
        cubin = bytearray(size)
        nvjitlink.get_linked_cubin(h, cubin)
        n = nvjitlink.get_info_log_size(h)
        buf = bytearray(n)
        nvjitlink.get_info_log(h, buf)
        log = buf.decode(errors="replace").rstrip("\x00")
    finally:
        _destroy(nvjitlink, h)
    res = parse_ptxas_log(log)
    res.extra["assembler"] = f"nvJitLink {nvjitlink_version()}"
    return bytes(cubin), res


def _destroy(nvjitlink, h) -> None:
    try:
        nvjitlink.destroy(h)
    except Exception:
        pass


def _ptxas(ptx: str, arch: str, exe: str) -> tuple[bytes, Resources]:
    from kitjit.tools import ptxas_version

    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        p = subprocess.run([exe, f"-arch={arch}", "-O3", "-v", src, "-o", out],
                           capture_output=True, text=True)
        if p.returncode:
            raise AssemblerError(f"ptxas failed:\n{p.stderr}")
        with open(out, "rb") as f:
            cubin = f.read()
    res = parse_ptxas_log(p.stderr + p.stdout)
    res.extra["assembler"] = f"ptxas {ptxas_version(exe)}"
    return cubin, res

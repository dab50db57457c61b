"""NVIDIA binary tools (cuobjdump, nvdisasm, ptxas) found without a CUDA toolkit install.

kitjit is pip-only, so these come from the ``nvidia-cuda-cuobjdump``,
``nvidia-cuda-nvdisasm`` and ``nvidia-cuda-nvcc`` wheels (``site-packages/nvidia/<pkg>/bin``,
``nvidia/cu13/bin``) when they are not on PATH (ptxas prefers the wheel: see
:func:`find_ptxas`). The JIT, the CLI and the SASS tests all go through :func:`disassemble` and
:func:`resource_usage`, so there is one place that knows how to find and drive them.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter

__all__ = [
    "ToolError",
    "disassemble",
    "find_ptxas",
    "find_tool",
    "ptxas_version",
    "resource_usage",
    "sass_opcodes",
]

_HINT = "pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm"


class ToolError(RuntimeError):
    """An NVIDIA tool is missing or failed; the message is one line."""


def _wheel_bin_dirs() -> list[pathlib.Path]:
    """``bin`` folders of the nvidia wheels: nvidia/<pkg>/bin (cu12), nvidia/cu13/bin (cu13)."""
    dirs: list[pathlib.Path] = []
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    if not roots:  # fall back to scanning sys.path for a nvidia/ folder
        roots = [os.path.join(p, "nvidia") for p in sys.path if p]
    for root in roots:
        rp = pathlib.Path(root)
        if not rp.is_dir():
            continue
        dirs.extend(sorted(p for p in rp.glob("*/bin") if p.is_dir()))
        dirs.extend(sorted(p for p in rp.glob("*/*/bin") if p.is_dir()))
    return dirs


@functools.cache
def find_tool(name: str) -> str | None:
    """Absolute path of ``name`` (e.g. "cuobjdump"): PATH, the nvidia wheels, CUDA_HOME."""
    env_override = os.environ.get(f"{name.upper()}_PATH")
    if env_override and os.path.isfile(env_override) and os.access(env_override, os.X_OK):
        return env_override
    found = shutil.which(name)
    if found:
        return found
    candidates = list(_wheel_bin_dirs())
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(pathlib.Path(os.environ[var]) / "bin")
    candidates.append(pathlib.Path("/usr/local/cuda/bin"))
    for d in candidates:
        exe = d / name
        if exe.is_file() and os.access(exe, os.X_OK):
            return str(exe)
    return None


PTXAS_HINT = ("pip install nvidia-cuda-nvcc (CUDA 13; nvidia-cuda-nvcc-cu12 for CUDA 12), "
              "or pip install 'kitjit[cu13]', or set KITJIT_PTXAS=/path/to/ptxas")


@functools.cache
def find_ptxas() -> str | None:
    """The ptxas kitjit assembles with: $KITJIT_PTXAS, then the ``nvidia-cuda-nvcc`` wheel
    (``nvidia/cu13/bin`` or ``nvidia/cuda_nvcc/bin``: the version pip matched to the rest),
    then PATH, then $CUDA_HOME/bin and /usr/local/cuda/bin. None when there is none."""
    env = os.environ.get("KITJIT_PTXAS")
    if env and os.path.isfile(env) and os.access(env, os.X_OK):
        return env
    candidates = [d / "ptxas" for d in _wheel_bin_dirs()]
    found = shutil.which("ptxas")
    if found:
        candidates.append(pathlib.Path(found))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(pathlib.Path(os.environ[var]) / "bin" / "ptxas")
    candidates.append(pathlib.Path("/usr/local/cuda/bin/ptxas"))
    for exe in candidates:
        if exe.is_file() and os.access(exe, os.X_OK):
            return str(exe)
    return None


@functools.cache
def ptxas_version(exe: str) -> str:
    """'13.0.88' from ``ptxas --version`` (its release line); 'unknown' if it says none."""
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    m = re.search(r"V(\d+\.\d+\.\d+)", out.stdout) or \
        re.search(r"release (\d+\.\d+)", out.stdout)
    return m.group(1) if m else "unknown"


def _tool_env() -> dict[str, str]:
    """Environment in which cuobjdump finds nvdisasm (it looks on PATH)."""
    env = dict(os.environ)
    nvdisasm = find_tool("nvdisasm")
    if nvdisasm:
        env["NVDISASM_PATH"] = nvdisasm
        env["PATH"] = os.path.dirname(nvdisasm) + os.pathsep + env.get("PATH", "")
    return env


def _run_cuobjdump(flag: str, cubin: bytes) -> str:
    exe = find_tool("cuobjdump")
    if exe is None:
        raise ToolError(f"cuobjdump not found on PATH or in the nvidia wheels ({_HINT})")
    with tempfile.TemporaryDirectory(prefix="kitjit-") as d:
        path = os.path.join(d, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        try:
            proc = subprocess.run(
                [exe, flag, path],
                capture_output=True,
                text=True,
                env=_tool_env(),
                timeout=120,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ToolError(f"cuobjdump {flag} failed: {e}") from None
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        msg = lines[-1] if lines else f"exit code {proc.returncode}"
        if "nvdisasm" in msg:
            msg += f" ({_HINT})"
        raise ToolError(f"cuobjdump {flag} failed: {msg}")
    return proc.stdout


def disassemble(cubin: bytes) -> str:
    """SASS of a cubin as printed by ``cuobjdump --dump-sass``."""
    return _run_cuobjdump("--dump-sass", cubin)


_FUNC_RE = re.compile(r"^\s*Function\s+(\S+?):?\s*$")
_FIELD_RE = re.compile(r"([A-Z_]+(?:\[\d+\])?):(\d+)")
_FIELD_NAMES = {
    "REG": "registers",
    "SHARED": "shared",
    "LOCAL": "local",
    "STACK": "stack",
    "CONSTANT[0]": "constant",
}


def resource_usage(cubin: bytes) -> dict:
    """Registers, shared, local (spill) and stack bytes per kernel, via cuobjdump.

    Returns the first kernel's figures at the top level (``function``, ``registers``,
    ``shared``, ``local``, ``stack``, ``constant``) and every function under ``functions``.
    ``local`` is local memory per thread: register spills plus local arrays.
    """
    text = _run_cuobjdump("--dump-resource-usage", cubin)
    functions: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _FUNC_RE.match(line)
        if m:
            current = m.group(1)
            continue
        if current is not None and "REG:" in line:
            fields = {
                _FIELD_NAMES[k]: int(v) for k, v in _FIELD_RE.findall(line) if k in _FIELD_NAMES
            }
            functions[current] = fields
            current = None
    if not functions:
        raise ToolError("cuobjdump --dump-resource-usage printed no function")
    first_name, first = next(iter(functions.items()))
    return {"function": first_name, **first, "functions": functions}


_OPCODE_RE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def sass_opcodes(sass: str) -> Counter:
    """Count the opcodes in SASS text (full mnemonic, e.g. "HGMMA.64x128x16.F32.BF16").

    Tests check for instructions with ``any(op.startswith("HGMMA") for op in counts)``.
    """
    counts: Counter = Counter()
    for line in sass.splitlines():
        m = _OPCODE_RE.match(line)
        if m:
            counts[m.group(1)] += 1
    return counts


def __getattr__(name: str):
    """Triton's `triton.tools` names kitjit lacks: a one-line "not supported yet"."""
    if name.startswith("__"):
        raise AttributeError(name)
    from kitjit.language.triton_names import missing_module_name_message

    raise AttributeError(missing_module_name_message("kitjit.tools", "triton.tools", name))

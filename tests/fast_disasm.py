"""cuobjdump with nvdisasm's dataflow analysis off, for the SASS tests.

The SASS tests disassemble ~200 kernels through `kitjit.tools.disassemble`: cuobjdump, which
runs nvdisasm (`-pb -hex -novliw`), is the largest single cost of the CPU suite. nvdisasm's
dataflow analysis is about a fifth of it (0.57 -> 0.45 CPU-s for a 12-warp attention kernel)
and changes nothing cuobjdump prints (byte-identical SASS text over the suite's cubins,
checked 2026-11-29, CUDA 13 wheels). cuobjdump runs the nvdisasm found beside itself (it
tries $NVDISASM_PATH as a folder, then its own folder), so the session puts a copy of
cuobjdump and a one-line `nvdisasm -ndf` wrapper in a temporary folder and points
`CUOBJDUMP_PATH` / `NVDISASM_PATH` (read by `kitjit.tools.find_tool`) there. Set either
variable yourself and the tests use your tools as they are.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator

_VARS = ("CUOBJDUMP_PATH", "NVDISASM_PATH")


@contextlib.contextmanager
def nvdisasm_without_dataflow() -> Iterator[str | None]:
    """While in the block, find_tool("cuobjdump") is a copy whose nvdisasm adds `-ndf`;
    yields its folder (None: left as is, because a variable is set, a tool is missing, or
    there is no POSIX shell to run the wrapper)."""
    from kitjit.tools import find_tool

    if any(os.environ.get(v) for v in _VARS) or sys.platform == "win32":
        yield None
        return
    cuobjdump, nvdisasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    if cuobjdump is None or nvdisasm is None:
        yield None
        return
    folder = tempfile.mkdtemp(prefix="kitjit-nvdisasm-ndf-")
    try:
        shutil.copy2(cuobjdump, os.path.join(folder, "cuobjdump"))
        wrapper = os.path.join(folder, "nvdisasm")
        with open(wrapper, "w") as f:
            f.write(f'#!/bin/sh\nexec {shlex.quote(nvdisasm)} -ndf "$@"\n')
        os.chmod(wrapper, 0o755)
        for var in _VARS:
            os.environ[var] = os.path.join(folder, var.split("_")[0].lower())
        find_tool.cache_clear()  # (find_tool memoizes; the tests' skipif marks looked before)
        yield folder
    finally:
        for var in _VARS:
            if os.environ.get(var, "").startswith(folder):
                del os.environ[var]
        find_tool.cache_clear()
        shutil.rmtree(folder, ignore_errors=True)

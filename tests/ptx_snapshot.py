"""The PTX of every kernel the test suite compiles, as a snapshot: a refactor's proof.

    python tests/ptx_snapshot.py write SNAPSHOT.json [pytest args]
    python tests/ptx_snapshot.py check SNAPSHOT.json [pytest args]

Runs the CPU test suite (default: `tests`) with a fresh cache and a plugin that wraps
`kitjit.backend.compiler.llvm_to_ptx`, so every PTX module the suite builds (the examples'
kernels through the SASS tests, the Hopper kernels, the test kernels) is recorded as
(entry name, sha256). `check` fails when a module of the snapshot is no longer built byte
for byte (new modules, from new tests, are listed but do not fail): a change meant to move
no behaviour (issue 17's refactor) must leave every byte of PTX as it was.
The PTX depends on llvmlite's version, which the snapshot records.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ENTRY = re.compile(r"\.entry\s+(\w+)")


class _Recorder:
    """pytest plugin: records every PTX module llvm_to_ptx returns."""

    def __init__(self) -> None:
        self.seen: collections.Counter = collections.Counter()

    def pytest_configure(self, config) -> None:
        from kitjit.backend import compiler

        orig = compiler.llvm_to_ptx

        def recording(llir: str, arch: str) -> str:
            ptx = orig(llir, arch)
            m = _ENTRY.search(ptx)
            name = m.group(1) if m else "?"
            self.seen[f"{arch}:{name}:{hashlib.sha256(ptx.encode()).hexdigest()[:16]}"] += 1
            return ptx

        compiler.llvm_to_ptx = recording


def _run(pytest_args: list[str]) -> tuple[dict, int]:
    import llvmlite
    import pytest

    rec = _Recorder()
    with tempfile.TemporaryDirectory() as d:
        os.environ["KITJIT_CACHE_DIR"] = d
        rc = pytest.main(["-q", "-p", "no:cacheprovider", *pytest_args], plugins=[rec])
    return {"llvmlite": llvmlite.__version__, "ptx": dict(sorted(rec.seen.items()))}, int(rc)


def main(argv: list[str]) -> int:
    sys.path.insert(0, ROOT)  # this checkout's kitjit, not whichever is installed
    os.chdir(ROOT)
    if len(argv) < 2 or argv[0] not in ("write", "check"):
        print(__doc__)
        return 2
    mode, path, rest = argv[0], argv[1], argv[2:] or ["tests"]
    snap, rc = _run(rest)
    if rc != 0:
        print(f"ptx_snapshot: the tests failed (pytest exit {rc}); no snapshot taken")
        return 1
    if mode == "write":
        with open(path, "w") as f:
            json.dump(snap, f, indent=1)
        print(f"ptx_snapshot: {sum(snap['ptx'].values())} PTX modules "
              f"({len(snap['ptx'])} distinct) written to {path}")
        return 0
    with open(path) as f:
        old = json.load(f)
    if old.get("llvmlite") != snap["llvmlite"]:
        print(f"ptx_snapshot: llvmlite {snap['llvmlite']} here, the snapshot was taken with "
              f"{old.get('llvmlite')}: PTX may differ for that reason alone")
    a, b = set(old["ptx"]), set(snap["ptx"])
    gone, new = a - b, b - a
    for k in sorted(gone):
        print(f"  missing: {k}")
    for k in sorted(new):
        print(f"  new:     {k}")
    if gone:  # a module of the snapshot no longer built byte for byte: behaviour moved
        print(f"ptx_snapshot: PTX differs ({len(gone)} missing, {len(new)} new)")
        return 1
    extra = f" ({len(new)} new modules: kernels or specializations the snapshot lacks)" \
        if new else ""
    print(f"ptx_snapshot: every one of the snapshot's {len(a)} PTX modules is built "
          f"byte-identical{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

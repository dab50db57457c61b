"""How the product's top-level frontend/ and backend/ become kitjit.frontend / kitjit.backend.

Installed, packaging maps them (pyproject's package-dir). Run from a checkout's root, the
checkout's own folders must be used even when another checkout is installed editable (its
finder would answer for `kitjit.frontend` and mix two trees): the hook in
kitjit/__init__.py says why it exists.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_a_second_checkout_uses_its_own_frontend_and_backend(tmp_path):
    other = tmp_path / "other_checkout"
    for d in ("kitjit", "frontend", "backend"):
        shutil.copytree(ROOT / d, other / d, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", other / "pyproject.toml")
    code = ("import kitjit, kitjit.frontend.codegen as c, kitjit.backend.compiler as b, "
            "kitjit.interpreter as i; print(kitjit.__file__); print(c.__file__); "
            "print(b.__file__); print(i.__file__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=other, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    files = out.stdout.split()
    assert len(files) == 4
    for f in files:
        assert pathlib.Path(f).resolve().is_relative_to(other.resolve()), (f, files)


def test_this_checkout_imports_its_own_tree():
    import kitjit.backend
    import kitjit.frontend

    import kitjit

    base = pathlib.Path(kitjit.__file__).resolve().parents[1]
    assert pathlib.Path(kitjit.frontend.__file__).resolve().parent == base / "frontend"
    assert pathlib.Path(kitjit.backend.__file__).resolve().parent == base / "backend"

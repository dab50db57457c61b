"""What pyproject.toml promises: one version, no unused dependency, bounds CI tests,
the CUDA extras, the license and the typing marker."""

from __future__ import annotations

import pathlib
import re

import pytest

import kitjit

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = pathlib.Path(__file__).resolve().parents[1]
PY = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PY["project"]


def test_version_lives_in_one_place():
    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    assert PY["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kitjit.__kitjit_version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", kitjit.__kitjit_version__)
    # what `triton.__version__` reads after the import swap: Triton's version, kitjit's as the
    # local label (a valid PEP 440 version that compares as 3.6.0)
    assert kitjit.__version__ == f"3.6.0+kitjit.{kitjit.__kitjit_version__}"
    from packaging.version import Version
    assert Version("3.0") <= Version(kitjit.__version__) < Version("3.7")


def test_numba_is_not_a_dependency_and_nothing_imports_it():
    deps = " ".join(PROJECT["dependencies"])
    assert "numba" not in deps
    for d in ("kitjit", "frontend", "backend"):
        for f in (ROOT / d).rglob("*.py"):
            assert not re.search(r"^\s*(import|from)\s+numba\b", f.read_text(), re.M), f


def test_llvmlite_is_bounded_and_the_installed_one_fits():
    import llvmlite

    [spec] = [d for d in PROJECT["dependencies"] if d.startswith("llvmlite")]
    assert spec == "llvmlite>=0.45,<0.51"
    major, minor = (int(x) for x in llvmlite.__version__.split(".")[:2])
    assert (0, 45) <= (major, minor) < (0, 51)


def test_cuda_extras():
    extras = PROJECT["optional-dependencies"]
    assert any(d.startswith("nvidia-cuda-nvcc>=13") for d in extras["cu13"])
    assert any(d.startswith("nvidia-nvjitlink>=13") for d in extras["cu13"])
    assert any(d.startswith("cuda-bindings>=13") for d in extras["cu13"])
    assert any(d.startswith("nvidia-cuda-nvcc-cu12") for d in extras["cu12"])
    assert any(d.startswith("nvidia-nvjitlink-cu12") for d in extras["cu12"])
    assert any(d.startswith("cuda-bindings>=12") for d in extras["cu12"])
    assert "nvidia-cuda-nvcc" in PROJECT["dependencies"]  # pip-only ptxas (setmaxnreg)


def test_license_and_py_typed():
    assert PROJECT["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert (ROOT / "kitjit" / "py.typed").exists()
    assert "py.typed" in PY["tool"]["setuptools"]["package-data"]["kitjit"]

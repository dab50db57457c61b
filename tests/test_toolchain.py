"""The toolchain, without a GPU: what the disk-cache key covers (kitjit's own compiler
sources, the assembler and its version, the target), which assembler builds a kernel
(ptxas from the nvidia-cuda-nvcc wheel for kernels with setmaxnreg, never a silent
nvJitLink build), and the targets kitjit accepts before LLVM could abort the process."""

from __future__ import annotations

import json
import os
import pathlib
import stat
import subprocess
import sys
import textwrap
import warnings

import pytest
from kitjit.frontend.errors import CompileError

import kitjit as kit
from kitjit import toolchain, tools
from kitjit.cache import KernelCache

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPECS = [("*fp32", 16), ("*fp32", 16), ("i32", 1)]


@kit.jit
def copy(X, Y, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    kit.store(Y + offs, kit.load(X + offs, mask=offs < n), mask=offs < n)


@kit.jit
def budgets(X, P: kit.constexpr, C: kit.constexpr):
    """setmaxnreg in two roles: a kernel only ptxas assembles faithfully."""
    if kit.warpgroup_id() == 0:
        kit.setmaxnreg(P)
    else:
        kit.setmaxnreg(C)
        offs = kit.arange(0, 256)
        kit.store(X + offs, offs.to(kit.float32))


def _nvjitlink() -> bool:
    try:
        from cuda.bindings import nvjitlink  # noqa: F401
    except ImportError:
        return False
    return True


needs_nvjitlink = pytest.mark.skipif(not _nvjitlink(), reason="nvJitLink is not installed")


@pytest.fixture
def fresh_toolchain(monkeypatch):
    """Memoized fingerprints recomputed inside the test, restored after it."""
    monkeypatch.setattr(toolchain, "_assembler_fp", None)
    real = tools.find_ptxas
    real.cache_clear()
    yield
    real.cache_clear()


# --------------------------------------------------------------------------- cache key


def test_source_hash_covers_every_compiler_file_and_is_memoized(monkeypatch):
    names = {n for n, _ in toolchain.compiler_source_files()}
    for must in ("kitjit/jit.py", "kitjit/toolchain.py", "frontend/codegen/build.py",
                 "backend/compiler.py", "backend/lower/base.py"):
        assert must in names, sorted(names)
    h = toolchain.compiler_source_hash()
    assert len(h) == 64 and toolchain.source_hash_seconds is not None
    assert toolchain.source_hash_seconds < 1.0  # measured: a few ms for ~30 files

    def boom():
        raise AssertionError("the compiler sources were read twice")

    monkeypatch.setattr(toolchain, "compiler_source_files", boom)
    assert toolchain.compiler_source_hash() == h


def test_key_changes_with_the_compiler_sources(monkeypatch):
    before = copy.cache_key(SPECS, (256,), 4, "sm_90a")
    assert copy.cache_key(SPECS, (256,), 4, "sm_90a") == before
    monkeypatch.setattr(toolchain, "_source_hash", "0" * 64)  # a compiler file changed
    assert copy.cache_key(SPECS, (256,), 4, "sm_90a") != before


def test_key_changes_with_the_assembler_and_the_arch(monkeypatch):
    before = copy.cache_key(SPECS, (256,), 4, "sm_90a")
    assert copy.cache_key(SPECS, (256,), 4, "sm_80") != before
    monkeypatch.setattr(toolchain, "_assembler_fp", "nvjitlink=99.0;ptxas=none")
    assert copy.cache_key(SPECS, (256,), 4, "sm_90a") != before


@needs_nvjitlink
def test_no_old_entry_served_after_a_compiler_change(monkeypatch, cache_dir):
    ck = copy.compile(SPECS, (256,), 4, "sm_90a")
    assert ck.metadata["assembler"].startswith(("nvJitLink", "ptxas"))
    [entry] = KernelCache().entries()
    meta = json.loads((entry.path / "meta.json").read_text())
    assert meta["assembler"] == ck.metadata["assembler"]
    monkeypatch.setattr(toolchain, "_source_hash", "f" * 64)
    copy.compile(SPECS, (256,), 4, "sm_90a")
    assert len(KernelCache().entries()) == 2  # rebuilt, not served from the old entry


# --------------------------------------------------------------------------- targets


def test_unknown_newer_arch_is_a_compile_error_and_the_process_survives(tmp_path):
    """llvmlite aborts the process on sm_100a (no exception): the check comes first."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from kitjit.frontend.errors import CompileError
        from test_toolchain import copy, SPECS
        for arch in ("sm_100a", "sm_120a", "sm_70", "sm_75"):
            try:
                copy.compile(SPECS, (256,), 4, arch)
            except CompileError as e:
                print(arch, "CompileError", str(e).splitlines()[0])
        print("alive")
        """)
    env = dict(os.environ, KITJIT_CACHE_DIR=str(tmp_path / "c"))
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "LLVM ERROR" not in p.stderr
    lines = p.stdout.splitlines()
    assert lines[-1] == "alive"
    for arch in ("sm_100a", "sm_120a", "sm_70", "sm_75"):
        line = next(x for x in lines if x.startswith(arch))
        assert "CompileError" in line and "sm_80, sm_86, sm_89, sm_90, sm_90a" in line


@pytest.mark.parametrize("arch", ["sm_70", "sm_100a", "hopper", "sm_87"])
def test_unsupported_arch(arch):
    with pytest.raises(CompileError, match="supported targets are sm_80"):
        copy.compile(SPECS, (256,), 4, arch)


def test_llvm_to_ptx_refuses_unknown_targets():
    from kitjit.backend.compiler import llvm_to_ptx

    with pytest.raises(ValueError, match="unsupported target 'sm_100a'"):
        llvm_to_ptx("", "sm_100a")


@needs_nvjitlink
@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89", "sm_90"])
def test_known_archs_compile(arch):
    ck = copy.compile(SPECS, (256,), 4, arch)
    assert f".target {arch}" in ck.asm["ptx"]
    assert ck.asm["cubin"][:4] == b"\x7fELF"


@needs_nvjitlink
def test_newer_gpu_at_launch_runs_compute_90_ptx(monkeypatch):
    monkeypatch.setattr(toolchain, "_noticed", set())
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ck = copy.compile(SPECS, (256,), 4, "sm_120a", max_shared=101376)  # the launch path
        copy.compile(SPECS, (512,), 4, "sm_120a", max_shared=101376)
    notices = [x for x in w if issubclass(x.category, toolchain.ArchFallbackWarning)]
    assert len(notices) == 1 and "sm_120a" in str(notices[0].message)
    assert ".target sm_90\n" in ck.asm["ptx"]
    assert ck.asm["cubin"].endswith(b"\0") and b".target sm_90" in ck.asm["cubin"]
    assert ck.metadata["assembler"].startswith("driver JIT")
    assert ck.metadata["ptx_target"] == "sm_90"
    with pytest.raises(CompileError, match="sm_90a-only instructions"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", toolchain.ArchFallbackWarning)
        budgets.compile([("*fp32", 16)], (24, 240), 12, "sm_100a", device_fallback=True)


def test_sm90a_only_instructions_need_sm90a():
    with pytest.raises(CompileError, match=r"sm_90a-only instructions \(setmaxnreg\)"):
        budgets.compile([("*fp32", 16)], (24, 240), 12, "sm_90")


# --------------------------------------------------------------------------- assembler


def _fake_exe(path: pathlib.Path, text: str) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{text}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_find_ptxas_prefers_the_wheel(tmp_path, monkeypatch, fresh_toolchain):
    wheel = _fake_exe(tmp_path / "site" / "nvidia" / "cu13" / "bin" / "ptxas",
                      "Cuda compilation tools, release 13.5, V13.5.37")
    on_path = _fake_exe(tmp_path / "path" / "ptxas", "release 12.0, V12.0.1")
    monkeypatch.delenv("KITJIT_PTXAS", raising=False)
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setattr(tools, "_wheel_bin_dirs", lambda: [wheel.parent])
    assert tools.find_ptxas() == str(wheel)
    assert tools.ptxas_version(str(wheel)) == "13.5.37"
    assert toolchain.assembler_fingerprint().endswith("ptxas=13.5.37")
    tools.find_ptxas.cache_clear()
    monkeypatch.setattr(tools, "_wheel_bin_dirs", lambda: [])
    assert tools.find_ptxas() == str(on_path)  # then PATH
    tools.find_ptxas.cache_clear()
    monkeypatch.setenv("KITJIT_PTXAS", str(wheel))
    assert tools.find_ptxas() == str(wheel)  # the override first


def test_setmaxnreg_without_ptxas_is_a_compile_error(monkeypatch, fresh_toolchain):
    monkeypatch.setattr(tools, "find_ptxas", lambda: None)
    with pytest.raises(CompileError) as e:
        budgets.compile([("*fp32", 16)], (24, 240), 12, "sm_90a")
    msg = str(e.value)
    assert "setmaxnreg" in msg and "nvidia-cuda-nvcc" in msg and "kitjit[cu13]" in msg


@pytest.mark.skipif(tools.find_ptxas() is None, reason="no ptxas here")
def test_setmaxnreg_is_built_by_ptxas_and_recorded():
    ck = budgets.compile([("*fp32", 16)], (24, 240), 12, "sm_90a")
    assert ck.metadata["assembler"].startswith("ptxas ")


@needs_nvjitlink
def test_nvjitlink_logs_through_logging(caplog, capsys):
    with caplog.at_level("DEBUG", logger="kitjit"):
        copy.compile(SPECS, (128,), 4, "sm_90a")
    assert any("nvJitLink" in r.getMessage() for r in caplog.records if r.name == "kitjit.compiler")
    assert capsys.readouterr().out == ""

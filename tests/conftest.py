"""Shared test setup.

- Every test gets its own on-disk kernel cache (`KITJIT_CACHE_DIR` under its tmp_path), so
  tests never see each other's entries nor the user's ~/.cache/kitjit.
- Tests marked `gpu` run only where `kitjit.testing.has_gpu()` (a CUDA device that torch and
  kitjit's driver can both use); everywhere else they are skipped.
- Tests marked `multigpu` (as well as `gpu`) need two or more GPUs and skip with fewer.
- Every other test runs kernels in the CPU interpreter (`KITJIT_INTERPRET=1`), also on a GPU
  machine, so the CPU suite means the same thing everywhere.
- Without torch installed (`NO_TORCH`), test modules that import torch are not collected and
  a test that reaches an import of torch is reported as skipped ("needs torch").
- Tests marked `slow` (long checks: the fuzzer's CI slice; the SASS matrices of big kernels
  beyond the cases named by `slow_except`) run only with `--slow`; CI runs them in a step of
  their own (`.ci/run`: `pytest --slow -m slow tests`).
- The SASS tests disassemble with nvdisasm's dataflow analysis off (tests/fast_disasm.py).
- Options: `--fuzz-minutes N` / `--fuzz-seed S` / `--fuzz-report DIR` (the long fuzz run,
  tests/test_fuzz_long.py); `--shadow` (gpu tests: every launch also runs in the
  interpreter and is compared, tests/fuzz/shadow.py).
"""

from __future__ import annotations

import functools
import importlib.util
import os

import pytest

#: No torch installed: the CI jobs on the oldest and newest Python (`.ci/run`; a CPU torch
#: build is at hand for one Python only) install kitjit without it and run what needs none.
NO_TORCH = importlib.util.find_spec("torch") is None


def pytest_addoption(parser):
    parser.addoption("--fuzz-minutes", type=float, default=0.0,
                     help="run the fuzz-marked tests for this many minutes (0: skip them)")
    parser.addoption("--fuzz-seed", type=int, action="append", default=[],
                     help="replay the fuzz batch of this seed (from a fuzz report; repeatable)")
    parser.addoption("--fuzz-report", default=None,
                     help="folder for the long fuzz run's report and shrunk kernels")
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the tests marked slow (CI: a step of their own)")
    parser.addoption("--shadow", action="store_true", default=False,
                     help="gpu tests: run every kernel launch also in the interpreter and "
                          "compare (the differential mode, tests/fuzz/shadow.py)")


@functools.cache
def _gpu_available() -> bool:
    # Decided once, before any fixture sets KITJIT_INTERPRET (has_gpu() reads it).
    if os.environ.get("KITJIT_INTERPRET", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    try:
        from kitjit.testing import has_gpu

        return bool(has_gpu())
    except Exception:  # no torch.cuda, no driver, a broken install: no GPU tests
        return False


def pytest_configure(config):
    config.addinivalue_line("markers", "multigpu: needs two or more GPUs (skipped with fewer)")
    config.addinivalue_line("markers", "fuzz: long fuzzing runs (need --fuzz-minutes N)")
    config.addinivalue_line("markers", "slow: long checks, run only with --slow (CI runs "
                                       "them in a step of their own)")
    config.addinivalue_line("markers", "slow_except(*ids): every parametrization of the test "
                                       "but these ids is slow (the main suite checks these; "
                                       "CI's slow step the whole matrix)")
    config.addinivalue_line("markers", "serial: races of several processes timed against each "
                                       "other: skipped in an xdist worker (CI runs them in the "
                                       "slow step, one process)")


@functools.cache
def _gpu_count() -> int:
    if not _gpu_available():
        return 0
    import torch

    return torch.cuda.device_count()


def _mark_slow_matrices(items) -> None:
    """`@pytest.mark.slow_except("D128-causal", ...)`: the ids named run in the main suite,
    every other parametrization of the test is marked slow (the SASS matrices of big kernels:
    each case is a compile and a disassembly of seconds). An id that names no case is an
    error, so a renamed parametrization cannot move the whole matrix out of the main suite."""
    cases: dict = {}
    for item in items:
        mark = item.get_closest_marker("slow_except")
        if mark is None or not hasattr(item, "callspec"):
            continue
        cases.setdefault(item.function, (mark.args, []))[1].append(item)
        if item.callspec.id not in mark.args:
            item.add_marker(pytest.mark.slow)
    for function, (keep, its) in cases.items():
        missing = set(keep) - {item.callspec.id for item in its}
        if missing and len(its) > 1:  # (one case alone: a run of that node id)
            raise pytest.UsageError(f"{function.__module__}.{function.__name__}: "
                                    f"slow_except names no such case: {sorted(missing)}")


@pytest.hookimpl(tryfirst=True)  # the slow marks must be there before `-m` selects
def pytest_collection_modifyitems(config, items):
    _mark_slow_matrices(items)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # tests whose racing processes must not share the cores with another worker run in
        # one process instead (none now: test_ranks was, until the autotuner's silent
        # config drop it caught was fixed, tests/test_autotune_drops.py)
        skip_serial = pytest.mark.skip(reason="serial: runs without -n (CI: .ci/run's slow "
                                               "step)")
        for item in items:
            if item.get_closest_marker("serial"):
                item.add_marker(skip_serial)
    if not config.getoption("--slow"):
        skip_slow = pytest.mark.skip(reason="slow: runs with --slow (CI: .ci/run's slow step)")
        for item in items:
            if item.get_closest_marker("slow"):
                item.add_marker(skip_slow)
    if any(item.get_closest_marker("gpu") for item in items) and not _gpu_available():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU usable by torch and kitjit "
                                       "(kitjit.testing.has_gpu() is False)")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)
    if any(item.get_closest_marker("multigpu") for item in items) and _gpu_count() < 2:
        skip2 = pytest.mark.skip(reason=f"needs 2 GPUs ({_gpu_count()} here)")
        for item in items:
            if item.get_closest_marker("multigpu"):
                item.add_marker(skip2)


@pytest.fixture(autouse=True)
def _kitjit_env(request, tmp_path, monkeypatch):
    """A private cache directory per test; the interpreter unless the test is marked gpu."""
    cache = tmp_path / "kitjit-cache"
    monkeypatch.setenv("KITJIT_CACHE_DIR", str(cache))
    monkeypatch.delenv("KITJIT_CACHE_DISABLE", raising=False)
    if request.node.get_closest_marker("gpu") or request.node.get_closest_marker("multigpu"):
        monkeypatch.delenv("KITJIT_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("KITJIT_INTERPRET", "1")
    yield cache


@pytest.fixture(scope="session", autouse=True)
def _nvdisasm_without_dataflow():
    """cuobjdump's nvdisasm without its dataflow analysis: the same SASS text, ~40% less of
    the SASS tests' largest cost (tests/fast_disasm.py)."""
    from fast_disasm import nvdisasm_without_dataflow

    with nvdisasm_without_dataflow():
        yield


@pytest.fixture
def cache_dir(_kitjit_env):
    """The test's private KITJIT_CACHE_DIR (it may not exist yet)."""
    return _kitjit_env


@pytest.fixture(scope="module")
def memo_layout_check():
    """kitjit.ir.layout_check.problems() checks the layout of every value of a kernel, thread
    by thread; a kernel holds many values of few layouts (the 192-row attention kernels of
    tests/test_three_consumers.py: 552 values, 8 layouts, ~7 s each), so modules that check
    big kernels memoize `lin_problems`, a pure function of a frozen LinearLayout and the warp
    count, for the module: every value is still checked, each distinct layout computed once."""
    from kitjit.ir import layout_check

    memo = functools.lru_cache(maxsize=None)(layout_check.lin_problems)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(layout_check, "lin_problems",
                   lambda lin, warps=None: list(memo(lin, warps)))
        yield


_SHADOWED: list = []


@pytest.fixture(autouse=True)
def _shadow(request):
    """With --shadow, every launch of a gpu test is shadowed by the interpreter."""
    if not (request.config.getoption("--shadow") and request.node.get_closest_marker("gpu")):
        yield
        return
    from fuzz.shadow import shadowed

    with shadowed(_SHADOWED):
        yield


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if config.getoption("--shadow"):
        from fuzz.shadow import summary

        terminalreporter.write_line(f"differential (--shadow): {summary(_SHADOWED)}")


if NO_TORCH:
    def pytest_ignore_collect(collection_path, config):
        """Test modules, and folders whose conftest.py (the port suite's), import torch."""
        p = collection_path
        if p.is_dir():
            return (p / "conftest.py").is_file() and _imports_torch(p / "conftest.py")
        return p.suffix == ".py" and p.name.startswith("test_") and _imports_torch(p)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):
        """A test that imports torch at run time (an example's module, a helper): skipped."""
        report = (yield).get_result()
        exc = call.excinfo
        if exc is not None and exc.errisinstance(ModuleNotFoundError) and \
                getattr(exc.value, "name", None) == "torch":
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1] or 0, "Skipped: needs torch")


def _imports_torch(path, seen: set | None = None) -> bool:
    """The module, or a helper module of tests/ it imports (`from fuzz.broken import ...`,
    `from hopper_helpers import ...`), imports torch."""
    import ast
    import pathlib

    seen = set() if seen is None else seen
    path = pathlib.Path(path)
    if path in seen:
        return False
    seen.add(path)
    text = path.read_text(encoding="utf-8")
    if "import torch" in text or "from torch" in text:
        return True
    tests = pathlib.Path(__file__).parent
    for node in ast.walk(ast.parse(text)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] if isinstance(node, ast.ImportFrom) and node.module and
                 not node.level else [])
        for name in names:
            base = tests.joinpath(*name.split("."))
            for cand in (base.with_suffix(".py"), base / "__init__.py"):
                if cand.is_file() and _imports_torch(cand, seen):
                    return True
    return False

"""The fuzzer for minutes, and its differential mode (interpreter against the GPU).

    pytest -m fuzz --fuzz-minutes 10 tests/test_fuzz_long.py              # nightly, CPU
    pytest -m "fuzz and gpu" --fuzz-minutes 10 tests/test_fuzz_long.py    # on a GPU machine
    pytest -m fuzz --fuzz-seed 123 --fuzz-seed 456 tests/test_fuzz_long.py  # replay batches

The CI slice is tests/test_fuzz.py (derandomized, the same few hundred kernels every run).
These run only when `--fuzz-minutes N` (or `--fuzz-seed S`) is given: fresh random kernels
in batches of 25 from random seeds, valid ones checked against the float64 oracle and
compiled for sm_90a, broken ones checked for a located CompileError, until the time is up;
the minutes are shared between the CPU modes that run. A failing batch is shrunk by
hypothesis and recorded, and the run goes on: at the end one report lists every failure,
grouped by kind, each with its seed (`--fuzz-seed` replays the batch) and its shrunk
kernel, also written as repro_<n>.py under `--fuzz-report DIR` (default: the test's
tmp_path).

The differential mode runs each valid kernel in the interpreter and on the GPU on the same
inputs and compares Out and the atomics' tensors: bit-exact for integer results, and for
floats within the error bound the oracle gives both paths (two roundings of the same
computation can differ by it), with NaN and infinity at the same places.
"""

from __future__ import annotations

import pathlib

import pytest
from fuzz.broken import broken_kernels, run_broken
from fuzz.kernel import kernels
from fuzz.runner import for_seconds, fuzz, report, run_differential, run_valid
from hypothesis import given

pytestmark = pytest.mark.fuzz


@pytest.fixture
def budget(request) -> tuple[float, list[int] | None]:
    """(minutes, seeds): how long each long test runs, or the batches it replays."""
    m = request.config.getoption("--fuzz-minutes")
    seeds = request.config.getoption("--fuzz-seed") or None
    if not m and not seeds:
        pytest.skip("runs only with --fuzz-minutes N (or --fuzz-seed S)")
    return float(m or 0.0), seeds


def _share(minutes: float, request) -> float:
    """This test's share of the minutes: they are split between the CPU fuzz tests selected."""
    n = sum(1 for it in request.session.items if it.get_closest_marker("fuzz") and
            it.get_closest_marker("gpu") is None) or 1
    return minutes * 60.0 / n


def _run(request, tmp_path, seconds: float, seeds, strategy, body, name: str) -> None:
    failures: list = []
    n = for_seconds(seconds, strategy, body, name, failures, seeds=seeds)
    out = request.config.getoption("--fuzz-report")
    out_dir = pathlib.Path(out) if out else tmp_path
    out_dir.mkdir(parents=True, exist_ok=True)
    text = report(failures, out_dir)
    (out_dir / f"report_{name}.txt").write_text(f"{n} examples\n{text}\n")
    print(f"fuzz {name}: {n} examples, {len(failures)} failing batches")
    assert not failures, text


def test_valid_kernels_for_minutes(budget, request, tmp_path):
    minutes, seeds = budget
    _run(request, tmp_path, _share(minutes, request), seeds, kernels(),
         lambda k: run_valid(k, tmp_path), "valid")


def test_broken_kernels_for_minutes(budget, request, tmp_path):
    minutes, seeds = budget
    _run(request, tmp_path, _share(minutes, request), seeds, broken_kernels(),
         lambda b: run_broken(b, tmp_path), "broken")


@pytest.mark.gpu
def test_differential_interpreter_vs_gpu(budget, request, tmp_path):
    minutes, seeds = budget
    _run(request, tmp_path, minutes * 60.0, seeds, kernels(),
         lambda k: run_differential(k, tmp_path), "differential")


@pytest.mark.gpu
def test_differential_ci_slice(tmp_path):
    """A fixed slice of the differential mode, for `pytest -m gpu` (no --fuzz-minutes)."""
    @fuzz(60)
    @given(k=kernels())
    def each(k):
        run_differential(k, tmp_path)
    each()

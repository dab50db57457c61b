"""The port corpus's harness (benchmarks/port_corpus) stays working: a handful of its cases
(those marked `quick`), each a public package's Triton kernel run with only its imports
swapped, checked against float64 torch. Sources not fetched into `.corpus/` skip (CI does not
fetch: `python benchmarks/port_corpus/fetch.py` does)."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "port_corpus"))

import importlib.util  # noqa: E402

import corpus_harness as harness  # noqa: E402

_spec = importlib.util.spec_from_file_location(  # run.py under a name no other test uses
    "port_corpus_run", os.path.join(ROOT, "benchmarks", "port_corpus", "run.py"))
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)

QUICK = run.select(None, None, quick=True)


def _params(device):
    return [pytest.param(c, device, id=f"{c.source}-{c.name}-{device}",
                         marks=[pytest.mark.gpu] if device == "cuda" else [])
            for c in QUICK]


@pytest.mark.parametrize("case, device", _params("cpu") + _params("cuda"))
def test_corpus_case(case, device):
    if not harness.cache_present(case.source):
        pytest.skip(f"{case.source} not fetched: python benchmarks/port_corpus/fetch.py "
                    f"--only {case.source}")
    r = run.run_case(case, device, tune_all=False)
    assert r["status"] == "passed", r.get("traceback", r)


def test_quick_cases_cover_every_source():
    assert {c.source for c in QUICK} == set(harness.SOURCES)


def test_harness_poisons_and_counts(tmp_path, monkeypatch):
    """Inside a case's environment torch.empty is NaN-filled and a CPU case that launches no
    kitjit kernel fails (a package's torch fallback would otherwise pass unseen)."""
    import torch

    os.makedirs(tmp_path / "fake")
    (tmp_path / "fake" / "COMMIT").write_text("none\n")
    monkeypatch.setattr(harness, "CACHE", str(tmp_path))
    src = harness.Source("fake", "fake_corpus_pkg")
    monkeypatch.setitem(harness.SOURCES, "fake", src)
    with harness.environment(src, "cpu"):
        assert torch.empty(8).isnan().all()
    r = run.run_case(harness.Case("fake", "no_kernel", lambda imp, device: None), "cpu", False)
    assert r["status"] == "failed" and "no kernel ran" in r["reason"]


def test_gpu_runs_take_the_first_config():
    """The GPU harness's untimed tuning reaches the autotuner's module function (the name
    `kitjit.autotune` is the decorator, not the module)."""
    at = sys.modules["kitjit.autotune"]
    before = at._gpu_target
    with harness.first_config_on_gpu():
        assert at._gpu_target([]) is None
    assert at._gpu_target is before

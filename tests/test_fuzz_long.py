"""The fuzzer for minutes, and its differential mode (interpreter against the GPU).

    pytest -m fuzz --fuzz-minutes 10 tests/test_fuzz_long.py        # nightly-style, CPU
    pytest -m "fuzz and gpu" --fuzz-minutes 10 tests/test_fuzz_long.py  # on a GPU machine

The CI slice is tests/test_fuzz.py (derandomized, the same few hundred kernels every run).
These run only when `--fuzz-minutes N` is given: fresh random kernels (not derandomized),
valid ones checked against the float64 reference and compiled for sm_90a, broken ones
checked for a located CompileError, until the time is up; the minutes are shared between
the modes that run. Every failure prints the generated kernel's source (a new test to add
to test_fuzz.py's regressions).

The differential mode runs each valid kernel in the interpreter and on the GPU on the same
inputs and compares: bit-exact for integer results, and for floats within the error bound
the reference gives both paths (two roundings of the same computation can differ by it),
with NaN and infinity at the same places.
"""

from __future__ import annotations

import time

import pytest
import test_fuzz as F
import torch
from hypothesis import HealthCheck, Phase, given, note, settings

pytestmark = pytest.mark.fuzz


@pytest.fixture
def minutes(request) -> float:
    m = request.config.getoption("--fuzz-minutes")
    if not m:
        pytest.skip("runs only with --fuzz-minutes N")
    return float(m)


def _share(minutes: float, request) -> float:
    """This test's share of the minutes: they are split between the fuzz tests selected."""
    n = sum(1 for it in request.session.items if it.get_closest_marker("fuzz") and
            it.get_closest_marker("gpu") is None) or 1
    return minutes * 60.0 / n


def _for_seconds(seconds: float, strategy, body) -> int:
    """Run `body` on fresh examples of `strategy` until `seconds` have passed; returns how
    many ran. Batches of 25 examples, random (not derandomized), no example database."""
    end = time.monotonic() + seconds
    ran = 0
    while time.monotonic() < end:
        @settings(max_examples=25, deadline=None, derandomize=False, database=None,
                  print_blob=True, phases=[Phase.generate, Phase.shrink],
                  suppress_health_check=list(HealthCheck))
        @given(x=strategy)
        def batch(x):
            body(x)
        batch()
        ran += 25
    return ran


def test_valid_kernels_for_minutes(minutes, request, tmp_path):
    n = _for_seconds(_share(minutes, request), F.kernels(), lambda k: F.run_valid(k, tmp_path))
    print(f"fuzz: {n} valid kernels")


def test_broken_kernels_for_minutes(minutes, request, tmp_path):
    n = _for_seconds(_share(minutes, request), F.broken_kernels(),
                     lambda b: F.run_broken(b, tmp_path))
    print(f"fuzz: {n} broken kernels")


def run_differential(k: F.Kernel, workdir) -> None:
    """The same kernel and inputs in the interpreter and on the GPU."""
    import os

    k.build()
    source, _ = k.render()
    note(source)
    jf, _ = F.load_kernel(source, workdir)
    ts = k.tensors()
    out_cpu = F.fresh_output(k)
    os.environ["KITJIT_INTERPRET"] = "1"
    try:
        F.no_internal_errors(lambda: F.launch(jf, k, k.args(ts, out_cpu)), source)
    finally:
        del os.environ["KITJIT_INTERPRET"]
    ts_gpu = [t.cuda() for t in ts]
    out_gpu = F.fresh_output(k).cuda()
    F.no_internal_errors(lambda: F.launch(jf, k, k.args(ts_gpu, out_gpu)), source)
    torch.cuda.synchronize()
    got = out_gpu.cpu()
    if not got.dtype.is_floating_point:
        assert torch.equal(got, out_cpu), f"integer results differ:\n{source}"
        return
    ref, err, unstable = F.reference(k, ts)
    a, b = out_cpu.double().numpy(), got.double().numpy()
    same_special = ((a != a) == (b != b)) & ((abs(a) == float("inf")) ==
                                             (abs(b) == float("inf")))
    assert same_special[~unstable].all(), f"NaN/inf at different places:\n{source}"
    finite = (a == a) & (b == b) & (abs(a) != float("inf")) & (abs(b) != float("inf"))
    bad = finite & ~unstable & (abs(a - b) > 2 * err + 1e-30)
    assert not bad.any(), (f"{int(bad.sum())} results differ beyond twice the error bound "
                           f"between the interpreter and the GPU:\n{source}")


@pytest.mark.gpu
def test_differential_interpreter_vs_gpu(minutes, tmp_path):
    n = _for_seconds(minutes * 60.0, F.kernels(), lambda k: run_differential(k, tmp_path))
    print(f"fuzz: {n} kernels on both paths")


@pytest.mark.gpu
def test_differential_ci_slice(tmp_path):
    """A fixed slice of the differential mode, for `pytest -m gpu` (no --fuzz-minutes)."""
    @F.fuzz(60)
    @given(k=F.kernels())
    def each(k):
        run_differential(k, tmp_path)
    each()

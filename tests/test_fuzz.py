"""The fuzzer's CI slice: random kernels (tests/fuzz/, whose docstring says what they
hold), derandomized so that every run sees the same examples. The two long ones (~50 s on
one core: 700 kernels, each compiled for sm_90a) are marked slow: CI runs them in a step
of their own (`pytest --slow -m slow tests`, .ci/run). Valid kernels match the
float64 oracle in the interpreter and compile for sm_90a; broken ones raise a CompileError
at the mistake's line; launch mistakes raise before anything runs. The long mode is
tests/test_fuzz_long.py; kernels that once failed are tests/test_fuzz_repros.py."""

from __future__ import annotations

import pytest
from fuzz.broken import LAUNCH_MISTAKES, broken_kernels, run_broken, run_launch_mistake
from fuzz.kernel import kernels
from fuzz.runner import fuzz, run_valid
from hypothesis import given
from hypothesis import strategies as st


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.slow
@fuzz(300)
@given(k=kernels())
def test_valid_kernels_match_the_reference_and_compile_for_sm90(k, workdir):
    run_valid(k, workdir)


@pytest.mark.slow
@fuzz(400)
@given(b=broken_kernels())
def test_broken_kernels_raise_a_located_compile_error(b, workdir):
    run_broken(b, workdir)


@fuzz(40)
@given(k=kernels(depth=2), mistake=st.sampled_from(sorted(LAUNCH_MISTAKES)))
def test_launch_mistakes_raise_before_anything_runs(k, mistake, workdir):
    run_launch_mistake(k, mistake, workdir)

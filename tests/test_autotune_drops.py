"""The autotuner never drops a config silently (a CI flake of tests/test_ranks.py: the tuning
rank's best came out BLOCK=128 where the stub timings make 64 best, with no warning).

A config is skipped only for its own failure (a compile error, out of resources, the
assembler refusing it: what Triton skips), with one warning naming it and the reason; a
failure that is not the config's (a lock or compile that timed out under load, an error of
the parallel compiles) is retried alone, then raised, and never written to the tuning record.

As in tests/test_autotune.py: a fake GPU (real sm_90a compiles, no launch there) and a
do_bench of made-up times; the launch after tuning runs in the interpreter.
"""

from __future__ import annotations

import importlib
import json
import threading
import time
import warnings

import pytest
import torch
from kitjit.frontend.errors import InternalCompilerError

import kitjit as kit
from kitjit import tuning_failures
from kitjit.autotune import Autotuner, AutotuneWarning, Config, Target

at = importlib.import_module("kitjit.autotune")
BLOCKS = (32, 64, 128)
MS = {32: 0.3, 64: 0.1, 128: 0.2}   # 64 is the best


@kit.jit
def drop_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    kit.store(Out + offs, kit.load(X + offs, mask=mask) * 2.0, mask=mask)


@pytest.fixture(autouse=True)
def fake_gpu(request, monkeypatch):
    if not request.node.get_closest_marker("gpu"):
        monkeypatch.setattr(at, "_gpu_target",
                            lambda args: Target("Fake GPU 80GB", "sm_90a", 232448, -1))
    monkeypatch.setattr(tuning_failures, "_warned", set())  # "once per process", per test


def bench(fn):
    return MS[fn.config.kwargs["BLOCK"]]


def never(fn):
    raise AssertionError(f"timed {fn.config} again: it is on disk")


def tune(blocks=BLOCKS, do_bench=bench) -> Autotuner:
    tuner = Autotuner(drop_kernel, [Config({"BLOCK": b}, num_warps=1) for b in blocks],
                      key=["n"], do_bench=do_bench)
    x = torch.randn(100)
    out = torch.full_like(x, float("nan"))
    tuner[lambda m: (kit.cdiv(100, m["BLOCK"]),)](x, out, 100)
    assert torch.equal(out, 2 * x)
    return tuner


def flaky_compile(monkeypatch, error, times=1, block=64):
    """Make drop_kernel's compile of BLOCK=`block` take a moment, then raise `error()` (the
    first `times` times): what a lock or a compile that times out under load looks like."""
    orig = drop_kernel.compile
    left = [times]

    def compile(specs, consts, *a, **k):
        if consts == (block,) and left[0] > 0:
            left[0] -= 1
            time.sleep(0.05)
            raise error()
        return orig(specs, consts, *a, **k)

    monkeypatch.setattr(drop_kernel, "compile", compile, raising=False)


def record(cache_dir) -> dict:
    (path,) = (cache_dir / "tuning").rglob("*.json")
    return json.loads(path.read_text())["timings"]


@pytest.mark.parametrize("error", [
    lambda: TimeoutError("waited 600 s for another process compiling kernel drop_kernel"),
    # the race of the first parallel compiles (LLVM's target registry), as jit.py wraps it
    lambda: InternalCompilerError("drop_kernel", "generating PTX for", RuntimeError(
        "No available targets are compatible with triple \"nvptx64-nvidia-cuda\"")),
], ids=["lock-timeout", "compile-race"])
def test_transient_compile_failure_is_retried_not_dropped(monkeypatch, cache_dir, error):
    flaky_compile(monkeypatch, error)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AutotuneWarning)   # nothing was skipped
        tuner = tune()
    assert str(tuner.best_config) == "BLOCK=64, num_warps=1"
    assert all(isinstance(t, float) for t in record(cache_dir).values())
    assert len(record(cache_dir)) == 3
    # and a second process (a rank reading the record) times nothing and agrees
    assert str(tune(do_bench=never).best_config) == "BLOCK=64, num_warps=1"


def test_failure_that_is_not_the_configs_is_raised(monkeypatch, cache_dir):
    flaky_compile(monkeypatch, lambda: TimeoutError("compile lock wait timed out"), times=2)
    with pytest.raises(TimeoutError, match="timed out"):
        tune()
    assert not list((cache_dir / "tuning").rglob("*.json"))   # nothing half-tuned on disk


def test_error_while_timing_is_raised_not_skipped(cache_dir):
    def oom(fn):
        if fn.config.kwargs["BLOCK"] == 64:
            raise torch.OutOfMemoryError("fake out of memory")
        return bench(fn)

    with pytest.raises(torch.OutOfMemoryError):
        tune(do_bench=oom)
    assert not list((cache_dir / "tuning").rglob("*.json"))


def test_launch_out_of_resources_is_the_configs_own(cache_dir):
    """A block that needs more registers than an SM has: the launch fails with
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, which Triton skips (OutOfResources "threads")."""
    from kitjit.runtime.driver import DriverError

    def regs(fn):
        if fn.config.kwargs["BLOCK"] == 64:
            raise DriverError("cuLaunchKernel: too many resources requested for launch (701)")
        return bench(fn)

    with pytest.warns(AutotuneWarning, match="BLOCK=64, num_warps=1 skipped: failed: "
                                             "DriverError: cuLaunchKernel: too many"):
        tuner = tune(do_bench=regs)
    assert str(tuner.best_config) == "BLOCK=128, num_warps=1"
    assert record(cache_dir)["BLOCK=64, num_warps=1"].startswith("failed: DriverError")
    assert not tuning_failures.skippable(DriverError("cuLaunchKernel: an illegal memory "
                                                     "access was encountered (700)"))


def test_skipped_config_warns_once_with_the_reason(cache_dir):
    with pytest.warns(AutotuneWarning) as rec:
        tuner = tune(blocks=(100, *BLOCKS))     # 100: not a power of two, a CompileError
    msgs = [str(w.message) for w in rec if w.category is AutotuneWarning]
    assert len(msgs) == 1, msgs
    assert msgs[0].startswith("kitjit autotune drop_kernel: config BLOCK=100, num_warps=1 "
                              "skipped: failed: CompileError"), msgs
    assert "power of two" in msgs[0]
    assert all(w.filename == __file__ for w in rec)   # at the launch, not in kitjit
    assert str(tuner.best_config) == "BLOCK=64, num_warps=1"
    assert record(cache_dir)["BLOCK=100, num_warps=1"].startswith("failed: CompileError")
    with warnings.catch_warnings():
        warnings.simplefilter("error", AutotuneWarning)   # said once per process
        tune(blocks=(100, *BLOCKS), do_bench=never)


def test_skip_read_from_disk_warns_in_a_new_process(monkeypatch, cache_dir):
    with pytest.warns(AutotuneWarning):
        tune(blocks=(100, *BLOCKS))
    monkeypatch.setattr(tuning_failures, "_warned", set())   # as another process
    with pytest.warns(AutotuneWarning, match="BLOCK=100.*skipped .as its tuning record"):
        tune(blocks=(100, *BLOCKS), do_bench=never)


def test_llvm_targets_registered_once_under_threads(monkeypatch):
    """The autotuner's first compiles run in threads: LLVM's targets are registered by one."""
    import llvmlite.binding as llvm
    from kitjit.backend import compiler

    calls, inside, peak = [0], [0], [0]
    orig = llvm.initialize_all_targets

    def slow_init():
        calls[0] += 1
        inside[0] += 1
        peak[0] = max(peak[0], inside[0])
        time.sleep(0.05)
        orig()
        inside[0] -= 1

    monkeypatch.setattr(llvm, "initialize_all_targets", slow_init)
    monkeypatch.setattr(compiler._llvm, "done", False, raising=False)
    threads = [threading.Thread(target=compiler._llvm) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls[0] == 1 and peak[0] == 1


@pytest.mark.gpu
def test_gpu_config_whose_compile_timed_out_is_timed_and_wins(monkeypatch, cache_dir):
    """On the GPU, with CUDA-event timing: the fast config's first compile times out; it is
    compiled again, timed, and wins; the record has both configs timed."""
    n = 1 << 24
    slow, fast = Config({"BLOCK": 32}, num_warps=1), Config({"BLOCK": 2048}, num_warps=8)
    flaky_compile(monkeypatch, lambda: TimeoutError("compile lock wait timed out"),
                  block=2048)
    tuner = Autotuner(drop_kernel, [slow, fast], key=["n"], warmup=5, rep=20)
    x = torch.randn(n, device="cuda")
    out = torch.full_like(x, float("nan"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", AutotuneWarning)
        tuner[lambda m: (kit.cdiv(n, m["BLOCK"]),)](x, out, n)
    torch.cuda.synchronize()
    assert torch.equal(out, 2 * x)
    t = tuner.timings[next(iter(tuner.cache))]
    assert tuner.best_config == fast and t[str(slow)] > 2 * t[str(fast)], t
    assert sorted(record(cache_dir)) == sorted([str(slow), str(fast)])
    assert all(isinstance(v, float) for v in record(cache_dir).values())

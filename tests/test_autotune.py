"""kit.autotune: key logic, pruning, persistence, progress/printing and the interpreter's
choice on the CPU; on a GPU, that tuning picks the faster of two configs.

CPU tests that need the timing path replace `kitjit.autotune._gpu_target` with a fake GPU
(real compiles for sm_90a, no launches there) and pass `do_bench` returning made-up times;
the launch after tuning then runs in the interpreter on CPU tensors.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import kitjit as kit
from kitjit.autotune import AutotuneError, Autotuner, Config, Target

# The module (kit.autotune, the attribute, is the decorator).
at = importlib.import_module("kitjit.autotune")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKE = Target("Fake GPU 80GB", "sm_90a", 232448, -1)


@kit.jit
def add_kernel(X, Y, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    kit.store(Out + offs, kit.load(X + offs, mask=mask) + kit.load(Y + offs, mask=mask),
              mask=mask)


@kit.jit
def acc_kernel(X, Out, n, BLOCK: kit.constexpr):
    """Out += X: a kernel that writes its input (needs restore_value / reset_to_zero)."""
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    kit.store(Out + offs, kit.load(Out + offs, mask=mask) + kit.load(X + offs, mask=mask),
              mask=mask)


@kit.jit
def rowsum(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    x = kit.load(X + kit.program_id(0) * n + offs, mask=offs < n, other=0.0)
    kit.store(Out + kit.program_id(0), kit.sum(x, axis=0))


@kit.jit
def scale_kernel(X, Out, BLOCK: kit.constexpr, n, alpha=2.0):
    """A tuned constexpr before run-time parameters, and a defaulted one."""
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    kit.store(Out + offs, kit.load(X + offs, mask=mask) * alpha, mask=mask)


def grid(n):
    return lambda meta: (kit.cdiv(n, meta["BLOCK"]),)


class FakeBench:
    """do_bench that 'times' by a table of BLOCK -> ms, and counts what it was asked."""

    def __init__(self, ms_by_block, calls=0):
        self.ms = ms_by_block
        self.calls = []
        self.run = calls

    def __call__(self, fn):
        self.calls.append(str(fn.config))
        for _ in range(self.run):
            fn()
        return self.ms[fn.config.kwargs["BLOCK"]]


def never(fn):
    raise AssertionError(f"do_bench called for {fn.config}")


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(at, "_gpu_target", lambda args: FAKE)
    return FAKE


def add_args(n=1000, dtype=torch.float32):
    x, y = torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype)
    return x, y, torch.empty_like(x), n


CONFIGS = [Config({"BLOCK": 128}, num_warps=1), Config({"BLOCK": 256}, num_warps=2),
           Config({"BLOCK": 512}, num_warps=4)]


# --------------------------------------------------------------------------- Config
def test_config_canonical_string():
    a = Config({"BM": 64, "BN": 128}, num_warps=8, num_stages=3)
    b = Config({"BN": 128, "BM": 64}, num_warps=8, num_stages=3)
    assert str(a) == str(b) == "BM=64, BN=128, num_warps=8, num_stages=3"
    assert a == b and hash(a) == hash(b)
    assert str(Config({"BLOCK": 256})) == "BLOCK=256, num_warps=4"
    assert a.all_kwargs() == {"BM": 64, "BN": 128, "num_warps": 8, "num_stages": 3}
    assert Config({"B": 1}).all_kwargs() == {"B": 1, "num_warps": 4}
    with pytest.raises(ValueError, match="num_warps"):
        Config({"num_warps": 4})
    with pytest.raises(ValueError):
        Config({}, num_warps=0)


def test_bad_declarations():
    # a key that names no parameter is ignored with a warning, as Triton ignores it (Triton's
    # 08-grouped-gemm tutorial has the typo 'gropup_c_ptrs' in its key)
    with pytest.warns(UserWarning, match="key 'm' is not a parameter"):
        assert Autotuner(add_kernel, CONFIGS, key=["n", "m"]).key == ["n"]
    # a key the configs set is no argument of the caller's: skipped, as Triton skips it
    # (flash-linear-attention keys kernels so)
    assert Autotuner(add_kernel, CONFIGS, key=["n", "BLOCK"]).key == ["n"]
    with pytest.raises(ValueError, match="'BLK'"):
        Autotuner(add_kernel, [Config({"BLK": 1})], key=["n"])
    with pytest.raises(ValueError, match="restore_value"):
        Autotuner(add_kernel, CONFIGS, key=["n"], restore_value=["nope"])
    with pytest.raises(TypeError, match="above @kit.jit"):
        at.autotune(CONFIGS, key=["n"])(lambda x: x)
    with pytest.raises(ValueError, match="top_k"):
        Autotuner(add_kernel, CONFIGS, key=["n"], prune_configs_by={"topk": 2})
    tuner = Autotuner(add_kernel, CONFIGS, key=["n"])
    with pytest.raises(ValueError, match="BLOCK chosen by autotuning"):
        tuner[(1,)](*add_args(), BLOCK=128)
    with pytest.raises(ValueError, match="num_warps chosen by autotuning"):
        tuner[(1,)](*add_args(), num_warps=4)


# --------------------------------------------------------------------------- key logic
def test_key_ints_by_value_tensors_by_dtype(monkeypatch):
    tuner = Autotuner(add_kernel, CONFIGS, key=["n"])
    tuned = []
    orig = tuner._first_valid
    monkeypatch.setattr(tuner, "_first_valid", lambda *a: tuned.append(1) or orig(*a))
    x, y, out, n = add_args(1000)
    tuner[grid(n)](x, y, out, n)
    assert torch.allclose(out, x + y)
    tuner[grid(n)](*add_args(1000))            # other tensors, same dtypes and n: no tuning
    assert len(tuned) == 1
    tuner[grid(999)](*add_args(999))           # a new n: a new entry
    assert len(tuned) == 2
    x16 = add_args(1000, torch.float16)
    tuner[grid(1000)](*x16)                    # a new dtype: a new entry
    assert len(tuned) == 3
    assert set(tuner.cache) == {
        (1000, torch.float32, torch.float32, torch.float32),
        (999, torch.float32, torch.float32, torch.float32),
        (1000, torch.float16, torch.float16, torch.float16),
    }
    assert torch.allclose(x16[2].float(), (x16[0] + x16[1]).float())


def test_tensor_in_key_counts_by_dtype_and_other_ints_ignored():
    tuner = Autotuner(add_kernel, CONFIGS, key=["X"])
    tuner[grid(1000)](*add_args(1000))
    tuner[grid(64)](*add_args(64))             # n is not in the key
    assert list(tuner.cache) == [(torch.float32, torch.float32, torch.float32, None)]


def test_tuned_param_before_runtime_params_and_defaults():
    tuner = Autotuner(scale_kernel, [Config({"BLOCK": 64}), Config({"BLOCK": 128})],
                      key=["n"])
    x = torch.randn(300)
    out = torch.empty_like(x)
    tuner[grid(300)](x, out, 300)              # n is positional although BLOCK precedes it
    assert torch.allclose(out, 2 * x)
    tuner[grid(300)](x, out, 300, alpha=3.0)
    assert torch.allclose(out, 3 * x)
    tuner.run(x, out, n=300, alpha=0.5, grid=grid(300))
    assert torch.allclose(out, 0.5 * x)


# --------------------------------------------------------------------------- interpreter
def test_interpreter_first_valid_config_no_timing_no_record(cache_dir, capsys):
    bench = FakeBench({})
    bad = Config({"BLOCK": 100})               # not a power of two: does not compile
    tuner = Autotuner(add_kernel, [bad, *CONFIGS], key=["n"], do_bench=bench)
    x, y, out, n = add_args()
    tuner[grid(n)](x, y, out, n)
    assert torch.allclose(out, x + y)
    assert tuner.best_config == CONFIGS[0]
    assert "failed" in tuner.timings[next(iter(tuner.cache))][str(bad)]
    assert bench.calls == []
    assert not (cache_dir / "tuning").exists()
    assert capsys.readouterr().err == ""


def test_interpreter_no_valid_config():
    tuner = Autotuner(add_kernel, [Config({"BLOCK": 100}), Config({"BLOCK": 3})], key=["n"])
    with pytest.raises(AutotuneError, match="no config compiles"):
        tuner[(1,)](*add_args())


def test_single_config_is_used_without_tuning(fake_gpu):
    tuner = Autotuner(add_kernel, [Config({"BLOCK": 256})], key=["n"], do_bench=never)
    x, y, out, n = add_args()
    tuner[grid(n)](x, y, out, n)
    assert torch.allclose(out, x + y)


# --------------------------------------------------------------------------- pruning
def test_early_config_prune_function():
    seen = {}

    def prune(configs, named_args, **kw):
        seen.update(named_args)
        return [c for c in configs if c.kwargs["BLOCK"] >= 256]

    tuner = Autotuner(add_kernel, CONFIGS, key=["n"], prune_configs_by=prune)
    x, y, out, n = add_args()
    tuner[grid(n)](x, y, out, n)
    assert tuner.best_config == CONFIGS[1]
    assert seen["n"] == 1000 and seen["X"] is x
    assert torch.allclose(out, x + y)


def test_prune_dict_perf_model_top_k(fake_gpu):
    def model(X, Y, Out, n, BLOCK, num_warps):
        return {128: 3.0, 256: 1.0, 512: 2.0}[BLOCK]

    bench = FakeBench({128: 0.1, 256: 0.5, 512: 0.4})
    early = lambda configs, named, **kw: configs  # noqa: E731
    tuner = Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=bench,
                      prune_configs_by={"early_config_prune": early, "perf_model": model,
                                        "top_k": 2})
    assert tuner.prune_configs({"X": None, "Y": None, "Out": None, "n": 1}) == \
        [CONFIGS[1], CONFIGS[2]]
    x, y, out, n = add_args()
    tuner[grid(n)](x, y, out, n)
    assert sorted(bench.calls) == sorted([str(CONFIGS[1]), str(CONFIGS[2])])
    assert tuner.best_config == CONFIGS[2]     # the fastest of those timed
    frac = Autotuner(add_kernel, CONFIGS, key=["n"],
                     prune_configs_by={"perf_model": model, "top_k": 0.34})
    assert frac.prune_configs({"X": None, "Y": None, "Out": None, "n": 1}) == [CONFIGS[1]]


def test_prune_to_nothing_is_an_error():
    tuner = Autotuner(add_kernel, CONFIGS, key=["n"], prune_configs_by=lambda c, a, **k: [])
    with pytest.raises(AutotuneError, match="no configs"):
        tuner[(1,)](*add_args())


# --------------------------------------------------------------------------- persistence
def test_tuning_picks_fastest_and_persists(fake_gpu, cache_dir):
    bench = FakeBench({128: 0.30, 256: 0.10, 512: 0.20})
    tuner = Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=bench)
    x, y, out, n = add_args()
    tuner[grid(n)](x, y, out, n)
    assert torch.allclose(out, x + y)
    assert tuner.best_config == CONFIGS[1]
    assert sorted(bench.calls) == sorted(str(c) for c in CONFIGS)
    assert tuner.configs_timings == {CONFIGS[0]: 0.30, CONFIGS[1]: 0.10, CONFIGS[2]: 0.20}
    tuner[grid(n)](x, y, out, n)               # the hot path: no second timing
    assert len(bench.calls) == 3

    files = list((cache_dir / "tuning").rglob("*.json"))
    assert len(files) == 1
    rec = json.loads(files[0].read_text())
    assert rec["kernel"] == "add_kernel" and rec["gpu"] == FAKE.name
    assert rec["arch"] == "sm_90a" and rec["dep_hash"] == add_kernel.dep_hash
    assert rec["key"] == {"n": 1000}
    assert rec["dtypes"] == {"X": "float32", "Y": "float32", "Out": "float32"}
    assert rec["timings"] == {str(CONFIGS[0]): 0.30, str(CONFIGS[1]): 0.10,
                              str(CONFIGS[2]): 0.20}
    assert rec["winner"] == str(CONFIGS[1])
    assert not [p for p in files[0].parent.iterdir() if p.name.endswith(".tmp")]

    # A new process (a fresh tuner, nothing in memory) reuses the record: nothing timed.
    again = Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=never)
    again[grid(n)](x, y, out, n)
    assert again.best_config == CONFIGS[1]

    # Adding a config times only that one; it wins if faster.
    bench2 = FakeBench({1024: 0.05})
    more = Autotuner(add_kernel, [*CONFIGS, Config({"BLOCK": 1024}, num_warps=8)],
                     key=["n"], do_bench=bench2)
    more[grid(n)](x, y, out, n)
    assert bench2.calls == ["BLOCK=1024, num_warps=8"]
    assert more.best_config.kwargs["BLOCK"] == 1024
    rec = json.loads(files[0].read_text())
    assert len(rec["timings"]) == 4 and rec["winner"] == "BLOCK=1024, num_warps=8"

    # Removing configs: the winner is the fastest of the current list.
    fewer = Autotuner(add_kernel, [CONFIGS[0], CONFIGS[2]], key=["n"], do_bench=never)
    fewer[grid(n)](x, y, out, n)
    assert fewer.best_config == CONFIGS[2]


def test_record_keyed_by_gpu_key_and_source(fake_gpu, monkeypatch, cache_dir):
    bench = FakeBench({128: 0.3, 256: 0.1, 512: 0.2})
    Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=bench)[grid(1000)](*add_args(1000))
    assert len(bench.calls) == 3
    # another n, another dtype, another GPU: each is a new record
    Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=bench)[grid(999)](*add_args(999))
    Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=bench)[grid(1000)](
        *add_args(1000, torch.float16))
    monkeypatch.setattr(at, "_gpu_target", lambda args: Target("Other GPU", "sm_80", 166912, -1))
    Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=bench)[grid(1000)](*add_args(1000))
    assert len(bench.calls) == 12
    assert len(list((cache_dir / "tuning").rglob("*.json"))) == 4
    # another kernel source with the same name: its own record
    monkeypatch.setattr(add_kernel, "_dep_hash", "0" * 64)
    Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=bench)[grid(1000)](*add_args(1000))
    assert len(bench.calls) == 15


def test_failures_are_noted_and_kept(fake_gpu, monkeypatch, cache_dir):
    small = Target("Small GPU", "sm_90a", 256, -1)   # too little shared memory for 4 warps
    monkeypatch.setattr(at, "_gpu_target", lambda args: small)
    cfgs = [Config({"BLOCK": 1024}, num_warps=4), Config({"BLOCK": 100}, num_warps=1),
            Config({"BLOCK": 1024}, num_warps=1)]
    bench = FakeBench({1024: 0.2})
    tuner = Autotuner(rowsum, cfgs, key=["n"], do_bench=bench)
    x = torch.randn(8, 1000)
    out = torch.empty(8)
    tuner[(8,)](x, out, 1000)
    assert torch.allclose(out, x.sum(1), atol=1e-4)
    assert tuner.best_config == cfgs[2]
    assert bench.calls == [str(cfgs[2])]
    t = tuner.timings[next(iter(tuner.cache))]
    assert "shared memory" in t[str(cfgs[0])] and t[str(cfgs[0])].startswith("failed")
    assert "power of two" in t[str(cfgs[1])]
    rec = json.loads(next((cache_dir / "tuning").rglob("*.json")).read_text())
    # (the shared-memory limit is OutOfResources, a CompileError as in Triton)
    assert rec["timings"][str(cfgs[0])].startswith("failed: OutOfResources")
    again = Autotuner(rowsum, cfgs, key=["n"], do_bench=never)   # failures are not retried
    again[(8,)](x, out, 1000)
    assert again.best_config == cfgs[2]


def test_failure_while_timing_is_raised_not_persisted(fake_gpu, cache_dir):
    """An out-of-memory while timing is not the config's failure (Triton does not skip a
    config for it either): tuning stops, and nothing half-tuned is written
    (tests/test_autotune_drops.py has the rest of what is and is not skipped)."""
    def flaky(fn):
        if fn.config.kwargs["BLOCK"] == 256:
            raise torch.OutOfMemoryError("fake out of memory")
        return {128: 0.3, 512: 0.2}[fn.config.kwargs["BLOCK"]]

    tuner = Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=flaky)
    with pytest.raises(torch.OutOfMemoryError):
        tuner[grid(1000)](*add_args())
    assert not list((cache_dir / "tuning").rglob("*.json"))
    bench = FakeBench({128: 0.3, 256: 0.01, 512: 0.2})
    again = Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=bench)
    again[grid(1000)](*add_args())
    assert len(bench.calls) == 3 and again.best_config == CONFIGS[1]


def test_all_fail_raises_the_users_error(fake_gpu):
    def broken(fn):
        raise RuntimeError("boom")

    tuner = Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=broken)
    with pytest.raises(RuntimeError, match="boom"):
        tuner[grid(1000)](*add_args())


def test_cache_disabled_or_cache_results_off_writes_nothing(fake_gpu, cache_dir, monkeypatch):
    Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=FakeBench({128: 1, 256: 2, 512: 3}),
              cache_results=False)[grid(1000)](*add_args())
    monkeypatch.setenv("KITJIT_CACHE_DISABLE", "1")
    Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=FakeBench({128: 1, 256: 2, 512: 3})
              )[grid(1000)](*add_args())
    assert not (cache_dir / "tuning").exists()


def test_corrupt_record_is_retuned(fake_gpu, cache_dir):
    Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=FakeBench({128: 1, 256: 2, 512: 3})
              )[grid(1000)](*add_args())
    path = next((cache_dir / "tuning").rglob("*.json"))
    path.write_text("{not json")
    bench = FakeBench({128: 3, 256: 2, 512: 1})
    tuner = Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=bench)
    tuner[grid(1000)](*add_args())
    assert len(bench.calls) == 3 and tuner.best_config == CONFIGS[2]
    assert json.loads(path.read_text())["winner"] == str(CONFIGS[2])


def test_second_process_reuses_record(cache_dir):
    script = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {ROOT!r})
        import importlib
        import kitjit as kit
        at = importlib.import_module("kitjit.autotune")
        at._gpu_target = lambda args: at.Target("Fake GPU 80GB", "sm_90a", 232448, -1)
        mode = sys.argv[1]
        calls = []
        def bench(fn):
            if mode == "reuse":
                raise AssertionError("timed in the second process")
            calls.append(str(fn.config))
            return {{128: 0.3, 256: 0.1}}[fn.config.kwargs["BLOCK"]]
        @at.autotune([at.Config({{"BLOCK": 128}}), at.Config({{"BLOCK": 256}})], key=["n"],
                     do_bench=bench)
        @kit.jit
        def add_kernel(X, Y, Out, n, BLOCK: kit.constexpr):
            offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
            mask = offs < n
            kit.store(Out + offs, kit.load(X + offs, mask=mask) + kit.load(Y + offs, mask=mask),
                      mask=mask)
        x = torch.randn(500)
        out = torch.empty_like(x)
        add_kernel[lambda m: (kit.cdiv(500, m["BLOCK"]),)](x, x, out, 500)
        assert torch.allclose(out, 2 * x)
        print(mode, add_kernel.best_config, len(calls))
    """)
    path = cache_dir.parent / "proc.py"
    path.write_text(script)
    # KITJIT_PRINT_AUTOTUNING: a config that failed says why in stderr (this test failed
    # once in a full CPU run with BLOCK=256 not timed, and never alone: a failure that was
    # not the config's own, dropped silently then; now retried or raised, and any skip warns:
    # tests/test_autotune_drops.py)
    env = {**os.environ, "KITJIT_CACHE_DIR": str(cache_dir), "KITJIT_INTERPRET": "1",
           "KITJIT_PRINT_AUTOTUNING": "1"}
    outs = [subprocess.run([sys.executable, str(path), mode], env=env, capture_output=True,
                           text=True, timeout=120) for mode in ("tune", "reuse")]
    for r in outs:
        assert r.returncode == 0, r.stderr
    assert outs[0].stdout.strip().splitlines()[-1] == "tune BLOCK=256, num_warps=4 2", \
        outs[0].stdout + outs[0].stderr
    assert outs[1].stdout.strip().splitlines()[-1] == "reuse BLOCK=256, num_warps=4 0", \
        outs[1].stdout + outs[1].stderr


# --------------------------------------------------------------------------- writes inputs
def test_restore_value_between_runs_and_after(fake_gpu):
    bench = FakeBench({128: 0.3, 256: 0.1, 512: 0.2}, calls=3)   # runs the kernel 3 times
    tuner = Autotuner(acc_kernel, CONFIGS, key=["n"], do_bench=bench, restore_value=["Out"])
    x = torch.randn(1000)
    out = torch.ones(1000)
    tuner[grid(1000)](x, out, 1000)
    assert torch.allclose(out, 1 + x)          # once, as if never tuned


def test_reset_to_zero(fake_gpu):
    seen = []

    def bench(fn):
        fn()
        seen.append(out.clone())
        fn()
        seen.append(out.clone())
        return {128: 0.3, 256: 0.1, 512: 0.2}[fn.config.kwargs["BLOCK"]]

    tuner = Autotuner(acc_kernel, CONFIGS, key=["n"], do_bench=bench, reset_to_zero=["Out"])
    x = torch.randn(1000)
    out = torch.zeros(1000)
    tuner[grid(1000)](x, out, 1000)
    assert all(torch.allclose(s, x) for s in seen)   # zeroed before every timed run
    assert torch.allclose(out, x)


def test_pre_hook_runs_before_launches(fake_gpu):
    hooks = []
    cfgs = [Config({"BLOCK": 128}, pre_hook=lambda a: hooks.append(("a", a["BLOCK"]))),
            Config({"BLOCK": 256}, pre_hook=lambda a: hooks.append(("b", a["BLOCK"])))]
    tuner = Autotuner(add_kernel, cfgs, key=["n"],
                      do_bench=lambda fn: fn() or {128: 0.1, 256: 0.2}[fn.config.kwargs["BLOCK"]])
    x, y, out, n = add_args()
    tuner[grid(n)](x, y, out, n)
    assert hooks == [("a", 128), ("b", 256), ("a", 128)]   # timed a, timed b, real launch a
    assert torch.allclose(out, x + y)


# --------------------------------------------------------------------------- terminal output
def test_progress_silent_without_tty(fake_gpu, capsys):
    Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=FakeBench({128: 1, 256: 2, 512: 3})
              )[grid(1000)](*add_args())
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_line_on_a_tty(fake_gpu, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")   # the line is cut to the terminal's width
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=FakeBench({128: 0.3, 256: 0.1, 512: 0.2})
              )[grid(1000)](*add_args())
    text = tty.getvalue()
    assert "\r" in text and "kitjit autotune add_kernel: 3/3 configs" in text
    assert "best 0.1000 ms (BLOCK=256, num_warps=2)" in text
    assert text.endswith("\r\033[K")          # the line is cleared at the end


def test_print_autotuning(fake_gpu, monkeypatch, capsys):
    monkeypatch.setenv("KITJIT_PRINT_AUTOTUNING", "1")
    Autotuner(add_kernel, [*CONFIGS, Config({"BLOCK": 100})], key=["n"],
              do_bench=FakeBench({128: 0.3, 256: 0.1, 512: 0.2}))[grid(1000)](*add_args())
    out = capsys.readouterr().out
    head, *rows = out.strip().splitlines()
    assert head.startswith("kitjit autotune: add_kernel [n=1000; X,Y,Out: float32] on Fake GPU")
    assert "BLOCK=256, num_warps=2, 0.1000 ms" in head and "timed 4 of 4" in head
    assert any(r.split()[0] == "*" and "BLOCK=256" in r for r in rows)
    assert any("BLOCK=512" in r and "0.2000" in r for r in rows)
    assert any("BLOCK=100" in r and "failed: CompileError" in r for r in rows)


def test_print_autotuning_from_disk_and_interpreter(fake_gpu, monkeypatch, capsys):
    Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=FakeBench({128: 0.3, 256: 0.1, 512: 0.2})
              )[grid(1000)](*add_args())
    monkeypatch.setenv("KITJIT_PRINT_AUTOTUNING", "1")
    Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=never)[grid(1000)](*add_args())
    assert "timed 0 of 3 configs, 3 from disk" in capsys.readouterr().out
    monkeypatch.setattr(at, "_gpu_target", lambda args: None)
    Autotuner(add_kernel, CONFIGS, key=["n"])[grid(1000)](*add_args())
    assert "interpreter: first valid config, not timed" in capsys.readouterr().out


# --------------------------------------------------------------------------- records
def test_tuning_records_and_format(fake_gpu, cache_dir):
    assert at.tuning_records(cache_dir) == []
    assert at.format_tuning_records([]) == "no tuning records"
    Autotuner(add_kernel, [*CONFIGS, Config({"BLOCK": 100})], key=["n"],
              do_bench=FakeBench({128: 0.3, 256: 0.1, 512: 0.2}))[grid(1000)](*add_args())
    recs = at.tuning_records(cache_dir)
    assert len(recs) == 1 and recs[0]["winner"] == "BLOCK=256, num_warps=2"
    table = at.format_tuning_records(recs)
    header, row = table.splitlines()
    assert header.split() == ["KERNEL", "KEY", "GPU", "WINNER", "MS", "TIMED"]
    assert row.startswith("add_kernel") and "n=1000; X,Y,Out: float32" in row
    assert "Fake GPU 80GB" in row and "0.1000" in row and "3/4" in row
    detail = at.format_tuning_records(recs, detail=True)
    lines = detail.splitlines()
    assert "add_kernel [n=1000; X,Y,Out: float32] on Fake GPU 80GB (sm_90a)" in lines[0]
    order = [ln for ln in lines if "BLOCK=" in ln and "num_warps" in ln][1:]
    assert [ln.split()[-1] for ln in order[:3]] == ["0.1000", "0.2000", "0.3000"]
    assert "failed" in order[3]


def test_chosen_lists_keys():
    tuner = Autotuner(add_kernel, CONFIGS, key=["n"])
    tuner[grid(1000)](*add_args())
    assert tuner.chosen() == [{"kernel": "add_kernel", "key": "n=1000; X,Y,Out: float32",
                               "config": str(CONFIGS[0]), "ms": None}]


# --------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_tuning_picks_the_faster_config(cache_dir):
    n = 1 << 26
    slow = Config({"BLOCK": 32}, num_warps=1)
    fast = Config({"BLOCK": 2048}, num_warps=8)
    tuner = Autotuner(add_kernel, [slow, fast], key=["n"], warmup=5, rep=20)
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    tuner[grid(n)](x, y, out, n)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)
    t = tuner.timings[next(iter(tuner.cache))]
    assert tuner.best_config == fast, t
    assert t[str(slow)] > 2 * t[str(fast)], t
    rec = at.tuning_records(cache_dir)
    assert len(rec) == 1 and rec[0]["winner"] == str(fast)
    assert rec[0]["gpu"] == torch.cuda.get_device_name()
    again = Autotuner(add_kernel, [slow, fast], key=["n"], do_bench=never)
    out.zero_()
    again[grid(n)](x, y, out, n)
    torch.cuda.synchronize()
    assert again.best_config == fast and torch.equal(out, x + y)


@pytest.mark.gpu
def test_gpu_first_tuned_launch_inside_graph_capture_says_warm_up(cache_dir):
    """Tuning inside torch.cuda.graph would time configs into the graph: one clear error;
    after a warm-up launch outside, the capture records the chosen config and replays."""
    n = 4096
    tuner = Autotuner(add_kernel, CONFIGS, key=["n"], warmup=1, rep=2, cache_results=False)
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with pytest.raises(AutotuneError, match="launch once before capturing"):
        with torch.cuda.graph(g):
            tuner[grid(n)](x, y, out, n)
    torch.cuda.synchronize()
    tuner[grid(n)](x, y, out, n)  # warm-up: tunes outside the graph
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        tuner[grid(n)](x, y, out, n)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)


def test_first_tuned_launch_during_capture_is_one_clear_error(fake_gpu, cache_dir,
                                                              monkeypatch):
    """The capture check runs on the tuning miss only: nothing timed, nothing recorded; a
    tuned key (or one whose record is on disk) launches during capture as usual."""
    launcher = importlib.import_module("kitjit.launcher")
    monkeypatch.setattr(launcher, "_capturing", lambda: True)
    tuner = Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=never)
    x, y, out, n = add_args()
    with pytest.raises(AutotuneError, match="launch once before capturing") as ei:
        tuner[grid(n)](x, y, out, n)
    assert "n=1000" in str(ei.value) and "3 configs" in str(ei.value)
    assert not tuner.cache and at.tuning_records(cache_dir) == []
    monkeypatch.setattr(launcher, "_capturing", lambda: False)
    bench = FakeBench({128: 0.3, 256: 0.1, 512: 0.2})
    Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=bench)[grid(n)](x, y, out, n)
    monkeypatch.setattr(launcher, "_capturing", lambda: True)
    again = Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=never)  # from the record
    out.fill_(float("nan"))
    again[grid(n)](x, y, out, n)
    assert again.best_config == CONFIGS[1] and torch.allclose(out, x + y)


# --------------------------------------------------------------------------- CLI
def test_cli_shows_tuning_records(fake_gpu, cache_dir, capsys):
    from kitjit.cli import main

    Autotuner(add_kernel, CONFIGS, key=["n"], do_bench=FakeBench({128: 0.3, 256: 0.1, 512: 0.2})
              )[grid(1000)](*add_args())
    capsys.readouterr()
    base = ["cache", "--cache-dir", str(cache_dir)]
    assert main([*base, "list"]) == 0
    out = capsys.readouterr().out
    entries, tuning = out.split("tuning records:")
    assert entries.count("add_kernel") == 3       # the sm_90a compiles of the three configs
    assert "n=1000; X,Y,Out: float32" in tuning and "BLOCK=256, num_warps=2" in tuning
    assert "0.1000" in tuning and "3/3" in tuning

    assert main([*base, "list", "--tuning", "--json"]) == 0
    recs = json.loads(capsys.readouterr().out)
    assert len(recs) == 1 and recs[0]["winner"] == "BLOCK=256, num_warps=2"
    assert main([*base, "list", "--tuning", "--name", "nothing"]) == 0
    assert capsys.readouterr().out.strip() == "no tuning records"

    assert main([*base, "list", "--json"]) == 0
    key = json.loads(capsys.readouterr().out)[0]["key"][:12]
    assert main([*base, "show", key]) == 0
    out = capsys.readouterr().out
    assert "tuning:" in out and "winner BLOCK=256, num_warps=2 (0.1000 ms)" in out
    assert main([*base, "show", "--json", key]) == 0
    assert json.loads(capsys.readouterr().out)["tuning"][0]["kernel"] == "add_kernel"

    # by kernel name: three entries, so the tuning records (and a note why)
    assert main([*base, "show", "add_kernel"]) == 0
    captured = capsys.readouterr()
    assert "3 entries" in captured.err and "0.3000" in captured.out
    assert main([*base, "show", "no_such_kernel"]) == 1

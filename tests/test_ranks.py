"""N processes (torch.distributed ranks on one machine) that launch the same kernel compile it
once and autotune it once (kitjit.cache_lock); a stale lock blocks nobody, a holder past the
timeout lets the others go on with one warning, and `kitjit cache clear` removes the stale
lock files and nothing else.

Compiles need no GPU: `JITFunction.compile` for sm_90a; the autotuner sees a fake GPU
(`_gpu_target` replaced, do_bench returning made-up times), as in tests/test_autotune.py.
"""

from __future__ import annotations

import importlib
import os
import pathlib
import subprocess
import sys
import time
import uuid
import warnings

import child_procs
import pytest
import torch

import kitjit as kit
from kitjit.cache import KernelCache, KitCacheWarning
from kitjit.cli import main as cli_main

fcntl = pytest.importorskip("fcntl")

N_PROCS = 4
SPECS = [("*fp32", 16), ("*fp32", 16), ("i32", 1)]
CONFIGS_BLOCKS = (32, 64, 128)


@kit.jit
def double_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    kit.store(Out + offs, kit.load(X + offs, mask=mask) * 2.0, mask=mask)


def _count_ptx(counter: pathlib.Path, delay: float) -> None:
    """Make every PTX generation in this process leave a file in `counter` (and take
    `delay` seconds longer, so that racing processes overlap)."""
    from kitjit.backend import compiler

    orig = compiler.llvm_to_ptx

    def counting(*a, **k):
        counter.mkdir(parents=True, exist_ok=True)
        (counter / f"{os.getpid()}-{uuid.uuid4().hex[:8]}").write_text("")
        time.sleep(delay)
        return orig(*a, **k)

    compiler.llvm_to_ptx = counting


def _rank(root: str, work: str, barrier, results) -> None:
    """One 'rank': compile double_kernel, then autotune it over 3 configs, both at once
    with the other ranks."""
    os.environ["KITJIT_CACHE_DIR"] = root
    os.environ.pop("KITJIT_COMPILE_LOCK_TIMEOUT", None)
    work_dir = pathlib.Path(work)
    at = importlib.import_module("kitjit.autotune")
    at._gpu_target = lambda args: at.Target("Fake GPU 80GB", "sm_90a", 232448, -1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _count_ptx(work_dir / "compiles", 0.3)
        barrier.wait()
        ck = double_kernel.compile(SPECS, (256,), 4, "sm_90a")
        cubin = ck.asm["cubin"]

        def bench(fn):
            timed = work_dir / "timed"
            timed.mkdir(exist_ok=True)
            (timed / f"{os.getpid()}-{fn.config}-{uuid.uuid4().hex[:8]}").write_text("")
            time.sleep(0.2)
            return {32: 0.3, 64: 0.1, 128: 0.2}[fn.config.kwargs["BLOCK"]]

        tuner = at.autotune([at.Config({"BLOCK": b}, num_warps=1) for b in CONFIGS_BLOCKS],
                            key=["n"], do_bench=bench)(double_kernel)
        x = torch.randn(100)
        out = torch.full_like(x, float("nan"))
        barrier.wait()
        tuner[lambda m: (kit.cdiv(100, m["BLOCK"]),)](x, out, 100)
        ok = bool(torch.equal(out, 2 * x))
    results.put((os.getpid(), cubin, str(tuner.best_config), ok,
                 [str(w.message) for w in caught]))


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Run N_PROCS ranks (tests/child_procs.py) once for the tests that read what they did."""
    tmp = tmp_path_factory.mktemp("ranks")
    root, work = tmp / "cache", tmp / "work"
    work.mkdir()
    ctx = child_procs.Children()
    barrier = ctx.Barrier(N_PROCS)
    results = ctx.Queue()
    procs = [ctx.Process(_rank, (str(root), str(work), barrier, results))
             for _ in range(N_PROCS)]
    for p in procs:
        p.start()
    out = [results.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        if p.is_alive():
            p.kill()
    assert [p.exitcode for p in procs] == [0] * N_PROCS
    return root, work, out


def _count(d: pathlib.Path) -> int:
    return len(list(d.iterdir())) if d.is_dir() else 0


def test_ranks_compile_once(ranks):
    root, work, out = ranks
    compiles = sorted(p.name.split("-")[0] for p in (work / "compiles").iterdir())
    # 1 for double_kernel at BLOCK=256, then 1 per autotuning config: each key once in all
    assert len(compiles) == 1 + len(CONFIGS_BLOCKS), compiles
    assert len({cubin for _, cubin, *_ in out}) == 1
    assert all(not msgs for *_, msgs in out), [m for *_, m in out]
    # the holders deleted their lock files: nothing but entries, the tag and the records
    locks = [p for p in root.rglob(".*.lock")]
    assert locks == []
    assert len(KernelCache(root).entries()) == 1 + len(CONFIGS_BLOCKS)


def test_ranks_autotune_once(ranks):
    _, work, out = ranks
    timed = sorted(p.name.split("-", 1)[1].rsplit("-", 1)[0] for p in (work / "timed").iterdir())
    assert timed == sorted(f"BLOCK={b}, num_warps=1" for b in CONFIGS_BLOCKS)
    assert len({p.name.split("-")[0] for p in (work / "timed").iterdir()}) == 1
    assert {best for _, _, best, _, _ in out} == {"BLOCK=64, num_warps=1"}
    assert all(ok for _, _, _, ok, _ in out)


# --------------------------------------------------------------------------- stale / slow
class Holder:
    """Another process that holds the lock at `path` until killed."""

    def __init__(self, path: pathlib.Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        code = ("import fcntl, os, sys, time\n"
                "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
                "fcntl.flock(fd, fcntl.LOCK_EX)\n"
                "print('held', flush=True)\n"
                "time.sleep(120)\n")
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(path)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "held"

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


def _key() -> str:
    return double_kernel.cache_key(SPECS, (256,), 4, "sm_90a")


def _lock_path(key: str) -> pathlib.Path:
    return KernelCache().root / key[:2] / f".{key}.lock"


def test_stale_lock_does_not_block(monkeypatch):
    """A lock file whose holder died (flock released with it) costs nothing."""
    monkeypatch.setenv("KITJIT_COMPILE_LOCK_TIMEOUT", "30")
    key = _key()
    holder = Holder(_lock_path(key))
    holder.kill()
    assert _lock_path(key).exists()
    t0 = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        double_kernel.compile(SPECS, (256,), 4, "sm_90a")
    assert time.monotonic() - t0 < 20
    assert not _lock_path(key).exists()  # taken, then deleted by this holder
    assert KernelCache().get(key) is not None


def test_holder_past_timeout_lets_waiters_compile(monkeypatch):
    """Two waiters (threads: each opens the lock file itself, so flock excludes them as it
    would two processes) each give up after 1 s with one warning, and compile."""
    import threading

    monkeypatch.setenv("KITJIT_COMPILE_LOCK_TIMEOUT", "1")
    key = _key()
    holder = Holder(_lock_path(key))
    cubins, errors = [], []

    def waiter():
        try:
            cubins.append(double_kernel.compile(SPECS, (256,), 4, "sm_90a").asm["cubin"])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    try:
        t0 = time.monotonic()
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            threads = [threading.Thread(target=waiter) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        waited = time.monotonic() - t0
    finally:
        holder.kill()
    assert not errors, errors
    msgs = [str(w.message) for w in rec]
    assert len(msgs) == 2 and all(w.category is KitCacheWarning for w in rec), msgs
    assert all(m.startswith("kitjit: waited 1 s for another process compiling kernel "
                            "double_kernel") for m in msgs), msgs
    assert waited >= 1.0
    assert len(cubins) == 2 and cubins[0] == cubins[1]
    assert KernelCache().get(key) is not None
    assert _lock_path(key).exists()  # not ours: left for `cache clear`


def test_timeout_zero_or_bad(monkeypatch):
    from kitjit import cache_lock

    monkeypatch.setenv("KITJIT_COMPILE_LOCK_TIMEOUT", "0")
    with KernelCache().lock("ab" * 8) as lk:
        assert not lk.held
    monkeypatch.setenv("KITJIT_COMPILE_LOCK_TIMEOUT", "soon")
    monkeypatch.setattr(cache_lock, "_bad_timeout", set())
    with pytest.warns(KitCacheWarning, match="KITJIT_COMPILE_LOCK_TIMEOUT"):
        assert cache_lock.lock_timeout() == cache_lock.DEFAULT_TIMEOUT_S


def test_threads_of_one_process_exclude_each_other():
    """flock belongs to an open file: two KeyLocks on one path never hold together."""
    import threading

    kc = KernelCache()
    inside, peak = [0], [0]

    def work():
        with kc.lock("cd" * 8) as lk:
            assert lk.held
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
            time.sleep(0.05)
            inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 1


# --------------------------------------------------------------------------- clear
def test_cache_clear_removes_stale_locks_only(tmp_path, capsys):
    kc = KernelCache()
    key = _key()
    double_kernel.compile(SPECS, (256,), 4, "sm_90a")
    shard = kc.root / key[:2]
    stale = shard / f".{key}.lock"
    stale.write_text("")
    other_key = "ab" + "0" * 46
    held_path = kc.root / "ab" / f".{other_key}.lock"
    holder = Holder(held_path)
    tdir = kc.tuning_dir / "double_kernel"
    tdir.mkdir(parents=True)
    tlock = tdir / f".{'f' * 32}.lock"
    tlock.write_text("")
    outside = tmp_path / "outside.txt"
    outside.write_text("mine")
    keep = [shard / "notes.txt", shard / f".{key[:10]}x.lock",   # not empty: not ours
            tdir / ".notes.lock", kc.root / ".other.lock"]
    keep[0].write_text("mine")
    keep[1].write_text("mine")
    keep[2].write_text("")
    keep[3].write_text("")
    link = shard / f".{key[:6]}0000.lock"
    link.symlink_to(outside)
    try:
        # lock files never show up as entries
        assert [e.key for e in kc.entries()] == [key]
        assert cli_main(["cache", "list"]) == 0
        assert cli_main(["cache", "clear", "--yes"]) == 0
        assert not stale.exists() and not tlock.exists()
        assert held_path.exists()  # someone compiles under it right now
        assert all(p.exists() for p in keep) and link.is_symlink()
        assert outside.read_text() == "mine"
        assert kc.entries() == []
    finally:
        holder.kill()
    assert cli_main(["cache", "clear", "--yes"]) == 0
    assert not held_path.exists()  # its holder is gone: stale now
    capsys.readouterr()

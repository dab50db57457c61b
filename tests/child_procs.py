"""Child processes for the tests that race several processes (tests/test_cache.py,
tests/test_ranks.py), started cheaply.

A "spawn" child imports kitjit and torch afresh, about 3 s of CPU each: the 14 racing
children cost ~40 s of the CPU suite. A "forkserver" child is forked from one server process
that imported them once per test session (per xdist worker), so it starts in milliseconds,
and it is as clean as a spawned one: the server is single-threaded and has run nothing,
never the pytest process itself (which has torch's threads). As with spawn, the child runs
with the environment the parent has when it starts the child (the server's is older).
"""

from __future__ import annotations

import multiprocessing as mp
import os

#: what the server imports once (multiprocessing skips a module that is not installed: the
#: CI jobs without torch)
PRELOAD = ["kitjit", "kitjit.cache", "torch"]


def _context() -> mp.context.BaseContext:
    if "forkserver" not in mp.get_all_start_methods():  # (Windows)
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def _run(env: dict, target, args: tuple) -> None:
    os.environ.clear()
    os.environ.update(env)
    target(*args)


class Children:
    """Barrier, Queue and Process of the fast context; a Process runs `target(*args)` in
    the environment the parent has now. The target must be importable by name (a
    module-level function of a test module: tests/ is on sys.path under pytest)."""

    def __init__(self):
        self.ctx = _context()

    def Barrier(self, parties: int):  # noqa: N802 - multiprocessing's names
        return self.ctx.Barrier(parties)

    def Queue(self):  # noqa: N802
        return self.ctx.Queue()

    def Process(self, target, args: tuple = ()):  # noqa: N802
        return self.ctx.Process(target=_run, args=(dict(os.environ), target, args))

"""Programs that signal each other, run together: the scheduler behind kit.signal_wait.

A kernel whose body may wait on a signal cannot run program after program (a program that
waits for a later one would wait forever), so each program runs as a coroutine (the
generator `_Compiler.gblock` makes of the body, as warpgroup roles do) and `run_together`
resumes them round robin, each until it blocks. Under `kitjit.distributed.simulate` the
launches of every rank join one schedule, each with its own memory view and `_Ctx`, so a
rank's wait yields to the other ranks' programs. The order interleaves ranks program by
program (rank 0's program 0, rank 1's program 0, rank 0's program 1, ...), and a wait is
only passed when its value is in memory: a reader that does not wait sees the poison a
test left in the buffer. When a whole round changes no memory, completes no mbarrier phase
and ends no program, `DeadlockError` lists every blocked program and its wait.
"""

from __future__ import annotations

import linecache
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kitjit.ir.core import Function

from .errors import DeadlockError
from .memory import _Memory
from .sync import _Ctx

# the launches a `kitjit.distributed.simulate` world collects (None: run at once)
COLLECTING: list | None = None
# names of memory for deadlock reports: (first address, last address + 1, name)
NAMES: list[tuple[int, int, str]] = []


@dataclass
class _Launch:
    fn: Function
    grid: tuple[int, int, int]
    args: list
    label: str = ""
    mem: Any = None
    extra: list = field(default_factory=list)  # tensors peers may point into


def needs_schedule(fn: Function) -> bool:
    """Whether a body may wait for another program (a kit.signal_wait anywhere in it)."""
    return any(op.name == "signal_wait" for op in fn.walk())


def _program_order(launches: list[_Launch]) -> list[tuple[int, tuple[int, int, int]]]:
    per = []
    for li, la in enumerate(launches):
        gx, gy, gz = la.grid
        per.append([(li, (x, y, z)) for z in range(gz) for y in range(gy) for x in range(gx)])
    out = []
    for k in range(max((len(p) for p in per), default=0)):
        out += [p[k] for p in per if k < len(p)]
    return out


def run_together(launches: list[_Launch]) -> None:
    """Run every program of every launch as coroutines until all end (or none can move)."""
    from .compiler import _Compiler, _mma_waits

    setups = []
    try:
        for la in launches:
            mem = la.mem = _Memory(la.fn, la.args)
            mem.add_tensors(la.extra)
            ctx = _Ctx(la.grid)
            comp = _Compiler(mem, ctx, _mma_waits(la.fn), int(la.fn.attrs.get("num_warps", 4)))
            ctx.roles[0] = comp.role
            body = comp.gblock(la.fn.body)
            base = {v.id: x for v, x in zip(la.fn.args, mem.values)}
            if la.grid[0] * la.grid[1] * la.grid[2]:
                for h in comp.hoisted:
                    h(base)
            setups.append((ctx, body, base))
        with np.errstate(all="ignore"):
            _schedule(launches, setups)
    finally:
        for la in launches:
            if la.mem is not None:
                la.mem.write_back()


def _schedule(launches: list[_Launch], setups: list) -> None:
    tasks = []
    for li, pid in _program_order(launches):
        ctx, body, base = setups[li]
        ctx.start(pid)
        env = dict(base)
        tasks.append([li, pid, body(env), dict(ctx.__dict__), None])

    def progress_mark() -> int:
        return sum(la.mem.version for la in launches)

    while tasks:
        before = progress_mark()
        moved = False
        for t in list(tasks):
            li, pid, gen, state, _ = t
            ctx = setups[li][0]
            ctx.__dict__.update(state)
            events = ctx.events
            try:
                t[4] = next(gen)
            except StopIteration:
                tasks.remove(t)
                moved = True
            moved = moved or ctx.events != events
            t[3] = dict(ctx.__dict__)
        if tasks and not moved and progress_mark() == before:
            raise _deadlock(launches, setups, tasks)


def _name(addr: int) -> str:
    for lo, hi, name in NAMES:
        if lo <= addr < hi:
            return f"{name} (byte {addr - lo})"
    return f"address {addr:#x}"


def _deadlock(launches: list[_Launch], setups: list, tasks: list) -> DeadlockError:
    many = len(launches) > 1
    msg = ("deadlock: every program that has not ended waits, and a whole round of them "
           "changed nothing in memory; on the GPU this would hang")
    shown = 0
    for li, pid, _, _, wait in tasks:
        who = (f"{launches[li].label or f'launch {li}'} " if many else "") + f"program {pid}"
        for w in (wait.leaves() if wait is not None else []):
            shown += 1
            if shown > 8:
                break
            loc = w.op.loc
            at = f"at {loc}" if loc is not None else "(no source location)"
            if hasattr(w, "addr"):
                what = (f"waits for {_name(w.addr)} to be {w.cmp} {w.want}; it holds "
                        f"{w.read()}")
            else:
                what = f"waits for {w.bar.name} to complete phase {w.bar.phase}"
            msg += f"\n  {who} {at} {what}"
            src = linecache.getline(loc.file, loc.line).strip() if loc else ""
            if src:
                msg += f"\n      {src}"
            for where in w.loops:
                msg += f"\n      {where}"
    if shown > 8:
        msg += f"\n  ... ({len(tasks)} programs wait in all)"
    return DeadlockError(msg + "\n  hint: every signal_wait needs a signal_set / "
                         "signal_add of that value by a program that does not itself wait "
                         "for the waiter (check the rank, the slot and the value)")


def collect_or_run(launch: _Launch) -> bool:
    """Under a simulated world: keep the launch for `run_together` (True). Else False."""
    if COLLECTING is None:
        return False
    COLLECTING.append(launch)
    return True


__all__ = ["run_together", "needs_schedule", "collect_or_run", "Iterator"]

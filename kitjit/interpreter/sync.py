"""How the programs of a kernel synchronize, and what the interpreter checks about it.

mbarriers (`_MBar`) keep their PTX state; roles (`_Role`) run as coroutines that `_par`
schedules round robin, each handing back a `_Wait` (or a `_Stuck` group) where it blocks;
`_deadlock` describes a program in which every role waits. `_Ctx` holds what a running
program knows: its id, the MMAs and TMA copies in flight, and the vector clocks and shadow
state of shared memory from which it detects races (`RaceError`).
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Iterator

import numpy as np

from kitjit.ir.core import Op

from .errors import DeadlockError, MBarrierError, RaceError, _at, _where


# ----------------------------------------------------------------------------- roles, mbarriers
class _Role:
    """Who runs a region: warpgroups first .. first + count - 1; `key` tells roles apart
    (0: the whole CTA, outside roles)."""

    __slots__ = ("first", "count", "key")

    def __init__(self, first: int, count: int, key: int):
        self.first, self.count, self.key = first, count, key

    def __str__(self) -> str:
        if self.count == 1:
            return f"warpgroup {self.first}"
        return f"warpgroups {self.first}-{self.first + self.count - 1}"


class _MBar:
    """One mbarrier's state: arrivals still expected in the current phase, the transaction
    byte count (announced by arrive.expect_tx, taken off by landing TMA copies), and how
    many phases have completed (the current phase's parity is `phase & 1`)."""

    __slots__ = ("name", "init", "pending", "tx", "phase", "released", "completed",
                 "auto_phase", "c_released", "c_completed")

    def __init__(self, name: str, init: int):
        self.name, self.init = name, init
        self.pending, self.tx, self.phase = init, 0, 0
        self.auto_phase = 0  # the parity an `auto_phase` mbar_wait waits for next
        # vector clocks (see _Ctx): what the arrivals of the current phase release, and
        # what a wait that sees a completed phase acquires
        self.released: dict = {}
        self.completed: dict = {}
        # the same across the CTAs of a cluster (interpreter/cluster.py): per-CTA clocks
        # released by remote arrivals in this phase, and acquired by a completed wait
        self.c_released: list[int] | None = None
        self.c_completed: list[int] | None = None

    def done(self, parity: int) -> bool:
        """try_wait.parity: has the phase of this parity completed (most recently)?"""
        return (self.phase & 1) != parity

    def arrive(self, ctx: _Ctx, op: Op, key: int, n: int = 1, tx: int = 0) -> None:
        """`n` arrivals by role `key` (releasing what it did so far), announcing `tx` bytes."""
        ctx.release(key, self)
        self.tx += tx
        for _ in range(n):
            if self.pending == 0:  # only while TMA bytes are outstanding
                ctx.shape, ctx.lanes_total = (), 1
                raise MBarrierError(
                    _where(op, ctx, "too many arrivals on an mbarrier") +
                    f"\n  {self.name} expects {self.init} arrival{'s' if self.init != 1 else ''}"
                    f" per phase and has had them in phase {self.phase}, which still waits "
                    f"for {self.tx} bytes of TMA copies: on the GPU this arrival is undefined "
                    "behaviour\n  hint: TMA loads written in a row on one barrier share one "
                    "arrival; each run of them that something else splits (an `if`, a wait, "
                    "an MMA) arrives once, so wait in between or give the barrier "
                    "arrivals=<runs>")
            self.pending -= 1
            self._check(ctx)

    def complete_tx(self, ctx: _Ctx, nbytes: int) -> None:
        self.tx -= nbytes
        self._check(ctx)

    def _check(self, ctx: _Ctx) -> None:
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.init
            ctx.events += 1
            _join(self.completed, self.released)
            self.completed[self] = self.phase
            self.released = {}
            if self.c_released is not None:
                self.c_completed = self.c_released if self.c_completed is None else \
                    [max(a, b) for a, b in zip(self.c_completed, self.c_released)]
                self.c_released = None


def _mbar_names(op: Op) -> list[str]:
    """Names for the barriers of a `kit.mbarriers` allocation: `ready[0]`, `ready[1]`, ...
    (the name is what the source line assigns, when it can be read)."""
    name = op.result.name
    if not name and op.loc is not None:
        src = linecache.getline(op.loc.file, op.loc.line)
        m = re.match(r"\s*([A-Za-z_]\w*)\s*=\s*[\w.]*mbarriers\b", src)
        if m:
            name = m.group(1)
    if not name:
        name = f"mbarriers (line {op.loc.line})" if op.loc else "mbarriers"
    return [f"{name}[{i}]" for i in range(op.result.shape[0] if op.result.shape else 1)]


class _Wait:
    """What a blocked coroutine hands the scheduler: the wait it is stuck at."""

    __slots__ = ("op", "bar", "parity", "role", "loops")

    def __init__(self, op: Op, bar: _MBar, parity: int, role: _Role):
        self.op, self.bar, self.parity, self.role = op, bar, parity, role
        self.loops: list[str] = []  # innermost first

    def leaves(self) -> list[_Wait]:
        return [self]

    def in_loop(self, where: str) -> None:
        self.loops.append(where)


class _Stuck:
    """What a group of roles hands its scheduler when all of them wait without progress."""

    __slots__ = ("waits",)

    def __init__(self, waits: list):
        self.waits = waits

    def leaves(self) -> list[_Wait]:
        return [w for x in self.waits for w in x.leaves()]

    def in_loop(self, where: str) -> None:
        for x in self.waits:
            x.in_loop(where)


# ----------------------------------------------------------------------------- the running program
class _Ctx:
    """What error messages need to know about the running program."""

    def __init__(self, grid: tuple[int, int, int]):
        self.grid = grid
        self.pid = (0, 0, 0)
        self.shape: tuple[int, ...] = ()
        self.lanes_total = 1
        # MMAs of this program that may still read shared memory: (op, a, b, role key),
        # oldest first (a role waits only for its own MMAs; a TMA load races with any)
        self.inflight: list[tuple[Op, np.ndarray, np.ndarray, int]] = []
        self.events = 0  # mbarrier phases completed so far (the scheduler's progress)
        self.copies: list[tuple[_MBar, int, _Write]] = []  # TMA copies not landed yet
        self.roles: dict[int, _Role] = {}  # by key, for messages
        self.vc: dict[int, dict] = {}
        self.shadow: dict[tuple[int, int], _Shadow] = {}
        # thread-block clusters (interpreter/cluster.py): the cluster's shape, this CTA's
        # rank in it, and the scheduler its CTAs share
        self.cluster: tuple[int, int, int] = (1, 1, 1)
        self.rank = 0
        self.sched = None
        self.allocs: dict[int, np.ndarray] = {}  # smem_alloc result id -> its array

    def start(self, pid: tuple[int, int, int]) -> None:
        """A new program: nothing in flight, nothing known about its shared memory."""
        self.pid = pid
        self.inflight.clear()
        self.copies.clear()
        self.vc = {0: {0: 1}}
        self.shadow = {}
        self.allocs = {}

    def land(self) -> None:
        """The TMA copies in flight land: their bytes count now (their data was written at
        issue). A copy takes its time on the GPU, so the thread that issued it runs on until
        it waits; here every wait lands what is in flight before it looks at its barrier."""
        if self.copies:
            copies, self.copies = self.copies, []
            for bar, n, w in copies:
                w.needed = bar.phase + 1  # seen by whoever sees this phase complete
                bar.complete_tx(self, n)

    # -- happens-before, with vector clocks
    # Each role (key; 0 outside roles) and each mbarrier is a clock component: a role's own
    # component counts its releases, a barrier's counts its completed phases. Arriving
    # releases the role's clock into the barrier's current phase; a wait that passes
    # acquires what the completed phases released; roles fork from and join into the role
    # around them. A TMA write is visible to a role once its clock has the barrier phase
    # the copy landed in; a read is ordered before a later write once the writer's clock
    # has the reader's component at the read.
    def release(self, key: int, bar: _MBar) -> None:
        vc = self.vc[key]
        _join(bar.released, vc)
        vc[key] += 1

    def acquire(self, key: int, bar: _MBar) -> None:
        _join(self.vc[key], bar.completed)

    def fork(self, parent: int, kids: list[int]) -> None:
        pv = self.vc[parent]
        for k in kids:
            vc = self.vc[k] = dict(pv)
            vc[k] = vc.get(k, 0) + 1
        pv[parent] += 1

    def join(self, parent: int, kids: list[int]) -> None:
        pv = self.vc[parent]
        for k in kids:
            _join(pv, self.vc[k])
        pv[parent] += 1

    def retire(self, mma: tuple) -> None:
        """An MMA of the inflight list is done: its reads of shared memory end now."""
        op, a, b, key = mma
        for v in (a, b):
            if v is not None:
                self.smem_read(op, v, key, "", False)

    def smem_read(self, op: Op, view: np.ndarray, key: int, what: str, check: bool) -> None:
        """Role `key` reads a shared tile (`what`: which operand, for messages)."""
        sh = self.shadow.get(_region(view))
        if check:
            if sh is None or sh.write is None:
                self.shape, self.lanes_total = (), 1
                raise RaceError(
                    _where(op, self, "read of uninitialized shared memory") +
                    f"\n  {what} is shared memory that no TMA load or kit.store has written "
                    "in this program: on the GPU it holds whatever was there before")
            w = sh.write
            if w.writer is not None and not w.seen_by(self.vc[key]):
                self.shape, self.lanes_total = (), 1
                raise RaceError(
                    _where(op, self, "race on shared memory") +
                    f"\n  {what} is written by the kit.store{_at(w.op)} in "
                    f"{self.roles[w.writer]}, and nothing orders that store before this read"
                    "\n  hint: the writer arrives on an mbarrier after the store and the "
                    "reader waits for that phase")
            if w.writer is None and not w.seen_by(self.vc[key]):
                self.shape, self.lanes_total = (), 1
                phase = w.bar.phase if w.needed is None else w.needed - 1
                when = "its copy is still in flight: nothing has waited since it was issued" \
                    if w.needed is None else \
                    f"{self.roles[key]} has not seen {w.bar.name} complete phase {phase}, " \
                    "the phase that copy lands in"
                raise RaceError(
                    _where(op, self, "race on shared memory") +
                    f"\n  {what} is written by the TMA load{_at(w.op)}, and {when}"
                    f"\n  hint: wait for that phase before the read: "
                    f"kit.mbarrier_wait({w.bar.name}, {phase & 1})")
        if sh is not None:
            sh.reads[key] = (self.vc[key][key], op)

    def smem_write(self, op: Op, view: np.ndarray, key: int, bar: _MBar,
                   part: tuple[int, int] | None = None, remote: bool = False) -> _Write:
        """Role `key` issues a TMA load into a shared tile; its copy lands on `bar`. `part`
        (p, n): a split multicast load writing part p of n of the tile: the parts of one
        round (on the same barrier, while not all n are issued) are one write, landing in
        the same phase of `bar`."""
        region = _region(view)
        sh = self.shadow.get(region)
        if part is not None and sh is not None:
            w = sh.write
            if w is not None and w.bar is bar and w.parts is not None and \
                    len(w.parts) < part[1] and part[0] not in w.parts:
                w.parts.add(part[0])
                return w
        if remote:     # a peer CTA's multicast copy: see _remote_overwrite
            self._remote_overwrite(op, region)
        else:
            self._overwrite(op, region, key, "this TMA load")
        w = _Write(bar, op)
        if part is not None:
            w.parts = {part[0]}
        self.shadow[region] = _Shadow(w)
        return w

    def smem_store(self, op: Op, view: np.ndarray, key: int) -> None:
        """Role `key` writes a shared tile from registers (kit.store): visible to the role at
        once, to others once they acquire what the role releases after it."""
        region = _region(view)
        for mma in self.inflight:
            for v in mma[1:3]:
                if v is not None and np.may_share_memory(v, view):
                    _race(op, mma[0], self, mma[3], "kit.store")
        self._overwrite(op, region, key, "this kit.store")
        w = _Write(None, op, key)
        w.needed = self.vc[key][key]
        self.shadow[region] = _Shadow(w)

    def _remote_overwrite(self, op: Op, region: tuple[int, int]) -> None:
        """A peer CTA's multicast copy into `region`: the TMA copy that wrote it before must
        have been waited for here, by some role (the peer's roles' clocks are not this CTA's,
        so which role cannot be asked). That this CTA's reads are done is checked by the
        MMAs still in flight (cluster.py) and, for kit.load, by the cluster's clocks."""
        sh = self.shadow.get(region)
        w = sh.write if sh is not None else None
        if w is not None and w.writer is None and not any(w.seen_by(vc)
                                                          for vc in self.vc.values()):
            self.shape, self.lanes_total = (), 1
            raise RaceError(
                _where(op, self, "race on shared memory") +
                f"\n  this multicast TMA load from a peer CTA overwrites shared memory that "
                f"the TMA load{_at(w.op)} may still be writing: nothing here has waited for "
                f"the phase of {w.bar.name} that copy lands in")

    def _overwrite(self, op: Op, region: tuple[int, int], key: int, what: str) -> None:
        """A write into `region` by role `key`: every earlier write and every other role's
        read of it must be ordered before (seen through the mbarriers)."""
        sh = self.shadow.get(region)
        if sh is None:
            return
        vc = self.vc[key]
        w = sh.write
        if w is not None and not w.seen_by(vc):
            self.shape, self.lanes_total = (), 1
            if w.writer is not None:
                raise RaceError(
                    _where(op, self, "race on shared memory") +
                    f"\n  {what} overwrites shared memory that the kit.store{_at(w.op)} in "
                    f"{self.roles[w.writer]} wrote, and nothing orders that store before it")
            raise RaceError(
                _where(op, self, "race on shared memory") +
                f"\n  {what} overwrites shared memory that the TMA load{_at(w.op)} "
                "may still be writing: nothing has waited for the phase of "
                f"{w.bar.name} that copy lands in"
                f"{' since it was issued' if w.needed is None else ''}")
        for k, (c, rop) in sh.reads.items():
            if k != key and vc.get(k, 0) < c:
                self.shape, self.lanes_total = (), 1
                raise RaceError(
                    _where(op, self, "race on shared memory") +
                    f"\n  {what} overwrites shared memory that {self.roles[k]} "
                    f"read{'s' if self.roles[k].count == 1 else ''} in the "
                    f"kit.{'mma' if rop.name == 'wgmma' else 'load'}{_at(rop)}, and nothing "
                    f"orders that read before this {what.split()[-1]}"
                    "\n  hint: the reader arrives on an mbarrier once it is done with the "
                    "tile (an MMA: after the MMA, or after a later MMA or use of the result "
                    "retires it), and the writer waits for that phase")


class _Write:
    """A TMA load into a shared tile: `needed` is the number of completed phases of `bar`
    a role must have seen to see it (None while the copy is in flight). Or a kit.store by
    role `writer` (bar None): `needed` is that role's clock at the store."""

    __slots__ = ("bar", "op", "needed", "writer", "parts")

    def __init__(self, bar: _MBar | None, op: Op, writer: int | None = None):
        self.bar, self.op, self.needed, self.writer = bar, op, None, writer
        self.parts: set[int] | None = None  # a split multicast load: the parts issued

    def seen_by(self, vc: dict) -> bool:
        """Is this write visible to (ordered before) a role whose clock is `vc`?"""
        key = self.writer if self.writer is not None else self.bar
        return self.needed is not None and vc.get(key, 0) >= self.needed


class _Shadow:
    """What is known about one shared tile: its last write, and the last read of each role
    since (role key -> (the role's clock at the read, the op))."""

    __slots__ = ("write", "reads")

    def __init__(self, write: _Write):
        self.write = write
        self.reads: dict[int, tuple[int, Op]] = {}


def _region(view: np.ndarray) -> tuple[int, int]:
    """A shared tile's identity: its first byte and size (a stage and its .T agree)."""
    return view.__array_interface__["data"][0], view.nbytes


def _join(dst: dict, src: dict) -> None:
    for k, v in src.items():
        if dst.get(k, 0) < v:
            dst[k] = v


# ----------------------------------------------------------------------------- schedule
def _par(ctx: _Ctx, kids: list[Iterator]) -> Iterator[_Stuck]:
    """Run coroutines round robin, each until it waits (yields) or ends; yield `_Stuck`
    after a round in which all of them waited and no mbarrier phase completed (then none
    can go on until something outside them completes one)."""
    live = list(kids)
    while live:
        events = ctx.events
        waits = []
        for kid in list(live):
            try:
                waits.append(next(kid))
            except StopIteration:
                live.remove(kid)
        if live and ctx.events == events:
            yield _Stuck(waits)


_PARITY_HINT = ("hint: the k-th phase of a barrier (k = 0, 1, ...) has parity k % 2; a fresh "
                "barrier is in phase 0, so waiting for parity 1 passes at once (a producer's "
                "first wait for a free stage) and waiting for parity 0 needs one completed "
                "phase")


def _deadlock(ctx: _Ctx, waits: list[_Wait]) -> DeadlockError:
    ctx.shape, ctx.lanes_total = (), 1

    def awaits(w: _Wait) -> str:
        b = w.bar
        s = (f"{b.name} to complete phase {b.phase} (parity {w.parity}), which still needs "
             f"{b.pending} of {b.init} arrival{'s' if b.init != 1 else ''}")
        if b.tx > 0:
            s += f" and {b.tx} bytes of TMA copies"
        elif b.tx < 0:
            s += f" (and {-b.tx} bytes landed without an expect_tx)"
        return s

    if len(waits) == 1 and waits[0].role.key == 0:
        w = waits[0]
        return DeadlockError(
            _where(w.op, ctx, "deadlock") + f"\n  this waits for {awaits(w)}; nothing else "
            "runs in this program (it has no roles) and every TMA load it issued has landed: "
            f"this would hang the GPU\n  {_PARITY_HINT}")
    msg = (f"deadlock in program {ctx.pid}: every role waits for an mbarrier phase that "
           "never completes; this would hang the GPU")
    for w in waits:
        loc = w.op.loc
        at = "(no source location)" if loc is None else \
            f"at {loc}" + (f" in '{loc.func}'" if loc.func else "")
        msg += f"\n  {w.role} {at} wait{'s' if w.role.count == 1 else ''} for {awaits(w)}"
        src = linecache.getline(loc.file, loc.line).strip() if loc else ""
        if src:
            msg += f"\n      {src}"
        for where in w.loops:
            msg += f"\n      {where}"
    return DeadlockError(msg + f"\n  {_PARITY_HINT}")


def _race(op: Op, mma: Op, ctx: _Ctx, key: int = 0, what: str = "TMA load") -> None:
    """`op` (a `what`) writes shared memory that `mma`, issued by role `key`, may still read:
    it is in flight until a wgmma.wait_group of that role retires it."""
    ctx.shape, ctx.lanes_total = (), 1
    at = f" at {mma.loc}" if mma.loc else ""
    role = ctx.roles.get(key)
    who = f" in {role}" if role is not None and key != 0 else ""
    raise RaceError(
        _where(op, ctx, "race on shared memory") +
        f"\n  this {what} overwrites shared memory that the kit.mma{at}{who} (issued with "
        f"pending={mma.attrs.get('pending', 0)}) may still be reading: nothing has retired "
        "that MMA yet (a later kit.mma of its warpgroup with a smaller `pending`, or a read "
        "of its result, waits for it)"
        f"\n  hint: {'load' if 'load' in what else 'store'} after that MMA is retired, or "
        "into another stage")

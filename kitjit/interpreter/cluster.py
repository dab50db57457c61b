"""Semantics of the `cluster` family, and how the interpreter runs a grid launched in
thread-block clusters (`cluster=(x, y, z)`).

The CTAs of one cluster run together, each in its own Python thread that holds a baton: one
CTA runs at a time, in rank order, until it reaches `kit.cluster_barrier` or ends; then the
next CTA of the cluster takes the baton. When every CTA of the cluster has arrived, the
barrier's phase completes and the last to arrive runs on. The schedule is deterministic, and
each CTA has its own `_Ctx` (program id, shared memory, in-flight state) as on the GPU.
A CTA that ends while others of its cluster wait at a cluster barrier would hang the GPU:
`DeadlockError`.

A CTA waiting on one of its mbarriers (`kit.mbarrier_wait`) that is not complete hands
the baton on too, since a peer may arrive on it (`kit.mbarrier_arrive(bar, cta=rank)`);
when no CTA of the cluster can move, `DeadlockError`. (Not yet inside warpgroup roles: a
role's wait is scheduled among its CTA's roles only, so a wait there that only a peer
completes is reported as a deadlock.)

Distributed shared memory: `kit.cluster_load(a[s], rank)` / `kit.cluster_store(a[s], rank,
x)` reach the same bytes of CTA `rank`'s allocation. What orders the CTAs of a cluster is
tracked with a vector clock per CTA: a cluster barrier joins them all, a remote arrive
releases the arriving CTA's clock into the peer's mbarrier and a wait that sees the phase
complete acquires it. Every access to a shared tile (the owner's kit.load / kit.store
included) is recorded with its CTA's clock: two accesses by different CTAs to overlapping
bytes, one of them a write, with nothing ordering them raise `RaceError` whatever order the
schedule ran them in ("a missing kit.cluster_barrier"). TMA copies into a tile and MMAs
reading it are not recorded yet.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from kitjit.ir.core import Op
from kitjit.ir.registry import semantics

from .compiler import Env, Handler, _Compiler, pure
from .errors import DeadlockError, RaceError, _at
from .sync import _Ctx


@semantics("cluster_id")
def cluster_id(comp: _Compiler, op: Op) -> Handler:
    """The cluster's index in the grid along an axis (program id // cluster size)."""
    ctx, axis, r = comp.ctx, op.attrs["axis"], op.result.id

    def h(env: Env) -> None:
        env[r] = np.int32(ctx.pid[axis] // ctx.cluster[axis])
    return h


@semantics("cluster_ctaid")
def cluster_ctaid(comp: _Compiler, op: Op) -> Handler:
    """The CTA's index in its cluster along an axis (program id % cluster size)."""
    ctx, axis, r = comp.ctx, op.attrs["axis"], op.result.id

    def h(env: Env) -> None:
        env[r] = np.int32(ctx.pid[axis] % ctx.cluster[axis])
    return h


@semantics("cluster_ctarank")
def cluster_ctarank(comp: _Compiler, op: Op) -> Handler:
    ctx, r = comp.ctx, op.result.id

    def h(env: Env) -> None:
        env[r] = np.int32(ctx.rank)
    return h


@semantics("num_cluster_ctas")
@pure
def num_cluster_ctas(op: Op, ctx: _Ctx) -> Callable:
    cx, cy, cz = ctx.cluster
    n = np.int32(cx * cy * cz)
    return lambda: n


@semantics("cluster_barrier")
def cluster_barrier(comp: _Compiler, op: Op) -> Handler:
    ctx = comp.ctx

    def h(env: Env) -> None:
        ctx.sched.barrier(ctx.rank, op)
    return h


@semantics("cluster_arrive")
def cluster_arrive(comp: _Compiler, op: Op) -> Handler:
    b_id, k_id = op.operands[0].id, op.operands[1].id
    ctx, n, key = comp.ctx, comp.role.count, comp.role.key

    def h(env: Env) -> None:
        ctx.sched.arrive(ctx, env[b_id], int(env[k_id]), op, n, key)
    return h


@semantics("cluster_load")
def cluster_load(comp: _Compiler, op: Op) -> Handler:
    s_id, k_id, r = op.operands[0].id, op.operands[1].id, op.result.id
    ctx = comp.ctx

    def h(env: Env) -> None:
        peer = ctx.sched.peer_view(ctx, env[s_id], int(env[k_id]), op)
        env[r] = np.array(peer)
    return h


@semantics("cluster_store")
def cluster_store(comp: _Compiler, op: Op) -> Handler:
    d_id, k_id, v_id = (v.id for v in op.operands)
    ctx = comp.ctx

    def h(env: Env) -> None:
        peer = ctx.sched.peer_view(ctx, env[d_id], int(env[k_id]), op, write=True)
        peer[...] = env[v_id]
    return h


# ----------------------------------------------------------------------------- scheduling
class _Abort(Exception):
    """Another CTA of the cluster failed: this one stops where it waits."""


_GONE = ("on the GPU a CTA's shared memory and mbarriers are gone once it exits, and a "
         "peer's access to them is undefined\n  hint: end the kernel with "
         "kit.cluster_barrier(), so no CTA leaves while a peer may still reach into it")


class _ClusterRun:
    """The baton of one cluster's CTAs, and its barrier's state."""

    def __init__(self, n: int, cid: tuple[int, int, int]):
        self.n, self.cid = n, cid
        self.cv = threading.Condition()
        self.turn = 0
        self.epoch = 0  # cluster barrier phases completed
        self.arrived: dict[int, Op] = {}  # rank -> the barrier it waits at
        self.done: set[int] = set()
        self.error: BaseException | None = None
        self.ctxs: list[_Ctx] = []
        # (owner rank, allocation id) -> accesses not known to be superseded:
        # (first byte, end byte, write, accessing rank, its clock then, op)
        self.accesses: dict[tuple[int, int], list] = {}
        self.clock = [[0] * n for _ in range(n)]  # per CTA: what it has seen of each
        self.blocked: set[int] = set()  # CTAs waiting on one of their mbarriers
        self.idle = 0  # turns in a row that found a blocked CTA still blocked
        # target rank -> {accessing rank: (its clock before the access, op, what)}: each
        # CTA's latest remote access to a peer, which must be ordered before that peer ends
        self.remote: dict[int, dict[int, tuple[int, Op, str]]] = {}

    def acquire(self, rank: int, bar) -> None:
        """A wait of CTA `rank` saw `bar`'s phase complete: it has seen what the remote
        arrivals of that phase released."""
        if bar.c_completed is not None:
            c = self.clock[rank]
            for i, t in enumerate(bar.c_completed):
                c[i] = max(c[i], t)

    def arrive(self, ctx: _Ctx, view: np.ndarray, rank: int, op: Op, n: int,
               key: int = 0) -> None:
        """`n` arrivals of role `key` of `ctx`'s CTA on CTA `rank`'s copy of mbarrier
        `view` (on its own copy, the role's clock is released into the phase as a local
        arrival's is)."""
        if not 0 <= rank < self.n:
            from .errors import OutOfBoundsError, _where

            ctx.shape, ctx.lanes_total = (), 1
            raise OutOfBoundsError(_where(op, ctx, f"kit.mbarrier_arrive on CTA rank {rank}")
                                   + f"\n  the cluster has {self.n} CTAs")
        aid, lo, _ = self._find(ctx, view)
        peer = self.ctxs[rank].allocs.get(aid)
        if peer is None:
            raise RaceError(f"kit.mbarrier_arrive{_at(op)}: CTA rank {rank} of cluster "
                            f"{self.cid} has not made these mbarriers yet (no "
                            "kit.cluster_barrier after its kit.mbarriers?)")
        bar = peer.reshape(-1)[lo // peer.itemsize]
        c = self.clock[ctx.rank]
        if rank != ctx.rank:
            self._remote(ctx.rank, rank, op, "kit.mbarrier_arrive on")
        c[ctx.rank] += 1  # release: what this CTA did so far is ordered before the phase
        bar.c_released = list(c) if bar.c_released is None else \
            [max(a, b) for a, b in zip(bar.c_released, c)]
        bar.arrive(self.ctxs[rank], op, key if rank == ctx.rank else 0, n)

    def multicast(self, ctx: _Ctx, op: Op, dst: np.ndarray, bars: np.ndarray, mask: int,
                  nbytes: int, copy: Callable, key: int = 0,
                  part: tuple[int, int] | None = None) -> None:
        """A TMA load with `multicast=mask` issued by `ctx`'s CTA: the box lands at `dst`'s
        place in each CTA of the mask, its bytes counted on each one's copy of the barrier
        when it lands (at the issuer's next wait, as for a local copy). Like a remote
        arrive, it releases the issuer's clock into each of those barriers. `part` (p, n):
        a split load, copying part p of n of the tile `dst` (`copy` cuts it); its bytes are
        the p-th n-th of the tile's, contiguous as the GPU lays parts out."""
        ranks = [r for r in range(16) if mask >> r & 1]
        if ranks[-1] >= self.n:
            from .errors import OutOfBoundsError, _where

            ctx.shape, ctx.lanes_total = (), 1
            raise OutOfBoundsError(_where(op, ctx, f"kit.tma_load multicast to CTA rank "
                                                   f"{ranks[-1]}") +
                                   f"\n  the cluster has {self.n} CTAs (mask {mask:#x})")
        aid, lo, _ = self._find(ctx, dst)
        baid, blo, _ = self._find(ctx, bars)
        released = []
        for r in ranks:
            peer = self.ctxs[r]
            a, ba = peer.allocs.get(aid), peer.allocs.get(baid)
            if a is None or ba is None:
                raise RaceError(f"kit.tma_load{_at(op)}: multicast into CTA rank {r} of "
                                f"cluster {self.cid}, which has not made this tile or "
                                "barrier yet (no kit.cluster_barrier after them?)")
            view = dst if r == ctx.rank else np.lib.stride_tricks.as_strided(
                a.reshape(-1)[lo // a.itemsize:], dst.shape, dst.strides)
            bar = ba.reshape(-1)[blo // ba.itemsize]
            for mma, x, y, k in peer.inflight:  # a peer's MMA may still read the tile
                if x is not None and np.may_share_memory(view, x) or \
                        y is not None and np.may_share_memory(view, y):
                    from .sync import _race

                    _race(op, mma, peer, k)
            w = peer.smem_write(op, view, key if r == ctx.rank else 0, bar, part,
                                remote=r != ctx.rank)
            copy(view)
            if r != ctx.rank:
                self._remote(ctx.rank, r, op, "kit.tma_load multicast into")
                plo, phi = (lo, lo + view.nbytes) if part is None else \
                    (lo + part[0] * view.nbytes // part[1],
                     lo + (part[0] + 1) * view.nbytes // part[1])
                self._record(r, aid, plo, phi, True, ctx.rank, op)
                released.append(bar)
            ctx.copies.append((bar, nbytes, w))
        c = self.clock[ctx.rank]
        c[ctx.rank] += 1  # release (after the writes it orders)
        for bar in released:
            bar.c_released = list(c) if bar.c_released is None else \
                [max(u, v) for u, v in zip(bar.c_released, c)]

    def block(self, rank: int, ready: Callable[[], bool], deadlock: Callable) -> None:
        """CTA `rank` waits for one of its mbarriers: the others run until it is ready."""
        with self.cv:
            self.blocked.add(rank)
            try:
                while True:
                    self._pass(rank)
                    self._wait(lambda: self.turn == rank)
                    if ready():
                        self.idle = 0
                        return
                    self.idle += 1
                    if self.idle > 2 * self.n:
                        raise deadlock()
            finally:
                self.blocked.discard(rank)

    def _find(self, ctx: _Ctx, view: np.ndarray) -> tuple[int, int, int]:
        """(allocation id, first byte, end byte) of `view` within `ctx`'s shared memory."""
        p = view.__array_interface__["data"][0]
        for aid, a in ctx.allocs.items():
            base = a.__array_interface__["data"][0]
            if base <= p < base + a.nbytes:
                lo = p - base
                span = sum((n - 1) * abs(st) for n, st in zip(view.shape, view.strides))
                return aid, lo, lo + span + view.itemsize
        raise RuntimeError("kitjit interpreter: a shared tile outside this CTA's allocations")

    def peer_view(self, ctx: _Ctx, view: np.ndarray, rank: int, op: Op,
                  write: bool = False) -> np.ndarray:
        """The same bytes as `view` (a tile of `ctx`'s CTA) in CTA `rank`'s shared memory,
        the access recorded."""
        if not 0 <= rank < self.n:
            ctx.shape, ctx.lanes_total = (), 1
            from .errors import OutOfBoundsError, _where

            raise OutOfBoundsError(_where(op, ctx, f"kit.{op.name} of CTA rank {rank}") +
                                   f"\n  the cluster has {self.n} CTAs (ranks 0..{self.n - 1})")
        aid, lo, hi = self._find(ctx, view)
        peer = self.ctxs[rank].allocs.get(aid)
        if peer is None:
            raise RaceError(f"kit.{op.name}{_at(op)}: CTA rank {rank} of cluster {self.cid} "
                            "has not allocated this shared tile yet (no kit.cluster_barrier "
                            "after its kit.shared?)")
        self._record(rank, aid, lo, hi, write, ctx.rank, op)
        if rank != ctx.rank:
            self._remote(ctx.rank, rank, op, f"kit.{op.name} of")
        flat = peer.reshape(-1)[lo // peer.itemsize:]
        out = np.lib.stride_tricks.as_strided(flat, view.shape, view.strides)
        if write:  # the owner's own checks (kit.load of a tile nothing wrote) see it
            self.ctxs[rank].smem_store(op, out, 0)
        return out

    def touch(self, ctx: _Ctx, rank: int, view: np.ndarray, write: bool, op: Op) -> None:
        """A CTA's own kit.load / kit.store of its shared tile: recorded for the checks."""
        aid, lo, hi = self._find(ctx, view)
        self._record(rank, aid, lo, hi, write, rank, op)

    def _record(self, owner: int, aid: int, lo: int, hi: int, write: bool, who: int,
                op: Op) -> None:
        recs = self.accesses.setdefault((owner, aid), [])
        seen = self.clock[who]
        for lo2, hi2, w2, who2, t2, op2 in recs:
            if who2 != who and (write or w2) and lo < hi2 and lo2 < hi and seen[who2] <= t2:
                first, then = ("writes", "reads") if w2 and not write else \
                    ("reads", "writes") if write and not w2 else ("writes", "writes")
                raise RaceError(
                    f"race in cluster {self.cid}: CTA rank {who} {then} CTA rank {owner}'s "
                    f"shared tile{_at(op)}, which CTA rank {who2} {first}{_at(op2)}, with no "
                    f"kit.cluster_barrier in between (nor an mbarrier the one arrives on and "
                    "the other waits for): on the GPU the order of the two is undefined\n"
                    "  hint: call kit.cluster_barrier() between the write and the other "
                    "CTA's access")
        t = seen[who]
        # an earlier access of this CTA to the same bytes that this one covers for every
        # later check (same kind, or a read followed by a write) is dropped
        recs[:] = [r for r in recs if not (r[3] == who and r[0] == lo and r[1] == hi and
                                           (r[2] == write or write))]
        recs.append((lo, hi, write, who, t, op))

    def _wait(self, cond: Callable[[], bool]) -> None:
        while not cond():
            if self.error is not None:
                raise _Abort
            self.cv.wait()
        if self.error is not None:
            raise _Abort

    def _pass(self, rank: int) -> None:
        """The baton to the next CTA (in rank order after `rank`) that can run."""
        for k in range(1, self.n + 1):
            r = (rank + k) % self.n
            if r not in self.done and r not in self.arrived:
                self.turn = r
                break
        else:
            self.turn = -1
        self.cv.notify_all()

    def begin(self, rank: int) -> None:
        with self.cv:
            self._wait(lambda: self.turn == rank)
            self.idle = 0

    def barrier(self, rank: int, op: Op) -> None:
        with self.cv:
            self.arrived[rank] = op
            self.clock[rank][rank] += 1
            if len(self.arrived) == self.n:  # the phase completes: this CTA runs on
                self.epoch += 1
                self.arrived.clear()
                joined = [max(col) for col in zip(*self.clock)]
                self.clock = [list(joined) for _ in range(self.n)]
                self.idle = 0
                return
            self._check_exited()
            epoch = self.epoch
            self._pass(rank)
            self._wait(lambda: self.epoch > epoch and self.turn == rank)
            self.idle = 0

    def _remote(self, who: int, target: int, op: Op, what: str) -> None:
        """CTA `who` reaches into CTA `target` (an arrival, a multicast copy, a DSMEM
        access): an error if `target` has ended; else remembered for `finish`."""
        if target in self.done:
            raise RaceError(f"{what} CTA rank {target}{_at(op)} by CTA rank {who} of cluster "
                            f"{self.cid}, which has already ended: {_GONE}")
        self.remote.setdefault(target, {})[who] = (self.clock[who][who], op, what)

    def finish(self, rank: int) -> None:
        with self.cv:
            seen = self.clock[rank]
            for who, (t, op, what) in sorted(self.remote.get(rank, {}).items()):
                if seen[who] <= t:   # nothing orders that access before this CTA's end
                    raise RaceError(
                        f"{what} CTA rank {rank}{_at(op)} by CTA rank {who} of cluster "
                        f"{self.cid} is not ordered before CTA rank {rank} ends: {_GONE}")
            self.done.add(rank)
            self._check_exited()
            self._pass(rank)

    def _check_exited(self) -> None:
        if self.done and self.arrived:
            waits = "\n".join(f"  CTA rank {r} waits at kit.cluster_barrier{_at(op)}"
                              for r, op in sorted(self.arrived.items()))
            gone = ", ".join(str(r) for r in sorted(self.done))
            raise DeadlockError(
                f"deadlock in cluster {self.cid}: CTA rank{'s' if len(self.done) > 1 else ''}"
                f" {gone} ended without reaching the cluster barrier that the others wait "
                f"at (this would hang the GPU)\n{waits}\n  hint: every CTA of a cluster "
                "must run kit.cluster_barrier the same number of times")

    def fail(self, e: BaseException) -> None:
        with self.cv:
            if self.error is None:
                self.error = e
            self.cv.notify_all()


def execute_clusters(fn, grid: tuple[int, int, int], mem,
                     cluster: tuple[int, int, int], make: Callable) -> None:
    """Run `fn` over `grid` cluster by cluster. `make(ctx)` compiles the kernel's body for
    one CTA's context and returns (handlers, base env); each CTA of a cluster gets its own."""
    from kitjit.runtime.driver import check_cluster_grid

    cx, cy, cz = cluster
    check_cluster_grid(fn.name, grid, cluster)
    n = cx * cy * cz
    ctas = []  # (ctx, body, base) per rank, compiled once and reused for every cluster
    for rank in range(n):
        ctx = _Ctx(grid)
        ctx.cluster, ctx.rank = cluster, rank
        ctas.append((ctx, *make(ctx)))
    for kz in range(grid[2] // cz):
        for ky in range(grid[1] // cy):
            for kx in range(grid[0] // cx):
                run = _ClusterRun(n, (kx, ky, kz))
                run.ctxs = [c[0] for c in ctas]
                threads = []
                for rank, (ctx, body, base) in enumerate(ctas):
                    x, y, z = rank % cx, rank // cx % cy, rank // (cx * cy)
                    ctx.start((kx * cx + x, ky * cy + y, kz * cz + z))
                    ctx.sched = run
                    threads.append(threading.Thread(target=_cta, args=(run, rank, body,
                                                                        dict(base))))
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                if run.error is not None:
                    raise run.error


def _cta(run: _ClusterRun, rank: int, body: list, env: Env) -> None:
    try:
        with np.errstate(all="ignore"):
            run.begin(rank)
            for h in body:
                h(env)
            run.finish(rank)
    except _Abort:
        pass
    except BaseException as e:  # handed to the launching thread, which raises it
        run.fail(e)

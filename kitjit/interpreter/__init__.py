"""The CPU interpreter: runs tile IR with numpy, one program (CTA) at a time.

It exists so that every kernel can be checked where there is no GPU (CI, laptops) and so
that users can debug kernels: an out-of-bounds access raises `IndexError` naming the source
line, the program id and the offending address relative to the nearest tensor argument.

Values live in an environment `Value.id -> numpy value` (arrays for tiles, numpy scalars
for scalars). A pointer is an int64 byte address; loads and stores find the tensor argument
whose storage holds it. bf16 has no numpy type, so bf16 values are float32 arrays that are
kept exactly representable in bf16 (rounded to nearest even whenever one is produced).

Ops are compiled once per `run` into closures over env slots; ops that depend neither on
the program id nor on memory are evaluated once, before the first program.

Level 2 (Hopper): each program allocates its own shared memory (`smem_alloc`: zeroed numpy
arrays; a stage `a[s]` and a transpose `t.T` are views that alias them). A TMA descriptor
argument is a strided numpy view of the tensor's memory; `tma_load` copies a box from it at
once (zero outside the tensor) and `tma_store` writes one back (dropping what falls outside),
and `barrier()` has nothing to do. `wgmma` computes at issue, but an MMA issued with
`pending=p` counts as in flight until p later groups are issued or a read of an MMA result
retires it with the same `wgmma.wait_group n` the backend puts there (`mma_waits`: reading
an MMA's result retires it and older ones, not the MMAs issued after it): a TMA load or
kit.store (of any role) that overwrites shared memory an in-flight MMA reads is a race on
the GPU, and raises `RaceError` here.

mbarriers keep their real state (PTX semantics): arrivals still expected in the current
phase (`kit.mbarriers(n, arrivals=k)`), a transaction byte count, and the number of
completed phases. A phase completes when both reach zero. `kit.mbarrier_arrive` arrives once
per warpgroup that runs it; the first TMA load of a group (`expect` > 0, see
frontend/tma_groups.py) arrives once and announces the group's bytes, and every load's bytes
come off when its copy lands: the data is copied at issue, but the copy counts as landed
only at the next wait (of any role), as the issuing thread runs on while a copy flies on the
GPU. `mbarrier_wait(bar, p)` passes when the phase of
parity p is the most recently completed one (the current phase's parity is not p; a fresh
barrier is in phase 0, so waiting for parity 1 passes at once).

Warp specialization: an `if` on `kit.warpgroup_id()` (`roles` attribute) runs its two
regions as coroutines (generators) that take turns, round robin, each running until it
waits for a phase that has not completed. When every role waits and no phase completes in a
full round, the program is deadlocked: `DeadlockError` names each wait, its barrier's state
and the loop iteration it is in ("this would hang the GPU"). Outside roles the program is one
thread of control, so a wait that is not satisfied at once raises the same error.
`kit.warpgroup_id()` is the first warpgroup of the role it runs in (0 outside roles).

The schedule is one of many the GPU could run, so right numbers here prove little about
ordering. Instead the interpreter tracks what the mbarriers order (vector clocks over roles
and barrier phases; see `_Ctx`) and raises `RaceError` where nothing does: an MMA reading a
shared tile before its role has seen the phase the TMA copy into it lands in (or a tile no
load has written), a TMA load over a tile that another role's MMA read (until that MMA was
retired) with no arrive/wait in between, or over a tile an earlier copy may still be
writing.

Layout of this package: `numeric` (dtypes, bf16), `errors` (what the interpreter raises and
the first lines of its messages), `sync` (roles, mbarriers, the scheduler, race and deadlock
detection), `compiler` (`_Compiler`, hoisting, `run`), `mma_waits` (which MMAs a read of
an MMA result retires), and one module per op family of
kitjit/ir/ops.py holding the semantics of its ops: `core`, `elementwise`, `memory`,
`reduction`, `scan`, `shape`, `dot`, `tma`, `control`.

Semantics: every op has an entry registered with `@semantics("name", ...)`
(kitjit/ir/registry.py) in the module of its family, and `_Compiler.op` dispatches through
`registry.semantics_of(op.name)` once per op, when it compiles the closures (an op with no
entry raises NotImplementedError naming it). An entry is called as

    entry(comp: _Compiler, op: Op) -> Handler      # Handler: env -> None, sets op's results

and reads what it needs from `comp` (`comp.ctx`, `comp.mem`, `comp.role`, and `comp.block`/
`comp.gblock` for regions). Pure ops are written as `make(op, ctx) -> numpy function` (operand
values -> result value) under `@pure` (compiler.py), which turns them into such an entry that
applies the function with `_wrap`, and keeps `make` reachable for `_pure(op, ctx)`. Ops that
may wait for another role (for, if, mbar_wait) take `gen: bool = False` too: with gen=True
they return a generator function `env -> Iterator` that yields a `_Wait` (or a `_Stuck`)
where it blocks (`_Compiler.gop`). `yield` is registered in control.py but never called: the
`for` and `if` that end in it read its operands.
"""

from __future__ import annotations

from . import (  # noqa: F401
    cluster,
    control,
    core,
    dot,
    elementwise,
    memory,
    reduction,
    scan,
    shape,
    signal,
    tma,
)
from .compiler import _Compiler as _Compiler
from .compiler import _execute as _execute
from .compiler import _pure as _pure
from .compiler import _wrap as _wrap
from .compiler import run
from .errors import DeadlockError, MBarrierError, OutOfBoundsError, RaceError
from .memory import _Memory as _Memory
from .numeric import round_bf16
from .sync import _Ctx as _Ctx

__all__ = ["DeadlockError", "MBarrierError", "OutOfBoundsError", "RaceError", "round_bf16",
           "run"]

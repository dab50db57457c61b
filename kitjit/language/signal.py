"""Signals: flags in memory that a program waits on or sets, for kernels that communicate
with the programs of peer GPUs (torch's symmetric memory: `handle.signal_pad_ptrs_dev`) or
with other programs of its own grid.

The whole program takes part in each call: one thread spins (or writes) and a CTA barrier
orders the other threads around it, so that what the program stored before `signal_set`
is visible to a program that passed the matching `signal_wait`. `scope="sys"` (the default)
orders against peer GPUs and the host; `"gpu"` against programs of the same GPU only.

In the interpreter, programs (and, under `kitjit.distributed.simulate`, ranks) run as
coroutines that switch at a `signal_wait` whose condition does not hold yet; when none can
move, `DeadlockError` names each wait and the value its signal holds.
"""

from __future__ import annotations

from .base import builtin


@builtin
def signal_wait(pointer, value, cmp="eq", sem="acquire", scope="sys"):
    """Wait until `*pointer <cmp> value` (cmp: "eq" by default, "ne", "ge", "gt", "le",
    "lt"; signed or unsigned as the signal's dtype). One thread spins on
    `ld.<sem>.<scope>`; the others wait at a CTA barrier behind it, so every load the
    program issues after this sees what the signalling program wrote before its
    `signal_set`. `sem="acquire"` (default) or `"relaxed"`. `pointer` is one pointer (a
    scalar) to an int32/uint32/int64/uint64 signal."""


@builtin
def signal_set(pointer, value, sem="release", scope="sys"):
    """`*pointer = value` after every thread of the program is done with its earlier memory
    accesses (a CTA barrier, then one `st.<sem>.<scope>`): whoever waits for this value
    sees the program's earlier stores. `sem="release"` (default) or `"relaxed"`."""


@builtin
def signal_add(pointer, value, sem="release", scope="sys"):
    """`*pointer += value` atomically (no result: a `red`), ordered after the program's
    earlier memory accesses as `signal_set`. Counts arrivals: n programs each add 1 and a
    consumer waits for `cmp="ge", value=n`. `sem="release"` (default), `"acq_rel"` or
    `"relaxed"`."""

"""Kernels of tests/test_atomics.py (compile_aot imports this file by path)."""

import kitjit as kit


@kit.jit
def rmw_kernel(P, V, Old, IDX, n, KIND: kit.constexpr, SEM: kit.constexpr,
               SCOPE: kit.constexpr, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    idx = kit.load(IDX + offs, mask=m, other=0)
    v = kit.load(V + offs, mask=m)
    if KIND == "add":
        old = kit.atomic_add(P + idx, v, mask=m, sem=SEM, scope=SCOPE)
    elif KIND == "max":
        old = kit.atomic_max(P + idx, v, mask=m, sem=SEM, scope=SCOPE)
    elif KIND == "min":
        old = kit.atomic_min(P + idx, v, mask=m, sem=SEM, scope=SCOPE)
    elif KIND == "and":
        old = kit.atomic_and(P + idx, v, mask=m, sem=SEM, scope=SCOPE)
    elif KIND == "or":
        old = kit.atomic_or(P + idx, v, mask=m, sem=SEM, scope=SCOPE)
    elif KIND == "xor":
        old = kit.atomic_xor(P + idx, v, mask=m, sem=SEM, scope=SCOPE)
    else:
        old = kit.atomic_xchg(P + idx, v, mask=m, sem=SEM, scope=SCOPE)
    kit.store(Old + offs, old, mask=m)


@kit.jit
def red_kernel(P, V, n, BLOCK: kit.constexpr):
    """Old values unused: ptxas makes RED of the atom."""
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    kit.atomic_add(P + offs % 7, kit.load(V + offs, mask=m), mask=m)


@kit.jit
def scalar_counter_kernel(C, Ticket):
    """Every program takes a ticket from a scalar counter."""
    t = kit.atomic_add(C, 1)
    kit.store(Ticket + kit.program_id(0), t)


@kit.jit
def cas_kernel(P, Old, cmp, val, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    old = kit.atomic_cas(P + offs, cmp, val)
    kit.store(Old + offs, old)


@kit.jit
def lock_counter_kernel(Lock, Count, Out):
    """A critical section under a CAS lock: take it, bump a plain (non-atomic) counter,
    release it with an exchange."""
    kit.atomic_cas(Lock, 0, 1, sem="acquire")
    c = kit.load(Count)
    kit.store(Count, c + 1)
    kit.store(Out + kit.program_id(0), c)
    kit.atomic_xchg(Lock, 0, sem="release")


@kit.jit
def spin_kernel(Lock, Out, TRIES: kit.constexpr):
    """Spins (a bounded loop: kitjit has no `while` yet) on a lock nobody releases."""
    got = 0
    for _ in range(TRIES):
        got = kit.atomic_cas(Lock, 0, 1)
    kit.store(Out, got)

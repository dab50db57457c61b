"""Which MMAs an op that reads an MMA result waits for: the `wgmma.wait_group n` the backend
puts before it (backend/lower/base.py, `wgmma_done`), found by the same walk over the IR.

The interpreter computes an MMA at issue but keeps it in flight (its shared tiles may still
be read) until a wait retires it. A wait_group n retires every MMA of the warpgroup except
the newest n, so the interpreter must use the backend's n: retiring more would hide a race
(a store over a tile that the newer MMAs still read), retiring fewer would report one that
the compiled code does not have. The backend waits, for a value `v` it reads:
- v issued in this stretch of straight-line code (`groups`): n = the MMAs issued after v;
- v carried by the loop around (the previous iteration's MMA): n = the stretch's MMAs;
- otherwise (from before a region that issues MMAs): n = 0.
A region that issues MMAs ends the stretch (before and after it); other regions go on with
the stretch around them. A value read once is complete for the rest of its block.
"""

from __future__ import annotations

from kitjit.ir.core import Block, Function, walk_block


def mma_waits(fn: Function, values: frozenset[int]) -> dict[int, int]:
    """`id(op)` -> n for each op that waits for MMAs (`values`: what may hold an MMA
    result, see compiler._mma_values) before it runs: keep only the newest n in flight."""
    out: dict[int, int] = {}
    if values:
        _block(fn.body, [], set(), frozenset(), values, out)
    return out


def _issues_mmas(op) -> bool:
    return any(o.name == "wgmma" for r in op.regions for o in walk_block(r))


def _block(block: Block, groups: list[int], done: set[int], carried: frozenset[int],
           values: frozenset[int], out: dict[int, int]) -> None:
    groups, done = list(groups), set(done)
    for op in block.ops:
        if op.name == "yield":
            continue
        if op.name not in ("wgmma", "for"):
            waits = []
            for v in op.operands:
                if v.id not in values or v.id in done:
                    continue
                if v.id in groups:
                    waits.append(len(groups) - 1 - groups.index(v.id))
                    groups.remove(v.id)
                elif v.id in carried and groups:
                    waits.append(len(groups))
                else:
                    waits.append(0)
                done.add(v.id)
            if waits:
                out[id(op)] = min(waits)
        mmas = bool(op.regions) and _issues_mmas(op)
        if mmas:
            groups = []
        for r in op.regions:
            inner = carried
            if op.name == "for":
                inner = carried | frozenset(a.id for a in r.args[1:])
            _block(r, groups, done, inner, values, out)
        if mmas:
            groups = []
        if op.name == "wgmma":
            if int(op.attrs.get("pending", 0)) > 0:
                groups.append(op.result.id)
            else:  # waited for at issue (wait_group 0): reading it waits for nothing
                done.add(op.result.id)

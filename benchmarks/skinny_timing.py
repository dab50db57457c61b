"""Timings of short GEMMs that no host stall can distort (issue 15, benchmarks/NOTES.md
"skinny GEMM timing by graph replays").

Per-call CUDA events after an L2 flush time a 15-50 us kernel together with whatever host
work of the wrapper lands between the flush and the launch (allocations, the tuner's key,
descriptors): the same example path timed 17.6 us in one run and 47.7 us in another. Here
each variant is timed two ways over rotating copies of its inputs (enough copies that their
bytes pass the L2 twice over, so no call finds its operands in L2):

- `graph`: N calls captured round-robin into one CUDA graph; us per call = replay time / N
  (the kernels alone: no host work between two of them);
- `b2b`: N plain calls back to back, no sync between them; us per call = elapsed / N (our
  host path counts only where it is slower than the GPU: what a user's eager loop sees).

A variant that cannot be captured reports "n/a: <why>" in the graph column.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

L2_BYTES = 50 * 2 ** 20          # H100 / H200
MAX_CALLS = 1000


def copies_for(nbytes: int, l2_bytes: int | None = None) -> int:
    """How many copies of `nbytes` of operands pass the L2 (L2_BYTES) twice over (at
    least 2)."""
    return max(2, math.ceil(2 * (l2_bytes or L2_BYTES) / max(nbytes, 1)))


def rotating(tensor: torch.Tensor, n: int) -> list[torch.Tensor]:
    """`tensor` and n - 1 fresh copies of it (same values, other addresses)."""
    return [tensor] + [tensor.clone() for _ in range(n - 1)]


def calls_for(per_call_ms: float, n_copies: int, work_ms: float) -> int:
    """About `work_ms` of calls, a whole number of rounds over the copies, at most
    MAX_CALLS (rounded up to one round)."""
    n = min(MAX_CALLS, max(1, int(work_ms / max(per_call_ms, 1e-4))))
    return max(n_copies, n - n % n_copies)


def _events():
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def eager_ms(calls: list[Callable[[], object]], n: int, repeats: int = 3) -> float:
    """Milliseconds per call of n back-to-back calls (round-robin over `calls`), best of
    `repeats`; the queue is drained before each repeat, not between the calls."""
    best = float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0, t1 = _events()
        t0.record()
        for i in range(n):
            calls[i % len(calls)]()
        t1.record()
        torch.cuda.synchronize()
        best = min(best, t0.elapsed_time(t1) / n)
    return best


def graph_ms(calls: list[Callable[[], object]], n: int, repeats: int = 3,
             check: Callable[[int, object], None] | None = None) -> float:
    """Milliseconds per call of one CUDA graph holding n calls (round-robin over `calls`),
    best of `repeats` replays after one warm replay. `check(i, out)` is given the output of
    the last captured call (copy i) after the replays: a graph that computes something else
    than the eager call fails there."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):      # warm on the capture stream (per-stream state, tuner)
        for f in calls:
            f()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    last = None
    with torch.cuda.graph(g, stream=s):
        for i in range(n):
            last = calls[i % len(calls)]()
    g.replay()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        t0, t1 = _events()
        t0.record()
        g.replay()
        t1.record()
        torch.cuda.synchronize()
        best = min(best, t0.elapsed_time(t1) / n)
    if check is not None:
        check((n - 1) % len(calls), last)
    del g, last
    return best


def why(e: BaseException) -> str:
    """A one-line reason for the table."""
    return f"n/a: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:120]


def time_variant(calls: list[Callable[[], object]], per_call_ms: float,
                 check: Callable[[int, object], None] | None = None,
                 work_ms: float = 8.0) -> dict:
    """{"graph": us or "n/a: why", "b2b": us} of one variant over its rotating `calls`
    (`per_call_ms`: a rough time of one call, to size N)."""
    n = calls_for(per_call_ms, len(calls), work_ms)
    out: dict = {}
    try:
        out["graph"] = round(graph_ms(calls, n, check=check) * 1e3, 2)
    except Exception as e:   # capture refused (an allocation or sync inside), or a wrong result
        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        out["graph"] = why(e)
    out["b2b"] = round(eager_ms(calls, n) * 1e3, 2)
    return out


def ratio(peer, ours) -> float | None:
    """peer / ours where both are times (x cuBLAS), None where either is n/a."""
    ok = isinstance(peer, (int, float)) and isinstance(ours, (int, float)) and ours > 0
    return round(peer / ours, 3) if ok else None


def rotated_columns(row: dict, runs: dict, ms: dict, as_: list, ws: list,
                    check: Callable[[int, object], None] | None = None) -> None:
    """Fill `row` with each of `runs`' (fn(a, w); "cublas" among them) CUDA-graph and
    back-to-back us per call over the rotating copies (as_[i], ws[i]), and their ratios to
    cuBLAS (`graph_x`, `b2b_x`); `ms` (per-call milliseconds) sizes the number of calls."""
    row["graph_us"], row["b2b_us"] = {}, {}
    for name, fn in runs.items():
        calls = [lambda fn=fn, a=a, w=w: fn(a, w) for a, w in zip(as_, ws)]
        t = time_variant(calls, ms[name], check=check)
        row["graph_us"][name], row["b2b_us"][name] = t["graph"], t["b2b"]
    for col in ("graph", "b2b"):
        us = row[f"{col}_us"]
        row[f"{col}_x"] = {n: ratio(us.get("cublas"), v) for n, v in us.items()
                           if n != "cublas"}


def _us(v) -> str:
    return f"{v:8.2f}" if isinstance(v, (int, float)) else f"{'n/a':>8}"


def table_lines(rows: list, ms: list, geomeans: dict, key: str) -> list[str]:
    """Rows of a section as a table: per variant and row, us per call three ways (per-call
    events / graph replays / back to back) and x cuBLAS by graph and by b2b; then the
    geomeans per M of those two ratios (`geomeans[f"{key}_graph_geomean_{name}_M{M}"]`).
    Why a graph is n/a follows its row."""
    out = [f"{key}: us per call (per-call events | CUDA graph | back-to-back), x cuBLAS "
           "(graph | b2b)"]
    for r in rows:
        out.append(f"  {r['model']:4} {r['layer']:8} {r['shape']:18} {r.get('plan', '')}, "
                   f"{r.get('copies')} copies")
        for n in r.get("us", {}):
            g, b = r["graph_us"].get(n), r["b2b_us"].get(n)
            x = "" if n == "cublas" else \
                f"   x {r['graph_x'].get(n) or 'n/a'} | {r['b2b_x'].get(n) or 'n/a'}"
            out.append(f"    {n:16} {_us(r['us'][n])} | {_us(g)} | {_us(b)}{x}")
            if isinstance(g, str):
                out.append(f"      graph {g}")
        for n, v in r.items():
            if isinstance(v, str) and v.startswith("failed"):
                out.append(f"    {n:16} {v}")
    names = sorted({n for r in rows for n in r.get("graph_x", {})},
                   key=lambda n: (n != "kitjit", n))
    for n in names:
        out.append(f"  geomean x cuBLAS {n:16} " + "  ".join(
            f"M={M}: {geomeans.get(f'{key}_graph_geomean_{n}_M{M}')} | "
            f"{geomeans.get(f'{key}_b2b_geomean_{n}_M{M}')}" for M in ms))
    return out

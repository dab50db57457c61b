"""Host cost of a superoptimized graph's calls (kitjit/graph/host.py): the route that replays
an input signature against the generated `run` it was recorded from, and torch eager, on
the skinny workloads of issue 14 whose GPU time is a few microseconds. No search: each
workload's best-modelled candidate of the fusion plan the H200 picked (the route's cost does
not depend on tile sizes, only on kernels, buffers and launches).

    python benchmarks/graph_host.py          # GPU: us per call; without one: the FakeDriver

Columns (us per call, median of 5 rounds): "called" = plain calls in a loop, then one
synchronize (what graph_bench.py's "called" measures: the larger of host and GPU time);
"host" = the calling thread's CPU time per call (200 calls a round, so the launch queue
never fills); "graph" = the calls captured in a CUDA graph and replayed (GPU time). Without a
GPU the launches go to kitjit.testing's FakeDriver (one trivial call each): "host" only.
"""

from __future__ import annotations

import copy
import pathlib
import sys
import tempfile
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]   # this tree's kitjit

import graph_gated_mlp as ex_mlp  # noqa: E402
import graph_rmsnorm_linear as ex_rms  # noqa: E402

from kitjit.graph import search  # noqa: E402
from kitjit.graph.module import module_source  # noqa: E402
from kitjit.testing import FakeDriver, has_gpu  # noqa: E402

F = torch.nn.functional


def _rms(M=16, K=4096, N=6144):
    return (ex_rms.build(M, K, N), "row(rms_norm) | matmul(matmul)",
            lambda x, w, W: F.rms_norm(x, (K,), w, 1e-6) @ W, f"rms_norm + linear {M}x{K}x{N}")


def _mlp(M=8, K=4096, N=4096):
    return (ex_mlp.build(M, K, N), None, lambda x, w1, w3: F.silu(x @ w1) * (x @ w3),
            f"gated MLP {M}x{K}x{N}")


WORKLOADS = {"rmsnorm_linear": _rms, "gated_mlp": _mlp}


def optimized(g, plan_name: str | None):
    """The best-modelled level-2 candidate of the plan (the first plan if None)."""
    cands = search.candidates(g)
    name = plan_name or cands[0][1]
    est, name, groups, _ = next(c for c in cands if c[1] == name and
                                c[2][-1].params.get("FORM") == "wgmma")
    path = pathlib.Path(tempfile.mkdtemp()) / "graph_host.py"
    path.write_text(module_source(g, [copy.copy(gr) for gr in groups], "graph_host"))
    desc = ", ".join(gr.describe() for gr in groups)
    return search.Optimized(search._import(path), path, {}), desc


def host_us(fn, calls=200, rounds=5, sync=lambda: None) -> float:
    times = []
    for _ in range(rounds):
        s = time.thread_time()
        for _ in range(calls):
            fn()
        times.append((time.thread_time() - s) / calls * 1e6)
        sync()
    return sorted(times)[rounds // 2]


def called_us(fn, calls=2000, rounds=5) -> float:
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        s = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - s) / calls * 1e6)
    return sorted(times)[rounds // 2]


def graph_us(fn, copies=100, rounds=5) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            for _ in range(copies):
                fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        s = time.perf_counter()
        g.replay()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - s) / copies * 1e6)
    return sorted(times)[rounds // 2]


def main() -> None:
    gpu = has_gpu()
    dev = "cuda" if gpu else "cpu"
    rows = []
    for key, make in WORKLOADS.items():
        g, plan_name, eager, desc = make()
        opt, kernels = optimized(g, plan_name)
        # normal draws, the weights (2-d inputs after x) scaled by 1/sqrt(K) so that x @ W
        # stays ~N(0, 1) (unscaled, the MLP's silu(x W1) * (x W3) passes fp16's range)
        ins = [t.div_(t.shape[0] ** 0.5) if i and t.dim() == 2 else t
               for i, t in enumerate(search.random_inputs(g, dev))]
        ref = g.reference(ins)[0]
        variants = {"route": lambda: opt(*ins), "run()": lambda: opt.module.run(*ins)}
        if gpu:
            variants["eager"] = lambda: eager(*ins)
            for name in ("route", "run()", "route"):
                out = variants[name]()[0]
                err = search.rel_error(out, ref)
                assert err < 1e-2, f"{key} {name}: rel. error {err:.3g}"
            assert opt.host.fast_calls >= 1, opt.host.why
            for name, fn in variants.items():
                rows.append((desc, name, called_us(fn), host_us(fn, sync=torch.cuda.synchronize),
                             graph_us(fn)))
        else:
            with FakeDriver(record=False, allow_cpu=True, ir_compile=True):
                opt.module._pdl = lambda x: True   # as on sm_90: the PDL launch path
                for fn in [*variants.values()] * 2:
                    fn()
                assert opt.host.fast_calls >= 1, opt.host.why
                for name, fn in variants.items():
                    rows.append((desc, name, None, host_us(fn, calls=2000), None))
        print(f"{desc}: {kernels}", flush=True)
    print(f"\n{'workload':34} {'path':7} {'called':>8} {'host':>8} {'graph':>8}   "
          f"(us per call; {'GPU' if gpu else 'FakeDriver, host only'})")
    for desc, name, called, host, graph in rows:
        def f(v):
            return f"{v:8.1f}" if v is not None else f"{'-':>8}"
        print(f"{desc:34} {name:7} {f(called)} {f(host)} {f(graph)}")


if __name__ == "__main__":
    main()

"""First launch of the GEMM example (examples/matmul.py) in 1 process vs N processes at once
(torch.distributed ranks on one machine), each scenario with an empty kernel cache.

What it shows: with the per-key inter-process locks (kitjit.cache_lock) N ranks compile each
kernel once and autotune each key once; the others wait and load. The `nolock` scenario
(KITJIT_COMPILE_LOCK_TIMEOUT=0) is the old behaviour, every rank compiling and timing on its
own, for comparison.

Per rank, after imports and input set-up (not timed) and a barrier so the ranks start
together: the wall time of the first launch of a fixed-config GEMM (one compile), then of
the autotuned GEMM (5 configs compiled and timed, once per key), with how many PTX
compiles and config timings this rank did itself.

    python benchmarks/ranks_first_launch.py [--ranks 2] [--size 4096]

Ranks use GPU rank % device_count (2 ranks on 1 GPU share it, then timings contend).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXED = dict(BM=128, BN=128, BK=64, STAGES=3, num_warps=8)  # in no autotuning config


def _rank(rank: int, cache: str, lock: bool, size: int, barrier, results) -> None:
    os.environ["KITJIT_CACHE_DIR"] = cache
    os.environ.pop("KITJIT_INTERPRET", None)
    if not lock:
        os.environ["KITJIT_COMPILE_LOCK_TIMEOUT"] = "0"
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "examples"))
    import importlib

    import torch

    at = importlib.import_module("kitjit.autotune")  # kitjit.autotune is the decorator
    compiler = importlib.import_module("kitjit.backend.compiler")

    counts = {"compiles": 0, "timed": 0}
    ptx, bench = compiler.llvm_to_ptx, at._bench_cuda

    def counting_ptx(*a, **k):
        counts["compiles"] += 1
        return ptx(*a, **k)

    def counting_bench(*a, **k):
        counts["timed"] += 1
        return bench(*a, **k)

    compiler.llvm_to_ptx, at._bench_cuda = counting_ptx, counting_bench
    import matmul as mm

    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    a = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
    torch.cuda.synchronize()
    row = {"rank": rank, "gpu": dev.index}
    for what, call in (("fixed", lambda: mm.matmul(a, b, **FIXED)),
                       ("tuned", lambda: mm.matmul(a, b))):
        counts.update(compiles=0, timed=0)
        barrier.wait()
        t0 = time.perf_counter()
        c = call()
        torch.cuda.synchronize()
        row[what] = (time.perf_counter() - t0, counts["compiles"], counts["timed"])
        err = ((c.double() - a.double() @ b.double()).norm() / (a.double() @ b.double()).norm())
        row[what + "_err"] = float(err)
    results.put(row)


def scenario(n: int, lock: bool, size: int) -> list[dict]:
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="kitjit-ranks-") as cache:
        procs = [ctx.Process(target=_rank, args=(r, cache, lock, size, barrier, results))
                 for r in range(n)]
        for p in procs:
            p.start()
        rows = [results.get(timeout=1200) for _ in procs]
        for p in procs:
            p.join(timeout=60)
    return sorted(rows, key=lambda r: r["rank"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--size", type=int, default=4096, help="M = N = K of the bf16 GEMM")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("ranks_first_launch: needs a CUDA GPU (it measures compiles and GPU timing)")
    print(f"GEMM {args.size}^3 bf16 on {torch.cuda.get_device_name(0)} "
          f"({torch.cuda.device_count()} GPUs); empty cache per scenario")
    head = (f"{'scenario':<12}{'rank':>5}{'gpu':>4}  {'fixed s':>8}{'ptx':>4}  "
            f"{'tuned s':>8}{'ptx':>4}{'timed':>6}  {'rel err':>8}")
    print(head)
    print("-" * len(head))
    plan = [(1, True, "1 proc")] + [(args.ranks, True, f"{args.ranks} lock"),
                                    (args.ranks, False, f"{args.ranks} nolock")]
    for n, lock, name in plan:
        for r in scenario(n, lock, args.size):
            (fs, fc, _), (ts, tc, tt) = r["fixed"], r["tuned"]
            err = max(r["fixed_err"], r["tuned_err"])
            print(f"{name:<12}{r['rank']:>5}{r['gpu']:>4}  {fs:>8.2f}{fc:>4}  "
                  f"{ts:>8.2f}{tc:>4}{tt:>6}  {err:>8.1e}", flush=True)
    print("fixed: first launch with one config (1 kernel); tuned: first autotuned launch "
          "(5 configs). ptx / timed: compiles and config timings done by that rank itself.")


if __name__ == "__main__":
    main()

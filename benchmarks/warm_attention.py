"""Compile the attention forward section's kernels (kitjit's configs and FA4's) in parallel
processes before `bench.py --only attention` runs, so a GPU call spends its time timing, not
compiling one kernel after another (each takes seconds; the section has ~40 of them).

Both land in their on-disk caches (kitjit's, and FA4's with
FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1, which this script and the benchmark must share),
keyed on the same shapes, so the benchmark's process loads them. Nothing is timed here.

    FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 python benchmarks/warm_attention.py [--procs 8]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


def _task(args) -> str:
    (B, H, S, D), causal = args
    import peers
    import torch
    from bench import ATTN_CONFIGS

    from kitjit.nn.attention import attention

    t0 = time.time()
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    done = []
    for cfg in [{}] + ATTN_CONFIGS[D]:
        try:
            attention(q, k, v, causal, **cfg)
            done.append("ok")
        except Exception as e:  # the benchmark reports it again
            done.append(f"{type(e).__name__}")
    fa4 = peers.fa4_forward(q, k, v, causal)
    torch.cuda.synchronize()
    return (f"B{B} H{H} S{S} D{D} causal={causal}: {' '.join(done)}, FA4 "
            f"{'ok' if fa4 else peers.status().get('fa4')} ({time.time() - t0:.0f} s)")


def main() -> None:
    from bench import ATTN_CASES

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--procs", type=int, default=8)
    args = ap.parse_args()
    tasks = [(c, causal) for c in ATTN_CASES for causal in (False, True)]
    t0 = time.time()
    with mp.get_context("spawn").Pool(args.procs) as pool:
        for line in pool.imap_unordered(_task, tasks):
            print("warm:", line, flush=True)
    print(f"warm: {len(tasks)} cases in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()

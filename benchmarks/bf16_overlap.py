"""bf16 GEMM (issue 15's bf16 bar): examples/matmul.py's default against OVERLAP (each tile's
C stored while the next tile's k-step 0 runs) and cuBLAS, interleaved in one run.

Rows: 4096^3, 8192^3, 8192x8192x1024, 16384x1024x4096 (`--shapes` to change), each with B
[K, N] (cuBLAS: a @ b) and B [N, K] ("bt": a @ bt.T, the weights' layout). Columns:
- `default`: the config matmul(a, b) runs at these shapes (the tuner keeps only 128x256
  tiles where they fill the GPU: BM=128, BN=256, 4 stages, TMA store in halves), timed twice
  (`default'`) as a control: the gap between the two is the run's noise;
- `ovl halves`: the same with OVERLAP=True; `ovl whole s3`: OVERLAP with the whole tile's
  64 KB staging (3 stages fit beside it); `ovl direct`: OVERLAP with 16-byte register stores.
Every variant is checked against cuBLAS's output (outputs NaN-poisoned) and the OVERLAP ones
for bit-equality with `default` (same sums in the same order). Timing as in gemm_family.py
(steady clocks, L2 flushed, medians), `--rounds` interleaved rounds, best of.

    python benchmarks/bf16_overlap.py [--rounds 3] [--shapes 4096x4096x4096,...] [--json f]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import ab_variants as ab  # noqa: E402
import gemm_family as gf  # noqa: E402
import matmul as mm  # noqa: E402

SHAPES = "4096x4096x4096,8192x8192x8192,8192x8192x1024,16384x1024x4096"
DEFAULT = dict(mm.CONFIGS_TMA[0].kwargs, num_warps=mm.CONFIGS_TMA[0].num_warps, OVERLAP=False)
VARIANTS = {  # name -> matmul keyword arguments
    "default": DEFAULT,
    "ovl halves": dict(DEFAULT, OVERLAP=True),
    "ovl whole s3": dict(DEFAULT, STAGES=3, TMA_STORE=1, OVERLAP=True),
    "ovl direct": dict(DEFAULT, TMA_STORE=0, OVERLAP=True),
    "default'": DEFAULT,
}


def run_shape(M: int, N: int, K: int, trans_b: bool) -> dict:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    bb = b.t().contiguous() if trans_b else b
    flop = 2 * M * N * K / 1e9
    runs = {"cublas": (lambda: a @ bb.t()) if trans_b else (lambda: a @ b)}
    ref = runs["cublas"]().double()
    notes = ab.checked_runs(VARIANTS, lambda **cfg: mm.matmul(a, bb, trans_b=trans_b, **cfg),
                            ref, f"{M}x{N}x{K}", "default", runs)
    ms = gf.interleaved(runs)
    tf = {n: flop / v for n, v in ms.items()}
    return {"shape": f"{M}x{N}x{K}" + (" bt" if trans_b else ""), "tflops": tf,
            "x_cublas": {n: tf[n] / tf["cublas"] for n in tf}, "notes": notes}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    gf.ROUNDS = args.rounds
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    rows = []
    for trans_b in (False, True):
        for shape in args.shapes.split(","):
            M, N, K = map(int, shape.split("x"))
            rows.append(run_shape(M, N, K, trans_b))
            print(rows[-1]["shape"], {n: round(v) for n, v in rows[-1]["tflops"].items()},
                  rows[-1]["notes"], flush=True)
    ab.print_table(rows, "x_cublas", "cuBLAS (same B layout)",
                   {"geomean B [K,N]": lambda r: not r["shape"].endswith(" bt"),
                    "geomean B [N,K]": lambda r: r["shape"].endswith(" bt")}, label_width=20)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

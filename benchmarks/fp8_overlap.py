"""fp8 e4m3 GEMM, per-tensor scales (issue 15's fp8 bar): the old default, the tuned default
and the epilogue-overlap variants against torch._scaled_mm, interleaved in one run.

Rows: 4096^3, 8192^3, 8192x8192x1024, 16384x1024x4096 (`--shapes` to change). Columns:
- `old default`: examples/matmul_fp8.py's DEFAULT before session 11 (128x256, 4 stages,
  TMA store in halves, no OVERLAP),
  timed twice (`old default'`) as a control: the spread between the two is the run's noise;
- `tuned`: matmul_fp8 with no config (kit.autotune over CONFIGS, timed on its first call
  before this run's timing; its pick is printed);
- `ovl halves` / `ovl direct` / `ovl whole s3`: OVERLAP=True (each tile's C stored while the
  next tile's k-step 0 runs) with the TMA store in halves, direct 16-byte stores, and the
  whole-tile staging with 3 stages.
Every variant is checked against _scaled_mm's output (outputs NaN-poisoned) and, for OVERLAP,
for bit-equality with the old default (same sums in the same order). Timing as in
gemm_family.py (steady clocks, L2 flushed, medians), `--rounds` interleaved rounds, best of.

    python benchmarks/fp8_overlap.py [--rounds 3] [--shapes 4096x4096x4096,...] [--json f]
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
import matmul_fp8 as f8  # noqa: E402

SHAPES = "4096x4096x4096,8192x8192x8192,8192x8192x1024,16384x1024x4096"
VARIANTS = {  # name -> matmul_fp8 keyword arguments
    "old default": dict(f8.DEFAULT, OVERLAP=False),
    "tuned": {},
    "ovl halves": dict(f8.DEFAULT, OVERLAP=True),   # DEFAULT since session 11
    "ovl direct": dict(f8.DEFAULT, TMA_STORE=False, OVERLAP=True),
    "ovl whole s3": dict(f8.DEFAULT, STAGES=3, TMA_STORE=1, OVERLAP=True),
    "old default'": dict(f8.DEFAULT, OVERLAP=False),
}


def run_shape(M: int, N: int, K: int) -> dict:
    e4 = torch.float8_e4m3fn
    a = (torch.randn(M, K, device="cuda") * 2).to(e4)
    b = (torch.randn(N, K, device="cuda") * 2).to(e4)
    sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(0.25, device="cuda")
    flop = 2 * M * N * K / 1e9

    def peer(fast):
        return lambda: torch._scaled_mm(a, b.T, sa, sb, out_dtype=torch.bfloat16,
                                        use_fast_accum=fast)

    ref = peer(True)().double()
    runs = {"scaled_mm fast": peer(True), "scaled_mm": peer(False)}
    notes = ab.checked_runs(VARIANTS, lambda **cfg: f8.matmul_fp8(a, b, sa, sb, **cfg), ref,
                            f"{M}x{N}x{K}", "old default", runs)
    ms = gf.interleaved(runs)
    tf = {n: flop / v for n, v in ms.items()}
    return {"shape": f"{M}x{N}x{K}", "tflops": tf,
            "x_fast": {n: tf[n] / tf["scaled_mm fast"] for n in tf}, "notes": notes}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    gf.ROUNDS = args.rounds
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    rows = []
    for shape in args.shapes.split(","):
        M, N, K = map(int, shape.split("x"))
        rows.append(run_shape(M, N, K))
        print(rows[-1]["shape"], {n: round(v) for n, v in rows[-1]["tflops"].items()},
              rows[-1]["notes"], flush=True)
    ab.print_table(rows, "x_fast", "scaled_mm fast", {"geomean x fast": lambda r: True},
                   width=10)
    for c in f8.matmul_fp8_tuned.chosen():
        print(f"tuner: [{c['key']}] -> {c['config']} ({c['ms']} ms)")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

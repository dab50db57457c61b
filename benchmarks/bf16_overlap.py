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
    notes, outs = {}, {}
    for name, cfg in VARIANTS.items():
        try:
            with gf.poisoned():
                outs[name] = mm.matmul(a, bb, trans_b=trans_b, **cfg)
            gf.checked(outs[name].double(), ref, 1e-2, f"{M}x{N}x{K} {name}")
            runs[name] = lambda cfg=cfg: mm.matmul(a, bb, trans_b=trans_b, **cfg)
        except Exception as e:  # noqa: BLE001  (a variant that fails is reported, not fatal)
            notes[name] = f"failed: {type(e).__name__}: {str(e)[:200]}"
    for name in VARIANTS:
        if name.startswith("ovl") and name in outs and "default" in outs:
            notes.setdefault(name, "bit-equal" if torch.equal(outs[name], outs["default"])
                             else "NOT bit-equal to default (within tolerance)")
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
    names = list(rows[0]["tflops"])
    w = [max(len(n), 9) + 2 for n in names]
    print("\nTFLOP/s, and x cuBLAS (same B layout) in the same run")
    print("shape".ljust(20) + "".join(n.rjust(k) for n, k in zip(names, w)))
    for r in rows:
        print(r["shape"].ljust(20) + "".join(f"{r['tflops'].get(n, 0):{k}.0f}"
                                             for n, k in zip(names, w)))
        print("".ljust(20) + "".join(f"{r['x_cublas'].get(n, 0):{k}.3f}"
                                     for n, k in zip(names, w)))
    for label, sel in (("geomean B [K,N]", False), ("geomean B [N,K]", True)):
        part = [r for r in rows if r["shape"].endswith(" bt") == sel]
        print(label.ljust(20) + "".join(
            f"{gf.geomean(r['x_cublas'].get(n) for r in part) or 0:{k}.3f}"
            for n, k in zip(names, w)))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

"""The A/B scripts' shared steps (fp8_overlap.py, bf16_overlap.py): run each variant once
with a poisoned output and check it, note whether the OVERLAP variants match a baseline bit
for bit, and print the TFLOP/s table with each column's ratio to a peer and geomeans."""

from __future__ import annotations

import gemm_family as gf
import torch


def checked_runs(variants: dict, call, ref, what: str, baseline: str,
                 runs: dict) -> dict:
    """Adds `name -> lambda: call(**cfg)` to `runs` for each variant whose poisoned first
    output is right against `ref`; returns notes: failures, and for the `ovl*` variants
    whether they equal `baseline`'s output bit for bit."""
    notes, outs = {}, {}
    for name, cfg in variants.items():
        try:
            with gf.poisoned():
                outs[name] = call(**cfg)
            gf.checked(outs[name].double(), ref, 1e-2, f"{what} {name}")
            runs[name] = lambda cfg=cfg: call(**cfg)
        except Exception as e:  # noqa: BLE001  (a variant that fails is reported, not fatal)
            notes[name] = f"failed: {type(e).__name__}: {str(e)[:200]}"
    for name in variants:
        if name.startswith("ovl") and name in outs and baseline in outs:
            notes.setdefault(name, f"bit-equal to {baseline}"
                             if torch.equal(outs[name], outs[baseline]) else
                             f"NOT bit-equal to {baseline} (within tolerance)")
    return notes


def print_table(rows: list, ratio: str, peer: str, groups: dict, width: int = 9,
                label_width: int = 16) -> None:
    """rows: {"shape", "tflops", ratio: {name: x peer}}; one TFLOP/s line and one ratio line
    a shape, then a geomean line for each `groups` label -> predicate on a row."""
    names = list(rows[0]["tflops"])
    w = [max(len(n), width) + 2 for n in names]
    print(f"\nTFLOP/s, and x {peer} in the same run")
    print("shape".ljust(label_width) + "".join(n.rjust(k) for n, k in zip(names, w)))
    for r in rows:
        print(r["shape"].ljust(label_width) + "".join(f"{r['tflops'].get(n, 0):{k}.0f}"
                                                      for n, k in zip(names, w)))
        print("".ljust(label_width) + "".join(f"{r[ratio].get(n, 0):{k}.3f}"
                                              for n, k in zip(names, w)))
    for label, keep in groups.items():
        part = [r for r in rows if keep(r)]
        print(label.ljust(label_width) + "".join(
            f"{gf.geomean(r[ratio].get(n) for r in part) or 0:{k}.3f}"
            for n, k in zip(names, w)))

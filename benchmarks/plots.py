"""PNG plots of a `benchmarks/bench.py` result, written beside its JSON: one grouped bar chart
per section (norms in GB/s, GEMM and attention in TFLOPS), kitjit beside its peers. Needs
matplotlib; without it `write_plots` writes nothing and says so."""

from __future__ import annotations

import os
from typing import Any

# section -> (row label field, unit, [(series name, how to read it from a row)])
_SECTIONS: dict[str, tuple[Any, str, list[tuple[str, Any]]]] = {
    "norms": (lambda r: f"{r['kernel']}\n{r['shape']}", "GB/s",
              [("kitjit", lambda r: r.get("kitjit_gbs")), ("torch", lambda r: r.get("torch_gbs")),
               ("triton", lambda r: r.get("triton_gbs"))]),
    "gemm": (lambda r: r["shape"], "TFLOPS",
             [("kitjit", lambda r: r.get("kitjit_tflops")),
              ("cuBLAS", lambda r: r.get("cublas_tflops")),
              ("triton", lambda r: r.get("triton_tflops"))]),
    "attention": (lambda r: r["case"], "TFLOPS",
                  [("kitjit", lambda r: r.get("kitjit_tflops")),
                   ("flash", lambda r: (r.get("peers") or {}).get("flash")),
                   ("cuDNN", lambda r: (r.get("peers") or {}).get("cudnn")),
                   ("triton", lambda r: (r.get("peers") or {}).get("triton"))]),
    "attention_bwd": (lambda r: r["case"], "TFLOPS",
                      [("kitjit", lambda r: r.get("kitjit_tflops")),
                       ("flash", lambda r: (r.get("peers") or {}).get("flash")),
                       ("cuDNN", lambda r: (r.get("peers") or {}).get("cudnn"))]),
    "decode": (lambda r: r["case"], "us (CUDA graph, lower is better)",
               [("kitjit", lambda r: (r.get("graph_us") or {}).get("kitjit")),
                ("flash", lambda r: (r.get("graph_us") or {}).get("flash")),
                ("cuDNN", lambda r: (r.get("graph_us") or {}).get("cudnn")),
                ("efficient", lambda r: (r.get("graph_us") or {}).get("efficient"))]),
}


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def write_plots(results: dict[str, Any], json_path: str) -> list[str]:
    """Write `<json stem>-<section>.png` beside `json_path` for each section with rows;
    returns the paths written ([] without matplotlib, after one line on stdout)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plots: matplotlib is not installed (pip install matplotlib); JSON only")
        return []
    stem = os.path.splitext(json_path)[0]
    written = []
    for section, (label, unit, series) in _SECTIONS.items():
        rows = [r for r in results.get(section) or [] if isinstance(r, dict)]
        if not rows:
            continue
        present = [(n, f) for n, f in series if any(_num(f(r)) is not None for r in rows)]
        fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(rows)), 4.5))
        width = 0.8 / max(1, len(present))
        for i, (name, get) in enumerate(present):
            xs = [k + (i - (len(present) - 1) / 2) * width for k in range(len(rows))]
            ys = [_num(get(r)) or 0.0 for r in rows]
            ax.bar(xs, ys, width, label=name)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([label(r) for r in rows], fontsize=7, rotation=30, ha="right")
        ax.set_ylabel(unit)
        ax.set_title(f"{section} on {results.get('device', '?')}")
        ax.legend()
        fig.tight_layout()
        path = f"{stem}-{section}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written

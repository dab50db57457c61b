"""`kit.testing.perf_report` and `kit.testing.Benchmark`: Triton's benchmark sweeps (same
names, same call convention), so a `triton.testing.perf_report` script ports by its import.

The decorated function is called once per (x value, line value) as
`fn(**x_args, **{line_arg: line_value}, **benchmark.args, **run_kwargs)` and returns a number
or a `(value, min, max)` triple. `.run()` prints a table (`print_data=True`), writes
`<plot_name>.csv` and `<plot_name>.png` under `save_path`, and shows the plot
(`show_plots=True`). matplotlib is imported only to plot: without it, asking for a plot is one
ImportError after the table was printed and the CSV written; pandas is used only when present
(`return_df=True` then returns a DataFrame, else a list of row dicts).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Benchmark", "Mark", "perf_report", "format_table"]


class Benchmark:
    """One sweep: the x axis (`x_names` take the values `x_vals`), one line per value of
    `line_arg` (`line_vals`, labelled `line_names`, drawn with `styles`: (color, linestyle)
    pairs), fixed extra arguments `args`."""

    def __init__(self, x_names: Sequence[str], x_vals: Sequence[Any], line_arg: str,
                 line_vals: Sequence[Any], line_names: Sequence[str], plot_name: str,
                 args: dict[str, Any] | None = None, xlabel: str = "", ylabel: str = "",
                 x_log: bool = False, y_log: bool = False,
                 styles: Sequence[tuple[str, str]] | None = None,
                 color: Any = None):
        if isinstance(x_names, str) or not x_names:
            raise TypeError("Benchmark: x_names is a non-empty list of argument names")
        if len(line_vals) != len(line_names):
            raise ValueError(f"Benchmark {plot_name!r}: {len(line_vals)} line_vals but "
                             f"{len(line_names)} line_names")
        if styles is not None and len(styles) < len(line_vals):
            raise ValueError(f"Benchmark {plot_name!r}: {len(styles)} styles for "
                             f"{len(line_vals)} lines")
        self.x_names = list(x_names)
        self.x_vals = list(x_vals)
        self.line_arg = line_arg
        self.line_vals = list(line_vals)
        self.line_names = list(line_names)
        self.plot_name = plot_name
        self.args = dict(args or {})
        self.xlabel = xlabel
        self.ylabel = ylabel
        self.x_log = x_log
        self.y_log = y_log
        self.styles = styles
        self.color = color


def _float(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def format_table(columns: list[str], rows: list[list[Any]]) -> str:
    """A plain right-aligned text table (what is printed when pandas is absent)."""
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.6g}"
        return str(v)

    text = [[cell(v) for v in r] for r in rows]
    widths = [max(len(c), *(len(r[i]) for r in text)) if text else len(c)
              for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in text]
    return "\n".join(lines)


class Mark:
    """A function with its benchmarks: `.run(...)` sweeps them (what `perf_report` returns)."""

    def __init__(self, fn: Callable[..., Any], benchmarks: Benchmark | Sequence[Benchmark]):
        self.fn = fn
        self.benchmarks = benchmarks

    def _run(self, bench: Benchmark, save_path: str, show_plots: bool, print_data: bool,
             diff_col: bool = False, return_df: bool = False, **kwargs: Any) -> Any:
        columns = [*bench.x_names]
        for name in bench.line_names:
            columns += [name, f"{name}-min", f"{name}-max"]
        rows: list[list[Any]] = []
        for x in bench.x_vals:
            xs = list(x) if isinstance(x, (list, tuple)) else [x] * len(bench.x_names)
            if len(xs) != len(bench.x_names):
                raise ValueError(f"{bench.plot_name}: x value {x!r} has {len(xs)} parts for "
                                 f"x_names {bench.x_names}")
            x_args = dict(zip(bench.x_names, xs))
            row: list[Any] = list(xs)
            for y in bench.line_vals:
                ret = self.fn(**x_args, **{bench.line_arg: y}, **bench.args, **kwargs)
                if isinstance(ret, (list, tuple)):
                    if len(ret) != 3:
                        raise ValueError(f"{bench.plot_name}: the benchmark returned {ret!r}; "
                                         "return a number or (value, min, max)")
                    v, lo, hi = (_float(r) for r in ret)
                else:
                    v = lo = hi = _float(ret)
                row += [v, lo, hi]
            rows.append(row)
        main = [*bench.x_names, *bench.line_names]
        idx = [columns.index(c) for c in main]
        main_rows = [[r[i] for i in idx] for r in rows]
        if diff_col and len(bench.line_names) == 2:
            main.append("Diff")
            for r in main_rows:
                r.append(r[-1] - r[-2])
        try:
            import pandas as pd
        except ImportError:
            pd = None
        df = pd.DataFrame(main_rows, columns=main) if pd is not None else None
        if print_data:
            print(bench.plot_name + ":")
            print(df.to_string(index=False) if df is not None else format_table(main, main_rows))
        if save_path:
            os.makedirs(save_path, exist_ok=True)
            with open(os.path.join(save_path, f"{bench.plot_name}.csv"), "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(main)
                w.writerows(main_rows)
        if save_path or show_plots:
            self._plot(bench, columns, rows, save_path, show_plots)
        if return_df:
            return df if df is not None else [dict(zip(main, r)) for r in main_rows]
        return None

    def _plot(self, bench: Benchmark, columns: list[str], rows: list[list[Any]],
              save_path: str, show_plots: bool) -> None:
        try:
            import matplotlib
            if not show_plots:
                matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError(f"kit.testing.perf_report: plotting {bench.plot_name!r} needs "
                              "matplotlib (pip install matplotlib); the table was printed "
                              "and the CSV written. Pass save_path='' and show_plots=False "
                              "for tables only.") from None
        fig, ax = plt.subplots()
        x = [r[0] for r in rows]
        for i, name in enumerate(bench.line_names):
            j = columns.index(name)
            y = [r[j] for r in rows]
            lo = [r[j + 1] for r in rows]
            hi = [r[j + 2] for r in rows]
            style = bench.styles[i] if bench.styles else None
            col = style[0] if style else None
            ls = style[1] if style and len(style) > 1 else None
            ax.plot(x, y, label=name, color=col, ls=ls)
            if lo != y or hi != y:
                ax.fill_between(x, lo, hi, alpha=0.15, color=col)
        ax.legend()
        ax.set_xlabel(bench.xlabel or bench.x_names[0])
        ax.set_ylabel(bench.ylabel)
        ax.set_title(bench.plot_name)
        if bench.x_log:
            ax.set_xscale("log")
        if bench.y_log:
            ax.set_yscale("log")
        if save_path:
            fig.savefig(os.path.join(save_path, f"{bench.plot_name}.png"))
        if show_plots:
            plt.show()
        plt.close(fig)

    def run(self, show_plots: bool = False, print_data: bool = False, save_path: str = "",
            return_df: bool = False, **kwargs: Any) -> Any:
        """Sweep every benchmark; returns the table(s) with `return_df` (one per benchmark,
        a list when there are several)."""
        benches = [self.benchmarks] if isinstance(self.benchmarks, Benchmark) \
            else list(self.benchmarks)
        out = [self._run(b, save_path, show_plots, print_data, return_df=return_df, **kwargs)
               for b in benches]
        if return_df:
            return out[0] if isinstance(self.benchmarks, Benchmark) else out
        return None


def perf_report(benchmarks: Benchmark | Sequence[Benchmark]) -> Callable[[Callable], Mark]:
    """Decorator: `@kit.testing.perf_report(kit.testing.Benchmark(...))` above a function
    that measures one point; `.run(print_data=True, save_path=...)` sweeps it."""
    return lambda fn: Mark(fn, benchmarks)

"""Runs the port corpus: public Triton kernels (pinned in manifest.json, fetched into
`.corpus/` by fetch.py) with only their imports swapped to kitjit, each case checked against
float64 torch, forward and backward where the op has one.

    python benchmarks/port_corpus/run.py [--device cpu|cuda] [--only SOURCE] [-k SUBSTR]
                                         [--json PATH] [--tune all]

Prints a table per source (cases, passed, failed with a one-line reason) and writes the
results as JSON (default `.corpus/results-<device>.json`). Exit status 0 when every case
that ran passed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import corpus_harness as harness  # noqa: E402
from corpus_harness import CACHE, ROOT, SOURCES  # noqa: E402

CASE_MODULES = ("cases_attorch", "cases_fla", "cases_unsloth", "cases_liger", "cases_kernl",
                "cases_mamba", "cases_applied_ai")
KITJIT_DIRS = tuple(os.path.join(ROOT, d) + os.sep for d in ("kitjit", "frontend", "backend"))


def load_cases() -> None:
    import importlib

    for m in CASE_MODULES:
        try:
            importlib.import_module(m)
        except ModuleNotFoundError as e:
            if e.name != m:
                raise


def reason(e: BaseException) -> tuple[str, bool]:
    """One line for the table, and whether it is an internal error of kitjit (a traceback
    from inside kitjit that is not one of its user-facing errors)."""
    from kitjit.frontend.errors import CompileError

    frames = traceback.extract_tb(e.__traceback__)
    inner = frames[-1] if frames else None
    where = ""
    for f in reversed(frames):  # the innermost frame of the package's own code
        if os.sep + ".corpus" + os.sep in f.filename:
            where = f" [{os.path.relpath(f.filename, CACHE)}:{f.lineno}]"
            break
    in_kitjit = inner is not None and inner.filename.startswith(KITJIT_DIRS)
    user_facing = isinstance(e, (CompileError, NotImplementedError, AssertionError))
    internal = in_kitjit and not user_facing
    msg = " ".join(str(e).split()) or type(e).__name__
    if len(msg) > 160:
        msg = msg[:157] + "..."
    tag = "INTERNAL " if internal else ""
    return f"{tag}{type(e).__name__}: {msg}{where}", internal


def run_case(case: harness.Case, device: str, tune_all: bool) -> dict:
    import torch

    torch.manual_seed(0)
    t0 = time.perf_counter()
    count = harness.LaunchCount()
    try:
        with harness.environment(SOURCES[case.source], device, tune_all, count) as imp:
            case.fn(imp, device)
        if device == "cuda":
            torch.cuda.synchronize()
        elif count.n == 0:
            raise AssertionError("no kernel ran in kitjit's interpreter (the package's "
                                 "fallback path?)")
        out = {"status": "passed", "launches": count.n}
    except Exception as e:  # a failing case is a result, not the end of the run
        why, internal = reason(e)
        out = {"status": "failed", "reason": why, "internal": internal,
               "traceback": traceback.format_exc(limit=-8)}
    out.update(source=case.source, case=case.name, seconds=round(time.perf_counter() - t0, 2))
    return out


def select(only: list[str] | None, k: str | None, quick: bool = False) -> list[harness.Case]:
    load_cases()
    names = only or list(SOURCES)
    unknown = sorted(set(names) - set(SOURCES))
    if unknown:
        raise SystemExit(f"unknown source(s) {unknown}; known: {sorted(SOURCES)}")
    return [c for n in names for c in SOURCES[n].cases
            if (k is None or k in c.name) and (c.quick or not quick)]


def table(results: list[dict]) -> str:
    rows = ["| source | cases | passed | failed |", "|---|---|---|---|"]
    by: dict[str, list[dict]] = {}
    for r in results:
        by.setdefault(r["source"], []).append(r)
    for src, rs in by.items():
        p = sum(r["status"] == "passed" for r in rs)
        rows.append(f"| {src} | {len(rs)} | {p} | {len(rs) - p} |")
    p = sum(r["status"] == "passed" for r in results)
    rows.append(f"| all | {len(results)} | {p} | {len(results) - p} |")
    fails = [f"  {r['source']}/{r['case']}: {r['reason']}" for r in results
             if r["status"] != "passed"]
    return "\n".join(rows + (["failed:"] + fails if fails else []))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--only", action="append", help="a source (repeatable)")
    ap.add_argument("-k", help="only cases whose name contains this")
    ap.add_argument("--quick", action="store_true", help="only the cases the pytest runs")
    ap.add_argument("--json", help="where the results go")
    ap.add_argument("--tune", choices=("first", "all"), default="first")
    ap.add_argument("-v", action="store_true", help="print each failure's traceback")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds: start no case after this (the rest reported as not run)")
    args = ap.parse_args(argv)
    if args.device == "cpu":
        os.environ["KITJIT_INTERPRET"] = "1"
    cases = select(args.only, args.k, args.quick)
    missing = sorted({c.source for c in cases if not harness.cache_present(c.source)})
    if missing:
        print(f"not fetched (skipped): {missing}: python benchmarks/port_corpus/fetch.py")
        cases = [c for c in cases if c.source not in missing]
    path = args.json or os.path.join(CACHE, f"results-{args.device}.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    results, t0 = [], time.perf_counter()
    skipped = []
    for c in cases:
        if args.budget is not None and time.perf_counter() - t0 > args.budget:
            skipped.append(f"{c.source}/{c.name}")
            continue
        r = run_case(c, args.device, args.tune == "all")
        results.append(r)
        write_json(path, args.device, results, skipped)  # after each case: a kill keeps them
        mark = "ok  " if r["status"] == "passed" else "FAIL"
        print(f"{mark} {r['seconds']:6.1f}s {c.source}/{c.name}"
              + ("" if r["status"] == "passed" else f": {r['reason']}"), flush=True)
        if args.v and r["status"] != "passed":
            print(r["traceback"])
    write_json(path, args.device, results, skipped)
    print(f"\n{args.device}, {time.perf_counter() - t0:.0f} s")
    print(table(results))
    if skipped:
        print(f"not run (past --budget): {len(skipped)}: {' '.join(skipped)}")
    return 0 if all(r["status"] == "passed" for r in results) and not skipped else 1


def write_json(path: str, device: str, results: list[dict], skipped: list[str]) -> None:
    with open(path, "w") as f:
        json.dump({"device": device, "results": results, "not_run": skipped}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())

"""The port suite's figure: which real Triton kernels run correctly after the import swap.

    python tests/ports/report.py          # the CPU interpreter runs
    python tests/ports/report.py --gpu    # the same cases on the GPU (`-m gpu`)

Runs tests/ports/test_liger.py and prints one line per kernel (pass / xfail and the named
gap / fail / skip) and the pass rate: passes over all cases that ran. Exit status 1 when a
case fails outright (neither a pass nor an expected, named gap).
"""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)  # this checkout's kitjit, as `python -m pytest` in the root takes it


class _Collect:
    def __init__(self):
        self.rows = {}

    def pytest_runtest_logreport(self, report):
        name = report.nodeid.split("[", 1)[-1].rstrip("]")
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            if hasattr(report, "wasxfail"):
                outcome = "xfail" if report.skipped else "XPASS"
                why = report.wasxfail
            elif report.skipped:
                outcome, why = "skip", str(report.longrepr[-1]) if report.longrepr else ""
            elif report.failed:
                outcome = "fail"
                why = report.longreprtext.strip().splitlines()[-1] if report.longreprtext else ""
            else:
                outcome, why = "pass", ""
            self.rows[name] = (outcome, why)


def main(argv: list[str]) -> int:
    gpu = "--gpu" in argv
    collect = _Collect()
    args = [os.path.join(HERE, "test_liger.py"), "-q", "-p", "no:cacheprovider",
            "--no-header", "-rN", "-m", "gpu" if gpu else "not gpu"]
    os.chdir(ROOT)
    pytest.main(args, plugins=[collect])
    rows = collect.rows
    if not rows:
        print("no cases ran")
        return 1
    width = max(map(len, rows))
    print(f"\nLiger-Kernel ports, {'GPU' if gpu else 'CPU interpreter'}:")
    for name, (outcome, why) in sorted(rows.items()):
        print(f"  {name:<{width}}  {outcome:<5}  {why}".rstrip())
    ran = [o for o, _ in rows.values() if o != "skip"]
    passed = sum(o == "pass" for o in ran)
    counts = {k: sum(o == k for o in ran) for k in ("pass", "xfail", "fail", "XPASS")}
    rate = 100.0 * passed / len(ran) if ran else 0.0
    print(f"\n{passed}/{len(ran)} kernels run correctly after only the import swap: "
          f"{rate:.0f}%  ({', '.join(f'{v} {k}' for k, v in counts.items() if v)}"
          f"{', ' if ran else ''}{len(rows) - len(ran)} skipped)")
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

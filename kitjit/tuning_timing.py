"""How the autotuner times a config (CUDA events after an L2 flush, median of many runs)
and shows its progress on a terminal."""

from __future__ import annotations

import shutil
import statistics
import sys
from collections.abc import Callable
from typing import Any


def _bench_cuda(fn: Callable[[], Any], setup: Callable[[], Any], warmup_ms: float,
                rep_ms: float, device: int) -> float:
    """Median milliseconds of `fn()` timed with CUDA events, L2 flushed and `setup()` run
    before each (outside the timed window); run counts from a 5-run estimate, as Triton's
    do_bench."""
    import torch

    with torch.cuda.device(device):
        flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")
        setup()
        fn()  # the first launch loads the kernel; errors surface here
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(5):
            flush.zero_()
            setup()
            fn()
        e.record()
        torch.cuda.synchronize()
        est = max(s.elapsed_time(e) / 5, 1e-4)
        for _ in range(max(1, int(warmup_ms / est))):
            setup()
            fn()
        n = min(max(5, int(rep_ms / est)), 1000)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            flush.zero_()
            setup()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return float(statistics.median(a.elapsed_time(b) for a, b in zip(starts, ends)))


class _Progress:
    """One self-rewriting line on stderr while tuning, when stderr is a terminal; silent
    otherwise (logs and CI stay clean)."""

    def __init__(self, name: str, total: int, done: int, best: tuple[float, str] | None):
        stream = sys.stderr
        try:
            tty = stream is not None and stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        self.stream = stream if tty else None
        self.name, self.total, self.done, self.best = name, total, done, best
        self.shown = False

    def step(self, result: tuple[float, str] | None) -> None:
        self.done += 1
        if result is not None and (self.best is None or result[0] < self.best[0]):
            self.best = result
        self.show()

    def show(self, phase: str = "") -> None:
        if self.stream is None:
            return
        line = f"kitjit autotune {self.name}: {self.done}/{self.total} configs"
        if phase:
            line += f" ({phase})"
        if self.best is not None:
            line += f", best {self.best[0]:.4f} ms ({self.best[1]})"
        width = shutil.get_terminal_size((100, 20)).columns - 1
        self.stream.write("\r" + line[:width] + "\033[K")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.stream is not None and self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()

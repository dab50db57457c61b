"""The search's progress: one stderr line, redrawn in place on a terminal (a line per event
elsewhere), and the same events as records of the logger "kitjit.graph" (INFO; DEBUG for
each candidate). With KITJIT_LOG set, the logger alone speaks (at the level it names), so
the two never print the same thing twice; `progress=False` silences the line."""

from __future__ import annotations

import os
import sys
import time

from ..log_config import LEVELS, get_logger

log = get_logger("graph")
WIDTH = 20


class Progress:
    def __init__(self, enabled: bool | None, total: int = 0):
        logging_on = os.environ.get("KITJIT_LOG", "").strip().lower() in LEVELS
        self.line = bool(enabled if enabled is not None else True) and not logging_on
        self.tty = self.line and sys.stderr.isatty()
        self.start = time.time()
        self.total, self.done = total, 0
        self.best = ""
        self._drawn = False

    def elapsed(self) -> float:
        return time.time() - self.start

    def _write(self, text: str, final: bool = False) -> None:
        if not self.line:
            return
        if self.tty:
            sys.stderr.write("\r\x1b[2K" + text + ("\n" if final else ""))
            self._drawn = not final
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def say(self, msg: str) -> None:
        """An event worth a line of its own (plan counts, budget, the choice)."""
        log.info("%s", msg)
        if self._drawn:
            sys.stderr.write("\n")
            self._drawn = False
        self._write(f"kit.graph [{self.elapsed():5.1f}s] {msg}", final=True)

    def step(self, msg: str, best: str | None = None) -> None:
        """One candidate done: the bar moves; `msg` says what happened to it."""
        self.done += 1
        if best:
            self.best = best
        log.debug("%s", msg)
        n = self.total or 1
        fill = int(WIDTH * min(self.done, n) / n)
        bar = "#" * fill + "-" * (WIDTH - fill)
        text = (f"kit.graph [{self.elapsed():5.1f}s] [{bar}] {self.done}/{self.total} "
                f"{msg}" + (f" | best {self.best}" if self.best else ""))
        self._write(text)

    def close(self) -> None:
        if self._drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self._drawn = False

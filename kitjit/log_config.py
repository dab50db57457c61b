"""kitjit's diagnostics go through `logging`: the logger "kitjit" and its children
("kitjit.jit": compiles and cache hits, the interpreter fallback; "kitjit.cache": the disk
cache; "kitjit.autotune": tuning results and timings; "kitjit.compiler", "kitjit.toolchain":
assemblers). Nothing is ever printed on stdout.

`KITJIT_LOG=debug|info|warning|error` (read when kitjit is imported, or by `configure()`)
sets the level of "kitjit" and adds one stderr handler to it. Unset, kitjit configures
nothing: warnings reach the application's logging setup, or stderr through Python's
last-resort handler when it has none; debug and info records are dropped.
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["get_logger", "configure", "LEVELS"]

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "warn": logging.WARNING, "error": logging.ERROR}
_HANDLER_MARK = "_kitjit_log_handler"


class _Stderr(logging.StreamHandler):
    """A handler on whatever sys.stderr is when a record is written (not at creation)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def get_logger(name: str = "") -> logging.Logger:
    """The logger "kitjit.<name>" ("kitjit" for no name)."""
    return logging.getLogger("kitjit" + ("." + name if name else ""))


def configure(value: str | None = None) -> logging.Logger:
    """Apply `value` (default: $KITJIT_LOG) to the "kitjit" logger; returns it. An unknown
    value is said once as a warning and ignored."""
    root = get_logger()
    if value is None:
        value = os.environ.get("KITJIT_LOG", "")
    value = value.strip().lower()
    ours = [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]
    if not value:
        return root
    level = LEVELS.get(value)
    if level is None:
        root.warning("ignoring KITJIT_LOG=%r (use one of debug, info, warning, error)", value)
        return root
    root.setLevel(level)
    if not ours:
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
        setattr(handler, _HANDLER_MARK, True)
        root.addHandler(handler)
        ours = [handler]
    for h in ours:
        h.setLevel(level)
    return root

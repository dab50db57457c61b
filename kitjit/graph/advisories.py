"""The assembler's notes on candidates the search is only trying (ptxas's "(C7514)
Potential Performance Loss: wgmma.mma_async instructions are serialized ...", nvJitLink's
info lines): kitjit.jit logs them as warnings, once per compile, for a kernel a user wrote.
For the dozen kernels a search compiles and mostly throws away they are noise, so while a
candidate compiles they are held back and kept with the search's stats instead
(`info["search"]["advisories"]`, the JSON of benchmarks/graph_bench.py).
KITJIT_GRAPH_ADVISORIES=1 lets them through as before (debugging a form)."""

from __future__ import annotations

import contextlib
import logging
import os

JIT_LOGGER = "kitjit.jit"
NOTE = "kitjit_assembler_note"   # the attribute kitjit.jit puts on such a record


def shown() -> bool:
    """Whether the knob asks for the notes of every candidate."""
    return os.environ.get("KITJIT_GRAPH_ADVISORIES", "").strip().lower() in (
        "1", "true", "yes", "on")


class _Hold(logging.Filter):
    def __init__(self, sink: list[str]):
        super().__init__()
        self.sink = sink

    def filter(self, record: logging.LogRecord) -> bool:
        note = getattr(record, NOTE, None)
        if note is None:
            return True
        if note not in self.sink:
            self.sink.append(note)
        return False


@contextlib.contextmanager
def held(sink: list[str]):
    """Within: the assembler's notes go to `sink` (each once), not to the log; with
    KITJIT_GRAPH_ADVISORIES set they are logged, as for any kernel, and `sink` stays
    empty."""
    if shown():
        yield
        return
    log = logging.getLogger(JIT_LOGGER)
    f = _Hold(sink)
    log.addFilter(f)
    try:
        yield
    finally:
        log.removeFilter(f)

"""Which failures of a config the autotuner may skip, and saying so.

Why: a config dropped for a reason that has nothing to do with the config (a lock or compile
that timed out under load, a race, an out-of-memory while timing) makes the tuning pick a
slower winner, and a record on disk then hands that wrong answer to every later process.
So, as in Triton, a config is skipped only for what the same source, key and GPU reproduce:
its compile error (CompileError, which OutOfResources and a failed kit.static_assert are),
the assembler refusing it (AssemblerError, Triton's PTXASError), or a launch refused for
too many registers per block (Triton's OutOfResources for threads). A compile failing
otherwise is tried once more, alone, then raised; any other failure while timing is raised.
Every skip warns once per process, naming the config and why.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings

__all__ = ["AutotuneWarning", "reason", "skippable", "warn_skipped", "with_config_note"]


class AutotuneWarning(UserWarning):
    """A config skipped by the autotuner (it does not compile for this key and GPU)."""


_warned: set[tuple[str, str, str]] = set()
_warned_lock = threading.Lock()


#: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, as kitjit.runtime.driver.check words it: a block
#: of this config needs more registers than an SM has (Triton's OutOfResources "threads",
#: which it raises when loading such a kernel)
_LAUNCH_OUT_OF_RESOURCES = "(701)"


def skippable(e: BaseException) -> bool:
    """A failure that belongs to the config (Triton skips the config for it; kitjit keeps
    it in the tuning record): a compile error (out of resources included), the assembler
    refusing the kernel, or a launch refused for too many registers per block."""
    from kitjit.frontend.errors import AssemblerError, CompileError
    from kitjit.runtime.driver import DriverError

    if isinstance(e, DriverError):
        return str(e).rstrip().endswith(_LAUNCH_OUT_OF_RESOURCES)
    return isinstance(e, (CompileError, AssemblerError))


def reason(e: BaseException) -> str:
    """One line that says why: the compiler's `error:` line if there is one."""
    lines = str(e).strip().splitlines()
    text = next((ln for ln in lines if "error:" in ln), lines[0] if lines else "")
    text = text.split("error: ", 1)[-1].strip()
    return f"{type(e).__name__}: {text}"[:300]


def warn_skipped(kernel: str, config: str, why: str, from_disk: bool = False) -> None:
    """Warn once per process that `config` of `kernel` is skipped, and why."""
    mark = (kernel, config, why)
    with _warned_lock:
        if mark in _warned:
            return
        _warned.add(mark)
    where = " (as its tuning record on disk says)" if from_disk else ""
    warnings.warn(f"kitjit autotune {kernel}: config {config} skipped{where}: {why}",
                  AutotuneWarning, stacklevel=_callers_level())


def _callers_level() -> int:
    """The stacklevel of the first frame outside kitjit (the user's launch), so that the
    warning points there; kitjit's own frame where the caller is a worker thread."""
    kit_dir = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(2), 2   # (warn_skipped's caller is level 2)
    while frame is not None and (
            os.path.abspath(frame.f_code.co_filename).startswith(kit_dir)
            or "_kit_tune" in frame.f_globals):   # (the autotuner's generated entry)
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 2


def with_config_note(e: BaseException, kernel: str, config: str) -> BaseException:
    """`e`, noting (Python 3.11+) the config whose compile or timing raised it: a failure
    that is not the config's own stops the tuning instead of dropping the config."""
    if hasattr(e, "add_note"):
        e.add_note(f"(kitjit autotune {kernel}: while compiling or timing config {config}; "
                   "only compile errors and out-of-resources skip a config, other failures "
                   "stop the tuning)")
    return e

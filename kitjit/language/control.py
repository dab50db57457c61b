"""Compile-time checks, debugging (prints, device asserts, barriers) and programmatic
dependent launch."""

from __future__ import annotations

from .base import builtin


@builtin
def static_assert(cond, msg=""):
    """A compile-time assertion on constexpr values."""


@builtin
def static_print(*values, sep=" ", end="\n", file=None, flush=False):
    """Prints `values` when the kernel compiles (once per specialization; tiles print as
    their type)."""


@builtin
def device_print(prefix, *args, hex=False):
    """Prints each element of `args` at run time, one line per element: `pid (x, y, z) idx
    (i, ...) prefix value`. Python's `print(...)` in a kernel means the same (as in Triton).
    On the GPU every thread prints the elements it holds (through vprintf), so an element a
    layout replicates over several threads prints more than once, and a scalar prints from
    thread 0 of each program; the interpreter prints each element once, per program."""


@builtin
def device_assert(cond, msg="", mask=None):
    """Stops the kernel where an element of `cond` is false. The interpreter raises
    `DeviceAssertError` naming the source line, the program and the failing indices; the
    GPU calls `__assertfail` (the launch fails with an assertion error). Unlike Triton,
    where it is active only with TRITON_DEBUG=1, kitjit always checks it."""


@builtin
def debug_barrier():
    """Synchronizes the threads of the program (`bar.sync 0`); nothing to do in the
    interpreter, which runs a program as one thread."""


@builtin
def gdc_wait():
    """Programmatic dependent launch: waits until the grids this one depends on have
    finished and their writes are visible (PTX `griddepcontrol.wait`, sm_90+;
    kit.gdc_launch_dependents in them only lets this grid start early). A no-op in the
    interpreter, which runs grids one after the other, and below sm_90, which has no
    programmatic launch."""


@builtin
def gdc_launch_dependents():
    """Programmatic dependent launch: lets a dependent grid start early (PTX
    `griddepcontrol.launch_dependents`, sm_90+). A no-op in the interpreter and below
    sm_90."""

"""The host side of kitjit.nn's ops: what a call costs before its kernels reach the GPU.

A decode step is a few microseconds of GPU work, so the Python around its launches decides
its speed (benchmarks/NOTES.md: 138 us per sdpa call, 35 us for torch's). A tensor view or
allocation costs 1.5-5 us of host time each, a generic `kernel[grid](...)` launch binds its
arguments and builds its specialization key from every one of them. The ops' hot paths
avoid both with three pieces, each kept safe by construction:

- `Site`: one launch site of an op (a kernel, its constexprs and launch options, and the
  specialization facts of its int arguments, fixed by the op's shape). Its first launch goes
  through `kernel[grid](...)` (compile, checks, the interpreter without a GPU); once that ran
  on the GPU path, the site keeps the kernel's own generated launcher (launcher.py's
  `_make_launcher`, unchanged) and calls it with the argument values directly. Valid
  because everything the runner's key holds is fixed by the site's key (tensor dtypes and
  device, int facts, constexprs, options) or checked by the op on every call (16-byte
  alignment of the tensors it passes).
- `Rows`: a contiguous (rows, cols) region given by its pointer, for a TMA operand: what
  the launcher's descriptor code reads of a 2-d tensor (pointer, shape, strides, element
  size) without making a torch view (a site's first, checked launch takes real views).
  The descriptor cache (`driver.tensor_map`) keys on all of it plus the element type, box
  and swizzle, so a cached descriptor is never stale.
- `workspace`: scratch memory (fp32) private to one (device, stream, thread), for buffers
  that live within one call (split-KV partials) or are written and never read (the LSE an
  sdpa without autograd discards). Reused across calls: calls on one stream from one thread
  run in stream order (the next call's kernels start after this call's last kernel, which
  reads the partials, has finished); another stream or another thread (whose launches may
  interleave with this one's on a shared stream) gets its own. Never handed out while the
  stream is being captured into a CUDA graph: a graph may replay on any stream, at the
  same time as other work, so captured calls allocate through torch (the graph's pool).
  A dropped workspace goes back to torch's caching allocator, which reuses it on the same
  stream only, after the kernels queued there. It also holds int32 counters, zero between
  calls: a kernel whose programs count themselves (the last one merges the others'
  partials) returns its counters to 0 before it ends, so the next call on the stream finds
  them zeroed without a memset (new counters are zeroed by torch, in stream order).
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from .. import launcher as _launcher
from ..compiled_kernel import CompiledKernel

__all__ = ["Region", "Rows", "Site", "int_facts", "workspace", "reset", "on_reset"]


class Region:
    """A dense region at `ptr` seen as a tensor: the five facts the launcher's descriptor
    code reads (pointer, shape, strides, rank, element size) and nothing else, so an op may
    keep one between calls without holding a tensor (kit.graph's routes pass workspace
    buffers this way)."""

    __slots__ = ("ptr", "shape", "strides", "esize")

    def __init__(self, ptr: int, shape: tuple, strides: tuple, esize: int):
        self.ptr, self.shape, self.strides, self.esize = ptr, shape, strides, esize

    def data_ptr(self) -> int:
        return self.ptr

    def stride(self, dim: int | None = None):
        return self.strides if dim is None else self.strides[dim]

    def dim(self) -> int:
        return len(self.shape)

    def element_size(self) -> int:
        return self.esize


class Rows(Region):
    """A contiguous (rows, cols) region at `ptr` of elements of `esize` bytes: passed where a
    kernel takes a tensor it reads by TMA. `batch`: `batch` such regions one after another,
    a (batch, rows, cols) tensor (what a kernel copies with (batch, row, col) coordinates:
    attention's K and V per head)."""

    __slots__ = ()

    def __init__(self, ptr: int, rows: int, cols: int, esize: int, batch: int | None = None):
        self.ptr, self.esize = ptr, esize      # (set here, not through super(): a host path)
        if batch is None:
            self.shape, self.strides = (rows, cols), (cols, 1)
        else:
            self.shape, self.strides = (batch, rows, cols), (rows * cols, cols, 1)


def int_facts(*ints: int) -> tuple:
    """What a launch specializes on for each int argument (as the runner: equal to 1, a
    multiple of 16, 32-bit)."""
    return tuple((i == 1, i & 15 == 0, -2147483648 <= i <= 2147483647) for i in ints)


_LAUNCHERS: dict = {}   # (kernel, meta, facts) -> its generated launcher


class Site:
    """One launch site: `kernel` with the constexprs and launch options `meta`, for calls
    whose tensor dtypes, device and int facts are `facts` (the owner checks tensor
    alignment). `fn` is the direct launcher once a launch ran on the GPU path, else None:
    the owner then launches through `slow`."""

    __slots__ = ("kernel", "meta", "key", "device", "fn")

    def __init__(self, kernel: Any, meta: dict, facts: tuple, device: int):
        self.kernel = kernel
        self.meta = meta
        self.key = (kernel, tuple(sorted(meta.items())), device, facts)
        self.device = device
        self.fn = _LAUNCHERS.get(self.key)

    def slow(self, grid: tuple, *args: Any) -> None:
        """`kernel[grid](*args, **meta)`: the checked launch (it compiles on a miss, runs the
        interpreter without a GPU); when it ran on the GPU path, the site keeps the
        kernel's launcher for the next calls."""
        ck = self.kernel[grid](*args, **self.meta)
        if self.fn is None and isinstance(ck, CompiledKernel) and \
                not _launcher._is_compiling():
            jf = self.kernel
            defaults = getattr(jf, "_defaults", {})
            consts = tuple(self.meta[c] if c in self.meta else defaults[c]
                           for c in jf.constexprs)
            dev = self.device if self.device >= 0 else _launcher._torch_current_device()
            fn = _launcher._make_launcher(jf, ck, dev, consts,
                                          pdl=bool(self.meta.get("launch_pdl")))
            self.fn = _LAUNCHERS.setdefault(self.key, fn)


_WS: dict = {}            # (device, stream, thread) -> [fp32 tensor, address, numel,
_WS_MAX = 64              #                              int32 counters, address, count]


def _stream(device: int) -> int:
    """torch's current stream on cuda:`device`, as a raw handle."""
    return torch._C._cuda_getCurrentRawStream(device)


def _capturing(stream: int) -> bool:
    from ..runtime import driver

    return driver.stream_capturing(stream)


def _torch_device(device: int) -> torch.device:
    return torch.device("cuda", device) if device >= 0 else torch.device("cpu")


def workspace(device: int, numel: int, counters: int = 0) -> tuple[torch.Tensor, int, int] | None:
    """(an fp32 tensor of at least `numel` elements, its address, the address of at least
    `counters` int32 counters that are 0) private to this thread and the current stream of
    `device` (-1: the CPU), or None while that stream is being captured (the caller
    allocates then). See the module docstring for why reuse is safe; a kernel given the
    counters must leave them 0."""
    if device >= 0:
        stream = _stream(device)
        if _capturing(stream):
            return None
    else:
        stream = 0
    key = (device, stream, threading.get_ident())
    ws = _WS.get(key)
    if ws is None or ws[2] < numel or ws[5] < counters:
        if len(_WS) >= _WS_MAX:   # (dropped ones go back to the caching allocator, which
            _WS.clear()           # reuses them on their stream, after the queued kernels)
        dev = _torch_device(device)
        if ws is None or ws[2] < numel:
            n = max(numel, 2 * ws[2] if ws is not None else 0)
            t = torch.empty(n, dtype=torch.float32, device=dev)
            t_ws = (t, t.data_ptr(), n)
        else:
            t_ws = ws[:3]
        if ws is None or ws[5] < counters:
            c = torch.zeros(max(counters, 2 * ws[5] if ws is not None else 0, 64),
                            dtype=torch.int32, device=dev)
            c_ws = (c, c.data_ptr(), c.numel())
        else:
            c_ws = ws[3:]
        ws = _WS[key] = (*t_ws, *c_ws)
    return ws[0], ws[1], ws[4]


_RESET_HOOKS: list = []


def on_reset(fn) -> Any:
    """Register a cache-clearing function for `reset` (the ops' per-shape route caches)."""
    _RESET_HOOKS.append(fn)
    return fn


def reset() -> None:
    """Forget every direct launcher, route and workspace: what a FakeDriver's end calls (its
    launchers must not outlive it), and tests that want fresh (poisoned) workspaces."""
    _LAUNCHERS.clear()
    _WS.clear()
    for fn in _RESET_HOOKS:
        fn()

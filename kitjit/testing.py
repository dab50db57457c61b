"""Helpers the examples, tests and benchmarks share: checking against a float64 reference,
and timing with CUDA events."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def has_gpu() -> bool:
    """A CUDA device that both torch and kitjit's driver can use, and no KITJIT_INTERPRET."""
    import torch

    from .jit import _env_flag
    from .runtime import driver

    return torch.cuda.is_available() and driver.available() and not _env_flag("KITJIT_INTERPRET")


def device() -> str:
    return "cuda" if has_gpu() else "cpu"


def rel_error(out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref|| in float64; NaN anywhere gives inf."""
    o = out.detach().double().cpu()
    r = ref.detach().double().cpu()
    if not bool(o.isfinite().all()) and bool(r.isfinite().all()):
        return math.inf
    d = float((o - r).norm())
    n = float(r.norm())
    return d / n if n else d


def check(out: Any, ref: Any, tol: float, what: str = "result") -> float:
    err = rel_error(out, ref)
    if not err <= tol:
        raise AssertionError(f"{what}: relative error {err:.3g} over {tol:g}")
    return err


def bench(fn: Callable[[], Any], warmup: int = 10, rep: int = 50,
          flush_l2: bool = True) -> float:
    """Median milliseconds of `fn()` over `rep` runs timed with CUDA events."""
    import torch

    cache = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda") if flush_l2 \
        else None
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rep):
        if cache is not None:
            cache.zero_()
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


class FakeDriver:
    """Stands in for the CUDA driver so the GPU launch path runs on a machine without one
    (CPU tests, and `benchmarks/launch_fake_driver.py`). While active (`with FakeDriver():`):
    kernels take the GPU path (not the interpreter); `compile` builds no code but returns a
    CompiledKernel of the right parameter kinds (counted in `compiles`); module loads are
    recorded in `loads` as (kernel name, device); and every cuLaunchKernel is recorded in
    `launches` as a dict (function handle, grid, block, shared, stream, and the parameter
    values read back from the parameter block at the moment of the call), unless
    `record=False` (then a launch costs one trivial call: what the benchmark wants).

    `allow_cpu=True` lets CPU tensors through the device checks (they are on device
    `current_device`); `yield_in_launch=True` releases the GIL inside each launch before the
    block is read, the moment another thread would overwrite a shared block.
    """

    def __init__(self, record: bool = True, allow_cpu: bool = False,
                 yield_in_launch: bool = False, current_device: int = 0,
                 compile_delay: float = 0.0):
        import threading

        self.record = record
        self.allow_cpu = allow_cpu
        self.yield_in_launch = yield_in_launch
        self.current_device = current_device
        self.compile_delay = compile_delay
        self.compiles: list[tuple] = []
        self.loads: list[tuple[str, int]] = []
        self.launches: list[dict] = []
        self.streams_asked: list[int] = []
        self._kinds: dict[Any, list[str]] = {}
        self._lock = threading.Lock()
        self._saved: list[tuple[Any, str, Any]] = []

    # -------------------------------------------------------------- fakes
    def _compile(self, jf, specs, consts, num_warps, arch, max_shared=None):
        import time

        from .jit import CompiledKernel, _kind

        if self.compile_delay:
            time.sleep(self.compile_delay)
        kinds = [_kind(s) for s in specs]
        with self._lock:
            self.compiles.append((jf.__name__, tuple(map(tuple, specs)), consts, arch))
            cubin = f"fake-cubin-{len(self.compiles)}".encode()
            self._kinds[cubin] = [k for k in kinds if k != "const"]
        return CompiledKernel(jf.__name__, {"cubin": cubin},
                              {"num_warps": num_warps, "arg_kinds": kinds, "arch": arch,
                               "shared": 0, "tma": []})

    def _load_function(self, cubin, name, shared, device):
        with self._lock:
            self.loads.append((name, device))
            handle = 0x10000 * (len(self.loads)) + device
            self._kinds[handle] = self._kinds[cubin]
        return 0xAA00 + device, handle

    def _stream_getter(self):
        def current_stream(device):
            if self.record:
                self.streams_asked.append(device)
            return 0x5000 + device
        return current_stream

    def _launch(self, fn, g0, g1, g2, b0, b1, b2, shared, stream, params, extra):
        import ctypes
        import time

        from .runtime.driver import _CTYPES

        if self.yield_in_launch:
            time.sleep(0)  # another thread runs here, between filling the block and the call
        kinds = self._kinds[fn]
        ptrs = (ctypes.c_void_p * max(1, len(kinds))).from_address(params)
        values = tuple(_CTYPES[k].from_address(ptrs[i]).value for i, k in enumerate(kinds))
        self.launches.append({"function": fn, "grid": (g0, g1, g2), "block": (b0, b1, b2),
                              "shared": shared, "stream": stream, "values": values})
        return (0,)

    # -------------------------------------------------------------- patching
    def _set(self, obj, name, value):
        self._saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def __enter__(self):
        import sys

        from .runtime import driver

        kjit = sys.modules["kitjit.jit"]  # the module (kitjit.jit the name is the decorator)
        ok = (0,)
        launch = self._launch if self.record else (lambda *a: ok)
        fake = self
        self._set(kjit, "interpret_mode", lambda: False)
        self._set(kjit, "_stream_getter", self._stream_getter)
        self._set(kjit, "_torch_current_device", lambda: fake.current_device)
        self._set(kjit.JITFunction, "compile",
                  lambda jf, *a, **kw: fake._compile(jf, *a, **kw))
        self._set(driver, "raw_launch", lambda: (launch, lambda h: h))
        self._set(driver, "launch_ok", lambda: 0)
        self._set(driver, "load_function", self._load_function)
        self._set(driver, "device_arch", lambda device=0: "sm_90a")
        self._set(driver, "max_shared_memory", lambda device=0: 227 * 1024)
        if self.allow_cpu:
            check = kjit._check_launch_args
            self._set(kjit, "_check_launch_args",
                      lambda jf, rt_args, gpu: check(jf, rt_args, gpu=False))
        return self

    def __exit__(self, *exc):
        while self._saved:
            obj, name, value = self._saved.pop()
            setattr(obj, name, value)
        return False

"""Helpers the examples, tests and benchmarks share: checking against a float64 reference,
and timing with CUDA events (`do_bench` and `do_bench_cudagraph` with Triton's signatures
and semantics, so benchmarks port by changing the import)."""

from __future__ import annotations

import contextlib
import math
import numbers
import statistics
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .perf_report import Benchmark, Mark, perf_report  # noqa: E402,F401 (Triton's names)

__all__ = ["has_gpu", "device", "rel_error", "check", "bench", "do_bench",
           "do_bench_cudagraph", "Benchmark", "Mark", "perf_report", "assert_close",
           "get_dram_gbps", "get_max_tensorcore_tflops", "get_max_simd_tflops"]

_RETURN_MODES = ("min", "max", "mean", "median", "all")
_L2_FLUSH_BYTES = 256 * 1024 * 1024  # what Triton writes between runs: more than any L2


@contextlib.contextmanager
def poisoned_empty():
    """While active, torch.empty* returns NaN-filled memory (the largest value for ints), so
    a kernel that leaves part of its output unwritten fails its check instead of passing on
    stale memory (torch's deterministic-algorithms fill)."""
    import torch
    import torch.utils.deterministic as det

    was = torch.are_deterministic_algorithms_enabled()
    was_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    was_fill = det.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    det.fill_uninitialized_memory = True
    try:
        yield
    finally:
        det.fill_uninitialized_memory = was_fill
        torch.use_deterministic_algorithms(was, warn_only=was_warn)


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


# --------------------------------------------------------------------------- do_bench


def _check_bench_args(fn: Any, grad_to_none: Any, quantiles: Any, return_mode: Any,
                      **times: Any) -> list[float] | None:
    """Argument checks shared by do_bench and do_bench_cudagraph (before any GPU work):
    ValueError/TypeError naming the argument. Returns the quantiles as floats."""
    if not callable(fn):
        raise TypeError(f"fn must be callable (a function that runs the work once), got "
                        f"{type(fn).__name__}")
    for name, v in times.items():
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not v >= 0 \
                or not math.isfinite(v):
            raise ValueError(f"{name} is a time in milliseconds, a number >= 0; got {v!r}")
    if return_mode not in _RETURN_MODES:
        raise ValueError(f"return_mode must be one of {', '.join(map(repr, _RETURN_MODES))}; "
                         f"got {return_mode!r}")
    if grad_to_none is not None and (isinstance(grad_to_none, (str, bytes))
                                     or not isinstance(grad_to_none, Iterable)):
        raise TypeError("grad_to_none must be a sequence of tensors whose .grad is reset "
                        f"before each run, got {type(grad_to_none).__name__}")
    if quantiles is None:
        return None
    if isinstance(quantiles, (str, bytes)) or not isinstance(quantiles, Sequence) \
            or not quantiles:
        raise TypeError(f"quantiles must be a non-empty list of numbers in [0, 1], e.g. "
                        f"[0.5, 0.2, 0.8]; got {quantiles!r}")
    qs = []
    for q in quantiles:
        if isinstance(q, bool) or not isinstance(q, numbers.Real) or not 0 <= q <= 1:
            raise ValueError(f"quantiles must lie in [0, 1]; got {q!r}")
        qs.append(float(q))
    return qs


def _require_gpu(what: str) -> None:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"kit.testing.{what} times work on a CUDA GPU with CUDA events, and "
                           "torch sees none here (torch.cuda.is_available() is False); on a "
                           "machine without a GPU, time the interpreter with time.perf_counter")


def _summarize(times: list[float], quantiles: list[float] | None,
               return_mode: str) -> float | list[float]:
    """Triton's summary: the quantiles when given (one value unwrapped), else by return_mode."""
    if quantiles is not None:
        import torch

        ret = torch.quantile(torch.tensor(times, dtype=torch.float),
                             torch.tensor(quantiles, dtype=torch.float)).tolist()
        return ret[0] if len(ret) == 1 else ret
    if return_mode == "all":
        return times
    return {"min": min, "max": max, "mean": statistics.mean,
            "median": statistics.median}[return_mode](times)


def do_bench(fn: Callable[[], Any], warmup: float = 25, rep: float = 100,
             grad_to_none: Sequence[Any] | None = None, quantiles: Sequence[float] | None = None,
             return_mode: str = "mean") -> float | list[float]:
    """Milliseconds `fn()` takes on the GPU, as ``triton.testing.do_bench`` measures them.

    Runs `fn` for about `warmup` ms, then times it for about `rep` ms, one CUDA event pair per
    run, writing a 256 MB buffer before each run so that no run finds its data in L2. Before
    each run the ``.grad`` of every tensor in `grad_to_none` is reset to None. Returns the
    `quantiles` of the times when given (a float for one), else their `return_mode`:
    "min", "max", "mean", "median", or "all" (the list). Needs a CUDA GPU: without one it
    raises RuntimeError (after checking the arguments).
    """
    qs = _check_bench_args(fn, grad_to_none, quantiles, return_mode, warmup=warmup, rep=rep)
    _require_gpu("do_bench")
    import torch

    fn()
    torch.cuda.synchronize()
    cache = torch.empty(_L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        cache.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate_ms = start.elapsed_time(end) / 5
    n_warmup = max(1, int(warmup / estimate_ms)) if estimate_ms > 0 else 1000
    n_repeat = max(1, int(rep / estimate_ms)) if estimate_ms > 0 else 1000
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    for _ in range(n_warmup):
        fn()
    for i in range(n_repeat):
        if grad_to_none is not None:
            for x in grad_to_none:
                x.grad = None
        cache.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return _summarize(times, qs, return_mode)


def do_bench_cudagraph(fn: Callable[[], Any], rep: float = 20,
                       grad_to_none: Sequence[Any] | None = None,
                       quantiles: Sequence[float] | None = None,
                       return_mode: str = "mean") -> float | list[float]:
    """Milliseconds per `fn()` with launch overhead removed, as Triton's
    ``do_bench_cudagraph`` measures them: `fn` is captured `n` times into one CUDA graph
    (n from a first estimate, about `rep` ms of work) on a side stream, and the graph is
    replayed 10 times, each replay's time divided by n. No L2 flush between runs.
    `grad_to_none`, `quantiles` and `return_mode` as in :func:`do_bench`. Needs a CUDA GPU.
    """
    qs = _check_bench_args(fn, grad_to_none, quantiles, return_mode, rep=rep)
    _require_gpu("do_bench_cudagraph")
    import torch

    with torch.cuda.stream(torch.cuda.Stream()):
        fn()
        if grad_to_none is not None:
            for x in grad_to_none:
                x.detach_()
                x.requires_grad_(True)
                x.grad = None
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate_ms = start.elapsed_time(end) / 5
        n_repeat = 1000 if estimate_ms == 0 else max(1, int(rep / estimate_ms))
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n_repeat):
                if grad_to_none is not None:
                    for x in grad_to_none:
                        x.grad = None
                fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(10):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            g.replay()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / n_repeat)
    return _summarize(times, qs, return_mode)


class FakeDriver:
    """Stands in for the CUDA driver so the GPU launch path runs on a machine without one
    (CPU tests, and `benchmarks/launch_fake_driver.py`). While active (`with FakeDriver():`):
    kernels take the GPU path (not the interpreter); `compile` builds no code but returns a
    CompiledKernel of the right parameter kinds (counted in `compiles`); module loads are
    recorded in `loads` as (kernel name, device); and every cuLaunchKernel is recorded in
    `launches` as a dict (function handle, grid, block, shared, stream, the parameter
    values read back from the parameter block at the moment of the call, and whether it
    was a programmatic dependent launch, `pdl`, and its `cluster` shape or None), unless
    `record=False` (then a launch costs one trivial call: what the benchmark wants).

    `allow_cpu=True` lets CPU tensors through the device checks (they are on device
    `current_device`); `yield_in_launch=True` releases the GIL inside each launch before the
    block is read, the moment another thread would overwrite a shared block.

    `ir_compile=True` builds each kernel's tile IR for sm_90a (no LLVM, no assembler): the
    compiled kernel then has its true parameters and TMA metadata, so the launcher builds
    its descriptors as on a GPU. The descriptor encoder (`driver.encode_tiled`) is faked
    either way: each encoding is appended to `encodings` as (data type, pointer, rows, cols,
    row bytes, box rows, box cols, swizzle), and its 128 bytes hold the encoding's index
    (`encoding_of(address)` reads it back).
    A recorded launch then also holds `tma`, the encodings of the descriptors it passed; the
    kernels' launchers are set aside while the fake is active (every launch goes through
    it) and put back at its end, without those made meanwhile (they would launch nothing).
    kitjit.nn's direct launchers and workspaces are dropped at both ends in any case.
    """

    def __init__(self, record: bool = True, allow_cpu: bool = False,
                 yield_in_launch: bool = False, current_device: int = 0,
                 compile_delay: float = 0.0, ir_compile: bool = False):
        import threading

        self.record = record
        self.allow_cpu = allow_cpu
        self.yield_in_launch = yield_in_launch
        self.current_device = current_device
        self.compile_delay = compile_delay
        self.ir_compile = ir_compile
        self.encodings: list[tuple] = []
        self._maps: list[Any] = []
        self.compiles: list[tuple] = []
        self.maxnregs: list[int | None] = []  # the maxnreg of each compile
        self.run_on: list[str | None] = []  # the GPU of each compile for another arch
        self.loads: list[tuple[str, int]] = []
        self.launches: list[dict] = []
        self.streams_asked: list[int] = []
        self._kinds: dict[Any, list[str]] = {}
        self._n_desc: dict[Any, int] = {}
        self._lock = threading.Lock()
        self._saved: list[tuple[Any, str, Any]] = []

    # -------------------------------------------------------------- fakes
    def _compile(self, jf, specs, consts, num_warps, arch, max_shared=None, maxnreg=None,
                 run_on=None, cluster=None):
        import time

        from .jit import CompiledKernel, _kind
        from .launcher import flat_kinds

        if self.compile_delay:
            time.sleep(self.compile_delay)
        kinds = [_kind(s) for s in specs]
        tma = []
        if self.ir_compile:
            from .jit_meta import _tma_meta

            fn = jf.build_ir(specs, consts, num_warps, tma=True)
            tma = [_tma_meta(jf.runtime_params.index(name), e)
                   for name, e in fn.attrs.get("tma", {}).items()]
        with self._lock:
            self.compiles.append((jf.__name__, tuple(map(tuple, specs)), consts, arch))
            self.maxnregs.append(maxnreg)
            self.run_on.append(run_on)
            cubin = f"fake-cubin-{len(self.compiles)}".encode()
            self._kinds[cubin] = flat_kinds([k for k in kinds if k != "const"])
            self._n_desc[cubin] = len(tma)
        return CompiledKernel(jf.__name__, {"cubin": cubin},
                              {"num_warps": num_warps, "arg_kinds": kinds, "arch": arch,
                               "shared": 0, "tma": tma})

    def _load_function(self, cubin, name, shared, device):
        with self._lock:
            self.loads.append((name, device))
            handle = 0x10000 * (len(self.loads)) + device
            self._kinds[handle] = self._kinds.get(cubin)
            self._n_desc[handle] = self._n_desc.get(cubin, 0)
        return 0xAA00 + device, handle

    def _encode_tiled(self, *values, **kw):
        import ctypes

        with self._lock:
            self.encodings.append(values + ((kw,) if kw else ()))
            m = (ctypes.c_uint64 * 16)(len(self.encodings) - 1)  # 128 bytes, as a CUtensorMap
            self._maps.append(m)
        return m, ctypes.addressof(m)

    def encoding_of(self, address: int) -> tuple:
        """The `encodings` entry whose map lives at `address` (what a launch passed)."""
        import ctypes

        return self.encodings[ctypes.c_uint64.from_address(address).value]

    def _stream_getter(self):
        def current_stream(device):
            if self.record:
                self.streams_asked.append(device)
            return 0x5000 + device
        return current_stream

    def _launch(self, fn, g0, g1, g2, b0, b1, b2, shared, stream, params, extra, pdl=False,
                cluster=None):
        import ctypes
        import operator
        import time

        from .runtime.driver import _CTYPES

        for g in (g0, g1, g2):  # cuda.bindings takes ints only (a TypeError otherwise)
            operator.index(g)
        if self.yield_in_launch:
            time.sleep(0)  # another thread runs here, between filling the block and the call
        kinds, n_desc = self._kinds[fn], self._n_desc.get(fn, 0)
        values = tma = None
        if kinds is not None:  # (a launcher made before this fake: values unknown)
            ptrs = (ctypes.c_void_p * max(1, len(kinds) + n_desc)).from_address(params)
            values = tuple(_CTYPES[k].from_address(ptrs[i]).value
                           for i, k in enumerate(kinds))
            tma = [self.encoding_of(ptrs[len(kinds) + j]) for j in range(n_desc)]
        self.launches.append({"function": fn, "grid": (g0, g1, g2), "block": (b0, b1, b2),
                              "shared": shared, "stream": stream, "values": values,
                              "tma": tma, "pdl": pdl, "cluster": cluster})
        return (0,)

    def _cluster_launch(self, cluster, pdl, name):
        """The fake of `driver.cluster_launch`: the grid checked as there, then recorded."""
        from .runtime.driver import check_cluster_grid

        def launch(fn, g0, g1, g2, *rest):
            check_cluster_grid(name, (g0, g1, g2), cluster)
            if not self.record:
                return (0,)
            return self._launch(fn, g0, g1, g2, *rest, pdl=pdl, cluster=cluster)
        return launch

    # -------------------------------------------------------------- patching
    def _set(self, obj, name, value):
        self._saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def _stash_launchers(self) -> None:
        """ir_compile: every kernel launches through the fake while it is active, also one
        that has a launcher already (the interpreter's, say): the kernels' caches are set
        aside at the start and put back at the end, dropping what was made meanwhile (it
        would launch nothing)."""
        from .torch_ops import _KERNELS

        self._stash = [(jf, dict(jf.cache)) for jf in list(_KERNELS.values())]
        for jf, _ in self._stash:
            jf.cache.clear()   # (in place: the generated launch entry holds the dict)

    def _restore_launchers(self) -> None:
        from .torch_ops import _KERNELS

        kept = {id(jf): c for jf, c in self._stash}
        for jf in list(_KERNELS.values()):
            jf.cache.clear()
            jf.cache.update(kept.get(id(jf), {}))

    def __enter__(self):
        import sys

        from .runtime import driver

        if self.ir_compile:
            self._stash_launchers()
        self._reset_nn()

        kjit = sys.modules["kitjit.jit"]  # the module (kitjit.jit the name is the decorator)
        ok = (0,)
        launch = self._launch if self.record else (lambda *a: ok)
        fake = self
        self._set(kjit, "interpret_mode", lambda: False)
        launcher = sys.modules["kitjit.launcher"]
        self._set(launcher, "_stream_getter", self._stream_getter)
        self._set(launcher, "_torch_current_device", lambda: fake.current_device)
        self._set(kjit.JITFunction, "compile",
                  lambda jf, *a, **kw: fake._compile(jf, *a, **kw))
        self._set(driver, "encode_tiled", self._encode_tiled)
        self._set(driver, "raw_launch", lambda: (launch, lambda h: h))
        pdl = (lambda *a: fake._launch(*a, pdl=True)) if self.record else launch
        self._set(driver, "pdl_launch", lambda: (pdl, lambda h: h))
        self._set(driver, "cluster_launch", lambda cluster, pdl, name: (
            fake._cluster_launch(cluster, pdl, name), lambda h: h))
        self._set(driver, "launch_ok", lambda: 0)
        self._set(driver, "stream_wrap", lambda: int)
        self._set(driver, "load_function", self._load_function)
        self._set(driver, "device_arch", lambda device=0: "sm_90a")
        self._set(driver, "max_shared_memory", lambda device=0: 227 * 1024)
        if self.allow_cpu:
            check = kjit._check_launch_args
            self._set(kjit, "_check_launch_args",
                      lambda jf, rt_args, gpu, shape_only=False: check(
                          jf, rt_args, gpu=False, shape_only=shape_only))
        return self

    def __exit__(self, *exc):
        while self._saved:
            obj, name, value = self._saved.pop()
            setattr(obj, name, value)
        if self.ir_compile:
            self._restore_launchers()
        self._reset_nn()
        return False

    @staticmethod
    def _reset_nn() -> None:
        import sys

        host = sys.modules.get("kitjit.nn._host")
        if host is not None:
            host.reset()
        # descriptors encoded by the fake (its encoding index, not a map) must not reach a
        # later driver, nor maps of an earlier one the fake's launches: they key on the
        # address, and a freed tensor's address comes back
        driver = sys.modules["kitjit.runtime.driver"]
        driver._TMAP_CACHE.clear()
        if hasattr(driver, "_TMAP_OLD"):
            driver._TMAP_OLD = {}


def assert_close(x: Any, y: Any, atol: Any = None, rtol: Any = None, err_msg: str = "") -> None:
    """Triton's `triton.testing.assert_close`: numpy's assert_allclose with NaNs equal,
    atol 1e-2 and rtol 0 by default (either may be a function of x's dtype); bf16 compares
    as fp32."""
    import numpy as np
    import torch

    x = x if isinstance(x, torch.Tensor) else torch.tensor(x)
    y = y if isinstance(y, torch.Tensor) else torch.tensor(y)
    atol = 1e-2 if atol is None else atol
    atol = atol(x.dtype) if callable(atol) else atol
    rtol = 0.0 if rtol is None else rtol
    rtol = rtol(x.dtype) if callable(rtol) else rtol
    xn = (x.float() if x.dtype == torch.bfloat16 else x).cpu().detach().numpy()
    yn = (y.float() if y.dtype == torch.bfloat16 else y).cpu().detach().numpy()
    if xn.size > 1 or yn.size > 1:
        np.testing.assert_allclose(xn, yn, atol=atol, rtol=rtol, equal_nan=True,
                                   err_msg=err_msg)
        return
    if not np.allclose(xn, yn, atol=atol, rtol=rtol, equal_nan=True):
        raise AssertionError(f"{err_msg} {xn} is not close to {yn} (atol={atol}, rtol={rtol})")


def _props(device: Any) -> dict[str, int]:
    from .runtime import driver

    if device is None:
        device = driver.active.get_current_device() if driver.available() else 0
    return driver.active.utils.get_device_properties(device)


def get_dram_gbps(device: Any = None) -> float:
    """Triton's: the DRAM bandwidth in GB/s, from the memory clock (kHz) and bus width (bits)
    at double data rate. Without a GPU: sm_90a's nominal figures (H100 SXM, 3352 GB/s)."""
    p = _props(device)
    return p["mem_clock_rate"] * p["mem_bus_width"] * 2 / 1e6 / 8


# dense operations per clock of one SM sub-core (4 per SM), sm_80 and later, by dtype name
_TENSORCORE_OPS = {"float32": 256, "int32": 256, "float16": 512, "bfloat16": 512,
                   "int16": 512, "int8": 1024, "fp8e4nv": 1024, "fp8e4b15": 1024,
                   "fp8e5": 1024, "float8_e4m3fn": 1024, "float8_e5m2": 1024}
_SIMD_OPS = {"float32": 32, "float16": 64, "bfloat16": 64}


def _dtype_name(dtype: Any) -> str:
    return str(getattr(dtype, "name", None) or dtype).removeprefix("torch.")


def _peak_tflops(table: dict, what: str, dtype: Any, clock_rate: float, device: Any) -> float:
    ops = table.get(_dtype_name(dtype))
    if ops is None:
        raise RuntimeError(f"kitjit.testing.{what}: dtype {dtype} not supported")
    return _props(device)["multiprocessor_count"] * 4 * clock_rate * ops * 1e-9


def get_max_tensorcore_tflops(dtype: Any, clock_rate: float, device: Any = None) -> float:
    """Triton's: peak dense tensor-core TFLOPS at `clock_rate` (kHz), with Triton's per-clock
    rates (sm_80's; Hopper's tensor cores do twice as much per clock, so on sm_90 this is
    half the real peak, as Triton reports it)."""
    return _peak_tflops(_TENSORCORE_OPS, "get_max_tensorcore_tflops", dtype, clock_rate,
                        device)


def get_max_simd_tflops(dtype: Any, clock_rate: float, device: Any = None) -> float:
    """Triton's: peak CUDA-core (FMA) TFLOPS at `clock_rate` (kHz), sm_80 and later."""
    return _peak_tflops(_SIMD_OPS, "get_max_simd_tflops", dtype, clock_rate, device)


from .language.triton_names import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("kitjit.testing", "triton.testing")

"""The port corpus's machinery: the case registry, the checks against float64 torch, and the
environment a case runs in (the package's sources from `.corpus/`, imports swapped to kitjit
by tests/ports/swap.py, uninitialised memory poisoned).

Harness choices (never the kernel text):
- a package's `__init__` files named by the source are not run (its modules are imported
  one by one), so one op module that needs a name kitjit lacks fails only its cases;
- on the CPU, CUDA-only host queries are answered as an H100's (capability 9.0, 132 SMs,
  `torch.cuda.device(...)` a no-op) and tensors host code allocates on 'cuda' by name are
  made on the CPU;
- on the GPU, autotuners take their first config that builds without timing the others
  (`--tune all` times them, as a user's run would): compile time, not kernel text.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CACHE = os.path.join(ROOT, ".corpus")
sys.path.insert(0, os.path.join(ROOT, "tests", "ports"))

from swap import swap_name, swapped  # noqa: E402


@dataclass
class Case:
    source: str
    name: str
    fn: Callable[..., None]
    quick: bool = False  # one of the few the CPU pytest runs


@dataclass
class Source:
    name: str
    package: str
    skip_init: tuple[str, ...] = ()
    setup: Callable[[str], None] | None = None  # per-case patches after the swap is on
    stubs: Callable[[], dict[str, types.ModuleType]] | None = None  # absent dependencies
    env: dict[str, str] = field(default_factory=dict)  # the package's own switches
    cases: list[Case] = field(default_factory=list)


SOURCES: dict[str, Source] = {}


def source(name: str, package: str, skip_init: tuple[str, ...] = (),
           setup: Callable[[str], None] | None = None,
           stubs: Callable[[], dict[str, types.ModuleType]] | None = None,
           env: dict[str, str] | None = None) -> Callable:
    """Declares a source; returns its `case(name, quick=False)` decorator."""
    src = SOURCES.setdefault(name, Source(name, package, skip_init, setup, stubs, env or {}))

    def case(case_name: str, quick: bool = False) -> Callable:
        def deco(fn: Callable) -> Callable:
            src.cases.append(Case(name, case_name, fn, quick))
            return fn
        return deco
    return case


def cache_present(name: str) -> bool:
    return os.path.isfile(os.path.join(CACHE, name, "COMMIT"))


# ---- checks ------------------------------------------------------------------------------

def close(got: Any, ref: Any, what: str, rtol: float, atol: float) -> None:
    assert got is not None, f"{what}: no result"
    got = got.detach().to("cpu", torch.float64)
    ref = ref.detach().to("cpu", torch.float64)
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    torch.testing.assert_close(got, ref, rtol=rtol, atol=atol, equal_nan=False,
                               msg=lambda m: f"{what}: " + " ".join(m.split()))


def check(fn: Callable, ref: Callable, inputs: tuple, grad_of: tuple = (), rtol: float = 1e-4,
          atol: float = 1e-4, outputs: Any = None, ups: list | None = None) -> None:
    """Runs `fn(*inputs)` (the package) and `ref(*inputs in float64)` (torch), compares the
    outputs and, for the inputs at `grad_of`, their gradients under one random upstream
    gradient per output. `outputs` picks which of a tuple's results are compared."""
    mine = [x.detach().clone().requires_grad_(i in grad_of) if torch.is_tensor(x) else x
            for i, x in enumerate(inputs)]
    theirs = [x.detach().to(torch.float64).requires_grad_(i in grad_of)
              if torch.is_tensor(x) and x.is_floating_point() else x
              for i, x in enumerate(inputs)]
    got, want = fn(*mine), ref(*theirs)
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    pick = outputs if outputs is not None else range(len(want))
    got, want = [got[i] for i in pick], [want[i] for i in pick]
    for i, (g, w) in enumerate(zip(got, want)):
        close(g, w, f"output {i}", rtol, atol)
    if not grad_of:
        return
    ups = ups or [torch.randn(w.shape, dtype=torch.float64, device=w.device) for w in want]
    torch.autograd.backward(list(got), [u.to(g.dtype) for g, u in zip(got, ups)])
    torch.autograd.backward(list(want), ups)
    for i in grad_of:
        close(mine[i].grad, theirs[i].grad, f"grad of input {i}", rtol, atol)


def rnd(*shape: int, device: str, dtype: torch.dtype = torch.float32, scale: float = 1.0
        ) -> torch.Tensor:
    return torch.randn(*shape, device=device, dtype=dtype) * scale


# ---- the environment ---------------------------------------------------------------------

def poisoned():
    """torch.empty* returns NaN-filled memory (the largest value for ints) meanwhile."""
    from kitjit.testing import poisoned_empty

    return poisoned_empty()


@contextlib.contextmanager
def patched(obj: Any, **attrs: Any):
    old = {k: getattr(obj, k) for k in attrs}
    for k, v in attrs.items():
        setattr(obj, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(obj, k, v)


def _is_cuda(dev: Any) -> bool:
    if isinstance(dev, torch.device):
        return dev.type == "cuda"
    if isinstance(dev, int):
        return True
    return isinstance(dev, str) and dev.startswith("cuda")


_FACTORIES = ("empty", "zeros", "ones", "full", "arange", "tensor", "randn", "rand",
              "randint", "empty_strided", "empty_like", "zeros_like", "ones_like",
              "full_like", "linspace", "as_tensor")


def _on_cpu(f: Callable) -> Callable:
    def factory(*args, **kw):
        if _is_cuda(kw.get("device")):
            kw["device"] = "cpu"
        return f(*args, **kw)
    return factory


class _FakeCudaDevice(contextlib.nullcontext):
    """`torch.cuda.device(i)` on the CPU: a no-op context with the index it was given."""

    def __init__(self, device: Any = 0) -> None:
        super().__init__()
        self.idx = getattr(device, "index", device) or 0


@contextlib.contextmanager
def cpu_as_h100():
    """CUDA-only host queries answered as an H100's; 'cuda' allocations made on the CPU."""
    props = types.SimpleNamespace(
        name="NVIDIA H100 80GB HBM3", major=9, minor=0, multi_processor_count=132,
        total_memory=80 << 30, shared_memory_per_block=48 << 10,
        shared_memory_per_block_optin=227 << 10, shared_memory_per_multiprocessor=228 << 10,
        regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, warp_size=32,
        L2_cache_size=50 << 20)
    cuda = dict(
        get_device_capability=lambda *a, **k: (9, 0),
        get_device_properties=lambda *a, **k: props,
        get_device_name=lambda *a, **k: props.name,
        current_device=lambda: 0, device_count=lambda: 1, set_device=lambda *a: None,
        device=_FakeCudaDevice,
        synchronize=lambda *a, **k: None)
    facts = {n: _on_cpu(getattr(torch, n)) for n in _FACTORIES}
    to = torch.Tensor.to

    def tensor_to(self, *args, **kw):
        args = tuple("cpu" if _is_cuda(a) and not isinstance(a, int) else a for a in args)
        if _is_cuda(kw.get("device")):
            kw["device"] = "cpu"
        return to(self, *args, **kw)

    with contextlib.ExitStack() as st:
        st.enter_context(patched(torch.cuda, **cuda))
        st.enter_context(patched(torch, **facts))
        st.enter_context(patched(torch.Tensor, to=tensor_to, cuda=lambda self, *a, **k: self))
        if not hasattr(torch._C, "_cuda_getCurrentRawStream"):  # CPU builds lack it
            torch._C._cuda_getCurrentRawStream = lambda index: 0
            st.callback(delattr, torch._C, "_cuda_getCurrentRawStream")
        yield


class LaunchCount:
    """Kernels the interpreter ran (a CPU case that ran none proves nothing)."""

    def __init__(self) -> None:
        self.n = 0


@contextlib.contextmanager
def counting_interpreter_launches(count: LaunchCount):
    import kitjit.interpreter as interp

    run = interp.run

    def counted(*args: Any, **kw: Any) -> Any:
        count.n += 1
        return run(*args, **kw)

    with patched(interp, run=counted):
        yield


@contextlib.contextmanager
def stub_modules(mods: dict[str, types.ModuleType]):
    """Modules a package imports but its kernels do not need, stood in for meanwhile."""
    old = {n: sys.modules.get(n) for n in mods}
    sys.modules.update(mods)
    try:
        yield
    finally:
        for n, m in old.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


@contextlib.contextmanager
def env_vars(values: dict[str, str]):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def first_config_on_gpu():
    importlib.import_module("kitjit.autotune")
    at = sys.modules["kitjit.autotune"]  # (the name kitjit.autotune is the decorator)
    assert hasattr(at, "_gpu_target"), "kitjit.autotune has no _gpu_target any more"
    with patched(at, _gpu_target=lambda args: None):
        yield


@contextlib.contextmanager
def environment(src: Source, device: str, tune_all: bool = False,
                count: LaunchCount | None = None):
    """The package's sources importable, swapped, and the device's harness patches on.
    Yields `imp(module)`: the swapped module (fresh per case). On the CPU, `count` counts
    the interpreter's kernel launches."""
    path = os.path.join(CACHE, src.name)
    deps = os.path.join(CACHE, "_deps")
    if not cache_present(src.name):
        raise FileNotFoundError(f"{path} absent: python benchmarks/port_corpus/fetch.py "
                                f"--only {src.name}")
    sys.path.insert(0, path)
    sys.path.append(deps)  # only where the machine lacks them
    try:
        with contextlib.ExitStack() as st:
            st.enter_context(poisoned())
            if device == "cpu":
                st.enter_context(cpu_as_h100())
                st.enter_context(counting_interpreter_launches(count or LaunchCount()))
            elif not tune_all:
                st.enter_context(first_config_on_gpu())
            st.enter_context(env_vars(src.env))
            if src.stubs is not None:
                st.enter_context(stub_modules(src.stubs()))
            st.enter_context(swapped(src.package, skip_init=src.skip_init))
            if src.setup is not None:
                src.setup(device)
            yield importlib.import_module
    finally:
        for p in (path, deps):
            sys.path.remove(p)


def swapped_import(name: str, package: str | None = None) -> types.ModuleType:
    """`importlib.import_module` with a `triton...` name answered by kitjit (for packages
    that import Triton by a string)."""
    return importlib.import_module(swap_name(name) or name, package)

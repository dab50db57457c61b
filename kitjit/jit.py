"""`@kit.jit`: a Python function becomes a kernel compiled once per specialization.

Launch path (`kernel[grid](*args, **kw)`): bind the arguments (a generated function, so
binding costs one Python call), build the specialization key from cheap facts (dtypes,
16-byte alignment, device; ints equal to 1 or divisible by 16), look it up in an in-memory
dict, fill a ctypes parameter block (one per launch in flight) and call `cuLaunchKernel` on
the tensors' device and its current torch stream (or `stream=`). A miss compiles, once per key
however many threads miss it together: frontend -> layouts -> LLVM -> PTX -> cubin, through
the on-disk cache (`kitjit.cache`).
Without a CUDA driver, or with KITJIT_INTERPRET=1, the same tile IR runs in the numpy
interpreter instead.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import inspect
import logging
import os
import threading
import time
import warnings
from typing import Any

from . import __kitjit_version__
from . import launcher as _launcher
from .compiled_kernel import CompiledKernel, _LazyAsm
from .ir.types import TileType, dtype_from_name
from .jit_meta import (  # noqa: F401  (_kind: kitjit.testing reads it here)
    _assemble,
    _const_repr,
    _kind,
    _meta_problem,
    _spec_str,
    _spec_text,
    _tma_meta,
)
from .jit_triton_attrs import KernelParam, TritonJITAttrs
from .kernel_interface import JITCallable, KernelInterface, MockTensor
from .launch_options import _check_arch_option, _check_options, _check_runs_on, cluster_entry
from .launcher import (
    MISSING_ARG,
    _arg_spec,
    _check_launch_args,
    _first_launch_during_capture,
    _grid3,
    _make_launch_record,
    _make_runner,
    slow_record,
)

_notice_shown = False
logger = logging.getLogger("kitjit.jit")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def interpret_mode() -> bool:
    """KITJIT_INTERPRET=1, or no usable CUDA driver (with a one-line notice)."""
    global _notice_shown
    if _env_flag("KITJIT_INTERPRET"):
        return True
    from .runtime import driver

    if driver.available():
        return False
    if not _notice_shown:
        _notice_shown = True
        logger.warning("kitjit: %s; running kernels in the CPU interpreter "
                       "(KITJIT_INTERPRET=1 silences this)", driver.unavailable_reason())
    return True


class JITFunction(TritonJITAttrs, JITCallable, KernelInterface):
    """A `@kit.jit` function. `kernel[grid](...)` launches it; inside another kernel a call
    inlines it."""

    def __init__(self, fn, *, do_not_specialize: tuple = (),
                 do_not_specialize_on_alignment: tuple = (), launch_metadata=None):
        self.fn = fn
        functools.update_wrapper(self, fn)
        self._parsed = None
        self._dep_hash: str | None = None
        self.cache: dict[tuple, Any] = {}  # specialization key -> launcher
        self._miss_locks: dict[tuple, threading.Lock] = {}
        self._ir_cache: dict[tuple, Any] = {}
        import inspect

        sig = inspect.signature(fn)
        self.params = list(sig.parameters)
        self.do_not_specialize = _param_names(self, do_not_specialize, "do_not_specialize")
        self.do_not_specialize_on_alignment = _param_names(
            self, do_not_specialize_on_alignment, "do_not_specialize_on_alignment")
        if launch_metadata is not None and not callable(launch_metadata):
            raise TypeError(f"{fn.__name__}: launch_metadata must be a function (grid, "
                            "metadata, args) -> dict, as in Triton")
        # Triton calls it at each launch only while a profiler's launch hook is installed
        # (knobs.runtime.launch_enter_hook); kitjit has no launch hooks: kept, never called.
        self.launch_metadata = launch_metadata
        self.constexprs = [n for n, p in sig.parameters.items() if _is_constexpr(p.annotation)]
        self.params = [KernelParam(i, p, n in self.constexprs, n in self.do_not_specialize,
                                   n in self.do_not_specialize_on_alignment)
                       for i, (n, p) in enumerate(sig.parameters.items())]  # Triton's view
        self.runtime_params = [str(n) for n in self.params if n not in self.constexprs]
        self._defaults = {n: p.default for n, p in sig.parameters.items()
                          if p.default is not p.empty}
        self._launch = _make_runner(self, sig)
        # `kernel[grid]` is the runner bound to the grid as a method is to its object: made
        # and called faster than a functools.partial (the grid becomes the first argument)
        self._bind = self._launch.__get__
        self._tracing = _launcher._is_compiling  # (set by _make_runner)
        from .torch_ops import register_kernel

        self._op_name = register_kernel(self)

    @property
    def arg_names(self) -> list[str]:
        """The parameters' names in order (Triton's JITFunction.arg_names)."""
        return [str(p) for p in self.params]

    def _specs(self, rt_args) -> list:
        """The specialization of each run-time argument, with do_not_specialize(_on_
        alignment) applied."""
        dns, dna = self.do_not_specialize, self.do_not_specialize_on_alignment
        return [_arg_spec(n, a, n not in dns, n not in dna)
                for n, a in zip(self.runtime_params, rt_args)]

    # -------------------------------------------------------------- source
    @property
    def parsed(self):
        if self._parsed is None:
            from kitjit.frontend.codegen import ParsedFunction

            self._parsed = ParsedFunction(self.fn)
        return self._parsed

    @property
    def dep_hash(self) -> str:
        """Hash of this function's source, the @kit.jit functions it calls and the global
        constants it reads: what must change for a cached binary to go stale."""
        if self._dep_hash is None:
            self._dep_hash = self._hash_deps(())
        return self._dep_hash

    def _hash_deps(self, stack: tuple) -> str:
        # `stack`: the functions whose hash is being computed; a call back into one of them
        # (recursion, which the compile rejects at the call) is hashed by name only
        h = hashlib.sha256(self.parsed.source.encode())
        for name in sorted(_global_names(self.parsed.node)):
            v = self.fn.__globals__.get(name, _MISSING)
            if isinstance(v, JITFunction) and v is not self:
                if v in stack:
                    h.update(f"{name}:<recursive>".encode())
                else:
                    dep = v._dep_hash or v._hash_deps((*stack, self))
                    h.update(f"{name}:{dep}".encode())
            elif isinstance(v, (int, float, bool, str)) or v is None:
                h.update(f"{name}={v!r}".encode())
            elif getattr(v, "__kit_constexpr_function__", False):
                h.update(f"{name}:{v.source_hash}".encode())
            elif type(v).__name__ == "constexpr":
                h.update(f"{name}={v.value!r}".encode())
        return h.hexdigest()

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"launch kernels with a grid: {self.__name__}[grid](...); "
                           "calls without one work only inside other @kit.jit functions")

    def __getitem__(self, grid):
        if self._tracing():  # traced by torch.compile: one opaque op in the graph
            from .torch_ops import traced_launch

            return functools.partial(traced_launch, self, grid)
        if grid is None:  # (a method bound to None would be the plain function)
            return functools.partial(self._launch, grid)
        return self._bind(grid)

    def __repr__(self) -> str:
        return f"JITFunction({self.fn.__module__}:{self.__name__})"

    # -------------------------------------------------------------- launch
    def run(self, *args, grid, **kwargs):
        """Launch on `grid` (what `kernel[grid](...)` calls); Triton's `warmup=True`
        keyword (a wrapper's `fn.run(..., warmup=...)`) compiles without launching."""
        if "warmup" in kwargs and "warmup" not in self.params:
            if kwargs.pop("warmup"):
                return self.warmup(*args, grid=grid, **kwargs)
        return self._launch(grid, *args, **kwargs)

    def _run(self, *args, grid, **kwargs):  # grid by keyword (the autotuner's entry)
        return self._launch(grid, *args, **kwargs)

    def warmup(self, *args, grid=None, **kwargs) -> CompiledKernel:
        """Triton's `kernel.warmup(*args, grid=..., **kwargs)`: compile for these arguments
        without running, and return the CompiledKernel (`n_regs`, `metadata.shared`;
        `ck[grid](*args)` launches it). Without a GPU it compiles for sm_90a, kitjit's
        default target (so a tutorial's occupancy arithmetic has real figures); launches
        then run in the interpreter. A torch dtype or a MockTensor stands for a tensor of
        that dtype (16-byte aligned), as in Triton."""
        from .runtime import driver

        args = tuple(map(MockTensor.wrap_dtype, args))
        opts = {k: kwargs.pop(k) for k in list(kwargs)
                if k in _launcher.LAUNCH_OPTIONS and k not in self.params}
        for k in _launcher.LAUNCH_OPTIONS:  # an option that is also a parameter: both
            if k in kwargs and k in self.params:
                opts[k] = kwargs[k]
        bound = inspect.signature(self.fn).bind(*args, **kwargs)
        bound.apply_defaults()
        rt = [bound.arguments[n] for n in self.runtime_params]
        consts = tuple(bound.arguments[c] for c in self.constexprs)
        nw = opts.get("num_warps", 4)
        if driver.available() and not interpret_mode():
            device = next((getattr(a, "base", a).get_device() for a in rt
                           if (hasattr(a, "data_ptr") or hasattr(a, "kit_values"))
                           and not isinstance(a, MockTensor)), -1)
            ck = self._compile_for_launch(rt, consts, nw, device, opts.get("maxnreg"),
                                          opts.get("launch_pdl", False), opts.get("arch"),
                                          opts.get("cluster"), shape_only=True)
        else:
            _check_launch_args(self, rt, gpu=False, shape_only=True)
            ck = self.compile(self._specs(rt), consts, nw, opts.get("arch") or "sm_90a",
                              maxnreg=opts.get("maxnreg"), cluster=opts.get("cluster"))
        ck._warm = (self, opts)
        return ck

    def _miss(self, key, rt_args, consts, num_warps, maxnreg=None, num_ctas=1,
              launch_pdl=False, arch=None, cluster=None):
        """A specialization not seen in this process: compile (or interpret) it and return
        its launcher, a function (grid, *run-time args). KITJIT_INTERPRET is read here, and
        the launch options other than num_warps are checked (`_check_options`)."""
        missing = [n for n, a in zip(self.runtime_params, rt_args) if a is MISSING_ARG]
        missing += [n for n, a in zip(self.constexprs, consts) if a is MISSING_ARG]
        if missing:
            hint = " (constexprs are passed by keyword: kernel[grid](..., BLOCK=1024))" \
                if any(n in self.constexprs for n in missing) else ""
            raise TypeError(f"{self.__name__}() missing required argument"
                            f"{'s' if len(missing) > 1 else ''}: "
                            f"{', '.join(repr(n) for n in missing)}{hint}")
        if not isinstance(num_warps, int) or not 1 <= num_warps <= 32 or \
                (num_warps & (num_warps - 1) and num_warps % 4):
            raise ValueError(f"{self.__name__}: num_warps must be a power of two from 1 to "
                             f"32, or a whole number of warpgroups (12, 20, ...) for kernels "
                             f"split into roles; got {num_warps!r}")
        _check_options(self.__name__, maxnreg, num_ctas, launch_pdl, cluster)
        _check_arch_option(self.__name__, arch)
        # one compile per key: threads missing the same key together wait for the first
        with self._miss_locks.setdefault(key, threading.Lock()):
            launcher = self.cache.get(key)
            if launcher is not None:
                return launcher
            if interpret_mode():
                launcher = slow_record(functools.partial(self._interpret_launch, consts,
                                                         num_warps, cluster=cluster))
            else:
                device = next((getattr(a, "base", a).get_device() for a in rt_args
                               if hasattr(a, "data_ptr") or hasattr(a, "kit_values")), -1)
                with _first_launch_during_capture(self.__name__):
                    ck = self._compile_for_launch(rt_args, consts, num_warps, device, maxnreg,
                                                  launch_pdl, arch, cluster)
                    launcher = _make_launch_record(self, ck, device if device >= 0 else
                                                   _launcher._torch_current_device(), consts,
                                                   pdl=bool(launch_pdl), cluster=cluster)
            self.cache[key] = launcher
        return launcher

    def _compile_for_launch(self, rt_args, consts, num_warps, device, maxnreg=None,
                            launch_pdl=False, arch_option=None,
                            cluster=None, shape_only=False) -> CompiledKernel:
        from .runtime import driver

        _check_launch_args(self, rt_args, gpu=True, shape_only=shape_only)
        if device < 0:
            device = _launcher._torch_current_device()
        arch = driver.device_arch(device)
        if launch_pdl and int(arch[3:5]) < 9:
            raise ValueError(f"{self.__name__}: launch_pdl=True (programmatic dependent "
                             f"launch) needs a Hopper or newer GPU; cuda:{device} is {arch}")
        if cluster is not None and int(arch[3:5]) < 9:
            raise ValueError(f"{self.__name__}: cluster={cluster!r} (thread-block clusters) "
                             f"needs a Hopper or newer GPU; cuda:{device} is {arch}")
        specs = self._specs(rt_args)
        kw = {} if maxnreg is None else {"maxnreg": maxnreg}  # (FakeDriver's compile)
        if cluster is not None:
            kw["cluster"] = cluster
        if arch_option is not None and arch_option != arch:
            # another target's code on this GPU: its PTX, which the driver assembles here
            _check_runs_on(self.__name__, arch_option, arch)
            kw["run_on"] = arch
            arch = arch_option
        return self.compile(specs, consts, num_warps, arch,
                            max_shared=driver.max_shared_memory(device), **kw)

    # -------------------------------------------------------------- compile
    def _arg_specs_dict(self, specs: list, consts: tuple) -> tuple[dict, dict]:
        arg_specs: dict[str, Any] = {}
        divs: dict[str, int] = {}
        for name, spec in zip(self.runtime_params, specs):
            if spec[0] in ("const", "desc"):
                arg_specs[name] = spec
                if spec[0] == "desc":  # TensorDescriptor checks its base's alignment
                    divs[f"{name}.base"] = 16
            else:
                arg_specs[name] = TileType(dtype_from_name(spec[0]))
                if spec[1] >= 16:
                    divs[name] = 16
        for name, v in zip(self.constexprs, consts):
            arg_specs[name] = ("const", v)
        return arg_specs, divs

    def build_ir(self, specs: list, consts: tuple, num_warps: int, tma: bool = False,
                 arch: str | None = None, cluster: tuple | None = None):
        """Tile IR with layouts for one specialization (what every later stage reads).
        `tma`: the target is sm_90a, where host tensor descriptors' blocks go through TMA.
        `arch`: the PTX target; Ampere/Ada (sm_80/86/89) get their own level-2 typing,
        layouts and marks (frontend/ampere.py), every other target (and the interpreter,
        arch None) Hopper's. `cluster`: the `cluster=` launch option (kit.cluster_* ops
        need one, and a Hopper target)."""
        from kitjit.frontend import ampere
        from kitjit.frontend.arrive_sync import mark_arrive_syncs
        from kitjit.frontend.cluster_scope import pick_mbar_scope
        from kitjit.frontend.codegen import build_kernel_ir
        from kitjit.frontend.layout_pass import infer_layouts
        from kitjit.frontend.tma_groups import group_tma_loads

        arg_specs, divs = self._arg_specs_dict(specs, consts)
        target = arch if arch in ampere.AMPERE_ARCHS else None
        from kitjit.language.target_info import compiling_for

        with compiling_for(arch):   # what kit.target_info answers while the body is typed
            fn = _guard(self.__name__, "parsing",
                        lambda: build_kernel_ir(self, arg_specs, num_warps, tma, target))
        fn.attrs["arg_div"] = divs
        from kitjit.frontend.semantic.cluster import check_cluster_ops

        check_cluster_ops(fn, cluster, arch)
        if cluster is not None:
            fn.attrs["cluster"] = _launcher.cluster_dims(cluster)
            pick_mbar_scope(fn)
        fn = _guard(self.__name__, "inferring layouts of", lambda: infer_layouts(fn))
        fn = _guard(self.__name__, "grouping TMA loads of", lambda: group_tma_loads(fn))
        if target is None:   # Hopper: one arrival per warpgroup (Ampere: one per warp)
            fn = _guard(self.__name__, "ordering mbarrier arrivals in",
                        lambda: mark_arrive_syncs(fn))
        if target is not None:
            fn = _guard(self.__name__, "preparing level 2 for sm_80 in",
                        lambda: ampere.prepare(fn))
        return fn

    def cache_key(self, specs: list, consts: tuple, num_warps: int, arch: str) -> str:
        """Disk-cache key: everything that changes the cubin. The kernel's own sources
        (`dep_hash`), the specialization, the target, and the compiler that builds it:
        kitjit's version and a hash of all its compiler sources (read once per process),
        llvmlite's version, and the assemblers (nvJitLink, ptxas) with their versions."""
        import llvmlite

        from .toolchain import assembler_fingerprint, compiler_source_hash

        text = repr((self.dep_hash, __kitjit_version__, compiler_source_hash(), specs,
                     [_const_repr(c) for c in consts], num_warps, arch, llvmlite.__version__,
                     assembler_fingerprint()))
        return hashlib.sha256(text.encode()).hexdigest()[:48]

    def _all_consts(self, consts: tuple) -> tuple:
        """`consts` for every constexpr parameter, in order: trailing ones left out take their
        defaults; too many, or a missing one without a default, is a CompileError naming
        them (not an internal error deep in the frontend)."""
        from .frontend.errors import CompileError

        names = list(self.constexprs)
        if len(consts) > len(names):
            raise CompileError(f"{self.__name__}.compile: {len(consts)} constexpr values for "
                               f"{len(names)} constexpr parameters ({', '.join(names)})")
        if len(consts) == len(names):
            return consts
        params = inspect.signature(self.fn).parameters
        rest = names[len(consts):]
        lacking = [n for n in rest if params[n].default is inspect.Parameter.empty]
        if lacking:
            raise CompileError(f"{self.__name__}.compile: no value for constexpr "
                               f"{', '.join(lacking)} (the values go in the order "
                               f"{', '.join(names)})")
        return consts + tuple(params[n].default for n in rest)

    def compile(self, specs: list, consts: tuple, num_warps: int, arch: str,
                max_shared: int | None = None, *,
                device_fallback: bool | None = None,
                maxnreg: int | None = None, run_on: str | None = None,
                cluster: tuple | None = None) -> CompiledKernel:
        """Compile (or load from disk) one specialization for `arch`; needs no GPU.

        `arch` must be one of `kitjit.toolchain.SUPPORTED_ARCHS` (else a CompileError, before
        LLVM could abort the process). `device_fallback`: `arch` is the GPU the kernel will
        run on (default: when `max_shared`, a device's limit, is given); a GPU newer than
        kitjit knows then gets compute_90 PTX for the driver to JIT, with one notice.
        `maxnreg`: a cap on registers per thread (`.maxnreg` in the PTX entry, which both
        assemblers honour; Triton's launch option and Config field). `run_on`: the GPU
        (another arch) the kernel will run on: `arch`'s PTX is kept for the driver to
        assemble there (the `arch=` launch option). `cluster`: (x, y, z) CTAs per
        thread-block cluster (`.reqnctapercluster` and `.explicitcluster` in the PTX entry;
        sm_90+ only)."""
        from . import cache as kcache
        from .toolchain import resolve_target

        consts = self._all_consts(tuple(consts))
        if device_fallback is None:
            device_fallback = max_shared is not None
        target = resolve_target(arch, device_fallback=device_fallback)
        _check_options(self.__name__, maxnreg, 1, False, cluster)
        if cluster is not None:
            cluster = _launcher.cluster_dims(cluster)
        key = self.cache_key(specs, consts, num_warps, arch)
        if run_on is not None and run_on != arch:
            target = dataclasses.replace(target, driver_jit=True)
            key = hashlib.sha256(f"{key}/ptx-for={run_on}".encode()).hexdigest()[:48]
        if maxnreg is not None:  # (without it the key is what it always was)
            key = hashlib.sha256(f"{key}/maxnreg={maxnreg}".encode()).hexdigest()[:48]
        if cluster is not None:
            key = hashlib.sha256(f"{key}/cluster={cluster}".encode()).hexdigest()[:48]
        store = kcache.KernelCache() if kcache.disk_cache_enabled() else None
        if store is None:
            return self._build(specs, consts, num_warps, arch, target, max_shared, None, key,
                               maxnreg, cluster)
        ck = self._load(store, key, max_shared)
        if ck is None:
            # A miss: one process compiles, the others (ranks launching the same kernel)
            # wait for its entry and load it (kitjit.cache_lock).
            with store.lock(key, f"compiling kernel {self.__name__} (key {key[:12]})") as lk:
                ck = self._load(store, key, max_shared) if lk.held or lk.waited else None
                if ck is None:
                    return self._build(specs, consts, num_warps, arch, target, max_shared,
                                       store, key, maxnreg, cluster)
        logger.debug("compile %s [%s] for %s, %d warps: disk cache hit (key %s)",
                     self.__name__, _spec_text(specs, consts, self), arch, num_warps, key[:12])
        return ck

    def _load(self, store, key: str, max_shared: int | None) -> CompiledKernel | None:
        """The kernel of a sound cache entry, or None (a bad meta.json is removed)."""
        from . import cache as kcache

        entry = store.get(key)
        problem = _meta_problem(entry.meta) if entry is not None else None
        if problem is not None:  # hand-edited, or written by another kitjit: rebuild
            warnings.warn(f"kitjit: cache entry {key[:12]} has a bad meta.json "
                          f"({problem}); removed, recompiling", kcache.KitCacheWarning,
                          stacklevel=3)
            store.remove(key)
            entry = None
        if entry is None:
            return None
        meta = entry.meta
        asm = {"cubin": entry.read("kernel.cubin")}
        ck = CompiledKernel(meta["name"], _LazyAsm(entry, asm), meta)
        _check_shared(ck, max_shared, self)
        return ck

    def _build(self, specs: list, consts: tuple, num_warps: int, arch: str, target,
               max_shared: int | None, store, key: str,
               maxnreg: int | None = None, cluster: tuple | None = None) -> CompiledKernel:
        """Compile one specialization (a cache miss) and publish it in `store`."""
        t0 = time.perf_counter()
        fn = self.build_ir(specs, consts, num_warps, tma=target.ptx_arch == "sm_90a",
                           arch=target.ptx_arch, cluster=cluster)
        op_names = {op.name for op in fn.walk()}
        if maxnreg is not None:
            if "setmaxnreg" in op_names:
                from kitjit.frontend.errors import CompileError

                raise CompileError(f"kernel '{fn.name}': maxnreg= together with "
                                   "kit.setmaxnreg is not supported yet",
                                   hint="drop maxnreg: the setmaxnreg budgets set the cap")
            fn.attrs["maxnreg"] = maxnreg
        hopper = {"smem_alloc", "wgmma", "tma_load", "tma_store", "setmaxnreg"}
        if "target" not in fn.attrs and not target.ptx_arch.startswith("sm_90") and \
                op_names & hopper:  # (Ampere/Ada lower level 2 themselves: fn.attrs target)
            from kitjit.frontend.errors import CompileError

            raise CompileError(f"kernel '{fn.name}' uses Hopper instructions (shared tiles, "
                               f"TMA, WGMMA, setmaxnreg) that need sm_90a; the target is "
                               f"{arch}", hint="compile for sm_90a, or use kit.dot and "
                               "kit.load for other GPUs")
        from .toolchain import check_target_ops

        check_target_ops(fn.name, target, op_names)
        tir = str(fn)
        from kitjit.backend.compiler import llvm_to_ptx
        from kitjit.backend.lower import Lowering

        lowering = Lowering(fn)
        llir = _guard(self.__name__, "lowering to LLVM", lowering.llvm_ir)
        ptx = _guard(self.__name__, "generating PTX for",
                     lambda: llvm_to_ptx(llir, target.ptx_arch))
        if cluster is not None:
            ptx = cluster_entry(ptx, cluster)
        cubin, res = _guard(self.__name__, "assembling",
                            lambda: _assemble(ptx, target, self.__name__))
        meta = {
            "name": fn.name,
            "source_file": self.parsed.file,
            "source_line": self.parsed.first_line,
            "signature": {n: _spec_str(s) for n, s in zip(self.runtime_params, specs)},
            "constexprs": {n: _const_repr(v) for n, v in zip(self.constexprs, consts)},
            "num_warps": num_warps,
            **({"maxnreg": maxnreg} if maxnreg is not None else {}),
            **({"cluster": list(cluster)} if cluster is not None else {}),
            "arch": arch,
            "shared": lowering.smem_bytes,
            "registers": res.registers,
            "spills": res.spills,
            "stack": res.stack,
            "arg_kinds": [_kind(s) for s in specs],
            "tma": [_tma_meta(self.runtime_params.index(name), e)
                    for name, e in fn.attrs.get("tma", {}).items()],
            # bytes of global scratch per program (CUtensorMaps the kernel builds), the
            # kernel's last parameter; the launcher allocates them (kitjit.set_allocator)
            **({"scratch": 128 * fn.attrs["_scratch_slots"]}
               if fn.attrs.get("_scratch_slots") else {}),
            "compile_seconds": round(time.perf_counter() - t0, 4),
            "versions": {"kitjit": __kitjit_version__},
            "assembler": res.extra.get("assembler", "unknown"),
            # what ptxas warned about (e.g. C7515: WGMMAs serialized); kept in the cache
            **({"ptxas_warnings": res.warnings} if res.warnings else {}),
        }
        if target.driver_jit:
            meta["ptx_target"] = target.ptx_arch
        ck = CompiledKernel(fn.name, {"tir": tir, "llir": llir, "ptx": ptx, "cubin": cubin},
                            meta)
        _check_shared(ck, max_shared, self)
        if res.spills:  # reported at the kernel's own definition
            from kitjit.frontend.errors import CompileWarning

            warnings.warn_explicit(
                f"kernel '{fn.name}' spills {res.spills} bytes of registers to local memory "
                f"({res.registers} registers used); it will be slower. Use smaller blocks, "
                "fewer live tiles, or more warps.", CompileWarning,
                self.parsed.file, self.parsed.first_line)
        for w in res.warnings:  # (once per compile, not on cache hits: see the metadata)
            logger.warning("kernel '%s' for %s, %d warps: %s: %s", fn.name, arch, num_warps,
                           meta["assembler"], w,   # (kit.graph's search holds these back)
                           extra={"kitjit_assembler_note": f"{fn.name}: {w}"})
        logger.debug("compile %s [%s] for %s, %d warps: cache miss (key %s), compiled in "
                     "%.3f s: %d registers, %d bytes spilled, %d bytes shared, %s",
                     self.__name__, _spec_text(specs, consts, self), arch, num_warps, key[:12],
                     meta["compile_seconds"], res.registers, res.spills, meta["shared"],
                     meta["assembler"])
        if store is not None:
            store.put(key, {"kernel.tir": tir, "kernel.ll": llir, "kernel.ptx": ptx,
                            "kernel.cubin": cubin}, meta)
        return ck

    # -------------------------------------------------------------- interpreter
    def _interpret_launch(self, consts, num_warps, grid, *rt_args, cluster=None):
        from . import interpreter

        rt_args = rt_args[:len(self.runtime_params)]  # then the launch values: not needed
        _check_launch_args(self, rt_args, gpu=False)
        specs = self._specs(rt_args)
        key = (tuple(map(tuple, specs)), consts, num_warps, cluster)
        fn = self._ir_cache.get(key)
        if fn is None:
            fn = self.build_ir(specs, consts, num_warps, cluster=cluster)
            self._ir_cache[key] = fn
        if callable(grid):  # Triton passes every bound argument
            grid = grid({**dict(zip(self.runtime_params, rt_args)),
                         **dict(zip(self.constexprs, consts)), "num_warps": num_warps})
        g = _grid3(grid, self.__name__)
        if g[0] * g[1] * g[2] == 0:
            return None
        args = []
        for a, s in zip(rt_args, specs):
            if s[0] == "desc":  # a host TensorDescriptor: base tensor, sizes, strides
                args += [a.base, *a.shape, *a.strides[:-1]]
            elif s[0] != "const":
                args.append(a)
        # TMA descriptor parameters: the interpreter copies boxes straight from the tensor
        # (a host TensorDescriptor's: the strided view it describes)
        for name in fn.attrs.get("tma", {}):
            a = rt_args[self.runtime_params.index(name)]
            args.append(a.base.as_strided(a.shape, a.strides) if hasattr(a, "kit_values")
                        else a)
        interpreter.run(fn, g, args, cluster=cluster)
        return None


_MISSING = object()


def _guard(kernel: str, stage: str, thunk):
    from kitjit.frontend.errors import AssemblerError, CompileError, InternalCompilerError

    try:
        return thunk()
    except CompileError as e:  # the message points at the user's line: no compiler frames
        raise e.with_traceback(None) from None
    except AssemblerError as e:  # Triton's PTXASError: libraries catch it to drop a config
        raise AssemblerError(f"{stage} kernel '{kernel}': {e}") from e
    except RecursionError as e:
        raise InternalCompilerError(kernel, stage, e) from e
    except Exception as e:
        raise InternalCompilerError(kernel, stage, e) from e


def _check_shared(ck: CompiledKernel, max_shared: int | None, jf: JITFunction) -> None:
    if max_shared is not None and ck.shared > max_shared:
        from kitjit.frontend.errors import OutOfResources

        raise OutOfResources(ck.shared, max_shared, "shared memory",
                             f"kernel '{ck.name}' needs {ck.shared} bytes of shared memory but "
                             f"the device allows {max_shared} per block",
                             hint="use smaller tiles or fewer warps")


def _is_constexpr(annotation) -> bool:
    from .language import constexpr

    if annotation is constexpr:
        return True
    if isinstance(annotation, str):
        return annotation.split(".")[-1] == "constexpr"
    return getattr(annotation, "__name__", "") == "constexpr"


def _global_names(node: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            out.add(n.value.id)
    return out


def jit(fn=None, *, do_not_specialize: tuple = (), do_not_specialize_on_alignment: tuple = (),
        launch_metadata=None):
    """Decorator: `@kit.jit` or `@kit.jit(do_not_specialize=("n",))`, as Triton's.

    `do_not_specialize`: parameters (names or indices) whose values never specialize the
    kernel (an int 1 is not folded, nothing is assumed 16-divisible or 16-byte aligned);
    `do_not_specialize_on_alignment`: only the latter. `launch_metadata(grid, metadata,
    args) -> dict`: kept as `kernel.launch_metadata` for profilers; kitjit has no launch
    hooks that would call it."""
    def make(f):
        return JITFunction(f, do_not_specialize=do_not_specialize,
                           do_not_specialize_on_alignment=do_not_specialize_on_alignment,
                           launch_metadata=launch_metadata)

    return make if fn is None else make(fn)


def _param_names(jf: JITFunction, names, what: str) -> set[str]:
    """`names` (parameter names or indices, as Triton takes them) as a set of names."""
    if isinstance(names, (str, int)):
        names = (names,)
    out = set()
    for n in names or ():
        if isinstance(n, int) and not isinstance(n, bool) and 0 <= n < len(jf.params):
            n = jf.params[n]
        if n not in jf.params:
            raise ValueError(f"{jf.fn.__name__}: {what} names {n!r}, which is not a parameter "
                             f"({', '.join(jf.params)})")
        out.add(n)
    return out


from .aot import compile_aot  # noqa: E402  (it needs JITFunction)

__all__ = ["jit", "JITFunction", "CompiledKernel", "compile_aot", "interpret_mode"]

"""Autotuning: `@kit.autotune(configs=[kit.Config(...)], key=[...])` above `@kit.jit`.

Why: the best block sizes and warp counts depend on the shapes, the dtypes and the GPU, and a
wrong guess can cost 2x. The first launch with a new key (the values of the arguments named
in `key`, plus the dtype of every tensor argument, as Triton does) compiles the candidates in
parallel, times them with CUDA events after an L2 flush (median of many runs) and keeps the
fastest; every later launch with that key costs one dict lookup more than a plain launch.

Timings persist on disk under `KernelCache().tuning_dir`, one JSON record per (kernel source,
key values, GPU, kitjit version) that maps each config's canonical string to its median
milliseconds (or "failed: reason"). The winner is the fastest of the *current* config list,
so adding a config times only that one, and a second process times nothing. Processes that
tune the same key at once (torch.distributed ranks on one machine) time it once: the first
takes a lock beside the record (kitjit.cache_lock), the others wait, read its record and time
only configs it lacks (none, unless their config list differs).

In the interpreter (KITJIT_INTERPRET=1, no GPU, or CPU tensors) timings mean nothing: the
first config that compiles to tile IR is used, nothing is timed and nothing is written.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .frontend.errors import KitjitError
from .jit import JITFunction, interpret_mode
from .kernel_interface import KernelInterface, pop_warmup
from .tuning_failures import AutotuneWarning, reason, skippable, warn_skipped, with_config_note
from .tuning_records import (
    fmt_key,
    format_tuning_records,
    record_lock,
    record_path,
    table,
    timings_on_disk,
    tuning_records,
    write_record,
)
from .tuning_timing import _bench_cuda, _Progress

logger = logging.getLogger("kitjit.autotune")

__all__ = ["Autotuner", "AutotuneError", "AutotuneWarning", "Config", "Heuristics", "Target",
           "autotune", "format_tuning_records", "heuristics", "tuning_records"]

_LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "cluster")
# AMD-only compiler options Triton's HIP configs carry (the tutorials' non-CUDA branch, which
# kitjit's interpreter takes on a machine without a GPU): accepted in Config kwargs, ignored
_AMD_OPTIONS = frozenset({"matrix_instr_nonkdim", "waves_per_eu", "kpack"})
_TRUE = ("1", "true", "yes", "on")


class AutotuneError(KitjitError, RuntimeError):
    """No candidate config could be compiled or run, or pruning left none (Triton's
    `AutotunerError`)."""


class Config:
    """One candidate: values of the tuned meta-parameters (constexprs) and launch options.

    `pre_hook(named_args)` runs before every launch with this config (timed or not), as in
    Triton. `str(config)` is the canonical form that names the config in tuning records.
    `num_stages` is passed to the launch, where kitjit does not use it (its loops are not
    software-pipelined by a stage count); `maxnreg` caps registers per thread (part of the
    compiled kernel); `num_ctas` must be 1 (Triton's split of a program over a cluster; kitjit
    takes `cluster=(x, y, z)`, a thread-block cluster shape tuned like the rest, whose grid
    must then be whole clusters). AMD's options in
    `kwargs` (matrix_instr_nonkdim, waves_per_eu, kpack) are kept in `amd_options` and ignored.
    """

    def __init__(self, kwargs: dict[str, Any], num_warps: int = 4, num_stages: int | None = None,
                 num_ctas: int = 1, maxnreg: int | None = None,
                 pre_hook: Callable[[dict[str, Any]], Any] | None = None,
                 ir_override: str | None = None, *,
                 cluster: tuple | None = None):
        self.kwargs = {k: v for k, v in kwargs.items() if k not in _AMD_OPTIONS}
        self.amd_options = {k: v for k, v in kwargs.items() if k in _AMD_OPTIONS}
        for k in self.kwargs:
            if k in _LAUNCH_OPTIONS:
                raise ValueError(f"Config: pass {k} as Config(..., {k}=...), not in kwargs")
        if not isinstance(num_warps, int) or num_warps < 1:
            raise ValueError(f"Config: num_warps must be a positive int, got {num_warps!r}")
        if num_ctas != 1:
            raise ValueError(f"Config: num_ctas={num_ctas!r} (thread block clusters) is not "
                             "supported yet; kitjit launches one CTA per program (clusters: "
                             "Config(..., cluster=(x, y, z)))")
        if cluster is not None:
            from .launch_options import check_cluster

            check_cluster("Config", cluster)
        if maxnreg is not None and (not isinstance(maxnreg, int) or isinstance(maxnreg, bool)
                                    or not 16 <= maxnreg <= 255):
            raise ValueError(f"Config: maxnreg is an int from 16 to 255 or None, got "
                             f"{maxnreg!r}")
        if ir_override is not None:
            raise ValueError("Config: ir_override (a hand-written IR file) is not supported "
                             "yet")
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.num_ctas = num_ctas
        self.maxnreg = maxnreg
        self.cluster = cluster
        self.ir_override = None
        self.pre_hook = pre_hook
        parts = [f"{k}={v!r}" for k, v in sorted(self.kwargs.items())]
        parts.append(f"num_warps={num_warps}")
        if num_stages is not None:
            parts.append(f"num_stages={num_stages}")
        if maxnreg is not None:
            parts.append(f"maxnreg={maxnreg}")
        if cluster is not None:
            parts.append(f"cluster={cluster}")
        self._str = ", ".join(parts)

    def all_kwargs(self) -> dict[str, Any]:
        """The keyword arguments a launch with this config passes to the kernel."""
        d = dict(self.kwargs)
        d["num_warps"] = self.num_warps
        if self.num_stages is not None:
            d["num_stages"] = self.num_stages
        if self.maxnreg is not None:
            d["maxnreg"] = self.maxnreg
        if self.cluster is not None:
            d["cluster"] = self.cluster
        return d

    def __str__(self) -> str:
        return self._str

    def __repr__(self) -> str:
        return f"Config({self._str})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Config) and self._str == other._str
                and self.pre_hook is other.pre_hook)

    def __hash__(self) -> int:
        return hash((self._str, id(self.pre_hook)))


@dataclass(frozen=True)
class Target:
    """The GPU a tuning is for: timings hold only there, so records are keyed by it."""

    name: str
    arch: str
    max_shared: int | None
    device: int


def _capturing() -> bool:
    """Is the current stream capturing a CUDA graph (kitjit.launcher's check, looked up at
    call time so tests can replace it)."""
    from . import launcher

    return launcher._capturing()


def _gpu_target(args: Sequence[Any]) -> Target | None:
    """The GPU this launch runs on, or None where kernels run in the interpreter (the
    autotuner's one question about the machine; CPU tests replace it)."""
    if interpret_mode():
        return None
    devs = [a.get_device() for a in args if hasattr(a, "data_ptr")]
    if any(d < 0 for d in devs):
        return None
    import torch

    from .runtime import driver

    dev = devs[0] if devs else torch.cuda.current_device()
    return Target(torch.cuda.get_device_name(dev), driver.device_arch(dev),
                  driver.max_shared_memory(dev), dev)


# --------------------------------------------------------------------------- key parts
def _key_value(a: Any) -> Any:
    """A `key` argument's part (the generated entry inlines the int case): tensors by
    dtype, everything else by value."""
    if hasattr(a, "data_ptr"):
        return a.dtype
    if isinstance(a, list):
        return tuple(a)
    return a


def _dtype_of(a: Any) -> Any:
    return a.dtype if hasattr(a, "data_ptr") else None


def _json_value(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (tuple, list)):
        return [_json_value(x) for x in v]
    s = str(v)
    return s[6:] if s.startswith("torch.") else s


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


# --------------------------------------------------------------------------- the autotuner
class Autotuner(KernelInterface):
    """A `@kit.jit` kernel whose meta-parameters are chosen per key by timing `configs`.

    `tuner[grid](*args, **kwargs)` launches like the kernel itself, without the tuned names
    (they come from the chosen config). `grid` may be a function of the meta-parameters.
    After a launch, `tuner.cache[key]` is the chosen Config and `tuner.best_config` the last
    one chosen; `tuner.chosen()` lists them for reports.
    """

    def __init__(self, fn: JITFunction, configs: Iterable[Config], key: Sequence[str],
                 prune_configs_by: Callable | dict | None = None,
                 reset_to_zero: Sequence[str] | None = None,
                 restore_value: Sequence[str] | None = None,
                 warmup: float = 25, rep: float = 100,
                 do_bench: Callable[[Callable[[], Any]], float] | None = None,
                 cache_results: bool = True, use_cuda_graph: bool = False):
        # `@kit.heuristics` between autotune and jit: its values are computed after the
        # config's (they may read them), for timing and for every launch
        self._heuristics: list[Heuristics] = []
        while isinstance(fn, Heuristics):
            self._heuristics.append(fn)
            fn = fn.fn
        if not isinstance(fn, JITFunction):
            raise TypeError("kit.autotune goes above @kit.jit (or @kit.heuristics): it tunes a "
                            f"JITFunction, got {type(fn).__name__}")
        self.fn = fn
        self._run_fn = self._heuristics[0]._run if self._heuristics else fn._run
        functools.update_wrapper(self, fn, updated=())
        name = fn.__name__
        uniq: dict[Config, None] = {}
        for c in configs:
            if not isinstance(c, Config):
                raise TypeError(f"autotune of {name}: configs must be kit.Config, got {c!r}")
            uniq.setdefault(c, None)
        self.configs: list[Config] = list(uniq)
        if not self.configs:
            raise ValueError(f"autotune of {name}: no configs")
        self.key = [key] if isinstance(key, str) else list(key)
        params = fn.params
        tuned: dict[str, None] = {}
        for c in self.configs:
            for k in c.kwargs:
                if k not in params:
                    raise ValueError(f"autotune of {name}: config {c} sets '{k}', which is not a "
                                     f"parameter of the kernel ({', '.join(params)})")
                tuned.setdefault(k, None)
        self.tuned = list(tuned)
        for h in self._heuristics:
            for k in h.values:
                tuned.setdefault(k, None)  # computed, so not an argument of the entry
        for k in [k for k in self.key if k not in params]:  # Triton skips them: so does kitjit
            warnings.warn(f"autotune of {name}: key '{k}' is not a parameter of the kernel "
                          f"({', '.join(params)}); it is ignored", stacklevel=3)
            self.key.remove(k)
        # a key the configs set is never an argument: Triton skips it (keys are read from
        # the caller's arguments), and so does kitjit
        self.key = [k for k in self.key if k not in tuned]
        self.reset_to_zero = list(reset_to_zero or ())
        self.restore_value = list(restore_value or ())
        # Triton's benchmark-time hooks (pre_hook(named_args), post_hook(named_args,
        # exception)), set by kitjit.runtime.autotuner's Triton-form constructor
        self.pre_hook: Callable | None = None
        self.post_hook: Callable | None = None
        for k in self.reset_to_zero + self.restore_value:
            if k not in fn.runtime_params:
                raise ValueError(f"autotune of {name}: '{k}' (reset_to_zero/restore_value) is "
                                 "not a run-time parameter of the kernel")
        self.early_config_prune: Callable | None = None
        self.perf_model: Callable | None = None
        self.top_k: int | float = 10
        if callable(prune_configs_by):
            self.early_config_prune = prune_configs_by
        elif prune_configs_by:
            unknown = set(prune_configs_by) - {"early_config_prune", "perf_model", "top_k"}
            if unknown:
                raise ValueError(f"autotune of {name}: prune_configs_by takes early_config_prune"
                                 f", perf_model and top_k, not {', '.join(sorted(unknown))}")
            self.early_config_prune = prune_configs_by.get("early_config_prune")
            self.perf_model = prune_configs_by.get("perf_model")
            self.top_k = prune_configs_by.get("top_k", 10)
        self.warmup = warmup
        self.rep = rep
        if use_cuda_graph and do_bench is None:
            from .testing import do_bench_cudagraph

            def do_bench(call: Callable[[], Any]) -> float:
                return float(do_bench_cudagraph(call, rep=rep))
        elif do_bench is not None and "quantiles" in _param_names(do_bench):
            user = do_bench  # Triton's form: do_bench(fn, quantiles) -> [median, p20, p80]

            def do_bench(call: Callable[[], Any]) -> float:
                r = user(call, quantiles=(0.5, 0.2, 0.8))
                return float(r[0] if isinstance(r, (list, tuple)) else r)
        self.use_cuda_graph = use_cuda_graph
        self.do_bench = do_bench
        self.cache_results = cache_results
        self.cache: dict[tuple, Config] = {}
        self.timings: dict[tuple, dict[str, float | str]] = {}
        self.configs_timings: dict[Config, float] | None = None
        self.best_config: Config | None = None
        self._launchers: dict[tuple, Callable] = {}
        self._lock = threading.RLock()
        self._sig = inspect.signature(fn.fn)
        self._entry_params = [p for p in params if p not in tuned]
        self._dtype_params = [p for p in fn.runtime_params if p not in self.key]
        self._set_by_configs = set(tuned) | {"num_warps"}
        if any(c.num_stages is not None for c in self.configs):
            self._set_by_configs.add("num_stages")
        self._run = self._make_entry()

    # -------------------------------------------------------------- launch
    def __getitem__(self, grid: Any) -> Callable:
        if type(self).run is not Autotuner.run:  # a subclass's run (Triton's hook point)
            return functools.partial(self.run, grid=grid)
        return functools.partial(self._run, grid=grid)

    def run(self, *args: Any, grid: Any, **kwargs: Any) -> Any:
        """Launch on `grid` with the config chosen for these arguments' key."""
        pop_warmup(kwargs, self.arg_names, self.__name__)
        return self._run(*args, grid=grid, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"launch kernels with a grid: {self.__name__}[grid](...)")

    def __repr__(self) -> str:
        return f"Autotuner({self.fn!r}, {len(self.configs)} configs, key={self.key})"

    def _make_entry(self) -> Callable:
        """The generated launch entry: the kernel's parameters less the tuned ones; builds
        the key tuple inline, looks it up, and calls the kernel's own entry with the chosen
        config's keywords (a functools.partial). Misses go to `_tune`."""
        import torch

        ns: dict[str, Any] = {"_kit_get": self._launchers.get, "_kit_tune": self._tune,
                              "_kit_T": torch.Tensor, "_kit_kv": _key_value,
                              "_kit_dt": _dtype_of}
        params = []
        for i, pname in enumerate(self._entry_params):
            p = self._sig.parameters[pname]
            if p.default is not p.empty:
                ns[f"_kit_d{i}"] = p.default
                params.append(f"{pname}=_kit_d{i}")
            else:
                params.append(pname)
        parts = [f"{n} if {n}.__class__ is int else _kit_kv({n})" for n in self.key]
        parts += [f"{n}.dtype if {n}.__class__ is _kit_T else _kit_dt({n})"
                  for n in self._dtype_params]
        key_src = "(" + "".join(f"{p}, " for p in parts) + ")"
        values = "(" + "".join(f"{n}, " for n in self._entry_params) + ")"
        computed = set(self.fn.params) - set(self._entry_params)  # tuned or heuristic
        first_tuned = next((i for i, p in enumerate(self.fn.params) if p in computed),
                           len(self.fn.params))
        positional = self.fn.params[:first_tuned]
        call = positional + [f"{n}={n}" for n in self._entry_params if n not in positional]
        call += ["grid=grid", "**_kit_kw"]
        name = self.__name__ if self.__name__.isidentifier() else "kernel"
        src = (f"def {name}({', '.join(params + ['*', 'grid', '**_kit_kw'])}):\n"
               f"    _kit_k = {key_src}\n"
               f"    _kit_c = _kit_get(_kit_k)\n"
               f"    if _kit_c is None:\n"
               f"        _kit_c = _kit_tune(_kit_k, {values}, _kit_kw, grid)\n"
               f"    return _kit_c({', '.join(call)})\n")
        exec(src, ns)
        return ns[name]

    @property
    def arg_names(self) -> list[str]:
        return self.fn.params

    def _launcher(self, cfg: Config) -> Callable:
        run = self._run_fn
        if cfg.pre_hook is None:
            return functools.partial(run, **cfg.all_kwargs())
        sig, params, all_kw = self._sig, set(self.fn.params), cfg.all_kwargs()

        def launch(*args: Any, grid: Any, **kw: Any) -> Any:
            named = {k: v for k, v in kw.items() if k in params}
            bound = sig.bind_partial(*args, **named, **cfg.kwargs)
            cfg.pre_hook(dict(bound.arguments))
            return run(*args, grid=grid, **all_kw, **kw)

        return launch

    # -------------------------------------------------------------- tuning
    def prune_configs(self, named_args: dict[str, Any], kwargs: dict[str, Any] | None = None
                      ) -> list[Config]:
        """The configs worth timing for these arguments: `early_config_prune(configs,
        named_args, **kwargs)`, then the `top_k` best by `perf_model(**named_args, **kwargs,
        **config.all_kwargs())` (a float top_k <= 1 is a fraction), as in Triton."""
        kwargs = kwargs or {}
        configs = list(self.configs)
        if self.early_config_prune is not None:
            # Triton passes the launch's keyword arguments; kitjit's entry binds every
            # argument by name, so each is offered (the tutorials read kwargs["N_CTX"])
            offered = {k: v for k, v in named_args.items() if k not in ("configs", "named_args")}
            configs = list(self.early_config_prune(configs, named_args, **{**offered, **kwargs}))
            if not configs:
                raise AutotuneError(f"{self.__name__}: early_config_prune left no configs")
        if self.perf_model is not None:
            k = self.top_k
            if isinstance(k, float) and k <= 1.0:
                k = max(1, int(len(configs) * k))
            k = int(k)
            if len(configs) > k:
                est = [(float(self.perf_model(**named_args, **kwargs, **c.all_kwargs())), i)
                       for i, c in enumerate(configs)]
                configs = [configs[i] for _, i in sorted(est)[:k]]
        return configs

    def _tune(self, key: tuple, values: tuple, kw: dict[str, Any], grid: Any) -> Callable:
        with self._lock:
            hit = self._launchers.get(key)
            if hit is not None:
                return hit
            clash = sorted(set(kw) & self._set_by_configs)
            if clash:
                raise ValueError(f"{self.__name__}: {', '.join(clash)} chosen by autotuning; "
                                 "do not pass it at launch")
            named = dict(zip(self._entry_params, values))
            t0 = time.perf_counter()
            configs = self.prune_configs(named, kw)
            target = _gpu_target(values) if len(configs) > 1 else None
            if len(configs) == 1:
                cfg, timings, how = configs[0], {}, "the only config left"
            elif target is None:
                cfg, timings = self._first_valid(configs, named, kw)
                how = "interpreter: first valid config, not timed"
            else:
                cfg, timings, how = self._tune_on_gpu(key, configs, named, kw, grid, target)
            report = self._report(key, configs, cfg, timings, how, target,
                                  time.perf_counter() - t0)
            logger.info("%s", report)
            if _env_flag("KITJIT_PRINT_AUTOTUNING"):  # Triton's switch: the user asked
                print(report, flush=True)
            self.timings[key] = timings
            self.configs_timings = {c: timings[str(c)] for c in configs
                                    if isinstance(timings.get(str(c)), float)}
            self.cache[key] = cfg
            self.best_config = cfg
            launcher = self._launcher(cfg)
            self._launchers[key] = launcher
            return launcher

    def _specialize(self, named: dict[str, Any], kw: dict[str, Any], cfg: Config
                    ) -> tuple[list, tuple]:
        params = self.fn.params
        full = {k: v for k, v in kw.items() if k not in _LAUNCH_OPTIONS or k in params}
        full.update(named)
        full.update(cfg.kwargs)
        for k, v in cfg.all_kwargs().items():  # a parameter named like a launch option
            if k in params and k not in kw:
                full.setdefault(k, v)
        for h in self._heuristics:  # outermost first, as they run
            h.apply(full, {**full, **cfg.all_kwargs()})
        for p in params:
            if p not in full:
                d = self._sig.parameters[p].default
                if d is inspect.Parameter.empty:
                    raise TypeError(f"{self.__name__}: missing argument '{p}'")
                full[p] = d
        if cfg.pre_hook is not None and any(hasattr(v, "kit_values") for v in full.values()):
            # it sets what specializes: host descriptors' block shapes (Triton's tutorials)
            cfg.pre_hook({p: full[p] for p in params})
        specs = self.fn._specs([full[n] for n in self.fn.runtime_params])
        return specs, tuple(full[c] for c in self.fn.constexprs)

    def _first_valid(self, configs: list[Config], named: dict[str, Any], kw: dict[str, Any]
                     ) -> tuple[Config, dict[str, float | str]]:
        """The interpreter's choice: the first config whose tile IR builds."""
        notes: dict[str, float | str] = {}
        errors: list[BaseException] = []
        for cfg in configs:
            specs, consts = self._specialize(named, kw, cfg)
            try:
                ir = self.fn.build_ir(specs, consts, cfg.num_warps)
            except Exception as e:
                if not skippable(e):
                    with_config_note(e, self.__name__, str(cfg))
                    raise
                notes[str(cfg)] = f"failed: {reason(e)}"
                warn_skipped(self.__name__, str(cfg), notes[str(cfg)])
                errors.append(e)
                continue
            # The launch that follows builds the same IR: hand it over.
            self.fn._ir_cache.setdefault((tuple(map(tuple, specs)), consts, cfg.num_warps), ir)
            return cfg, notes
        raise self._no_config(notes, errors)

    def _no_config(self, notes: dict[str, float | str], errors: list[BaseException]
                   ) -> BaseException:
        first = errors[0] if errors else None
        lines = "\n".join(f"  {c}: {r}" for c, r in notes.items())
        err = AutotuneError(f"{self.__name__}: no config compiles and runs:\n{lines}")
        err.__cause__ = first
        return err

    def _tune_on_gpu(self, key: tuple, configs: list[Config], named: dict[str, Any],
                     kw: dict[str, Any], grid: Any, target: Target
                     ) -> tuple[Config, dict[str, float | str], str]:
        from .cache import KernelCache, disk_cache_enabled

        keyrec = self._key_record(key)
        path = None
        if self.cache_results and disk_cache_enabled():
            path = record_path(KernelCache().tuning_dir, self.fn, keyrec, target)
        timings, from_disk, todo = timings_on_disk(path, configs)
        errors: list[BaseException] = []
        if todo and _capturing():
            what = fmt_key(**self._key_record(key))
            raise AutotuneError(
                f"{self.__name__}: the first launch for this key ({what}) came during "
                f"CUDA graph capture, and autotuning would time {len(todo)} configs inside "
                "the graph; launch once before capturing (a warm-up call outside the graph "
                "tunes it, and the capture then records the chosen config)")
        if todo:
            # One process times a key: the others (ranks tuning the same kernel) wait for
            # its record, read it again, and time only what it still lacks.
            with record_lock(path, self.__name__):
                if path is not None:
                    timings, from_disk, todo = timings_on_disk(path, configs)
                if todo:
                    new = self._time_configs(todo, configs, timings, named, kw, grid,
                                             target, errors)
                    missing = [str(c) for c in todo if str(c) not in new]
                    if missing:  # never a record (nor a choice) that lacks a config
                        raise AutotuneError(f"{self.__name__}: internal error: configs "
                                            f"{missing} were neither timed nor failed")
                    if path is not None:
                        write_record(path, self, keyrec, target, new, configs)
                    timings.update(new)
        for c in configs:  # skipped for a reason on disk: said here too, once
            t = timings.get(str(c))
            if isinstance(t, str) and str(c) in from_disk:
                warn_skipped(self.__name__, str(c), t, from_disk=True)
        ok = [c for c in configs if isinstance(timings.get(str(c)), float)]
        if not ok:
            raise self._no_config({str(c): timings.get(str(c), "?") for c in configs}, errors)
        best = min(ok, key=lambda c: timings[str(c)])
        how = (f"timed {len(todo)} of {len(configs)} configs"
               + (f", {len(from_disk)} from disk" if from_disk else ""))
        return best, {str(c): timings[str(c)] for c in configs if str(c) in timings}, how

    def _time_configs(self, todo: list[Config], configs: list[Config],
                      timings: dict[str, float | str], named: dict[str, Any],
                      kw: dict[str, Any], grid: Any, target: Target,
                      errors: list[BaseException]) -> dict[str, float | str]:
        """Compile `todo` in parallel, then time what compiled. Returns every config of
        `todo`: its median ms, or "failed: reason" where it is the config's own failure
        (kitjit.tuning_failures: skipped with a warning, kept on disk). A compile that fails
        otherwise (a lock or compile timed out, a race of the parallel compiles) is tried
        once more, alone; a second such failure, or one while timing, is raised."""
        new: dict[str, float | str] = {}
        known = [(t, s) for s, t in timings.items() if isinstance(t, float)
                 and s in {str(c) for c in configs}]
        progress = _Progress(self.__name__, len(configs), len(configs) - len(todo),
                             min(known) if known else None)

        def failed(cfg: Config, e: BaseException) -> None:
            if not skippable(e):
                raise with_config_note(e, self.__name__, str(cfg))
            errors.append(e)
            new[str(cfg)] = f"failed: {reason(e)}"
            warn_skipped(self.__name__, str(cfg), new[str(cfg)])

        def compile_one(cfg: Config) -> None:
            specs, consts = self._specialize(named, kw, cfg)
            extra = {} if cfg.maxnreg is None else {"maxnreg": cfg.maxnreg}
            if cfg.cluster is not None:
                extra["cluster"] = cfg.cluster
            self.fn.compile(specs, consts, cfg.num_warps, target.arch, target.max_shared,
                            **extra)

        ok: set[str] = set()
        again: list[tuple[Config, BaseException]] = []
        try:
            workers = max(1, min(len(todo), os.cpu_count() or 4, 8))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                futures = [pool.submit(compile_one, c) for c in todo]
                for i, (cfg, fut) in enumerate(zip(todo, futures)):
                    try:
                        fut.result()
                        ok.add(str(cfg))
                    except Exception as e:
                        if skippable(e):
                            failed(cfg, e)
                            progress.done += 1  # a config that cannot compile is done
                        else:
                            again.append((cfg, e))
                    progress.show(f"compiled {i + 1}/{len(todo)}")
            for cfg, first in again:  # not the config's fault: once more, alone
                logger.warning("%s: compiling config %s failed (%s); trying it again alone",
                               self.__name__, cfg, reason(first))
                try:
                    compile_one(cfg)
                    ok.add(str(cfg))
                except Exception as e:
                    if not skippable(e) and hasattr(e, "add_note"):
                        e.add_note(f"(the first compile of it failed too: {reason(first)})")
                    failed(cfg, e)  # raises unless it is the config's own failure now
                    progress.done += 1
            compiled = [c for c in todo if str(c) in ok]
            saved = {n: named[n].clone() for n in self.restore_value
                     if named.get(n) is not None}
            try:
                for cfg in compiled:
                    try:
                        ms = self._measure(cfg, named, kw, grid, saved, target)
                    except Exception as e:
                        failed(cfg, e)
                        progress.step(None)
                    else:
                        logger.debug("%s: config %s: %.4f ms", self.__name__, cfg, ms)
                        new[str(cfg)] = ms
                        progress.step((ms, str(cfg)))
                self._retime_close_calls(compiled, new, named, kw, grid, saved, target)
            finally:
                for n in self.reset_to_zero:
                    if named.get(n) is not None:
                        named[n].zero_()
                for n, t in saved.items():
                    named[n].copy_(t)
        finally:
            progress.close()
        return new

    def _retime_close_calls(self, compiled: list[Config], new: dict[str, float | str],
                            named: dict[str, Any], kw: dict[str, Any], grid: Any,
                            saved: dict[str, Any], target: Target) -> None:
        """Time the configs within 10% of the best once more, slowest first, and
        keep each one's better median. A GPU's clocks follow what it ran just before (on
        an H100 the same kernel timed 5-10% apart depending on its neighbour), so a close
        call decided by one pass is often decided by the order. Only with the built-in
        timer: a do_bench of the user's is their method."""
        if self.do_bench is not None:
            return
        done = [(new[str(c)], c) for c in compiled if isinstance(new.get(str(c)), float)]
        if len(done) < 2:
            return
        best = min(ms for ms, _ in done)
        for ms, cfg in sorted(done, key=lambda t: -t[0]):
            if ms <= 1.1 * best:
                try:
                    new[str(cfg)] = min(ms, self._measure(cfg, named, kw, grid, saved, target))
                except Exception:  # it ran once already: keep that figure
                    pass

    def _measure(self, cfg: Config, named: dict[str, Any], kw: dict[str, Any], grid: Any,
                 saved: dict[str, Any], target: Target) -> float:
        run = self._run_fn
        call_kw = {**named, **kw, **cfg.all_kwargs()}
        zero = [named[n] for n in self.reset_to_zero if named.get(n) is not None]
        restore = [(named[n], t) for n, t in saved.items()]
        hook = cfg.pre_hook
        pre, post = self.pre_hook, self.post_hook

        def launch() -> None:
            if pre is not None:
                pre({**named, **cfg.kwargs})
            run(grid=grid, **call_kw)
            if post is not None:
                post({**named, **cfg.kwargs}, exception=None)

        def setup() -> None:
            for t in zero:
                t.zero_()
            for t, s in restore:
                t.copy_(s)
            if hook is not None:
                hook({**named, **cfg.kwargs})

        if self.do_bench is not None:
            def call() -> None:
                setup()
                launch()

            call.config = cfg  # type: ignore[attr-defined]
            return float(self.do_bench(call))
        return _bench_cuda(launch, setup, self.warmup, self.rep, target.device)

    # -------------------------------------------------------------- reporting
    def _key_record(self, key: tuple) -> dict[str, Any]:
        n = len(self.key)
        return {"key": {k: _json_value(v) for k, v in zip(self.key, key[:n])},
                "dtypes": {k: _json_value(v) for k, v in zip(self._dtype_params, key[n:])
                           if v is not None}}

    def _report(self, key: tuple, configs: list[Config], cfg: Config,
                timings: dict[str, float | str], how: str, target: Target | None,
                seconds: float) -> str:
        rec = self._key_record(key)
        where = f" on {target.name} ({target.arch})" if target else ""
        ms = timings.get(str(cfg))
        ms_s = f", {ms:.4f} ms" if isinstance(ms, float) else ""
        head = (f"kitjit autotune: {self.__name__} [{fmt_key(rec['key'], rec['dtypes'])}]"
                f"{where}: {cfg}{ms_s} ({how}; {seconds:.2f} s)")
        rows = []
        for c in self.configs:
            t = timings.get(str(c), "pruned" if c not in configs else "-")
            mark = "*" if c == cfg else ""
            rows.append([mark, str(c), f"{t:.4f}" if isinstance(t, float) else str(t)])
        return head + "\n" + table(rows, ["", "config", "ms"], indent="  ")

    def chosen(self) -> list[dict[str, Any]]:
        """One row per tuned key: key, chosen config and its time (what benchmarks print)."""
        out = []
        for key, cfg in self.cache.items():
            rec = self._key_record(key)
            t = self.timings.get(key, {}).get(str(cfg))
            out.append({"kernel": self.__name__, "key": fmt_key(rec["key"], rec["dtypes"]),
                        "config": str(cfg), "ms": t if isinstance(t, float) else None})
        return out


def autotune(configs: Iterable[Config], key: Sequence[str],
             prune_configs_by: Callable | dict | None = None,
             reset_to_zero: Sequence[str] | None = None,
             restore_value: Sequence[str] | None = None, warmup: float = 25,
             rep: float = 100, do_bench: Callable[[Callable[[], Any]], float] | None = None,
             cache_results: bool = True, use_cuda_graph: bool = False
             ) -> Callable[[JITFunction], Autotuner]:
    """Decorator above `@kit.jit`: choose among `configs` per value of `key`, by timing.

    `key`: names of arguments whose values (ints by value, tensors by dtype) select a tuning
    entry; the dtypes of all tensor arguments are part of it too. `prune_configs_by`: a
    function `(configs, named_args, **kw) -> configs`, or Triton's dict with
    `early_config_prune`, `perf_model` and `top_k`. `reset_to_zero` / `restore_value`: names
    of tensors the kernel writes, zeroed / restored before each timed run and after tuning.
    `warmup` / `rep`: milliseconds of warm-up and of timed runs per config. `do_bench(fn) ->
    ms` replaces the CUDA-event timing (`fn.config` is the config being timed); Triton's
    form `do_bench(fn, quantiles)` (a list back, its first item the median) is taken too.
    `use_cuda_graph=True`: each config is timed by `kit.testing.do_bench_cudagraph`.
    Goes above `@kit.jit` or above `@kit.heuristics` (whose values then see the config's).
    """
    def deco(fn: JITFunction) -> Autotuner:
        return Autotuner(fn, configs, key, prune_configs_by=prune_configs_by,
                         reset_to_zero=reset_to_zero, restore_value=restore_value,
                         warmup=warmup, rep=rep, do_bench=do_bench,
                         cache_results=cache_results, use_cuda_graph=use_cuda_graph)

    return deco


def _param_names(f: Callable) -> list[str]:
    try:
        return list(inspect.signature(f).parameters)
    except (TypeError, ValueError):
        return []


from .heuristics import Heuristics, heuristics  # noqa: E402  (it reads Autotuner)

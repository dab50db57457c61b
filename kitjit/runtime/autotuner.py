"""Triton's module path `triton.runtime.autotuner`, for libraries that import, subclass or
wrap the autotuner (`from triton.runtime.autotuner import Autotuner`): kitjit's autotuner
with Triton's constructor, `Autotuner(fn, arg_names, configs, key, reset_to_zero,
restore_value, pre_hook=None, post_hook=None, ...)`, and the attributes such subclasses
read (`arg_names`, `keys`, `cache`, `configs`, `pre_hook`, `post_hook`,
`user_defined_pre_hook`, `user_defined_post_hook`, `best_config`). A subclass's `run(*args,
**kwargs)` is what `tuner[grid](...)` calls, with `grid=` among the keywords, as in Triton.

Hooks: Triton calls the autotuner's `pre_hook(named_args)` and `post_hook(named_args,
exception)` around each benchmarked launch only; so does kitjit (none in the interpreter,
which does not time). kitjit does its own reset_to_zero/restore_value around them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kitjit.autotune import AutotuneError as AutotunerError
from kitjit.autotune import Autotuner as _Base
from kitjit.autotune import Config, Heuristics, autotune, heuristics
from kitjit.frontend.errors import AssemblerError as PTXASError
from kitjit.frontend.errors import OutOfResources
from kitjit.kernel_interface import KernelInterface
from kitjit.runtime.driver import driver

__all__ = ["Autotuner", "AutotunerError", "Config", "Heuristics", "KernelInterface",
           "OutOfResources", "PTXASError", "autotune", "driver", "heuristics"]


class Autotuner(_Base):
    """kitjit's Autotuner built from Triton's constructor arguments."""

    def __init__(self, fn: Any, arg_names: Sequence[str], configs: Iterable[Config],
                 key: Sequence[str], reset_to_zero: Sequence[str] | None = None,
                 restore_value: Sequence[str] | None = None,
                 pre_hook: Callable | None = None, post_hook: Callable | None = None,
                 prune_configs_by: Callable | dict | None = None,
                 warmup: float | None = None, rep: float | None = None,
                 use_cuda_graph: bool = False, do_bench: Callable | None = None,
                 cache_results: bool = False):
        super().__init__(fn, configs, key, prune_configs_by=prune_configs_by,
                         reset_to_zero=reset_to_zero, restore_value=restore_value,
                         warmup=25 if warmup is None else warmup,
                         rep=100 if rep is None else rep, do_bench=do_bench,
                         cache_results=cache_results, use_cuda_graph=use_cuda_graph)
        self.keys = self.key
        self.user_defined_pre_hook = pre_hook is not None
        self.user_defined_post_hook = post_hook is not None
        self.pre_hook = pre_hook
        self.post_hook = post_hook


from kitjit.language.triton_names import module_getattr, top_attr  # noqa: E402

__getattr__ = module_getattr("kitjit.runtime.autotuner", "triton.runtime.autotuner", top_attr)

"""`@kit.heuristics`: meta-parameters computed from a call's arguments before each launch
(Triton's `triton.heuristics`), stacked above `@kit.jit` or `@kit.autotune`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .jit import JITFunction
from .kernel_interface import KernelInterface, pop_warmup
from .launcher import LAUNCH_OPTIONS


class Heuristics(KernelInterface):
    """`@kit.heuristics({"BLOCK": lambda args: ...})` above `@kit.jit` (or above / below
    `@kit.autotune`): before each launch, each value is computed from a dict of every
    argument of the call by name (positional ones named, keyword ones as given, launch
    options included) and passed as that keyword; later values see the earlier ones, as in
    Triton. A name may be a kernel parameter or a launch option (`num_warps`)."""

    def __init__(self, fn: Any, values: dict[str, Callable[[dict[str, Any]], Any]]):
        from .autotune import Autotuner

        if not isinstance(fn, (JITFunction, Autotuner, Heuristics)):
            raise TypeError("kit.heuristics goes above @kit.jit or @kit.autotune, got "
                            f"{type(fn).__name__}")
        if not isinstance(values, dict) or not all(callable(v) for v in values.values()):
            raise TypeError("kit.heuristics takes a dict of name -> function(args) -> value")
        self.fn = fn
        self.values = dict(values)
        self.arg_names = list(fn.arg_names)
        options = set(LAUNCH_OPTIONS)
        for k in self.values:
            if k not in self.arg_names and k not in options:
                raise ValueError(f"kit.heuristics of {fn.__name__}: '{k}' is neither a "
                                 f"parameter ({', '.join(self.arg_names)}) nor a launch option")
        functools.update_wrapper(self, fn, updated=())

    def apply(self, kw: dict[str, Any], named: dict[str, Any]) -> None:
        """Set each value in `kw`, computed from `named` (updated as values are set)."""
        for k, h in self.values.items():
            kw[k] = named[k] = h(named)

    def _run(self, *args: Any, grid: Any, **kw: Any) -> Any:
        named = {**dict(zip(self.arg_names, args)), **kw}
        self.apply(kw, named)
        return self.fn._run(*args, grid=grid, **kw)

    def run(self, *args: Any, grid: Any, **kw: Any) -> Any:
        pop_warmup(kw, self.arg_names, self.__name__)
        return self._run(*args, grid=grid, **kw)

    def __getitem__(self, grid: Any) -> Callable:
        if type(self).run is not Heuristics.run:  # a subclass's run (Triton's hook point)
            return functools.partial(self.run, grid=grid)
        return functools.partial(self._run, grid=grid)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"launch kernels with a grid: {self.__name__}[grid](...)")

    def __repr__(self) -> str:
        return f"Heuristics({self.fn!r}, {list(self.values)})"


def heuristics(values: dict[str, Callable[[dict[str, Any]], Any]]) -> Callable[[Any], Heuristics]:
    """Decorator: meta-parameters computed from the call's arguments (Triton's
    `triton.heuristics`), e.g. `{"BLOCK": lambda args: kit.next_power_of_2(args["n"])}`."""
    def deco(fn: Any) -> Heuristics:
        return Heuristics(fn, values)

    return deco

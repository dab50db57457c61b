"""Triton's module path `triton.knobs` (Triton 3.4+'s typed settings). kitjit's settings are
its KITJIT_* environment variables (README.md), so the knobs that have one are views of it:
reading gives the variable's value, setting it sets the variable (for this process), as
Triton's knobs read and write TRITON_* variables. Every other Triton knob is a one-line "not
supported yet", reading or setting, never a setting that would be silently ignored."""

from __future__ import annotations

import os
from typing import Any

from kitjit.language.triton_names import module_getattr


class _Group:
    """One knob group (`knobs.cache`, ...): name -> (environment variable, kind)."""

    def __init__(self, name: str, knobs: dict[str, tuple[str, str]]):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_knobs", knobs)

    def _missing(self, attr: str) -> AttributeError:
        return AttributeError(f"kitjit.knobs.{self._name}.{attr} is not supported yet "
                              f"(Triton's triton.knobs.{self._name}.{attr})")

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or attr not in self._knobs:
            raise self._missing(attr)
        var, kind = self._knobs[attr]
        v = os.environ.get(var)
        if kind == "bool":
            return v is not None and v.strip().lower() in ("1", "true", "yes", "on")
        return v

    def __setattr__(self, attr: str, value: Any) -> None:
        if attr not in self._knobs:
            raise self._missing(attr)
        var, kind = self._knobs[attr]
        if value is None or kind == "bool" and not value:
            os.environ.pop(var, None)
        else:
            os.environ[var] = "1" if kind == "bool" else str(value)


#: knobs.runtime.interpret: KITJIT_INTERPRET, read when a specialization first launches
runtime = _Group("runtime", {"interpret": ("KITJIT_INTERPRET", "bool")})
#: knobs.cache.dir: where compiled kernels are kept
cache = _Group("cache", {"dir": ("KITJIT_CACHE_DIR", "str")})
#: knobs.autotuning.print: print each tuning's winner and timings
autotuning = _Group("autotuning", {"print": ("KITJIT_PRINT_AUTOTUNING", "bool")})

__getattr__ = module_getattr("kitjit.knobs", "triton.knobs")

"""Triton's module path `triton.knobs` (Triton 3.4+'s typed settings). kitjit's settings are
its KITJIT_* environment variables (README.md), so the knobs that have one are views of it:
reading gives the variable's value, setting it sets the variable (for this process), as
Triton's knobs read and write TRITON_* variables. A knob kitjit has no switch for but whose
value it always follows (`runtime.debug`: kitjit always checks device_assert) reads that
value, takes it when set, and says "not supported yet" for any other. Every other Triton knob
is a one-line "not supported yet", reading or setting, never a setting silently ignored."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kitjit.language.triton_names import module_getattr


@dataclass(frozen=True)
class _Env:
    """A knob that is a view of an environment variable ('bool' or 'str')."""

    var: str
    kind: str


@dataclass(frozen=True)
class _Fixed:
    """A knob whose value kitjit always has (`value()` computes it): setting that value is
    accepted, any other raises `why` (why kitjit cannot do otherwise yet)."""

    value: Callable[[], Any]
    why: str


@dataclass(frozen=True)
class _Unsupported:
    """A knob libraries often touch that kitjit lacks: reading or setting it raises "not
    supported yet" with `why` (what to use instead)."""

    why: str


@dataclass(frozen=True)
class NvidiaTool:
    """Triton's knobs.NvidiaTool: a CUDA tool's path and version."""

    path: str
    version: str


class _Group:
    """One knob group (`knobs.cache`, ...): name -> _Env, _Fixed or _Unsupported."""

    def __init__(self, name: str, knobs: dict[str, _Env | _Fixed | _Unsupported]):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_knobs", knobs)

    def _missing(self, attr: str, why: str = "") -> AttributeError:
        return AttributeError(f"kitjit.knobs.{self._name}.{attr} is not supported yet "
                              f"(Triton's triton.knobs.{self._name}.{attr}){why}")

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or attr not in self._knobs:
            raise self._missing(attr)
        k = self._knobs[attr]
        if isinstance(k, _Unsupported):
            raise self._missing(attr, f": {k.why}")
        if isinstance(k, _Fixed):
            return k.value()
        v = os.environ.get(k.var)
        if k.kind == "bool":
            return v is not None and v.strip().lower() in ("1", "true", "yes", "on")
        return v

    def __setattr__(self, attr: str, value: Any) -> None:
        if attr not in self._knobs:
            raise self._missing(attr)
        k = self._knobs[attr]
        if isinstance(k, _Unsupported):
            raise self._missing(attr, f": {k.why}")
        if isinstance(k, _Fixed):
            if value != k.value():
                raise self._missing(f"{attr} = {value!r}", f": {k.why}")
            return
        if value is None or k.kind == "bool" and not value:
            os.environ.pop(k.var, None)
        else:
            os.environ[k.var] = "1" if k.kind == "bool" else str(value)

    def _vars(self) -> list[str]:
        return [k.var for k in self._knobs.values() if isinstance(k, _Env)]

    def reset(self) -> _Group:
        """Every knob of the group back to its default (its variable unset)."""
        for var in self._vars():
            os.environ.pop(var, None)
        return self

    @contextlib.contextmanager
    def scope(self) -> Iterator[_Group]:
        """`with knobs.cache.scope(): knobs.cache.dir = ...`: the group's settings are
        restored on exit, as Triton's knobs scope."""
        saved = {var: os.environ.get(var) for var in self._vars()}
        try:
            yield self
        finally:
            for var, v in saved.items():
                if v is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = v


def _disk_cache_on() -> bool:
    from kitjit.cache import disk_cache_enabled

    return disk_cache_enabled()


def _ptxas() -> NvidiaTool | None:
    from kitjit.tools import find_ptxas, ptxas_version

    exe = find_ptxas()
    return None if exe is None else NvidiaTool(exe, ptxas_version(exe))


#: knobs.runtime.interpret: KITJIT_INTERPRET, read when a specialization first launches
runtime = _Group("runtime", {
    "interpret": _Env("KITJIT_INTERPRET", "bool"),
    "debug": _Fixed(lambda: True, "kitjit always checks kit.device_assert (Triton only with "
                   "debug), and has no switch to compile the checks out"),
})
#: knobs.cache.dir: where compiled kernels are kept
_NO_HOME = _Unsupported("kitjit keeps no Triton home (~/.triton); its cache is knobs.cache.dir "
                        "(KITJIT_CACHE_DIR, default ~/.cache/kitjit)")
cache = _Group("cache", {"dir": _Env("KITJIT_CACHE_DIR", "str"), "home_dir": _NO_HOME,
                         "dump_dir": _NO_HOME, "override_dir": _NO_HOME})
#: knobs.compilation.always_compile: KITJIT_CACHE_DISABLE (compile, never read the disk
#: cache; the kernels of this process are still reused, as Triton's in-memory cache)
compilation = _Group("compilation", {
    "always_compile": _Env("KITJIT_CACHE_DISABLE", "bool"),
    "disable_line_info": _Fixed(lambda: True, "kitjit's cubins carry no line info"),
    "dump_ir": _Unsupported("kitjit dumps no files; a compiled kernel's ck.asm['tir' | "
                            "'llir' | 'ptx' | 'cubin'] holds each stage"),
    "override": _Unsupported("kitjit does not load IR from an override directory"),
})
#: knobs.autotuning.print: print each tuning's winner and timings; .cache: kitjit keeps
#: tuning results on disk whenever the disk cache is on (Autotuner(cache_results=False)
#: per kernel)
autotuning = _Group("autotuning", {
    "print": _Env("KITJIT_PRINT_AUTOTUNING", "bool"),
    "cache": _Fixed(_disk_cache_on, "kitjit keeps tuning results on disk whenever its disk "
                   "cache is on; turn it off per kernel with kit.autotune(..., "
                   "cache_results=False), or all caching with KITJIT_CACHE_DISABLE=1"),
})
#: knobs.language.default_fp_fusion: kitjit always lets a multiply feeding an add become
#: one FMA (nvcc's and Triton's default)
language = _Group("language", {
    "default_fp_fusion": _Fixed(lambda: True, "kitjit always fuses a multiply feeding an "
                               "add into an FMA and has no switch to keep them apart"),
})
#: knobs.nvidia.ptxas: the ptxas kitjit assembles with (read-only: KITJIT_PTXAS picks it,
#: before the first compile)
nvidia = _Group("nvidia", {
    "ptxas": _Fixed(_ptxas, "set KITJIT_PTXAS=/path/to/ptxas before the first compile"),
})

__getattr__ = module_getattr("kitjit.knobs", "triton.knobs")

"""A compiled kernel: one specialization's stages (tir, llir, ptx, cubin), its metadata,
its function loaded per device and its launch parameter blocks. `kernel.warmup(...)` returns
one; the launcher reads it on every launch."""

from __future__ import annotations

import collections
import functools
import threading
from typing import Any

from .launcher import flat_kinds


class _Metadata(dict):
    """A kernel's metadata: a dict whose keys also read as attributes (Triton's
    `kernel.metadata.shared`)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class CompiledKernel:
    """One specialization: every stage (`asm['tir' | 'llir' | 'ptx' | 'cubin']`), its
    metadata, its loaded function per device, and its parameter block per thread.
    `kernel.warmup(...)` returns one: `ck[grid](*args)` launches it (Triton's form, every
    argument by position, constexprs included)."""

    def __init__(self, name: str, asm: dict[str, Any], metadata: dict[str, Any]):
        self.name = name
        self.asm = asm
        self.metadata = _Metadata(metadata)
        self._warm: tuple | None = None  # (JITFunction, launch options) from warmup
        self.num_warps = metadata["num_warps"]
        self.threads = 32 * self.num_warps
        self.shared = metadata.get("shared", 0)
        self.arg_kinds: list[str] = metadata["arg_kinds"]  # per runtime param, or "const"
        self.runtime_index = [i for i, k in enumerate(self.arg_kinds) if k != "const"]
        self.functions: dict[int, int] = {}
        self._tls = threading.local()  # params(): each thread's own block
        # the launches' parameter blocks not in use (`_new_fast`): a deque, whose pop and
        # append are atomic and, unlike a list's going between 0 and 1 items, never realloc
        self._free: collections.deque[tuple] = collections.deque()
        self._load_lock = threading.Lock()

    @property
    def n_regs(self) -> int:
        return self.metadata.get("registers", 0)

    @property
    def n_spills(self) -> int:
        return self.metadata.get("spills", 0)

    def function(self, device: int) -> int:
        """The kernel's function handle on `device`, its module loaded there on first use
        (once, also when several threads ask at the same time)."""
        f = self.functions.get(device)
        if f is None:
            with self._load_lock:
                f = self.functions.get(device)
                if f is None:
                    from .runtime import driver

                    _, f = driver.load_function(self.asm["cubin"], self.name, self.shared,
                                                device)
                    self.functions[device] = f
        return f

    def params(self):
        """The calling thread's own parameter block (its layout: field names, where the TMA
        descriptors start). Launches do not fill it: each takes a block of its own off
        `_free` (`_new_fast`)."""
        try:
            return self._tls.block
        except AttributeError:
            return self._new_params()

    def _new_params(self):
        from .runtime.driver import ParamBlock

        block = ParamBlock(flat_kinds(self.arg_kinds), len(self.metadata.get("tma", [])),
                           bool(self.metadata.get("scratch")))
        self._tls.block = block
        return block

    def _new_fast(self) -> tuple:
        """(struct, void* array, its address) of a new parameter block: what the launcher
        takes when the kernel's free list of blocks (`_free`) is empty, and then puts there
        after its launch (so there are as many blocks as launches ever ran at once)."""
        from .runtime.driver import ParamBlock

        block = ParamBlock(flat_kinds(self.arg_kinds), len(self.metadata.get("tma", [])),
                           bool(self.metadata.get("scratch")))
        return (block.struct, block.ptrs, block.address)

    def _init_handles(self) -> None:
        """Triton's: load the module (on the current GPU; nothing to do without one)."""
        from .runtime import driver

        if driver.available():
            import torch

            f = self.function(torch.cuda.current_device())
            if not self.metadata.get("registers"):  # the assembler's log said nothing
                self.metadata["registers"] = driver.function_registers(f)

    def __getitem__(self, grid):
        """`ck[grid](*args)`: launch a kernel that `warmup` returned, with its options."""
        if self._warm is None:
            raise RuntimeError(f"{self.name}: only a kernel from kernel.warmup(...) launches "
                               "with ck[grid](...); launch the @kit.jit function instead")
        jf, opts = self._warm  # (an option that is also a parameter binds by position)
        return functools.partial(jf._launch, grid,
                                 **{k: v for k, v in opts.items() if k not in jf.params})

    def __repr__(self) -> str:
        return (f"<CompiledKernel {self.name} warps={self.num_warps} regs={self.n_regs} "
                f"spills={self.n_spills} shared={self.shared}>")


class _LazyAsm(dict):
    """Stages read from the disk entry only when asked for."""

    _FILES = {"tir": "kernel.tir", "llir": "kernel.ll", "ptx": "kernel.ptx"}

    def __init__(self, entry, initial):
        super().__init__(initial)
        self.entry = entry

    def __missing__(self, k):
        if k in self._FILES:
            v = self.entry.text(self._FILES[k])
            self[k] = v
            return v
        raise KeyError(k)

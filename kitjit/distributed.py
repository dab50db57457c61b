"""Kernels that communicate across GPUs, and a simulated world that checks them on the CPU.

On GPUs, kitjit kernels talk through torch's symmetric memory
(`torch.distributed._symmetric_memory`): every rank allocates its buffer with
`symm_mem.empty`, `symm_mem.rendezvous(buf, group)` returns a handle whose `buffer_ptrs` /
`signal_pad_ptrs` are the peers' addresses (mapped into this process over NVLink), and the
kernel loads and stores through them and waits on / sets signals with `kit.signal_wait` /
`kit.signal_set` / `kit.signal_add`. `peer_pointers(handle)` turns a handle into the two
int64 tensors of pointers a kernel takes:

    bufs, sigs = kit.distributed.peer_pointers(handle)          # on the handle's device
    peer = kit.load(Bufs + r).to(kit.pointer_type(kit.bfloat16))  # in the kernel
    kit.signal_wait(kit.load(Sigs + rank).to(kit.pointer_type(kit.uint32)) + slot, 1)

NVLink multicast is never used: `no_multicast_env()` is what every launcher of ours sets
(TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NCCL_NVLS_ENABLE=0, NVSHMEM_DISABLE_NVLS=1).

Without GPUs, `simulate(world_size)` stands in for the process group: one CPU tensor per
rank for each symmetric buffer, handles with the same fields, and `world.run(step)` calls
`step(rank)` for every rank, collects the kernels they launch and runs all their programs
together in the interpreter (kitjit/interpreter/world.py): a rank's `signal_wait` yields to
the others, peer pointers reach the other ranks' tensors, and a wait no rank can satisfy
raises DeadlockError instead of hanging.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

NO_MULTICAST = {"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NCCL_NVLS_ENABLE": "0",
                "NVSHMEM_DISABLE_NVLS": "1"}
SIGNAL_PAD_WORDS = 1024  # uint32 signals per rank in a simulated world (torch's pad is larger)


def no_multicast_env() -> dict[str, str]:
    """Set (in os.environ) and return the variables that keep NCCL, NVSHMEM and torch's
    symmetric memory off NVLink multicast."""
    os.environ.update(NO_MULTICAST)
    return dict(NO_MULTICAST)


def peer_pointers(handle: Any, device: Any = None) -> tuple[Any, Any]:
    """(buffer pointers, signal pad pointers) of a symmetric-memory handle, as int64 tensors
    of `world_size` entries on `device` (the handle's buffers' device by default): what a
    kernel indexes with a rank."""
    import torch

    if isinstance(handle, SimHandle):
        return handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device())
    bufs = torch.tensor(list(handle.buffer_ptrs), dtype=torch.int64, device=device)
    sigs = torch.tensor(list(handle.signal_pad_ptrs), dtype=torch.int64, device=device)
    return bufs, sigs


@dataclass
class SimHandle:
    """A rank's view of a simulated symmetric buffer, with the fields of torch's handle that
    kernels use (`buffer_ptrs_dev` / `signal_pad_ptrs_dev` are int64 CPU tensors here, not
    raw device addresses)."""

    rank: int
    world_size: int
    buffers: list   # every rank's tensor
    signal_pads: list
    buffer_ptrs_dev: Any
    signal_pad_ptrs_dev: Any

    @property
    def buffer_ptrs(self) -> list[int]:
        return [t.data_ptr() for t in self.buffers]

    @property
    def signal_pad_ptrs(self) -> list[int]:
        return [t.data_ptr() for t in self.signal_pads]

    def get_buffer(self, rank: int) -> Any:
        """Rank `rank`'s tensor (torch's handle takes sizes and a dtype here)."""
        return self.buffers[rank]


class SimulatedWorld:
    """`world_size` ranks in one process, for the interpreter (see the module docstring)."""

    def __init__(self, world_size: int):
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        self.world_size = world_size
        self._tensors: list = []
        self._names: list[tuple[int, int, str]] = []

    def empty(self, shape: Any, dtype: Any) -> list:
        """One CPU tensor per rank (a symmetric buffer); poisoned (NaN, or all bits set for
        ints) as `symm_mem.empty`'s memory is uninitialized."""
        import torch

        out = []
        for r in range(self.world_size):
            t = torch.empty(shape, dtype=dtype)
            if t.is_floating_point():
                t.fill_(float("nan"))
            else:
                t.fill_(-1 if dtype.is_signed else torch.iinfo(dtype).max)
            out.append(t)
            self._name(t, f"rank {r}'s buffer")
        return out

    def rendezvous(self, buffers: list) -> list[SimHandle]:
        """Handles for every rank over `buffers` (one tensor per rank), each with a fresh
        zeroed signal pad of SIGNAL_PAD_WORDS uint32 words per rank (as torch's)."""
        import torch

        if len(buffers) != self.world_size:
            raise ValueError(f"rendezvous needs one tensor per rank ({self.world_size}), got "
                             f"{len(buffers)}")
        pads = [torch.zeros(SIGNAL_PAD_WORDS, dtype=torch.int32) for _ in buffers]
        for r, p in enumerate(pads):
            self._name(p, f"rank {r}'s signal pad")
        bp = torch.tensor([t.data_ptr() for t in buffers], dtype=torch.int64)
        sp = torch.tensor([t.data_ptr() for t in pads], dtype=torch.int64)
        return [SimHandle(r, self.world_size, list(buffers), pads, bp, sp)
                for r in range(self.world_size)]

    def _name(self, t: Any, name: str) -> None:
        self._tensors.append(t)
        lo = t.untyped_storage().data_ptr()
        self._names.append((lo, lo + t.untyped_storage().nbytes(), name))

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """Kernels launched inside run together when the block ends (ranks interleaved)."""
        from .interpreter import world

        if world.COLLECTING is not None:
            raise RuntimeError("simulated worlds do not nest")
        world.COLLECTING = launches = []
        old = os.environ.get("KITJIT_INTERPRET")
        os.environ["KITJIT_INTERPRET"] = "1"
        try:
            yield
        finally:
            world.COLLECTING = None
            if old is None:
                os.environ.pop("KITJIT_INTERPRET", None)
            else:
                os.environ["KITJIT_INTERPRET"] = old
        for r, la in enumerate(launches):
            la.extra = list(self._tensors)
            if not la.label:
                la.label = f"launch {r}"
        world.NAMES[:] = self._names
        try:
            world.run_together(launches)
        finally:
            world.NAMES.clear()

    def run(self, step: Callable[[int], Any]) -> list:
        """Call `step(rank)` for every rank (each launches its kernels), then run every
        launched kernel together; returns the steps' results, one per rank."""
        from .interpreter import world

        out = []
        with self.together():
            for r in range(self.world_size):
                n = len(world.COLLECTING)
                out.append(step(r))
                k = 0
                for la in world.COLLECTING[n:]:
                    la.label = f"rank {r}" + (f" launch {k}" if k else "")
                    k += 1
        return out


def simulate(world_size: int) -> SimulatedWorld:
    """A simulated world of `world_size` ranks for the CPU interpreter."""
    return SimulatedWorld(world_size)


__all__ = ["simulate", "SimulatedWorld", "SimHandle", "peer_pointers", "no_multicast_env",
           "NO_MULTICAST"]

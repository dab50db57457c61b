"""What the two distributed examples share: starting the world (torchrun + NCCL + torch's
symmetric memory on GPUs, `kit.distributed.simulate` on the CPU) and checking a result."""

from __future__ import annotations

import os

import torch

import kitjit as kit

# the first signal-pad word the examples use: torch's handle.barrier(channel) takes words
# channel * world_size + rank at the start of the pad
SIG_BASE = 256


def on_gpus() -> bool:
    """Under torchrun with a GPU per rank (else: the simulated world)."""
    return "RANK" in os.environ and torch.cuda.is_available() and \
        torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def init_gpus():
    """(rank, world_size, group name, symm_mem) under torchrun, NVLink multicast off."""
    kit.distributed.no_multicast_env()
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl")
    group = dist.group.WORLD
    if hasattr(symm_mem, "enable_symm_mem_for_group"):
        symm_mem.enable_symm_mem_for_group(group.group_name)
    return rank, dist.get_world_size(), group.group_name, symm_mem


def check(out: torch.Tensor, ref: torch.Tensor, what: str, tol: float = 2e-2) -> float:
    """The largest error relative to the largest reference value; raises above `tol`."""
    err = ((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-9)).item()
    if not (err <= tol):  # (NaN fails)
        raise AssertionError(f"{what}: max error {err:.3g} relative to the largest value")
    return err

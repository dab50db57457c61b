"""Communication-fused GEMMs on two GPUs (issue 21): Llama-3-70B tensor-parallel shapes.

    torchrun --nproc-per-node 2 benchmarks/bench_dist.py [--quick]

Per shape, in ms (the slowest rank's median over the timed iterations):
  fused    the kitjit Hopper kernel (examples/matmul_comm.py: AllGatherMatmul /
           MatmulReduceScatter, a whole call: its own rows' copy, stream signals, the kernel)
  cuBLAS   the GEMM alone (torch.matmul on the gathered / the local operands)
  kitGEMM  matmul.py's kernel alone at the fused kernels' tile config (where a gap comes from)
  seq      NCCL + cuBLAS in sequence (all_gather then matmul; matmul then reduce_scatter)
  torch    torch's fused_all_gather_matmul / fused_matmul_reduce_scatter (symmetric memory)
  hidden   the share of the communication the fused kernel hides: (seq - fused) / (seq - gemm)
  bar      the issue's: gemm + (seq - gemm) / 4; "met" when fused <= bar and fused <= torch
Each fused result is checked against seq's on three calls (both halves of its buffers)
before timing. NVLink multicast stays off.
"""

from __future__ import annotations

import os
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))

import kitjit as kit  # noqa: E402

kit.distributed.no_multicast_env()

import matmul as mm  # noqa: E402
import matmul_comm as mc  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._symmetric_memory as symm_mem  # noqa: E402

# (name, kind, M tokens, K per rank (reduce-scatter) or K, N per rank (all-gather) or N)
SHAPES = [
    ("QKV M4096", "ag", 4096, 8192, 5120),
    ("gate-up M4096", "ag", 4096, 8192, 28672),
    ("QKV M16384", "ag", 16384, 8192, 5120),
    ("O M4096", "rs", 4096, 4096, 8192),
    ("down M4096", "rs", 4096, 14336, 8192),
    ("O M16384", "rs", 16384, 4096, 8192),
]


def grid_of(M: int, N: int) -> tuple:
    """matmul.py's persistent grid for the fused kernels' tile shape."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return (min(kit.cdiv(M, mc.CONFIG["BM"]) * kit.cdiv(N, mc.CONFIG["BN"]), sms),)


def timed(fn, iters: int) -> float:
    fn()
    torch.cuda.synchronize()
    dist.barrier()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2 * iters)]
    for i in range(iters):
        ev[2 * i].record()
        fn()
        ev[2 * i + 1].record()
    torch.cuda.synchronize()
    ms = sorted(ev[2 * i].elapsed_time(ev[2 * i + 1]) for i in range(iters))[iters // 2]
    t = torch.tensor([ms], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def main() -> None:
    import faulthandler

    # a fused kernel that never gets its signal would hang the run: stacks, then exit
    faulthandler.dump_traceback_later(float(os.environ.get("BENCH_DIST_TIMEOUT", 600)),
                                      exit=True)
    quick = "--quick" in sys.argv
    rank, ws = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl")
    group = dist.group.WORLD.group_name
    if hasattr(symm_mem, "enable_symm_mem_for_group"):
        symm_mem.enable_symm_mem_for_group(group)
    iters = 5 if quick else 20
    rows = []
    for name, kind, M, K, N in SHAPES[:2] + SHAPES[3:4] if quick else SHAPES:
        m = M // ws
        bf = dict(device="cuda", dtype=torch.bfloat16)
        if kind == "ag":
            a = torch.randn(m, K, **bf)
            b = torch.randn(K, N, **bf) / K ** 0.5
            op = mc.AllGatherMatmul(group, m, K)
            gathered = torch.empty(M, K, **bf)
            out = [None]

            def fused():
                out[0] = op(a, b)

            def gemm():
                return gathered @ b

            def kgemm():
                return mm.matmul_kernel[grid_of(M, N)](gathered, b, c_k, c_k, c_k, M, N, K,
                                                       TMA_STORE=2, **mc.CONFIG)

            def seq():
                dist.all_gather_into_tensor(gathered, a)
                return gathered @ b

            def tfused():
                return torch.ops.symm_mem.fused_all_gather_matmul(a, [b], 0, group)[1][0]
            c_k = torch.empty(M, N, **bf)
        else:
            a = torch.randn(M, K, **bf)
            b = torch.randn(K, N, **bf) / K ** 0.5
            op = mc.MatmulReduceScatter(group, m, N)
            red = torch.empty(m, N, **bf)
            out = [None]

            def fused():
                out[0] = op(a, b)

            def gemm():
                return a @ b

            def kgemm():
                return mm.matmul_kernel[grid_of(M, N)](a, b, c_k, c_k, c_k, M, N, K,
                                                       TMA_STORE=2, **mc.CONFIG)

            def seq():
                dist.reduce_scatter_tensor(red, a @ b)
                return red

            def tfused():
                return torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b, "sum", 0, group)
            c_k = torch.empty(M, N, **bf)
        err = 0.0
        for _ in range(3):   # both halves of the fused op's buffers, checked each call
            fused()
            torch.cuda.synchronize()
            ref = seq().clone()
            torch.cuda.synchronize()
            err = max(err, ((out[0].float() - ref.float()).abs().max()
                            / ref.float().abs().max()).item())
            if not err <= 2e-2:
                raise AssertionError(f"{name}: the fused result differs from NCCL + cuBLAS "
                                     f"(max error {err:.3g} of the largest value)")
        t = {k: timed(f, iters) for k, f in
             (("fused", fused), ("gemm", gemm), ("kgemm", kgemm), ("seq", seq),
              ("torch", tfused))}
        hidden = (t["seq"] - t["fused"]) / max(t["seq"] - t["gemm"], 1e-9)
        bar = t["gemm"] + 0.25 * (t["seq"] - t["gemm"])
        if rank == 0:      # row by row (flushed), so a later hang keeps what was measured
            if not rows:
                print(f"{'shape':16} {'fused':>8} {'cuBLAS':>8} {'kitGEMM':>8} {'seq':>8} "
                      f"{'torch':>8} {'hidden':>7} {'bar':>8} {'err':>8}")
            f, tt = t["fused"], t["torch"]
            print(f"{name:16} {f:8.3f} {t['gemm']:8.3f} {t['kgemm']:8.3f} {t['seq']:8.3f} "
                  f"{tt:8.3f} {hidden:7.2f} {bar:8.3f} {err:8.1e} "
                  f"{'met' if f <= bar and f <= tt else 'MISSED'}", flush=True)
        rows.append(name)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""The GEMM with the reduce-scatter in its epilogue: out_r = rows [r*m, (r+1)*m) of
sum over ranks s of A_s @ B_s (tensor parallel, the O and down projections: K sharded, each
rank holding its K slice of A and of B; the sum is split by rows across ranks).

One launch per rank, two kinds of programs:

- GEMM programs compute this rank's partial C tile by tile, the peers' row chunks first (in
  ring order from rank + 1, so their stores fly over NVLink while the own chunk computes)
  and store each fp32 tile straight into slot `rank` of the owner's symmetric buffer
  (shape [ws, m, N]); the epilogue then `kit.signal_add`s the owner's signal `rank` (release
  at system scope: the tile is visible before the count);
- reduce programs (the last pids) wait (`kit.signal_wait`, acquire) until every rank's
  tiles of this rank's chunk have counted, then add the ws slots and store the bf16 rows.

Signals count up across calls (call e waits for e * tiles per chunk): nothing resets them.
Run: `torchrun --nproc-per-node 2 examples/matmul_reducescatter.py` on GPUs (checked against
torch.matmul + NCCL reduce_scatter), `python examples/matmul_reducescatter.py` anywhere
else (the ranks simulated in the interpreter, checked against float64 torch).
"""

from __future__ import annotations

import torch
from _dist_common import SIG_BASE, check, init_gpus, on_gpus

import kitjit as kit


# rank and epoch change from call to call and rank to rank: one cubin for all of them (as
# Triton would otherwise specialize 0, 1 and multiples of 16, and recompile mid-run)
@kit.jit(do_not_specialize=("rank", "epoch"))
def matmul_reducescatter_kernel(A, B, Bufs, Sigs, Out, rank, epoch, m, N, K,
                                WS: kit.constexpr, BM: kit.constexpr, BN: kit.constexpr,
                                BK: kit.constexpr, RM: kit.constexpr, RN: kit.constexpr,
                                SIG_BASE: kit.constexpr):
    pid = kit.program_id(0)
    tiles_n = kit.cdiv(N, BN)
    per_chunk = kit.cdiv(m, BM) * tiles_n          # GEMM tiles in one rank's rows
    if pid < WS * per_chunk:
        chunk = (rank + 1 + pid // per_chunk) % WS     # peers first, own chunk last
        tm = (pid % per_chunk) // tiles_n
        tn = pid % tiles_n
        rm = tm * BM + kit.arange(0, BM)
        rn = tn * BN + kit.arange(0, BN)
        rk = kit.arange(0, BK)
        acc = kit.zeros((BM, BN), kit.float32)
        for k0 in range(0, K, BK):
            a = kit.load(A + (chunk * m + rm)[:, None] * K + (k0 + rk)[None, :],
                         mask=(rm[:, None] < m) & ((k0 + rk)[None, :] < K), other=0.0)
            b = kit.load(B + (k0 + rk)[:, None] * N + rn[None, :],
                         mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = kit.dot(a, b, acc)
        # epilogue: the fp32 tile into slot `rank` of the chunk owner's buffer, then count
        owner = kit.load(Bufs + chunk).to(kit.pointer_type(kit.float32))
        kit.store(owner + (rank * m + rm)[:, None] * N + rn[None, :], acc,
                  mask=(rm[:, None] < m) & (rn[None, :] < N))
        owner_sigs = kit.load(Sigs + chunk).to(kit.pointer_type(kit.uint32)) + SIG_BASE
        kit.signal_add(owner_sigs + rank, 1)           # red.release.sys
    else:
        t = pid - WS * per_chunk
        my_sigs = kit.load(Sigs + rank).to(kit.pointer_type(kit.uint32)) + SIG_BASE
        for s in kit.static_range(WS):                  # every rank's tiles of my rows
            kit.signal_wait(my_sigs + s, epoch * per_chunk, cmp="ge")
        mine = kit.load(Bufs + rank).to(kit.pointer_type(kit.float32))
        rr = (t // kit.cdiv(N, RN)) * RM + kit.arange(0, RM)
        rc = (t % kit.cdiv(N, RN)) * RN + kit.arange(0, RN)
        ok = (rr[:, None] < m) & (rc[None, :] < N)
        total = kit.zeros((RM, RN), kit.float32)
        for s in kit.static_range(WS):
            total += kit.load(mine + (s * m + rr)[:, None] * N + rc[None, :], mask=ok)
        kit.store(Out + rr[:, None] * N + rc[None, :], total.to(Out.dtype.element_ty),
                  mask=ok)


def launch(handle, bufs, sigs, a, b, out, epoch, BM=64, BN=64, BK=32, RM=32, RN=64,
           num_warps=4):
    """One rank's launch: a [ws*m, K_r], b [K_r, N] -> out [m, N]; the buffer behind
    `bufs` is fp32 [ws, m, N] on every rank."""
    ws, (K, N), m = handle.world_size, b.shape, out.shape[0]
    grid = (ws * kit.cdiv(m, BM) * kit.cdiv(N, BN) + kit.cdiv(m, RM) * kit.cdiv(N, RN),)
    matmul_reducescatter_kernel[grid](a, b, bufs, sigs, out, handle.rank, epoch, m, N, K,
                                      WS=ws, BM=BM, BN=BN, BK=BK, RM=RM, RN=RN,
                                      SIG_BASE=SIG_BASE, num_warps=num_warps)


def simulated(ws: int = 2, m: int = 40, K: int = 40, N: int = 72) -> None:
    """The ranks in the interpreter: ragged sizes, poisoned outputs, float64 reference."""
    world = kit.distributed.simulate(ws)
    hs = world.rendezvous(world.empty((ws, m, N), torch.float32))
    a = [torch.randn(ws * m, K).to(torch.bfloat16) for _ in range(ws)]
    b = [torch.randn(K, N).to(torch.bfloat16) for _ in range(ws)]
    out = [torch.full((m, N), float("nan"), dtype=torch.bfloat16) for _ in range(ws)]

    def step(r):
        ptrs, sigs = kit.distributed.peer_pointers(hs[r])
        launch(hs[r], ptrs, sigs, a[r], b[r], out[r], epoch=1, BM=32, BN=32, BK=16, RM=16,
               RN=32)
    world.run(step)
    full = sum(a[s].double() @ b[s].double() for s in range(ws))
    err = max(check(out[r], full[r * m:(r + 1) * m], f"rank {r}") for r in range(ws))
    print(f"matmul_reducescatter: {ws} ranks simulated in the interpreter, M={ws * m} "
          f"K={ws * K} N={N}: rel err {err:.2e}")


def on_gpu(m: int = 1000, K: int = 1024, N: int = 1536) -> None:
    import torch.distributed as dist

    rank, ws, group, symm_mem = init_gpus()
    torch.manual_seed(rank)
    buf = symm_mem.empty((ws, m, N), dtype=torch.float32, device="cuda")
    handle = symm_mem.rendezvous(buf, group)
    ptrs, sigs = kit.distributed.peer_pointers(handle)
    a = torch.randn(ws * m, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16) / K ** 0.5
    out = torch.full((m, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    handle.barrier()
    launch(handle, ptrs, sigs, a, b, out, epoch=1)
    torch.cuda.synchronize()
    part = (a.double() @ b.double())
    ref = torch.empty(m, N, device="cuda", dtype=torch.float64)
    dist.reduce_scatter_tensor(ref, part)
    check(out, ref, f"rank {rank}")
    print(f"rank {rank}: matmul_reducescatter M={ws * m} K={ws * K} N={N} matches "
          "matmul + NCCL reduce_scatter")
    if torch.cuda.get_device_capability() == (9, 0):   # the Hopper kernel: matmul_comm.py
        import matmul_comm

        m = 1024
        fused = matmul_comm.MatmulReduceScatter(group, m, N)
        for call in range(3):                     # both halves of its buffers, one reused
            a = torch.randn(ws * m, K, device="cuda", dtype=torch.bfloat16)
            out = fused(a, b)
            ref = torch.empty(m, N, device="cuda", dtype=torch.float64)
            dist.reduce_scatter_tensor(ref, a.double() @ b.double())
            check(out, ref, f"rank {rank}, Hopper call {call}")
        print(f"rank {rank}: matmul_reducescatter on Hopper (WGMMA, NVLink stores) "
              f"M={ws * m} K={ws * K} N={N}, 3 calls, matches matmul + NCCL reduce_scatter")
    dist.destroy_process_group()


def main() -> None:
    """On GPUs under torchrun, else in the simulated world."""
    on_gpu() if on_gpus() else simulated()


if __name__ == "__main__":
    main()

"""All-gather fused with the GEMM: C_r = all_gather(A) @ B_r (tensor parallel, the QKV and
gate-up projections: activations sharded by rows, each rank holding a column slice of B).

Rank r holds rows [r*m, (r+1)*m) of A in its slot of a symmetric buffer of all M = ws*m
rows. One launch per rank runs two kinds of programs:

- copy programs (the first pids, so the GPU starts them first) push this rank's rows into
  slot r of every peer's buffer with plain stores through peer pointers (NVLink writes),
  then `kit.signal_add` the peer's signal r: release at system scope, so the rows are
  visible before the count is;
- GEMM programs compute the C tiles chunk by chunk, their own chunk first (no waiting) and
  then the peers' in ring order, each waiting (`kit.signal_wait`, acquire) until every copy
  program of that peer has counted: compute runs while the other chunks are in flight.

The signals live at words SIG_BASE.. of the pad (torch's handle.barrier() uses the first
ones) and count up across calls (call e waits for e * copy programs), so nothing resets them.
Run: `torchrun --nproc-per-node 2 examples/allgather_matmul.py` on GPUs (checked against
NCCL all_gather + torch.matmul), `python examples/allgather_matmul.py` anywhere else (the
ranks simulated in the interpreter, checked against float64 torch).
"""

from __future__ import annotations

import torch
from _dist_common import SIG_BASE, check, init_gpus, on_gpus

import kitjit as kit


# rank and epoch change from call to call and rank to rank: one cubin for all of them (as
# Triton would otherwise specialize 0, 1 and multiples of 16, and recompile mid-run)
@kit.jit(do_not_specialize=("rank", "epoch"))
def allgather_matmul_kernel(Bufs, Sigs, B, C, rank, epoch, m, N, K,
                            WS: kit.constexpr, BM: kit.constexpr, BN: kit.constexpr,
                            BK: kit.constexpr, COPY_ROWS: kit.constexpr,
                            SIG_BASE: kit.constexpr):
    pid = kit.program_id(0)
    n_copy = kit.cdiv(m, COPY_ROWS)
    mine = kit.load(Bufs + rank).to(kit.pointer_type(B.dtype.element_ty))
    my_sigs = kit.load(Sigs + rank).to(kit.pointer_type(kit.uint32)) + SIG_BASE
    if pid < n_copy:
        # push COPY_ROWS of this rank's rows to every peer, then count on its signal `rank`
        rows = pid * COPY_ROWS + kit.arange(0, COPY_ROWS)
        cols = kit.arange(0, BK)
        for p in kit.static_range(1, WS):
            peer_rank = (rank + p) % WS
            peer = kit.load(Bufs + peer_rank).to(kit.pointer_type(B.dtype.element_ty))
            for k0 in range(0, K, BK):
                at = (rank * m + rows)[:, None] * K + (k0 + cols)[None, :]
                ok = (rows[:, None] < m) & ((k0 + cols)[None, :] < K)
                kit.store(peer + at, kit.load(mine + at, mask=ok), mask=ok)
            peer_sigs = kit.load(Sigs + peer_rank).to(kit.pointer_type(kit.uint32)) + SIG_BASE
            kit.signal_add(peer_sigs + rank, 1)          # red.release.sys
    else:
        t = pid - n_copy
        tiles_n = kit.cdiv(N, BN)
        tiles_m = kit.cdiv(m, BM)                        # tiles per chunk of m rows
        chunk = (rank + t // (tiles_m * tiles_n)) % WS   # own chunk first, then the ring
        tm = (t // tiles_n) % tiles_m
        tn = t % tiles_n
        if chunk != rank:                                # wait for every copy program of it
            kit.signal_wait(my_sigs + chunk, epoch * n_copy, cmp="ge")
        rm = tm * BM + kit.arange(0, BM)
        rn = tn * BN + kit.arange(0, BN)
        rk = kit.arange(0, BK)
        acc = kit.zeros((BM, BN), kit.float32)
        for k0 in range(0, K, BK):
            a = kit.load(mine + (chunk * m + rm)[:, None] * K + (k0 + rk)[None, :],
                         mask=(rm[:, None] < m) & ((k0 + rk)[None, :] < K), other=0.0)
            b = kit.load(B + (k0 + rk)[:, None] * N + rn[None, :],
                         mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = kit.dot(a, b, acc)
        kit.store(C + (chunk * m + rm)[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty),
                  mask=(rm[:, None] < m) & (rn[None, :] < N))


def launch(handle, bufs, sigs, b, c, m, epoch, BM=64, BN=64, BK=32, COPY_ROWS=32,
           num_warps=4):
    """One rank's launch; the rank's rows must already be in its buffer's slot."""
    ws, (K, N) = handle.world_size, b.shape
    grid = (kit.cdiv(m, COPY_ROWS) + ws * kit.cdiv(m, BM) * kit.cdiv(N, BN),)
    allgather_matmul_kernel[grid](bufs, sigs, b, c, handle.rank, epoch, m, N, K, WS=ws,
                                  BM=BM, BN=BN, BK=BK, COPY_ROWS=COPY_ROWS,
                                  SIG_BASE=SIG_BASE, num_warps=num_warps)


def simulated(ws: int = 2, m: int = 40, K: int = 48, N: int = 72) -> None:
    """The ranks in the interpreter: ragged sizes, poisoned outputs, float64 reference."""
    world = kit.distributed.simulate(ws)
    bufs = world.empty((ws * m, K), torch.bfloat16)
    hs = world.rendezvous(bufs)
    a = [torch.randn(m, K).to(torch.bfloat16) for _ in range(ws)]
    b = [torch.randn(K, N).to(torch.bfloat16) for _ in range(ws)]
    c = [torch.full((ws * m, N), float("nan"), dtype=torch.bfloat16) for _ in range(ws)]
    for r in range(ws):
        bufs[r][r * m:(r + 1) * m] = a[r]

    def step(r):
        ptrs, sigs = kit.distributed.peer_pointers(hs[r])
        launch(hs[r], ptrs, sigs, b[r], c[r], m, epoch=1, BM=32, BN=32, BK=16, COPY_ROWS=16)
    world.run(step)
    full = torch.cat(a).double()
    err = max(check(c[r], full @ b[r].double(), f"rank {r}") for r in range(ws))
    print(f"allgather_matmul: {ws} ranks simulated in the interpreter, M={ws * m} K={K} "
          f"N={N}: rel err {err:.2e}")


def on_gpu(m: int = 1000, K: int = 1024, N: int = 1536) -> None:
    import torch.distributed as dist

    rank, ws, group, symm_mem = init_gpus()
    torch.manual_seed(rank)
    buf = symm_mem.empty((ws * m, K), dtype=torch.bfloat16, device="cuda")
    handle = symm_mem.rendezvous(buf, group)
    ptrs, sigs = kit.distributed.peer_pointers(handle)
    a = torch.randn(m, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    c = torch.full((ws * m, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    buf[rank * m:(rank + 1) * m].copy_(a)
    handle.barrier()                    # every rank's rows are in place before any push
    launch(handle, ptrs, sigs, b, c, m, epoch=1)
    torch.cuda.synchronize()
    gathered = torch.empty(ws * m, K, device="cuda", dtype=torch.bfloat16)
    dist.all_gather_into_tensor(gathered, a)
    check(c, gathered.double() @ b.double(), f"rank {rank}")
    print(f"rank {rank}: allgather_matmul M={ws * m} K={K} N={N} matches NCCL + matmul")
    if torch.cuda.get_device_capability() == (9, 0):   # the Hopper kernel: matmul_comm.py
        import matmul_comm

        m = 1024
        fused = matmul_comm.AllGatherMatmul(group, m, K)
        for call in range(3):                     # both halves of its buffers, one reused
            a = torch.randn(m, K, device="cuda", dtype=torch.bfloat16)
            c = fused(a, b)
            gathered = torch.empty(ws * m, K, device="cuda", dtype=torch.bfloat16)
            dist.all_gather_into_tensor(gathered, a)
            check(c, gathered.double() @ b.double(), f"rank {rank}, Hopper call {call}")
        print(f"rank {rank}: allgather_matmul on Hopper (WGMMA, copy engines) M={ws * m} K={K} "
              f"N={N}, 3 calls, matches NCCL + matmul")
    dist.destroy_process_group()


def main() -> None:
    """On GPUs under torchrun, else in the simulated world."""
    on_gpu() if on_gpus() else simulated()


if __name__ == "__main__":
    main()

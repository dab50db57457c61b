"""The Hopper GEMM of matmul.py with the communication of tensor parallelism fused in: an
all-gather in front of it and a reduce-scatter in its epilogue (sm_90a; the level-1 kernels
of allgather_matmul.py and matmul_reducescatter.py show the same protocols on any GPU).

Both run matmul.py's persistent kernel (TMA ring, WGMMA) over C's tiles in row-chunk order,
one chunk of m = M / world_size rows per rank, starting at another chunk on each rank
(`tile_origin(..., ROT)`), so a rank works on what it already has while the rest moves:

- all-gather + GEMM, C = all_gather(A) @ B: this rank's chunk first. Each rank pushes its
  rows into every peer's buffer with copy engines (`tensor.copy_` into torch's symmetric
  memory, on a side stream: no SM taken from the GEMM), then a stream write
  (cuStreamWriteValue32, fenced by the driver) of the call's number into the peer's gate
  word for it; the kernel's loader waits for the gate (`kit.signal_wait`, acquire) before
  the first TMA load of a tile in a peer's chunk. No barrier kernel (nothing may need an SM
  while the GEMM holds them all) and no cross-rank wait on the host side: buffers alternate
  by the call's parity, and a rank pushes call e only after its GEMM e-1 ended, which needed
  every peer's push e-1, which each peer issued only after its own GEMM e-2 (the last reader
  of that half) ended.
- GEMM + reduce-scatter, out_r = rows of chunk r of sum_s A_s @ B_s: the peers' chunks
  first; each such tile goes, in bf16, straight into slot `rank` of the owner's receive
  buffer (NVLink stores) and is counted on the owner's signal of its row block
  (`kit.signal_add`, release); this rank's own chunk comes last: each tile waits for the
  peers' counts of its row block, adds their partials and stores `out`. Receive buffers
  alternate between two halves by the call's parity, so no call waits for the previous one.

Chunks must be whole row blocks (m % BM == 0). Call numbers (epochs) only grow, so no signal
is ever reset.
"""

from __future__ import annotations

import torch
from matmul import load_stage, refill, store_tile, tile_origin

import kitjit as kit

# signal-pad words: torch's handle.barrier(channel) uses channel * world_size + rank
SIG_BASE = 256                     # the reduce-scatter's row-block counters
GATE_BASE = 128                    # all-gather: word GATE_BASE + q: rank q's rows arrived
PROBE = 96                         # word PROBE + q: rank q's stream write reached this pad


@kit.jit
def gemm_tiles(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
               STAGES: kit.constexpr, GROUP: kit.constexpr, ROT, GATE=None, CHUNK=1, OWN=0,
               EPOCH=0, OUT=None, RECV=None, SIGS=None, WS: kit.constexpr = 1,
               SIG_BASE: kit.constexpr = 0, A_OWN=None, PEER=None):
    """matmul.py's persistent mainloop over tiles in rotated row order; the epilogue stores C
    (all-gather) or sends / reduces (reduce-scatter: OUT given)."""
    a = kit.shared((STAGES, BM, BK), A.dtype.element_ty)
    b = kit.shared((STAGES, BK, BN), B.dtype.element_ty)
    # the all-gather's loads of A sit in an `if` (own shard or gathered rows): a run of TMA
    # loads on its own, so a stage completes on two arrivals (A's, then B's)
    ready = kit.mbarriers(STAGES, arrivals=1 if GATE is None else 2)
    n_k = kit.cdiv(K, BK)
    kit.assume(n_k > 0)
    n_tiles = kit.cdiv(M, BM) * kit.cdiv(N, BN)
    step = kit.num_programs(0)
    first = kit.program_id(0)
    for s in kit.static_range(STAGES - 1):
        t = first + s // n_k * step
        if t < n_tiles:
            m0, n0, k0 = tile_origin(t, M, N, n_k, BM, BN, BK, GROUP, 1, ROT)
            load_stage(a, b, ready, A, B, m0, n0, k0, s % n_k, s, BK, STAGES, False, None,
                       None, GATE, CHUNK, OWN, EPOCH, A_OWN)
    it = 0
    sent = -1          # reduce-scatter: the last tile sent, not counted yet (owner, row block)
    for tile in range(first, n_tiles, step):
        m0, n0, k0 = tile_origin(tile, M, N, n_k, BM, BN, BK, GROUP, 1, ROT)
        m1, n1, k1 = tile_origin(tile + step, M, N, n_k, BM, BN, BK, GROUP, 1, ROT)
        acc = kit.zeros((BM, BN), kit.float32)
        for kk in range(n_k):
            kit.mbarrier_wait(ready[it % STAGES], it // STAGES % 2)
            acc = kit.mma(a[it % STAGES], b[it % STAGES], acc, pending=1)
            refill(a, b, ready, A, B, tile, step, n_tiles, kk, it, m0, n0, k0, m1, n1, k1, M,
                   N, n_k, BM, BN, BK, STAGES, GROUP, False, 1, None, None, GATE, CHUNK, OWN,
                   EPOCH, ROT, A_OWN)
            it += 1
        if OUT is None:
            store_tile(C, acc, m0, n0, M, N, BM, BN, 2)   # TMA, in two column halves
        else:
            sent = send_or_reduce(OUT, RECV, SIGS, PEER, acc, m0, n0, N, CHUNK, OWN, EPOCH,
                                  sent, WS, BM, BN, SIG_BASE)
    if OUT is not None:
        if sent >= 0:
            count_sent(SIGS, sent, WS, SIG_BASE)


@kit.jit
def count_sent(Sigs, sent, WS: kit.constexpr, SIG_BASE: kit.constexpr):
    """Count a sent tile on its owner's row-block word (red.release.sys; after TMA stores,
    their completion first): one tile late, so its stores drained under the next mainloop
    instead of holding this program at the release."""
    owner = kit.load(Sigs + sent % WS).to(kit.pointer_type(kit.uint32))
    kit.signal_add(owner + SIG_BASE + sent // WS, 1)


@kit.jit
def send_or_reduce(Out, Recv, Sigs, Peer, acc, m0, n0, N, m, rank, epoch, sent,
                   WS: kit.constexpr, BM: kit.constexpr, BN: kit.constexpr,
                   SIG_BASE: kit.constexpr):
    """A peer's tile: into slot `rank` of the owner's receive buffer (with two ranks through
    the TMA into `Peer`, the peer's half viewed as [2m, N]), counted on the owner's signal of
    its row block by the next epilogue. An own tile: wait for every peer's tiles of the row
    block, add their partials, store. Returns what is left to count (-1: nothing)."""
    if sent >= 0:
        count_sent(Sigs, sent, WS, SIG_BASE)
    chunk = m0 // m
    r0 = m0 - chunk * m                                  # the tile's rows inside its chunk
    rows = r0 + kit.arange(0, BM)
    cols = n0 + kit.arange(0, BN)
    ok = (rows[:, None] < m) & (cols[None, :] < N)
    dt = Out.dtype.element_ty
    if chunk != rank:
        if Peer is None:
            owner = kit.load(Recv + chunk).to(kit.pointer_type(dt))
            kit.store(owner + (rank * m + rows)[:, None] * N + cols[None, :], acc.to(dt),
                      mask=ok)
        else:                  # bulk stores over NVLink, drained while the next tile runs
            store_tile(Peer, acc, rank * m + r0, n0, 2 * m, N, BM, BN, 2)
        sent = (r0 // BM) * WS + chunk
    else:
        sent = -1
        sig = kit.load(Sigs + rank).to(kit.pointer_type(kit.uint32)) + SIG_BASE + r0 // BM
        kit.signal_wait(sig, epoch * (WS - 1) * kit.cdiv(N, BN), cmp="ge")
        mine = kit.load(Recv + rank).to(kit.pointer_type(dt))
        # in column quarters (a relabeling of the accumulator's registers): a whole tile of
        # partials and their addresses beside the accumulator would spill
        halves = kit.split(kit.permute(kit.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1)))
        for h in kit.static_range(2):
            quarters = kit.split(kit.permute(kit.reshape(halves[h], (BM, 2, BN // 4)),
                                             (0, 2, 1)))
            for q in kit.static_range(2):
                part = quarters[q]
                qc = n0 + (2 * h + q) * (BN // 4) + kit.arange(0, BN // 4)
                qok = (rows[:, None] < m) & (qc[None, :] < N)
                for s in kit.static_range(WS):
                    if s != rank:
                        part += kit.load(mine + (s * m + rows)[:, None] * N + qc[None, :],
                                         mask=qok).to(kit.float32)
                kit.store(Out + rows[:, None] * N + qc[None, :], part.to(dt), mask=qok)
    return sent


@kit.jit(do_not_specialize=("rank", "epoch"))
def allgather_matmul_kernel(A_own, A, B, C, Sigs, rank, epoch, M, N, K, m,
                            BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
                            STAGES: kit.constexpr, GROUP: kit.constexpr,
                            GATE_BASE: kit.constexpr):
    # A_own [m, K]: this rank's rows; A [M, K]: the peers' rows, as their gates reach epoch
    gate = kit.load(Sigs + rank).to(kit.pointer_type(kit.uint32)) + GATE_BASE
    gemm_tiles(A, B, C, M, N, K, BM, BN, BK, STAGES, GROUP, rank * m, gate, m, rank, epoch,
               A_OWN=A_own)


@kit.jit(do_not_specialize=("rank", "epoch"))
def matmul_reducescatter_kernel(A, B, Out, Recv, Sigs, Peer, rank, epoch, M, N, K, m,
                                WS: kit.constexpr, BM: kit.constexpr, BN: kit.constexpr,
                                BK: kit.constexpr, STAGES: kit.constexpr, GROUP: kit.constexpr,
                                SIG_BASE: kit.constexpr):
    # the next rank's chunk first, this rank's last (its peers' partials arrive meanwhile);
    # Peer (two ranks): the peer's receive half as a [2m, N] tensor, for TMA stores
    gemm_tiles(A, B, Out, M, N, K, BM, BN, BK, STAGES, GROUP, (rank + 1) % WS * m, None, m,
               rank, epoch, Out, Recv, Sigs, WS, SIG_BASE, PEER=Peer)


CONFIG = dict(BM=128, BN=256, BK=64, STAGES=4, GROUP=8, num_warps=8)


def _sms(device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _check_chunks(m: int, BM: int, what: str) -> None:
    if m % BM:
        raise ValueError(f"{what}: rows per rank ({m}) must be a multiple of BM ({BM}) on "
                         "this path; use the level-1 kernel of the example for other sizes")


def _check_pad(handle, words: int, what: str) -> None:
    """The signal words a kernel uses must lie inside torch's signal pad."""
    import torch.distributed._symmetric_memory as symm_mem

    size = getattr(handle, "signal_pad_size", None)
    if size is None and hasattr(symm_mem, "get_signal_pad_size"):
        size = symm_mem.get_signal_pad_size()
    if size is not None and words * 4 > size:
        raise ValueError(f"{what} needs {words} signal words ({words * 4} bytes) and torch's "
                         f"signal pad has {size} bytes: call torch.distributed."
                         "_symmetric_memory.set_signal_pad_size(...) before allocating")


def _check_operands(what: str, dtype, *tensors) -> None:
    for t in tensors:
        if t.dtype != dtype or t.device.type != "cuda":
            raise ValueError(f"{what}: operands must be {dtype} CUDA tensors like the "
                             f"buffers, got {t.dtype} on {t.device}")


def _world_size(group: str) -> int:
    import torch.distributed.distributed_c10d as c10d

    return c10d._resolve_process_group(group).size()


class AllGatherMatmul:
    """C = all_gather(a) @ b on every rank of `group`, for shards a [m, K]; keeps the
    symmetric buffers and the call count from call to call."""

    def __init__(self, group: str, m: int, K: int, dtype=torch.bfloat16, **config):
        import torch.distributed._symmetric_memory as symm_mem

        self.cfg = dict(CONFIG, **config)
        _check_chunks(m, self.cfg["BM"], "allgather_matmul")
        self.dev = torch.device("cuda", torch.cuda.current_device())
        self.sms = _sms(self.dev)
        self.m, self.K, self.ws = m, K, _world_size(group)
        # the gathered rows, in two halves by the call's parity
        self.bufs = [symm_mem.empty((self.ws * m, K), dtype=dtype, device=self.dev)
                     for _ in range(2)]
        self.handles = [symm_mem.rendezvous(b, group) for b in self.bufs]
        self.rank, self.dtype = self.handles[0].rank, dtype
        _check_pad(self.handles[0], GATE_BASE + self.ws, "allgather_matmul")
        if self.ws > GATE_BASE - PROBE:
            raise ValueError(f"allgather_matmul: {self.ws} ranks; this path's signal words "
                             f"take at most {GATE_BASE - PROBE}")
        self.pads = list(self.handles[0].signal_pad_ptrs)
        # per half, each peer's rows for this rank's shard: where the copy engine pushes it
        mine = slice(self.rank * m, (self.rank + 1) * m)
        self.peer_rows = [{q: h.get_buffer(q, (self.ws * m, K), dtype)[mine]
                           for q in range(self.ws) if q != self.rank} for h in self.handles]
        self.sig_ptrs = torch.tensor(self.pads, dtype=torch.int64, device=self.dev)
        self.side = torch.cuda.Stream(self.dev, priority=-1)
        self.epoch = 0
        self._probe_peer_writes()

    def _probe_peer_writes(self) -> None:
        """The gates are stream writes into the peers' signal pads: fail here, clearly, if
        this driver cannot write peer memory from a stream (a missing gate would leave the
        peer's GEMM waiting)."""
        from kitjit.runtime.driver import DriverError, stream_write_value32

        try:
            for q in range(self.ws):
                if q != self.rank:
                    stream_write_value32(self.side.cuda_stream,
                                         self.pads[q] + 4 * (PROBE + self.rank), 1)
            self.side.synchronize()
        except (DriverError, RuntimeError) as e:
            raise RuntimeError(f"allgather_matmul: a stream write into a peer's signal pad "
                               f"failed ({e}); this path needs cuStreamWriteValue32 on peer "
                               "memory: use the level-1 kernel of examples/allgather_matmul.py"
                               ) from e

    def __call__(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        from kitjit.runtime.driver import stream_write_value32

        m, K, ws, rank = self.m, self.K, self.ws, self.rank
        if tuple(a.shape) != (m, K) or b.dim() != 2 or b.shape[0] != K:
            raise ValueError(f"allgather_matmul: a {tuple(a.shape)} @ b {tuple(b.shape)}: "
                             f"expected a [{m}, {K}] and b [{K}, N]")
        _check_operands("allgather_matmul", self.dtype, a, b)
        b = b.contiguous()
        self.epoch += 1
        e, par = self.epoch, self.epoch % 2
        main, side = torch.cuda.current_stream(self.dev), self.side
        buf, a = self.bufs[par], a.contiguous()
        if ws > 1:
            side.wait_stream(main)    # (after this rank's GEMM e-1: see the docstring)
        with torch.cuda.stream(side):
            for j in range(1, ws):
                q = (rank + j) % ws
                self.peer_rows[par][q].copy_(a)                 # copy engine, over NVLink
                stream_write_value32(side.cuda_stream, self.pads[q] + 4 * (GATE_BASE + rank), e)
        N, cfg = b.shape[1], self.cfg
        c = torch.empty(ws * m, N, dtype=a.dtype, device=self.dev)
        tiles = kit.cdiv(ws * m, cfg["BM"]) * kit.cdiv(N, cfg["BN"])
        allgather_matmul_kernel[(min(tiles, self.sms),)](
            a, buf, b, c, self.sig_ptrs, rank, e, ws * m, N, K, m, GATE_BASE=GATE_BASE, **cfg)
        if ws > 1:
            main.wait_stream(side)
        return c


class MatmulReduceScatter:
    """out = rows [rank*m, (rank+1)*m) of sum over ranks of a @ b, for a [M, K_r],
    b [K_r, N] on every rank of `group`; keeps the receive buffers and the call count."""

    def __init__(self, group: str, m: int, N: int, dtype=torch.bfloat16, **config):
        import torch.distributed._symmetric_memory as symm_mem

        self.cfg = dict(CONFIG, **config)
        _check_chunks(m, self.cfg["BM"], "matmul_reducescatter")
        self.dev = torch.device("cuda", torch.cuda.current_device())
        self.sms = _sms(self.dev)
        self.m, self.N, self.ws = m, N, _world_size(group)
        # [parity, sender, m, N]: slot s of a half holds rank s's partial of my rows
        self.recv = symm_mem.empty((2, self.ws, m, N), dtype=dtype, device=self.dev)
        h = symm_mem.rendezvous(self.recv, group)
        half = self.ws * m * N * self.recv.element_size()
        self.recv_ptrs = [torch.tensor([p + i * half for p in h.buffer_ptrs],
                                       dtype=torch.int64, device=self.dev) for i in range(2)]
        self.sig_ptrs = torch.tensor(list(h.signal_pad_ptrs), dtype=torch.int64,
                                     device=self.dev)
        self.handle, self.rank, self.epoch, self.dtype = h, h.rank, 0, dtype
        _check_pad(h, SIG_BASE + m // self.cfg["BM"], "matmul_reducescatter")
        # two ranks: the peer's halves as tensors, so the kernel's TMA stores reach them
        self.peer = [None, None]
        if self.ws == 2:
            whole = h.get_buffer(1 - self.rank, (2, 2 * m, N), dtype)
            self.peer = [whole[0], whole[1]]

    def __call__(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        m, N, ws, cfg = self.m, self.N, self.ws, self.cfg
        M, K = a.shape
        if M != ws * m or tuple(b.shape) != (K, N):
            raise ValueError(f"matmul_reducescatter: a {tuple(a.shape)} @ b {tuple(b.shape)}:"
                             f" expected a [{ws * m}, K] and b [K, {N}]")
        _check_operands("matmul_reducescatter", self.dtype, a, b)
        a, b = a.contiguous(), b.contiguous()
        self.epoch += 1
        out = torch.empty(m, N, dtype=a.dtype, device=self.dev)
        tiles = kit.cdiv(M, cfg["BM"]) * kit.cdiv(N, cfg["BN"])
        matmul_reducescatter_kernel[(min(tiles, self.sms),)](
            a, b, out, self.recv_ptrs[self.epoch % 2], self.sig_ptrs,
            self.peer[self.epoch % 2], self.rank, self.epoch, M, N, K, m, WS=ws,
            SIG_BASE=SIG_BASE, **cfg)
        return out


# ------------------------------------------------------------- on the CPU: simulated ranks
@kit.jit
def push_rows(Bufs, Sigs, rank, epoch, m, K, BLOCK: kit.constexpr, GATE_BASE: kit.constexpr):
    """Stands in for the copy engines in the simulated world: program q pushes this rank's
    rows into rank q's buffer, then sets q's gate word for this rank."""
    q = kit.program_id(0)
    if q != rank:
        src = kit.load(Bufs + rank).to(kit.pointer_type(kit.bfloat16)) + rank * m * K
        dst = kit.load(Bufs + q).to(kit.pointer_type(kit.bfloat16)) + rank * m * K
        for i in range(0, m * K, BLOCK):
            o = i + kit.arange(0, BLOCK)
            kit.store(dst + o, kit.load(src + o, mask=o < m * K), mask=o < m * K)
        gate = kit.load(Sigs + q).to(kit.pointer_type(kit.uint32)) + GATE_BASE + rank
        kit.signal_set(gate, epoch)


SIM = dict(BM=64, BN=64, BK=64, STAGES=3, GROUP=2, num_warps=4)


def simulated(ws: int = 2, m: int = 64, K: int = 96, N: int = 80) -> float:
    """Both kernels, ranks simulated in the interpreter (the GEMMs launched before the rows
    they need are copied), against float64 torch; returns the largest relative error."""
    from _dist_common import check

    world = kit.distributed.simulate(ws)
    M = ws * m
    # all-gather + GEMM
    bufs = world.empty((M, K), torch.bfloat16)
    hs = world.rendezvous(bufs)
    a = [torch.randn(m, K).to(torch.bfloat16) for _ in range(ws)]
    b = [torch.randn(K, N).to(torch.bfloat16) for _ in range(ws)]
    c = [torch.full((M, N), float("nan"), dtype=torch.bfloat16) for _ in range(ws)]
    for r in range(ws):
        bufs[r][r * m:(r + 1) * m] = a[r]

    def ag_step(r):
        sigs = hs[r].signal_pad_ptrs_dev
        allgather_matmul_kernel[(3,)](a[r], bufs[r], b[r], c[r], sigs, r, 1, M, N, K, m,
                                      GATE_BASE=GATE_BASE, **SIM)
        push_rows[(ws,)](hs[r].buffer_ptrs_dev, sigs, r, 1, m, K, BLOCK=1024,
                         GATE_BASE=GATE_BASE)
    world.run(ag_step)
    full = torch.cat(a).double()
    err = max(check(c[r], full @ b[r].double(), f"all-gather rank {r}") for r in range(ws))
    # GEMM + reduce-scatter (even calls: the first half of the receive buffers)
    recv = world.empty((2, ws, m, N), torch.bfloat16)
    hs = world.rendezvous(recv)
    a = [torch.randn(M, K).to(torch.bfloat16) for _ in range(ws)]
    out = [torch.full((m, N), float("nan"), dtype=torch.bfloat16) for _ in range(ws)]

    total = sum(a[s].double() @ b[s].double() for s in range(ws))
    for epoch, tma in ((2, False), (4, ws == 2)):   # stores from registers, or the TMA's

        def rs_step(r):
            peer = recv[1 - r][0].view(2 * m, N) if tma else None
            matmul_reducescatter_kernel[(3,)](
                a[r], b[r], out[r], hs[r].buffer_ptrs_dev, hs[r].signal_pad_ptrs_dev, peer,
                r, epoch, M, N, K, m, WS=ws, SIG_BASE=SIG_BASE, **SIM)
        for h in hs[:1]:      # as if the call before had counted already
            for p in h.signal_pads:
                p[SIG_BASE:SIG_BASE + m // SIM["BM"]] = (epoch - 1) * (ws - 1) * \
                    kit.cdiv(N, SIM["BN"])
        for r in range(ws):
            recv[r].fill_(float("nan"))
            out[r].fill_(float("nan"))
        world.run(rs_step)
        err = max(err, *(check(out[r], total[r * m:(r + 1) * m],
                               f"reduce-scatter rank {r}{' (TMA)' if tma else ''}")
                         for r in range(ws)))
    return err


def main() -> None:
    """The simulated check (on GPUs, allgather_matmul.py and matmul_reducescatter.py run
    these kernels under torchrun against NCCL)."""
    print(f"matmul_comm: all-gather + GEMM and GEMM + reduce-scatter, 2 ranks simulated in "
          f"the interpreter: rel err {simulated():.2e}")


if __name__ == "__main__":
    main()

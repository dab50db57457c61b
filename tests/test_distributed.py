"""Kernels that communicate: the signal family (kit.signal_wait / signal_set / signal_add),
the interpreter's schedule of programs and simulated ranks that wait on each other, the two
distributed examples, and the sm_90a code of the signal ops.

GPU tests: `gpu` ones need one GPU (signals between the programs of one grid); `multigpu`
ones launch the examples under torchrun on two GPUs and skip with fewer.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import torch
from kitjit.frontend.errors import CompileError

import kitjit as kit
from kitjit.interpreter import DeadlockError

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


@kit.jit
def exchange_kernel(Bufs, Sigs, Out, rank, n, WS: kit.constexpr, BLOCK: kit.constexpr,
                    WAIT: kit.constexpr):
    """Every rank pushes its slot to every peer, counts on the peer's signal, and copies all
    slots of its own buffer to Out once each peer's programs have all counted."""
    pid = kit.program_id(0)
    offs = pid * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    mine = kit.load(Bufs + rank).to(kit.pointer_type(kit.float32))
    x = kit.load(mine + rank * n + offs, mask=mask)
    for r in kit.static_range(WS):
        if r != rank:
            peer = kit.load(Bufs + r).to(kit.pointer_type(kit.float32))
            kit.store(peer + rank * n + offs, x, mask=mask)
            kit.signal_add(kit.load(Sigs + r).to(kit.pointer_type(kit.uint32)) + rank, 1)
    my_sigs = kit.load(Sigs + rank).to(kit.pointer_type(kit.uint32))
    for r in kit.static_range(WS):
        if WAIT and r != rank:
            kit.signal_wait(my_sigs + r, kit.num_programs(0), cmp="ge")
        kit.store(Out + r * n + offs, kit.load(mine + r * n + offs, mask=mask), mask=mask)


def _exchange(ws: int, n: int, block: int, wait: bool = True):
    world = kit.distributed.simulate(ws)
    bufs = world.empty((ws * n,), torch.float32)
    hs = world.rendezvous(bufs)
    src = [torch.randn(n) for _ in range(ws)]
    for r in range(ws):
        bufs[r][r * n:(r + 1) * n] = src[r]
    outs = [torch.full((ws * n,), float("nan")) for _ in range(ws)]
    world.run(lambda r: exchange_kernel[(kit.cdiv(n, block),)](
        hs[r].buffer_ptrs_dev, hs[r].signal_pad_ptrs_dev, outs[r], r, n, WS=ws, BLOCK=block,
        WAIT=wait))
    return outs, torch.cat(src)


@pytest.mark.parametrize("ws,n", [(2, 100), (3, 64)])
def test_simulated_ranks_exchange(ws, n):
    outs, ref = _exchange(ws, n, 32)
    for r in range(ws):
        assert torch.equal(outs[r], ref), r


def test_a_reader_that_does_not_wait_sees_the_poison():
    """The planted race: without the wait, rank 0 copies rank 1's slot before rank 1 ran."""
    outs, ref = _exchange(2, 40, 32, wait=False)
    assert outs[0][40:].isnan().all()


@kit.jit
def wait_for_nobody(Sigs, rank):
    mine = kit.load(Sigs + rank).to(kit.pointer_type(kit.uint32))
    kit.signal_wait(mine + 3, 2)                       # nobody sets 2
    peer = kit.load(Sigs + 1 - rank).to(kit.pointer_type(kit.uint32))
    kit.signal_set(peer + 3, 1)


def test_a_planted_deadlock_is_reported_not_hung():
    import signal

    def hung(*_):
        raise TimeoutError("the simulated world hung instead of reporting the deadlock")

    world = kit.distributed.simulate(2)
    hs = world.rendezvous(world.empty((4,), torch.float32))
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        with pytest.raises(DeadlockError) as e:
            world.run(lambda r: wait_for_nobody[(2,)](hs[r].signal_pad_ptrs_dev, r))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    msg = str(e.value)
    assert "rank 1 program (1, 0, 0)" in msg and "rank 0's signal pad (byte 12)" in msg
    assert "to be eq 2; it holds 0" in msg and "kit.signal_wait(mine + 3, 2)" in msg


@kit.jit
def chain_kernel(Sig, Out, n):
    """Program p waits for program p + 1: launch order runs them the wrong way round."""
    p = kit.program_id(0)
    if p < n - 1:
        kit.signal_wait(Sig + p + 1, 1, scope="gpu")
    kit.store(Out + p, kit.load(Out + p + 1) + 1)
    kit.signal_set(Sig + p, 1, scope="gpu")


def _chain(device: str):
    n = 6
    sig = torch.zeros(n, dtype=torch.int32, device=device)
    out = torch.zeros(n + 1, dtype=torch.int32, device=device)
    chain_kernel[(n,)](sig, out, n)
    assert out.tolist() == list(range(n, -1, -1))
    assert sig.tolist() == [1] * n


def test_programs_of_one_grid_wait_for_each_other():
    _chain("cpu")


@kit.jit
def roles_kernel(Sig, Out):
    """A consumer warpgroup waits for the producer warpgroup's signal."""
    if kit.warpgroup_id() == 0:
        kit.signal_wait(Sig, 1, scope="gpu")
        kit.store(Out, kit.load(Out + 1) + 1)
    else:
        kit.store(Out + 1, 41)
        kit.signal_set(Sig, 1, scope="gpu")


def test_signals_between_warpgroup_roles():
    sig = torch.zeros(1, dtype=torch.int32)
    out = torch.zeros(2, dtype=torch.int32)
    roles_kernel[(1,)](sig, out, num_warps=8)
    assert out.tolist() == [42, 41] and sig.item() == 1


@pytest.mark.parametrize("ws", [2, 3])
def test_allgather_matmul_example(ws):
    import allgather_matmul

    allgather_matmul.simulated(ws=ws, m=24 if ws == 3 else 40, K=40, N=40)


@pytest.mark.parametrize("ws", [2, 3])
def test_matmul_reducescatter_example(ws):
    import matmul_reducescatter

    matmul_reducescatter.simulated(ws=ws, m=24 if ws == 3 else 40, K=24, N=40)


@kit.jit
def through_int_address(ptrs_addr, Out):
    """Triton's idiom: the pointer table as an int address (handle.buffer_ptrs_dev)."""
    table = ptrs_addr.to(kit.pointer_type(kit.int64))
    p = kit.load(table + 1).to(kit.pointer_type(kit.float32))
    kit.store(Out + kit.arange(0, 4), kit.load(p + kit.arange(0, 4)))


def test_a_pointer_table_passed_as_an_int_address():
    x = torch.randn(4)
    table = torch.tensor([0, x.data_ptr()], dtype=torch.int64)
    out = torch.full((4,), float("nan"))
    through_int_address[(1,)](table.data_ptr(), out)
    assert torch.equal(out, x)


# ---------------------------------------------------------------------------- errors
@kit.jit
def _bad_tile(Sig, BLOCK: kit.constexpr):
    kit.signal_wait(Sig + kit.arange(0, BLOCK), 1)


@kit.jit
def _bad_dtype(X):
    kit.signal_set(X, 1.0)


@kit.jit
def _bad_sem(Sig):
    kit.signal_set(Sig, 1, sem="acquire")


@pytest.mark.parametrize("kern,args,msg", [
    (_bad_tile, dict(BLOCK=4), "kit.signal_wait on a tile of pointers is not supported yet"),
    (_bad_dtype, {}, "does not support signals of fp32"),
    (_bad_sem, {}, "kit.signal_set: sem must be one of 'release', 'relaxed'"),
])
def test_signal_errors_point_at_the_line(kern, args, msg):
    x = torch.zeros(4, dtype=torch.float32 if kern is _bad_dtype else torch.int32)
    with pytest.raises(CompileError, match=msg) as e:
        kern[(1,)](x, **args)
    assert "test_distributed.py" in str(e.value)


# ---------------------------------------------------------------------------- SASS
SIGNALS = '''
import kitjit as kit

@kit.jit
def signals(Sig, X, Y, SCOPE: kit.constexpr):
    kit.signal_wait(Sig + 1, 1, scope=SCOPE)
    offs = kit.arange(0, 128)
    kit.store(Y + offs, kit.load(X + offs))
    kit.signal_set(Sig + 2, 1, scope=SCOPE)
    kit.signal_add(Sig + 3, 1, scope=SCOPE)


@kit.jit
def roles(Sig, Out):
    if kit.warpgroup_id() == 0:
        kit.signal_wait(Sig, 1, scope="gpu")
        kit.store(Out, kit.load(Out + 1) + 1)
    else:
        kit.store(Out + 1, 41)
        kit.signal_set(Sig, 1, scope="gpu")
'''


@pytest.mark.parametrize("scope", ["sys", "gpu"])
def test_signal_ops_sass(tmp_path, scope):
    from kitjit.tools import disassemble, find_tool

    if find_tool("cuobjdump") is None or find_tool("nvdisasm") is None:
        pytest.skip("cuobjdump/nvdisasm not found")
    path = tmp_path / "signals.py"
    path.write_text(SIGNALS)
    ck = kit.compile_aot(str(path), "signals", ["*u32", "*fp32", "*fp32"], {"SCOPE": scope})
    ptx = ck.asm["ptx"]
    assert f"ld.acquire.{scope}.global.b32" in ptx
    assert f"st.release.{scope}.global.b32" in ptx
    assert f"red.release.{scope}.global.add.u32" in ptx
    sass = disassemble(ck.asm["cubin"])
    s = scope.upper()
    assert f"LDG.E.STRONG.{s}" in sass          # the spin's acquire load
    assert f"STG.E.STRONG.{s}" in sass          # the release store
    assert f"REDG.E.ADD.STRONG.{s}" in sass     # the release add
    assert f"MEMBAR.ALL.{s}" in sass or f"MEMBAR.SC.{s}" in sass  # release's fence
    assert "BAR.SYNC" in sass and "ATOMG" not in sass  # (red: no result comes back)
    assert ck.metadata["spills"] == 0 and "STL" not in sass


def test_signal_ops_in_roles_use_the_roles_barrier(tmp_path):
    from kitjit.tools import find_tool

    if find_tool("cuobjdump") is None or find_tool("nvdisasm") is None:
        pytest.skip("cuobjdump/nvdisasm not found")
    path = tmp_path / "signals.py"
    path.write_text(SIGNALS)
    ck = kit.compile_aot(str(path), "roles", ["*i32", "*i32"], {}, num_warps=8)
    ptx = ck.asm["ptx"]
    assert "ld.acquire.gpu.global.b32" in ptx and "st.release.gpu.global.b32" in ptx
    assert "bar.sync 0;" not in ptx and "bar.sync 0," not in ptx  # only the roles' barriers


TWO_WAITS = '''
import kitjit as kit

@kit.jit
def two_waits(Sig, X, Y, n, WS: kit.constexpr):
    if kit.program_id(0) >= n:
        for s in kit.static_range(WS):
            kit.signal_wait(Sig + s, n, cmp="ge")
    offs = kit.arange(0, 128)
    kit.store(Y + offs, kit.load(X + offs))
'''


def test_two_signal_waits_keep_their_barriers_apart(tmp_path):
    """Two waits in a row are `if (tid == 0) spin; bar.sync` twice. Unless the barriers are
    `convergent` calls, LLVM merges the two thread-0 branches and puts a copy of the barrier
    on each side: thread 0 and the rest of its warp then wait at different bar.sync
    instructions, which hung the reduce-scatter example on two H200s."""
    path = tmp_path / "two_waits.py"
    path.write_text(TWO_WAITS)
    ck = kit.compile_aot(str(path), "two_waits", ["*u32", "*fp32", "*fp32", "i32"], {"WS": 2})
    assert ck.asm["ptx"].count("bar.sync 0;") == 2, ck.asm["ptx"]
    assert "convergent" in ck.asm["llir"]


STORE_THEN_SIGNAL = '''
import kitjit as kit

@kit.jit
def store_then_signal(C, Sig):
    kit.tma_store(C, (0, 0), kit.full((64, 64), 1.0, kit.bfloat16))
    kit.signal_set(Sig, 1)
'''


def test_a_signal_after_tma_stores_waits_for_them(tmp_path):
    """A release orders the generic proxy's writes; a TMA store may still be in flight, so
    the leader (which issued it) waits for its bulk groups and fences the async proxy."""
    path = tmp_path / "sts.py"
    path.write_text(STORE_THEN_SIGNAL)
    ptx = kit.compile_aot(str(path), "store_then_signal", ["*bf16", "*u32"], {}).asm["ptx"]
    wait = ptx.index("cp.async.bulk.wait_group 0;")
    assert ptx.index("cp.async.bulk.tensor") < wait < ptx.index("fence.proxy.async.global;") \
        < ptx.index("st.release.sys.global")


@pytest.mark.parametrize("example", ["allgather_matmul", "matmul_reducescatter"])
def test_examples_compile_for_sm90a(example):
    from kitjit.tools import disassemble, find_tool

    if find_tool("cuobjdump") is None or find_tool("nvdisasm") is None:
        pytest.skip("cuobjdump/nvdisasm not found")
    if example == "allgather_matmul":
        sig = ["*i64", "*i64", "*bf16", "*bf16"] + ["i32"] * 5
        consts = dict(WS=2, BM=64, BN=64, BK=32, COPY_ROWS=32, SIG_BASE=256)
    else:
        sig = ["*bf16", "*bf16", "*i64", "*i64", "*bf16"] + ["i32"] * 5
        consts = dict(WS=2, BM=64, BN=64, BK=32, RM=32, RN=64, SIG_BASE=256)
    ck = kit.compile_aot(str(EXAMPLES / f"{example}.py"), f"{example}_kernel", sig, consts)
    sass = disassemble(ck.asm["cubin"])
    assert "LDG.E.STRONG.SYS" in sass and "REDG.E.ADD.STRONG.SYS" in sass and "HMMA" in sass
    assert ck.metadata["spills"] == 0


# ---------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_programs_of_one_grid_wait_for_each_other_gpu():
    _chain("cuda")


def _torchrun(example: str, n: int):
    env = dict(os.environ, **kit.distributed.NO_MULTICAST)
    env.pop("KITJIT_INTERPRET", None)
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={n}",
                        str(EXAMPLES / example)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


@pytest.mark.multigpu
@pytest.mark.parametrize("example", ["allgather_matmul.py", "matmul_reducescatter.py"])
def test_examples_on_two_gpus(example):
    out = _torchrun(example, 2)
    hopper = torch.cuda.get_device_capability() == (9, 0)   # + matmul_comm.py's kernel
    assert out.count("matches") == (4 if hopper else 2), out


@pytest.mark.gpu
@pytest.mark.parametrize("example", ["allgather_matmul", "matmul_reducescatter"])
def test_examples_as_two_ranks_on_one_gpu(example):
    """Two 'ranks' as two streams of one GPU: each rank's buffer and signal pad are plain
    device tensors, the pointer tables hold both; the kernels run concurrently (small grids
    fit on the SMs together), so the signals order real traffic between them (through this
    GPU's memory, not NVLink). A first launch per rank with epoch 0 (no wait holds) compiles
    and loads both before any program spins: a module load may wait for the GPU to idle."""
    from types import SimpleNamespace

    import allgather_matmul as ag
    import matmul_reducescatter as rs

    ws, m, K, N = 2, 200, 256, 192
    dev = "cuda"
    pads = [torch.zeros(1024, dtype=torch.int32, device=dev) for _ in range(ws)]
    sigs = torch.tensor([p.data_ptr() for p in pads], dtype=torch.int64, device=dev)
    streams = [torch.cuda.Stream() for _ in range(ws)]
    hs = [SimpleNamespace(rank=r, world_size=ws) for r in range(ws)]
    if example == "allgather_matmul":
        bufs = [torch.full((ws * m, K), float("nan"), dtype=torch.bfloat16, device=dev)
                for _ in range(ws)]
        a = [torch.randn(m, K, dtype=torch.bfloat16, device=dev) for _ in range(ws)]
        b = [torch.randn(K, N, dtype=torch.bfloat16, device=dev) for _ in range(ws)]
        c = [torch.full((ws * m, N), float("nan"), dtype=torch.bfloat16, device=dev)
             for _ in range(ws)]
        for r in range(ws):
            bufs[r][r * m:(r + 1) * m] = a[r]
        ptrs = torch.tensor([t.data_ptr() for t in bufs], dtype=torch.int64, device=dev)
        for r in range(ws):  # compile and load both first (epoch 0: no wait holds anyone)
            ag.launch(hs[r], ptrs, sigs, b[r], c[r], m, epoch=0)
            torch.cuda.synchronize()
        for r in range(ws):  # the peers' slots and the outputs poisoned again
            keep = bufs[r][r * m:(r + 1) * m].clone()
            bufs[r].fill_(float("nan"))
            bufs[r][r * m:(r + 1) * m] = keep
            c[r].fill_(float("nan"))
        torch.cuda.synchronize()
        for r in range(ws):
            with torch.cuda.stream(streams[r]):
                ag.launch(hs[r], ptrs, sigs, b[r], c[r], m, epoch=2)
        torch.cuda.synchronize()
        full = torch.cat(a).double()
        for r in range(ws):
            ag.check(c[r], full @ b[r].double(), f"rank {r}")
    else:
        bufs = [torch.full((ws, m, N), float("nan"), dtype=torch.float32, device=dev)
                for _ in range(ws)]
        a = [torch.randn(ws * m, K, dtype=torch.bfloat16, device=dev) for _ in range(ws)]
        b = [torch.randn(K, N, dtype=torch.bfloat16, device=dev) for _ in range(ws)]
        out = [torch.full((m, N), float("nan"), dtype=torch.bfloat16, device=dev)
               for _ in range(ws)]
        ptrs = torch.tensor([t.data_ptr() for t in bufs], dtype=torch.int64, device=dev)
        warm_then_together(
            ws, lambda r, e: rs.launch(hs[r], ptrs, sigs, a[r], b[r], out[r], epoch=e),
            bufs + out, streams)
        full = sum(a[s].double() @ b[s].double() for s in range(ws))
        for r in range(ws):
            rs.check(out[r], full[r * m:(r + 1) * m], f"rank {r}")


@pytest.mark.gpu
@pytest.mark.parametrize("example", ["allgather_matmul.py", "matmul_reducescatter.py"])
def test_examples_under_torchrun_on_one_gpu(example):
    """world_size 1 through torch's symmetric memory (allocation, rendezvous, pointers)."""
    out = _torchrun(example, 1)
    assert "matches" in out, out


# ------------------------------------------- the Hopper kernels with communication fused in
@pytest.mark.parametrize("ws", [2, 3])
def test_matmul_comm_simulated(ws):
    """examples/matmul_comm.py's two kernels, ranks in the interpreter: the GEMMs start
    before the rows they need are copied (a missing gate reads the NaN poison); three ranks
    take the reduce-scatter's path of plain stores to two peers."""
    import matmul_comm

    assert matmul_comm.simulated(ws, K=72 if ws == 3 else 96) < 2e-2


def test_matmul_comm_sass():
    from kitjit.tools import disassemble, find_tool

    if find_tool("cuobjdump") is None or find_tool("nvdisasm") is None:
        pytest.skip("cuobjdump/nvdisasm not found")
    import matmul_comm as mc

    cfg = {k: v for k, v in mc.CONFIG.items() if k != "num_warps"}
    path = str(EXAMPLES / "matmul_comm.py")
    ag = kit.compile_aot(path, "allgather_matmul_kernel", ["*bf16"] * 4 + ["*i64"] + ["i32"] * 6,
                         dict(cfg, GATE_BASE=mc.GATE_BASE), num_warps=8)
    rs = kit.compile_aot(path, "matmul_reducescatter_kernel",
                         ["*bf16"] * 3 + ["*i64"] * 2 + ["*bf16"] + ["i32"] * 6,
                         dict(cfg, WS=2, SIG_BASE=mc.SIG_BASE), num_warps=8)
    for ck, extra in ((ag, ["UTMASTG", "FENCE.VIEW.ASYNC"]),
                      (rs, ["UTMASTG", "REDG.E.ADD.STRONG.SYS"])):
        sass = disassemble(ck.asm["cubin"])
        for op in ["HGMMA", "UTMALDG", "LDG.E.STRONG.SYS", *extra]:
            assert op in sass, op
        assert ck.metadata["spills"] == 0 and "STL" not in sass


@pytest.mark.gpu
def test_matmul_comm_as_two_ranks_on_one_gpu():
    """matmul_comm.py's kernels for two 'ranks' on two streams of one GPU (small grids, so
    both fit on the SMs together): the all-gather's rows copied by torch (the copy engine)
    and gated by stream writes, the reduce-scatter's partials stored and counted between
    the two grids. A first launch with epoch 0 compiles and loads both before anyone waits."""
    import matmul_comm as mc
    from _dist_common import check

    from kitjit.runtime.driver import stream_write_value32

    ws, m, K, N = 2, 256, 328, 392       # K and N ragged against BK 64 and BN 256
    M, dev, cfg = ws * m, "cuda", mc.CONFIG
    bf = dict(dtype=torch.bfloat16, device=dev)
    streams = [torch.cuda.Stream() for _ in range(ws)]
    side = [torch.cuda.Stream() for _ in range(ws)]
    b = [torch.randn(K, N, **bf) for _ in range(ws)]
    # all-gather + GEMM: each rank pushes its rows into the other's buffer, then its gate
    a = [torch.randn(m, K, **bf) for _ in range(ws)]
    bufs = [torch.full((M, K), float("nan"), **bf) for _ in range(ws)]
    pads = [torch.zeros(1024, dtype=torch.int32, device=dev) for _ in range(ws)]
    sigs = torch.tensor([p.data_ptr() for p in pads], dtype=torch.int64, device=dev)
    c = [torch.full((M, N), float("nan"), **bf) for _ in range(ws)]

    def gemm(r, epoch):
        mc.allgather_matmul_kernel[(4,)](a[r], bufs[r], b[r], c[r], sigs, r, epoch, M, N, K, m,
                                         GATE_BASE=mc.GATE_BASE, **cfg)
    for r in range(ws):
        bufs[r][r * m:(r + 1) * m] = a[r]
        gemm(r, 0)
    torch.cuda.synchronize()
    for r in range(ws):
        c[r].fill_(float("nan"))
    torch.cuda.synchronize()
    for r in range(ws):
        with torch.cuda.stream(streams[r]):
            gemm(r, 1)
    try:
        for r in range(ws):
            q, rows = 1 - r, slice(r * m, (r + 1) * m)
            with torch.cuda.stream(side[r]):
                bufs[q][rows].copy_(bufs[r][rows])
                stream_write_value32(side[r].cuda_stream,
                                     pads[q].data_ptr() + 4 * (mc.GATE_BASE + r), 1)
    except BaseException:   # never leave a grid spinning (the process could not exit)
        with torch.cuda.stream(side[0]):
            for p in pads:
                p[mc.GATE_BASE:mc.GATE_BASE + ws].fill_(1)
        raise
    torch.cuda.synchronize()
    full = torch.cat(a).double()
    for r in range(ws):
        check(c[r], full @ b[r].double(), f"all-gather rank {r}")
    # GEMM + reduce-scatter
    a = [torch.randn(M, K, **bf) for _ in range(ws)]
    recv = [torch.full((2, ws, m, N), float("nan"), **bf) for _ in range(ws)]
    pads = [torch.zeros(1024, dtype=torch.int32, device=dev) for _ in range(ws)]
    sigs = torch.tensor([p.data_ptr() for p in pads], dtype=torch.int64, device=dev)
    recv_ptrs = torch.tensor([t.data_ptr() for t in recv], dtype=torch.int64, device=dev)
    out = [torch.full((m, N), float("nan"), **bf) for _ in range(ws)]

    def launch(r, epoch, tma):
        peer = recv[1 - r][0].view(ws * m, N) if tma else None   # the TMA stores' target
        mc.matmul_reducescatter_kernel[(4,)](a[r], b[r], out[r], recv_ptrs, sigs, peer, r,
                                             epoch, M, N, K, m, WS=ws, SIG_BASE=mc.SIG_BASE,
                                             **cfg)
    total = sum(a[s].double() @ b[s].double() for s in range(ws))
    for call, tma in enumerate((False, True)):
        warm_then_together(ws, lambda r, e, tma=tma: launch(r, e, tma), recv + out, streams,
                           first=2 * call)
        for r in range(ws):
            check(out[r], total[r * m:(r + 1) * m],
                      f"reduce-scatter rank {r}{' (TMA)' if tma else ''}")


def warm_then_together(ws, launch, poisoned, streams, first=0):
    """Two-stream runs of kernels whose ranks count on each other: `launch(r, first)` for
    each rank alone (compiles and loads it; no wait holds at that epoch, each tile counts
    once), the outputs poisoned again, then `launch(r, first + 2)` for every rank at once,
    one stream each (a module load may wait for the GPU to idle: not while they spin)."""
    for r in range(ws):
        launch(r, first)
        torch.cuda.synchronize()
    for t in poisoned:
        t.fill_(float("nan"))
    torch.cuda.synchronize()
    for r in range(ws):
        with torch.cuda.stream(streams[r]):
            launch(r, first + 2)
    torch.cuda.synchronize()

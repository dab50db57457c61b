"""Tensor descriptors made in the kernel (`kit.make_tensor_descriptor`, Triton's
`tl.make_tensor_descriptor`) on TMA (sm_90a): the CUtensorMap is built by the kernel in its
program's slot of a global scratch that the launcher allocates (`kit.set_allocator`, as
Triton's `triton.set_allocator`). Checked: the sm_90a IR run in the interpreter (ragged
sizes, poisoned outputs, a strided view), the SASS (tensormap writes, UTMALDG / UTMASTG),
the launcher's scratch and allocator protocol, and the GPU. Triton's 08-grouped-gemm and
09-persistent-matmul tutorials use these."""

from __future__ import annotations

import pytest
import torch

import kitjit as kit


@kit.jit
def dev_copy(X, Y, M, N, sxm, sym, BM: kit.constexpr, BN: kit.constexpr):
    xd = kit.make_tensor_descriptor(X, shape=[M, N], strides=[sxm, 1], block_shape=[BM, BN])
    yd = kit.make_tensor_descriptor(Y, [M, N], [sym, 1], [BM, BN])
    pm, pn = kit.program_id(0), kit.program_id(1)
    yd.store([pm * BM, pn * BN], xd.load([pm * BM, pn * BN]) * 2 + 1)


@kit.jit
def dev_matmul(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr):
    """C = A @ B^T with B given as [N, K], descriptors made in the kernel; programs walk
    tiles persistently (09-persistent-matmul's matmul_kernel_descriptor_persistent)."""
    ad = kit.make_tensor_descriptor(A, [M, K], [K, 1], [BM, BK])
    bd = kit.make_tensor_descriptor(B, [N, K], [K, 1], [BN, BK])
    cd = kit.make_tensor_descriptor(C, [M, N], [N, 1], [BM, BN])
    tiles_n = kit.cdiv(N, BN)
    for t in range(kit.program_id(0), kit.cdiv(M, BM) * tiles_n, kit.num_programs(0)):
        pm, pn = t // tiles_n, t % tiles_n
        acc = kit.zeros((BM, BN), kit.float32)
        for k in range(0, kit.cdiv(K, BK)):
            a = ad.load([pm * BM, k * BK])
            b = bd.load([pn * BN, k * BK])
            acc = kit.dot(a, b.T, acc)
        cd.store([pm * BM, pn * BN], acc.to(kit.float16))


@kit.jit
def dev_in_loop(P, Y, X, n_groups, M, N, BM: kit.constexpr, BN: kit.constexpr):
    """A descriptor made again in each iteration of a loop (08-grouped-gemm's pattern):
    group g's input starts at the address stored in P[g] (inside X, which the interpreter
    must see as an argument); one slot, rewritten."""
    for g in range(n_groups):
        x = kit.load(P + g).to(kit.pointer_type(kit.float32))
        xd = kit.make_tensor_descriptor(x, [M, N], [N, 1], [BM, BN])
        yd = kit.make_tensor_descriptor(Y + g * M * N, [M, N], [N, 1], [BM, BN])
        pm, pn = kit.program_id(0), kit.program_id(1)
        yd.store([pm * BM, pn * BN], xd.load([pm * BM, pn * BN]) + g)


def _poisoned(shape, dtype, dev):
    return torch.full(shape, float("nan"), dtype=torch.float32, device=dev).to(dtype)


def _sm90_ir_in_interpreter(jf, grid, args, consts, slots):
    """Build the kernel as sm_90a gets it (tma_desc_create, TMA copies) and run that IR in
    the interpreter, with the scratch the launcher would pass as the last argument."""
    from kitjit import interpreter

    specs = jf._specs(args)
    fn = jf.build_ir(specs, consts, 4, tma=True)
    names = [op.name for op in fn.walk()]
    assert names.count("tma_desc_create") == slots, names
    assert "tma_load" in names and "tma_store" in names
    assert fn.args[-1].name == "kit.global_scratch"
    flat = [a for a, s in zip(args, specs) if s[0] != "const"]
    n = grid[0] * grid[1] * grid[2]
    interpreter.run(fn, grid, flat + [torch.zeros(n * 128 * slots, dtype=torch.uint8)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_sm90_form_in_the_interpreter(dtype):
    M, N, BM, BN = 70, 48, 32, 32 if dtype == torch.float32 else 16
    big = torch.randn(M, N + 16).to(dtype)
    x = big[:, 3:3 + N] if dtype != torch.float32 else big[:, 4:4 + N]  # strided, aligned
    y = _poisoned((M, N), dtype, "cpu")
    grid = (kit.cdiv(M, BM), kit.cdiv(N, BN), 1)
    if dtype != torch.float32:  # 3 * 2 bytes: not 16-byte aligned; as the GPU traps
        with pytest.raises(ValueError, match="multiples of 16"):
            _sm90_ir_in_interpreter(dev_copy, grid, [x, y, M, N, big.stride(0), N],
                                    (BM, BN), 2)
        x = big[:, 8:8 + N]
    _sm90_ir_in_interpreter(dev_copy, grid, [x, y, M, N, big.stride(0), N], (BM, BN), 2)
    ref = (x.double() * 2 + 1).to(dtype)
    torch.testing.assert_close(y, ref, atol=0, rtol=0)


def test_sm90_loop_form_in_the_interpreter():
    M, N = 40, 24
    X = torch.randn(3 * M * N + 8)
    xs = [X[8 + (2 - g) * M * N:8 + (3 - g) * M * N].view(M, N) for g in range(3)]
    p = torch.tensor([t.data_ptr() for t in xs], dtype=torch.int64)
    y = _poisoned((3, M, N), torch.float32, "cpu")
    _sm90_ir_in_interpreter(dev_in_loop, (3, 3, 1), [p, y, X, 3, M, N], (16, 8), 2)
    for g in range(3):
        torch.testing.assert_close(y[g], xs[g] + g)


def test_masked_path_in_the_interpreter():
    """What the interpreter (and targets without TMA) run: the same results."""
    M, N, K = 100, 72, 80
    a, b = torch.randn(M, K).half(), torch.randn(N, K).half()
    c = _poisoned((M, N), torch.float16, "cpu")
    dev_matmul[(3,)](a, b, c, M, N, K, BM=32, BN=32, BK=32)
    ref = a.double() @ b.double().T
    assert (c.double() - ref).abs().max().item() <= 1e-2 * ref.abs().max().item()


def test_sass_device_descriptors_use_tma():
    from kitjit import tools

    specs = [("*fp16", 16)] * 3 + [("i32", 1)] * 3
    ck = dev_matmul.compile(specs, (64, 64, 64), 4, "sm_90a")
    assert ck.metadata["scratch"] == 3 * 128 and ck.metadata["tma"] == []
    assert ck.asm["ptx"].count("tensormap.replace.tile.global_address") == 3
    assert "fence.proxy.tensormap::generic.acquire.gpu" in ck.asm["ptx"]
    try:
        ops = tools.sass_opcodes(tools.disassemble(ck.asm["cubin"]))
    except tools.ToolError as e:
        pytest.skip(str(e))
    assert "UTMALDG.2D" in ops and "UTMASTG.2D" in ops, ops
    assert ck.metadata["spills"] == 0
    # other targets keep masked loads
    ck8 = dev_copy.compile([("*fp32", 16)] * 2 + [("i32", 1)] * 4, (32, 32), 4, "sm_80")
    assert "scratch" not in ck8.metadata and "tensormap" not in ck8.asm["ptx"]


def test_param_block_carries_the_scratch_pointer():
    from kitjit.runtime.driver import ParamBlock

    blk = ParamBlock(["ptr", "const", "i32"], 1, scratch=True)
    assert len(blk.ptrs) == 4  # two parameters, one TMA map, the scratch
    blk.struct.scratch = 0x1000
    import ctypes

    assert ctypes.c_uint64.from_address(blk.ptrs[3]).value == 0x1000


def test_alloc_scratch_calls_the_allocator_as_triton():
    from kitjit.launcher import alloc_scratch

    seen = []

    def alloc(size, alignment, stream):
        seen.append((size, alignment, stream))
        raw = torch.empty(size + alignment, dtype=torch.uint8)
        return raw[-raw.data_ptr() % alignment:][:size]

    kit.set_allocator(alloc)
    try:
        buf = alloc_scratch(384, 0, 1234)
    finally:
        kit.set_allocator(None)
    assert seen == [(384, 128, 1234)] and buf.numel() == 384


# ------------------------------------------------------------------ GPU
@pytest.mark.gpu
def test_gpu_device_descriptors():
    dev = "cuda"
    for dtype, BN in ((torch.float32, 32), (torch.float16, 64), (torch.bfloat16, 64)):
        M, N = 300, 200
        big = torch.randn(M, N + 56, device=dev).to(dtype)
        x = big[:, 8:8 + N]
        y = _poisoned((M, N), dtype, dev)
        dev_copy[(kit.cdiv(M, 64), kit.cdiv(N, BN))](x, y, M, N, big.stride(0), N, BM=64,
                                                     BN=BN)
        torch.testing.assert_close(y, (x.double() * 2 + 1).to(dtype), atol=0, rtol=0)
    seen = []

    def alloc(size, alignment, stream):
        seen.append((size, alignment))
        return torch.empty(size, dtype=torch.uint8, device=dev)

    kit.set_allocator(alloc)
    try:
        for M, N, K in ((300, 200, 520), (1000, 1000, 256)):
            a = torch.randn(M, K, device=dev).half()
            b = torch.randn(N, K, device=dev).half()
            c = _poisoned((M, N), torch.float16, dev)
            dev_matmul[(7,)](a, b, c, M, N, K, BM=64, BN=64, BK=64)
            ref = a.double() @ b.double().T
            assert (c.double() - ref).abs().max().item() <= 1e-2 * ref.abs().max().item()
    finally:
        kit.set_allocator(None)
    assert seen[0] == (7 * 3 * 128, 128)
    M, N = 100, 64
    X = torch.randn(3 * M * N + 8, device=dev)
    xs = [X[8 + (2 - g) * M * N:8 + (3 - g) * M * N].view(M, N) for g in range(3)]
    p = torch.tensor([t.data_ptr() for t in xs], dtype=torch.int64, device=dev)
    y = _poisoned((3, M, N), torch.float32, dev)
    dev_in_loop[(kit.cdiv(M, 32), kit.cdiv(N, 32))](p, y, X, 3, M, N, BM=32, BN=32)
    for g in range(3):
        torch.testing.assert_close(y[g], xs[g] + g)


def test_interpreter_refuses_what_the_gpu_traps_on():
    """A row stride that is not a multiple of 16 bytes: on sm_90a the copy is TMA and the
    GPU traps; the interpreter (default path) stops at the call with Triton's rule instead of
    computing a result the GPU never gives. A 16-byte stride runs in both."""
    M, N = 8, 16
    x = torch.randn(M, 43)          # rows 172 bytes apart
    y = torch.full((M, N), float("nan"))
    with pytest.raises(Exception, match="multiples of 16"):
        dev_copy[(1, 1, 1)](x, y, M, N, 43, N, BM=8, BN=16)
    x = torch.randn(M, 44)          # 176 bytes: fine
    dev_copy[(1, 1, 1)](x, y, M, N, 44, N, BM=8, BN=16)
    torch.testing.assert_close(y, x[:, :N] * 2 + 1)

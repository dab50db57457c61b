"""Host-side tensor descriptors (`kitjit.tools.tensor_descriptor.TensorDescriptor`, Triton's
`triton.tools.tensor_descriptor`) passed as kernel arguments, `desc.load` / `desc.store` in
the kernel: the interpreter against torch on ragged sizes with poisoned outputs, the TMA
expansion sm_90a gets (run in the interpreter too), SASS (UTMALDG / UTMASTG), and the GPU.
Triton's 06-fused-attention and 09-persistent-matmul tutorials use these."""

from __future__ import annotations

import pytest
import torch

import kitjit as kit
from kitjit.tools.tensor_descriptor import TensorDescriptor


@kit.jit
def desc_copy(a_desc, c_desc, BM: kit.constexpr, BN: kit.constexpr):
    pm, pn = kit.program_id(0), kit.program_id(1)
    x = a_desc.load([pm * BM, pn * BN])
    c_desc.store([pm * BM, pn * BN], x * 2)


@kit.jit
def desc_matmul(a_desc, b_desc, c_desc, K, BM: kit.constexpr, BN: kit.constexpr,
                BK: kit.constexpr):
    """C = A @ B^T, B given as [N, K] (09-persistent-matmul's matmul_kernel_tma)."""
    pm, pn = kit.program_id(0), kit.program_id(1)
    acc = kit.zeros((BM, BN), kit.float32)
    for k in range(0, kit.cdiv(K, BK)):
        a = a_desc.load([pm * BM, k * BK])
        b = b_desc.load([pn * BN, k * BK])
        acc = kit.dot(a, b.T, acc)
    c_desc.store([pm * BM, pn * BN], acc.to(c_desc.dtype))


@kit.jit
def desc_rows(x_desc, y_desc, n_blocks, BM: kit.constexpr, BN: kit.constexpr):
    """Each program loads and stores n_blocks blocks in a loop (a phase per iteration, the
    staging tile reused), and one more under a run-time `if`."""
    pn = kit.program_id(0)
    for i in range(n_blocks):
        y_desc.store([i * BM, pn * BN], x_desc.load([i * BM, pn * BN]) + 1)
    if pn % 2 == 0:
        y_desc.store([n_blocks * BM, pn * BN], x_desc.load([n_blocks * BM, pn * BN]) - 1)


@kit.jit
def desc_any_rank(x_desc, y_desc, B0: kit.constexpr, B1: kit.constexpr, B2: kit.constexpr):
    p = kit.program_id(0)
    y_desc.store([p * B0, 0, 0], x_desc.load([p * B0, 0, 0]))


@kit.jit
def desc_1d(x_desc, y_desc, BLOCK: kit.constexpr):
    p = kit.program_id(0)
    y_desc.store([p * BLOCK], x_desc.load([p * BLOCK]) * 3)


@kit.jit
def maybe_desc(x, y, n, BLOCK: kit.constexpr):
    """Triton's `_maybe_make_tensor_desc`: a descriptor argument, or a pointer made one."""
    if isinstance(x, kit.tensor_descriptor):
        d = x
    else:
        d = kit.make_tensor_descriptor(x, shape=[n], strides=[1], block_shape=[BLOCK])
    kit.store(y + kit.arange(0, BLOCK), d.load([0]), mask=kit.arange(0, BLOCK) < n)


def _nan(*shape, dtype=torch.float32, dev="cpu"):
    return torch.full(shape, float("nan"), dtype=dtype, device=dev)


def _ragged_copy(dev, M=70, N=40, BM=32, BN=16, dtype=torch.float32):
    a = torch.randn(M, N, device=dev).to(dtype)
    c = _nan(M, N, dtype=dtype, dev=dev)
    ad = TensorDescriptor.from_tensor(a, [BM, BN])
    cd = TensorDescriptor.from_tensor(c, [BM, BN])
    desc_copy[(kit.cdiv(M, BM), kit.cdiv(N, BN))](ad, cd, BM=BM, BN=BN)
    torch.testing.assert_close(c, a * 2)  # every element written, none outside


def test_copy_ragged():
    _ragged_copy("cpu")


def test_out_of_bounds_reads_zero_and_stores_clip():
    a = torch.randn(70, 40)
    # a view inside a larger tensor: the descriptor's shape bounds it, not the storage
    big = torch.full((80, 48), 7.0)
    c = big[:70, :40]
    desc_rows[(3,)](TensorDescriptor.from_tensor(a, [16, 16]),
                    TensorDescriptor(c, [70, 40], [48, 1], [16, 16]), 4, BM=16, BN=16)
    want = torch.full((70, 40), 7.0)
    want[:64] = a[:64] + 1
    for pn in (0, 2):  # the `if` block: rows 64..79, clipped at row 70 and col 40
        want[64:, pn * 16:(pn + 1) * 16] = a[64:, pn * 16:(pn + 1) * 16] - 1
    torch.testing.assert_close(c, want)
    assert (big[70:] == 7).all() and (big[:, 40:] == 7).all()


def test_padding_nan():
    a = torch.randn(10, 16)
    c = _nan(16, 16)
    desc_copy[(1, 1)](TensorDescriptor.from_tensor(a, [16, 16], padding="nan"),
                      TensorDescriptor.from_tensor(c, [16, 16]), BM=16, BN=16)
    torch.testing.assert_close(c[:10], a * 2)
    assert c[10:].isnan().all()


@pytest.mark.parametrize("M,N,K", [(70, 56, 88), (64, 64, 64)])
def test_matmul_with_descriptors(M, N, K):
    a = torch.randn(M, K).half()
    b = torch.randn(N, K).half()
    c = _nan(M, N, dtype=torch.float16)
    ds = [TensorDescriptor.from_tensor(a, [32, 32]), TensorDescriptor.from_tensor(b, [32, 32]),
          TensorDescriptor.from_tensor(c, [32, 32])]
    desc_matmul[(kit.cdiv(M, 32), kit.cdiv(N, 32))](*ds, K, BM=32, BN=32, BK=32)
    torch.testing.assert_close(c.double(), a.double() @ b.double().T, atol=2e-2, rtol=1e-2)


def test_rank_1_and_3():
    x = torch.randn(100)
    y = _nan(100)
    desc_1d[(4,)](TensorDescriptor.from_tensor(x, [32]), TensorDescriptor.from_tensor(y, [32]),
                  BLOCK=32)
    torch.testing.assert_close(y, x * 3)
    x3 = torch.randn(5, 3, 8)
    y3 = _nan(5, 3, 8)
    desc_any_rank[(3,)](TensorDescriptor.from_tensor(x3, [2, 4, 8]),
                        TensorDescriptor.from_tensor(y3, [2, 4, 8]), B0=2, B1=4, B2=8)
    torch.testing.assert_close(y3, x3)


def test_isinstance_tensor_descriptor():
    x = torch.randn(20)
    for arg in (TensorDescriptor.from_tensor(x, [32]), x):
        y = _nan(20)
        maybe_desc[(1,)](arg, y, 20, BLOCK=32)
        torch.testing.assert_close(y, x)


def test_block_shape_is_specialized_and_set_by_pre_hooks():
    """09-persistent-matmul makes descriptors with block [1, 1] and a Config pre_hook sets
    the block per config: the kernel compiles for the block the hook sets."""
    def hook(nargs):
        nargs["a_desc"].block_shape = [nargs["BM"], nargs["BN"]]
        nargs["c_desc"].block_shape = [nargs["BM"], nargs["BN"]]

    tuned = kit.autotune([kit.Config({"BM": 16, "BN": 16}, pre_hook=hook)], key=[])(desc_copy)
    a = torch.randn(40, 24)
    c = _nan(40, 24)
    ad, cd = TensorDescriptor.from_tensor(a, [1, 1]), TensorDescriptor.from_tensor(c, [1, 1])
    tuned[lambda m: (kit.cdiv(40, m["BM"]), kit.cdiv(24, m["BN"]))](ad, cd)
    torch.testing.assert_close(c, a * 2)


def test_descriptor_checks():
    x = torch.randn(10, 12)
    with pytest.raises(ValueError, match="last dimension must be contiguous"):
        TensorDescriptor(x.t(), [12, 10], [1, 12], [4, 4])
    with pytest.raises(ValueError, match="powers of two"):
        TensorDescriptor.from_tensor(x, [3, 4])
    with pytest.raises(ValueError, match="multiples of 16 bytes"):
        TensorDescriptor(x, [10, 12], [6, 1], [4, 4])
    with pytest.raises(ValueError, match="padding"):
        TensorDescriptor.from_tensor(x, [4, 4], padding="one")
    d = TensorDescriptor.from_tensor(x[:, :8], [4, 4])
    d.block_shape = [4, 5]  # as a pre_hook might: checked at the launch
    with pytest.raises(ValueError, match="powers of two"):
        desc_copy[(1, 1)](d, d, BM=4, BN=4)


# ------------------------------------------------------------------ the TMA form (sm_90a)
def _tma_ir_in_interpreter(jf, grid, args, consts):
    """Build the kernel as sm_90a gets it (TMA copies for host descriptors) and run that IR
    in the interpreter: the expansion's semantics (hoisted tiles, a phase per wait)."""
    from kitjit import interpreter

    specs = jf._specs(args)
    fn = jf.build_ir(specs, consts, 4, tma=True)
    names = {op.name for op in fn.walk()}
    assert {"tma_load", "smem_load", "tma_store"} <= names, names
    flat = []
    for a, s in zip(args, specs):
        flat += [a.base, *a.shape, *a.strides[:-1]] if s[0] == "desc" else \
            ([a] if s[0] != "const" else [])
    for name in fn.attrs["tma"]:
        d = args[jf.runtime_params.index(name)]
        flat.append(d.base.as_strided(d.shape, d.strides))
    interpreter.run(fn, grid, flat)


def test_tma_expansion_in_the_interpreter():
    a = torch.randn(70, 48)
    c = torch.full((80, 48), 7.0)
    _tma_ir_in_interpreter(desc_rows, (3, 1, 1), [TensorDescriptor.from_tensor(a, [16, 16]),
                                                  TensorDescriptor(c[:70], [70, 48], [48, 1],
                                                                   [16, 16]), 4], (16, 16))
    want = torch.full((80, 48), 7.0)
    want[:64] = a[:64] + 1
    for pn in (0, 2):
        want[64:70, pn * 16:(pn + 1) * 16] = a[64:, pn * 16:(pn + 1) * 16] - 1
    torch.testing.assert_close(c, want)


def _sass(jf, specs, consts):
    from kitjit import tools

    ck = jf.compile(specs, consts, 4, "sm_90a")
    try:
        ops = tools.sass_opcodes(tools.disassemble(ck.asm["cubin"]))
    except tools.ToolError as e:
        pytest.skip(str(e))
    return ck, ops


def test_sass_host_descriptors_use_tma():
    desc = ("desc", "fp16", 2, (64, 64), "zero")
    ck, ops = _sass(desc_matmul, [desc, desc, desc, ("i32", 1)], (64, 64, 64))
    assert "UTMALDG.2D" in ops and "UTMASTG.2D" in ops, ops
    assert any(o.startswith("HMMA") for o in ops)
    assert [t["desc"] for t in ck.metadata["tma"]] == [True] * 3
    assert ck.metadata["arg_kinds"] == ["desc2", "desc2", "desc2", "i32"]
    assert ck.metadata["spills"] == 0
    # ranks 1 and 3 and padding "nan" keep masked loads
    ck, ops = _sass(desc_any_rank, [("desc", "fp32", 3, (2, 4, 8), "zero")] * 2, (2, 4, 8))
    assert not any(o.startswith("UTMA") for o in ops)
    ck, ops = _sass(desc_1d, [("desc", "fp32", 1, (32,), "zero")] * 2, (32,))
    assert not any(o.startswith("UTMA") for o in ops)
    ck, ops = _sass(desc_copy, [("desc", "fp32", 2, (16, 16), "nan"),
                                ("desc", "fp32", 2, (16, 16), "zero")], (16, 16))
    assert "UTMASTG.2D" in ops and "UTMALDG.2D" not in ops


# ------------------------------------------------------------------ GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16,
                                   torch.float8_e4m3fn])
def test_gpu_descriptors_on_tma(dtype):
    _ragged_copy("cuda", M=300, N=200, BM=64, BN=64 if dtype != torch.float32 else 32,
                 dtype=dtype) if dtype != torch.float8_e4m3fn else None
    if dtype == torch.float8_e4m3fn:  # x * 2 is exact in fp8 up to saturation
        a = (torch.randn(300, 160, device="cuda") * 4).to(dtype)
        c = torch.zeros(300, 160, device="cuda").to(dtype)
        desc_copy[(5, 3)](TensorDescriptor.from_tensor(a, [64, 64]),
                          TensorDescriptor.from_tensor(c, [64, 64]), BM=64, BN=64)
        torch.testing.assert_close(c.float(), (a.float() * 2).to(dtype).float())
    big = torch.full((300, 256), 7.0, device="cuda")
    x = torch.randn(290, 256, device="cuda")
    desc_rows[(4,)](TensorDescriptor.from_tensor(x, [64, 64]),
                    TensorDescriptor(big[:290], [290, 256], [256, 1], [64, 64]), 4, BM=64,
                    BN=64)
    want = torch.full((300, 256), 7.0, device="cuda")
    want[:256] = x[:256] + 1
    for pn in (0, 2):
        want[256:290, pn * 64:(pn + 1) * 64] = x[256:, pn * 64:(pn + 1) * 64] - 1
    torch.testing.assert_close(big, want)


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K", [(300, 200, 520), (128, 128, 64)])
def test_gpu_matmul_with_descriptors(M, N, K):
    a = torch.randn(M, K, device="cuda").half()
    b = torch.randn(N, K, device="cuda").half()
    c = torch.full((M, N), float("nan"), device="cuda").half()
    ds = [TensorDescriptor.from_tensor(a, [64, 64]), TensorDescriptor.from_tensor(b, [64, 64]),
          TensorDescriptor.from_tensor(c, [64, 64])]
    desc_matmul[(kit.cdiv(M, 64), kit.cdiv(N, 64))](*ds, K, BM=64, BN=64, BK=64)
    ref = a.double() @ b.double().T
    assert (c.double() - ref).abs().max().item() <= 1e-2 * ref.abs().max().item()


@pytest.mark.gpu
def test_gpu_descriptors_other_paths():
    x = torch.randn(100, device="cuda")
    y = torch.full((100,), float("nan"), device="cuda")
    desc_1d[(4,)](TensorDescriptor.from_tensor(x, [32]), TensorDescriptor.from_tensor(y, [32]),
                  BLOCK=32)
    torch.testing.assert_close(y, x * 3)
    a = torch.randn(10, 16, device="cuda")
    c = torch.full((16, 16), 0.0, device="cuda")
    desc_copy[(1, 1)](TensorDescriptor.from_tensor(a, [16, 16], padding="nan"),
                      TensorDescriptor.from_tensor(c, [16, 16]), BM=16, BN=16)
    torch.testing.assert_close(c[:10], a * 2)
    assert c[10:].isnan().all()

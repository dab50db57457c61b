"""Gaps found by running a corpus of public Triton kernels (attorch, Liger-Kernel's newer
ops, unsloth, FlagGems; kept outside this repository) after only the import swap: each test
states one Triton behaviour those kernels relied on, in kitjit's own words."""

from __future__ import annotations

import pytest
import torch

import kitjit as kit

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


# ------------------------------------------------------------------ fp32 tl.dot
@kit.jit
def _mm_f32(A, B, C, M, N, K, sam, sak, sbk, sbn,
            BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr, PREC: kit.constexpr):
    rm = kit.program_id(0) * BM + kit.arange(0, BM)
    rn = kit.program_id(1) * BN + kit.arange(0, BN)
    acc = kit.zeros((BM, BN), dtype=kit.float32)
    for k0 in range(0, K, BK):
        rk = k0 + kit.arange(0, BK)
        a = kit.load(A + rm[:, None] * sam + rk[None, :] * sak,
                     mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = kit.load(B + rk[:, None] * sbk + rn[None, :] * sbn,
                     mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        if PREC == "default":
            acc = kit.dot(a, b, acc)
        elif PREC == "matmul":
            acc += a @ b
        elif PREC == "no_tf32":
            acc = kit.dot(a, b, acc, allow_tf32=False)
        else:
            acc = kit.dot(a, b, acc, input_precision=PREC)
    kit.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _mm(a, b, prec):
    M, K = a.shape
    N = b.shape[1]
    c = torch.full((M, N), float("nan"), device=a.device)
    _mm_f32[(triton_cdiv(M, 32), triton_cdiv(N, 32))](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        BM=32, BN=32, BK=16, PREC=prec)
    return c


def triton_cdiv(a, b):
    return (a + b - 1) // b


# (precision, bound on |err| / (|a| @ |b|)): tf32 itself keeps 10 bits (2^-11); kitjit's
# split keeps >= 16 bits, the ieee split fp32's 24
_BOUNDS = {"default": 2 ** -14, "matmul": 2 ** -14, "tf32": 2 ** -14, "bf16x3": 2 ** -14,
           "no_tf32": 2 ** -21, "ieee": 2 ** -21, "tf32x3": 2 ** -21, "bf16x6": 2 ** -21}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("prec", list(_BOUNDS))
def test_dot_fp32(device, prec):
    """`tl.dot` on fp32 tiles (attorch's linear/conv/attention, Liger's mHC, MoE and
    neighborhood attention): fp32 in, fp32 out, at least tf32's precision by default and
    fp32's with input_precision="ieee"; non-contiguous B, ragged sizes."""
    g = torch.Generator().manual_seed(1)
    a64 = torch.randn(70, 45, generator=g, dtype=torch.float64) * 3
    b64 = torch.randn(37, 45, generator=g, dtype=torch.float64).T  # strides (1, 45)
    a, b = a64.float().to(device), b64.float().to(device)
    want = a.double().cpu() @ b.double().cpu()
    scale = a.double().abs().cpu() @ b.double().abs().cpu()
    got = _mm(a, b, prec).double().cpu()
    assert not got.isnan().any()
    assert ((got - want).abs() / scale).max().item() < _BOUNDS[prec]


def test_dot_fp32_bad_precision():
    from kitjit.frontend.errors import CompileError

    a = torch.randn(16, 16)
    with pytest.raises(CompileError, match="input_precision must be one of"):
        _mm(a, a, "fp64")


def test_sass_dot_fp32():
    """The fp32 dot compiles for sm_90a to bf16 tensor-core mmas, without spills."""
    from kitjit import tools

    specs = [("*fp32", 16)] * 3 + [("i32", 1)] * 3 + [("i32", 1), ("i32", 16)] * 2
    ck = _mm_f32.compile(specs, (32, 32, 16, "default"), 4, "sm_90a")
    try:
        ops = tools.sass_opcodes(tools.disassemble(ck.asm["cubin"]))
    except tools.ToolError as e:
        pytest.skip(str(e))
    hmma = sum(n for o, n in ops.items() if o.startswith("HMMA") and "BF16" in o)
    assert hmma >= 3, ops and ck.metadata["spills"] == 0

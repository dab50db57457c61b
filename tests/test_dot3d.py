"""3-D (batched) `kit.dot`, Triton's rank-3 form: [B, M, K] x [B, K, N] (+ acc) ->
[B, M, N], each batch slice by the 2-d dot's rules (fp16/bf16 in fp32, fp32 split into bf16
products, fp16 out_dtype). Interpreter against float64 torch (bmm), sm_90a/sm_80 compiles
with SASS checks, and the same kernels on the GPU (marked gpu)."""

from __future__ import annotations

import pytest
import torch
from kitjit.frontend.errors import CompileError

import kitjit as kit
from kitjit.tools import ToolError, disassemble, find_tool, sass_opcodes

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@kit.jit
def _bmm(A, Bm, C, Acc, Bsz, M, N, K, sab, sam, sak, sbb, sbk, sbn,
         BB: kit.constexpr, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
         PREC: kit.constexpr, ACC: kit.constexpr, F16OUT: kit.constexpr):
    """C[b] = A[b] @ B[b] (+ Acc[b]) with BB batch entries per program, masked edges."""
    rb = kit.program_id(2) * BB + kit.arange(0, BB)
    rm = kit.program_id(0) * BM + kit.arange(0, BM)
    rn = kit.program_id(1) * BN + kit.arange(0, BN)
    b3, m3, n3 = rb[:, None, None], rm[None, :, None], rn[None, None, :]
    cmask = (b3 < Bsz) & (m3 < M) & (n3 < N)
    coff = b3 * M * N + m3 * N + n3
    if F16OUT:
        if ACC:
            acc = kit.load(Acc + coff, mask=cmask, other=0.0)
        else:
            acc = kit.zeros((BB, BM, BN), dtype=kit.float16)
    elif ACC:
        acc = kit.load(Acc + coff, mask=cmask, other=0.0)
    else:
        acc = kit.zeros((BB, BM, BN), dtype=kit.float32)
    for k0 in range(0, K, BK):
        rk = k0 + kit.arange(0, BK)
        ka, kb = rk[None, None, :], rk[None, :, None]
        a = kit.load(A + b3 * sab + m3 * sam + ka * sak,
                     mask=(b3 < Bsz) & (m3 < M) & (ka < K), other=0.0)
        b = kit.load(Bm + b3 * sbb + kb * sbk + n3 * sbn,
                     mask=(b3 < Bsz) & (kb < K) & (n3 < N), other=0.0)
        if F16OUT:
            acc = kit.dot(a, b, acc, out_dtype=kit.float16)
        elif PREC == "default":
            acc = kit.dot(a, b, acc)
        else:
            acc = kit.dot(a, b, acc, input_precision=PREC)
    kit.store(C + coff, acc.to(C.dtype.element_ty), mask=cmask)


def _run(a, b, acc=None, prec="default", f16out=False, BB=2, BM=32, BN=16, BK=16):
    Bsz, M, K = a.shape
    N = b.shape[2]
    odt = torch.float16 if f16out else torch.float32
    c = torch.full((Bsz, M, N), float("nan"), dtype=odt, device=a.device)
    grid = (-(-M // BM), -(-N // BN), -(-Bsz // BB))
    _bmm[grid](a, b, c, acc if acc is not None else c, Bsz, M, N, K,
               a.stride(0), a.stride(1), a.stride(2), b.stride(0), b.stride(1), b.stride(2),
               BB=BB, BM=BM, BN=BN, BK=BK, PREC=prec, ACC=acc is not None, F16OUT=f16out)
    return c


def _inputs(Bsz, M, N, K, dtype, device, seed=0):
    """A contiguous, B non-contiguous (a transposed view), both random."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(Bsz, M, K, generator=g, dtype=torch.float64)
    b = torch.randn(Bsz, N, K, generator=g, dtype=torch.float64).transpose(1, 2)
    return a.to(dtype).to(device), b.to(dtype).to(device)


def _bound(got, a, b, acc=None):
    """max |got - ref| / (|a| @ |b| + |acc|), all in float64."""
    a64, b64 = a.double().cpu(), b.double().cpu()
    want = torch.bmm(a64, b64)
    scale = torch.bmm(a64.abs(), b64.abs())
    if acc is not None:
        want, scale = want + acc.double().cpu(), scale + acc.double().cpu().abs()
    got = got.double().cpu()
    assert not got.isnan().any(), "a poisoned output element was not written"
    return ((got - want).abs() / scale).max().item()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("with_acc", [False, True])
def test_dot3d_16bit(device, dtype, with_acc):
    """fp16/bf16 inputs, fp32 accumulation: each product and sum as the 2-d dot's (rounded
    inputs, fp32 sums); ragged B, M, N, K (none a multiple of its tile)."""
    a, b = _inputs(5, 45, 21, 39, dtype, device)
    acc = torch.randn(5, 45, 21, generator=torch.Generator().manual_seed(3)).to(device) \
        if with_acc else None
    got = _run(a, b, acc)
    assert _bound(got, a, b, acc) < 2 ** -18   # exact products of the inputs, fp32 sums


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("prec,tol", [("default", 2 ** -14), ("ieee", 2 ** -21)])
def test_dot3d_fp32(device, prec, tol):
    """fp32 inputs follow kitjit's 2-d fp32 rule (bf16 splits: >= tf32 by default, fp32's
    precision with input_precision="ieee"), with acc=."""
    a, b = _inputs(3, 33, 40, 50, torch.float32, device, seed=1)
    acc = torch.randn(3, 33, 40, generator=torch.Generator().manual_seed(4)).to(device)
    got = _run(a, b, acc, prec=prec, BB=4, BN=32)
    assert _bound(got, a, b, acc) < tol


@pytest.mark.parametrize("device", DEVICES)
def test_dot3d_f16_out(device):
    """out_dtype=kit.float16 with an fp16 acc: fp32 sums rounded to fp16 at each k-step."""
    a, b = _inputs(4, 20, 30, 17, torch.float16, device, seed=2)
    acc = torch.randn(4, 20, 30, generator=torch.Generator().manual_seed(5)).half().to(device)
    got = _run(a, b, acc, f16out=True, BB=2, BK=32)
    assert got.dtype is torch.float16
    assert _bound(got, a, b, acc) < 2 ** -9


@kit.jit
def _bad(A, C, WHICH: kit.constexpr):
    r = kit.arange(0, 16)
    x = kit.load(A + r[None, :, None] * 16 + r[None, None, :] + kit.zeros((2, 1, 1), kit.int32))
    if WHICH == "batch":
        y = kit.dot(x, kit.reshape(kit.cat(x, x), (4, 16, 16)))
    elif WHICH == "rank":
        y = kit.dot(x, kit.reshape(x, (32, 16)))
    elif WHICH == "small":
        y = kit.dot(kit.reshape(x, (4, 8, 16)), kit.reshape(x, (4, 16, 8)))
    elif WHICH == "k":
        y = kit.dot(x, kit.reshape(x, (2, 8, 32)))
    else:
        y = kit.dot(x, x, kit.zeros((2, 16, 8), kit.float32))
    kit.store(C + kit.arange(0, 2)[:, None, None] * 0, kit.sum(kit.sum(y, 2), 1)[:, None, None])


@pytest.mark.parametrize("which,msg", [
    ("batch", "batch dims differ"), ("rank", "a is 3-d"), ("small", "M, N and K >= 16"),
    ("k", "inner dims differ"), ("acc", r"acc must be a tile of shape \[2, 16, 16\]")])
def test_dot3d_errors(which, msg):
    """Triton's rank-3 rules, reported at the user's kit.dot line."""
    a = torch.randn(256, dtype=torch.float16)
    c = torch.full((2,), float("nan"))
    with pytest.raises(CompileError, match=msg) as e:
        _bad[(1,)](a, c, WHICH=which)
    assert "kit.dot(" in str(e.value)


# ------------------------------------------------------------------ SASS (no GPU needed)
_SASS = pytest.mark.skipif(find_tool("cuobjdump") is None or find_tool("nvdisasm") is None,
                           reason="cuobjdump/nvdisasm not found")


def _sass_ops(ck) -> dict:
    try:
        return sass_opcodes(disassemble(ck.asm["cubin"]))
    except ToolError as e:
        pytest.skip(str(e))


@_SASS
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("dt,prec,BB,BM,BN,BK,warps", [
    ("fp16", "default", 2, 32, 16, 16, 4), ("bf16", "default", 4, 32, 32, 32, 4),
    ("bf16", "default", 2, 64, 64, 32, 4),
    ("bf16", "default", 4, 64, 64, 32, 8),
    ("fp32", "default", 2, 32, 32, 16, 4), ("fp32", "ieee", 2, 32, 32, 16, 4)])
@pytest.mark.slow_except(
    "fp16-default-2-32-16-16-4-sm_90a", "bf16-default-2-64-64-32-4-sm_90a",
    "bf16-default-2-64-64-32-4-sm_80", "fp32-default-2-32-32-16-4-sm_90a",
    "fp32-ieee-2-32-32-16-4-sm_90a")
def test_sass_dot3d(arch, dt, prec, BB, BM, BN, BK, warps):
    """Each batch slice is a tensor-core product (HMMA, BF16 ones for the fp32 splits:
    3 or 6 per slice and mma tile), and the slicing costs no spills."""
    specs = [(f"*{dt}", 16), (f"*{dt}", 16), ("*fp32", 16), ("*fp32", 16)] + \
        [("i32", 16)] * 4 + [("i32", 16), ("i32", 16), ("i32", 1), ("i32", 16), ("i32", 16),
                            ("i32", 1)]
    ck = _bmm.compile(specs, (BB, BM, BN, BK, prec, False, False), warps, arch)
    ops = _sass_ops(ck)
    hmma = sum(n for o, n in ops.items() if o.startswith("HMMA"))
    per_slice = {"default": 3, "ieee": 6}[prec] if dt == "fp32" else 1
    # at least one m16n8k16 per (slice, 16x8x16 block) spread over the warps
    assert hmma >= BB * per_slice * (BM * BN * BK) // (16 * 8 * 16) // warps, ops
    assert ck.metadata["spills"] == 0, ck.metadata
    assert not any(o.startswith(("STL", "LDL")) for o in ops), ops


# ------------------------------------------------------------------ batched attention
@kit.jit
def _heads_attention(Q, K, V, O, H, S, sm_scale, sh, ss, soh, sos,
                     HB: kit.constexpr, BM: kit.constexpr, BN: kit.constexpr,
                     D: kit.constexpr, CAUSAL: kit.constexpr):
    """HB heads of one query block per program, every product a 3-d kit.dot (heads as the
    batch dim): online softmax over key blocks, masked ragged S, optional causal mask.
    Q, K, V are [H, S, D] with strides (sh, ss, 1), O with (soh, sos, 1)."""
    rh = kit.program_id(1) * HB + kit.arange(0, HB)
    rm = kit.program_id(0) * BM + kit.arange(0, BM)
    rd = kit.arange(0, D)
    h3, m3, d3 = rh[:, None, None], rm[None, :, None], rd[None, None, :]
    qmask = (h3 < H) & (m3 < S)
    q = kit.load(Q + h3 * sh + m3 * ss + d3, mask=qmask, other=0.0)
    m_i = kit.full((HB, BM), float("-inf"), kit.float32)
    l_i = kit.zeros((HB, BM), kit.float32)
    acc = kit.zeros((HB, BM, D), kit.float32)
    qk_scale = sm_scale * 1.4426950408889634
    hi = S
    if CAUSAL:
        hi = kit.minimum(S, (kit.program_id(0) + 1) * BM)
    for n0 in range(0, hi, BN):
        rn = n0 + kit.arange(0, BN)
        kt = kit.load(K + h3 * sh + rn[None, None, :] * ss + rd[None, :, None],
                      mask=(h3 < H) & (rn[None, None, :] < S), other=0.0)   # [HB, D, BN]
        s = kit.dot(q, kt) * qk_scale                                       # [HB, BM, BN]
        keep = rn[None, None, :] < S
        if CAUSAL:
            keep = keep & (rn[None, None, :] <= m3)
        s = kit.where(keep, s, float("-inf"))
        m_new = kit.maximum(m_i, kit.max(s, 2))
        m_safe = kit.where(m_new == float("-inf"), 0.0, m_new)
        p = kit.exp2(s - m_safe[:, :, None])
        alpha = kit.exp2(m_i - m_safe)
        l_i = l_i * alpha + kit.sum(p, 2)
        v = kit.load(V + h3 * sh + rn[None, :, None] * ss + d3,
                     mask=(h3 < H) & (rn[None, :, None] < S), other=0.0)    # [HB, BN, D]
        acc = kit.dot(p.to(v.dtype), v, acc * alpha[:, :, None])
        m_i = m_new
    out = acc / l_i[:, :, None]
    kit.store(O + h3 * soh + m3 * sos + d3, out.to(O.dtype.element_ty), mask=qmask)


def _attention(q, k, v, causal, HB=2, BM=32, BN=32):
    H, S, D = q.shape
    o = torch.full((H, S, D), float("nan"), dtype=q.dtype, device=q.device)
    grid = (-(-S // BM), -(-H // HB))
    _heads_attention[grid](q, k, v, o, H, S, D ** -0.5, q.stride(0), q.stride(1),
                           o.stride(0), o.stride(1),
                           HB=HB, BM=BM, BN=BN, D=D, CAUSAL=causal)
    return o


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dot3d_batched_attention(device, causal, dtype):
    """End to end: a small Triton-style attention kernel whose products are 3-d dots,
    against float64 softmax attention; 5 heads (ragged for HB=2), S=77 (ragged for the
    32-row blocks); Q, K, V slices of one packed [H, S, 3, D] tensor (non-contiguous)."""
    g = torch.Generator().manual_seed(7)
    H, S, D = 5, 77, 32
    qkv = torch.randn(H, S, 3, D, generator=g, dtype=torch.float64).to(dtype).to(device)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    got = _attention(q, k, v, causal).double().cpu()
    q64, k64, v64 = (t.double().cpu() for t in (q, k, v))
    s = q64 @ k64.transpose(1, 2) * D ** -0.5
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    want = torch.softmax(s, -1) @ v64
    assert not got.isnan().any()
    eps = 2 ** -8 if dtype is torch.bfloat16 else 2 ** -11
    assert (got - want).abs().max().item() < 4 * eps   # P rounded to the input dtype


@_SASS
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_sass_batched_attention(arch):
    """The attention kernel's four per-head products (two heads, QK^T and PV) are HMMA on
    both architectures, without spills."""
    specs = [("*fp16", 16)] * 4 + [("i32", 1), ("i32", 16), ("fp32", 1)] + [("i32", 16)] * 4
    ck = _heads_attention.compile(specs, (2, 32, 32, 32, True), 4, arch)
    ops = _sass_ops(ck)
    hmma = sum(n for o, n in ops.items() if o.startswith("HMMA"))
    assert hmma >= 2 * 2 * (32 * 32 * 32) // (16 * 8 * 16) // 4, ops
    assert ck.metadata["spills"] == 0, ck.metadata


@kit.jit
def _bmm_int8(A, Bm, C, BB: kit.constexpr, M: kit.constexpr, N: kit.constexpr,
              K: kit.constexpr):
    """C = A @ B (+ C's old values) on whole int8 [BB, M, K] x [BB, K, N] tiles, with `@`
    for the first product and kit.dot(acc=) for the second."""
    b3 = kit.arange(0, BB)[:, None, None]
    m3, n3 = kit.arange(0, M)[None, :, None], kit.arange(0, N)[None, None, :]
    k3 = kit.arange(0, K)
    a = kit.load(A + b3 * M * K + m3 * K + k3[None, None, :])
    b = kit.load(Bm + b3 * K * N + k3[None, :, None] * N + n3)
    c = kit.load(C + b3 * M * N + m3 * N + n3)
    kit.store(C + b3 * M * N + m3 * N + n3, kit.dot(a, b, a @ b + c))


@pytest.mark.parametrize("device", DEVICES)
def test_dot3d_int8(device):
    """int8 x int8 -> int32 per batch slice (exact), acc= an int32 tile, and `a @ b`."""
    g = torch.Generator().manual_seed(9)
    a = torch.randint(-128, 128, (2, 16, 64), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (2, 64, 32), generator=g, dtype=torch.int8)
    c = torch.randint(-1000, 1000, (2, 16, 32), generator=g, dtype=torch.int32)
    want = 2 * torch.bmm(a.long(), b.long()) + c.long()
    got = c.to(device)
    _bmm_int8[(1,)](a.to(device), b.to(device), got, BB=2, M=16, N=32, K=64)
    assert torch.equal(got.long().cpu(), want)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("BB", [1, 2, 4])
def test_dot3d_acc_stays_in_registers(arch, BB):
    """The loop-carried [B, M, N] accumulator is laid out as B mma tiles (the layout pass
    lifts the dots' layout through the expand_dims that stack the slices back), so taking
    the slices and stacking the products moves no fp32 element between threads: every fp32
    conversion and shape op of the kernel is a register rename."""
    specs = [("*bf16", 16)] * 2 + [("*fp32", 16)] * 2 + [("i32", 16)] * 6 + \
        [("i32", 1), ("i32", 16), ("i32", 16), ("i32", 1)]
    fn = _bmm.build_ir(specs, (BB, 64, 64, 32, "default", False, False), 4,
                       tma=arch == "sm_90a", arch=arch)
    moved = []
    for op in fn.walk():
        if op.name in ("convert_layout", "permute", "reshape", "split", "cat") and \
                op.operands[0].dtype.name == "fp32":
            src = op.operands[0].type
            for r in op.results:
                ls, ld = src.layout.to_linear(src.shape), r.type.layout.to_linear(r.shape)
                if (sorted(ls.lane), sorted(ls.warp)) != (sorted(ld.lane), sorted(ld.warp)) \
                        and op.name == "convert_layout":
                    moved.append(str(r.type))
    assert not moved, moved


@pytest.mark.usefixtures("memo_layout_check")
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("kernel", ["bmm", "bmm_acc", "attention"])
def test_dot3d_layouts_check(arch, kernel):
    """The layouts the pass gives the 3-d dot kernels (Expanded / stacked mma tiles for the
    results, the loaded acc and the epilogue's pointers) hold every element once and agree
    wherever the backend assumes they do (kitjit/ir/layout_check.py, thread by thread)."""
    from kitjit.ir.layout_check import problems

    if kernel == "attention":
        specs = [("*fp16", 16)] * 4 + [("i32", 1), ("i32", 16), ("fp32", 1)] + \
            [("i32", 16)] * 4
        fn = _heads_attention.build_ir(specs, (4, 32, 32, 32, True), 4,
                                       tma=arch == "sm_90a", arch=arch)
    else:
        dt = "fp32" if kernel == "bmm_acc" else "fp16"   # fp32: six split products a slice
        specs = [(f"*{dt}", 16)] * 2 + [("*fp32", 16)] * 2 + [("i32", 16)] * 6 + \
            [("i32", 1), ("i32", 16), ("i32", 16), ("i32", 1)]
        fn = _bmm.build_ir(specs, (4, 32, 32, 16, "ieee", kernel == "bmm_acc", False), 4,
                           tma=arch == "sm_90a", arch=arch)
    assert problems(fn) == []

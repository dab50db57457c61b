"""Gaps found by running a corpus of public Triton kernels (attorch, Liger-Kernel's newer
ops, unsloth, FlagGems; kept outside this repository) after only the import swap: each test
states one Triton behaviour those kernels relied on, in kitjit's own words."""

from __future__ import annotations

import pytest
import torch

import kitjit as kit
import kitjit.language as tl

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


# ------------------------------------------------------------------ triton.runtime.autotuner
def test_runtime_autotuner_triton_form():
    """flash-linear-attention subclasses `triton.runtime.autotuner.Autotuner`, calls its
    constructor with Triton's arguments and overrides `run`; `kernel[grid](...)` goes
    through that `run` with `grid=` among the keywords."""
    from kitjit.runtime.autotuner import Autotuner
    from kitjit.runtime.jit import JITFunction

    calls = []

    class Counting(Autotuner):
        def __init__(self, fn, arg_names, configs, key, reset_to_zero, restore_value, **kw):
            super().__init__(fn, arg_names, configs, key, reset_to_zero, restore_value, **kw)
            self.name = fn.__name__

        def run(self, *args, **kwargs):
            calls.append((self.keys, sorted(kwargs)))
            return super().run(*args, **kwargs)

    assert isinstance(_scale_kernel, JITFunction)
    tuner = Counting(_scale_kernel, _scale_kernel.arg_names,
                     [kit.Config({"BLOCK": 64}), kit.Config({"BLOCK": 128})], ["n"], None,
                     None, pre_hook=None, post_hook=None, prune_configs_by=None, warmup=None,
                     rep=None, use_cuda_graph=False, do_bench=None, cache_results=False)
    assert not tuner.user_defined_pre_hook and tuner.pre_hook is None
    x = torch.randn(300)
    y = torch.full_like(x, float("nan"))
    tuner[lambda m: (triton_cdiv(300, m["BLOCK"]),)](x, y, 300, 2.5)
    torch.testing.assert_close(y, x * 2.5)
    assert calls == [(["n"], ["grid"])]


@kit.jit
def _scale_kernel(X, Y, n, s, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    kit.store(Y + offs, kit.load(X + offs, mask=offs < n) * s, mask=offs < n)


def test_autotune_key_set_by_configs_is_skipped():
    """fla keys kernels on names that the configs set (`key=['BT', 'BV']` with BV tuned):
    Triton reads keys from the caller's arguments and skips those; so does kitjit."""
    tuner = kit.autotune([kit.Config({"BLOCK": 64}), kit.Config({"BLOCK": 128})],
                         key=["n", "BLOCK"])(_scale_kernel)
    assert tuner.key == ["n"]
    x = torch.randn(300)
    y = torch.full_like(x, float("nan"))
    tuner[lambda m: (triton_cdiv(300, m["BLOCK"]),)](x, y, 300, -1.5)
    torch.testing.assert_close(y, x * -1.5)


# ------------------------------------------------------------------ loops
@kit.jit
def _loop_optional(X, Y, n, USE_SQ: kit.constexpr, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    acc = kit.zeros((BLOCK,), kit.float32)
    sq = kit.zeros((BLOCK,), kit.float32) if USE_SQ else None
    for i in range(n):
        x = kit.load(X + i * BLOCK + offs)
        acc += x
        if USE_SQ:
            sq += x * x
    if USE_SQ:
        acc += sq
    kit.store(Y + offs, acc)


@kit.jit
def _loop_changes_none(X, Y, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    acc = None
    for i in range(n):
        acc = kit.load(X + i * BLOCK + offs)
    kit.store(Y + offs, acc)


def test_loop_keeps_a_none_that_a_constexpr_branch_would_update():
    """fla's chunk kernels: `b_dw = kit.zeros(...) if USE_DW else None` before a run-time
    loop and `if USE_DW: b_dw += ...` inside it; with USE_DW false the name stays None,
    which Triton accepts."""
    x = torch.randn(5, 32)
    for use_sq, want in ((False, x.sum(0)), (True, x.sum(0) + (x * x).sum(0))):
        y = torch.full((32,), float("nan"))
        _loop_optional[(1,)](x, y, 5, USE_SQ=use_sq, BLOCK=32)
        torch.testing.assert_close(y, want)


def test_loop_that_changes_a_none_is_still_an_error():
    from kitjit.frontend.errors import CompileError

    with pytest.raises(CompileError, match="'acc' holds NoneType None and is reassigned inside "
                                           "a runtime loop"):
        _loop_changes_none[(1,)](torch.randn(64), torch.empty(32), 2, BLOCK=32)


# ------------------------------------------------------------------ casts
@kit.jit
def _cast_same(X, Y, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    x = kit.load(X + offs, mask=offs < n)
    # fla's solve_tril: a dtype-generic store with rounding; for fp32 -> fp32 a no-op
    kit.store(Y + offs, x.to(Y.dtype.element_ty, fp_downcast_rounding="rtz"), mask=offs < n)


def test_cast_to_the_same_type_ignores_rounding():
    x = torch.randn(100) * 1e3
    for dt in (torch.float32, torch.bfloat16):
        y = torch.full((100,), float("nan"), dtype=dt)
        _cast_same[(1,)](x, y, 100, BLOCK=128)
        if dt is torch.float32:
            assert torch.equal(y, x)
        else:  # rtz: never larger in magnitude than x, within one bf16 ulp
            assert (y.float().abs() <= x.abs()).all()
            torch.testing.assert_close(y.float(), x, rtol=2 ** -7, atol=0)


def test_missing_top_level_triton_name():
    """A Triton top-level name kitjit lacks (`triton.compile`) is said to be unsupported, not
    to be missing from Triton; FlagGems' `triton.KernelInterface` is there (a base class)."""
    with pytest.raises(AttributeError, match=r"^kitjit.compile is not supported yet "
                                             r"\(Triton's triton.compile\)$"):
        kit.compile  # noqa: B018
    assert isinstance(kit.jit(lambda x: x), kit.KernelInterface)
    with pytest.raises(AttributeError, match="does not exist"):
        kit.no_such_name  # noqa: B018


# ------------------------------------------------------------------ standard helpers
@kit.jit
def _std_helpers(X, Y, Z, I, n, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    x = kit.load(X + offs[:, None] * BLOCK + offs[None, :])
    z = kit.zeros_like(x)  # fla / FlagGems: tl.zeros_like
    kit.store(Y + offs[:, None] * BLOCK + offs[None, :], kit.softmax(x, 1, keep_dims=True) + z)
    kit.store(Z + offs, kit.softmax(kit.sum(x, 0)))
    pid = kit.program_id(0)
    i, j = kit.swizzle2d(pid // n, pid % n, 5, n, 2)
    kit.store(I + pid * 2, i)
    kit.store(I + pid * 2 + 1, j)


def _swizzle_ref(i, j, size_i, size_j, size_g):
    ij = i * size_j + j
    g = ij // (size_g * size_j)
    off = g * size_g
    rows = min(size_i - off, size_g)
    ij %= size_g * size_j
    return off + ij % rows, ij // rows


def test_zeros_like_softmax_swizzle2d():
    x = torch.randn(16, 16) * 3
    y, z = torch.full_like(x, float("nan")), torch.full((16,), float("nan"))
    idx = torch.full((15, 2), -1, dtype=torch.int32)
    _std_helpers[(15,)](x, y, z, idx, 3, BLOCK=16)
    torch.testing.assert_close(y, torch.softmax(x.double(), 1).float())
    torch.testing.assert_close(z, torch.softmax(x.double().sum(0), 0).float())
    want = [_swizzle_ref(p // 3, p % 3, 5, 3, 2) for p in range(15)]
    assert idx.tolist() == [list(w) for w in want]
    assert sorted(map(tuple, idx.tolist())) == [(a, b) for a in range(5) for b in range(3)]


def test_out_of_resources_is_tritons_exception():
    """Libraries retry with smaller tiles on `triton.runtime.errors.OutOfResources` (and
    import it from there): kitjit's shared-memory error is that class (a CompileError too)."""
    from kitjit.frontend.errors import CompileError

    import kitjit.runtime.errors as errors

    assert kit.OutOfResources is errors.OutOfResources is kit.runtime.OutOfResources
    specs = [("*fp32", 16)] * 3 + [("i32", 1)] * 3 + [("i32", 1), ("i32", 16)] * 2
    with pytest.raises(errors.OutOfResources) as e:
        _mm_f32.compile(specs, (32, 32, 16, "default"), 4, "sm_90a", max_shared=64)
    assert isinstance(e.value, CompileError) and e.value.limit == 64
    assert e.value.required > 64 and e.value.name == "shared memory"


@kit.jit
def _static_fails(X, BLOCK: kit.constexpr):
    kit.static_assert(BLOCK % 32 == 0, "BLOCK must be a multiple of 32")
    kit.store(X + kit.arange(0, BLOCK), kit.zeros((BLOCK,), kit.float32))


@kit.jit
def _bad_asm(X, BLOCK: kit.constexpr):
    i = kit.arange(0, BLOCK)
    y = kit.inline_asm_elementwise("not.an.instruction $0, $1;", "=r,r", [i],
                                   dtype=kit.int32, is_pure=True, pack=1)
    kit.store(X + i, y)


def test_tritons_error_classes():
    """The exceptions libraries catch by Triton's names: TritonError the base of kitjit's
    errors, static_assert's CompileTimeAssertionFailure, the assembler's PTXASError."""
    import kitjit.compiler.errors as cerrors
    import kitjit.runtime.autotuner as autotuner
    import kitjit.runtime.errors as errors

    assert kit.TritonError is errors.TritonError is cerrors.TritonError
    assert issubclass(kit.CompilationError, kit.TritonError)
    assert issubclass(kit.OutOfResources, kit.TritonError)
    assert autotuner.OutOfResources is kit.OutOfResources
    assert autotuner.PTXASError is errors.PTXASError
    assert issubclass(errors.PTXASError, kit.TritonError)
    from kitjit.autotune import AutotuneError

    assert errors.AutotunerError is autotuner.AutotunerError is AutotuneError
    from kitjit.interpreter.errors import DeviceAssertError, OutOfBoundsError, RaceError

    assert kit.InterpreterError is errors.InterpreterError is kit.runtime.InterpreterError
    assert all(issubclass(c, kit.InterpreterError) and issubclass(c, kit.TritonError)
               for c in (DeviceAssertError, OutOfBoundsError, RaceError))
    assert issubclass(AutotuneError, kit.TritonError)
    with pytest.raises(cerrors.CompileTimeAssertionFailure, match="multiple of 32"):
        _static_fails.compile([("*fp32", 16)], (48,), 4, "sm_90a")
    with pytest.raises(errors.PTXASError, match="_bad_asm"):
        _bad_asm.compile([("*i32", 16)], (32,), 4, "sm_90a")


# ------------------------------------------------------------------ int8 dot, out_dtype
@kit.jit
def _mm_small(A, B, C, M, N, K, KIND: kit.constexpr, BM: kit.constexpr, BN: kit.constexpr,
              BK: kit.constexpr):
    rm = kit.arange(0, BM)
    rn = kit.arange(0, BN)
    rk = kit.arange(0, BK)
    a = kit.load(A + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K),
                 other=0)
    b = kit.load(B + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N),
                 other=0)
    if KIND == "i8":
        acc = kit.full((BM, BN), 7, kit.int32)
        acc = kit.dot(a, b, acc)
    elif KIND == "f16out":
        acc = kit.dot(a, b, out_dtype=kit.float16)
    else:
        acc = kit.dot(a, b, kit.full((BM, BN), 0.5, kit.float16), out_dtype=kit.float16,
                      max_num_imprecise_acc=32)
    kit.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("device", DEVICES)
def test_dot_int8_and_fp16_out(device):
    """Triton's int8 x int8 -> int32 dot (exact) and out_dtype=float16 (an fp16 result)."""
    g = torch.Generator().manual_seed(3)
    a = torch.randint(-128, 128, (30, 500), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (500, 20), generator=g, dtype=torch.int8)
    c = torch.full((30, 20), -1, dtype=torch.int32)
    a, b, c = a.to(device), b.to(device), c.to(device)
    _mm_small[(1,)](a, b, c, 30, 20, 500, KIND="i8", BM=32, BN=32, BK=512)
    want = a.cpu().long() @ b.cpu().long() + 7
    assert torch.equal(c.cpu().long(), want)
    x = (torch.randn(30, 40, generator=g) / 4).half().to(device)
    y = (torch.randn(40, 20, generator=g) / 4).half().to(device)
    exact = x.double().cpu() @ y.double().cpu()
    for kind, extra in (("f16out", 0.0), ("f16acc", 0.5)):
        z = torch.full((30, 20), float("nan"), dtype=torch.float16, device=device)
        _mm_small[(1,)](x, y, z, 30, 20, 40, KIND=kind, BM=32, BN=32, BK=64)
        torch.testing.assert_close(z.cpu().double(), exact + extra, rtol=1e-3, atol=1e-3)


def test_dot_int8_large_k_is_not_supported_yet():
    from kitjit.frontend.errors import CompileError

    a = torch.ones(16, 2048, dtype=torch.int8)
    with pytest.raises(CompileError, match="K=2048 > 1024 is not supported yet"):
        _mm_small[(1,)](a, a.T.contiguous(), torch.empty(16, 16, dtype=torch.int32), 16, 16,
                        2048, KIND="i8", BM=16, BN=16, BK=2048)


def test_sass_dot_int8_and_fp16_out():
    """Both forms compile for sm_90a onto f16 tensor-core mmas."""
    from kitjit import tools

    for kind, ptrs in (("i8", ("*i8", "*i8", "*i32")), ("f16acc", ("*fp16",) * 3)):
        specs = [(p, 16) for p in ptrs] + [("i32", 1)] * 3
        ck = _mm_small.compile(specs, (kind, 32, 32, 64), 4, "sm_90a")
        try:
            ops = tools.sass_opcodes(tools.disassemble(ck.asm["cubin"]))
        except tools.ToolError as e:
            pytest.skip(str(e))
        assert any(o.startswith("HMMA") for o in ops) and ck.metadata["spills"] == 0, ops


# ------------------------------------------------------------------ Triton library internals
@kit.jit
def _flip_sign_bits(X, Y, BLOCK: kit.constexpr, NEG: kit.constexpr = tl.core.CONSTEXPR_0):
    # the names a bitonic argsort copied from Triton's library uses (fla's NSA top-k):
    # x.numel, tl.core.get_int_dtype, tl.standard._log2, tl.core.CONSTEXPR_0
    x = kit.load(X + kit.arange(0, BLOCK))
    n: kit.constexpr = x.numel
    steps: kit.constexpr = tl.standard._log2(n)
    idt = tl.core.get_int_dtype(bitwidth=x.dtype.primitive_bitwidth, signed=True)
    bits = x.to(idt, bitcast=True)
    if NEG:
        bits = bits ^ -(1 << 31)  # the sign bit (a literal that fits int32)
    kit.store(Y + kit.arange(0, BLOCK), bits.to(x.dtype, bitcast=True) * steps)


def test_triton_library_internals():
    x = torch.randn(64)
    for neg, sign in ((False, 1.0), (True, -1.0)):
        y = torch.full_like(x, float("nan"))
        if neg:
            _flip_sign_bits[(1,)](x, y, BLOCK=64, NEG=True)
        else:
            _flip_sign_bits[(1,)](x, y, BLOCK=64)
        torch.testing.assert_close(y, sign * 6 * x)
    assert tl.standard._is_power_of_two(64) and not tl.standard._is_power_of_two(48)


# ------------------------------------------------------------------ hints keep their layout
@kit.jit
def _mm_hinted(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr):
    # applied-ai's split-K GEMM: row/column offsets pass through multiple_of/max_contiguous
    # and are then used along different dims of 2-d tiles; the hint's result must keep its
    # operand's registers and layout (was an internal error on the GPU path)
    rm = kit.program_id(0) * BM + kit.arange(0, BM)
    rn = kit.program_id(1) * BN + kit.arange(0, BN)
    rk = kit.arange(0, BK)
    am = kit.max_contiguous(kit.multiple_of(rm, BM), BM)
    bn = kit.max_contiguous(kit.multiple_of(rn, BN), BN)
    acc = kit.zeros((BM, BN), dtype=kit.float32)
    for k0 in range(0, K, BK):
        a = kit.load(A + am[:, None] * K + (k0 + rk)[None, :], mask=(k0 + rk)[None, :] < K,
                     other=0.0)
        b = kit.load(B + (k0 + rk)[:, None] * N + bn[None, :], mask=(k0 + rk)[:, None] < K,
                     other=0.0)
        acc = kit.dot(a, b, acc)
    kit.store(C + rm[:, None] * N + rn[None, :], acc.to(kit.float16),
              mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("device", DEVICES)
def test_hinted_offsets_in_a_gemm(device):
    g = torch.Generator().manual_seed(5)
    a = torch.randn(64, 200, generator=g).half().to(device)
    b = torch.randn(200, 128, generator=g).half().to(device)
    c = torch.full((64, 128), float("nan"), dtype=torch.float16, device=device)
    _mm_hinted[(1, 2)](a, b, c, 64, 128, 200, BM=64, BN=64, BK=128, num_warps=8)
    torch.testing.assert_close(c.cpu().double(), a.cpu().double() @ b.cpu().double(),
                               rtol=2e-3, atol=2e-2)


def test_sass_hinted_offsets_in_a_gemm():
    specs = [("*fp16", 16)] * 3 + [("i32", 16)] * 3
    ck = _mm_hinted.compile(specs, (64, 64, 128), 8, "sm_90a")
    assert ck.metadata["spills"] == 0


# ------------------------------------------------------------------ Triton's keyword names
@kit.jit
def _keywords(X, Y, Z, W, BLOCK: kit.constexpr):
    # kernl calls tl.sum(input=...), tl.load(pointer=...), tl.store(pointer=, value=)
    offs = kit.arange(0, BLOCK)
    x = kit.load(pointer=X + offs[:, None] * BLOCK + offs[None, :])
    s = kit.sum(input=x, axis=1, dtype=kit.float32)
    m = kit.max(input=x, axis=1)
    r = kit.reshape(kit.trans(input=x), (BLOCK * BLOCK,))
    kit.store(pointer=Y + offs, value=s + m)
    kit.store(pointer=Z + kit.arange(0, BLOCK * BLOCK), value=r.to(kit.float32))
    d = kit.dot(input=x, other=kit.permute(x, (1, 0)))
    n = kit.maximum(x.to(kit.float32), kit.full((BLOCK, BLOCK), float("nan"), kit.float32),
                    propagate_nan=kit.PropagateNan.ALL)
    kit.store(W + offs[:, None] * BLOCK + offs[None, :], d + kit.expand_dims(input=s, axis=1)
              + n)


def test_tritons_keyword_names():
    x = torch.randn(16, 16).half()
    y, z = torch.full((16,), float("nan")), torch.full((256,), float("nan"))
    w = torch.zeros(16, 16)
    _keywords[(1,)](x, y, z, w, BLOCK=16)
    xd = x.double()
    torch.testing.assert_close(y.double(), xd.sum(1) + xd.amax(1), rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(z.double(), xd.T.reshape(-1))
    assert w.isnan().all()  # propagate_nan=ALL: the NaN side wins everywhere


# ------------------------------------------------------------------ int literals, int tiles
@kit.jit
def _hash_bits(X, Y, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    x = kit.load(X + offs)
    golden = 2654435761   # assigned: a uint32 scalar (Triton's to_tensor), so the product
    kit.store(Y + offs, (x * golden) % 1000)   # of an int32 tile with it is uint32


@kit.jit
def _big_literal(X, BLOCK: kit.constexpr):
    offs = kit.arange(0, BLOCK)
    x = kit.load(X + offs)
    kit.store(X + offs, x * 2654435761)


def test_int_literals_next_to_int_tiles_as_tritons():
    """Triton 3.6 (checked in its interpreter, which shares the compiler's type rules): an
    int literal beside an int tile takes the tile's dtype and must fit it (else ValueError
    "Scalar ... is out of range"); an assigned one is a to_tensor scalar (uint32 here)."""
    x = torch.arange(1, 65, dtype=torch.int32) * 12345 - 300000
    y = torch.full((64,), -7, dtype=torch.int64)
    _hash_bits[(1,)](x, y, BLOCK=64)
    w = ((x.long() & 0xFFFFFFFF) * 2654435761 & 0xFFFFFFFF) % 1000
    assert torch.equal(y, w)
    from kitjit.frontend.errors import CompileError
    with pytest.raises(CompileError, match="Scalar 2654435761 is out of range"):
        _big_literal[(1,)](x, BLOCK=64)


# ------------------------------------------------------------------ tl.extra.cuda registers
@kit.jit
def _sregs(X, T):
    i = kit.arange(0, 16)
    t0 = tl.extra.cuda.globaltimer()
    kit.store(X + i, i * 0 + tl.extra.cuda.smid())
    t1 = tl.extra.cuda.globaltimer()
    kit.store(T + kit.arange(0, 2), kit.where(kit.arange(0, 2) == 0, t0, t1))


@pytest.mark.parametrize("device", DEVICES)
def test_cuda_smid_and_globaltimer(device):
    """Triton's tl.extra.cuda.smid() (int32: the SM) and globaltimer() (int64 ns, each read
    where it stands): 0 and the host's clock in the interpreter; %smid and two
    %globaltimer reads in the PTX."""
    x = torch.full((16,), -1, dtype=torch.int32, device=device)
    t = torch.full((2,), -1, dtype=torch.int64, device=device)
    _sregs[(1,)](x, t)
    n_sms = torch.cuda.get_device_properties(0).multi_processor_count if x.is_cuda else 1
    assert x.min() == x.max() and 0 <= int(x[0]) < n_sms
    assert 0 < int(t[0]) <= int(t[1])
    ptx = _sregs.compile([("*i32", 16), ("*i64", 16)], (), 4, "sm_90a").asm["ptx"]
    assert ptx.count("%globaltimer") == 2 and ptx.count("%smid") == 1


@kit.jit
def _past_the_end(X, Y):
    i = kit.arange(0, 32)
    kit.store(Y + i, kit.load(X + i))   # X holds 16 elements: no mask


def test_interpreter_error_is_catchable_by_tritons_name(monkeypatch):
    """`except triton.runtime.errors.InterpreterError` catches what the interpreter finds
    wrong in a run (here a load past the tensor)."""
    import kitjit.runtime.errors as errors

    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    with pytest.raises(errors.InterpreterError, match="out of bounds|outside"):
        _past_the_end[(1,)](torch.ones(16), torch.empty(32))

"""Shape ops on register tiles (kit.trans/permute/.T, reshape/view/ravel/squeeze/unsqueeze,
join/split/interleave, cat, flip, gather, multi-axis expand_dims, broadcast): each in the
interpreter against torch (ragged sizes through masks, outputs poisoned), chained with the
ops around them (trans then dot, reshape then sum, split of a join, gather with random
indices); each compiled for sm_90a with no spills, and the ops that only relabel registers
with no shared memory (STS/LDS) in a kernel doing just that op; the same checks on a GPU
(marked gpu).
"""

from __future__ import annotations

import pathlib

import pytest
import torch
from kitjit.frontend.errors import CompileError

import kitjit as kit
from kitjit.tools import find_tool

HERE = pathlib.Path(__file__).resolve()


def poisoned(shape, dtype, device):
    shape = (shape,) if isinstance(shape, int) else shape
    v = float("nan") if dtype.is_floating_point else -1234567
    return torch.full(shape, v, dtype=dtype, device=device)


def rand(shape, dtype=torch.float32, device="cpu"):
    shape = (shape,) if isinstance(shape, int) else shape
    return torch.randn(shape, dtype=torch.float64).to(dtype).to(device)


# ============================================================================ kernels
@kit.jit
def trans_dot(A, Bt, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
              METHOD: kit.constexpr):
    """C = A @ Bt^T with B loaded as stored ([N, K]) and transposed in registers."""
    rm = kit.arange(0, BM)
    rn = kit.arange(0, BN)
    rk = kit.arange(0, BK)
    a = kit.load(A + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K),
                 other=0.0)
    bt = kit.load(Bt + rn[:, None] * K + rk[None, :],
                  mask=(rn[:, None] < N) & (rk[None, :] < K), other=0.0)
    if METHOD == 0:
        b = kit.trans(bt)
    elif METHOD == 1:
        b = bt.T
    else:
        b = bt.trans()
    c = kit.dot(a, b)
    kit.store(C + rm[:, None] * N + rn[None, :], c, mask=(rm[:, None] < M) & (rn[None, :] < N))


@kit.jit
def transpose(X, Y, M, N, BM: kit.constexpr, BN: kit.constexpr):
    """Y[N, M] = X[M, N]^T: load, kit.trans, store (the layout of Y's store follows)."""
    r = kit.arange(0, BM)
    c = kit.arange(0, BN)
    x = kit.load(X + r[:, None] * N + c[None, :], mask=(r[:, None] < M) & (c[None, :] < N))
    y = kit.trans(x)
    kit.store(Y + c[:, None] * M + r[None, :], y, mask=(c[:, None] < N) & (r[None, :] < M))


@kit.jit
def permute3(X, Y, A: kit.constexpr, B: kit.constexpr, C: kit.constexpr):
    """Y = X.permute(2, 0, 1) of a [A, B, C] tile, as kit.permute and as the method."""
    i = kit.arange(0, A)[:, None, None]
    j = kit.arange(0, B)[None, :, None]
    k = kit.arange(0, C)[None, None, :]
    x = kit.load(X + i * (B * C) + j * C + k)
    y = kit.permute(x, 2, 0, 1) + x.permute((2, 0, 1))
    ii = kit.arange(0, C)[:, None, None]
    jj = kit.arange(0, A)[None, :, None]
    kk = kit.arange(0, B)[None, None, :]
    kit.store(Y + ii * (A * B) + jj * B + kk, y)


@kit.jit
def reshape_sum(X, S, F, n, M: kit.constexpr, N: kit.constexpr):
    """Row sums of X viewed as [M, N] (masked past n), and X's rows flattened back."""
    o = kit.arange(0, M * N)
    x = kit.load(X + o, mask=o < n, other=0.0)
    x2 = kit.reshape(x, M, N)
    kit.store(S + kit.arange(0, M), kit.sum(x2, axis=1))
    back = x2.view((M * N,)) + kit.ravel(x2.reshape((M, N), can_reorder=True))
    kit.store(F + o, back, mask=o < n)


@kit.jit
def reshape_only(X, Y, M: kit.constexpr, N: kit.constexpr):
    """[M*N] -> [M, N]: a relabeling of each thread's registers."""
    o = kit.arange(0, M * N)
    x = kit.load(X + o)
    y = kit.reshape(x, (M, N))
    kit.store(Y + kit.arange(0, M)[:, None] * N + kit.arange(0, N)[None, :], y)


@kit.jit
def join_split(A, B, J, I, P, Q, n, BLOCK: kit.constexpr):
    """J[n, 2] = join(a, b), I[2n] = interleave(a, b), (P, Q) = split(join(a, b) * 2)."""
    o = kit.arange(0, BLOCK)
    m = o < n
    a = kit.load(A + o, mask=m)
    b = kit.load(B + o, mask=m)
    j = kit.join(a, b)
    t = kit.arange(0, 2)[None, :]
    kit.store(J + o[:, None] * 2 + t, j, mask=m[:, None])
    o2 = kit.arange(0, 2 * BLOCK)
    kit.store(I + o2, kit.interleave(a, b), mask=o2 < 2 * n)
    p, q = kit.split(j * 2.0)
    kit.store(P + o, p, mask=m)
    kit.store(Q + o, q.to(Q.dtype.element_ty), mask=m)


@kit.jit
def split_loaded(X, Re, Im, n, BLOCK: kit.constexpr):
    """A [n, 2] (complex-like) tile split into its two halves; x.split() as a method."""
    o = kit.arange(0, BLOCK)
    x = kit.load(X + o[:, None] * 2 + kit.arange(0, 2)[None, :], mask=(o < n)[:, None])
    re, im = x.split()
    kit.store(Re + o, re, mask=o < n)
    kit.store(Im + o, im, mask=o < n)


@kit.jit
def cat_kernel(A, B, Y, n, BLOCK: kit.constexpr):
    o = kit.arange(0, BLOCK)
    a = kit.load(A + o, mask=o < n)
    b = kit.load(B + o, mask=o < n)
    y = kit.cat(a, b, can_reorder=True)
    o2 = kit.arange(0, 2 * BLOCK)
    kit.store(Y + o2, y, mask=(o2 % BLOCK) < n)


@kit.jit
def flip_kernel(X, Y, M: kit.constexpr, N: kit.constexpr, DIM: kit.constexpr):
    r = kit.arange(0, M)[:, None]
    c = kit.arange(0, N)[None, :]
    x = kit.load(X + r * N + c)
    if DIM == 2:
        y = kit.flip(x)
    else:
        y = x.flip(DIM)
    kit.store(Y + r * N + c, y)


@kit.jit
def gather_kernel(S, I, Y, M: kit.constexpr, N: kit.constexpr, M2: kit.constexpr,
                  N2: kit.constexpr, AXIS: kit.constexpr):
    s = kit.load(S + kit.arange(0, M)[:, None] * N + kit.arange(0, N)[None, :])
    r = kit.arange(0, M2)[:, None]
    c = kit.arange(0, N2)[None, :]
    idx = kit.load(I + r * N2 + c)
    y = kit.gather(s, idx, AXIS) + s.gather(idx, axis=AXIS)
    kit.store(Y + r * N2 + c, y)


@kit.jit
def dims_kernel(X, Y, Z, W, BLOCK: kit.constexpr):
    """Multi-axis expand_dims, kit.broadcast, broadcast_to with separate ints, squeeze and
    unsqueeze."""
    o = kit.arange(0, BLOCK)
    x = kit.load(X + o)
    e = kit.expand_dims(x, (0, 2))  # [1, BLOCK, 1]
    f = e.expand_dims(-1)  # [1, BLOCK, 1, 1]
    g = kit.squeeze(kit.squeeze(kit.squeeze(f, 3), 2), 0)
    a, b = kit.broadcast(x[:, None], kit.arange(0, 4)[None, :].to(kit.float32))
    kit.store(Y + o[:, None] * 4 + kit.arange(0, 4)[None, :], a + b)
    kit.store(Z + o, g)
    u = kit.unsqueeze(x, 1).broadcast_to(BLOCK, 2)
    kit.store(W + o[:, None] * 2 + kit.arange(0, 2)[None, :], u)


# ============================================================================ checks
# Each check runs on `device` ("cpu": the interpreter; "cuda": the GPU, test at the end).
def check_trans_dot(device, method):
    M, N, K = 13, 16, 29
    a = rand((M, K), torch.float16, device)
    bt = rand((N, K), torch.float16, device)
    c = poisoned((M, N), torch.float32, device)
    trans_dot[(1,)](a, bt, c, M, N, K, BM=16, BN=16, BK=32, METHOD=method)
    ref = a.double().cpu() @ bt.double().cpu().T
    torch.testing.assert_close(c.cpu().double(), ref, rtol=1e-3, atol=1e-3)


def check_transpose(device, M, N, BM, BN, dtype):
    x = rand((M, N), dtype, device)
    y = poisoned((N, M), dtype, device)
    transpose[(1,)](x, y, M, N, BM=BM, BN=BN)
    assert torch.equal(y.cpu(), x.cpu().T)


def check_permute3(device):
    x = rand((4, 8, 2), torch.float32, device)
    y = poisoned((2, 4, 8), torch.float32, device)
    permute3[(1,)](x, y, A=4, B=8, C=2)
    assert torch.equal(y.cpu(), 2 * x.cpu().permute(2, 0, 1))


def check_reshape_sum(device, n):
    M, N = 8, 16
    x = rand(n, torch.float32, device)
    s = poisoned(M, torch.float32, device)
    f = poisoned(n, torch.float32, device)
    reshape_sum[(1,)](x, s, f, n, M=M, N=N)
    xp = torch.zeros(M * N, dtype=torch.float64)
    xp[:n] = x.cpu().double()
    torch.testing.assert_close(s.cpu().double(), xp.reshape(M, N).sum(1), rtol=1e-5, atol=1e-5)
    assert torch.equal(f.cpu(), 2 * x.cpu())


def check_join_split(device, n, dtype):
    BLOCK = 64
    a, b = rand(n, dtype, device), rand(n, dtype, device)
    j = poisoned((n, 2), dtype, device)
    i = poisoned(2 * n, dtype, device)
    p, q = poisoned(n, dtype, device), poisoned(n, torch.float32, device)
    join_split[(1,)](a, b, j, i, p, q, n, BLOCK=BLOCK)
    ref = torch.stack([a.cpu(), b.cpu()], -1)
    assert torch.equal(j.cpu(), ref)
    assert torch.equal(i.cpu(), ref.reshape(-1))
    assert torch.equal(p.cpu(), 2 * a.cpu())
    assert torch.equal(q.cpu(), (2 * b.cpu()).float())


def check_split_loaded(device, n):
    x = rand((n, 2), torch.float32, device)
    re, im = poisoned(n, torch.float32, device), poisoned(n, torch.float32, device)
    split_loaded[(1,)](x, re, im, n, BLOCK=32)
    assert torch.equal(re.cpu(), x.cpu()[:, 0]) and torch.equal(im.cpu(), x.cpu()[:, 1])


def check_cat(device, n):
    BLOCK = 32
    a, b = rand(n, torch.float32, device), rand(n, torch.float32, device)
    y = poisoned(2 * BLOCK, torch.float32, device)
    cat_kernel[(1,)](a, b, y, n, BLOCK=BLOCK)
    assert torch.equal(y.cpu()[:n], a.cpu()) and torch.equal(y.cpu()[BLOCK:BLOCK + n], b.cpu())
    assert y.cpu()[n:BLOCK].isnan().all()


def check_flip(device, M, N, dim):
    x = rand((M, N), torch.float32, device)
    y = poisoned((M, N), torch.float32, device)
    flip_kernel[(1,)](x, y, M=M, N=N, DIM=dim)
    assert torch.equal(y.cpu(), x.cpu().flip(1 if dim == 2 else dim))


def check_gather(device, axis, shapes):
    (M, N), (M2, N2) = shapes
    s = rand((M, N), torch.float32, device)
    n = (M, N)[axis]
    idx = torch.randint(-2 * n, 2 * n, (M2, N2), dtype=torch.int32)  # modulo n, documented
    y = poisoned((M2, N2), torch.float32, device)
    gather_kernel[(1,)](s, idx.to(device), y, M=M, N=N, M2=M2, N2=N2, AXIS=axis)
    ref = torch.gather(s.cpu(), axis, (idx % n).long())
    assert torch.equal(y.cpu(), 2 * ref)


def check_dims(device):
    B = 16
    x = rand(B, torch.float32, device)
    y = poisoned((B, 4), torch.float32, device)
    z = poisoned(B, torch.float32, device)
    w = poisoned((B, 2), torch.float32, device)
    dims_kernel[(1,)](x, y, z, w, BLOCK=B)
    assert torch.equal(y.cpu(), x.cpu()[:, None] + torch.arange(4.0)[None, :])
    assert torch.equal(z.cpu(), x.cpu())
    assert torch.equal(w.cpu(), x.cpu()[:, None].expand(B, 2))


CHECKS = [
    *[(f"trans_dot{m}", check_trans_dot, (m,)) for m in (0, 1, 2)],
    ("transpose_fp32", check_transpose, (13, 30, 16, 32, torch.float32)),
    ("transpose_fp16", check_transpose, (64, 64, 64, 64, torch.float16)),
    ("transpose_i32", check_transpose, (7, 5, 8, 8, torch.int32)),
    ("permute3", check_permute3, ()),
    ("reshape_sum_full", check_reshape_sum, (128,)),
    ("reshape_sum_ragged", check_reshape_sum, (77,)),
    ("join_split_fp32", check_join_split, (50, torch.float32)),
    ("join_split_bf16", check_join_split, (64, torch.bfloat16)),
    ("split_loaded", check_split_loaded, (29,)),
    ("cat", check_cat, (21,)),
    *[(f"flip_{m}x{n}_d{d}", check_flip, (m, n, d))
      for m, n in ((4, 8), (8, 64), (64, 4)) for d in (0, 1, 2)],
    ("gather_axis0", check_gather, (0, ((8, 16), (4, 16)))),
    ("gather_axis1", check_gather, (1, ((8, 16), (8, 32)))),
    ("dims", check_dims, ()),
]


@pytest.mark.parametrize("name,fn,args", CHECKS, ids=[c[0] for c in CHECKS])
def test_interpreter(name, fn, args):
    fn("cpu", *args)


@pytest.mark.gpu
@pytest.mark.parametrize("name,fn,args", CHECKS, ids=[c[0] for c in CHECKS])
def test_gpu(name, fn, args):
    fn("cuda", *args)


def test_interpreter_matches_numpy_semantics_of_nan_and_inf():
    x = torch.tensor([[1.0, float("nan")], [float("inf"), -float("inf")]] * 2)
    y = poisoned((2, 4), torch.float32, "cpu")
    transpose[(1,)](x, y, 4, 2, BM=4, BN=2)
    assert torch.equal(y.isnan(), x.T.isnan()) and torch.equal(y.nan_to_num(), x.T.nan_to_num())


# ============================================================================ errors
def _src(tmp_path, body: str):
    import importlib.util

    p = tmp_path / "k_err.py"
    p.write_text("import kitjit as kit\n\n@kit.jit\ndef k(X, BLOCK: kit.constexpr):\n"
                 "    x = kit.load(X + kit.arange(0, BLOCK))\n"
                 f"    y = {body}\n    kit.store(X + kit.arange(0, BLOCK), x)\n")
    spec = importlib.util.spec_from_file_location("k_err", p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.k


@pytest.mark.parametrize("body,msg", [
    ("kit.split(x[:, None])", "last dim of size 2"),
    ("kit.split(x[:2])", "indexed"),
    ("kit.permute(x[:, None], 0, 0)", "not a permutation"),
    ("kit.trans(x)", "not a permutation"),
    ("x.T", "not a permutation"),
    ("kit.reshape(x, 4, 4)", "elements"),
    ("kit.reshape(x, 3, 6)", "power of two"),
    ("kit.gather(x, x, 0)", "integer tile"),
    ("kit.gather(x[:, None], kit.arange(0, 4), 0)", "rank"),
    ("kit.cat(x, x[:, None])", "one shape"),
    ("kit.join(x, x.to(kit.float16))", "dtypes"),
    ("kit.flip(x, 1)", "out of range"),
    ("kit.squeeze(x, 0)", "not 1"),
    ("kit.split(kit.join(1.0, 2.0))", "not supported yet"),
])
def test_errors_are_located(tmp_path, body, msg):
    k = _src(tmp_path, body)
    with pytest.raises(CompileError, match=msg) as e:
        k[(1,)](torch.zeros(32), BLOCK=32)
    assert "k_err.py:6" in str(e.value)


# ============================================================================ SASS
needs_sass = pytest.mark.skipif(find_tool("cuobjdump") is None or find_tool("nvdisasm") is None,
                                reason="cuobjdump/nvdisasm not found")

F32 = "*fp32:16"
# (kernel, signature, constexprs, in registers?)
SASS_CASES = [
    ("transpose", [F32, F32, "i32", "i32"], {"BM": 64, "BN": 32}, True),
    ("permute3", [F32, F32], {"A": 4, "B": 8, "C": 2}, True),
    ("reshape_only", [F32, F32], {"M": 16, "N": 32}, True),
    ("split_loaded", [F32, F32, F32, "i32"], {"BLOCK": 256}, True),
    ("cat_kernel", [F32, F32, F32, "i32"], {"BLOCK": 256}, True),
    ("join_split", ["*bf16:16"] * 5 + [F32, "i32"], {"BLOCK": 512}, True),
    ("flip_kernel", [F32, F32], {"M": 64, "N": 4, "DIM": 1}, True),  # within threads
    ("flip_kernel", [F32, F32], {"M": 4, "N": 64, "DIM": 1}, True),  # across lanes: SHFL
    ("flip_kernel", [F32, F32], {"M": 64, "N": 4, "DIM": 0}, False),  # across warps
    ("gather_kernel", [F32, "*i32:16", F32], {"M": 8, "N": 16, "M2": 4, "N2": 16, "AXIS": 0},
     False),
    ("trans_dot", ["*fp16:16", "*fp16:16", F32, "i32", "i32", "i32"],
     {"BM": 64, "BN": 64, "BK": 32, "METHOD": 1}, False),
    ("reshape_sum", [F32, F32, F32, "i32"], {"M": 8, "N": 128}, True),  # rows within warps
    ("dims_kernel", [F32] * 4, {"BLOCK": 128}, True),
]


@needs_sass
@pytest.mark.parametrize("kernel,sig,consts,regs", SASS_CASES,
                         ids=[f"{c[0]}-{'-'.join(map(str, c[2].values()))}" for c in SASS_CASES])
def test_sass(kernel, sig, consts, regs):
    from kitjit.tools import disassemble, sass_opcodes

    ck = kit.compile_aot(str(HERE), kernel, sig, consts, 4, "sm_90a")
    ops = sass_opcodes(disassemble(ck.asm["cubin"]))
    summary = ", ".join(f"{o}x{n}" for o, n in sorted(ops.items()))
    assert ck.metadata["spills"] == 0 and ck.n_spills == 0
    assert not any(o.startswith(("STL", "LDL")) for o in ops), summary
    smem = any(o.startswith(("STS", "LDS")) for o in ops)
    if regs:
        assert not smem, f"{kernel} {consts}: a shared-memory round trip: {summary}"
    else:
        assert smem, summary
    if kernel == "flip_kernel" and consts["M"] == 4:
        assert any(o.startswith("SHFL.BFLY") for o in ops), summary
    if kernel == "trans_dot":
        assert any(o.startswith("HMMA") for o in ops), summary


# ============================================================================ layouts
def _thread_coord(lin, lane, warp):
    c = [0] * lin.rank
    for k, v in enumerate(lin.lane):
        if lane >> k & 1:
            c = [a ^ b for a, b in zip(c, v)]
    for k, v in enumerate(lin.warp):
        if warp >> k & 1:
            c = [a ^ b for a, b in zip(c, v)]
    return tuple(c)


@pytest.mark.parametrize("parent", ["blocked", "mma"])
@pytest.mark.parametrize("case", ["permute", "reshape", "join", "split0", "split1", "cat"])
def test_relabeled_layouts_keep_each_threads_elements(parent, case):
    """The register path of backend/lower/shape.py, thread by thread without a GPU: with the
    layout the layout pass gives the result (kitjit/ir/layouts.py), every result register of
    every thread names a register of the same thread that holds that very element."""
    from kitjit.backend.lower.shape import ShapeLowering

    from kitjit.ir.layouts import (
        Halved,
        Joined,
        Mma,
        Permuted,
        Reshaped,
        Stacked,
        default_blocked,
        reshape_coord,
    )

    shape = (32, 16)
    L = default_blocked(shape, 4, 4) if parent == "blocked" else Mma(2, 2)
    if case == "permute":
        R, rshape = Permuted(L, (1, 0)), (16, 32)
        pick = lambda c: (0, (c[1], c[0]))  # noqa: E731
    elif case == "reshape":
        R, rshape = Reshaped(L, shape, (4, 8, 16)), (4, 8, 16)
        pick = lambda c: (0, reshape_coord(c, rshape, shape))  # noqa: E731
    elif case == "join":
        R, rshape = Joined(L), shape + (2,)
        pick = lambda c: (c[-1], c[:-1])  # noqa: E731
    elif case == "cat":
        R, rshape = Stacked(L), (64, 16)
        pick = lambda c: (c[0] // 32, (c[0] % 32, c[1]))  # noqa: E731
    else:  # split: the operand is a join's result, [32, 16, 2]
        k = int(case[-1])
        L, shape = Joined(L), shape + (2,)
        R, rshape = Halved(L), shape[:-1]
        pick = lambda c: (0, c + (k,))  # noqa: E731
    ls, ld = L.to_linear(shape), R.to_linear(rshape)
    lin = (lambda c: (0, c + (0,))) if case.startswith("split") else None
    srcs = [[(j, i) for i in range(ls.nregs)] for j in range(2)]
    regs = ShapeLowering.in_registers(None, srcs, ls, ld, pick, lin)
    assert regs is not None, f"{case} of {parent} would go through shared memory"
    sreg, dreg = ls.reg_coords(), ld.reg_coords()
    for warp in range(4):
        for lane in range(32):
            ts, td = _thread_coord(ls, lane, warp), _thread_coord(ld, lane, warp)
            for c, (j, i) in zip(dreg, regs):
                want = pick(tuple(a ^ b for a, b in zip(c, td)))
                have = (j, tuple(a ^ b for a, b in zip(sreg[i], ts)))
                assert have == want, (lane, warp, c)


@kit.jit
def item_kernel(X, Y):
    x = kit.load(X + kit.arange(0, 1))
    b = (x > 0).reshape(1, 1).item()
    kit.store(Y + kit.arange(0, 4), x.item() + kit.zeros([4], kit.float32) +
              b.to(kit.float32) * 10)


def test_item_is_the_one_element():
    """Triton's x.item(): a single-element tile as a scalar of its dtype (NaN kept)."""
    for v, want in ((3.5, 13.5), (-2.0, -2.0), (float("nan"), float("nan"))):
        y = torch.full((4,), 7.0)
        item_kernel[(1,)](torch.tensor([v]), y)
        torch.testing.assert_close(y, torch.full((4,), want), equal_nan=True)


def test_item_of_many_elements_is_an_error():
    @kit.jit
    def k(X, Y):
        kit.store(Y, kit.load(X + kit.arange(0, 2)).item())
    with pytest.raises(CompileError, match="single-element tile"):
        k[(1,)](torch.zeros(2), torch.zeros(1))


def test_item_compiles_for_sm90a():
    ck = kit.compile_aot(__file__, "item_kernel", ["*fp32:16", "*fp32:16"], {})
    assert ck.metadata["spills"] == 0


@pytest.mark.gpu
def test_item_on_gpu():
    for v, want in ((3.5, 13.5), (float("nan"), float("nan"))):
        y = torch.full((4,), 7.0, device="cuda")
        item_kernel[(1,)](torch.tensor([v], device="cuda"), y)
        torch.testing.assert_close(y.cpu(), torch.full((4,), want), equal_nan=True)

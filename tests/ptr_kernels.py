"""Kernels of tests/test_pointers.py (a module of its own so that compile_aot imports it):
block pointers, tensor descriptors, pointer casts, bitcasts, fp8 and scalar constructors."""

import kitjit as kit


@kit.jit
def bp_matmul(A, B, C, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
              BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr):
    """C = A @ B with block pointers advanced along K (the block-pointer matmul pattern)."""
    pid_m = kit.program_id(0)
    pid_n = kit.program_id(1)
    a_blk = kit.make_block_ptr(base=A, shape=(M, K), strides=(s_am, s_ak),
                               offsets=(pid_m * BM, 0), block_shape=(BM, BK), order=(1, 0))
    b_blk = kit.make_block_ptr(B, (K, N), (s_bk, s_bn), (0, pid_n * BN), (BK, BN), (1, 0))
    acc = kit.zeros((BM, BN), dtype=kit.float32)
    for _ in range(0, kit.cdiv(K, BK)):
        a = kit.load(a_blk, boundary_check=(0, 1), padding_option="zero")
        b = kit.load(b_blk, boundary_check=(0, 1))
        acc = kit.dot(a, b, acc)
        a_blk = kit.advance(a_blk, (0, BK))
        b_blk = kit.advance(b_blk, (BK, 0))
    c_blk = kit.make_block_ptr(C, (M, N), (s_cm, s_cn), (pid_m * BM, pid_n * BN), (BM, BN),
                               (1, 0))
    kit.store(c_blk, acc.to(C.dtype.element_ty), boundary_check=(0, 1))


@kit.jit
def bp_pad(X, Y, M, N, s_xm, s_ym, BM: kit.constexpr, BN: kit.constexpr,
           PAD: kit.constexpr, CHECK: kit.constexpr):
    """Y (padded to whole blocks) = the blocks of X, padding where `CHECK` asks."""
    pm = kit.program_id(0)
    pn = kit.program_id(1)
    x = kit.make_block_ptr(X, (M, N), (s_xm, 1), (pm * BM, pn * BN), (BM, BN), (1, 0))
    y = kit.make_block_ptr(Y, (M + BM, N + BN), (s_ym, 1), (pm * BM, pn * BN), (BM, BN),
                           (1, 0))
    kit.store(y, kit.load(x, boundary_check=CHECK, padding_option=PAD))


@kit.jit
def td_scale(X, Y, M, N, s_xm, s_ym, BM: kit.constexpr, BN: kit.constexpr):
    """Y = 2 * X through in-kernel tensor descriptors (ragged edges)."""
    xd = kit.make_tensor_descriptor(X, shape=[M, N], strides=[s_xm, 1], block_shape=[BM, BN])
    yd = kit.make_tensor_descriptor(Y, [M, N], [s_ym, 1], [BM, BN])
    om = kit.program_id(0) * BM
    on = kit.program_id(1) * BN
    yd.store([om, on], xd.load([om, on]) * 2.0)


@kit.jit
def gather_rows(ADDRS, OUT, lens, N, BLOCK: kit.constexpr):
    """Row g of OUT = the first lens[g] floats at address ADDRS[g] (pointers loaded from
    memory, as grouped GEMM does), each address also round-tripped through int64."""
    g = kit.program_id(0)
    p = kit.load(ADDRS + g).to(kit.pointer_type(kit.float32))
    q = p.to(kit.int64).to(kit.pointer_type(kit.float32))
    n = kit.load(lens + g)
    o = kit.arange(0, BLOCK)
    x = kit.load(q + o, mask=o < n, other=-1.0)
    kit.store(OUT + g * N + o, x, mask=o < N)


@kit.jit
def bitcasts(X, I, U8, F8, n, BLOCK: kit.constexpr):
    """I = the int32 bits of float X; F8 = fp32 of the fp8e4b15 bytes in U8."""
    o = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = o < n
    x = kit.load(X + o, mask=m)
    kit.store(I + o, x.to(kit.int32, bitcast=True), mask=m)
    b = kit.load(U8 + o, mask=m)
    kit.store(F8 + o, kit.cast(b, kit.float8e4b15, bitcast=True).to(kit.float32), mask=m)


@kit.jit
def fp8_roundtrip(X, Q, Y, n, FP8: kit.constexpr, BLOCK: kit.constexpr):
    """Q = X narrowed to fp8 (stored as bytes: Q is uint8), Y = Q widened to X's dtype."""
    o = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = o < n
    q = kit.load(X + o, mask=m).to(FP8)
    kit.store(Q + o, q.to(kit.uint8, bitcast=True), mask=m)
    kit.store(Y + o, q.to(Y.dtype.element_ty), mask=m)


@kit.jit
def fp8_io(X, Y, n, BLOCK: kit.constexpr):
    """Y (fp32) = 1.5 * X (an fp8 tensor loaded as fp8)."""
    o = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = o < n
    x = kit.load(X + o, mask=m)
    kit.store(Y + o, x * 1.5, mask=m)


@kit.jit
def fp8_dot(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr):
    """C (fp32) = A @ B on fp8 tiles (one block of K)."""
    rm = kit.arange(0, BM)
    rn = kit.arange(0, BN)
    rk = kit.arange(0, BK)
    a = kit.load(A + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K))
    b = kit.load(B + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N))
    c = kit.dot(a, b)
    kit.store(C + rm[:, None] * N + rn[None, :], c, mask=(rm[:, None] < M) & (rn[None, :] < N))


@kit.jit
def rtz(X, Y, n, BLOCK: kit.constexpr):
    """Y (fp16 or bf16) = X narrowed toward zero."""
    o = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = o < n
    x = kit.load(X + o, mask=m)
    kit.store(Y + o, x.to(Y.dtype.element_ty, fp_downcast_rounding="rtz"), mask=m)


@kit.jit
def rtne(X, Y, n, BLOCK: kit.constexpr):
    """Y (fp16 or bf16) = X narrowed to nearest even, spelled out (a cvt.rn kept where it is
    written: kitjit/nn/attention.py's PACKED)."""
    o = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = o < n
    x = kit.load(X + o, mask=m)
    kit.store(Y + o, x.to(Y.dtype.element_ty, fp_downcast_rounding="rtne"), mask=m)


@kit.jit
def scalars(X, Y, n, FLAG: kit.constexpr, BLOCK: kit.constexpr):
    """Y = where(FLAG, X / float32(n), int32(X)) + a float32 scalar, `tl.float32(n)`-style."""
    o = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = o < n
    x = kit.load(X + o, mask=m)
    nf = kit.float32(n)
    best = kit.float32(-float("inf"))
    best = kit.maximum(best, kit.max(kit.where(m, x, -float("inf")), axis=0))
    y = kit.where(FLAG, x / nf, kit.int32(x).to(kit.float32)) + kit.where(True, best, 0.0)
    kit.store(Y + o, y, mask=m)

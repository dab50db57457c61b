"""Kernels of tests/test_random.py (compile_aot imports this file by path)."""

import kitjit as kit


@kit.jit
def philox_kernel(Out, c0, c1, c2, c3, k0, k1, BLOCK: kit.constexpr):
    """Philox-4x32-10 of one counter and key (lanes all equal), for the known answers."""
    z = kit.arange(0, BLOCK).to(kit.uint32) * 0
    a, b, c, d = kit.philox_impl(z + c0, z + c1, z + c2, z + c3, k0.to(kit.uint32),
                                 k1.to(kit.uint32))
    o = kit.arange(0, BLOCK)
    kit.store(Out + o * 4, a)
    kit.store(Out + o * 4 + 1, b)
    kit.store(Out + o * 4 + 2, c)
    kit.store(Out + o * 4 + 3, d)


@kit.jit
def randint4x_kernel(Out, seed, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    a, b, c, d = kit.randint4x(seed, offs)
    kit.store(Out + offs, a, mask=m)
    kit.store(Out + n + offs, b, mask=m)
    kit.store(Out + 2 * n + offs, c, mask=m)
    kit.store(Out + 3 * n + offs, d, mask=m)


@kit.jit
def randint64_kernel(Out, seed, n, BLOCK: kit.constexpr):
    offs = (kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)).to(kit.int64)
    m = offs < n
    kit.store(Out + offs, kit.randint(seed, offs), mask=m)


@kit.jit
def rand_kernel(U, N, seed, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    kit.store(U + offs, kit.rand(seed, offs), mask=m)
    kit.store(N + offs, kit.randn(seed, offs), mask=m)


@kit.jit
def dropout_kernel(X, Y, n, p, seed, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    x = kit.load(X + offs, mask=m)
    keep = kit.rand(seed, offs) > p
    kit.store(Y + offs, kit.where(keep, x / (1 - p), 0.0), mask=m)


@kit.jit
def umulhi_kernel(A, B, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    kit.store(Out + offs, kit.umulhi(kit.load(A + offs, mask=m), kit.load(B + offs, mask=m)),
              mask=m)

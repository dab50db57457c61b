"""Kernels written with Triton's spellings (tensor methods, tl.add/sub/mul) for
tests/test_triton_names.py: imported there and compiled ahead of time from this file."""

import kitjit as triton
import kitjit.language as tl
from kitjit.language.extra.cuda import libdevice


@triton.jit
def tensor_methods_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    a = x.cumsum(0)
    s = tl.where(m, x, -float("inf")).softmax(0)
    b = (x > 0.25).logical_and(x < 0.75).to(tl.float32)
    c = (x > 0.9).logical_or(x < 0.1).cast(tl.float32)
    d = tl.add(tl.mul(x, 2.0), tl.sub(a, 1.0))
    e = (x > 0.5).to(tl.int32).reduce_or(0).to(tl.float32)
    f = x.cos().sin() + x.exp2().log2() + x.rsqrt() + x.ravel().flip(0).flip(0)
    tl.store(o_ptr + offs, a + s + b + c + d + e + f + x.max(0), mask=m)


@triton.jit
def item_kernel(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(x_ptr, x.item())


@triton.jit
def missing_name_kernel(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(x_ptr + tl.arange(0, BLOCK), x.to(tl.float8e4b8).to(tl.float32))


@triton.jit
def inline_asm_kernel(x_ptr, y_ptr, o_ptr, p_ptr, n, BLOCK: tl.constexpr):
    """o = max(x, y) + 1 (fp32, pack 1); p = the bytes of b shifted (u8 x 4 in one register)."""
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    o = tl.inline_asm_elementwise("max.f32 $0, $1, $2; add.f32 $0, $0, 0f3F800000;",
                                  "=f,f,f", [x, y], dtype=tl.float32, is_pure=True, pack=1)
    b = (offs % 251).to(tl.uint8)
    lo, hi = tl.inline_asm_elementwise(
        "and.b32 $0, $2, 0x0F0F0F0F; shr.b32 $1, $2, 4; and.b32 $1, $1, 0x0F0F0F0F;",
        "=r,=r,r", [b], dtype=(tl.uint8, tl.uint8), is_pure=True, pack=4)
    tl.store(o_ptr + offs, o, mask=m)
    tl.store(p_ptr + offs, lo.to(tl.int32) + 16 * hi.to(tl.int32), mask=m)


@triton.constexpr_function
def _half_block(block):
    return block // 2


@triton.must_use_result
@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def constexpr_function_kernel(x_ptr, o_ptr, BLOCK: tl.constexpr):
    HALF: tl.constexpr = _half_block(BLOCK)
    offs = tl.arange(0, HALF)
    tl.store(o_ptr + offs, _twice(tl.load(x_ptr + offs)) + HALF)


@triton.jit
def _selu_straight(x, alpha):
    return tl.where(x > 0, x, alpha * (tl.exp(x) - 1)), x * alpha


@triton.jit
def _selu_branchy(x, alpha):
    if x > 0:
        return x
    return alpha * (tl.exp(x) - 1)


@triton.jit
def map_elementwise_kernel(x_ptr, o_ptr, p_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    o, p = tl.map_elementwise(_selu_straight, x, 1.5)
    tl.store(o_ptr + offs, o, mask=m)
    tl.store(p_ptr + offs, p, mask=m)


@triton.jit
def map_elementwise_branchy_kernel(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.map_elementwise(_selu_branchy, x, 1.5))


@triton.jit
def descriptor_functions_kernel(x_ptr, o_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    src = tl.make_tensor_descriptor(x_ptr, [M, N], [N, 1], [BM, BN])
    dst = tl.make_tensor_descriptor(o_ptr, [M, N], [N, 1], [BM, BN])
    v = tl.load_tensor_descriptor(src, [pid_m * BM, pid_n * BN])
    tl.store_tensor_descriptor(dst, [pid_m * BM, pid_n * BN], v * 2)


@triton.jit
def libdevice_bits_kernel(x_ptr, d_ptr, i_ptr, f_ptr, l_ptr, n_ptr, BLOCK: tl.constexpr):
    """Bit reinterpretations, nextafter, and num_threads() as a compile-time tile size."""
    NT: tl.constexpr = tl.extra.cuda.num_threads()
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    d = tl.load(d_ptr + offs)
    bits = libdevice.float_as_int(x)
    tl.store(i_ptr + offs, bits)
    tl.store(f_ptr + offs, libdevice.nextafter(libdevice.int_as_float(bits), float("inf")))
    tl.store(l_ptr + offs, libdevice.double_as_longlong(libdevice.nextafter(d, 0.0)))
    tl.store(n_ptr + tl.arange(0, NT), tl.full([NT], tl.extra.cuda.num_warps(), tl.int32))


@triton.jit
def _pair(x):
    return tl.tuple([x + 1, x * 2])


@triton.jit
def tuple_kernel(x_ptr, o_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    t = _pair(tl.load(x_ptr + offs))
    tl.static_assert(isinstance(t, tl.tuple))
    a, b = t
    tl.store(o_ptr + offs, a + t[1] * b)

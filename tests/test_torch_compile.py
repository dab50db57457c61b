"""kitjit under torch.compile (interpreter on CPU tensors): `kernel[grid](...)` traced with
fullgraph=True (one opaque kitjit::launch op, no graph break), and kit.custom_op. Kept few:
each compile takes seconds."""

from __future__ import annotations

import pytest
import torch

import kitjit as kit


@kit.jit
def add_kernel(X, Y, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    kit.store(Out + offs, kit.load(X + offs, mask=mask) + kit.load(Y + offs, mask=mask),
              mask=mask)


@kit.jit
def scale_kernel(X, Out, s, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    kit.store(Out + offs, kit.load(X + offs, mask=mask) * s, mask=mask)


def model(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[lambda m: (kit.cdiv(n, m["BLOCK"]),)](x, y, out, n, BLOCK=128)
    scale_kernel[(kit.cdiv(n, 128),)](out, out, 0.5, n, BLOCK=128)  # in place, aliased
    return torch.relu(out) + 1


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_plain_launch_compiles_fullgraph():
    x, y = torch.randn(1000), torch.randn(1000)
    expect = model(x, y)
    got = torch.compile(model, fullgraph=True, backend="aot_eager")(x, y)
    torch.testing.assert_close(got, expect)
    explained = torch._dynamo.explain(model)(x, y)
    assert explained.graph_break_count == 0
    ops = [str(n.target) for g in explained.graphs for n in g.graph.nodes
           if n.op == "call_function"]
    assert ops.count("kitjit.launch.default") == 2


def test_plain_launch_with_inductor():
    x, y = torch.randn(777), torch.randn(777)
    torch.testing.assert_close(torch.compile(model, fullgraph=True)(x, y), model(x, y))


@kit.custom_op("kitjit_test::scaled_add", fake=lambda x, y, s: torch.empty_like(x))
def scaled_add(x: torch.Tensor, y: torch.Tensor, s: float) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(kit.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    scale_kernel[(kit.cdiv(n, 256),)](out, out, s, n, BLOCK=256)
    return out


@kit.custom_op("kitjit_test::add_into", mutates_args=("out",))
def add_into(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    add_kernel[(kit.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)


def test_custom_op_compiles_fullgraph():
    def f(x, y):
        z = scaled_add(x, y, 3.0)
        w = torch.empty_like(z)
        add_into(z, y, w)
        return w.sum()

    x, y = torch.randn(300), torch.randn(300)
    expect = (x + y) * 3.0 + y
    torch.testing.assert_close(scaled_add(x, y, 3.0), (x + y) * 3.0)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x, y)
    torch.testing.assert_close(got, expect.sum())
    assert torch._dynamo.explain(f)(x, y).graph_break_count == 0


def test_custom_op_with_autograd():
    def backward(ctx, grad):
        return grad * ctx.s, grad * ctx.s, None

    def setup(ctx, inputs, output):
        ctx.s = inputs[2]

    op = kit.custom_op("kitjit_test::scaled_add_ad", _scaled_add_impl,
                       fake=lambda x, y, s: torch.empty_like(x), backward=backward,
                       setup_context=setup)
    x = torch.randn(50, requires_grad=True)
    y = torch.randn(50, requires_grad=True)
    op(x, y, 2.0).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((50,), 2.0))


def _scaled_add_impl(x: torch.Tensor, y: torch.Tensor, s: float) -> torch.Tensor:
    out = torch.empty_like(x)
    add_kernel[(kit.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    scale_kernel[(kit.cdiv(x.numel(), 256),)](out, out, s, x.numel(), BLOCK=256)
    return out


# ============================================================ launch options under tracing
@kit.jit
def warps_kernel(Out, n, num_warps: kit.constexpr, BLOCK: kit.constexpr):
    """A parameter named like a launch option (as Liger's kernels have): writes its value."""
    offs = kit.arange(0, BLOCK)
    kit.store(Out + offs, kit.zeros((BLOCK,), kit.float32) + num_warps, mask=offs < n)


def test_traced_launch_passes_maxnreg_and_pdl():
    """maxnreg and launch_pdl reach the launch the graph makes (FakeDriver records the
    compile's maxnreg and the launch's pdl), as an eager launch passes them."""
    from kitjit.testing import FakeDriver

    def f(x, y):
        out = torch.empty_like(x)
        add_kernel[(1,)](x, y, out, x.numel(), BLOCK=64, maxnreg=128, launch_pdl=True)
        return out

    x, y = torch.randn(64), torch.randn(64)
    add_kernel.cache.clear()
    try:
        with FakeDriver(allow_cpu=True) as fake:
            torch.compile(f, fullgraph=True, backend="aot_eager")(x, y)
    finally:
        add_kernel.cache.clear()
    assert fake.maxnregs == [128]
    assert fake.launches and all(la["pdl"] for la in fake.launches)


def test_traced_launch_refuses_what_eager_refuses():
    x, y = torch.randn(64), torch.randn(64)

    def ctas(x, y):
        add_kernel[(1,)](x, y, x, 64, BLOCK=64, num_ctas=2)
        return x

    def stream(x, y):
        add_kernel[(1,)](x, y, x, 64, BLOCK=64, stream=0)
        return x

    def unknown(x, y):
        add_kernel[(1,)](x, y, x, 64, BLOCK=64, num_warp=8)
        return x

    for fn, msg in [(ctas, "num_ctas=2"), (stream, "stream= is not supported under torch"),
                    (unknown, "unexpected keyword argument 'num_warp'")]:
        with pytest.raises(Exception, match=msg):
            torch.compile(fn, fullgraph=True, backend="aot_eager")(x, y)
        torch._dynamo.reset()


@pytest.mark.parametrize("by_keyword", [True, False])
def test_traced_option_named_parameter(by_keyword):
    """`num_warps` as a kernel parameter: by keyword it is the parameter and the launch
    option; by position only the parameter (the option keeps its default), as eagerly."""
    def f(out):
        if by_keyword:
            warps_kernel[(1,)](out, 32, num_warps=2, BLOCK=32)
        else:
            warps_kernel[(1,)](out, 32, 2, BLOCK=32)
        return out

    expect = f(torch.full((32,), float("nan")))
    torch.testing.assert_close(expect, torch.full((32,), 2.0))
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(torch.full((32,), float("nan")))
    torch.testing.assert_close(got, expect)
    # the launch option: 2 warps by keyword, the default 4 by position (block sizes)
    from kitjit.testing import FakeDriver

    torch._dynamo.reset()
    warps_kernel.cache.clear()
    try:
        with FakeDriver(allow_cpu=True) as fake:
            f(torch.empty(32))
            torch.compile(f, fullgraph=True, backend="aot_eager")(torch.empty(32))
    finally:
        warps_kernel.cache.clear()
    threads = 64 if by_keyword else 128
    assert [la["block"] for la in fake.launches] == [(threads, 1, 1)] * 2

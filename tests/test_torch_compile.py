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

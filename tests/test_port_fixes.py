"""Small language fixes found by the port suite (tests/ports): each one a Triton behaviour
that a real kernel relied on."""

import torch

import kitjit as kit


@kit.jit
def _where_constexpr(X, Y, n, stride, FIRST: kit.constexpr, BLOCK: kit.constexpr):
    # Liger's rope: `tl.where(cos_bs == 1, a, b)` with a constexpr condition on scalars
    pid = kit.program_id(0)
    base = kit.where(FIRST == 1, 0, pid * stride)
    offs = kit.arange(0, BLOCK)
    kit.store(Y + pid * stride + offs, kit.load(X + base + offs, mask=offs < n), mask=offs < n)


def test_where_with_a_constexpr_condition():
    x = torch.randn(3, 7)
    for first, want in ((1, x[0].expand(3, 7)), (0, x)):
        y = torch.full_like(x, float("nan"))
        _where_constexpr[(3,)](x, y, 7, 7, FIRST=first, BLOCK=8)
        torch.testing.assert_close(y, want)

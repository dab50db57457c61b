"""attorch (BobMcDear/attorch): torch.nn layers written in Triton. Each case builds the
attorch layer and its torch.nn twin with the same parameters, runs the twin in float64, and
compares outputs, input gradients and parameter gradients. Sizes ragged and small."""

from __future__ import annotations

import torch
from corpus_harness import check, close, rnd, source
from torch import nn

case = source("attorch", "attorch", skip_init=("attorch",))

ACTS = ["Sigmoid", "LogSigmoid", "Tanh", "ReLU", "GELU", "SiLU", "ReLU6", "Hardsigmoid",
        "Hardtanh", "Hardswish", "SELU", "Mish", "Softplus", "Softsign", "Tanhshrink",
        "LeakyReLU", "ELU", "CELU", "Hardshrink", "Softshrink"]


def layer_check(mine: nn.Module, ref: nn.Module, inputs: tuple, grad_inputs: tuple = (0,),
                rtol: float = 1e-4, atol: float = 1e-4, params: bool = True,
                transposed: tuple = ()) -> None:
    """`mine` (attorch) against `ref` (torch.nn, given mine's parameters, in float64);
    the parameters named in `transposed` are stored transposed by attorch."""
    state = mine.state_dict()
    ref.load_state_dict({k: v.T if k in transposed else v for k, v in state.items()})
    dev = next(x.device for x in inputs if torch.is_tensor(x))
    ref = ref.to(dev, torch.float64)   # (load_state_dict copies into ref's own device)
    xs = [x.detach().clone().requires_grad_(i in grad_inputs) if torch.is_tensor(x) else x
          for i, x in enumerate(inputs)]
    xr = [x.detach().to(torch.float64).requires_grad_(i in grad_inputs)
          if torch.is_tensor(x) and x.is_floating_point() else x for i, x in enumerate(inputs)]
    got, want = mine(*xs), ref(*xr)
    got = got[0] if isinstance(got, tuple) else got
    want = want[0] if isinstance(want, tuple) else want
    close(got, want, "output", rtol, atol)
    up = torch.randn(want.shape, dtype=torch.float64, device=want.device)
    got.backward(up.to(got.dtype))
    want.backward(up)
    for i in grad_inputs:
        close(xs[i].grad, xr[i].grad, f"grad of input {i}", rtol, atol)
    if params:
        theirs = dict(ref.named_parameters())
        for n, p in mine.named_parameters():
            want_grad = theirs[n].grad.T if n in transposed else theirs[n].grad
            close(p.grad, want_grad, f"grad of {n}", rtol, atol)


def _act(name):
    def run(imp, device):
        m = imp("attorch.act_layers")
        x = rnd(3, 37, 5, device=device, scale=3)
        layer_check(getattr(m, name)(), getattr(nn, name)(), (x,), rtol=2e-4, atol=2e-4)
    return run


for _name in ACTS:
    case(f"act_{_name}", quick=_name == "GELU")(_act(_name))


@case("act_dropout")
def _act_dropout(imp, device):
    m = imp("attorch.act_layers")
    x = rnd(5, 301, device=device).requires_grad_()
    y = m.SiLU(drop_p=0.3)(x)
    kept = y != 0
    assert 0.5 < kept.double().mean().item() < 0.9, "drop rate far from 0.3"
    xr = x.detach().double().requires_grad_()
    want = torch.where(kept, nn.functional.silu(xr) / 0.7, 0)
    close(y, want, "output", 1e-4, 1e-4)


@case("glu", quick=True)
def _glu(imp, device):
    m = imp("attorch.glu_layer")
    layer_check(m.GLU(dim=-1), nn.GLU(dim=-1), (rnd(3, 5, 74, device=device),))


@case("layer_norm")
def _layer_norm(imp, device):
    m = imp("attorch.layer_norm_layer")
    a = m.LayerNorm(93, device=device)
    nn.init.normal_(a.weight)
    nn.init.normal_(a.bias)
    layer_check(a, nn.LayerNorm(93), (rnd(7, 93, device=device),))


@case("rms_norm")
def _rms_norm(imp, device):
    m = imp("attorch.rms_norm_layer")
    a = m.RMSNorm(93, eps=1e-6, device=device)
    nn.init.normal_(a.weight)
    layer_check(a, nn.RMSNorm(93, eps=1e-6), (rnd(7, 93, device=device),))


def _softmax(name):
    def run(imp, device):
        m = imp("attorch.softmax_layers")
        layer_check(getattr(m, name)(dim=-1), getattr(nn, name)(dim=-1),
                    (rnd(6, 77, device=device, scale=2),))
    return run


for _name in ("Softmax", "LogSoftmax", "Softmin"):
    case(f"softmax_{_name}", quick=_name == "Softmax")(_softmax(_name))


@case("cross_entropy")
def _cross_entropy(imp, device):
    m = imp("attorch.cross_entropy_loss_layer")
    x, t = rnd(9, 45, device=device), torch.randint(0, 45, (9,), device=device)
    layer_check(m.CrossEntropyLoss(), nn.CrossEntropyLoss(), (x, t))


@case("cross_entropy_weighted")
def _cross_entropy_weighted(imp, device):
    m = imp("attorch.cross_entropy_loss_layer")
    x, t = rnd(9, 45, device=device), torch.randint(0, 45, (9,), device=device)
    w = torch.rand(45, device=device) + 0.5
    layer_check(m.CrossEntropyLoss(weight=w), nn.CrossEntropyLoss(weight=w.double()), (x, t))


@case("nll_loss")
def _nll_loss(imp, device):
    m = imp("attorch.nll_loss_layer")
    x = torch.log_softmax(rnd(4, 13, 7, device=device), 1)
    t = torch.randint(0, 13, (4, 7), device=device)
    w = torch.rand(13, device=device) + 0.5
    layer_check(m.NLLLoss(weight=w), nn.NLLLoss(weight=w.double()), (x, t))


def _p_loss(name):
    def run(imp, device):
        m = imp("attorch.p_loss_layers")
        x, y = rnd(5, 67, device=device), rnd(5, 67, device=device)
        for reduction in ("none", "mean", "sum"):
            layer_check(getattr(m, name)(reduction=reduction),
                        getattr(nn, name)(reduction=reduction), (x, y), grad_inputs=(0, 1))
    return run


for _name in ("L1Loss", "MSELoss", "SmoothL1Loss", "HuberLoss"):
    case(f"p_loss_{_name}")(_p_loss(_name))


@case("linear", quick=True)
def _linear(imp, device):
    m = imp("attorch.linear_layer")
    a = m.Linear(45, 70, device=device)
    layer_check(a, nn.Linear(45, 70), (rnd(3, 11, 45, device=device),),
                rtol=1e-3, atol=1e-3, transposed=("weight",))


@case("linear_gelu")
def _linear_gelu(imp, device):
    m = imp("attorch.linear_layer")
    a = m.Linear(45, 70, act_func="gelu", device=device)
    ref = nn.Sequential(nn.Linear(45, 70), nn.GELU())
    a_state = {"0." + k: v for k, v in a.state_dict().items()}
    ref.load_state_dict({k: v.T if k == "0.weight" else v for k, v in a_state.items()})
    ref = ref.double().to(device)
    x = rnd(3, 11, 45, device=device)
    close(a(x), ref(x.double()), "output", 1e-3, 1e-3)


@case("conv1d")
def _conv1d(imp, device):
    m = imp("attorch.conv_layer")
    a = m.Conv1d(5, 7, 3, padding=1, device=device)
    layer_check(a, nn.Conv1d(5, 7, 3, padding=1), (rnd(2, 5, 19, device=device),),
                rtol=1e-3, atol=1e-3)


@case("conv2d")
def _conv2d(imp, device):
    m = imp("attorch.conv_layer")
    a = m.Conv2d(3, 6, 3, stride=2, padding=1, device=device)
    layer_check(a, nn.Conv2d(3, 6, 3, stride=2, padding=1), (rnd(2, 3, 11, 9, device=device),),
                rtol=1e-3, atol=1e-3)


def _pool(name, shape):
    def run(imp, device):
        m = imp("attorch.pooling_layer")
        layer_check(getattr(m, name)(2), getattr(nn, name)(2), (rnd(*shape, device=device),))
    return run


case("avg_pool1d")(_pool("AvgPool1d", (2, 3, 18)))
case("avg_pool2d")(_pool("AvgPool2d", (2, 3, 10, 6)))


def _batch_norm(name, shape):
    def run(imp, device):
        m = imp("attorch.batch_norm_layer")
        a = getattr(m, name)(shape[1], device=device)
        nn.init.normal_(a.weight)
        nn.init.normal_(a.bias)
        ref = getattr(nn, name)(shape[1])
        layer_check(a, ref, (rnd(*shape, device=device),))
        close(a.running_mean, ref.running_mean, "running mean", 1e-4, 1e-4)
        close(a.running_var, ref.running_var, "running var", 1e-4, 1e-4)
    return run


case("batch_norm1d")(_batch_norm("BatchNorm1d", (9, 21)))
case("batch_norm2d")(_batch_norm("BatchNorm2d", (3, 5, 7, 6)))


@case("dropout")
def _dropout(imp, device):
    m = imp("attorch.dropout_layer")
    x = rnd(7, 229, device=device).requires_grad_()
    y = m.Dropout(p=0.4)(x)
    kept = y != 0
    assert 0.4 < kept.double().mean().item() < 0.8, "drop rate far from 0.4"
    close(y, torch.where(kept, x.double() / 0.6, 0), "output", 1e-5, 1e-5)
    up = torch.randn_like(x)
    y.backward(up)
    close(x.grad, torch.where(kept, up.double() / 0.6, 0), "grad of input 0", 1e-5, 1e-5)


def _flash(causal):
    def run(imp, device):
        m = imp("attorch.multi_head_attention_kernels")
        q, k, v = (rnd(2, 3, 128, 32, device=device, dtype=torch.float16) for _ in range(3))
        check(lambda q, k, v: m._attention.apply(q, k, v, causal, 0.3),
              lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
                  q, k, v, is_causal=causal, scale=0.3),
              (q, k, v), grad_of=(0, 1, 2), rtol=2e-2, atol=2e-2)
    return run


# attorch's MultiheadAttention layer refuses construction (deprecated upstream); its flash
# attention autograd Function (Triton's tutorial kernels) is what runs here.
case("flash_attention")(_flash(False))
case("flash_attention_causal")(_flash(True))

"""Liger-Kernel at git HEAD (linkedin/Liger-Kernel): ops the in-repo suite of the 0.8.5 wheel
(tests/ports/test_liger.py) does not cover. References: the float64 torch forms of Liger's
own tests. Harness as tests/ports/conftest.py's `liger` fixture: the `__init__`s of
`liger_kernel` and `liger_kernel.ops` not run, `infer_device()` answering the case's device
(and where the dispatcher asks `importlib.import_module("triton")`, the swapped name)."""

from __future__ import annotations

import importlib
import types

import torch
import torch.nn.functional as F
from corpus_harness import check, rnd, source, swapped_import


def _setup(device: str) -> None:
    utils = importlib.import_module("liger_kernel.utils")
    utils.infer_device = lambda: device
    try:  # the 0.8.5 dispatcher's module (not at every HEAD)
        cap = importlib.import_module("liger_kernel.backends.capability")
    except ModuleNotFoundError:
        return
    cap.importlib = types.SimpleNamespace(import_module=swapped_import)


case = source("liger", "liger_kernel", skip_init=("liger_kernel", "liger_kernel.ops"),
              setup=_setup)
OPS = "liger_kernel.ops"


@case("attn_res", quick=True)
def _attn_res(imp, device):
    m = imp(f"{OPS}.attn_res")
    V = rnd(3, 5, 37, 123, device=device)
    wq, wn = rnd(123, device=device, scale=0.3), rnd(123, device=device)

    def ref(V, wq, wn):
        K = V * torch.rsqrt(V.pow(2).mean(-1, keepdim=True) + 1e-6) * wn
        alpha = torch.einsum("d,nbtd->nbt", wq, K).softmax(0)
        return torch.einsum("nbt,nbtd->btd", alpha, V)

    check(lambda V, wq, wn: m.LigerAttnResFunction.apply(V, wq, wn, 1e-6), ref, (V, wq, wn),
          grad_of=(0, 1, 2))


@case("multi_token_attention")
def _mta(imp, device):
    m = imp(f"{OPS}.multi_token_attention")
    s = rnd(2, 4, 19, 19, device=device)
    w, b = rnd(4, 4, 3, 3, device=device, scale=0.3), rnd(4, device=device)

    def ref(s, w, b):
        mask = torch.ones(19, 19, dtype=torch.bool, device=s.device).tril()
        p = s.masked_fill(~mask, -1e9).softmax(-1)
        return F.conv2d(p, w, b, padding=1).masked_fill(~mask, 0)

    check(lambda s, w, b: m.LigerMultiTokenAttentionFunction.apply(s, w, b, 1, 1),
          ref, (s, w, b), grad_of=(0, 1, 2))


@case("fused_neighborhood_attention")
def _na(imp, device):
    m = imp(f"{OPS}.fused_neighborhood_attention")
    q, k, v = (rnd(2, 3, 45, 32, device=device) for _ in range(3))

    def ref(q, k, v):
        i = torch.arange(45, device=q.device)
        mask = (i[None, :] - i[:, None]).abs() <= 3
        s = (q @ k.transpose(-1, -2) * 32 ** -0.5).masked_fill(~mask, float("-inf"))
        return s.softmax(-1) @ v

    check(lambda q, k, v: m.LigerFusedNeighborhoodAttentionFunction.apply(q, k, v, 7, 1),
          ref, (q, k, v), grad_of=(0, 1, 2), rtol=1e-3, atol=1e-3)


@case("grpo_selective_log_softmax")
def _grpo_lsm(imp, device):
    m = imp(f"{OPS}.grpo_loss")
    logits = rnd(3, 12, 3001, device=device, scale=2)
    ids = torch.randint(0, 3001, (3, 11), device=device)
    got = m.fused_selective_log_softmax(logits, ids, temperature=0.9)
    want = (logits[:, :-1].double() / 0.9).log_softmax(-1).gather(-1, ids[..., None])[..., 0]
    from corpus_harness import close

    close(got, want, "log_p", 1e-4, 1e-4)


@case("fused_moe")
def _fused_moe(imp, device):
    m = imp(f"{OPS}.fused_moe")
    t, e, h, inter, k = 37, 4, 48, 40, 2
    x = rnd(t, h, device=device)
    gate_up = rnd(e, 2 * inter, h, device=device, scale=0.2)
    down = rnd(e, h, inter, device=device, scale=0.2)
    logits = torch.randn(t, e, device=device)
    idx = torch.topk(logits, k, dim=-1).indices.to(torch.int32)
    wts = torch.softmax(torch.gather(logits, 1, idx.long()), dim=-1)

    def ref(x, gate_up, down, idx, wts):  # every token through its k experts, weighted
        out = torch.zeros_like(x)
        for j in range(k):
            for ex in range(e):
                sel = idx[:, j] == ex
                g, u = (x[sel] @ gate_up[ex].T).chunk(2, -1)
                y = (F.silu(g) * u) @ down[ex].T
                out = out.index_add(0, sel.nonzero()[:, 0], y * wts[sel, j, None])
        return out

    check(m.LigerFusedMoEFunction.apply, ref, (x, gate_up, down, idx, wts),
          grad_of=(0, 1, 2, 4), rtol=1e-3, atol=1e-3)

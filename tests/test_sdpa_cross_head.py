"""Issue 12: a NaN or inf in one head stays in that head, in every attention entry point.

The kernels copy K/V (and, in the backward, Q/dO) tiles per head with 3-d TMA descriptors
(kit.tma_load's (head, row, col)): a tile past a head's last row reads zeros, where a 2-d
descriptor over (B*H*S, D) rows read the next head's rows, and 0 * NaN in P V (or dS K)
turned other heads' results into NaN. Each case poisons one head of q, k, v or dO (all of
its elements, NaN or inf), runs the kernel with and without the poison, and checks every
head that torch's semantics keep apart from the poisoned one bit for bit against the clean
run. The poisoned head is head 1 (K/V) or 2 (Q/dO) of batch 0: the tiles of the head
before it (and, for heads shorter than a tile, of others) used to run into it. Sizes are
not multiples of the tiles; GQA groups of two. Interpreter here; the gpu-marked twin runs
the same cases on the device (dQ's fp32 sums are reduce-added by TMA in any order there:
compared to a tolerance, its NaN/inf pattern exactly).
"""

from __future__ import annotations

import pytest
import torch

from kitjit.nn import attention_backward as AB
from kitjit.nn import attention_decode as AD
from kitjit.nn.attention import attention
from kitjit.testing import has_gpu, rel_error

B, H, HKV = 2, 4, 2      # GQA: query heads 2g, 2g+1 read K/V head g

def poisoned_head(which):
    """(batch, head) poisoned: head 1 of K/V, head 2 of Q/dO, so that the head before it
    (whose last tile used to run into it) is of another GQA group: its results must stay
    finite (a poisoned query head's own group has NaN dK, dV in torch too)."""
    return (0, 1) if which in "kv" else (0, 2)


def randn(*shape, seed, device):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(torch.bfloat16).to(device)


def inputs(S, SK, D, device, seed=5):
    return (randn(B, H, S, D, seed=seed, device=device),
            randn(B, HKV, SK, D, seed=seed + 1, device=device),
            randn(B, HKV, SK, D, seed=seed + 2, device=device),
            randn(B, H, S, D, seed=seed + 3, device=device))


def poisoned(ts, which, value):
    """A copy of (q, k, v, do) with one head (`poisoned_head`) of `which` all `value`."""
    ts = [t.clone() for t in ts]
    ts["qkvd".index(which)][poisoned_head(which)] = value
    return ts


def apart(which):
    """(query heads, K/V heads) that torch keeps apart from the poisoned head: each as
    a (batch, head) boolean mask."""
    b, h = poisoned_head(which)
    qh = torch.ones(B, H, dtype=torch.bool)
    kh = torch.ones(B, HKV, dtype=torch.bool)
    if which in "qd":        # query head h: its own output / dQ, and its group's dK, dV
        qh[b, h] = False
        kh[b, h // (H // HKV)] = False
    else:                    # K/V head h: every query head of its group, and itself
        qh[b, h * (H // HKV):(h + 1) * (H // HKV)] = False
        kh[b, h] = False
    return qh, kh


def same(got, want, mask, what, exact=True):
    g, w = got[mask], want[mask]
    assert torch.equal(g.isnan(), w.isnan()) and torch.equal(g.isinf(), w.isinf()), \
        f"{what}: {int(g.isnan().sum())} NaN, {int(g.isinf().sum())} inf leaked in"
    if exact:
        assert torch.equal(g, w), f"{what}: differs from the clean run"
    else:
        fin = w.isfinite()
        assert rel_error(g[fin], w[fin]) < 1e-2, what


def forward_case(S, SK, D, which, value, causal, device):
    clean = inputs(S, SK, D, device)
    dirty = poisoned(clean, which, value)
    o0, l0 = attention(*clean[:3], causal)
    o1, l1 = attention(*dirty[:3], causal)
    qh, _ = apart(which)
    same(o1, o0, qh, "o")
    same(l1, l0, qh, "lse")


def backward_case(S, SK, D, which, value, causal, device, exact=True):
    clean = inputs(S, SK, D, device)
    o, lse = attention(*clean[:3], causal)          # the clean forward: dO's poison is
    dirty = poisoned(clean, which, value)           # the backward's own
    if which == "d":
        got0 = AB.attention_backward(clean[3], *clean[:3], o, lse, causal)
        got1 = AB.attention_backward(dirty[3], *dirty[:3], o, lse, causal)
    else:
        o1, lse1 = attention(*dirty[:3], causal)
        got0 = AB.attention_backward(clean[3], *clean[:3], o, lse, causal)
        got1 = AB.attention_backward(dirty[3], *dirty[:3], o1, lse1, causal)
    qh, kh = apart(which)
    same(got1[0], got0[0], qh, "dq", exact)
    same(got1[1], got0[1], kh, "dk")
    same(got1[2], got0[2], kh, "dv")


def decode_case(Sq, SK, D, which, value, device):
    clean = inputs(Sq, SK, D, device)
    dirty = poisoned(clean, which, value)
    o0, l0 = AD.attention_decode(*clean[:3], splits=2)
    o1, l1 = AD.attention_decode(*dirty[:3], splits=2)
    qh, _ = apart(which)
    same(o1, o0, qh, "o")
    same(l1, l0, qh, "lse")


NAN, INF = float("nan"), float("inf")
FWD = [  # (S, SK, D, which, value, causal): SK < BN (a tile spans heads), ragged tails
    (20, 37, 64, "v", NAN, False),
    (20, 37, 64, "v", INF, True),
    (20, 37, 64, "k", INF, False),
    (70, 150, 64, "v", NAN, False),
    (20, 37, 128, "v", INF, False),      # warp-specialized kernel (producer + consumers)
    (20, 37, 128, "k", NAN, True),
]
BWD = [  # (S, SK, D, which, value, causal)
    (20, 37, 64, "v", NAN, False),       # queries as MMA rows (D 64)
    (20, 37, 64, "q", INF, False),
    (20, 37, 64, "d", NAN, True),
    (20, 37, 128, "v", INF, False),      # keys as MMA rows (D 128)
    (20, 37, 128, "d", INF, False),
    (20, 37, 128, "q", NAN, True),
]
BWD256 = [(20, 37, 256, "v", NAN, False), (20, 37, 256, "q", INF, False)]
DEC = [(1, 37, 64, "v", NAN), (3, 70, 128, "k", INF), (2, 50, 64, "v", INF)]


def _ids(cases):
    return ["-".join(str(x) for x in c) for c in cases]


@pytest.mark.parametrize("S,SK,D,which,value,causal", FWD, ids=_ids(FWD))
def test_forward_keeps_heads_apart(S, SK, D, which, value, causal):
    forward_case(S, SK, D, which, value, causal, "cpu")


@pytest.mark.parametrize("S,SK,D,which,value,causal", BWD, ids=_ids(BWD))
def test_backward_keeps_heads_apart(S, SK, D, which, value, causal):
    backward_case(S, SK, D, which, value, causal, "cpu")


@pytest.mark.parametrize("S,SK,D,which,value,causal", BWD256[:1], ids=_ids(BWD256[:1]))
def test_backward_d256_keeps_heads_apart(S, SK, D, which, value, causal):
    backward_case(S, SK, D, which, value, causal, "cpu")


@pytest.mark.parametrize("Sq,SK,D,which,value", DEC[:2], ids=_ids(DEC[:2]))
def test_decode_keeps_heads_apart(Sq, SK, D, which, value):
    decode_case(Sq, SK, D, which, value, "cpu")


# ============================================================================ GPU


@pytest.mark.parametrize("S,SK,D,which,value,causal", FWD, ids=_ids(FWD))
@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
def test_gpu_forward_keeps_heads_apart(S, SK, D, which, value, causal):
    forward_case(S, SK, D, which, value, causal, "cuda")


@pytest.mark.parametrize("S,SK,D,which,value,causal", BWD + BWD256, ids=_ids(BWD + BWD256))
@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
def test_gpu_backward_keeps_heads_apart(S, SK, D, which, value, causal):
    backward_case(S, SK, D, which, value, causal, "cuda", exact=False)


@pytest.mark.parametrize("Sq,SK,D,which,value", DEC, ids=_ids(DEC))
@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
def test_gpu_decode_keeps_heads_apart(Sq, SK, D, which, value):
    decode_case(Sq, SK, D, which, value, "cuda")

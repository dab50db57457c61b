"""examples/matmul.py's host plans (helper "hostmm", issue 15): a call's decisions (split,
config, grid, split-K workspace and counters) are made once per (device, stream, shapes,
dtypes, options); a repeat call with new tensors reuses them; each (device, stream) has its
own workspace (two streams sharing one would race), and a reused workspace's stale values
never reach C. Interpreter runs on the CPU, where `_stream_key` is faked to name streams."""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch
from hopper_helpers import poison

__all__ = ["poison"]  # the fixture, imported for the tests here

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

SLABS = dict(BM=128, BN=128, BK=64, STAGES=4, num_warps=8, SPLIT_K=2, SLABS=True)


def _randn(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    return (x + torch.sign(x) * 0.25).to(torch.bfloat16)      # no near-zeros


def _check(out, a, w):
    ref = a.double() @ w.double().T
    assert not out.isnan().any()
    assert (out.double() - ref).abs().max() / ref.abs().max() < 1e-2


@pytest.fixture
def ex(monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    import matmul as ex

    monkeypatch.setattr(ex, "_PLANS", {})
    monkeypatch.setattr(ex, "_WORKSPACE", {})
    return ex


@pytest.mark.parametrize("M,N,K,cfg", [(16, 128, 2048, {}),     # split 2, in the kernel
                                       (72, 136, 200, SLABS)])   # slabs, ragged
def test_repeat_call_reuses_plan_and_workspace(ex, poison, M, N, K, cfg):
    a, w = _randn(M, K), _randn(N, K, seed=1)
    _check(ex.matmul(a, w, trans_b=True, **cfg), a, w)
    (key, plan), = ex._PLANS.items()
    buf, = ex._WORKSPACE.values()
    buf.fill_(float("nan"))              # stale values in the reused workspace
    a2, w2 = _randn(M, K, seed=2), _randn(N, K, seed=3)          # new tensors, same shape
    out = ex.matmul(a2, w2, trans_b=True, **cfg)
    _check(out, a2, w2)
    assert list(ex._PLANS.items()) == [(key, plan)]               # the same plan, no other
    assert list(ex._WORKSPACE.values()) == [buf]


def test_two_streams_two_workspaces(ex, poison, monkeypatch):
    stream = [0x100]
    monkeypatch.setattr(ex, "_stream_key", lambda dev: stream[0])
    a, w = _randn(16, 2048), _randn(128, 2048, seed=1)
    outs = []
    for s in (0x100, 0x200, 0x100):
        stream[0] = s
        outs.append(ex.matmul(a, w, trans_b=True))
    assert len(ex._PLANS) == 2 and {k[1] for k in ex._PLANS} == {0x100, 0x200}
    w1, w2 = (ex._WORKSPACE[torch.device("cpu"), s] for s in (0x100, 0x200))
    assert w1.data_ptr() != w2.data_ptr()
    for out in outs:
        _check(out, a, w)


def test_workspace_grows_and_replans(ex, poison, monkeypatch):
    """A plan needing more than the stream's buffer replaces it and drops the stream's
    plans (they would keep the old buffer alive); the smaller shape replans on the new one."""
    a, w = _randn(16, 2048), _randn(128, 2048, seed=1)
    ex.matmul(a, w, trans_b=True)
    small = ex._WORKSPACE[torch.device("cpu"), 0]
    a2, w2 = _randn(72, 200), _randn(136, 200, seed=1)
    _check(ex.matmul(a2, w2, trans_b=True, **SLABS), a2, w2)
    big = ex._WORKSPACE[torch.device("cpu"), 0]
    assert big.numel() > small.numel() and len(ex._PLANS) == 1
    _check(ex.matmul(a, w, trans_b=True), a, w)
    assert len(ex._PLANS) == 2 and ex._WORKSPACE[torch.device("cpu"), 0] is big


def test_checks_stay(ex):
    with pytest.raises(ValueError, match="K differ"):
        ex.matmul(torch.ones(8, 64), torch.ones(32, 63), trans_b=True)
    with pytest.raises(ValueError, match="2-d"):
        ex.matmul(torch.ones(8, 64), torch.ones(64))
    with pytest.raises(ValueError, match="split_mode"):
        ex.matmul(torch.ones(8, 8), torch.ones(8, 8), split_mode="slabs")
    z = ex.matmul(torch.ones(8, 0), torch.ones(16, 0), trans_b=True)
    assert z.shape == (8, 16) and not z.any()
    assert not ex._WORKSPACE


def test_plans_bounded(ex, monkeypatch):
    monkeypatch.setattr(ex, "_PLANS_MAX", 2)
    for m in (1, 2, 3):                              # (K == 0: plans that launch nothing)
        ex.matmul(torch.ones(m, 0), torch.ones(4, 0), trans_b=True)
        assert 1 <= len(ex._PLANS) <= 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_streams_and_graph_capture_gpu(monkeypatch):
    """Two CUDA streams get two workspaces; a captured call plans afresh (workspace from the
    graph's pool) and replays right."""
    import matmul as ex

    monkeypatch.setattr(ex, "_PLANS", {})
    monkeypatch.setattr(ex, "_WORKSPACE", {})
    a, w = _randn(16, 4096).cuda(), _randn(4096, 4096, seed=1).cuda()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    for s in (s1, s2):
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            out = ex.matmul(a, w, trans_b=True)
        s.synchronize()
        _check(out.cpu(), a.cpu(), w.cpu())
    assert len(ex._WORKSPACE) == 2 and len(ex._PLANS) == 2
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = ex.matmul(a, w, trans_b=True)
    assert len(ex._PLANS) == 2
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    _check(out.cpu(), a.cpu(), w.cpu())

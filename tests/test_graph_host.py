"""The host path of a superoptimized graph (kitjit/graph/host.py): the second call of an input
signature replays a route (no per-launch keys, intermediates in the workspace), launching
exactly what the generated `run` launched; anything else (another signature, a copy to the
declared strides, a misaligned input, the interpreter, stream capture) takes `run`. On the
CPU the GPU launch path runs against kitjit.testing's FakeDriver; on a GPU the routed calls
are checked against the float64 reference with outputs and workspace poisoned."""

from __future__ import annotations

import copy
import importlib
import pathlib
import sys
import tempfile

import pytest
import torch

from kitjit.graph import plan, search, space
from kitjit.graph.module import module_source
from kitjit.testing import FakeDriver

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


def _rmsnorm_linear(M=13, K=256, N=200, split=2, fuse=True):
    """rms_norm's row kernel, then the level-2 matmul (split-K, FUSE: counters and partials
    in the workspace) as its programmatic dependent: the workload of the brief."""
    g = importlib.import_module("graph_rmsnorm_linear").build(M, K, N)
    names = [name for name, _ in plan.partitions(g)]
    _, groups = plan.partitions(g)[names.index("row(rms_norm) | matmul(matmul)")]
    params = [space.ranked(groups[0])[0][1],
              dict(FORM="wgmma", BM=16, BN=64, BK=64, SPLIT=split, STAGES=3, num_warps=4,
                   FUSE=fuse)]
    gs = []
    for grp, p in zip(groups, params):
        c = copy.copy(grp)
        c.params = p
        gs.append(c)
    path = pathlib.Path(tempfile.mkdtemp()) / "host_generated.py"
    path.write_text(module_source(g, gs, "host test"))
    return g, search.Optimized(search._import(path), path, {})


def _inputs(g, device="cpu"):
    return search.random_inputs(g, device, "positive")


def _by_launch(fake, start):
    """(kernel name, grid, pdl, values, tma encodings) of the launches since `start`."""
    names = {h: n for (n, _), h in zip(fake.loads, [0x10000 * (i + 1) for i in
                                                    range(len(fake.loads))])}
    return [(names.get(rec["function"]), rec["grid"], rec["pdl"], rec["values"], rec["tma"])
            for rec in fake.launches[start:]]


def test_second_call_replays_the_runs_launches():
    g, opt = _rmsnorm_linear()
    opt.module._pdl = lambda x: True      # as on sm_90 (the fake runs CPU tensors)
    with FakeDriver(allow_cpu=True, ir_compile=True) as fake:
        a = _inputs(g)
        out_a = opt(*a)[0]
        first = _by_launch(fake, 0)
        assert opt.host.fast_calls == 0 and len(opt.host.routes) == 1
        assert not opt.host.why
        b = _inputs(g)
        n = len(fake.launches)
        out_b = opt(inputs=b)[0]
        second = _by_launch(fake, n)
        assert opt.host.fast_calls == 1
        assert len(fake.compiles) == 2       # nothing compiled again
        assert [(k, gr, pdl) for k, gr, pdl, _, _ in first] == \
            [(k, gr, pdl) for k, gr, pdl, _, _ in second]
        assert [pdl for _, _, pdl, _, _ in second] == [False, True]
        (_, _, _, row_a, _), (_, _, _, mm_a, tma_a) = first
        (_, _, _, row_b, _), (_, _, _, mm_b, tma_b) = second
        x, w, W = (t.data_ptr() for t in b)
        # the row kernel: x, w in, the normed x out (in the workspace now)
        assert row_b[:2] == (x, w)
        normed = row_b[2]
        # the matmul: the normed x (also by TMA), W (by TMA), the output, partials, counters
        assert mm_b[:3] == (normed, W, out_b.data_ptr())
        assert out_b.shape == out_a.shape and out_b.data_ptr() != out_a.data_ptr()
        part, cnt = mm_b[3], mm_b[4]
        assert len({normed, part, cnt}) == 3
        # the descriptors: the same boxes as run()'s, over the route's buffers
        assert sorted(e[1] for e in tma_b) == sorted([normed, W])
        assert [e[2:] for e in tma_b] == [e[2:] for e in tma_a]
        # the buffers do not overlap: x's normed copy (13 x 256 fp16) before the partials
        assert abs(part - normed) >= 13 * 256 * 2
        c = opt(*_inputs(g))[0]
        assert opt.host.fast_calls == 2 and c.data_ptr() not in (out_a.data_ptr(),
                                                                  out_b.data_ptr())
        assert len(fake.compiles) == 2


def test_other_signatures_take_run():
    g, opt = _rmsnorm_linear(fuse=False)
    with FakeDriver(allow_cpu=True, ir_compile=True) as fake:
        a = _inputs(g)
        opt(*a)
        opt(*a)
        assert opt.host.fast_calls == 1
        # a wrong dtype or shape still raises run()'s error
        with pytest.raises(ValueError, match="expected an input of shape"):
            opt(a[0].float(), a[1], a[2])
        with pytest.raises(ValueError, match="expected an input of shape"):
            opt(a[0][:5], a[1], a[2])
        with pytest.raises(TypeError):
            opt(a[0], a[1])
        # other strides: run() copies them to the declared ones (its record: no route)
        xt = a[0].t().contiguous().t()
        n = len(fake.launches)
        opt(xt, a[1], a[2])
        assert opt.host.fast_calls == 1 and any("copied" in w for w in opt.host.why.values())
        assert fake.launches[n]["values"][0] != xt.data_ptr()
        # a misaligned input (it is not 16-byte aligned): run(), keyed anew there
        buf = torch.empty(a[0].numel() + 1, dtype=a[0].dtype)
        xm = buf[1:].view(a[0].shape).copy_(a[0])
        n = len(fake.launches)
        opt(xm, a[1], a[2])
        assert opt.host.fast_calls == 1 and fake.launches[n]["values"][0] == xm.data_ptr()
        # the routed signature is still served
        opt(*_inputs(g))
        assert opt.host.fast_calls == 2


def test_a_second_signature_gets_its_own_route():
    """Two graphs' worth of inputs alternating on one module (same shapes, one input a
    non-contiguous view the route cannot take): each call right, the routed ones fast."""
    g, opt = _rmsnorm_linear(split=1, fuse=False)
    with FakeDriver(allow_cpu=True, ir_compile=True) as fake:
        a = _inputs(g)
        opt(*a)
        W2 = torch.empty(a[2].shape[1], a[2].shape[0], dtype=a[2].dtype).t().copy_(a[2])
        for i in range(4):
            n = len(fake.launches)
            opt(*a) if i % 2 else opt(a[0], a[1], W2)
            assert fake.launches[-1]["values"][0] != 0
            assert len(fake.launches) == n + 2
        assert opt.host.fast_calls == 2


def test_forgotten_when_the_fake_ends():
    """Routes hold the launchers of the driver they were made with: a FakeDriver's end (and
    kitjit.nn's reset) drops them, so the next call records again."""
    g, opt = _rmsnorm_linear(split=1, fuse=False)
    with FakeDriver(allow_cpu=True, ir_compile=True):
        opt(*_inputs(g))
        assert opt.host.routes
    assert not opt.host.routes and opt.host.last is None


def test_interpreter_calls_take_run():
    """Without a GPU the kernels run in the interpreter: no route, every call right."""
    g, opt = _rmsnorm_linear(M=5, K=128, N=40, split=2, fuse=True)
    for _ in range(2):
        ins = _inputs(g)
        ref = g.reference(ins)[0]
        out = opt(*ins)[0]
        assert search.rel_error(out, ref) < 1e-2
    assert opt.host.fast_calls == 0
    assert all("GPU path" in w for w in opt.host.why.values())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("split,fuse", [(1, False), (2, True), (3, False)])
def test_gpu_routed_calls_match_the_reference(split, fuse):
    """On the GPU: routed calls on fresh inputs, with the outputs of the last call and the
    workspace poisoned (NaN) in between, match the float64 reference; a CUDA graph captured
    over a call (run() then: no workspace while capturing) replays right."""
    from kitjit.nn import _host

    g, opt = _rmsnorm_linear(13, 4096, 1000, split, fuse)
    outs = []
    for i in range(4):
        ins = _inputs(g, "cuda")
        ref = g.reference(ins)[0]
        for t in outs:
            t.fill_(float("nan"))
        for ws in _host._WS.values():
            ws[0].fill_(float("nan"))
        out = opt(*ins)[0]
        torch.cuda.synchronize()
        assert search.rel_error(out, ref) < 1e-2, i
        outs.append(out)
    assert opt.host.fast_calls == 3
    ins = _inputs(g, "cuda")
    ref = g.reference(ins)[0]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = opt(*ins)[0]
    for _ in range(2):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert search.rel_error(out, ref) < 1e-2
    assert opt.host.fast_calls == 3


def test_outputs_that_are_views_and_a_buffer_two_outputs_share():
    """Outputs returned as views of one buffer (a transpose and a reshape of the same row
    kernel's output): the route allocates the buffer once per call and returns the same
    views of it."""
    import kitjit as kit

    g = kit.graph.new_kernel_graph()
    X = g.new_input(dims=(4, 40), dtype=kit.float32)
    Y = g.exp(X)
    g.mark_output(g.transpose(Y, 0, 1))
    g.mark_output(g.reshape(Y, (8, 20)))
    _, name, groups, _ = search.candidates(g)[0]
    path = pathlib.Path(tempfile.mkdtemp()) / "views.py"
    path.write_text(module_source(g, groups, "views"))
    opt = search.Optimized(search._import(path), path, {})
    with FakeDriver(allow_cpu=True, ir_compile=True) as fake:
        first = opt(torch.randn(4, 40))
        x = torch.randn(4, 40)
        a, b = opt(x)
        assert opt.host.fast_calls == 1
        for got, want in zip((a, b), first):
            assert (got.shape, got.stride(), got.storage_offset()) == \
                (want.shape, want.stride(), want.storage_offset())
        assert a.data_ptr() == b.data_ptr() != first[0].data_ptr()
        assert fake.launches[-1]["values"][:2] == (x.data_ptr(), a.data_ptr())


def test_views_of_inputs_read_by_tma():
    """The level-2 GQA decode passes K and V as views (`t1.view(-1, 32)`) to the kernel that
    reads them by TMA: the route passes a Region at the input's pointer, and the descriptors
    it encodes are run()'s boxes over the new inputs."""
    g = importlib.import_module("graph_gqa_decode").build(2, 4, 2, 48, 32)
    _, groups = plan.partitions(g)[0]
    c = copy.copy(groups[0])
    c.params = dict(FORM="wgmma", PACK=True, BM=64, BN=32, SPLIT=2, STAGES=2, num_warps=4,
                    FUSE=True)
    src = module_source(g, [c], "gqa")
    assert ".view(-1, 32)" in src
    path = pathlib.Path(tempfile.mkdtemp()) / "gqa_host.py"
    path.write_text(src)
    opt = search.Optimized(search._import(path), path, {})
    with FakeDriver(allow_cpu=True, ir_compile=True) as fake:
        opt(*_inputs(g))
        first = fake.launches[-1]
        ins = _inputs(g)
        out = opt(*ins)[0]
        assert opt.host.fast_calls == 1, opt.host.why
        last = fake.launches[-1]
        assert last["grid"] == first["grid"]
        assert {e[1] for e in last["tma"]} <= {t.data_ptr() for t in ins}
        assert [e[2:] for e in last["tma"]] == [e[2:] for e in first["tma"]]
        assert out.data_ptr() in last["values"]


def test_a_run_doing_more_than_launching_gets_no_route():
    """A run() that also calls a torch op (here t0.abs()) would not be repeated by a route:
    it keeps taking run()."""
    g, opt = _rmsnorm_linear(split=1, fuse=False)
    src = opt.path.read_text().replace("    t3 = _empty(", "    _ = t0.abs()\n    t3 = _empty(",
                                       1)
    assert "t0.abs()" in src
    opt.path.write_text(src)
    opt = search.Optimized(search._import(opt.path), opt.path, {})
    with FakeDriver(allow_cpu=True, ir_compile=True) as fake:
        for _ in range(2):
            opt(*_inputs(g))
        assert opt.host.fast_calls == 0 and len(fake.launches) == 4
        assert "abs" in next(iter(opt.host.why.values()))

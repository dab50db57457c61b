"""kit.graph (issue 14): graphs built at the PyTorch level, searched, verified against the
float64 reference, in the interpreter at tiny sizes."""

from __future__ import annotations

import importlib
import importlib.util
import pathlib
import sys

import pytest
import torch

import kitjit as kit
from kitjit.graph import plan, search
from kitjit.testing import check

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KITJIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("name", ["graph_attention_decode", "graph_rmsnorm_linear",
                                  "graph_gated_mlp"])
def test_examples(name, capsys):
    importlib.import_module(name).main(progress=False)
    assert "rel err" in capsys.readouterr().out


def test_fusion_plans_of_the_examples():
    att = importlib.import_module("graph_attention_decode").build(2, 32, 80)
    kinds = [[grp.kind for grp in gs] for _, gs in plan.partitions(att)]
    assert ["attention"] in kinds and ["matmul", "row", "matmul"] in kinds
    mlp = importlib.import_module("graph_gated_mlp").build(24, 64, 48)
    fused = plan.partitions(mlp)[0][1]
    assert len(fused) == 1 and len(fused[0].mms) == 2 and len(fused[0].epilogue) == 2
    rn = importlib.import_module("graph_rmsnorm_linear").build(20, 64, 40)
    fused = plan.partitions(rn)[0][1]
    assert len(fused) == 1 and fused[0].prologue is not None


def test_split_kv_with_combine_kernel():
    g = importlib.import_module("graph_attention_decode").build(2, 32, 80)
    (_, groups), = [(n, gs) for n, gs in plan.partitions(g) if gs[0].kind == "attention"]
    grp = groups[0]
    grp.params = dict(BM=16, BN=16, SPLIT=3, num_warps=4)
    src = plan.module_source(g, [grp], "split-KV test")
    assert "_combine" in src
    mod = _module(src)
    assert search.verify(g, mod, "cpu", trials=2) is None


def _module(src, tmp=None):
    import tempfile

    path = pathlib.Path(tempfile.mkdtemp()) / "generated.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("graph_generated_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _norms_graph():
    g = kit.graph.new_kernel_graph()
    X = g.new_input(dims=(4, 6, 40), dtype=kit.float32)
    b = g.new_input(dims=(40,), dtype=kit.float32)
    Y = g.layer_norm(g.gelu(X + b), b, b)
    g.mark_output(g.sum(g.exp(g.transpose(Y, 0, 1)), dim=0))
    g.mark_output(g.max(g.sqrt(g.rsqrt(X * X + 1.0)), dim=1, keepdim=True))
    g.mark_output(g.reshape(Y, (24, 40)))
    g.mark_output(g.softmax(g.rms_norm(X, b) / 3.0 - X, dim=1))
    return g


def test_source_runs_as_is_from_a_file():
    g = _norms_graph()
    opt = g.superoptimize(progress=False, cache=False)
    mod = _module(opt.source())
    x, b = torch.randn(4, 6, 40), torch.randn(40)
    x_t = x.transpose(0, 1).contiguous().transpose(0, 1)   # other strides: copied in
    outs = mod.run(x_t, b)
    for o, r in zip(outs, g.reference([x, b])):
        check(o, r, 1e-4)


def test_cache_hit(capsys):
    g = _norms_graph()
    first = g.superoptimize(progress=True)
    second = _norms_graph().superoptimize(progress=True)
    err = capsys.readouterr().err
    assert "cached" in err and "candidate" in err
    assert first.source() == second.source() and second.path.parent.parent.name == "graph"


def test_wrong_kernels_are_dropped(monkeypatch):
    from kitjit.graph import codegen

    real = codegen.elementwise
    monkeypatch.setattr(codegen, "elementwise", lambda t, a: real(t, a) + (
        " * 1.01" if t.op == "exp" else ""))
    g = kit.graph.new_kernel_graph()
    x = g.new_input(dims=(3, 20), dtype=kit.float32)
    g.mark_output(g.exp(x))
    with pytest.raises(RuntimeError, match="every candidate failed verification"):
        g.superoptimize(progress=False, cache=False)


def test_errors():
    g = kit.graph.new_kernel_graph()
    a = g.new_input(dims=(16, 16), dtype=kit.float32)
    with pytest.raises(NotImplementedError, match="not supported yet"):
        g.matmul(a, a)
    with pytest.raises(ValueError, match="mark at least one output"):
        g.superoptimize()
    t = g.transpose(a)
    with pytest.raises(NotImplementedError, match="would need a copy"):
        g.reshape(t, (256,))

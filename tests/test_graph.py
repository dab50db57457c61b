"""kit.graph (issue 14): graphs built at the PyTorch level, searched, verified against the
float64 reference, in the interpreter at tiny sizes: every workload of the issue (its
example), every family of generated kernel (forms, GQA packing, split-K/KV with combine
kernels, prefetch, norm placement), the cache and `kitjit cache list`, the budget, the
progress line and the cost model."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import pathlib
import sys
import tempfile

import pytest
import torch

import kitjit as kit
from kitjit.graph import plan, search, space
from kitjit.graph.module import module_source
from kitjit.testing import check

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

WORKLOADS = ["graph_attention_decode", "graph_gqa_decode", "graph_rmsnorm_linear",
             "graph_gated_mlp", "graph_lora", "graph_qk_norm"]


def ex(name: str):
    return importlib.import_module(name)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KITJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KITJIT_LOG", raising=False)


def _module(src: str):
    path = pathlib.Path(tempfile.mkdtemp()) / "generated.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"graph_generated_{id(src)}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", WORKLOADS)
def test_examples(name, capsys):
    ex(name).main(progress=False)
    assert "rel err" in capsys.readouterr().out


# small graphs whose candidates cover every family; ragged and whole-tile sizes
FAMILY_GRAPHS = {
    "decode": lambda: ex("graph_attention_decode").build(3, 32, 64),
    "decode_ragged": lambda: ex("graph_attention_decode").build(3, 24, 80),
    "gqa": lambda: ex("graph_gqa_decode").build(2, 4, 2, 64, 32),
    "gqa_ragged": lambda: ex("graph_gqa_decode").build(1, 6, 2, 40, 16),
    "rmsnorm_linear": lambda: ex("graph_rmsnorm_linear").build(16, 128, 64),
    "gated_mlp": lambda: ex("graph_gated_mlp").build(24, 64, 48),
    "lora": lambda: ex("graph_lora").build(20, 64, 48, 8),
    "qk_norm": lambda: ex("graph_qk_norm").build(2, 16, 64, 32),
}


@pytest.mark.parametrize("name", list(FAMILY_GRAPHS))
def test_every_family_verifies(name):
    """The best candidate of every family of the fused plan (the one the GPU would time
    first) matches the float64 reference, outputs and workspaces poisoned."""
    g = FAMILY_GRAPHS[name]()
    cands = search.candidates(g)
    fused = cands[0][1]
    fams: dict = {}
    for c in cands:
        if c[1] == fused:
            fams.setdefault(c[3], c)
    trials = search.Trials(g, "cpu", 1)
    for fam, (_, _, groups, _) in fams.items():
        why = search.verify(g, _module(module_source(g, groups, "test")), trials)
        assert why is None, f"{fam} {[gr.params for gr in groups]}: {why}"


def _forced(g, **params):
    """The fused plan's group with `params` (space.choices need not rank it)."""
    (_, groups), = plan.partitions(g)[:1]
    assert len(groups) == 1
    groups[0].params = dict(num_warps=4, **params)
    return groups


@pytest.mark.parametrize("params", [
    dict(FORM="mma", PACK=True, BM=16, BN=16, SPLIT=3, STAGES=1),
    dict(FORM="fma", PACK=False, BM=1, BN=16, SPLIT=2, STAGES=1),
    dict(FORM="mma", PACK=False, BM=16, BN=32, SPLIT=1, STAGES=1),
])
def test_forced_attention_params(params):
    g = ex("graph_gqa_decode").build(1, 6, 2, 40, 16)      # 40 keys: ragged splits
    mod = _module(module_source(g, _forced(g, **params), "forced"))
    assert search.verify(g, mod, search.Trials(g, "cpu", 2)) is None


@pytest.mark.parametrize("params", [
    dict(BM=16, BN=32, BK=32, SPLIT=2, STAGES=1, NORM="epi"),     # 3 K tiles: 2 + 1
    dict(BM=16, BN=32, BK=32, SPLIT=3, STAGES=2, NORM="pro"),
    dict(BM=32, BN=64, BK=64, SPLIT=1, STAGES=1, NORM="epi"),
])
def test_forced_matmul_params(params):
    g = ex("graph_rmsnorm_linear").build(20, 96, 40)
    mod = _module(module_source(g, _forced(g, **params), "forced"))
    assert search.verify(g, mod, search.Trials(g, "cpu", 2)) is None


def test_fusion_plans_of_the_workloads():
    first = {n: plan.partitions(ex(n).build(*args))[0][1] for n, args in [
        ("graph_attention_decode", (2, 32, 80)), ("graph_gqa_decode", (1, 8, 2, 32, 16)),
        ("graph_gated_mlp", (24, 64, 48)), ("graph_rmsnorm_linear", (20, 64, 40)),
        ("graph_lora", (20, 64, 48, 8)), ("graph_qk_norm", (2, 20, 48, 32))]}
    for name, groups in first.items():
        assert len(groups) == 1, (name, plan.plan_name(groups))
    assert first["graph_gated_mlp"][0].kind == "matmul"
    assert len(first["graph_gated_mlp"][0].mms) == 2
    assert len(first["graph_gated_mlp"][0].epilogue) == 2
    assert first["graph_rmsnorm_linear"][0].prologue is not None
    assert first["graph_lora"][0].lowrank is not None
    assert sorted(first["graph_qk_norm"][0].norms) == ["k", "q"]
    gqa = first["graph_gqa_decode"][0]
    from kitjit.graph.codegen_attn import packable

    assert gqa.kind == "attention" and packable(gqa) == (2,)   # the query heads of a group


def test_split_kv_grid_covers_batch_heads_splits():
    g = ex("graph_gqa_decode").build(2, 8, 2, 64, 16)
    src = module_source(g, _forced(g, FORM="mma", PACK=True, BM=16, BN=16, SPLIT=4,
                                   STAGES=1), "grid")
    # 2 batches x 2 KV heads programs per split, the 4 query heads of a group as rows
    assert "k0_attention[(1, 4, 4)]" in src and "k0_attention_combine[(16,)]" in src


def test_cost_model():
    g = ex("graph_attention_decode").build(64, 128, 4096)
    grp = plan.partitions(g)[0][1][0]
    kv = 2 * 64 * 4096 * 128 * 2
    ranked = space.ranked(grp)
    best_s, best = ranked[0]
    assert best_s >= kv / space.bandwidth()                 # never under the floor
    assert best["SPLIT"] > 1                               # 64 heads do not fill 132 SMs
    assert all(s <= space.KEEP * best_s for s, _ in ranked)
    one = dict(best, SPLIT=1, STAGES=1)
    assert space.cost(grp, one) > best_s
    # register budget: no choice whose estimate is over the limit
    mlp = plan.partitions(ex("graph_gated_mlp").build(8, 4096, 4096))[0][1][0]
    assert all(p["BM"] * p["BN"] * 2 / (32 * p["num_warps"]) < space.MAX_REGS
               for p in space.choices(mlp))


def _norms_graph():
    g = kit.graph.new_kernel_graph()
    X = g.new_input(dims=(4, 6, 40), dtype=kit.float32)
    b = g.new_input(dims=(40,), dtype=kit.float32)
    Y = g.layer_norm(g.gelu(X + b), b, b)
    g.mark_output(g.sum(g.exp(g.transpose(Y, 0, 1)), dim=0))
    g.mark_output(g.max(g.sqrt(g.rsqrt(X * X + 1.0)), dim=1, keepdim=True))
    g.mark_output(g.reshape(Y, (24, 40)))
    g.mark_output(g.softmax(g.silu(g.rms_norm(X, b)) / 3.0 - X, dim=1))
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


def test_reference_in_graph_dtypes_is_the_eager_baseline():
    g = ex("graph_gqa_decode").build(1, 4, 2, 24, 16)
    q, k, v = search.random_inputs(g, "cpu")
    out, = g.reference([q, k, v], dtype=None)
    assert out.dtype == torch.float16
    check(out, ex("graph_gqa_decode").torch_gqa(q.double(), k.double(), v.double()), 1e-2)


def test_cache_hit_and_cache_list(capsys):
    from kitjit.cli import main as cli

    g = _norms_graph()
    first = g.superoptimize(progress=True)
    second = _norms_graph().superoptimize(progress=True)
    err = capsys.readouterr().err
    assert "cached" in err and "chose" in err
    assert first.source() == second.source()
    assert cli(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert "graph:add+gelu+layer_norm+exp+sum+mul+" in out and "f32[4,6,40],f32[40]" in out


def test_budget_is_honoured(capsys):
    g = ex("graph_gated_mlp").build(24, 64, 48)
    opt = g.superoptimize(budget=0, progress=True, cache=False)
    s = opt.info["search"]
    assert s["verified"] == 1 and s["tried"] == 1 and s["classes"] > 1
    assert "budget of 0s spent" in capsys.readouterr().err


def test_progress_goes_through_logging_when_kitjit_log_is_set(capsys, monkeypatch, caplog):
    g = ex("graph_rmsnorm_linear").build(20, 64, 40)
    monkeypatch.setenv("KITJIT_LOG", "info")
    with caplog.at_level(logging.INFO, logger="kitjit.graph"):
        g.superoptimize(cache=False)
    assert "kit.graph [" not in capsys.readouterr().err      # no bar next to the records
    assert any("chose" in r.getMessage() for r in caplog.records)
    monkeypatch.delenv("KITJIT_LOG")
    g.superoptimize(cache=False, progress=False)
    assert capsys.readouterr().err == ""


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


def test_unwritten_output_is_caught():
    """A kernel that skips rows leaves NaN (outputs are poisoned): verification fails."""
    g = ex("graph_gated_mlp").build(24, 64, 48)
    (_, groups), = plan.partitions(g)[:1]
    groups[0].params = dict(BM=16, BN=32, BK=32, SPLIT=1, STAGES=1, num_warps=4)
    src = module_source(g, groups, "bad").replace("(24 + 15) // 16", "1")
    src = src.replace("k0_matmul[(4, 1)]", "k0_matmul[(2, 1)]")
    assert "k0_matmul[(2, 1)]" in src
    why = search.verify(g, _module(src), search.Trials(g, "cpu", 1))
    assert why is not None and "relative error" in why


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


def test_benchmark_script_without_gpu():
    """benchmarks/graph_bench.py: every workload builds its graph, the smaller ones' eager
    functions and SDPA layouts compute the graph; the table marks bars met and missed."""
    spec = importlib.util.spec_from_file_location(
        "graph_bench", EXAMPLES.parent / "benchmarks" / "graph_bench.py")
    gb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gb)
    for name, make in gb.WORKLOADS.items():
        wl = make()
        assert wl["graph"].outputs and callable(wl["eager"]), name
    wl = gb.WORKLOADS["lora"]()
    ins = wl["inputs"]("cpu")
    ref = wl["graph"].reference(ins)[0]
    assert gb._rel(wl["eager"](*[x.double() for x in ins]), ref) < 1e-9
    res = [dict(workload="a", search_s=30.0, rel_err=1e-3, floor_us=1.0,
                times_ms={"kitjit": (0.010, 0.02), "eager": (0.020, 0.05),
                          "compile": (0.011, 0.03), "sdpa:flash": (0.012, 0.02)}),
           dict(workload="b", search_s=200.0, rel_err=1e-3, floor_us=1.0,
                times_ms={"kitjit": (0.010, 0.02), "eager": (0.012, 0.05)})]
    rows = gb.table(res).splitlines()
    assert rows[1].split()[-1] == "ok" and rows[2].split()[-1] == "miss"


def test_assembler_notes_on_candidates_are_held_back(monkeypatch, caplog):
    """ptxas's performance notes (C7514 ...) on a candidate the search merely tries go to
    its stats, not to the user; KITJIT_GRAPH_ADVISORIES=1 lets them through; other
    records of kitjit.jit pass either way."""
    import logging

    from kitjit.graph import advisories

    log = logging.getLogger("kitjit.jit")
    note = {advisories.NOTE: "k1_matmul: (C7514) Potential Performance Loss"}
    monkeypatch.delenv("KITJIT_GRAPH_ADVISORIES", raising=False)
    sink: list = []
    with caplog.at_level(logging.INFO, logger="kitjit.jit"):
        with advisories.held(sink):
            log.warning("kernel %s: %s", "k1_matmul", "(C7514)", extra=note)
            log.warning("kernel %s: %s", "k1_matmul", "(C7514)", extra=note)
            log.warning("something else")
        assert sink == ["k1_matmul: (C7514) Potential Performance Loss"]
        assert [r.getMessage() for r in caplog.records] == ["something else"]
        caplog.clear()
        monkeypatch.setenv("KITJIT_GRAPH_ADVISORIES", "1")
        sink = []
        with advisories.held(sink):
            log.warning("kernel %s: %s", "k1_matmul", "(C7514)", extra=note)
        assert sink == [] and [r.getMessage() for r in caplog.records] == [
            "kernel k1_matmul: (C7514)"]
    assert not log.filters

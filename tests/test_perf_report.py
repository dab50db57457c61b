"""kit.testing.perf_report / Benchmark (issue 13 item 9): Triton's signature and call
convention, the printed table, the CSV, and plots when matplotlib is present (a clear error
when it is not), all with a fake timing function."""

from __future__ import annotations

import csv
import inspect
import sys

import pytest

import kitjit as kit

CALLS: list[dict] = []


def fake_ms(size, provider, dtype):
    """A made-up timing: kitjit twice as fast as torch, (value, min, max) for kitjit."""
    CALLS.append({"size": size, "provider": provider, "dtype": dtype})
    base = size / 1000
    return (base / 2, base / 2 - 0.1, base / 2 + 0.1) if provider == "kitjit" else base


BENCH = kit.testing.Benchmark(
    x_names=["size"], x_vals=[1000, 2000, 4000], line_arg="provider",
    line_vals=["kitjit", "torch"], line_names=["Kitjit", "Torch"],
    styles=[("blue", "-"), ("green", "--")], ylabel="ms", plot_name="vector-add",
    args={"dtype": "fp32"}, x_log=True, y_log=False)


def test_signature_is_tritons():
    names = list(inspect.signature(kit.testing.Benchmark).parameters)
    assert names[:7] == ["x_names", "x_vals", "line_arg", "line_vals", "line_names",
                         "plot_name", "args"]
    for n in ("xlabel", "ylabel", "x_log", "y_log", "styles", "color"):
        assert n in names
    run = inspect.signature(kit.testing.perf_report(BENCH)(fake_ms).run).parameters
    assert list(run)[:4] == ["show_plots", "print_data", "save_path", "return_df"]


def test_table_printed_and_csv_without_plotting(capsys, tmp_path, monkeypatch):
    CALLS.clear()
    mark = kit.testing.perf_report(BENCH)(fake_ms)
    rows = mark.run(print_data=True, show_plots=False, return_df=True)
    assert len(CALLS) == 6 and all(c["dtype"] == "fp32" for c in CALLS)
    assert [c["provider"] for c in CALLS[:2]] == ["kitjit", "torch"]
    out = capsys.readouterr().out
    assert out.startswith("vector-add:\n")
    lines = out.splitlines()
    assert lines[1].split() == ["size", "Kitjit", "Torch"]
    assert lines[2].split() == ["1000", "0.5", "1"] and lines[4].split() == ["4000", "2", "4"]
    if "pandas" not in sys.modules:
        assert rows[0] == {"size": 1000, "Kitjit": 0.5, "Torch": 1.0}


def test_plotting_without_matplotlib_is_one_clear_error(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    mark = kit.testing.perf_report([BENCH])(fake_ms)
    with pytest.raises(ImportError, match=r"needs matplotlib \(pip install matplotlib\)"):
        mark.run(print_data=True, save_path=str(tmp_path))
    assert "vector-add:" in capsys.readouterr().out  # the table came first
    with open(tmp_path / "vector-add.csv") as f:
        data = list(csv.reader(f))
    assert data[0] == ["size", "Kitjit", "Torch"] and data[2] == ["2000", "1.0", "2.0"]
    assert not (tmp_path / "vector-add.png").exists()


def test_plots_written_with_matplotlib(tmp_path):
    pytest.importorskip("matplotlib")
    mark = kit.testing.perf_report(BENCH)(fake_ms)
    mark.run(save_path=str(tmp_path), show_plots=False)
    png = (tmp_path / "vector-add.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_several_x_names_and_bad_returns(capsys):
    b = kit.testing.Benchmark(x_names=["M", "N"], x_vals=[128, (64, 32)], line_arg="p",
                              line_vals=[1], line_names=["one"], plot_name="mn", args={})
    seen = []
    kit.testing.perf_report(b)(lambda M, N, p: seen.append((M, N)) or M * N).run(
        print_data=True)
    assert seen == [(128, 128), (64, 32)]
    assert "mn:" in capsys.readouterr().out
    with pytest.raises(ValueError, match="return a number or"):
        kit.testing.perf_report(b)(lambda M, N, p: (1, 2)).run()
    with pytest.raises(ValueError, match="2 line_vals but 1 line_names"):
        kit.testing.Benchmark(x_names=["M"], x_vals=[1], line_arg="p", line_vals=[1, 2],
                              line_names=["a"], plot_name="x", args={})


def _bench_plots():
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks", "plots.py")
    spec = importlib.util.spec_from_file_location("bench_plots", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


RESULTS = {"device": "Fake GPU",
           "norms": [{"kernel": "softmax", "shape": "8x8", "kitjit_gbs": 2.0, "torch_gbs": 1.0,
                      "triton_gbs": None}],
           "gemm": [{"shape": "8x8x8", "kitjit_tflops": 3.0, "cublas_tflops": 4.0}],
           "attention": []}


def test_bench_writes_pngs_beside_its_json(tmp_path, monkeypatch, capsys):
    plots = _bench_plots()
    with monkeypatch.context() as m:  # restores the real module (if any) afterwards
        m.setitem(sys.modules, "matplotlib", None)
        assert plots.write_plots(RESULTS, str(tmp_path / "bench.json")) == []
    assert "matplotlib is not installed" in capsys.readouterr().out
    pytest.importorskip("matplotlib")
    written = plots.write_plots(RESULTS, str(tmp_path / "bench.json"))
    assert [p.rsplit("/", 1)[1] for p in written] == ["bench-norms.png", "bench-gemm.png"]
    assert all(open(p, "rb").read(4) == b"\x89PNG" for p in written)

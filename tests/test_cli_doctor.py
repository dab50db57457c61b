"""`kitjit doctor` / `kitjit env`, and the `kitjit compile` mistakes that are one-line
usage errors with exit code 2 (CPU only)."""

from __future__ import annotations

import importlib.util
import json
import textwrap

import pytest

from kitjit import cli, tools

KERNEL = textwrap.dedent("""\
    import kitjit as kit

    @kit.jit
    def copy(X, Y, n, BLOCK: kit.constexpr):
        offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
        kit.store(Y + offs, kit.load(X + offs, mask=offs < n), mask=offs < n)
    """)


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("cmd", ["doctor", "env"])
def test_doctor_prints_the_facts(cmd, capsys):
    assert cli.main([cmd]) == 0
    out = capsys.readouterr().out
    for key in ("kitjit", "driver", "gpus", "torch", "llvmlite", "nvjitlink", "ptxas",
                "cuobjdump", "nvdisasm", "toolchain", "cache"):
        assert any(line.startswith(key + " ") for line in out.splitlines()), (key, out)


def test_doctor_json(capsys, tmp_path):
    assert cli.main(["doctor", "--json", "--cache-dir", str(tmp_path)]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["cache"]["dir"] == str(tmp_path) and rep["cache"]["entries"] == 0
    assert "sm_90a" in rep["toolchain"]["supported_archs"]
    assert set(rep["ptxas"]) >= {"path", "version"}
    if importlib.util.find_spec("torch") is None:  # (the torch-free CI jobs)
        assert "torch" in rep["gpus"] and "torch" in rep["torch"]
    else:
        assert isinstance(rep["gpus"], list)


def test_doctor_without_ptxas_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setattr(tools, "find_ptxas", lambda: None)
    assert cli.main(["doctor"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("ptxas"))
    assert "not found" in line and "nvidia-cuda-nvcc" in line


@pytest.fixture
def kfile(tmp_path):
    p = tmp_path / "k.py"
    p.write_text(KERNEL)
    return p


@pytest.mark.parametrize("extra, says", [
    (["--constexpr", "BLOK=256"], "copy has no constexpr 'BLOK' (its constexprs: BLOCK)"),
    (["--constexpr", "BLOCK=256", "-o", "out.txt"], "unknown output suffix '.txt'"),
    (["--constexpr", "BLOCK=256", "-o", "out"], "unknown output suffix '(none)'"),
    (["--constexpr", "BLOCK=256", "--arch", "sm_100a"], "unsupported --arch 'sm_100a'"),
    (["--constexpr", "BLOCK=256", "--arch", "sm_70"], "use one of sm_80, sm_86"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_compile_usage_errors_exit_2(kfile, capsys, extra, says):
    argv = ["compile", f"{kfile}:copy", "--signature", "*fp32,*fp32,i32", *extra]
    assert cli.main(argv) == 2
    assert says in one_line(capsys)


def test_unknown_options_exit_2(capsys):
    assert cli.main(["doctor", "--bogus"]) == 2
    assert "see --help" in one_line(capsys)
    assert cli.main(["cache", "list", "--nope"]) == 2
    one_line(capsys)

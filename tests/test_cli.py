"""The `kitjit` command line and the NVIDIA tool wrappers (kitjit.tools), CPU only."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import types

import pytest

from kitjit import cli, tools
from kitjit.cache import KernelCache

PTX = textwrap.dedent(
    """\
    .version 8.0
    .target sm_90a
    .address_size 64

    .visible .entry add_one(.param .u64 p_x, .param .u32 p_n)
    {
        .reg .pred %p<2>;
        .reg .b32 %r<3>;
        .reg .f32 %f<3>;
        .reg .b64 %rd<5>;
        ld.param.u64 %rd1, [p_x];
        ld.param.u32 %r1, [p_n];
        mov.u32 %r2, %tid.x;
        setp.ge.u32 %p1, %r2, %r1;
        @%p1 bra DONE;
        cvta.to.global.u64 %rd2, %rd1;
        mul.wide.u32 %rd3, %r2, 4;
        add.s64 %rd4, %rd2, %rd3;
        ld.global.f32 %f1, [%rd4];
        add.f32 %f2, %f1, 0f3F800000;
        st.global.f32 [%rd4], %f2;
    DONE:
        ret;
    }
    """
)

SOFTMAX_META = {
    "name": "softmax",
    "source_file": "/src/examples/softmax.py",
    "source_line": 12,
    "signature": {"X": "*bf16", "Y": "*bf16", "n_cols": "i32"},
    "constexprs": {"BLOCK": 1024},
    "num_warps": 4,
    "arch": "sm_90a",
    "shared": 4096,
    "registers": 40,
    "spills": 0,
    "versions": {"kitjit": "0.1.0"},
}
FAKE = {
    "kernel.tir": "func @softmax() {}\n",
    "kernel.ll": "define void @softmax() { ret void }\n",
    "kernel.ptx": ".version 8.0\n// fake\n",
    "kernel.cubin": b"\x7fELF fake cubin" * 100,
}
K_SOFT4 = "a1" + "0" * 46
K_SOFT8 = "a2" + "1" * 46
K_MM = "b7" + "2" * 46


@pytest.fixture
def root(tmp_path, monkeypatch):
    r = tmp_path / "cache"
    monkeypatch.setenv("KITJIT_CACHE_DIR", str(r))
    monkeypatch.delenv("KITJIT_CACHE_DISABLE", raising=False)
    monkeypatch.delenv("KITJIT_CACHE_MAX_SIZE", raising=False)
    return r


def _usage(kc: KernelCache, key: str, last_used: float, hits: int) -> None:
    path = kc.find(key).path / "usage.json"
    path.write_text(json.dumps({"last_used": last_used, "hits": hits}))


@pytest.fixture
def filled(root) -> KernelCache:
    """softmax (warps 4 and 8) and a matmul with no source info and a bigger cubin."""
    kc = KernelCache()
    kc.put(K_SOFT4, FAKE, SOFTMAX_META)
    kc.put(K_SOFT8, FAKE, {**SOFTMAX_META, "num_warps": 8})
    kc.put(K_MM, {"kernel.cubin": b"\0" * 50_000}, {"name": "matmul", "arch": "sm_90a"})
    now = time.time()
    _usage(kc, K_SOFT4, now - 3 * 86400, 5)
    _usage(kc, K_SOFT8, now - 60, 1)
    _usage(kc, K_MM, now - 10 * 86400, 0)
    return kc


def run(*argv: str) -> int:
    return cli.main(list(argv))


def one_line_error(capsys) -> str:
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# --------------------------------------------------------------------------- help, version

HELP_COMMANDS = [
    [],
    ["cache"],
    ["cache", "list"],
    ["cache", "show"],
    ["cache", "stats"],
    ["cache", "dir"],
    ["cache", "clear"],
    ["cache", "prune"],
    ["compile"],
]


@pytest.mark.parametrize("argv", HELP_COMMANDS, ids=lambda a: " ".join(a) or "kitjit")
def test_help(argv, capsys):
    assert run(*argv, "--help") == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: kitjit")
    assert "--help" in out


def test_version(capsys):
    assert run("--version") == 0
    assert capsys.readouterr().out.startswith("kitjit ")


# --------------------------------------------------------------------------- list


def test_list_table(filled, capsys):
    assert run("cache", "list") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["KEY", "NAME", "SOURCE"]
    assert len(out) == 4
    row = next(ln for ln in out if ln.startswith(K_SOFT4[:12]))
    assert K_SOFT4[:13] not in row  # short key
    for part in ("softmax", "softmax.py:12", "*bf16,*bf16,i32 BLOCK=1024 warps=4", "sm_90a"):
        assert part in row
    assert row.split()[-1] == "5"  # hits
    assert "warps=8" in next(ln for ln in out if ln.startswith(K_SOFT8[:12]))
    mm = next(ln for ln in out if ln.startswith(K_MM[:12]))
    assert "matmul" in mm and " 49." in mm and "KiB" in mm


def test_list_json(filled, capsys):
    assert run("cache", "list", "--json") == 0
    recs = json.loads(capsys.readouterr().out)
    assert {r["key"] for r in recs} == {K_SOFT4, K_SOFT8, K_MM}
    soft = next(r for r in recs if r["key"] == K_SOFT4)
    assert soft["name"] == "softmax" and soft["hits"] == 5
    assert soft["meta"]["signature"] == SOFTMAX_META["signature"]
    assert soft["bytes"] > 0 and soft["created"] > 0 and soft["last_used"] > 0


@pytest.mark.parametrize(
    "sort,order",
    [
        ("name", [K_MM, K_SOFT4, K_SOFT8]),
        ("size", [K_MM]),
        ("hits", [K_SOFT4, K_SOFT8, K_MM]),
        ("used", [K_SOFT8, K_SOFT4, K_MM]),
    ],
)
def test_list_sort(filled, capsys, sort, order):
    assert run("cache", "list", "--json", "--sort", sort) == 0
    keys = [r["key"] for r in json.loads(capsys.readouterr().out)]
    assert keys[: len(order)] == order


def test_list_filter_and_empty(filled, capsys):
    assert run("cache", "list", "--json", "--name", "soft") == 0
    assert len(json.loads(capsys.readouterr().out)) == 2
    assert run("cache", "list", "--name", "nothing") == 0
    assert "no cache entries" in capsys.readouterr().err


# --------------------------------------------------------------------------- show


def test_show_metadata(filled, capsys):
    assert run("cache", "show", K_SOFT4[:6]) == 0
    out = capsys.readouterr().out
    for part in (K_SOFT4, "softmax", "status", "ok", "X: *bf16", "BLOCK=1024", "registers",
                 "kernel.cubin", "kitjit 0.1.0"):  # fmt: skip
        assert part in out


def test_show_by_name(filled, capsys):
    assert run("cache", "show", "matmul") == 0
    assert K_MM in capsys.readouterr().out
    assert run("cache", "show", "softmax") == 1  # two entries: needs a key
    assert "2 entries" in one_line_error(capsys)


def test_show_json(filled, capsys):
    assert run("cache", "show", K_SOFT8[:4], "--json") == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["key"] == K_SOFT8 and rec["meta"]["num_warps"] == 8 and rec["problem"] is None


@pytest.mark.parametrize("flag,name", [("--tir", "kernel.tir"), ("--llvm", "kernel.ll"),
                                       ("--ptx", "kernel.ptx")])  # fmt: skip
def test_show_stage(filled, capsys, flag, name):
    assert run("cache", "show", K_SOFT4[:8], flag) == 0
    assert capsys.readouterr().out == FAKE[name]


def test_show_several_stages(filled, capsys):
    assert run("cache", "show", K_SOFT4[:8], "--tir", "--ptx", "--resources") == 0
    out = capsys.readouterr().out
    assert "// ---- tile IR" in out and "// ---- PTX" in out and "// ---- resources" in out
    assert FAKE["kernel.tir"] in out and FAKE["kernel.ptx"] in out


def test_show_resources_from_meta(filled, capsys):
    assert run("cache", "show", K_SOFT4[:8], "--resources") == 0
    out = capsys.readouterr().out
    assert "registers  40" in out and "spills     0" in out and "shared     4096 bytes" in out
    assert run("cache", "show", K_SOFT4[:8], "--resources", "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"registers": 40, "spills": 0, "shared": 4096}


def test_show_missing_stage(filled, capsys):
    assert run("cache", "show", K_MM[:8], "--ptx") == 1
    assert "no .ptx file" in one_line_error(capsys)


def test_show_unknown_key(filled, capsys):
    assert run("cache", "show", "ffff") == 1
    assert "no cache entry" in one_line_error(capsys)
    assert run("cache", "show", "a") == 1
    assert "ambiguous" in one_line_error(capsys)


def test_show_corrupt_entry_reports_without_removing(filled, capsys):
    entry = filled.find(K_SOFT4)
    (entry.path / "kernel.cubin").write_bytes(b"truncated")
    assert run("cache", "show", K_SOFT4[:8]) == 0
    assert "CORRUPT" in capsys.readouterr().out
    assert entry.path.exists()


def test_show_sass_with_fake_cubin_fails_cleanly(filled, capsys):
    if tools.find_tool("cuobjdump") is None:
        pytest.skip("cuobjdump not available")
    assert run("cache", "show", K_SOFT4[:8], "--sass") == 1
    assert "cuobjdump" in one_line_error(capsys)


# --------------------------------------------------------------------------- stats, dir


def test_stats(filled, capsys):
    filled.get(K_SOFT4)
    filled.get("c0" + "0" * 46)
    (filled.tuning_dir / "matmul").mkdir(parents=True)
    (filled.tuning_dir / "matmul" / "h100.json").write_text("{}")
    assert run("cache", "stats", "--json") == 0
    s = json.loads(capsys.readouterr().out)
    assert s["entries"] == 3 and s["hits"] == 1 and s["misses"] == 1
    assert s["hit_rate"] == 0.5 and s["tuning_records"] == 1
    assert s["bytes"] == sum(e.size() for e in filled.entries())
    assert run("cache", "stats") == 0
    out = capsys.readouterr().out
    assert "entries   3" in out and "hit rate  50.0%" in out


def test_stats_empty(root, capsys):
    assert run("cache", "stats") == 0
    out = capsys.readouterr().out
    assert "entries   0" in out and "hit rate  -" in out


def test_dir(root, tmp_path, capsys):
    assert run("cache", "dir") == 0
    assert capsys.readouterr().out.strip() == str(root)
    other = tmp_path / "elsewhere"
    assert run("cache", "--cache-dir", str(other), "dir") == 0
    assert capsys.readouterr().out.strip() == str(other)


# --------------------------------------------------------------------------- clear, prune


def test_clear_needs_yes(filled, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", open(os.devnull))  # not a terminal
    assert run("cache", "clear") == 1
    assert "--yes" in one_line_error(capsys)
    assert len(filled.entries()) == 3


def test_clear_by_name_then_all(filled, capsys):
    assert run("cache", "clear", "--name", "softmax", "--yes") == 0
    assert "removed 2 entries" in capsys.readouterr().out
    assert [e.meta["name"] for e in filled.entries()] == ["matmul"]
    assert run("cache", "clear", "-y") == 0
    assert "removed 1 entry" in capsys.readouterr().out
    assert filled.entries() == []


def test_prune_older_than(filled, capsys):
    assert run("cache", "prune", "--older-than", "2d") == 0
    out = capsys.readouterr().out
    assert "removed 2 entries" in out
    assert [e.key for e in filled.entries()] == [K_SOFT8]


def test_prune_max_size_lru(filled, capsys):
    small = filled.find(K_SOFT8).size()
    assert run("cache", "prune", "--max-size", str(2 * small + 100), "--json") == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["removed"] == [K_MM]  # least recently used first
    assert rec["freed_bytes"] > 50_000
    assert run("cache", "prune", "--max-size", "0") == 0
    assert filled.entries() == []


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["bogus"],
        ["cache"],
        ["cache", "bogus"],
        ["cache", "list", "--sort", "bogus"],
        ["cache", "list", "--bogus"],
        ["cache", "show"],
        ["cache", "prune"],
        ["cache", "prune", "--max-size", "lots"],
        ["cache", "prune", "--older-than", "soon"],
        ["compile"],
        ["compile", "k.py:kern"],  # no --signature
        ["compile", "no_such_file.py:kern", "--signature", "i32"],
        ["compile", "no_colon.py", "--signature", "i32"],
        ["compile", "HERE:kern", "--signature", "*bf17"],
        ["compile", "HERE:kern", "--signature", "i32,,i32"],
        ["compile", "HERE:kern", "--signature", "i32", "--constexpr", "BLOCK"],
        ["compile", "HERE:kern", "--signature", "i32", "--arch", "hopper"],
        ["compile", "HERE:kern", "--signature", "i32", "--num-warps", "3"],
        ["compile", "HERE:kern", "--signature", "i32", "--num-warps", "four"],
    ],
    ids=lambda a: " ".join(a) or "kitjit",
)
def test_bad_input_one_line(filled, capsys, argv, tmp_path):
    here = tmp_path / "k.py"
    here.write_text("")
    argv = [a.replace("HERE", str(here)) for a in argv]
    assert run(*argv) != 0
    line = one_line_error(capsys)
    assert "error" in line


def test_no_traceback_in_subprocess(filled):
    """The real entry point: one line on stderr, exit code 1, no traceback."""
    p = subprocess.run(
        [sys.executable, "-m", "kitjit.cli", "cache", "show", "ffff"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
    )
    assert p.returncode == 1
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr


def test_console_script_installed():
    exe = shutil.which("kitjit")
    if exe is None:
        pytest.skip("kitjit console script not installed (pip install -e .)")
    p = subprocess.run([exe, "--version"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("kitjit ")


# --------------------------------------------------------------------------- compile


def _fake_jit(monkeypatch, compile_aot=None):
    mod = types.ModuleType("kitjit.jit")
    if compile_aot is not None:
        mod.compile_aot = compile_aot
    monkeypatch.setitem(sys.modules, "kitjit.jit", mod)


def test_compile_calls_compile_aot(tmp_path, monkeypatch, capsys):
    src = tmp_path / "k.py"
    src.write_text("")
    calls = []

    def compile_aot(path, kernel_name, signature, constexprs, num_warps, arch):
        calls.append((path, kernel_name, signature, constexprs, num_warps, arch))
        return types.SimpleNamespace(asm={"cubin": b"CUBIN", "ptx": "PTX", "llir": "LL"})

    _fake_jit(monkeypatch, compile_aot)
    out = tmp_path / "out.cubin"
    argv = ["compile", f"{src}:kern", "--signature", "x:*bf16, *fp32:16 ,n:i32",
            "--constexpr", "BLOCK=128", "--constexpr", "MODE=fast", "--constexpr", "F=1.5",
            "--num-warps", "8", "--arch", "sm_90a", "-o", str(out)]  # fmt: skip
    assert run(*argv) == 0
    assert calls == [
        (str(src), "kern", ["x:*bf16", "*fp32:16", "n:i32"],
         {"BLOCK": 128, "MODE": "fast", "F": 1.5}, 8, "sm_90a"),
    ]  # fmt: skip
    assert out.read_bytes() == b"CUBIN"
    assert "wrote" in capsys.readouterr().out
    assert run("compile", f"{src}:kern", "--signature", "i32", "-o", str(tmp_path / "k.ptx")) == 0
    assert (tmp_path / "k.ptx").read_text() == "PTX"
    assert calls[-1][4:] == (4, "sm_90a")  # defaults
    assert run("compile", f"{src}:kern", "--signature", "i32", "-o", str(tmp_path / "k.ll")) == 0
    assert (tmp_path / "k.ll").read_text() == "LL"


def test_compile_without_compile_aot(tmp_path, monkeypatch, capsys):
    src = tmp_path / "k.py"
    src.write_text("")
    _fake_jit(monkeypatch)  # a kitjit.jit that lacks compile_aot
    assert run("compile", f"{src}:kern", "--signature", "i32") == 2
    assert "not available" in one_line_error(capsys)


def test_compile_errors_are_short(tmp_path, monkeypatch, capsys):
    src = tmp_path / "k.py"
    src.write_text("")

    def compile_aot(*args):
        raise ValueError("kern has 2 run-time parameters, the signature gives 1")

    _fake_jit(monkeypatch, compile_aot)
    assert run("compile", f"{src}:kern", "--signature", "i32") == 1
    assert "2 run-time parameters" in one_line_error(capsys)

    def crash(*args):
        raise RuntimeError("boom\nsecond line")

    _fake_jit(monkeypatch, crash)
    assert run("compile", f"{src}:kern", "--signature", "i32") == 1
    assert "RuntimeError: boom" in one_line_error(capsys)


def test_parse_signature():
    assert cli.parse_signature("*bf16,*bf16,i32") == ["*bf16", "*bf16", "i32"]
    assert cli.parse_signature(" x:*fp16:16 , n:i64 ,u8,i1") == ["x:*fp16:16", "n:i64", "u8", "i1"]
    for bad in ("", "*bf17", "x:", "x:y:i32", "i32:8", "**fp32"):
        with pytest.raises(cli.CliError):
            cli.parse_signature(bad)


# --------------------------------------------------------------------------- real binaries


def _build_cubin(tmp_path) -> bytes | None:
    """A real sm_90a cubin from a hand-written PTX kernel: ptxas, else nvJitLink."""
    ptxas = shutil.which("ptxas")
    if ptxas:
        src, out = tmp_path / "k.ptx", tmp_path / "k.cubin"
        src.write_text(PTX)
        p = subprocess.run([ptxas, "-arch=sm_90a", str(src), "-o", str(out)], capture_output=True)
        if p.returncode == 0:
            return out.read_bytes()
    try:
        from cuda.bindings import nvjitlink

        h = nvjitlink.create(1, ["-arch=sm_90a"])
        try:
            data = PTX.encode()
            nvjitlink.add_data(h, nvjitlink.InputType.PTX, data, len(data), "k.ptx")
            nvjitlink.complete(h)
            cubin = bytearray(nvjitlink.get_linked_cubin_size(h))
            nvjitlink.get_linked_cubin(h, cubin)
            return bytes(cubin)
        finally:
            nvjitlink.destroy(h)
    except Exception:
        return None


@pytest.fixture
def real_cubin(tmp_path) -> bytes:
    if tools.find_tool("cuobjdump") is None:
        pytest.skip("cuobjdump not available (pip install nvidia-cuda-cuobjdump)")
    cubin = _build_cubin(tmp_path)
    if cubin is None:
        pytest.skip("neither ptxas nor nvJitLink can build a cubin here")
    return cubin


def test_tools_on_real_cubin(real_cubin):
    sass = tools.disassemble(real_cubin)
    assert "add_one" in sass
    ops = tools.sass_opcodes(sass)
    assert ops["EXIT"] >= 1 and any(op.startswith("LDG") for op in ops)
    assert any(op.startswith("FADD") for op in ops)
    ru = tools.resource_usage(real_cubin)
    assert ru["function"] == "add_one"
    assert 0 < ru["registers"] < 64 and ru["local"] == 0 and ru["stack"] == 0
    assert set(ru["functions"]) == {"add_one"}


def test_show_sass_and_resources_from_cubin(root, real_cubin, capsys):
    kc = KernelCache()
    kc.put(K_MM, {"kernel.cubin": real_cubin, "kernel.ptx": PTX}, {"name": "add_one"})
    assert run("cache", "show", K_MM[:8], "--sass") == 0
    out = capsys.readouterr().out
    assert "Function : add_one" in out and "FADD" in out
    assert run("cache", "show", "add_one", "--resources", "--json") == 0
    res = json.loads(capsys.readouterr().out)
    assert res["registers"] > 0 and res["local"] == 0 and res["source"] == "cuobjdump"


def test_missing_cuobjdump_is_one_line(root, monkeypatch, capsys):
    monkeypatch.setattr(tools, "find_tool", lambda name: None)
    with pytest.raises(tools.ToolError, match="nvidia-cuda-cuobjdump"):
        tools.disassemble(b"x")
    kc = KernelCache()
    kc.put(K_MM, {"kernel.cubin": b"x"}, {"name": "k"})
    assert run("cache", "show", K_MM[:8], "--sass") == 1
    assert "cuobjdump not found" in one_line_error(capsys)


def test_compile_real_kernel(tmp_path, root, capsys):
    """End to end through the real compiler, when kitjit.jit provides compile_aot."""
    try:
        from kitjit.jit import compile_aot  # noqa: F401
    except (ImportError, AttributeError):
        pytest.skip("kitjit.jit.compile_aot is not available")
    src = tmp_path / "copy_kernel.py"
    src.write_text(
        textwrap.dedent(
            """\
            import kitjit as kit

            @kit.jit
            def copy(X, Y, n, BLOCK: kit.constexpr):
                offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
                kit.store(Y + offs, kit.load(X + offs, mask=offs < n), mask=offs < n)
            """
        )
    )
    out = tmp_path / "copy.cubin"
    argv = ["compile", f"{src}:copy", "--signature", "*fp32,*fp32,i32",
            "--constexpr", "BLOCK=256", "-o", str(out)]  # fmt: skip
    assert run(*argv) == 0, capsys.readouterr().err
    assert out.read_bytes()[:4] == b"\x7fELF"
    capsys.readouterr()
    assert run("cache", "list", "--json") == 0
    [rec] = json.loads(capsys.readouterr().out)
    assert rec["name"] == "copy" and rec["meta"]["arch"] == "sm_90a"
    assert run("cache", "show", "copy", "--ptx") == 0
    assert ".entry copy" in capsys.readouterr().out
    if tools.find_tool("cuobjdump") is not None:
        assert run("cache", "show", "copy", "--sass") == 0
        assert "LDG" in capsys.readouterr().out
    # a second compile is a disk-cache hit whose stages load lazily: every -o kind works
    for suffix, marker in ((".ptx", ".entry copy"), (".ll", "define"), (".tir", "copy")):
        out = tmp_path / f"again{suffix}"
        argv[-1] = str(out)
        assert run(*argv) == 0, capsys.readouterr().err
        assert marker in out.read_text()

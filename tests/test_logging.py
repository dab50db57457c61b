"""Diagnostics through `logging` (issue 13 item 9): loggers "kitjit.*", KITJIT_LOG, compile
events at debug, nothing on stdout."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import kitjit as kit
from kitjit import log_config as klog
from kitjit.autotune import Autotuner, Config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL = textwrap.dedent("""\
    import kitjit as kit

    @kit.jit
    def twice(X, Y, n, BLOCK: kit.constexpr):
        offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
        kit.store(Y + offs, kit.load(X + offs, mask=offs < n) * 2, mask=offs < n)
    """)


@kit.jit
def add_one(X, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    kit.store(X + offs, kit.load(X + offs, mask=offs < n) + 1, mask=offs < n)


@pytest.fixture
def kitjit_logger():
    """The "kitjit" logger, its level and handlers restored afterwards."""
    root = klog.get_logger()
    level, handlers = root.level, list(root.handlers)
    yield root
    root.setLevel(level)
    root.handlers[:] = handlers


def test_compile_events_at_debug(tmp_path, cache_dir, caplog, capsys):
    src = tmp_path / "k.py"
    src.write_text(KERNEL)
    caplog.set_level(logging.DEBUG, logger="kitjit")
    kit.compile_aot(str(src), "twice", ["*fp32", "*fp32", "i32"], {"BLOCK": 64})
    jit_recs = [r for r in caplog.records if r.name == "kitjit.jit"]
    [miss] = [r.getMessage() for r in jit_recs if "cache miss" in r.getMessage()]
    assert "twice [X=*fp32, Y=*fp32, n=i32, BLOCK=64] for sm_90a, 4 warps" in miss
    assert "compiled in" in miss and " s: " in miss and "registers" in miss
    key = miss.split("(key ")[1][:12]
    cache_msgs = [r.getMessage() for r in caplog.records if r.name == "kitjit.cache"]
    assert any(m.startswith(f"miss {key}") for m in cache_msgs)
    assert any(m.startswith(f"stored {key} (twice") for m in cache_msgs)
    caplog.clear()
    kit.compile_aot(str(src), "twice", ["*fp32", "*fp32", "i32"], {"BLOCK": 64})
    msgs = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert ("kitjit.jit", logging.DEBUG) in {(n, lv) for n, lv, _ in msgs}
    assert any(n == "kitjit.jit" and f"disk cache hit (key {key})" in m for n, _, m in msgs)
    assert any(n == "kitjit.cache" and m.startswith(f"hit {key} (twice)") for n, _, m in msgs)
    assert capsys.readouterr().out == ""


def test_autotune_result_logged_at_info_not_printed(cache_dir, caplog, capsys, monkeypatch):
    monkeypatch.delenv("KITJIT_PRINT_AUTOTUNING", raising=False)
    caplog.set_level(logging.INFO, logger="kitjit.autotune")
    tuner = Autotuner(add_one, [Config({"BLOCK": 32}), Config({"BLOCK": 64})], key=["n"])
    x = torch.randn(100)
    tuner[lambda m: (kit.cdiv(100, m["BLOCK"]),)](x, 100)
    [rec] = [r for r in caplog.records if r.name == "kitjit.autotune"]
    assert rec.levelno == logging.INFO and "add_one [n=100" in rec.getMessage()
    assert "interpreter: first valid config" in rec.getMessage()
    out, err = capsys.readouterr()
    assert out == "" and "kitjit autotune" not in err


def test_default_is_warnings_only(kitjit_logger, monkeypatch):
    monkeypatch.delenv("KITJIT_LOG", raising=False)
    kitjit_logger.setLevel(logging.NOTSET)
    klog.configure()
    assert not kitjit_logger.isEnabledFor(logging.INFO)  # the root's WARNING applies
    assert kitjit_logger.isEnabledFor(logging.WARNING)
    assert not [h for h in kitjit_logger.handlers if getattr(h, klog._HANDLER_MARK, False)]


def test_kitjit_log_levels_and_one_handler(kitjit_logger, capsys):
    for value, level in (("debug", logging.DEBUG), ("INFO", logging.INFO),
                         ("warning", logging.WARNING)):
        klog.configure(value)
        assert kitjit_logger.level == level
    klog.configure("debug")
    ours = [h for h in kitjit_logger.handlers if getattr(h, klog._HANDLER_MARK, False)]
    assert len(ours) == 1
    logging.getLogger("kitjit.jit").debug("hello %d", 7)
    out, err = capsys.readouterr()
    assert out == "" and "kitjit.jit DEBUG: hello 7" in err


def test_unknown_kitjit_log_value_is_one_warning(kitjit_logger, caplog):
    kitjit_logger.setLevel(logging.WARNING)
    with caplog.at_level(logging.WARNING, logger="kitjit"):
        klog.configure("loud")
    assert kitjit_logger.level == logging.WARNING
    [rec] = caplog.records
    assert "KITJIT_LOG='loud'" in rec.getMessage() and "debug, info" in rec.getMessage()


def test_kitjit_log_debug_in_a_fresh_process(tmp_path):
    """The environment variable, read at import: compile events on stderr, stdout empty."""
    src = tmp_path / "k.py"
    src.write_text(KERNEL)
    code = (f"import kitjit as kit; kit.compile_aot({str(src)!r}, 'twice', "
            "['*fp32', '*fp32', 'i32'], {'BLOCK': 64})")
    env = dict(os.environ, KITJIT_LOG="debug", KITJIT_CACHE_DIR=str(tmp_path / "c"),
               PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""
    assert "kitjit.jit DEBUG: compile twice" in p.stderr and "cache miss" in p.stderr

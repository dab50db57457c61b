"""The assembler's warnings reach the user: ptxas's numbered performance notes (C7515:
"wgmma.mma_async instructions are serialized ...", which cost the session-5 GEMM 20%) come
back in nvJitLink's info log, where nothing looked. kitjit keeps them in the compiled
kernel's metadata (`ptxas_warnings`, cached with it) and logs each once per compile on the
"kitjit.jit" logger at warning level (KITJIT_LOG shows them on stderr)."""

from __future__ import annotations

import logging

import pytest
from kitjit.backend import compiler

import kitjit as kit

C7515 = ("ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions "
         "are serialized due to non wgmma instructions defining accumulator registers of a "
         "wgmma between start and end of the pipeline stage in the function 'k' in line 9")
LOG = "\n".join(["ptxas info    : Compiling entry function 'k' for 'sm_90a'", C7515,
                 "ptxas info    : Used 40 registers, used 1 barriers",
                 "ptxas warning : Unresolved extern function 'foo'", C7515])


def test_assembler_warnings_are_parsed():
    ws = compiler.assembler_warnings(LOG)
    assert ws == [C7515.split(": ", 1)[1], "Unresolved extern function 'foo'"]
    r = compiler.parse_ptxas_log(LOG)
    assert r.warnings == ws and r.registers == 40
    assert compiler.assembler_warnings("ptxas info    : Used 8 registers") == []


@kit.jit
def scale_kernel(X, Y, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    kit.store(Y + offs, kit.load(X + offs, mask=offs < n) * 2.0, mask=offs < n)


@pytest.fixture
def warned_assembly(monkeypatch):
    """ptx_to_cubin whose assembler log carries C7515 (no kernel of ours triggers it now)."""
    orig = compiler.ptx_to_cubin

    def assemble(ptx, arch, name="kernel"):
        cubin, res = orig(ptx, arch, name)
        return cubin, compiler.parse_ptxas_log(res.log + "\n" + C7515)
    monkeypatch.setattr(compiler, "ptx_to_cubin", assemble)


def test_warnings_in_metadata_and_log(warned_assembly, caplog, cache_dir):
    sig = ["*fp32:16", "*fp32:16", "i32"]
    with caplog.at_level(logging.WARNING, logger="kitjit"):
        ck = kit.compile_aot(__file__, "scale_kernel", sig, {"BLOCK": 128}, 4, arch="sm_90a")
    assert any("C7515" in w for w in ck.metadata["ptxas_warnings"])
    logged = [r for r in caplog.records if "C7515" in r.getMessage()]
    assert len(logged) == 1 and "scale_kernel" in logged[0].getMessage()
    assert logged[0].name == "kitjit.jit" and logged[0].levelno == logging.WARNING
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kitjit"):  # a cache hit: metadata only
        hit = kit.compile_aot(__file__, "scale_kernel", sig, {"BLOCK": 128}, 4, arch="sm_90a")
    assert hit.metadata["ptxas_warnings"] == ck.metadata["ptxas_warnings"]
    assert not [r for r in caplog.records if "C7515" in r.getMessage()]


def test_no_warnings_no_field(cache_dir):
    ck = kit.compile_aot(__file__, "scale_kernel", ["*fp32:16", "*fp32:16", "i32"],
                         {"BLOCK": 256}, 4, arch="sm_90a")
    assert "ptxas_warnings" not in ck.metadata

"""`kitjit compile` for C/C++ hosts (issue 13 item 10): warpgroup-role kernels at 12 warps, the
C header (compiled here by the system C compiler against a stub <cuda.h>: there is no CUDA
toolkit header on this machine) and the JSON launch description, checked against the PTX."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import textwrap
import types

import pytest

from kitjit import cli
from kitjit.aot_header import c_header, launch_description

# The declarations of the CUDA driver API the header uses, with cuda.h's names and types.
STUB_CUDA_H = textwrap.dedent("""\
    #ifndef STUB_CUDA_H
    #define STUB_CUDA_H
    #include <stdint.h>
    #include <stddef.h>
    typedef enum { CUDA_SUCCESS = 0 } CUresult;
    typedef struct CUmod_st *CUmodule;
    typedef struct CUfunc_st *CUfunction;
    typedef struct CUstream_st *CUstream;
    typedef unsigned long long CUdeviceptr;
    typedef uint64_t cuuint64_t;
    typedef uint32_t cuuint32_t;
    typedef struct { _Alignas(64) unsigned long long opaque[16]; } CUtensorMap;
    typedef enum { CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8 } CUfunction_attribute;
    typedef enum { CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0, CU_TENSOR_MAP_DATA_TYPE_INT32 = 3,
                   CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6, CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
                   CU_TENSOR_MAP_DATA_TYPE_FLOAT64 = 8, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9
                 } CUtensorMapDataType;
    typedef enum { CU_TENSOR_MAP_INTERLEAVE_NONE = 0 } CUtensorMapInterleave;
    typedef enum { CU_TENSOR_MAP_SWIZZLE_NONE = 0, CU_TENSOR_MAP_SWIZZLE_32B,
                   CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_SWIZZLE_128B } CUtensorMapSwizzle;
    typedef enum { CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3 } CUtensorMapL2promotion;
    typedef enum { CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0 } CUtensorMapFloatOOBfill;
    CUresult cuModuleLoadData(CUmodule *module, const void *image);
    CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
    CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value);
    CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                            unsigned int gridDimZ, unsigned int blockDimX,
                            unsigned int blockDimY, unsigned int blockDimZ,
                            unsigned int sharedMemBytes, CUstream hStream,
                            void **kernelParams, void **extra);
    CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType dt,
                                    cuuint32_t rank, void *globalAddress,
                                    const cuuint64_t *globalDim,
                                    const cuuint64_t *globalStrides,
                                    const cuuint32_t *boxDim,
                                    const cuuint32_t *elementStrides,
                                    CUtensorMapInterleave interleave,
                                    CUtensorMapSwizzle swizzle,
                                    CUtensorMapL2promotion l2Promotion,
                                    CUtensorMapFloatOOBfill oobFill);
    #endif
    """)

COPY_KERNEL = textwrap.dedent("""\
    import kitjit as kit

    @kit.jit
    def copy(X, Y, n, scale, flag, BLOCK: kit.constexpr):
        offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
        v = kit.load(X + offs, mask=offs < n) * scale
        v = kit.where(flag, v, -v)
        kit.store(Y + offs, v, mask=offs < n)
    """)

WS_ARGS = ["--signature", "A:*bf16:16,B:*bf16:16,C:*bf16:16,M:i32:16,N:i32:16,K:i32:16",
           "--constexpr", "BM=128", "--constexpr", "BN=128", "--constexpr", "BK=64",
           "--constexpr", "STAGES=2", "--num-warps", "12"]


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("KITJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KITJIT_CACHE_DISABLE", raising=False)
    return tmp_path / "cache"


def _syntax_check(header, tmp_path, lang: str) -> None:
    comp = shutil.which("cc" if lang == "c" else "c++")
    if comp is None:
        pytest.skip(f"no system {lang} compiler")
    inc = tmp_path / "stub"
    inc.mkdir(exist_ok=True)
    (inc / "cuda.h").write_text(STUB_CUDA_H.replace("_Alignas(64)", "alignas(64)")
                                if lang == "c++" else STUB_CUDA_H)
    main = tmp_path / f"use.{'c' if lang == 'c' else 'cpp'}"
    main.write_text(f'#include "{header}"\n#include "{header}"\n'  # include guard
                    "int main(void) { return 0; }\n")
    std = ["-std=c11"] if lang == "c" else ["-std=c++17"]
    p = subprocess.run([comp, *std, "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                        "-I", str(inc), str(main)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="needs torch (benchmarks/ws_kernel.py imports it)")
def test_ws_kernel_12_warps_header_and_sidecar(tmp_path, cache_root, capsys):
    """The warp-specialized GEMM (three warpgroups, TMA, >48 KB shared) as a C host sees it."""
    out = tmp_path / "ws.cubin"
    assert cli.main(["compile", "benchmarks/ws_kernel.py:matmul_ws", *WS_ARGS, "-o", str(out),
                     "--header", "--json-sidecar"]) == 0, capsys.readouterr().err
    cubin = out.read_bytes()
    assert cubin[:4] == b"\x7fELF"
    desc = json.loads((tmp_path / "ws.json").read_text())
    assert desc["entry"] == "matmul_ws" and desc["arch"] == "sm_90a"
    assert desc["num_warps"] == 12 and desc["block"] == [384, 1, 1]
    assert desc["cluster"] is None and desc["cubin_file"] == "ws.cubin"
    assert desc["cubin_bytes"] == len(cubin)
    assert desc["dynamic_shared_bytes"] > 48 * 1024 and desc["needs_shared_opt_in"]
    ps = desc["params"]
    assert [p["name"] for p in ps] == ["A", "B", "C", "M", "N", "K", "A_desc", "B_desc"]
    assert [p["c_type"] for p in ps[:6]] == ["CUdeviceptr"] * 3 + ["int32_t"] * 3
    assert [p["offset"] for p in ps] == [0, 8, 16, 24, 28, 32, 64, 192]
    a, b = ps[6], ps[7]
    for d, src in ((a, "A"), (b, "B")):
        assert d["kind"] == "tma_descriptor" and d["for_param"] == src
        assert (d["c_type"], d["size"], d["align"], d["by_value"]) == ("CUtensorMap", 128, 64,
                                                                        True)
        assert d["dtype"] == "bf16" and d["swizzle"] == 128
    assert a["box"] == [128, 64] and b["box"] == [64, 64]
    assert a["encode"]["box_dim"] == [64, 128]  # innermost (columns) first, as the driver
    header = (tmp_path / "ws.h").read_text()
    assert "cuFuncSetAttribute" in header and "#define KITJIT_MATMUL_WS_THREADS 384" in header
    assert f"kitjit_matmul_ws_cubin[{len(cubin)}]" in header
    body = re.search(r"_cubin\[\d+\] KITJIT_ALIGNED8 = \{(.*?)\};", header, re.S).group(1)
    assert bytes(int(x, 16) for x in re.findall(r"0x([0-9a-f]{2})", body)) == cubin
    assert "CU_TENSOR_MAP_SWIZZLE_128B" in header and "kitjit_matmul_ws_encode_A_desc" in header
    _syntax_check(tmp_path / "ws.h", tmp_path, "c")
    _syntax_check(tmp_path / "ws.h", tmp_path, "c++")


def test_header_by_output_suffix(tmp_path, cache_root, capsys):
    """-o k.h: one self-contained header (no cubin file); -o k.json: the sidecar and the cubin
    beside it. Scalars: fp32 as float, bool as int32_t; shared memory under 48 KB needs no
    opt-in; the parameter sizes match the PTX entry."""
    src = tmp_path / "copy_kernel.py"
    src.write_text(COPY_KERNEL)
    base = ["compile", f"{src}:copy", "--signature", "*fp32:16,*fp32:16,i32,fp32,i1",
            "--constexpr", "BLOCK=128"]
    assert cli.main([*base, "-o", str(tmp_path / "k.h")]) == 0, capsys.readouterr().err
    assert not (tmp_path / "k.cubin").exists()
    header = (tmp_path / "k.h").read_text()
    assert "cuFuncSetAttribute" not in header
    assert "float scale, int32_t flag" in header
    _syntax_check(tmp_path / "k.h", tmp_path, "c")
    assert cli.main([*base, "-o", str(tmp_path / "k.json")]) == 0, capsys.readouterr().err
    desc = json.loads((tmp_path / "k.json").read_text())
    assert (tmp_path / "k.cubin").read_bytes()[:4] == b"\x7fELF"
    assert desc["cubin_file"] == "k.cubin" and desc["block"] == [128, 1, 1]
    assert [(p["name"], p["c_type"], p["size"]) for p in desc["params"]] == [
        ("X", "CUdeviceptr", 8), ("Y", "CUdeviceptr", 8), ("n", "int32_t", 4),
        ("scale", "float", 4), ("flag", "int32_t", 4)]
    assert desc["param_buffer_bytes"] == 28 and not desc["needs_shared_opt_in"]
    assert desc["constexprs"] == {"BLOCK": 128}


def test_no_params_and_keyword_names(tmp_path):
    """C keywords as parameter names are renamed; a kernel without parameters passes NULL."""
    ck = types.SimpleNamespace(
        metadata={"name": "k", "arg_kinds": ["ptr", "i64"], "num_warps": 4, "shared": 0,
                  "arch": "sm_90a", "signature": {"int": "*fp16", "default": "i64"},
                  "tma": []},
        asm={"cubin": b"\x7fELF", "ptx": ".entry k(\n.param .u64 k_param_0,\n"
             ".param .u64 k_param_1\n)\n{"})
    desc = launch_description(ck)
    assert [p["c_name"] for p in desc["params"]] == ["int_", "default_"]
    (tmp_path / "k.h").write_text(c_header(desc, b"\x7fELF"))
    _syntax_check(tmp_path / "k.h", tmp_path, "c")
    ck.metadata.update(arg_kinds=[], signature={})
    ck.asm["ptx"] = ".entry k()\n{"
    (tmp_path / "k.h").write_text(c_header(launch_description(ck), b"\x7fELF"))
    assert "NULL, NULL)" in (tmp_path / "k.h").read_text()
    _syntax_check(tmp_path / "k.h", tmp_path, "c")
    ck.asm["ptx"] = ".entry k(\n.param .u32 k_param_0\n)\n{"  # drift from the metadata
    with pytest.raises(ValueError, match="declares 1 parameters"):
        launch_description(ck)


def _fake_compile(monkeypatch, calls):
    def compile_aot(path, kernel_name, signature, constexprs, num_warps, arch):
        calls.append(num_warps)
        return types.SimpleNamespace(asm={"cubin": b"CUBIN", "ptx": ".entry kern(\n)\n{"},
                                     metadata={"name": "kern", "arg_kinds": [],
                                               "num_warps": num_warps, "shared": 0,
                                               "arch": arch, "signature": {}, "tma": []})

    import sys

    mod = types.ModuleType("kitjit.jit")
    mod.compile_aot = compile_aot
    monkeypatch.setitem(sys.modules, "kitjit.jit", mod)


@pytest.mark.parametrize("warps,ok", [(12, True), (20, True), (32, True), (3, False),
                                      (6, False), (36, False), (0, False)])
def test_num_warps_as_the_launch_accepts(tmp_path, monkeypatch, capsys, warps, ok):
    src = tmp_path / "k.py"
    src.write_text("")
    calls: list = []
    _fake_compile(monkeypatch, calls)
    rc = cli.main(["compile", f"{src}:kern", "--signature", "i32", "--num-warps", str(warps),
                   "-o", str(tmp_path / "k.cubin")])
    assert (rc == 0) == ok, capsys.readouterr().err
    assert calls == ([warps] if ok else [])


@pytest.mark.parametrize("extra", [
    ["-o", "OUT/k.h", "--header"],                 # two names for one header
    ["-o", "OUT/k.json", "--json-sidecar"],
    ["-o", "OUT/k.ptx", "--header"],               # a header describes a cubin
    ["--header", "OUT/k.hpp"],                     # wrong suffixes
    ["--json-sidecar", "OUT/k.txt"],
    ["-o", "OUT/k.c"],
    ["--json"],                                    # no abbreviation of --json-sidecar
    ["--head"],
    ["--header", "OUT/k.h", "--header", "OUT/k.h", "--bogus"],
])
def test_bad_placements_are_one_line_errors(tmp_path, monkeypatch, capsys, extra):
    src = tmp_path / "k.py"
    src.write_text("")
    calls: list = []
    _fake_compile(monkeypatch, calls)
    extra = [a.replace("OUT", str(tmp_path)) for a in extra]
    assert cli.main(["compile", f"{src}:kern", "--signature", "i32", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error" in err[0] and calls == []
    assert not list(tmp_path.glob("k.[hjc]*"))


def test_batched_tma_descriptor_in_the_header(tmp_path):
    """A 3-d copy (kit.tma_load with (batch, row, col), as kitjit.nn's attention uses): the
    description and the header encode a rank-3 map whose box is one entry deep."""
    import kitjit as kit

    ck = kit.compile_aot("tests/test_tma3d.py", "box3_kernel",
                         ["*bf16:16", "*bf16:16", "*fp32:16", "i32", "i32"],
                         {"R": 64, "C": 64, "STORE": True}, 4, "sm_90a")
    desc = launch_description(ck)
    x, e = (p for p in desc["params"] if p["kind"] == "tma_descriptor")
    assert x["batched"] and x["encode"]["rank"] == 3 and x["encode"]["box_dim"] == [64, 64, 1]
    assert x["encode"]["global_dim"] == ["cols", "rows", "batch"]
    assert not e["batched"] and e["encode"]["rank"] == 2
    header = c_header(desc, b"\x7fELF")
    assert "uint64_t batch_stride" in header and "dims[2] = batch;" in header
    (tmp_path / "k.h").write_text(header)
    _syntax_check(tmp_path / "k.h", tmp_path, "c")

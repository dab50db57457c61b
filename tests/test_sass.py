"""Compile-to-SASS checks, without a GPU.

Every example kernel is compiled ahead of time with `kitjit.compile_aot` for Hopper
(sm_90a) and Ampere (sm_80), disassembled with cuobjdump (from the nvidia-cuda-cuobjdump
wheel, via kitjit.tools) and checked for the instructions it should use:
- 128-bit global loads and stores (LDG.E.128 / STG.E.128) when pointers are 16-byte aligned
  and the row length is divisible by 16 -- and never when they are not (that would be a
  misaligned access on the GPU);
- no register spills: metadata["spills"] == 0, cuobjdump's local memory == 0, and no
  STL/LDL in the SASS;
- reductions across lanes with butterfly shuffles (SHFL.BFLY);
- tensor-core MMA (HMMA) for kit.dot;
- the Hopper GEMM example (sm_90a only): warpgroup MMA (HGMMA), TMA loads (UTMALDG) and
  mbarriers (SYNCS).
"""

from __future__ import annotations

import pathlib

import pytest

import kitjit as kit
from kitjit.tools import ToolError, disassemble, find_tool, resource_usage, sass_opcodes

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

pytestmark = pytest.mark.skipif(
    find_tool("cuobjdump") is None or find_tool("nvdisasm") is None,
    reason="cuobjdump/nvdisasm not found (pip install nvidia-cuda-cuobjdump "
           "nvidia-cuda-nvdisasm)")


# A small tiled matmul with masks on every edge, for the kit.dot checks (compile_aot imports
# this file by path to find it).
@kit.jit
def matmul_kernel(A, B, C, M, N, K, stride_am, stride_bk, stride_cm,
                  BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr):
    rm = kit.program_id(0) * BM + kit.arange(0, BM)
    rn = kit.program_id(1) * BN + kit.arange(0, BN)
    rk = kit.arange(0, BK)
    acc = kit.zeros((BM, BN), kit.float32)
    for k0 in range(0, K, BK):
        ka = k0 + rk
        a = kit.load(A + rm[:, None] * stride_am + ka[None, :],
                     mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
        b = kit.load(B + ka[:, None] * stride_bk + rn[None, :],
                     mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = kit.dot(a, b, acc)
    kit.store(C + rm[:, None] * stride_cm + rn[None, :], acc.to(C.dtype.element_ty),
              mask=(rm[:, None] < M) & (rn[None, :] < N))


class Compiled:
    def __init__(self, ck):
        self.ck = ck
        self.sass = disassemble(ck.asm["cubin"])
        self.ops = sass_opcodes(self.sass)

    def has(self, prefix: str) -> bool:
        return any(op.startswith(prefix) for op in self.ops)

    def count(self, prefix: str) -> int:
        return sum(n for op, n in self.ops.items() if op.startswith(prefix))

    def summary(self) -> str:
        return ", ".join(f"{op}x{n}" for op, n in sorted(self.ops.items()))


_memo: dict[tuple, Compiled] = {}


def compile_example(path, kernel, signature, constexprs, num_warps=4, arch="sm_90a"):
    """compile_aot + disassembly, memoized over the module (compiles take ~0.1-1 s)."""
    key = (str(path), kernel, tuple(signature), tuple(sorted(constexprs.items())), num_warps,
           arch)
    if key not in _memo:
        ck = kit.compile_aot(str(path), kernel, list(signature), dict(constexprs), num_warps,
                             arch)
        try:
            _memo[key] = Compiled(ck)
        except ToolError as e:  # a broken tool install is not a kitjit failure
            pytest.skip(str(e))
    return _memo[key]


def _sig(ptr: str, n_ptrs: int, *rest: str, aligned: bool = True) -> list[str]:
    return [f"*{ptr}:16" if aligned else f"*{ptr}"] * n_ptrs + list(rest)


# (file, kernel, signature, constexprs, num_warps, reduces?)
def example_cases(dtype: str, n_div16: bool = True, aligned: bool = True):
    n = "i32:16" if n_div16 else "i32"
    return [
        ("vector_add", "add_kernel", _sig(dtype, 3, n, aligned=aligned), {"BLOCK": 1024}, 4,
         False),
        ("softmax", "softmax_kernel", _sig(dtype, 2, n, aligned=aligned), {"BLOCK": 1024}, 4,
         True),
        ("layernorm", "layernorm_kernel", _sig(dtype, 4, n, "fp32", aligned=aligned),
         {"BLOCK": 4096}, 8, True),
        ("rmsnorm", "rmsnorm_kernel", _sig(dtype, 3, n, "fp32", aligned=aligned),
         {"BLOCK": 4096}, 8, True),
    ]


def _ids(cases):
    return [c[0] for c in cases]


ARCHS = ["sm_90a", "sm_80"]


# Every dtype on sm_90a; on sm_80 bf16 only: kitjit's PTX for these kernels is the same for
# both targets but for the .target line (compared for every example and dtype, 2026-11-24),
# so the sm_80 row checks ptxas's sm_80 output, once, on the 16-bit case.
DTYPE_ARCHS = [("bf16", "sm_90a"), ("fp16", "sm_90a"), ("fp32", "sm_90a"), ("bf16", "sm_80")]


@pytest.mark.parametrize("dtype,arch", DTYPE_ARCHS)
@pytest.mark.parametrize("case", example_cases("T"), ids=_ids(example_cases("T")))
@pytest.mark.slow_except(
    "layernorm-bf16-sm_90a", "layernorm-bf16-sm_80", "rmsnorm-bf16-sm_90a", "rmsnorm-bf16-sm_80",
    "softmax-bf16-sm_90a", "softmax-bf16-sm_80", "vector_add-bf16-sm_90a",
    "vector_add-bf16-sm_80")
def test_examples_vectorized_no_spills(case, dtype, arch):
    name, kernel, _, consts, warps, reduces = case
    sig = [s.replace("*T", f"*{dtype}") for s in case[2]]
    c = compile_example(EXAMPLES / f"{name}.py", kernel, sig, consts, warps, arch)
    md = c.ck.metadata
    assert md["arch"] == arch and md["num_warps"] == warps
    # 128-bit global memory access when everything is 16-byte aligned
    assert c.has("LDG.E.128"), f"no 128-bit loads in {name} ({dtype}, {arch}): {c.summary()}"
    assert c.has("STG.E.128"), f"no 128-bit stores in {name} ({dtype}, {arch}): {c.summary()}"
    # ... and nothing narrower on the main data path
    narrow = [op for op in c.ops if op.startswith(("LDG", "STG")) and ".128" not in op]
    assert not narrow, f"{name} ({dtype}, {arch}) also has narrow accesses {narrow}"
    # no spills, by three independent accounts
    assert md["spills"] == 0 and c.ck.n_spills == 0
    assert not c.has("STL") and not c.has("LDL"), c.summary()
    # (cuobjdump may list linked-in helpers such as __cuda_sm70_shflsync_bfly first)
    ru = resource_usage(c.ck.asm["cubin"])["functions"][md["name"]]
    assert ru["local"] == 0 and ru["stack"] == 0
    assert md["registers"] > 0 and ru["registers"] == md["registers"]
    assert md["registers"] <= 255
    if reduces:
        assert c.has("SHFL.BFLY"), f"{name}: reduction without butterfly shuffles"
        # more than one warp: the cross-warp step goes through shared memory
        assert md["shared"] > 0 and c.has("STS") and c.has("LDS") and c.has("BAR")


@pytest.mark.parametrize("case", example_cases("bf16", n_div16=False),
                         ids=_ids(example_cases("bf16")))
def test_unaligned_rows_are_not_vectorized(case):
    """n_cols not known divisible by 16: row starts may be misaligned, so 128-bit accesses
    would fault on the GPU. (vector_add too: the mask offs < n breaks inside a vector.)"""
    name, kernel, sig, consts, warps, _ = case
    c = compile_example(EXAMPLES / f"{name}.py", kernel, sig, consts, warps)
    assert not c.has("LDG.E.128") and not c.has("STG.E.128"), c.summary()
    assert c.has("LDG") and c.has("STG")
    assert c.ck.metadata["spills"] == 0


@pytest.mark.parametrize("case", example_cases("bf16", aligned=False),
                         ids=_ids(example_cases("bf16")))
def test_unaligned_pointers_are_not_vectorized(case):
    name, kernel, sig, consts, warps, _ = case
    c = compile_example(EXAMPLES / f"{name}.py", kernel, sig, consts, warps)
    assert not c.has("LDG.E.128") and not c.has("STG.E.128"), c.summary()


@pytest.mark.parametrize("arch", ARCHS)
def test_ptx_target_and_stages(arch):
    c = compile_example(EXAMPLES / "softmax.py", "softmax_kernel", _sig("bf16", 2, "i32:16"),
                        {"BLOCK": 1024}, 4, arch)
    asm = c.ck.asm
    ptx = asm["ptx"]
    assert f".target {arch}" in ptx
    assert ".entry softmax_kernel(" in ptx
    assert "softmax_kernel" in asm["llir"] and "softmax_kernel" in asm["tir"]
    assert asm["cubin"][:4] == b"\x7fELF"
    # the SASS is for the requested architecture
    assert f"code for {arch}" in c.sass
    md = c.ck.metadata
    assert md["constexprs"] == {"BLOCK": 1024}
    assert md["signature"] == {"X": "*bf16", "Y": "*bf16", "n_cols": "i32"}


@pytest.mark.parametrize("dtype,arch", [("bf16", "sm_90a"), ("fp16", "sm_90a"),
                                        ("bf16", "sm_80")])   # same PTX on both (as above)
def test_dot_uses_tensor_cores(dtype, arch):
    sig = [f"*{dtype}:16"] * 3 + ["i32", "i32", "i32", "i32:16", "i32:16", "i32:16"]
    c = compile_example(pathlib.Path(__file__), "matmul_kernel", sig,
                        {"BM": 64, "BN": 64, "BK": 32}, 4, arch)
    hmma = [op for op in c.ops if op.startswith("HMMA")]
    assert hmma, f"no HMMA in the dot kernel: {c.summary()}"
    # fp32 accumulation; cuobjdump spells bf16 inputs ".BF16" and fp16 ones not at all
    assert all(op.startswith("HMMA.16816.F32") for op in hmma), hmma
    assert all(("BF16" in op) == (dtype == "bf16") for op in hmma), hmma
    # 64x64 per CTA with K=32 per iteration, 4 warps: (64*64*32) / (16*8*16) / 4 = 16 per warp
    assert c.count("HMMA") >= 16
    assert c.ck.metadata["spills"] == 0 and not c.has("STL") and not c.has("LDL")


def test_compile_aot_writes_the_cache(cache_dir):
    compile_example(EXAMPLES / "vector_add.py", "add_kernel", _sig("fp32", 3, "i32:16"),
                    {"BLOCK": 256}, 4)
    entries = [p for p in cache_dir.rglob("meta.json")]
    assert len(entries) == 1
    files = {p.name for p in entries[0].parent.iterdir()}
    assert {"kernel.ptx", "kernel.cubin"} <= files


def test_compile_aot_rejects_bad_signatures():
    path = str(EXAMPLES / "vector_add.py")
    with pytest.raises(ValueError):
        kit.compile_aot(path, "add_kernel", ["*fp32", "*fp32", "i32"], {"BLOCK": 256})
    with pytest.raises(ValueError):
        kit.compile_aot(path, "add_kernel", ["*fp32"] * 3 + ["i33"], {"BLOCK": 256})
    with pytest.raises(ValueError):
        kit.compile_aot(path, "add_kernel", ["*fp32"] * 3 + ["i32"], {})
    with pytest.raises(ValueError):
        kit.compile_aot(path, "no_such_kernel", ["*fp32"] * 3 + ["i32"], {"BLOCK": 256})


# ----------------------------------------------------------------------------- Hopper GEMM
MATMUL_SIG = ["*bf16:16"] * 3 + ["*fp32:16", "*i32:16"] + ["i32:16"] * 3  # A..W, LOCKS, M, N, K
MATMUL_CONSTS = {"BM": 128, "BN": 256, "BK": 64, "STAGES": 3, "GROUP": 8}


def test_matmul_example_uses_wgmma_and_tma():
    c = compile_example(EXAMPLES / "matmul.py", "matmul_kernel", MATMUL_SIG, MATMUL_CONSTS, 8)
    md = c.ck.metadata
    assert c.has("HGMMA"), f"no warpgroup MMA: {c.summary()}"
    assert c.has("UTMALDG"), f"no TMA loads: {c.summary()}"
    assert c.has("SYNCS"), f"no mbarrier ops: {c.summary()}"
    assert not c.has("HMMA"), "fell back to mma.sync"
    # the K loop keeps 64 / 16 = 4 HGMMAs per iteration (not unrolled) and loads A and B
    assert c.count("HGMMA") >= 4
    assert md["spills"] == 0 and not c.has("STL") and not c.has("LDL")
    # 3 stages of 128x64 + 64x256 bf16 tiles, plus barriers: ~144 KiB of shared memory
    assert md["shared"] >= 3 * (128 * 64 + 64 * 256) * 2
    assert md["shared"] <= 227 * 1024
    ru = resource_usage(c.ck.asm["cubin"])["functions"][md["name"]]
    assert ru["local"] == 0 and ru["registers"] == md["registers"]
    assert "wgmma.mma_async" in c.ck.asm["ptx"] and "cp.async.bulk.tensor" in c.ck.asm["ptx"]


# (the GEMM itself compiles for sm_80 too, on cp.async and mma.sync: tests/test_ampere.py)
WS_SIG = ["*bf16:16"] * 4 + ["*fp32:16", "i32:16", "i32:16", "i32", "i32", "fp32"]
WS_CONSTS = {"BM": 128, "BN": 128, "D": 128, "CAUSAL": False, "STAGES": 2, "CONSUMERS": 2}


# kit.setmaxnreg on sm_80 (a no-op): tests/test_ampere.py's roles_kernel


def test_failed_aot_compile_leaves_no_entry(cache_dir):
    with pytest.raises(Exception):  # noqa: B017 - whatever it is, nothing may be cached
        kit.compile_aot(str(ROOT / "tests" / "test_ampere.py"), "narrow_rows_kernel",
                        ["*bf16:16", "*bf16:16"], {"BM": 64}, 4, "sm_80")
    leftovers = [p for p in cache_dir.rglob("*")
                 if p.name == "meta.json" or p.name.startswith(("kernel.", ".tmp-"))] \
        if cache_dir.exists() else []
    assert leftovers == []


# ----------------------------------------------------------------------------- attention
ATTN_SIG = ["*bf16:16"] * 4 + ["*fp32:16", "i32:16", "i32:16", "i32", "i32", "fp32"]  # S, SK, H, G


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_example_uses_wgmma_and_tma(D, causal):
    c = compile_example(EXAMPLES / "attention.py", "attention_kernel", ATTN_SIG,
                        {"BM": 128, "BN": 64, "D": D, "CAUSAL": causal, "STAGES": 2}, 8)
    md = c.ck.metadata
    assert c.has("HGMMA"), f"no warpgroup MMA: {c.summary()}"
    assert c.has("UTMALDG"), f"no TMA loads: {c.summary()}"
    assert c.has("MUFU.EX2"), "the online softmax should run on the SFU's exp2"
    assert not c.has("HMMA"), "fell back to mma.sync"
    assert md["spills"] == 0 and not c.has("STL") and not c.has("LDL"), md
    ru = resource_usage(c.ck.asm["cubin"])["functions"][md["name"]]
    assert ru["local"] == 0 and ru["registers"] == md["registers"]

"""The Hopper GEMM family beyond bf16 (issue 15): fp8 GEMM with per-tensor, per-row/column and
1x128 / 128x128 block scales (examples/matmul_fp8.py), GEMMs with fused epilogues
(examples/matmul_epilogue.py) and the grouped GEMM for mixture-of-experts
(examples/grouped_matmul.py).

Three parts, as in test_hopper_*.py: the CPU interpreter at small ragged sizes (outputs
poisoned with NaN, float64 references), compile-to-SASS checks for sm_90a (QGMMA for fp8,
HGMMA, TMA, no spills) and GPU runs at real sizes (`-m gpu`).
"""

from __future__ import annotations

import importlib
import pathlib
import re
import sys

import pytest
import torch
from hopper_helpers import SMEM_MAX, assert_rows_close, is_poisoned, needs_sass, poison, sass
from kitjit.frontend.errors import CompileError

import kitjit as kit

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

import grouped_matmul as grp  # noqa: E402
import matmul_epilogue as epi  # noqa: E402
import matmul_fp8 as f8  # noqa: E402

__all__ = ["poison"]  # the fixture, imported for the tests here

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
SMALL = dict(BM=64, BN=64, num_warps=4)


def fp8(*shape, dtype=E4, seed=0, device="cpu", scale=3.0):
    """Normal values scaled into fp8's range, made on the CPU, never zero."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) * scale
    return torch.where(x.abs() < 0.1, 1.0, x).to(dtype).to(device)


def scales(mode, M, N, K, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed + 100)

    def r(*s):
        return (torch.rand(*s, generator=g) + 0.5).to(device)

    if mode == "tensor":
        return r(()), r(1)
    if mode == "row":
        return r(M), r(N, 1)
    return r(M, kit.cdiv(K, 128)), r(kit.cdiv(N, 128), kit.cdiv(K, 128))


def out_tol(dtype):
    return 1e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-3


# ============================================================================ interpreter
FP8_CPU = [  # (M, N, K, a dtype, b dtype, out dtype, scales, config)
    (200, 72, 160, E4, E4, torch.bfloat16, "tensor", dict(SMALL, STAGES=3)),   # 8 tiles / 4
    (100, 136, 272, E5, E5, torch.float16, "row", dict(SMALL, STAGES=3)),
    (130, 64, 400, E4, E5, torch.float32, "block", dict(SMALL, STAGES=3)),     # mixed inputs
    (100, 200, 272, E4, E4, torch.bfloat16, "block", dict(BM=128, BN=128, num_warps=8,
                                                          STAGES=3)),
    (150, 72, 32, E4, E4, torch.bfloat16, "tensor", dict(SMALL, STAGES=4)),    # K < the ring
    (100, 72, 160, E4, E4, torch.bfloat16, "tensor", dict(SMALL, STAGES=3, TMA_STORE=True)),
    (100, 68, 160, E4, E4, torch.bfloat16, "tensor", dict(SMALL)),  # 136-byte rows: direct
    (70, 264, 96, E5, E4, torch.float32, "row", dict(SMALL, BN=128, STAGES=2, TMA_STORE=True)),
    # OVERLAP: each tile's C stored under the next tile's first k-step (persistent: 4 programs)
    (200, 136, 160, E4, E4, torch.bfloat16, "tensor", dict(SMALL, STAGES=3, TMA_STORE=2,
                                                            OVERLAP=True)),
    (150, 72, 32, E4, E5, torch.float16, "tensor", dict(SMALL, STAGES=4, OVERLAP=True)),
    (100, 200, 272, E5, E5, torch.bfloat16, "row", dict(SMALL, STAGES=3, TMA_STORE=True,
                                                        OVERLAP=True)),
]


@pytest.mark.parametrize("M,N,K,da,db,dc,mode,cfg", FP8_CPU, ids=[
    f"{m}x{n}x{k}-{str(a)[-4:]}x{str(b)[-4:]}-{str(c)[6:]}-{s}" + ("-tma" if "TMA_STORE" in g
                                                                   else "")
    + ("-overlap" if g.get("OVERLAP") else "")
    for m, n, k, a, b, c, s, g in FP8_CPU])
def test_interp_fp8(M, N, K, da, db, dc, mode, cfg, poison):
    a, b = fp8(M, K, dtype=da, seed=1), fp8(N, K, dtype=db, seed=2)
    sa, sb = scales(mode, M, N, K)
    c = f8.matmul_fp8(a, b, sa, sb, out_dtype=dc, **cfg)
    assert is_poisoned(c, poison) and c.dtype == dc
    assert_rows_close(c, f8.reference(a, b, sa, sb), out_tol(dc), f"fp8 {mode} {M}x{N}x{K}")


@pytest.mark.parametrize("tune", [True, False], ids=["tuned", "heuristic"])
def test_interp_fp8_default_config(tune, poison):
    """The tuned path (the interpreter takes the heuristic's pick, untimed) and tune=False."""
    a, b = fp8(130, 128, seed=3), fp8(264, 128, seed=4)
    sa, sb = scales("tensor", 130, 264, 128)
    c = f8.matmul_fp8(a, b, sa, sb, tune=tune)
    assert is_poisoned(c, poison)
    assert_rows_close(c, f8.reference(a, b, sa, sb), 1e-2, "fp8 default config")


def test_fp8_tuner_candidates():
    """The tuner times only the tile shapes that waste least; the first is the heuristic's."""
    a = torch.empty(1, 1)

    def picks(M, N):
        return [(c.kwargs["BM"], c.kwargs["BN"], c.kwargs["STAGES"],
                 c.kwargs.get("OVERLAP", False))
                for c in f8.least_waste(f8.CONFIGS, dict(M=M, N=N, A=a))]

    ovl, plain, s3, tr = (128, 256, 4, True), (128, 256, 4, False), (128, 256, 3, False), \
        (256, 128, 4, False)
    assert picks(4096, 4096) == [ovl, plain, s3, tr]  # all tie
    assert picks(8192, 128) == [tr]       # N = 128: half of a 256-wide tile idle
    assert picks(128, 8192) == [ovl, plain, s3]


def test_fp8_argument_errors():
    a, b = fp8(64, 64), fp8(64, 64)
    one = torch.ones(())
    with pytest.raises(TypeError, match="float8"):
        f8.matmul_fp8(a.to(torch.bfloat16), b, one, one)
    with pytest.raises(ValueError, match="K % 16"):
        f8.matmul_fp8(fp8(64, 40), fp8(64, 40), one, one)
    with pytest.raises(ValueError, match="scales are per tensor"):
        f8.matmul_fp8(a, b, torch.ones(3), one)
    with pytest.raises(ValueError, match="BN dividing 128"):
        f8.matmul_fp8(a, b, torch.ones(64, 1), torch.ones(1, 1), BN=256)
    assert not f8.matmul_fp8(fp8(64, 0), fp8(32, 0), one, one).any()   # K = 0: zeros
    with pytest.raises(ValueError, match="OVERLAP is not supported"):
        f8.matmul_fp8(a, b, one, one, out_dtype=torch.float32, OVERLAP=True)


@kit.jit
def _fp8_mn_major_b(A, B, C, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr):
    a = kit.shared((BM, BK), A.dtype.element_ty)
    b = kit.shared((BK, BN), B.dtype.element_ty)
    ready = kit.mbarriers(1)
    kit.tma_load(a, A, (0, 0), ready[0])
    kit.tma_load(b, B, (0, 0), ready[0])
    kit.mbarrier_wait(ready[0], 0)
    acc = kit.mma(a, b, kit.zeros((BM, BN), kit.float32))
    r = kit.arange(0, BM)
    kit.store(C + r[:, None] * BN + kit.arange(0, BN)[None, :], acc)


def test_fp8_mma_needs_k_major_b():
    """fp8 wgmma has no transpose bit: a [K, N] B tile is a compile error at the call."""
    a, b, c = fp8(64, 64), fp8(64, 64), torch.empty(64, 64)
    with pytest.raises(CompileError, match="K-major") as e:
        _fp8_mn_major_b[(1,)](a, b, c, BM=64, BN=64, BK=64, num_warps=4)
    assert "kit.mma(a, b" in str(e.value)


EPI_CPU = [  # (M, N, K, dtype, epilogue, config)
    (100, 72, 96, torch.bfloat16, dict(bias=True, act="gelu"), dict(SMALL, BK=32, STAGES=3)),
    (130, 136, 64, torch.float16, dict(bias=True, act="silu"), dict(SMALL, BK=32, STAGES=4)),
    (100, 72, 96, torch.bfloat16, dict(row_scale=True, residual=True),
     dict(SMALL, BK=32, STAGES=3)),
    (150, 72, 96, torch.bfloat16, dict(act="silu", w_up=True), dict(SMALL, BK=32, STAGES=3)),
    (100, 136, 200, torch.bfloat16, dict(bias=True, act="gelu", w_up=True, residual=True),
     {}),                                                      # GEGLU, the gated default
    (300, 136, 72, torch.bfloat16, dict(bias=True, act="silu", row_scale=True), {}),  # 256x128
    (64, 64, 64, torch.bfloat16, {}, dict(SMALL, BK=64, STAGES=2)),
]


def epilogue_args(M, N, K, dtype, spec, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)

    def r(*s, scale=1.0, shift=0.0):
        return (torch.randn(*s, generator=g) * scale + shift).to(dtype).to(device)

    x = r(M, K)
    w = r(N, K, scale=K ** -0.5)
    kw = {"act": spec.get("act", "none")}
    if spec.get("bias"):
        kw["bias"] = r(N)
    if spec.get("w_up"):
        kw["w_up"] = r(N, K, scale=K ** -0.5)
    if spec.get("row_scale"):
        kw["row_scale"] = (torch.rand(M, generator=g) + 0.5).to(dtype).to(device)
    if spec.get("residual"):
        kw["residual"] = r(M, N)
    return x, w, kw


@pytest.mark.parametrize("M,N,K,dtype,spec,cfg", EPI_CPU, ids=[
    f"{m}x{n}x{k}-{str(d)[6:]}-" + ("+".join(s) or "plain") + ("-default" if not c else "")
    for m, n, k, d, s, c in EPI_CPU])
def test_interp_epilogue(M, N, K, dtype, spec, cfg, poison):
    x, w, kw = epilogue_args(M, N, K, dtype, spec, seed=M + N)
    out = epi.linear(x, w, **kw, **cfg)
    assert is_poisoned(out, poison) and out.dtype == dtype
    assert_rows_close(out, epi.reference(x, w, **kw), 1e-2, f"linear {spec}")


def test_epilogue_argument_errors():
    x, w = torch.randn(64, 64, dtype=torch.bfloat16), torch.randn(64, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="act must be"):
        epi.linear(x, w, act="relu6")
    with pytest.raises(ValueError, match="bias must be a contiguous \\[64\\]"):
        epi.linear(x, w, bias=torch.zeros(32, dtype=torch.bfloat16))


GROUPED_CPU = [  # (T, E, N, K, offsets or a skew seed, config)
    (150, 5, 72, 96, 0, dict(SMALL, BK=32, STAGES=3)),              # skewed, an empty group
    (200, 3, 136, 64, [0, 0, 200], dict(SMALL, BK=32, STAGES=4)),   # empty first experts,
    (130, 4, 64, 96, [10, 70, 70, 100], dict(SMALL, BK=32, STAGES=3)),   # K < the ring; rows
    (90, 1, 200, 64, [90], dict(SMALL, BK=64, STAGES=2)),              # past 100 unwritten
    (200, 6, 264, 64, 1, dict(grp.LEGACY)),                           # 128x256, no TMA store
    # whole tiles through the TMA store, last tiles from registers; experts of 0 and 1 rows,
    # whole tiles that start on odd rows, a TMA box clipped at N
    (220, 7, 136, 64, [0, 1, 1, 65, 129, 193, 200], dict(SMALL, BK=32, STAGES=3,
                                                         TMA_STORE=2)),
    (300, 3, 264, 64, [1, 130, 300], dict(grp.TMA)),                  # 128x256 tma-halves
    (120, 2, 200, 64, [1, 120], {}),       # default_config: LEGACY 128x256
    (130, 2, 200, 64, [1, 120], dict(grp.BM64)),   # 64x256, 5 stages
    # BALANCE: 9 row blocks in groups of 5 and 4 (not 8 and 1)
    (620, 2, 136, 32, [545, 600], dict(SMALL, BK=32, STAGES=2, TMA_STORE=2, BALANCE=True)),
]


@pytest.mark.parametrize("T,E,N,K,groups,cfg", GROUPED_CPU, ids=[
    f"T{t}-E{e}-{n}x{k}-BM{c.get('BM', 'auto')}" + ("-tma" if c.get("TMA_STORE") else "")
    + ("-balance" if c.get("BALANCE") else "")
    for t, e, n, k, _, c in GROUPED_CPU])
def test_interp_grouped(T, E, N, K, groups, cfg, poison):
    g = torch.Generator().manual_seed(T + E)
    x = torch.randn(T, K, generator=g).to(torch.bfloat16)
    w = (torch.randn(E, N, K, generator=g) / K ** 0.5).to(torch.bfloat16)
    offs = grp.routed(T, E, "cpu", seed=groups) if isinstance(groups, int) else \
        torch.tensor(groups, dtype=torch.int32)
    out = grp.grouped_mm(x, w, offs, **cfg)
    assert is_poisoned(out, poison)
    n = int(offs[-1])
    assert_rows_close(out[:n], grp.reference(x, w, offs)[:n], 1e-2, f"grouped {groups}")
    assert torch.isnan(out[n:]).all(), "rows past the last group were written"


def test_grouped_k0():
    x, w = torch.randn(10, 0, dtype=torch.bfloat16), torch.randn(2, 16, 0, dtype=torch.bfloat16)
    out = grp.grouped_mm(x, w, torch.tensor([4, 10], dtype=torch.int32))
    assert out.shape == (10, 16) and not out.any()


def test_grouped_argument_errors():
    x, w = torch.randn(64, 32, dtype=torch.bfloat16), torch.randn(2, 16, 32, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="offs int32"):
        grp.grouped_mm(x, w, torch.tensor([32, 64]))


# ============================================================================ SASS
_SIG_F8 = ["*fp8e4nv:16", "*fp8e4nv:16", "*bf16:16", "*fp32:16", "*fp32:16"] + ["i32:16"] * 3


def f8_sass(scale, dt="fp8e4nv", out="bf16", **over):
    cfg = dict(f8.default_config(scale, 1024, {"bf16": torch.bfloat16,
                                               "fp32": torch.float32}[out]))
    nw = cfg.pop("num_warps")
    cfg.update(GROUP=8, SCALE=scale, **over)
    sig = [s.replace("fp8e4nv", dt) for s in _SIG_F8]
    sig[2] = f"*{out}:16"
    return sass(EXAMPLES / "matmul_fp8.py", "matmul_fp8_kernel", sig, cfg, nw), cfg


@needs_sass
@pytest.mark.parametrize("scale,dt,out", [("tensor", "fp8e4nv", "bf16"),
                                          ("tensor", "fp8e4nv", "fp32"),
                                          ("row", "fp8e5", "bf16"), ("block", "fp8e4nv", "bf16")])
def test_sass_fp8(scale, dt, out):
    """The default config of each scaling (and of fp32 outputs, whose staging tile would not
    fit next to 3 stages: found on the H100, where the launch refused 280 KB)."""
    c, cfg = f8_sass(scale, dt, out)
    kind = "E4M3" if dt == "fp8e4nv" else "E5M2"
    mma = c.find(rf"QGMMA\.64x{cfg['BN']}x32\.F32\.{kind}\.{kind} R\d+, gdesc\[")
    # two warpgroups of 64 rows; one 128-wide fp8 K tile is four k32 instructions
    assert len(mma) >= 4 and len(mma) == len(c.find(r"[QH]GMMA")), c.find(r"[QH]GMMA")
    assert c.has("UTMALDG") and not c.has("HMMA"), c.summary()
    c.assert_no_spills()
    ring = cfg["STAGES"] * (cfg["BM"] + cfg["BN"]) * cfg["BK"]
    assert ring <= c.md["shared"] <= SMEM_MAX
    tma_store = cfg.get("TMA_STORE", False)   # the default epilogue for per-tensor/row scales
    assert {t["param"] for t in c.md["tma"]} == ({0, 1, 2} if tma_store else {0, 1})
    assert c.has("UTMASTG") == bool(tma_store), c.summary()
    # one WARPGROUP.ARRIVE per k-step's four QGMMAs: ptxas did not serialize them (C7515)
    assert len(mma) == 4 * len(c.find(r"WARPGROUP\.ARRIVE")), c.summary()


@needs_sass
def test_sass_fp8_block_promotion_overlaps():
    """Block scales: the partial of K-block k is scaled and added while block k+1's MMAs run
    (kit.mma pending=1); the read of the older partial ties it through `wait_group 1`, so the
    loop has no `wait_group 0` (which would drain the new MMAs before the promotion)."""
    c, _ = f8_sass("block")
    waits = re.findall(r"wgmma\.wait_group\.sync\.aligned (\d)", c.ptx)
    assert sorted(waits) == ["0", "1", "1"], waits   # the epilogue's; the issue's; the tie


@kit.jit
def _retire_scoped(A, B, C, FLAG, n, m, LOOP: kit.constexpr, BM: kit.constexpr,
                   BN: kit.constexpr, BK: kit.constexpr):
    a = kit.shared((BM, BK), A.dtype.element_ty)
    b = kit.shared((BN, BK), B.dtype.element_ty)
    ready = kit.mbarriers(1)
    kit.tma_load(a, A, (0, 0), ready[0])
    kit.tma_load(b, B, (0, 0), ready[0])
    kit.mbarrier_wait(ready[0], 0)
    prev = kit.zeros((BM, BN), kit.float32)   # loop-carried, in flight from the last trip
    total = kit.zeros((BM, BN), kit.float32)
    for _ in range(n):
        if LOOP:
            for _ in range(m):                 # may run zero times
                total += kit.mma(a, b.T, kit.zeros((BM, BN), kit.float32), pending=1)
        elif kit.load(FLAG) != 0:              # may not run
            total += kit.mma(a, b.T, kit.zeros((BM, BN), kit.float32), pending=1)
        total += prev     # the MMA above retired prev only where it ran: wait_group 0 here
        prev = kit.mma(a, b.T, kit.zeros((BM, BN), kit.float32), pending=1)
    r = kit.arange(0, BM)
    kit.store(C + r[:, None] * BN + kit.arange(0, BN)[None, :], total + prev)


@pytest.mark.parametrize("loop", [False, True], ids=["if", "loop"])
def test_mma_retires_only_where_it_runs(loop):
    """A pending=1 MMA retires the loop-carried accumulators still in flight (the fp8 block
    promotion reads the previous partial through `wait_group 1`), but only for the code its
    own block dominates: after an `if` branch or an inner loop that may not have run,
    reading `prev` waits for every group (wait_group 0)."""
    ck = kit.compile_aot(__file__, "_retire_scoped", ["*bf16:16"] * 3 + ["*i32:16"] + ["i32"] * 2,
                         dict(LOOP=loop, BM=64, BN=64, BK=64), 4, arch="sm_90a")
    waits = re.findall(r"wgmma\.wait_group\.sync\.aligned (\d)", ck.asm["ptx"])
    # issues: 1, 1; reads: the inner MMA's result 0, prev in the loop 0, prev after it 0
    assert sorted(waits) == ["0", "0", "0", "1", "1"], waits


@needs_sass
@pytest.mark.parametrize("tma_store,stages", [(2, 4), (False, 4), (1, 3)],
                         ids=["tma-halves", "direct", "tma-whole-s3"])
@pytest.mark.slow_except("tma-halves")
def test_sass_fp8_overlap(tma_store, stages):
    """OVERLAP: the tile's k-step 0 is peeled (4 more QGMMAs, still one ARRIVE per 4) and the
    last tile's C (16-bit registers beside the accumulator: no spills) goes out between its
    issue and the next wait, so no `wait_group 0` stands between them."""
    c, cfg = f8_sass("tensor", OVERLAP=True, TMA_STORE=tma_store, STAGES=stages)
    mma = c.find(r"QGMMA\.64x256x32\.F32\.E4M3\.E4M3 R\d+, gdesc\[")
    assert len(mma) == 8 == 4 * len(c.find(r"WARPGROUP\.ARRIVE")), c.summary()
    c.assert_no_spills()
    assert c.has("UTMASTG") == bool(tma_store), c.summary()
    lines = c.text.splitlines()
    first = next(i for i, ln in enumerate(lines) if "QGMMA" in ln and "RZ, !UPT" in ln)
    store = next(i for i, ln in enumerate(lines) if i > first and re.search(r"\b(STS|STG)", ln))
    between = "\n".join(lines[first:store])
    assert "gsb0, 0x0" not in between and between.count("QGMMA") == 4, between


@needs_sass
def test_sass_fp8_direct_store():
    """The fallback epilogue (rows of C not a multiple of 16 bytes): 16-byte register
    stores, 4 stages."""
    c, _ = f8_sass("tensor", STAGES=4, TMA_STORE=False, OVERLAP=False)
    assert not c.has("UTMASTG") and len(c.find(r"STG\.E\.128")) == 16, c.summary()
    c.assert_no_spills()


_SIG_EPI = ["*bf16:16"] * 7 + ["i32:16"] * 3


@needs_sass
@pytest.mark.parametrize("spec", [dict(ACT="silu", HAS_BIAS=True), dict(ACT="silu", GATED=True)],
                         ids=["bias-silu", "swiglu"])
@pytest.mark.slow_except("swiglu")
def test_sass_epilogue(spec):
    cfg = dict(epi.DEFAULT_GATED if spec.get("GATED") else epi.DEFAULT)
    nw = cfg.pop("num_warps")
    flags = dict(ACT="none", HAS_BIAS=False, GATED=False, HAS_SCALE=False, HAS_RES=False)
    c = sass(EXAMPLES / "matmul_epilogue.py", "matmul_epilogue_kernel", _SIG_EPI,
             dict(cfg, GROUP=8, **dict(flags, **spec)), nw)
    mma = c.find(rf"HGMMA\.64x{cfg['BN']}x16\.F32\.BF16 R\d+, gdesc\[")
    per_k = cfg["BM"] // 128 * cfg["BK"] // 16 * (2 if spec.get("GATED") else 1)
    assert len(mma) >= per_k and len(mma) == len(c.hgmma()), c.hgmma()
    assert c.has("UTMALDG") and not c.has("HMMA"), c.summary()
    c.assert_no_spills()


@needs_sass
@pytest.mark.parametrize("name", ["LEGACY", "TMA", "BM64"])
@pytest.mark.slow_except("LEGACY", "TMA")   # the default, and the TMA-store epilogue
def test_sass_grouped(name):
    """Each config: HGMMA from shared tiles, TMA loads, no spills, the k-step's HGMMAs in
    flight together (no C7514; a full wait only after each tile's loop); with TMA_STORE the
    whole tiles leave through UTMASTG (two column halves) and the last tiles through 16-byte
    register stores, and the ring plus the staging tile fit the 227 KB."""
    cfg = dict(getattr(grp, name))
    nw = cfg.pop("num_warps")
    kernel = "grouped_matmul_kernel"
    sig = ["*bf16:16"] * 3 + ["*i32:16"] + ["i32"] + ["i32:16"] * 2
    c = sass(EXAMPLES / "grouped_matmul.py", kernel, sig, dict(cfg, GROUP=8, EP=64), nw)
    mma = c.find(rf"HGMMA\.64x{cfg['BN']}x16\.F32\.BF16 R\d+, gdesc\[")
    assert len(mma) >= 4 and len(mma) == len(c.hgmma()), c.hgmma()
    assert not c.md.get("ptxas_warnings"), c.md["ptxas_warnings"]
    assert len(c.find(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x0")) <= 2, c.summary()
    assert c.has("UTMALDG"), c.summary()
    c.assert_no_spills()
    assert re.search(r"st\.global\.v4\.b32", c.ptx), "16-byte epilogue stores"
    assert c.has("UTMASTG") == bool(cfg.get("TMA_STORE")), c.summary()
    assert c.md["shared"] <= SMEM_MAX, c.md


# ============================================================================ GPU
FP8_GPU = [  # (M, N, K, a, b, out, scales)
    (1000, 1032, 1040, E4, E4, torch.bfloat16, "tensor"),     # TMA store clipped at the edges
    (1000, 1036, 1040, E4, E4, torch.float16, "tensor"),      # rows of 2072 B: direct stores
    (1000, 1032, 1040, E5, E4, torch.float32, "tensor"),
    (2048, 4096, 4096, E4, E4, torch.bfloat16, "tensor"),
    (1000, 1032, 1040, E5, E5, torch.float16, "row"),
    (777, 520, 2048, E4, E5, torch.float32, "row"),
    (1000, 1032, 1040, E4, E4, torch.bfloat16, "block"),
    (2048, 4096, 4096, E4, E4, torch.float32, "block"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,da,db,dc,mode", FP8_GPU)
def test_gpu_fp8(M, N, K, da, db, dc, mode, poison):
    a, b = fp8(M, K, dtype=da, seed=1, device="cuda"), fp8(N, K, dtype=db, seed=2,
                                                           device="cuda")
    sa, sb = scales(mode, M, N, K, device="cuda")
    c = f8.matmul_fp8(a, b, sa, sb, out_dtype=dc)
    assert is_poisoned(c, poison)
    assert_rows_close(c, f8.reference(a, b, sa, sb), out_tol(dc), f"fp8 {mode} {M}x{N}x{K}")
    if mode == "tensor" and M % 16 == N % 16 == 0:   # cuBLAS fp8 (fast accumulation, as
        # ours) gives the same numbers; it takes dims that are multiples of 16 only
        t = torch._scaled_mm(a, b.T, sa.reshape(()), sb.reshape(()), out_dtype=dc,
                             use_fast_accum=True)
        assert_rows_close(c, t.double(), 1e-2, "fp8 vs torch._scaled_mm")
    if mode == "tensor" and dc == torch.bfloat16:    # the other epilogue
        c2 = f8.matmul_fp8(a, b, sa, sb, out_dtype=dc, **f8.DEFAULT_DIRECT)
        assert_rows_close(c2, f8.reference(a, b, sa, sb), 1e-2, "fp8 direct-store epilogue")


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,dc,mode,tma", [
    (1000, 1032, 1040, torch.bfloat16, "tensor", 2),     # ragged edges, TMA store in halves
    (1000, 1036, 1040, torch.float16, "tensor", False),  # rows of 2072 B: direct stores
    (4096, 4096, 1024, torch.bfloat16, "tensor", 2),     # several tiles per program
    (2000, 4096, 384, torch.bfloat16, "row", 2),         # K of 3 steps: shorter than the ring
])
def test_gpu_fp8_overlap(M, N, K, dc, mode, tma, poison):
    a, b = fp8(M, K, seed=5, device="cuda"), fp8(N, K, seed=6, device="cuda")
    sa, sb = scales(mode, M, N, K, device="cuda")
    c = f8.matmul_fp8(a, b, sa, sb, out_dtype=dc, OVERLAP=True, TMA_STORE=tma)
    assert is_poisoned(c, poison)
    assert_rows_close(c, f8.reference(a, b, sa, sb), 1e-2, f"fp8 overlap {M}x{N}x{K}")
    d = f8.matmul_fp8(a, b, sa, sb, out_dtype=dc, tune=False)
    assert torch.equal(c, d), "the same sums in the same order as the default config"


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [dict(bias=True, act="gelu"), dict(bias=True, act="silu"),
                                  dict(row_scale=True, residual=True),
                                  dict(act="silu", w_up=True),
                                  dict(bias=True, act="gelu", w_up=True, row_scale=True,
                                       residual=True)],
                         ids=["bias-gelu", "bias-silu", "scale-residual", "swiglu", "all"])
def test_gpu_epilogue(spec, poison):
    x, w, kw = epilogue_args(1000, 1032, 1040, torch.bfloat16, spec, device="cuda")
    out = epi.linear(x, w, **kw)
    assert is_poisoned(out, poison)
    assert_rows_close(out, epi.reference(x, w, **kw), 1e-2, f"linear {spec}")


@pytest.mark.gpu
@pytest.mark.parametrize("T,E,N,K", [(4096, 8, 1032, 1024), (4096, 64, 512, 2048),
                                     (1000, 16, 200, 136), (20000, 4, 520, 256)])
@pytest.mark.parametrize("cfg", ["default", "LEGACY", "TMA", "BM64"])
def test_gpu_grouped(T, E, N, K, cfg, poison):
    x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
    offs = grp.routed(T, E, "cuda", seed=E)
    config = {} if cfg == "default" else dict(getattr(grp, cfg))
    if N % 8:
        config["TMA_STORE"] = 0
    out = grp.grouped_mm(x, w, offs, **config)
    assert is_poisoned(out, poison)
    assert_rows_close(out, grp.reference(x, w, offs).cuda(), 1e-2, f"grouped T={T} E={E}")


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", ["LEGACY", "TMA", "BM64"])
def test_gpu_grouped_ragged(cfg, poison):
    """Experts of 0 and 1 rows, whole tiles that start on odd rows, rows past the last
    group left unwritten (NaN)."""
    T, N, K = 1200, 1032, 520
    offs = torch.tensor([0, 1, 1, 129, 193, 700, 700, 1100], dtype=torch.int32, device="cuda")
    x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(len(offs), N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
    out = grp.grouped_mm(x, w, offs, **getattr(grp, cfg))
    assert is_poisoned(out, poison)
    assert_rows_close(out[:1100], grp.reference(x, w, offs)[:1100].cuda(), 1e-2, cfg)
    assert torch.isnan(out[1100:]).all(), "rows past the last group were written"


# ============================================================================ benchmark, mocked
def test_skinny_and_llm_sections_mocked(monkeypatch):
    """benchmarks/gemm_family.py's skinny and llm sections on the CPU with the GPU parts
    mocked (matmul by torch, timings by fakes that still run every rotated call): the
    rotating copies, the graph / back-to-back columns, an uncapturable variant's "n/a: why"
    and the per-M geomeans reach the table."""
    bench_dir = EXAMPLES.parent / "benchmarks"
    monkeypatch.syspath_prepend(str(bench_dir))
    gf = importlib.import_module("gemm_family")
    st = gf.st
    monkeypatch.setattr(gf, "DEVICE", "cpu")
    monkeypatch.setattr(gf, "LLAMA", {"8B": {"o": (64, 2048)}})
    monkeypatch.setattr(gf, "SKINNY_M", [1, 16])
    monkeypatch.setattr(gf, "LLM_M", (16,))
    monkeypatch.setattr(gf, "SKINNY_CLUSTER", {"cluster": {}})
    monkeypatch.setattr(gf, "results", {})
    monkeypatch.setattr(st, "L2_BYTES", 2 ** 20)           # 8 copies of the 256 KB weights
    seen: list = []

    def matmul(a, w, trans_b=False, **_):
        seen.append(w.data_ptr())
        return (a.float() @ w.float().T).to(a.dtype)

    monkeypatch.setattr(gf.mm, "matmul", matmul)
    monkeypatch.setattr(gf, "_cluster_splitk", lambda a, w, **cfg: matmul(a, w))
    fake_ms = {"cublas": 0.020, "kitjit": 0.016, "cluster": 0.030}
    monkeypatch.setattr(gf, "interleaved", lambda runs, rounds=None: {
        n: (f(), fake_ms[n])[1] for n, f in runs.items()})
    graphs = iter(range(100))

    def graph_ms(calls, n, check=None):
        if next(graphs) % 3 == 2:                      # each skinny row's third: cluster
            raise RuntimeError("operation not permitted when stream is capturing")
        assert n % len(calls) == 0                     # whole rounds over the copies
        outs = [c() for c in calls]                    # one round (the real one runs n)
        check(len(calls) - 1, outs[-1])
        return 0.010

    monkeypatch.setattr(st, "graph_ms", graph_ms)
    monkeypatch.setattr(st, "eager_ms", lambda calls, n: [c() for c in calls] and 0.020)
    gf.bench_skinny()
    rows = gf.results["skinny"]
    assert [r["shape"] for r in rows] == ["1x64x2048", "16x64x2048"]
    assert rows[0]["copies"] == 8 and len(set(seen)) >= 8        # every copy was called
    assert rows[0]["graph_us"]["kitjit"] == 10.0 and rows[0]["b2b_us"]["kitjit"] == 20.0
    assert rows[0]["graph_us"]["cluster"].startswith("n/a: RuntimeError: operation not")
    assert rows[0]["graph_x"] == {"kitjit": 1.0, "cluster": None}
    assert gf.results["skinny_graph_geomean_kitjit_M16"] == 1.0
    assert gf.results["skinny_b2b_geomean_kitjit_M1"] == 1.0
    assert gf.results["skinny_geomean_kitjit_M1"] == 1.25             # per-call column kept
    graphs = iter(range(100))
    gf.bench_llm(deadline=float("inf"))
    assert gf.results["llm"][0]["graph_x"] == {"kitjit": 1.0}
    text = gf.table()
    assert "CUDA graph | back-to-back" in text and "n/a: RuntimeError" in text
    assert "geomean x cuBLAS kitjit           M=1: 1.0 | 1.0  M=16: 1.0 | 1.0" in text
    assert "M=16 1.0 / 1.0" in text


@pytest.mark.gpu
@pytest.mark.parametrize("M", [16, 100, 128])   # split-K in the kernel / in slabs
def test_gpu_skinny_matmul_graph_capturable(monkeypatch, M, poison):
    """The example's skinny path captures into a CUDA graph (what the skinny section's
    graph column needs) and the replayed graph computes a @ w.T on every rotating copy
    (outputs poisoned inside the graph too)."""
    monkeypatch.syspath_prepend(str(EXAMPLES.parent / "benchmarks"))
    import matmul as mm
    import skinny_timing as st

    N, K = 4096, 4096
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * K ** -0.5
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    assert mm.splitk_for(M, N, K, mm.num_sms(a.device)) > 1
    ref = a.double() @ w.double().T
    ws, as_ = st.rotating(w, 3), st.rotating(a, 3)
    calls = [lambda a=a, w=w: mm.matmul(a, w, trans_b=True) for a, w in zip(as_, ws)]

    def check(i, out):
        assert_rows_close(out.double(), ref, 1e-2, f"graph replay, copy {i}")

    t = st.time_variant(calls, 0.02, check=check, work_ms=1.0)
    assert isinstance(t["graph"], float), t["graph"]
    assert t["graph"] > 0 and t["b2b"] > 0

"""kit.atomic_*: interpreter semantics against sequential numpy references (collisions,
masks, old values, Triton's float max/min), a CAS lock over many programs, spin detection,
and the PTX/SASS the backend emits (sm_90a)."""

import pathlib

import numpy as np
import pytest
import torch
from atomic_kernels import (
    cas_kernel,
    lock_counter_kernel,
    rmw_kernel,
    scalar_counter_kernel,
    spin_kernel,
)
from kitjit.frontend.errors import CompileError

import kitjit as kit
from kitjit.interpreter import DeadlockError

HERE = pathlib.Path(__file__).resolve().parent
KERNELS = str(HERE / "atomic_kernels.py")


def _seq(kind, mem, idx, vals, mask):
    """Sequential reference in lane order: (final memory, old values; 0 where masked)."""
    mem = mem.copy()
    old = np.zeros_like(vals)
    for i in range(len(idx)):
        if not mask[i]:
            continue
        j = idx[i]
        o = mem[j]
        old[i] = o
        v = vals[i]
        if kind == "add":
            mem[j] = o + v
        elif kind in ("max", "min") and mem.dtype.kind == "f":
            it = np.dtype(f"i{mem.dtype.itemsize}")
            ut = np.dtype(f"u{mem.dtype.itemsize}")
            ov, vv = np.array([o]), np.array([v])
            if np.signbit(v):
                f = np.minimum if kind == "max" else np.maximum
                mem[j] = f(ov.view(ut), vv.view(ut)).view(mem.dtype)[0]
            else:
                f = np.maximum if kind == "max" else np.minimum
                mem[j] = f(ov.view(it), vv.view(it)).view(mem.dtype)[0]
        elif kind == "max":
            mem[j] = max(o, v)
        elif kind == "min":
            mem[j] = min(o, v)
        elif kind == "and":
            mem[j] = o & v
        elif kind == "or":
            mem[j] = o | v
        elif kind == "xor":
            mem[j] = o ^ v
        else:
            mem[j] = v
    return mem, old


def _run(kind, dtype, n, slots, block, vals=None, mem0=None, sem="acq_rel", scope="gpu"):
    g = torch.Generator().manual_seed(hash((kind, str(dtype), n)) % 2**31)
    idx = torch.randint(0, slots, (n,), generator=g, dtype=torch.int32)
    if vals is None:
        if dtype.is_floating_point:
            vals = torch.randn(n, generator=g, dtype=torch.float64).to(dtype)
        else:
            vals = torch.randint(-50 if dtype.is_signed else 0, 100, (n,), generator=g,
                                 dtype=torch.int64).to(dtype)
    if mem0 is None:
        mem0 = (torch.randn(slots, generator=g, dtype=torch.float64).to(dtype)
                if dtype.is_floating_point else
                torch.randint(0, 100, (slots,), generator=g, dtype=torch.int64).to(dtype))
    p = mem0.clone()
    old = torch.full((n,), 77, dtype=dtype)  # poisoned
    if True:
        rmw_kernel[(triton_cdiv(n, block),)](p, vals, old, idx, n, KIND=kind, SEM=sem,
                                             SCOPE=scope, BLOCK=block)
    return p, old, idx, vals, mem0


def triton_cdiv(a, b):
    return -(-a // b)


@pytest.mark.parametrize("kind,dtype", [
    ("add", torch.int32), ("add", torch.int64), ("add", torch.float64),
    ("max", torch.int32), ("min", torch.int64), ("max", torch.float32), ("min", torch.float64),
    ("and", torch.int32), ("or", torch.int64), ("xor", torch.int32), ("xchg", torch.float32),
])
def test_rmw_collisions_match_sequential_order(kind, dtype):
    n, slots = 50, 7  # many lanes per address, a ragged last block
    p, old, idx, vals, mem0 = _run(kind, dtype, n, slots, 16)
    ref_mem, ref_old = _seq(kind, mem0.numpy(), idx.numpy(), vals.numpy(), np.ones(n, bool))
    np.testing.assert_array_equal(p.numpy(), ref_mem)
    np.testing.assert_array_equal(old.numpy(), ref_old)


def test_add_fp32_histogram_and_ftz():
    n = 40
    vals = torch.rand(n, dtype=torch.float32) + 0.5
    vals[3] = 1e-40  # a subnormal input flushes to zero, as atom.add.f32 does
    p, old, idx, vals, mem0 = _run("add", torch.float32, n, 5, 16, vals=vals)
    ref = mem0.double().index_add(0, idx.long(), vals.double() * (vals.abs() > 1e-38))
    torch.testing.assert_close(p.double(), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_add_half(dtype):
    p, old, idx, vals, mem0 = _run("add", dtype, 33, 4, 16)
    ref = mem0.double().index_add(0, idx.long(), vals.double())
    torch.testing.assert_close(p.double(), ref, rtol=2e-2, atol=2e-2)


def test_float_max_min_negatives_nan_and_signed_zero():
    nan, neg_nan = float("nan"), -float("nan")
    vals = torch.tensor([-1.0, -0.0, 0.0, -5.0, nan, 3.0, neg_nan, -2.0], dtype=torch.float32)
    mem0 = torch.tensor([-3.0, -7.0, -0.0, 2.0, 1.0, nan, 4.0, neg_nan], dtype=torch.float32)
    for kind in ("max", "min"):
        p = mem0.clone()
        old = torch.full((8,), 77.0)
        idx = torch.arange(8, dtype=torch.int32)
        if True:
            rmw_kernel[(1,)](p, vals, old, idx, 8, KIND=kind, SEM="acq_rel", SCOPE="gpu",
                             BLOCK=8)
        ref, ref_old = _seq(kind, mem0.numpy(), idx.numpy(), vals.numpy(), np.ones(8, bool))
        np.testing.assert_array_equal(p.numpy().view(np.uint32), ref.view(np.uint32))
        np.testing.assert_array_equal(old.numpy().view(np.uint32), mem0.numpy().view(np.uint32))
    # the facts the trick gives (Triton's): max(-3, -1) = -1, max(-7, -0.0) = -0.0,
    # max(1, +NaN) = NaN, max(NaN, 3) = NaN, max(4, -NaN) = 4, max(-NaN, -2) = -2
    p = mem0.clone()
    if True:
        rmw_kernel[(1,)](p, vals, torch.empty(8), torch.arange(8, dtype=torch.int32), 8,
                         KIND="max", SEM="acq_rel", SCOPE="gpu", BLOCK=8)
    r = p.tolist()
    assert r[0] == -1.0 and r[1] == 0.0 and str(r[1]) == "-0.0" and r[3] == 2.0
    assert np.isnan(r[4]) and np.isnan(r[5]) and r[6] == 4.0 and r[7] == -2.0


def test_masked_lanes_do_nothing_and_return_zero():
    n = 20  # BLOCK 32: 12 masked lanes; their addresses (idx 0) must stay untouched
    p, old, idx, vals, mem0 = _run("add", torch.int32, n, 3, 32)
    ref, ref_old = _seq("add", mem0.numpy(), idx.numpy(), vals.numpy(), np.ones(n, bool))
    np.testing.assert_array_equal(p.numpy(), ref)
    np.testing.assert_array_equal(old.numpy(), ref_old)


def test_scalar_counter_tickets_over_programs():
    c = torch.tensor([5], dtype=torch.int32)
    t = torch.full((9,), -1, dtype=torch.int32)
    if True:
        scalar_counter_kernel[(9,)](c, t)
    assert c.item() == 14 and t.tolist() == list(range(5, 14))


def test_cas_returns_old_and_swaps_where_equal():
    p = torch.tensor([3, 1, 3, 0] * 4, dtype=torch.int32)
    old = torch.full((16,), -9, dtype=torch.int32)
    if True:
        cas_kernel[(1,)](p, old, 3, 8, BLOCK=16)
    assert old.tolist() == [3, 1, 3, 0] * 4
    assert p.tolist() == [8, 1, 8, 0] * 4


def test_cas_lock_serializes_a_critical_section():
    lock = torch.zeros(1, dtype=torch.int32)
    count = torch.zeros(1, dtype=torch.int32)
    out = torch.full((12,), -1, dtype=torch.int32)
    if True:
        lock_counter_kernel[(12,)](lock, count, out)
    assert lock.item() == 0 and count.item() == 12 and out.tolist() == list(range(12))


def test_spin_on_a_lock_nobody_releases_raises(monkeypatch):
    from kitjit.interpreter import memory

    monkeypatch.setattr(memory, "SPIN_LIMIT", 50)
    lock = torch.ones(1, dtype=torch.int32)  # held by a program that never releases it
    out = torch.zeros(1, dtype=torch.int32)
    with pytest.raises(DeadlockError, match="atomic_cas changed nothing"):
        spin_kernel[(1,)](lock, out, TRIES=200)
    lock = torch.zeros(1, dtype=torch.int32)  # free: the first try takes it, then it fails
    with pytest.raises(DeadlockError):  # on itself, forever
        spin_kernel[(1,)](lock, out, TRIES=200)
    if True:  # fewer tries than the limit: a bounded wait that gives up
        spin_kernel[(1,)](torch.ones(1, dtype=torch.int32), out, TRIES=10)
    assert out.item() == 1


def test_user_errors_are_located():
    @kit.jit
    def bad_dtype(P):
        kit.atomic_max(P, 1.0)

    @kit.jit
    def bad_sem(P):
        kit.atomic_add(P, 1, sem="seq_cst")

    if True:
        with pytest.raises(CompileError, match="atomic_max does not support fp16"):
            bad_dtype[(1,)](torch.zeros(1, dtype=torch.float16))
        with pytest.raises(CompileError, match="sem must be one of"):
            bad_sem[(1,)](torch.zeros(1, dtype=torch.int32))


# ----------------------------------------------------------------------------- PTX / SASS
tools = pytest.importorskip("kitjit.tools")


def _compile(kernel, sig, consts):
    if tools.find_tool("cuobjdump") is None or tools.find_tool("nvdisasm") is None:
        pytest.skip("cuobjdump/nvdisasm not found")
    ck = kit.compile_aot(KERNELS, kernel, sig, consts, 4, "sm_90a")
    try:
        ops = tools.sass_opcodes(tools.disassemble(ck.asm["cubin"]))
    except tools.ToolError as e:
        pytest.skip(str(e))
    assert ck.metadata["spills"] == 0 and ck.n_spills == 0
    return ck.asm["ptx"], ops


@pytest.mark.parametrize("dt,kind,sem,scope,ptx,sass", [
    ("fp32", "add", "acq_rel", "gpu", "atom.global.acq_rel.gpu.add.f32",
     "ATOMG.E.ADD.F32.FTZ.RN.STRONG.GPU"),
    ("fp32", "max", "relaxed", "cta", "atom.global.relaxed.cta.max.s32", "ATOMG.E.MAX.S32"),
    ("bf16", "add", "acq_rel", "gpu", "atom.global.acq_rel.gpu.add.noftz.bf16", "ATOMG"),
    ("i64", "xchg", "release", "sys", "atom.global.release.sys.exch.b64",
     "ATOMG.E.EXCH.64.STRONG.SYS"),
])
def test_sass_atomics(dt, kind, sem, scope, ptx, sass):
    sig = [f"*{dt}:16"] * 3 + ["*i32:16", "i32"]
    text, ops = _compile("rmw_kernel", sig, dict(KIND=kind, SEM=sem, SCOPE=scope, BLOCK=128))
    assert ptx in text
    assert any(o.startswith(sass) for o in ops), ops
    if kind == "max":  # Triton's float trick: a signed max and an unsigned min
        assert "atom.global.relaxed.cta.min.u32" in text


def test_sass_duplicated_lanes_broadcast_old_values():
    # 64 lanes over 128 threads: each element's owner alone does the CAS, then shares it
    text, ops = _compile("cas_kernel", ["*i32", "*i32", "i32", "i32"], dict(BLOCK=64))
    assert "atom.global.acq_rel.gpu.cas.b32" in text
    assert any(o.startswith("ATOMG.E.CAS") for o in ops) and "bar.sync 0" in text


@pytest.mark.gpu
def test_gpu_atomics_match_interpreter():
    dev = "cuda"
    n, slots = 1000, 13
    idx = torch.randint(0, slots, (n,), dtype=torch.int32)
    vals = torch.randint(-50, 100, (n,), dtype=torch.int32)
    for kind in ("add", "max", "min", "and", "or", "xor"):
        mem0 = torch.randint(0, 100, (slots,), dtype=torch.int32)
        p = mem0.to(dev)
        old = torch.empty(n, dtype=torch.int32, device=dev)
        rmw_kernel[(8,)](p, vals.to(dev), old, idx.to(dev), n, KIND=kind, SEM="acq_rel",
                         SCOPE="gpu", BLOCK=128)
        ref, _ = _seq(kind, mem0.numpy(), idx.numpy(), vals.numpy(), np.ones(n, bool))
        np.testing.assert_array_equal(p.cpu().numpy(), ref)
    c = torch.zeros(1, dtype=torch.int32, device=dev)
    t = torch.empty(64, dtype=torch.int32, device=dev)
    scalar_counter_kernel[(64,)](c, t)
    assert c.item() == 64 and sorted(t.tolist()) == list(range(64))

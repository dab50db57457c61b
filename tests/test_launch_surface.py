"""What `import kitjit as triton` offers around `@triton.jit` (issue 11 item 4): parameters
named like launch options, the launch options (num_ctas, num_stages, maxnreg, launch_pdl),
kit.heuristics, Config/autotune keywords, set_allocator, driver.active, do_not_specialize.
CPU: the interpreter, and FakeDriver where the launch plumbing matters; maxnreg is checked
on a compiled cubin; the GPU tests are marked gpu."""

from __future__ import annotations

import pytest
import torch

import kitjit as kit
from kitjit.runtime import driver
from kitjit.testing import FakeDriver


@kit.jit
def scale_kernel(X, Out, n, BLOCK: kit.constexpr, num_warps: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    kit.store(Out + offs, kit.load(X + offs, mask=m) * num_warps, mask=m)


@kit.jit
def copy_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    kit.store(Out + offs, kit.load(X + offs, mask=m), mask=m)


@pytest.fixture(autouse=True)
def _fresh_caches():
    for k in (scale_kernel, copy_kernel, dns_kernel):
        k.cache.clear()
    yield
    for k in (scale_kernel, copy_kernel, dns_kernel):
        k.cache.clear()


def _io(n=37):
    x = torch.randn(n)
    return x, torch.full_like(x, float("nan"))


# ---------------------------------------------------------------- option-named parameters
def test_num_warps_parameter_binds_the_keyword(monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    x, out = _io()
    scale_kernel[(3,)](x, out, x.numel(), BLOCK=16, num_warps=2)
    torch.testing.assert_close(out, x * 2)


def test_num_warps_parameter_is_the_launch_option_too():
    x, out = _io()
    with FakeDriver(allow_cpu=True) as fake:
        scale_kernel[(3,)](x, out, x.numel(), BLOCK=16, num_warps=8)
        # by position: the parameter binds, the launch keeps Triton's default of 4 warps
        scale_kernel[(3,)](x, out, x.numel(), 16, 2)
    assert fake.compiles[0][2] == (16, 8) and fake.launches[0]["block"] == (256, 1, 1)
    assert fake.compiles[1][2] == (16, 2) and fake.launches[1]["block"] == (128, 1, 1)


def test_reserved_names_still_reserved():
    with pytest.raises(TypeError, match="'stream' is reserved"):
        @kit.jit
        def k(X, stream):
            pass


# ---------------------------------------------------------------- launch options
def test_num_ctas_other_than_one_is_not_supported(monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    x, out = _io()
    copy_kernel[(3,)](x, out, x.numel(), BLOCK=16, num_ctas=1, num_stages=3)
    torch.testing.assert_close(out, x)
    with pytest.raises(ValueError, match="num_ctas=2 .*not supported.*cluster="):
        copy_kernel[(3,)](x, out, x.numel(), BLOCK=16, num_ctas=2)
    with pytest.raises(ValueError, match="num_ctas=2 .*not supported yet"):
        kit.Config({"BLOCK": 16}, num_ctas=2)


def test_maxnreg_is_checked_and_keys_the_compile():
    x, out = _io()
    with FakeDriver(allow_cpu=True) as fake:
        for mr in (None, 64, 64, 128):
            copy_kernel[(3,)](x, out, x.numel(), BLOCK=16, maxnreg=mr)
        with pytest.raises(ValueError, match="maxnreg .* from 16 to 255"):
            copy_kernel[(3,)](x, out, x.numel(), BLOCK=16, maxnreg=8)
    assert fake.maxnregs == [None, 64, 128] and len(fake.launches) == 4


def test_launch_pdl_goes_through_the_ex_launch():
    x, out = _io()
    with FakeDriver(allow_cpu=True) as fake:
        copy_kernel[(3,)](x, out, x.numel(), BLOCK=16)
        copy_kernel[(3,)](x, out, x.numel(), BLOCK=16, launch_pdl=True)
    assert [la["pdl"] for la in fake.launches] == [False, True]
    assert fake.compiles[0] == fake.compiles[1]  # the same binary (a disk-cache hit)


def test_grid_function_gets_every_bound_argument(monkeypatch):
    seen = []

    def grid(meta):
        seen.append(sorted(meta))
        return (kit.cdiv(meta["n"], meta["BLOCK"]),)

    x, out = _io()
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    copy_kernel[grid](x, out, x.numel(), BLOCK=16)
    torch.testing.assert_close(out, x)
    copy_kernel.cache.clear()  # the interpreter's launcher is cached under the same key
    with FakeDriver(allow_cpu=True) as fake:
        copy_kernel[grid](x, out, x.numel(), BLOCK=16)
    assert fake.launches[0]["grid"] == (3, 1, 1)
    assert seen[0] == seen[1] == ["BLOCK", "Out", "X", "n", "num_warps"]


# ---------------------------------------------------------------- do_not_specialize
@kit.jit(do_not_specialize=("n",), do_not_specialize_on_alignment=[1])
def dns_kernel(X, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    m = offs < n
    kit.store(Out + offs, kit.load(X + offs, mask=m), mask=m)


def test_do_not_specialize():
    assert dns_kernel.do_not_specialize == {"n"}
    assert dns_kernel.do_not_specialize_on_alignment == {"Out"}
    x = torch.randn(64)
    with FakeDriver(allow_cpu=True) as fake:
        for n in (1, 16, 17, 32):
            dns_kernel[(1,)](x, x, n, BLOCK=16)
        dns_kernel[(1,)](x, x[1:], 17, BLOCK=16)  # Out misaligned: same kernel
    assert len(fake.compiles) == 1
    specs = fake.compiles[0][1]
    assert specs == (("*fp32", 16), ("*fp32", 1), ("i32", 1))
    with pytest.raises(ValueError, match="not a parameter"):
        kit.jit(do_not_specialize=("m",))(copy_kernel.fn)


def test_launch_metadata_is_kept():
    def meta(grid, metadata, args):
        return {"name": "copy"}

    jf = kit.jit(launch_metadata=meta)(copy_kernel.fn)
    assert jf.launch_metadata is meta and jf.arg_names == ["X", "Out", "n", "BLOCK"]


# ---------------------------------------------------------------- heuristics
def test_heuristics_compute_meta_parameters(monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    seen = {}

    def block(args):
        seen.update(args)
        return kit.next_power_of_2(args["n"]) // 4

    k = kit.heuristics({"BLOCK": block})(copy_kernel)
    x, out = _io(37)
    k[lambda m: (kit.cdiv(m["n"], m["BLOCK"]),)](x, out, x.numel())
    torch.testing.assert_close(out, x)
    assert seen["n"] == 37 and seen["X"] is x
    with pytest.raises(ValueError, match="neither a parameter"):
        kit.heuristics({"BLK": block})(copy_kernel)


def test_heuristics_chain_and_set_launch_options():
    k = kit.heuristics({"BLOCK": lambda a: 16, "num_warps": lambda a: a["BLOCK"] // 8})(
        copy_kernel)
    x, out = _io()
    with FakeDriver(allow_cpu=True) as fake:
        k[(3,)](x, out, x.numel())
    assert fake.compiles[0][2] == (16,) and fake.launches[0]["block"] == (64, 1, 1)


def test_autotune_above_heuristics(monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")

    @kit.jit
    def k2(X, Out, n, BLOCK: kit.constexpr, R: kit.constexpr):
        offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
        m = offs < n
        kit.store(Out + offs, kit.load(X + offs, mask=m) * R, mask=m)

    tuner = kit.autotune([kit.Config({"BLOCK": 16}), kit.Config({"BLOCK": 32})], key=["n"])(
        kit.heuristics({"R": lambda a: a["BLOCK"] // 8})(k2))
    x, out = _io()
    tuner[lambda m: (kit.cdiv(m["n"], m["BLOCK"]),)](x, out, x.numel())
    torch.testing.assert_close(out, x * 2)  # the first config (interpreter): BLOCK=16, R=2


# ---------------------------------------------------------------- Config / autotune
def test_config_takes_tritons_keywords():
    c = kit.Config({"B": 1}, num_warps=8, num_stages=3, num_ctas=1, maxnreg=128,
                   pre_hook=None)
    assert c.all_kwargs() == {"B": 1, "num_warps": 8, "num_stages": 3, "maxnreg": 128}
    assert str(c) == "B=1, num_warps=8, num_stages=3, maxnreg=128"
    with pytest.raises(ValueError, match="ir_override .*not supported yet"):
        kit.Config({}, ir_override="k.ptx")


def test_autotune_takes_tritons_keywords():
    def bench(fn, quantiles):
        return [1.0, 0.5, 1.5]

    t = kit.autotune([kit.Config({"BLOCK": 16})], key=["n"], warmup=5, rep=10,
                     do_bench=bench, use_cuda_graph=False, reset_to_zero=["Out"],
                     restore_value=["X"])(copy_kernel)
    assert t.do_bench(lambda: None) == 1.0  # Triton's (fn, quantiles) form: the median
    assert t.arg_names == ["X", "Out", "n", "BLOCK"]
    g = kit.autotune([kit.Config({"BLOCK": 16})], key=["n"], use_cuda_graph=True)(copy_kernel)
    assert g.use_cuda_graph and callable(g.do_bench)


# ---------------------------------------------------------------- runtime
def test_set_allocator():
    def alloc(size, alignment, stream):
        return torch.empty(size, dtype=torch.int8)

    try:
        kit.set_allocator(alloc)
        assert kit.runtime.get_allocator() is alloc
        with pytest.raises(TypeError, match="set_allocator takes a function"):
            kit.set_allocator(3)
    finally:
        kit.set_allocator(None)


def test_driver_active_without_a_gpu(monkeypatch):
    import kitjit as triton

    assert triton.runtime.driver.active is driver.active
    assert triton.runtime.Config is kit.Config and triton.runtime.heuristics is kit.heuristics
    monkeypatch.setattr(driver, "available", lambda: False)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        triton.runtime.driver.active.get_current_device()
    # Triton's tutorials ask these first: without a GPU, kernels run in the interpreter on
    # CPU tensors, host code takes its non-CUDA paths, and occupancy arithmetic gets the
    # nominal figures of sm_90a
    active = triton.runtime.driver.active
    assert active.get_active_torch_device() == torch.device("cpu")
    assert active.get_current_target() == ("cpu", 0, 32)
    assert active.get_current_target().backend == "cpu"
    props = active.utils.get_device_properties(0)
    assert props["multiprocessor_count"] == 132 and props["warpSize"] == 32
    assert props["max_shared_mem"] == 232448 and props["max_num_regs"] == 65536


# ---------------------------------------------------------------- compiled: maxnreg
@kit.jit
def heavy_kernel(A, B, C, BLOCK: kit.constexpr):
    r = kit.arange(0, BLOCK)
    a = kit.load(A + r[:, None] * BLOCK + r[None, :])
    b = kit.load(B + r[:, None] * BLOCK + r[None, :])
    kit.store(C + r[:, None] * BLOCK + r[None, :], kit.dot(a, b))


def test_maxnreg_caps_the_registers_of_the_cubin():
    from kitjit.tools import find_tool

    if find_tool("ptxas") is None:
        try:
            import cuda.bindings.nvjitlink  # noqa: F401
        except ImportError:
            pytest.skip("no assembler")
    specs = [("*bf16", 16)] * 3
    free = heavy_kernel.compile(specs, (64,), 4, "sm_90a")
    capped = heavy_kernel.compile(specs, (64,), 4, "sm_90a", maxnreg=80)
    assert ".maxnreg 80" in capped.asm["ptx"] and ".maxnreg" not in free.asm["ptx"]
    assert free.metadata["registers"] > 80 >= capped.metadata["registers"]
    assert capped.metadata["maxnreg"] == 80 and capped.metadata["spills"] == 0


# ---------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_options_and_properties():
    x = torch.randn(1000, device="cuda")
    out = torch.full_like(x, float("nan"))
    scale_kernel[(kit.cdiv(1000, 128),)](x, out, 1000, BLOCK=128, num_warps=4)
    torch.testing.assert_close(out, x * 4)
    for opts in ({"maxnreg": 32}, {"launch_pdl": True}, {"num_stages": 2, "num_ctas": 1}):
        out.fill_(float("nan"))
        copy_kernel[(kit.cdiv(1000, 128),)](x, out, 1000, BLOCK=128, **opts)
        torch.testing.assert_close(out, x)
    props = driver.active.utils.get_device_properties(x.device.index)
    ref = torch.cuda.get_device_properties(x.device)
    assert props["multiprocessor_count"] == ref.multi_processor_count
    assert props["warpSize"] == 32 and props["max_shared_mem"] > 48 * 1024
    assert driver.active.get_current_stream() == torch.cuda.current_stream().cuda_stream
    assert driver.active.get_current_device() == torch.cuda.current_device()


@pytest.mark.gpu
def test_gpu_pdl_pair_with_gdc():
    @kit.jit
    def first(X, n, BLOCK: kit.constexpr):
        offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
        m = offs < n
        kit.store(X + offs, kit.load(X + offs, mask=m) + 1.0, mask=m)
        kit.gdc_launch_dependents()

    @kit.jit
    def second(X, Out, n, BLOCK: kit.constexpr):
        kit.gdc_wait()
        offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
        m = offs < n
        kit.store(Out + offs, kit.load(X + offs, mask=m) * 2.0, mask=m)

    x = torch.randn(5000, device="cuda")
    ref = (x + 1) * 2
    out = torch.full_like(x, float("nan"))
    g = (kit.cdiv(5000, 256),)
    first[g](x, 5000, BLOCK=256)
    second[g](x, out, 5000, BLOCK=256, launch_pdl=True)
    torch.testing.assert_close(out, ref)

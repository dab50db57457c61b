"""Triton's host-side names that libraries around kernels touch: KernelInterface (isinstance
checks, subclasses' run), JITCallable, MockTensor (warmup), TensorWrapper / reinterpret,
get_jit_fn_file_line, triton.runtime.driver's DriverBase / DriverConfig / driver, and the
knobs groups kitjit maps. CPU only: kernels run in the interpreter, warmup compiles for
sm_90a."""

from __future__ import annotations

import os

import pytest

import kitjit as kit
from kitjit.runtime import jit as rjit

torch = pytest.importorskip("torch")


@kit.jit
def double_kernel(X, Y, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    kit.store(Y + offs, kit.load(X + offs, mask=mask) * 2.0, mask=mask)


tuned_kernel = kit.heuristics({"BLOCK": lambda a: 16})(
    kit.autotune([kit.Config({}, num_warps=1), kit.Config({}, num_warps=2)],
                 key=["n"])(double_kernel))


def _check_double(launch, n: int = 37) -> None:
    """launch(x, y, n) then y == 2x against float64 torch, y poisoned with NaN first."""
    x = torch.randn(n)
    y = torch.full((n,), float("nan"))
    launch(x, y, n)
    torch.testing.assert_close(y.double(), x.double() * 2)


def test_kernels_are_kernel_interfaces_and_jit_callables():
    assert isinstance(double_kernel, rjit.KernelInterface)
    assert isinstance(double_kernel, rjit.JITCallable)
    assert isinstance(tuned_kernel, kit.KernelInterface)
    assert isinstance(tuned_kernel.fn, kit.runtime.KernelInterface)
    assert rjit.TRITON_MODULE == "kitjit.language"


def test_a_library_kernel_interface_subclass_launches_through_run():
    class Wrapper(rjit.KernelInterface):  # as libraries wrap kernels
        def __init__(self, fn):
            self.fn, self.calls = fn, []

        def run(self, *args, grid, warmup, **kwargs):
            self.calls.append(warmup)
            return self.fn.run(*args, grid=grid, warmup=warmup, **kwargs)

    w = Wrapper(double_kernel)
    _check_double(lambda x, y, n: w[(kit.cdiv(n, 16),)](x, y, n, BLOCK=16))
    assert w.calls == [False]
    ck = w.warmup(torch.float32, torch.float32, 37, grid=(3,), BLOCK=16)
    assert w.calls == [False, True] and ck.n_regs > 0
    t = Wrapper(tuned_kernel)
    _check_double(lambda x, y, n: t[(kit.cdiv(n, 16),)](x, y, n))
    with pytest.raises(NotImplementedError, match="not supported yet"):
        t.warmup(torch.float32, torch.float32, 37, grid=(3,))


def test_mock_tensors_warm_up_and_refuse_to_launch():
    ck = double_kernel.warmup(rjit.MockTensor(torch.float16), rjit.MockTensor(torch.float16),
                              100, grid=(7,), BLOCK=16)
    assert "f16" in ck.asm["ptx"] or "b16" in ck.asm["ptx"]
    m = rjit.MockTensor(torch.float32, [2, 3, 4])
    assert m.stride() == (12, 4, 1) and m.data_ptr() == 0
    assert rjit.MockTensor.wrap_dtype(torch.int8).dtype is torch.int8
    assert rjit.MockTensor.wrap_dtype(3) == 3
    with pytest.raises(TypeError, match="argument 'X' of double_kernel is a MockTensor"):
        double_kernel[(1,)](rjit.MockTensor(torch.float32), torch.zeros(4), 4, BLOCK=16)


def test_reinterpret_wraps_and_unwraps_and_is_refused_at_launch():
    t = torch.randn(8)
    w = kit.reinterpret(t, kit.int32)
    assert isinstance(w, kit.TensorWrapper) and w.dtype is kit.int32
    assert w.data_ptr() == t.data_ptr() and w.shape == t.shape and w.stride() == (1,)
    assert w.element_size() == 4 and "TensorWrapper" in str(w)
    assert kit.reinterpret(w, torch.float32) is t
    assert kit.reinterpret(w, kit.uint32).base is t
    assert torch.equal(w.clone().base, t) and w.cpu().dtype is kit.int32
    with pytest.raises(TypeError, match="Cannot reinterpret"):
        kit.reinterpret(3, kit.int32)
    with pytest.raises(TypeError, match="argument 'X' of double_kernel: a reinterpret.*not "
                       "supported yet"):
        double_kernel[(1,)](w, torch.zeros(8), 8, BLOCK=16)


def test_get_jit_fn_file_line_finds_the_def_under_the_decorators():
    path, line = rjit.get_jit_fn_file_line(tuned_kernel)
    assert path == __file__
    with open(path) as f:
        assert f.read().splitlines()[line - 1].startswith("def double_kernel(")
    assert rjit.get_jit_fn_file_line(double_kernel) == (path, line)


def test_runtime_driver_is_laid_out_as_tritons():
    from kitjit.runtime.autotuner import driver as autotuner_driver
    from kitjit.runtime.driver import DriverBase, DriverConfig, driver

    assert isinstance(driver, DriverConfig) and rjit.driver is driver is autotuner_driver
    assert isinstance(driver.active, DriverBase) and driver.active is driver.default
    assert driver.active is kit.runtime.driver.active and driver.active.is_active()
    assert driver.active.get_current_target() == kit.runtime.driver.active.get_current_target()
    assert driver.active.map_python_to_cpp_type("*bf16") == "CUdeviceptr"
    assert driver.active.map_python_to_cpp_type("i64") == "int64_t"
    assert driver.active.get_benchmarker() is kit.testing.do_bench
    driver.set_active(driver.default)
    driver.reset_active()

    class Other(DriverBase):
        pass

    with pytest.raises(NotImplementedError, match="not supported yet"):
        driver.set_active(object())
    with pytest.raises(TypeError):  # abstract, as Triton's
        Other()


def test_knobs_kitjit_always_follows_read_and_refuse_other_values(monkeypatch):
    monkeypatch.delenv("KITJIT_CACHE_DISABLE", raising=False)
    k = kit.knobs
    assert k.runtime.debug is True and k.language.default_fp_fusion is True
    assert k.compilation.disable_line_info is True and k.autotuning.cache is True
    k.runtime.debug = True  # what kitjit does: accepted
    for group, name in [("runtime", "debug"), ("language", "default_fp_fusion"),
                        ("compilation", "disable_line_info"), ("autotuning", "cache")]:
        with pytest.raises(AttributeError, match=f"knobs.{group}.{name} = False is not "
                           "supported yet"):
            setattr(getattr(k, group), name, False)
    with k.compilation.scope():
        k.compilation.always_compile = True
        assert os.environ["KITJIT_CACHE_DISABLE"] == "1" and k.autotuning.cache is False
    assert "KITJIT_CACHE_DISABLE" not in os.environ and k.compilation.always_compile is False
    tool = k.nvidia.ptxas
    assert tool is None or os.path.basename(tool.path).startswith("ptxas") and tool.version
    with pytest.raises(AttributeError, match="cache.home_dir is not supported yet.*: kitjit "
                       "keeps no Triton home"):
        k.cache.home_dir  # noqa: B018
    with pytest.raises(AttributeError, match="ck.asm"):
        k.compilation.dump_ir = True
    for bad in ("k.compilation.override", "k.nvidia.cuobjdump", "k.amd", "k.proton"):
        with pytest.raises(AttributeError, match="not supported yet"):
            eval(bad)


def test_mock_tensors_warm_up_on_the_gpu_path_and_wrappers_are_refused_there():
    from kitjit.testing import FakeDriver

    with FakeDriver(allow_cpu=True) as fake:
        double_kernel.warmup(torch.float32, rjit.MockTensor(torch.float32), 50, grid=(4,),
                             BLOCK=16)
        assert [c[1] for c in fake.compiles] == [(("*fp32", 16), ("*fp32", 16), ("i32", 1))]
        assert not fake.launches
        with pytest.raises(TypeError, match="argument 'Y' of double_kernel: a reinterpret"):
            double_kernel[(1,)](torch.zeros(8), kit.reinterpret(torch.zeros(8), kit.int32),
                                8, BLOCK=16)
        with pytest.raises(TypeError, match="is a MockTensor"):
            double_kernel[(1,)](torch.zeros(8), rjit.MockTensor(torch.float32), 8, BLOCK=16)
        assert not fake.launches


@pytest.mark.gpu
def test_gpu_kernel_interface_wrapper_and_mock_warmup():
    class Wrapper(rjit.KernelInterface):
        def __init__(self, fn):
            self.fn = fn

        def run(self, *args, grid, warmup, **kwargs):
            return self.fn.run(*args, grid=grid, warmup=warmup, **kwargs)

    w = Wrapper(tuned_kernel)
    for n in (37, 64):
        x = torch.randn(n, device="cuda")
        y = torch.full((n,), float("nan"), device="cuda")
        w[(kit.cdiv(n, 16),)](x, y, n)
        torch.testing.assert_close(y.double(), x.double() * 2)
    ck = Wrapper(double_kernel).warmup(torch.bfloat16, torch.bfloat16, 64, grid=(4,),
                                       BLOCK=16)
    assert ck.n_regs > 0


def test_runtime_jit_small_helpers():
    from collections import namedtuple

    assert rjit.get_full_name(_check_double) == f"{__name__}._check_double"
    assert rjit.is_namedtuple(namedtuple("P", "a b")) and not rjit.is_namedtuple(tuple)
    assert rjit.convert_to_tuple_if_list([1, [2, [3]], (4,)]) == (1, (2, (3,)), (4,))
    assert rjit.convert_to_tuple_if_list(5) == 5
    assert isinstance(rjit.constexpr_function(lambda x: x), rjit.JITCallable)
    assert isinstance(rjit.constexpr_function(abs), rjit.ConstexprFunction)
    assert all(isinstance(p, rjit.KernelParam) for p in double_kernel.params)


def test_runtime_driver_module_answers_as_tritons_driver_object():
    from kitjit.runtime import driver as mod

    assert mod.default is mod.active is mod.driver.active
    mod.set_active(mod.active)
    mod.reset_active()
    with pytest.raises(NotImplementedError, match="not supported yet"):
        mod.set_active(object())

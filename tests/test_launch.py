"""The GPU launch path on a machine without a GPU: kitjit.testing.FakeDriver stands in for
libcuda (no code is built, launches are recorded with the values read back from the
parameter block). Threads, streams, devices, graph capture; the real checks are in
test_gpu.py (marked gpu / multigpu)."""

from __future__ import annotations

import ctypes
import sys
import threading

import pytest
import torch

import kitjit as kit
from kitjit.runtime import driver
from kitjit.testing import FakeDriver

kjit = sys.modules["kitjit.jit"]


@kit.jit
def add_kernel(X, Y, Out, n, BLOCK: kit.constexpr):
    offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
    mask = offs < n
    kit.store(Out + offs, kit.load(X + offs, mask=mask) + kit.load(Y + offs, mask=mask),
              mask=mask)


class FakeCuda(torch.Tensor):
    """A CPU tensor that says it lives on cuda:<index> (what the launch path reads)."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, t, index):
        r = torch.Tensor._make_subclass(cls, t)
        r._index = index
        return r

    def get_device(self):
        return self._index

    @property
    def device(self):
        return torch.device("cuda", self._index)


@pytest.fixture(autouse=True)
def _fresh_cache():
    add_kernel.cache.clear()
    yield
    add_kernel.cache.clear()


def _on(index, *ts):
    return [FakeCuda(t, index) for t in ts]


# ============================================================================ threads
def test_threads_launch_their_own_arguments():
    """Many threads launching one kernel at once, the GIL released inside every launch (the
    moment a shared parameter block would be overwritten): each launch carries exactly the
    values its own thread passed."""
    n_threads, per_thread = 8, 150
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with FakeDriver(allow_cpu=True, yield_in_launch=True) as fake:
            bufs = [[torch.empty(64) for _ in range(3)] for _ in range(n_threads)]
            expected = {}
            for t, (x, y, out) in enumerate(bufs):
                for i in range(per_thread):
                    n = 1000 + 16 * (t * per_thread + i)  # i32, divisible by 16: one key
                    expected[(x.data_ptr(), y.data_ptr(), out.data_ptr(), n)] = t
            add_kernel[(1,)](*bufs[0], 1000, BLOCK=64)  # compiled before the race
            fake.launches.clear()
            barrier = threading.Barrier(n_threads)
            errors = []

            def work(t):
                try:
                    x, y, out = bufs[t]
                    barrier.wait()
                    for i in range(per_thread):
                        add_kernel[(1,)](x, y, out, 1000 + 16 * (t * per_thread + i),
                                         BLOCK=64)
                except BaseException as e:  # pragma: no cover - reported below
                    errors.append(e)

            threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors
    got = [la["values"] for la in fake.launches]
    assert len(got) == n_threads * per_thread
    wrong = [v for v in got if v not in expected]
    assert not wrong, f"{len(wrong)} launches carried another thread's arguments: {wrong[:3]}"
    assert sorted(got) == sorted(expected)
    assert len(fake.compiles) == 1


def test_concurrent_first_launches_compile_once():
    n_threads = 8
    with FakeDriver(allow_cpu=True, compile_delay=0.05) as fake:
        x, y, out = torch.empty(64), torch.empty(64), torch.empty(64)
        barrier = threading.Barrier(n_threads)
        errors = []

        def work():
            try:
                barrier.wait()
                add_kernel[(1,)](x, y, out, 64, BLOCK=64)
            except BaseException as e:  # pragma: no cover
                errors.append(e)

        threads = [threading.Thread(target=work) for _ in range(n_threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert not errors
    assert len(fake.compiles) == 1 and len(fake.loads) == 1
    assert len(fake.launches) == n_threads
    assert len(add_kernel.cache) == 1


def test_each_thread_gets_its_own_parameter_block():
    with FakeDriver(allow_cpu=True):
        x = torch.empty(64)
        ck = add_kernel[(1,)](x, x, x, 64, BLOCK=64)
        mine = ck.params()
        assert ck.params() is mine
        other = []
        th = threading.Thread(target=lambda: other.append(ck.params()))
        th.start()
        th.join()
        assert other[0] is not mine and other[0].address != mine.address


def test_a_launch_in_flight_holds_its_block():
    """A launch takes a parameter block off the kernel's free list and returns it after the
    call: a launch made while another is inside cuLaunchKernel fills another block (seen
    here from inside the first launch), and sequential launches reuse one block."""
    with FakeDriver(allow_cpu=True) as fake:
        x, y = torch.empty(64), torch.empty(64)
        ck = add_kernel[(1,)](x, x, x, 64, BLOCK=64)
        assert len(ck._free) == 1
        inner = []
        launch = fake._launch

        def nested(fn, *a, **kw):
            if not inner:  # the outer launch: launch again before reading its block
                (record,) = add_kernel.cache.values()
                inner.append(len(record[1]))  # the free list (launcher._RECORD)
                add_kernel[(1,)](y, y, y, 48, BLOCK=64)
            return launch(fn, *a, **kw)

        fake._set(driver, "raw_launch", lambda: (nested, lambda h: h))
        add_kernel.cache.clear()
        ck2 = add_kernel[(1,)](x, x, x, 64, BLOCK=64)
        assert ck2 is not ck and inner == [0]  # the outer launch held the only block
        assert [la["values"] for la in fake.launches[-2:]] == [
            (y.data_ptr(),) * 3 + (48,), (x.data_ptr(),) * 3 + (64,)]
        assert len(ck2._free) == 2
        for _ in range(3):
            add_kernel[(1,)](x, x, x, 64, BLOCK=64)
        assert len(ck2._free) == 2


# ============================================================================ the hot path
@pytest.mark.parametrize("grid,exc,match", [
    ((-1,), ValueError, "grid dim 0 is negative"),
    ((2 ** 31,), ValueError, "grid dim 0 is 2147483648, over the hardware limit"),
    ((1, 65536), ValueError, "grid dim 1 is 65536, over the hardware limit 65535"),
    ((1, 1, 1, 1), ValueError, "the grid has 4 dims"),
    ((1.5,), TypeError, "the grid must be a tuple of ints"),
    (lambda meta: (1, -1), ValueError, "grid dim 1 is negative"),
])
def test_grid_errors_on_the_gpu_path(grid, exc, match):
    x = torch.empty(64)
    with FakeDriver(allow_cpu=True) as fake:
        add_kernel[(1,)](x, x, x, 64, BLOCK=64)  # a cache hit next: the launcher's checks
        with pytest.raises(exc, match=match):
            add_kernel[grid](x, x, x, 64, BLOCK=64)
    assert len(fake.launches) == 1


def test_empty_grids_launch_nothing_on_the_gpu_path():
    x = torch.empty(64)
    with FakeDriver(allow_cpu=True) as fake:
        for grid in [(1,), (0,), (3, 0), lambda meta: (0, 1, 1), (2, 1, 1)]:
            add_kernel[grid](x, x, x, 64, BLOCK=64)
    assert [la["grid"] for la in fake.launches] == [(1, 1, 1), (2, 1, 1)]


def test_key_parts_of_each_argument_kind():
    """The flat key: ints keyed on == 1, width (i32 / i64 / too wide) and divisibility by
    16; floats, bools and None on their type; tensors on dtype, device, alignment. Each
    distinct specialization compiles once; an int too wide for int64 is an error even
    after an i64 launch of the same parameter hit the cache."""
    @kit.jit
    def k(X, n, s, flag, opt, BLOCK: kit.constexpr):
        pass

    x, x16 = torch.empty(64), torch.empty(64, dtype=torch.float16)
    with FakeDriver(allow_cpu=True) as fake:
        for n in [64, 65, 1, 2 ** 40, 2 ** 40 + 16, 2 ** 40 + 1, 64]:
            k[(1,)](x, n, 0.5, True, None, BLOCK=64)
        k[(1,)](x, 64, 1.5, False, None, BLOCK=64)  # float and bool values: same key
        k[(1,)](x, 64, 0.5, True, 3, BLOCK=64)  # None -> an int: a new key
        k[(1,)](x16, 64, 0.5, True, None, BLOCK=64)  # dtype
        k[(1,)](x[1:], 64, 0.5, True, None, BLOCK=64)  # 4-byte aligned only
        with pytest.raises(ValueError, match="outside the range of int64"):
            k[(1,)](x, 2 ** 70, 0.5, True, None, BLOCK=64)
    specs = [c[1] for c in fake.compiles]
    assert [s[1] for s in specs[:5]] == [("i32", 16), ("i32", 1), ("const", 1), ("i64", 16),
                                         ("i64", 1)]
    assert specs[5][4] == ("i32", 1) and specs[6][0] == ("*fp16", 16)
    assert specs[7][0] == ("*fp32", 1) and len(specs) == 8
    assert [la["values"][1] for la in fake.launches[:7]] == [64, 65, 0.5, 2 ** 40,
                                                             2 ** 40 + 16, 2 ** 40 + 1, 64]
    assert len(fake.launches[2]["values"]) == 3  # n == 1 folded into the kernel


def test_tma_kernels_go_through_their_per_key_launcher():
    """A kernel with TMA descriptors: each launch encodes (or finds) the tensor's map and
    puts its address in the descriptor slot after the run-time parameters."""
    maps = []

    def tensor_map(t, rows, cols, swizzle, dtype):
        maps.append((t.data_ptr(), rows, cols, swizzle, dtype))
        return 0xD000 + len(maps)

    x = torch.empty(64, 64)
    with FakeDriver(allow_cpu=True) as fake:
        compile_ = fake._compile

        def with_tma(*a, **kw):
            ck = compile_(*a, **kw)
            ck.metadata["tma"] = [{"param": 0, "box": [64, 32], "swizzle": 128,
                                   "dtype": "fp32"}]
            return ck

        fake._set(kjit.JITFunction, "compile", lambda jf, *a, **kw: with_tma(jf, *a, **kw))
        fake._set(driver, "tensor_map", tensor_map)
        fake._set(driver, "raw_launch", lambda: (spy, lambda h: h))
        slots = []

        def spy(fn, g0, g1, g2, b0, b1, b2, shared, stream, params, extra):
            ptrs = (ctypes.c_void_p * 5).from_address(params)
            slots.append(ptrs[4])
            return fake._launch(fn, g0, g1, g2, b0, b1, b2, shared, stream, params, extra)

        add_kernel[(2,)](x, x, x, 64, BLOCK=64)
        add_kernel[(3,)](x, x, x, 64, BLOCK=64)
    assert maps == [(x.data_ptr(), 64, 32, 128, "fp32")] * 2
    assert slots == [0xD001, 0xD002]
    assert [la["grid"] for la in fake.launches] == [(2, 1, 1), (3, 1, 1)]
    assert fake.launches[1]["values"] == (x.data_ptr(),) * 3 + (64,)


# ============================================================================ streams
def test_stream_option():
    class Stream:  # what kitjit reads from a torch.cuda.Stream
        def __init__(self, handle, index):
            self.cuda_stream = handle
            self.device = torch.device("cuda", index)

    x, y, out = _on(1, torch.empty(64), torch.empty(64), torch.empty(64))
    with FakeDriver() as fake:
        add_kernel[(1,)](x, y, out, 64, BLOCK=64)
        add_kernel[(1,)](x, y, out, 64, BLOCK=64, stream=0x1234)
        add_kernel[(1,)](x, y, out, 64, BLOCK=64, stream=Stream(0x777, 1))
        with pytest.raises(ValueError, match="stream of cuda:0.*cuda:1"):
            add_kernel[(1,)](x, y, out, 64, BLOCK=64, stream=Stream(0x777, 0))
        with pytest.raises(TypeError, match="stream="):
            add_kernel[(1,)](x, y, out, 64, BLOCK=64, stream="s")
    assert [la["stream"] for la in fake.launches] == [0x5001, 0x1234, 0x777]
    assert fake.streams_asked == [1]  # the current stream of the tensors' device


def test_stream_is_a_reserved_parameter_name():
    with pytest.raises(TypeError, match="reserved"):
        @kit.jit
        def k(X, stream):
            pass


def test_interpreter_ignores_stream(monkeypatch):
    x, y = torch.randn(100), torch.randn(100)
    out = torch.empty(100)
    add_kernel[(1,)](x, y, out, 100, BLOCK=128, stream=None)
    torch.testing.assert_close(out, x + y)


# ============================================================================ devices
def test_launch_on_the_tensors_device_not_the_current_one():
    arch_asked = []
    with FakeDriver(current_device=0) as fake:
        fake._set(driver, "device_arch", lambda device=0: arch_asked.append(device) or "sm_90a")
        x, y, out = _on(1, torch.empty(64), torch.empty(64), torch.empty(64))
        add_kernel[(1,)](x, y, out, 64, BLOCK=64)
        x0, y0, out0 = _on(0, torch.empty(64), torch.empty(64), torch.empty(64))
        add_kernel[(1,)](x0, y0, out0, 64, BLOCK=64)
    assert arch_asked == [1, 0]
    assert [d for _, d in fake.loads] == [1, 0]
    assert fake.streams_asked == [1, 0]
    f1, f0 = (la["function"] for la in fake.launches)
    assert f1 % 0x10000 == 1 and f0 % 0x10000 == 0  # each device's own function
    assert fake.launches[0]["values"][:3] == (x.data_ptr(), y.data_ptr(), out.data_ptr())


def test_mixed_devices_raise_before_launch():
    with FakeDriver() as fake:
        (x,) = _on(0, torch.empty(64))
        y, out = _on(1, torch.empty(64), torch.empty(64))
        with pytest.raises(ValueError, match="different devices.*cuda:0.*cuda:1"):
            add_kernel[(1,)](x, y, out, 64, BLOCK=64)
        with pytest.raises(ValueError, match="is on cpu"):
            add_kernel[(1,)](torch.empty(64), y, out, 64, BLOCK=64)
    assert not fake.launches and not fake.compiles


def test_tensor_subclasses_pass_as_tensors():
    """nn.Parameter (any Tensor subclass) is passed by its data pointer."""
    p = torch.nn.Parameter(torch.empty(64))
    with FakeDriver(allow_cpu=True) as fake:
        add_kernel[(1,)](p, p, p, 64, BLOCK=64)
    assert fake.launches[0]["values"] == (p.data_ptr(),) * 3 + (64,)


class _FakeLib:
    """libcuda's context calls, recorded."""

    def __init__(self, current):
        self.current = current
        self.calls = []

    def cuDevicePrimaryCtxRetain(self, out, dev):
        ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))[0] = 0xC0 + dev
        self.calls.append(("retain", dev))
        return 0

    def cuCtxGetCurrent(self, out):
        ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))[0] = self.current
        return 0

    def cuCtxSetCurrent(self, ctx):
        self.calls.append(("set", ctx))
        self.current = ctx
        return 0

    def cuCtxPushCurrent_v2(self, ctx):
        self.calls.append(("push", ctx))
        self.saved, self.current = self.current, ctx
        return 0

    def cuCtxPopCurrent_v2(self, out):
        self.calls.append(("pop", self.current))
        self.current = self.saved
        return 0


@pytest.mark.parametrize("current,expect", [
    (0xC0, []),                                    # device 1 wanted, device 0's current
    (None, [("set", 0xC1)]),                       # nothing current: set, as torch would
])
def test_device_context_pushes_the_primary_context(monkeypatch, current, expect):
    lib = _FakeLib(current)
    monkeypatch.setattr(driver, "_load", lambda: lib)
    monkeypatch.setattr(driver, "_primary", {})
    with driver.device_context(1):
        inside = lib.current
    assert inside == 0xC1
    if current == 0xC0:
        assert lib.calls == [("retain", 1), ("push", 0xC1), ("pop", 0xC1)]
        assert lib.current == 0xC0  # torch's device left as it was
    else:
        assert lib.calls == [("retain", 1)] + expect
    with driver.device_context(1):  # already current: nothing to do, no second retain
        pass
    assert lib.calls.count(("retain", 1)) == 1


# ============================================================================ graph capture
def test_first_launch_during_capture_loads_in_relaxed_mode(monkeypatch):
    modes = []
    with FakeDriver(allow_cpu=True) as fake:
        fake._set(sys.modules["kitjit.launcher"], "_capturing", lambda: True)
        fake._set(driver, "exchange_capture_mode", lambda m: modes.append(m) or 7 - m)
        x = torch.empty(64)
        add_kernel[(1,)](x, x, x, 64, BLOCK=64)
    assert modes == [driver.CU_STREAM_CAPTURE_MODE_RELAXED, 5]  # relaxed, then restored
    assert len(fake.launches) == 1


def test_first_launch_during_capture_failing_says_launch_once_before(monkeypatch):
    def refuse(*a):
        raise driver.DriverError("loading the cubin of add_kernel: operation not permitted "
                                 "when stream is capturing (900)")

    with FakeDriver(allow_cpu=True) as fake:
        fake._set(sys.modules["kitjit.launcher"], "_capturing", lambda: True)
        fake._set(driver, "exchange_capture_mode", lambda m: 0)
        fake._set(driver, "load_function", refuse)
        x = torch.empty(64)
        with pytest.raises(RuntimeError, match="launch once before capturing"):
            add_kernel[(1,)](x, x, x, 64, BLOCK=64)
    assert not fake.launches

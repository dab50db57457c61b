"""GPU tests (`pytest -m gpu`): every example at real sizes, the whole language test suite on
the device, and the runtime's GPU behaviour (in-memory and disk cache, streams, CUDA graphs,
argument checks). Skipped where `kitjit.testing.has_gpu()` is False (see conftest.py).

Same rules as the CPU tests: fresh random inputs, outputs poisoned with NaN before the
launch, float64 references, fp32 within 1e-5 and fp16/bf16 within 1e-2, sizes on both sides
of the block.
"""

from __future__ import annotations

import importlib
import itertools
import math
import pathlib

import lang_helpers  # the language tests' DEVICE: "cuda" runs them here again, on the GPU
import pytest
import test_examples as E  # the example helpers (poisoned outputs, tolerances)
import torch

import kitjit as kit
from kitjit.testing import check

pytestmark = pytest.mark.gpu

DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16],
                                 ids=["fp32", "bf16", "fp16"])


def cuda_randn(*shape, dtype=torch.float32, scale=1.0, shift=0.0):
    return (torch.randn(*shape, device="cuda", dtype=torch.float64) * scale + shift).to(dtype)


def gpu_close(out, ref, dtype, what):
    assert out.is_cuda and out.dtype == dtype and out.shape == ref.shape
    n_nan = int(torch.isnan(out).sum())
    assert n_nan == 0, f"{what}: {n_nan} elements unwritten (still NaN)"
    err = check(out, ref, E.TOL[dtype], what)
    assert math.isfinite(err)
    return err


# ============================================================================ examples
@DTYPES
@pytest.mark.parametrize("n", [1, 1000, 4097, 10 ** 6 + 3, 1 << 22])
def test_vector_add(n, dtype):
    m = E.example("vector_add")
    x, y = cuda_randn(n, dtype=dtype), cuda_randn(n, dtype=dtype)
    out = E.run_poisoned(m.add, x, y)
    gpu_close(out, x.double() + y.double(), dtype, f"add n={n}")


@pytest.mark.parametrize("offset", [1, 3, 8])
def test_vector_add_unaligned_pointers(offset):
    """Views that start off a 16-byte boundary: the aligned specialization (128-bit
    accesses) must not be used for them."""
    m = E.example("vector_add")
    n = 100_003
    bx, by = cuda_randn(n + offset), cuda_randn(n + offset)
    x, y = bx[offset:], by[offset:]
    out_base = torch.full((n + offset,), float("nan"), device="cuda")
    out = out_base[offset:]
    assert x.data_ptr() % 16 != 0 or offset % 4 == 0
    m.add_kernel[(kit.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    gpu_close(out, x.double() + y.double(), torch.float32, f"add offset={offset}")
    assert torch.isnan(out_base[:offset]).all(), "wrote before the view"


@DTYPES
@pytest.mark.parametrize("rows,cols", [(1823, 781), (4096, 4096), (64, 16384), (3, 1),
                                       (1000, 1000), (257, 2049)])
def test_softmax(rows, cols, dtype):
    m = E.example("softmax")
    x = cuda_randn(rows, cols, dtype=dtype, scale=3.0)
    out = E.run_poisoned(m.softmax, x)
    gpu_close(out, torch.softmax(x.double(), dim=1), dtype, f"softmax {rows}x{cols}")


@DTYPES
@pytest.mark.parametrize("rows,cols", [(2048, 4096), (1000, 1000), (257, 5000), (64, 12288),
                                       (31, 513)])
def test_layernorm(rows, cols, dtype):
    m = E.example("layernorm")
    x = cuda_randn(rows, cols, dtype=dtype, scale=2.0, shift=0.5)
    w, b = cuda_randn(cols, dtype=dtype), cuda_randn(cols, dtype=dtype)
    out = E.run_poisoned(m.layernorm, x, w, b)
    ref = torch.nn.functional.layer_norm(x.double(), (cols,), w.double(), b.double(), 1e-5)
    gpu_close(out, ref, dtype, f"layernorm {rows}x{cols}")


@DTYPES
@pytest.mark.parametrize("rows,cols", [(2048, 4096), (1000, 1000), (257, 5000), (64, 12288),
                                       (31, 513)])
def test_rmsnorm(rows, cols, dtype):
    m = E.example("rmsnorm")
    x = cuda_randn(rows, cols, dtype=dtype)
    w = cuda_randn(cols, dtype=dtype)
    out = E.run_poisoned(m.rmsnorm, x, w)
    gpu_close(out, m.reference(x, w), dtype, f"rmsnorm {rows}x{cols}")


@pytest.mark.parametrize("M,N,K", [(256, 512, 192), (300, 264, 200), (2048, 2048, 4096),
                                   (1000, 1000, 1000), (128, 256, 64)])
def test_matmul(M, N, K):
    m = E.example("matmul")
    a = cuda_randn(M, K, dtype=torch.bfloat16)
    b = cuda_randn(K, N, dtype=torch.bfloat16)
    out = E.run_poisoned(m.matmul, a, b)
    gpu_close(out, a.double() @ b.double(), torch.bfloat16, f"matmul {M}x{N}x{K}")


ATTENTION = [  # (B, H, S, D, causal, GQA group)
    (2, 4, 1000, 64, False, 1), (2, 4, 1000, 64, True, 2), (1, 8, 4096, 128, False, 4),
    (1, 8, 4096, 128, True, 1), (3, 2, 257, 128, True, 1), (1, 1, 1, 64, False, 1),
]


@pytest.mark.parametrize("B,H,S,D,causal,g", ATTENTION,
                         ids=[f"B{b}H{h}S{s}D{d}-{'causal' if c else 'full'}-g{g}"
                              for b, h, s, d, c, g in ATTENTION])
def test_attention(B, H, S, D, causal, g):
    m = E.example("attention")
    q = cuda_randn(B, H, S, D, dtype=torch.bfloat16)
    k = cuda_randn(B, H // g, S, D, dtype=torch.bfloat16)
    v = cuda_randn(B, H // g, S, D, dtype=torch.bfloat16)
    o, lse = E.run_poisoned(m.attention, q, k, v, causal)
    ro, rl = m.reference(q, k, v, causal)
    gpu_close(o, ro, torch.bfloat16, "attention output")
    gpu_close(lse, rl, torch.float32, "attention logsumexp")


@pytest.mark.parametrize("name", sorted(E.KNOWN_EXAMPLES))
def test_example_main(name, capsys):
    """main() checks itself and benchmarks on a GPU: it must finish and print figures."""
    E.example(name).main()
    out = capsys.readouterr().out
    if name in ("allgather_matmul", "matmul_reducescatter") and torch.cuda.device_count() < 2:
        # one GPU: main() checks the simulated ranks (tests/test_distributed.py runs the
        # kernels as two ranks on two streams of one GPU)
        assert "rel err" in out and "simulated" in out
        return
    assert "rel err" in out and "GPU" in out


# ============================================================================ the language
def _param_sets(fn):
    """Every (id, kwargs) a pytest-parametrized test function is collected with."""
    axes = []
    for mark in reversed(getattr(fn, "pytestmark", [])):
        if mark.name != "parametrize":
            continue
        names, values = mark.args[0], mark.args[1]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else names
        ids = mark.kwargs.get("ids")
        axis = []
        for i, v in enumerate(values):
            vals = tuple(v) if len(names) > 1 else (v,)
            if isinstance(ids, (list, tuple)):
                vid = str(ids[i])
            elif callable(ids):
                vid = str(ids(v))
            else:
                vid = "-".join(str(x) for x in vals)
            axis.append((vid, dict(zip(names, vals))))
        axes.append(axis)
    for combo in itertools.product(*axes):
        kwargs = {}
        for _, kw in combo:
            kwargs.update(kw)
        yield "-".join(vid for vid, _ in combo), kwargs


def _language_tests() -> dict:
    """name -> test function, over every tests/test_lang_*.py (the language tests; their
    names are distinct, so a case id is the test's name and parameters)."""
    tests = {}
    for path in sorted(pathlib.Path(__file__).parent.glob("test_lang_*.py")):
        mod = importlib.import_module(path.stem)
        for name in dir(mod):
            fn = getattr(mod, name)
            if name.startswith("test_") and callable(fn) and fn.__module__ == mod.__name__:
                assert name not in tests, f"{name} is in two test_lang_* modules"
                tests[name] = fn
    return tests


LANGUAGE_TESTS = _language_tests()


def _language_cases():
    cases = []
    for name in sorted(LANGUAGE_TESTS):
        for vid, kwargs in _param_sets(LANGUAGE_TESTS[name]):
            cases.append(pytest.param(name, kwargs, id=f"{name}[{vid}]" if vid else name))
    return cases


@pytest.mark.parametrize("name,kwargs", _language_cases())
def test_language_on_gpu(name, kwargs, monkeypatch):
    """Each test of tests/test_lang_*.py, with its tensors on the GPU: the same kernels
    through the real compile and launch path (the CPU run used the interpreter)."""
    monkeypatch.setattr(lang_helpers, "DEVICE", "cuda")
    LANGUAGE_TESTS[name](**kwargs)


# ============================================================================ runtime
def test_second_launch_hits_the_memory_cache():
    m = E.example("softmax")
    k = m.softmax_kernel
    k.cache.clear()  # other tests launched it already
    x = cuda_randn(64, 1000, dtype=torch.bfloat16)
    m.softmax(x)
    n0 = len(k.cache)
    assert n0 == 1
    for _ in range(3):  # same dtypes, alignment and kinds of ints: no new entry
        y = m.softmax(cuda_randn(33, 1000, dtype=torch.bfloat16))
    assert len(k.cache) == n0
    assert not torch.isnan(y).any()
    m.softmax(cuda_randn(64, 1000, dtype=torch.float32))  # another dtype: a new entry
    assert len(k.cache) == n0 + 1


def test_disk_cache_serves_a_new_process_view(cache_dir):
    """With the in-memory cache dropped, a launch loads the cubin from KITJIT_CACHE_DIR
    (entry count unchanged) and still computes the right thing."""
    m = E.example("vector_add")
    k = m.add_kernel
    x, y = cuda_randn(5000), cuda_randn(5000)
    k.cache.clear()
    E.run_poisoned(m.add, x, y)
    entries = sorted(p.parent for p in cache_dir.rglob("meta.json"))
    assert len(entries) == 1
    k.cache.clear()
    out = E.run_poisoned(m.add, x, y)
    assert sorted(p.parent for p in cache_dir.rglob("meta.json")) == entries
    gpu_close(out, x.double() + y.double(), torch.float32, "add from the disk cache")


def test_cpu_tensor_in_a_gpu_launch_raises():
    m = E.example("vector_add")
    n = 1000
    x_cpu = torch.randn(n)
    y, out = cuda_randn(n), torch.full((n,), float("nan"), device="cuda")
    with pytest.raises(ValueError, match="cpu"):
        m.add_kernel[(1,)](x_cpu, y, out, n, BLOCK=1024)
    with pytest.raises(ValueError, match="cpu"):
        m.add_kernel[(1,)](x_cpu, torch.randn(n), torch.empty(n), n, BLOCK=1024)
    torch.cuda.synchronize()
    assert torch.isnan(out).all()


def test_launch_errors_on_gpu():
    m = E.example("vector_add")
    x = cuda_randn(64)
    out = torch.full((64,), float("nan"), device="cuda")
    with pytest.raises(ValueError):
        m.add_kernel[(1, 1, 1, 1)](x, x, out, 64, BLOCK=64)
    with pytest.raises(ValueError):
        m.add_kernel[(-1,)](x, x, out, 64, BLOCK=64)
    with pytest.raises(ValueError):
        m.add_kernel[(1, 70000)](x, x, out, 64, BLOCK=64)
    with pytest.raises(TypeError):
        m.add_kernel[(1,)](x.to(torch.complex64), x, out, 64, BLOCK=64)
    with pytest.raises(TypeError):
        m.add_kernel[(1,)](x, x, out, [64], BLOCK=64)
    m.add_kernel[(0,)](x, x, out, 64, BLOCK=64)  # an empty grid launches nothing
    torch.cuda.synchronize()
    assert torch.isnan(out).all()


def test_launch_uses_the_current_stream():
    """Work queued on a side stream (a long sleep, then the input's copy) must be ordered
    before the kernel launched on that stream."""
    m = E.example("vector_add")
    n = 1 << 20
    src, y = cuda_randn(n), cuda_randn(n)
    x = torch.zeros(n, device="cuda")
    out = torch.full((n,), float("nan"), device="cuda")
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # ~25 ms of GPU time on s
        x.copy_(src)
        m.add_kernel[(kit.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    s.synchronize()
    gpu_close(out, src.double() + y.double(), torch.float32, "add on a side stream")


def test_cuda_graph_capture_and_replay():
    m = E.example("vector_add")
    n = 100_003
    x, y = cuda_randn(n), cuda_randn(n)
    out = torch.full((n,), float("nan"), device="cuda")

    def step():
        m.add_kernel[(kit.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)

    step()  # compile outside the capture
    torch.cuda.synchronize()
    out.fill_(float("nan"))
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(g):
            step()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    for _ in range(2):
        x.copy_(cuda_randn(n))
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        gpu_close(out, x.double() + y.double(), torch.float32, "add replayed from a graph")


def test_launch_returns_the_compiled_kernel():
    m = E.example("softmax")
    x = cuda_randn(8, 4096, dtype=torch.bfloat16)
    y = torch.full_like(x, float("nan"))
    ck = m.softmax_kernel[(8,)](x, y, 4096, BLOCK=4096, num_warps=8)
    assert isinstance(ck, kit.CompiledKernel)
    md = ck.metadata
    assert md["spills"] == 0 and md["registers"] > 0 and md["num_warps"] == 8
    major, minor = torch.cuda.get_device_capability()
    assert md["arch"].startswith(f"sm_{major}{minor}")
    assert ".target sm_" in ck.asm["ptx"]
    gpu_close(y, torch.softmax(x.double(), 1), torch.bfloat16, "softmax 8x4096")


# ============================================================================ launch path
def test_stream_option_orders_after_the_side_stream():
    """stream= (a torch.cuda.Stream, then its raw int handle) launches on that stream, not
    the current one: the kernel must wait for the sleep and copy queued on it."""
    m = E.example("vector_add")
    n = 1 << 20
    src, y = cuda_randn(n), cuda_randn(n)
    for as_int in (False, True):
        x = torch.zeros(n, device="cuda")
        out = torch.full((n,), float("nan"), device="cuda")
        torch.cuda.synchronize()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            torch.cuda._sleep(50_000_000)
            x.copy_(src)
        m.add_kernel[(kit.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024,
                                           stream=s.cuda_stream if as_int else s)
        s.synchronize()
        gpu_close(out, src.double() + y.double(), torch.float32, f"stream= int={as_int}")


def test_first_launch_during_graph_capture():
    """A kernel never launched before, first launched inside torch.cuda.graph: it compiles
    and loads there (relaxed capture mode) and replays right; or, where the driver refuses,
    the error says to launch once before capturing."""
    @kit.jit
    def scale_kernel(X, Out, n, BLOCK: kit.constexpr):
        offs = kit.program_id(0) * BLOCK + kit.arange(0, BLOCK)
        mask = offs < n
        kit.store(Out + offs, kit.load(X + offs, mask=mask) * 3.0, mask=mask)

    n = 10_007
    x = cuda_randn(n)
    out = torch.full((n,), float("nan"), device="cuda")
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            scale_kernel[(kit.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    except RuntimeError as e:
        assert "launch once before capturing" in str(e)
        return
    for _ in range(2):
        x.copy_(cuda_randn(n))
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        gpu_close(out, x.double() * 3, torch.float32, "first launched during capture")


def test_threads_launch_concurrently():
    import threading

    m = E.example("vector_add")
    n, n_threads, reps = 50_000, 8, 50
    ins = [(cuda_randn(n), cuda_randn(n)) for _ in range(n_threads)]
    outs = [torch.full((n,), float("nan"), device="cuda") for _ in range(n_threads)]
    m.add_kernel.cache.clear()
    barrier = threading.Barrier(n_threads)
    errors = []

    def work(t):
        try:
            barrier.wait()
            for _ in range(reps):  # the first launch of every thread is a concurrent miss
                m.add_kernel[(kit.cdiv(n, 1024),)](*ins[t], outs[t], n, BLOCK=1024)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert len(m.add_kernel.cache) == 1
    torch.cuda.synchronize()
    for (x, y), out in zip(ins, outs):
        gpu_close(out, x.double() + y.double(), torch.float32, "add from threads")


@pytest.mark.multigpu
def test_launch_on_another_device_than_the_current():
    m = E.example("vector_add")
    n = 100_003
    assert torch.cuda.current_device() == 0
    for dev in (1, 0, 1):
        x = cuda_randn(n).to(f"cuda:{dev}")
        y = cuda_randn(n).to(f"cuda:{dev}")
        out = torch.full((n,), float("nan"), device=f"cuda:{dev}")
        m.add_kernel[(kit.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        assert torch.cuda.current_device() == 0
        torch.cuda.synchronize(dev)
        ref = (x.double() + y.double())
        assert out.device.index == dev
        gpu_close(out, ref, torch.float32, f"add on cuda:{dev}")
    with torch.cuda.device(1):  # a side stream of cuda:1 given explicitly
        s = torch.cuda.Stream()
    m.add_kernel[(kit.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024, stream=s)
    s.synchronize()
    with pytest.raises(ValueError, match="different devices"):
        m.add_kernel[(1,)](x.to("cuda:0"), y, out, n, BLOCK=1024)
    with pytest.raises(ValueError, match="stream of cuda:1"):
        m.add_kernel[(1,)](x.to("cuda:0"), y.to("cuda:0"), out.to("cuda:0"), n, BLOCK=1024,
                           stream=s)

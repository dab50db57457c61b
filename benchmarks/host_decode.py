"""Host cost of kitjit.nn's attention calls with the driver faked: what a decode step waits
on before the GPU sees its kernels, measured on any machine.

kitjit.testing.FakeDriver(ir_compile=True, record=False): the kernels are built to their
tile IR for sm_90a (so the launcher has their true parameters and TMA metadata and builds
their descriptors), module loads, cuLaunchKernel and cuTensorMapEncodeTiled are trivial
fakes. The
tensors are CPU tensors standing in for CUDA ones, so what differs from a GPU host is torch's
allocator (the CUDA caching allocator costs about what the CPU one does), the stream lookup
and the driver's own launch (~3 us each on an H100 host, `launch_fake_driver.py`'s
"bare"). Microseconds per call, best of several rounds (interleaved, as host clocks drift),
by the wall clock and by the thread's CPU time (steadier on a loaded machine).

    python benchmarks/host_decode.py [--profile ROW]
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

import torch

os.environ["KITJIT_INTERPRET"] = "1"   # sdpa's device check lets CPU tensors through ...

import kitjit.nn.functional as KF  # noqa: E402
from kitjit.nn import attention_decode as AD  # noqa: E402
from kitjit.testing import FakeDriver  # noqa: E402

SHAPES = {"B1": (1, 32, 8, 1, 4096, 128), "B8": (8, 32, 8, 1, 4096, 128)}


def inputs(B, H, Hkv, Sq, SK, D, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, Sq, D, generator=g).to(dtype)
    k = torch.randn(B, Hkv, SK, D, generator=g).to(dtype)
    v = torch.randn(B, Hkv, SK, D, generator=g).to(dtype)
    return q, k, v


def rows(shape: str) -> dict:
    q, k, v = inputs(*SHAPES[shape])
    ql = q.transpose(1, 2).contiguous().transpose(1, 2)   # (B, S, H, D) storage: a copy
    out = {
        f"sdpa {shape}": lambda: KF.sdpa(q, k, v, enable_gqa=True),
        f"sdpa {shape} (LLM layout q)": lambda: KF.sdpa(ql, k, v, enable_gqa=True),
        f"attention_decode {shape}": lambda: AD.attention_decode(q, k, v),
    }
    return out


def forward_rows() -> dict:
    """The forward (Sq > 16) through sdpa, without autograd."""
    q, k, v = inputs(2, 16, 4, 512, 512, 128)
    return {"sdpa fwd B2 H16/4 S512": lambda: KF.sdpa(q, k, v, enable_gqa=True)}


def backward_rows() -> dict:
    """The FA3 backward (three kernels) as autograd calls it: attention_backward on the
    forward's o and LSE (values do not matter: nothing runs)."""
    from kitjit.nn.attention_backward import attention_backward

    out = {}
    for D in (128, 64):    # small: the CPU zeroes and copies what a GPU queues
        q, k, v = inputs(1, 4, 2, 64, 64, D)
        do, o = torch.randn_like(q), torch.randn_like(q)
        lse = torch.randn(1, 4, 64)
        out[f"attention_backward B1 H4/2 S64 D{D}"] = \
            lambda q=q, k=k, v=v, do=do, o=o, lse=lse: attention_backward(do, q, k, v, o, lse)
    return out


def best_us(fn, n: int, clock=time.perf_counter_ns) -> float:
    s = clock()
    for _ in range(n):
        fn()
    return (clock() - s) / n / 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", help="cProfile this row (a prefix of its name)")
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    with FakeDriver(record=False, allow_cpu=True, ir_compile=True), torch.no_grad():
        table = {}
        for shape in SHAPES:
            table.update(rows(shape))
        table.update(forward_rows())
        table.update(backward_rows())
        table["noop lambda"] = lambda: None
        for fn in table.values():      # compile (disk cache), plans, descriptors
            fn()
        if a.profile:
            name = next(k for k in table if k.startswith(a.profile))
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(a.n):
                table[name]()
            pr.disable()
            pstats.Stats(pr, stream=sys.stdout).sort_stats("tottime").print_stats(25)
            return
        best = dict.fromkeys(table, float("inf"))
        cpu = dict.fromkeys(table, float("inf"))
        for _ in range(a.rounds):
            for name, fn in table.items():
                best[name] = min(best[name], best_us(fn, a.n))
                cpu[name] = min(cpu[name], best_us(fn, a.n, time.thread_time_ns))
    print(f"{'':36} {'wall':>8}    {'thread CPU':>10}")
    for name, us in best.items():
        print(f"{name:36} {us:8.2f} us {cpu[name]:8.2f} us")


if __name__ == "__main__":
    main()

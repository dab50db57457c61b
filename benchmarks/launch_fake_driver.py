"""Host cost of a cached launch with the driver faked, so that launch-path changes can be
measured on any machine. Microseconds per `kernel[grid](...)` of this thread's CPU time (so
that other processes on a shared machine drop out), best of 7 rounds.

    python benchmarks/launch_fake_driver.py            # cuLaunchKernel is one trivial call
    python benchmarks/launch_fake_driver.py --stub-libcuda

`--stub-libcuda` builds (with the C compiler on PATH) a stand-in libcuda.so.1 whose every
entry point returns CUDA_SUCCESS and runs this script against it, so the launch goes through
cuda.bindings' real `cuLaunchKernel` wrapper (argument conversion, GIL release, result
lookup): the only part of a real launch missing is the driver's own work."""
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import torch

import kitjit as kit
from kitjit.testing import FakeDriver

STUB_C = r"""
#include <stdint.h>
#include <string.h>
static int ok(void) { return 0; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuGetProcAddress_v2(const char *s, void **f, int v, uint64_t fl, int *st) {
    *f = strcmp(s, "cuDriverGetVersion") ? (void *)ok : (void *)cuDriverGetVersion;
    if (st) *st = 0;
    return 0;
}
int cuGetProcAddress(const char *s, void **f, int v, uint64_t fl) {
    return cuGetProcAddress_v2(s, f, v, fl, 0);
}
int cuInit(unsigned f) { return 0; }
"""


@kit.jit
def empty_kernel(X, n, BLOCK: kit.constexpr):
    pass


@kit.jit
def add_kernel(X, Y, Out, n, BLOCK: kit.constexpr):
    pass


@kit.jit
def six_kernel(A, B, C, D, n, eps, BLOCK: kit.constexpr):
    pass


def per_call_us(fn, n=100_000, rounds=7):
    for _ in range(1000):
        fn()
    best = 1e9
    for _ in range(rounds):
        s = time.thread_time()  # CPU time of this thread: other processes' load drops out
        for _ in range(n):
            fn()
        best = min(best, (time.thread_time() - s) / n * 1e6)
    return best


def _reexec_with_stub() -> None:
    d = pathlib.Path(tempfile.mkdtemp(prefix="kitjit_stub_cuda_"))
    (d / "stub.c").write_text(STUB_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(d / "libcuda.so.1"),
                    str(d / "stub.c")], check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=f"{d}:{os.environ.get('LD_LIBRARY_PATH', '')}",
               KITJIT_STUB_LIBCUDA="1")
    args = [a for a in sys.argv[1:] if a != "--stub-libcuda"]
    sys.exit(subprocess.call([sys.executable, __file__, *args], env=env))


def main():
    if "--stub-libcuda" in sys.argv:
        _reexec_with_stub()
    stub = os.environ.get("KITJIT_STUB_LIBCUDA") == "1"
    from kitjit.runtime import driver

    real = (driver.raw_launch, driver.launch_ok, driver.stream_wrap)
    x, y, out = torch.empty(1024), torch.empty(1024), torch.empty(1024)
    a, b = torch.empty(1024), torch.empty(1024)
    with FakeDriver(record=False, allow_cpu=True) as fake:
        if stub:  # the real cuda.bindings wrapper over the stub library
            fake._set(driver, "raw_launch", real[0])
            fake._set(driver, "launch_ok", real[1])
            fake._set(driver, "stream_wrap", real[2])
            # torch's current-stream query is one C call returning a fresh large int
            launcher = sys.modules["kitjit.launcher"]
            fake._set(launcher, "_stream_getter", lambda: (0x7F0000005000).__add__)
        rows = {
            "empty_kernel[(1,)](x, 1024, BLOCK=128)":
                lambda: empty_kernel[(1,)](x, 1024, BLOCK=128),
            "add_kernel[(1,)](x, y, out, n, BLOCK=1024)":
                lambda: add_kernel[(1,)](x, y, out, 1000, BLOCK=1024),
            "six_kernel[(1,)](4 tensors, n, eps, BLOCK=64)":
                lambda: six_kernel[(1,)](x, y, a, b, 1000, 1e-5, BLOCK=64),
            "noop lambda": lambda: None,
        }
        if stub:  # the floor: cuda.bindings' cuLaunchKernel alone, an int stream as torch's
            from cuda.bindings import driver as cu

            cufn, stream = cu.CUfunction(0x10000), (0x7F0000005000).__add__
            rows["bare cuLaunchKernel (cuda.bindings)"] = lambda: cu.cuLaunchKernel(
                cufn, 1, 1, 1, 128, 1, 1, 0, stream(0), 12345, 0)
        for fn in rows.values():
            fn()
        print("driver:", "stub libcuda + cuda.bindings" if stub else "fake (trivial call)")
        for name, fn in rows.items():
            print(f"{name:48} {per_call_us(fn):7.3f} us", flush=True)


if __name__ == "__main__":
    main()

"""Host cost of a cached launch with the driver faked (kitjit.testing.FakeDriver with
record=False: cuLaunchKernel is one trivial Python call), so that launch-path changes can be
measured on any machine. Microseconds per `kernel[grid](...)`, best of 7 rounds."""
import sys
import time

import torch

import kitjit as kit
from kitjit.testing import FakeDriver


@kit.jit
def add_kernel(X, Y, Out, n, BLOCK: kit.constexpr):
    pass


def per_call_us(fn, n=100_000, rounds=7):
    for _ in range(1000):
        fn()
    best = 1e9
    for _ in range(rounds):
        s = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - s) / n * 1e6)
    return best


def main():
    x, y, out = torch.empty(1024), torch.empty(1024), torch.empty(1024)
    with FakeDriver(record=False, allow_cpu=True):
        add_kernel[(1,)](x, y, out, 1000, BLOCK=1024)
        rows = {
            "kernel[grid](x, y, out, n, BLOCK=1024)":
                lambda: add_kernel[(1,)](x, y, out, 1000, BLOCK=1024),
            "noop lambda": lambda: None,
        }
        for name, fn in rows.items():
            print(f"{name:44} {per_call_us(fn):7.3f} us", file=sys.stdout)


if __name__ == "__main__":
    main()

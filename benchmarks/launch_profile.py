"""Where the host time of a cached launch goes (microseconds per call, best of 3)."""
import time

import torch

import kitjit as kit


@kit.jit
def empty_kernel(X, n, BLOCK: kit.constexpr):
    pass


def t(fn, n=20000):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    best = 1e9
    for _ in range(3):
        s = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - s) / n * 1e6)
        torch.cuda.synchronize()
    return round(best, 3)


x = torch.empty(1024, device="cuda")
empty_kernel[(1,)](x, 1024, BLOCK=128)
k = empty_kernel[(1,)]
g = (1,)
stream = torch._C._cuda_getCurrentRawStream
rows = {
    "full kernel[grid](...)": lambda: empty_kernel[(1,)](x, 1024, BLOCK=128),
    "prebound partial(...)": lambda: k(x, 1024, BLOCK=128),
    "_launch(g, ...)": lambda: empty_kernel._launch(g, x, 1024, BLOCK=128),
    "partial creation": lambda: empty_kernel[(1,)],
    "x.data_ptr()": lambda: x.data_ptr(),
    "x.get_device()": lambda: x.get_device(),
    "x.dtype": lambda: x.dtype,
    "stream(0)": lambda: stream(0),
    "noop lambda": lambda: None,
}
for name, fn in rows.items():
    print(f"{name:28} {t(fn):8.3f} us")

"""Triton 3.6's interpreter on tests/test_signed_zero.py's table (max/min of -0.0, +0.0, NaN).

Run (prints a table; not a test: kitjit follows its GPU, where Triton's interpreter differs):
    PYTHONPATH=/work/triton-ref TRITON_INTERPRET=1 python tests/data/triton36_signed_zero.py
"""

import torch
import triton
import triton.language as tl

NAN, INF = float("nan"), float("inf")
PAIRS = [(-0.0, 0.0), (0.0, -0.0), (0.0, 0.0), (-0.0, -0.0), (NAN, -0.0), (0.0, NAN),
         (-0.0, NAN), (NAN, 0.0), (NAN, NAN), (1.5, -0.0), (-1.5, 0.0), (-INF, -0.0)]
#: kitjit's answers (interpreter = GPU): maximum/minimum's first eight pairs and the rows
#: measured on an H200, the rest from the lowering (test_signed_zero's gpu test checks all)
GPU = {"maximum": "+0 +0 +0 -0 -0 +0 -0 +0 nan 1.5 +0 -0",
       "minimum": "-0 -0 +0 -0 -0 +0 -0 +0 nan -0 -1.5 -inf",
       "rows max": "+0 +0 +0 +0 +0", "rows min": "-0 -0 -0 -0 -0",
       "cummax": "-0 +0 +0 +0 +0 +0 +0 +0", "cummin": "-0 -0 -0 -0 -0 -0 -0 -0",
       "atomic_max": "+0 +0 +0 -0 nan nan nan nan nan 1.5 +0 -0",
       "atomic_min": "-0 -0 +0 -0 -0 +0 -0 +0 nan -0 -1.5 -inf"}
ROWS = [[-0.0, 0.0] * 8, [0.0, -0.0] * 8, [-0.0] * 15 + [0.0], [0.0] * 15 + [-0.0],
        [NAN, -0.0, 0.0, NAN] * 4]


@triton.jit
def _mx(a, b):
    return tl.maximum(a, b)


@triton.jit
def _mn(a, b):
    return tl.minimum(a, b)


@triton.jit
def pairs(X, Y, O, N: tl.constexpr):
    r = tl.arange(0, N)
    x = tl.load(X + r)
    y = tl.load(Y + r)
    tl.store(O + r, tl.maximum(x, y))
    tl.store(O + N + r, tl.minimum(x, y))
    tl.store(O + 2 * N + r, tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL))
    tl.store(O + 3 * N + r, tl.minimum(x, y, propagate_nan=tl.PropagateNan.ALL))
    tl.store(O + 4 * N + r, tl.clamp(x, y, float("inf")))


@triton.jit
def rows(X, O, I, R: tl.constexpr, N: tl.constexpr):
    r = tl.arange(0, R)
    x = tl.load(X + r[:, None] * N + tl.arange(0, N)[None, :])
    vmax, imax = tl.max(x, axis=1, return_indices=True)
    vmin, imin = tl.min(x, axis=1, return_indices=True)
    tl.store(O + r, tl.max(x, axis=1))
    tl.store(O + R + r, tl.min(x, axis=1))
    tl.store(O + 2 * R + r, vmax)
    tl.store(O + 3 * R + r, vmin)
    tl.store(O + 4 * R + r, tl.reduce(x, 1, _mx))
    tl.store(O + 5 * R + r, tl.reduce(x, 1, _mn))
    tl.store(I + r, tl.argmax(x, axis=1))
    tl.store(I + R + r, tl.argmin(x, axis=1))
    tl.store(I + 2 * R + r, imax)
    tl.store(I + 3 * R + r, imin)


@triton.jit
def scans(X, O, N: tl.constexpr):
    r = tl.arange(0, N)
    x = tl.load(X + r)
    tl.store(O + r, tl.associative_scan(x, 0, _mx))
    tl.store(O + N + r, tl.associative_scan(x, 0, _mn))


@triton.jit
def atomics(MX, MN, Y, N: tl.constexpr):
    r = tl.arange(0, N)
    y = tl.load(Y + r)
    tl.atomic_max(MX + r, y)
    tl.atomic_min(MN + r, y)


def fmt(t: torch.Tensor) -> str:
    def one(v: float) -> str:
        if v != v:
            return "nan"
        if v == 0:
            return "-0" if torch.signbit(torch.tensor(v)) else "+0"
        return f"{v:g}"
    return " ".join(one(v) for v in t.float().tolist())


def show(name: str, got: str) -> None:
    want = GPU.get(name)
    note = "" if want is None else ("  (= GPU)" if got == want else f"  (GPU: {want})")
    print(f"  {name:16s} {got}{note}")


def main() -> None:
    k = len(PAIRS)
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        print(dt)
        x = torch.tensor([p[0] for p in PAIRS] + [0.0] * (16 - k), dtype=dt)
        y = torch.tensor([p[1] for p in PAIRS] + [0.0] * (16 - k), dtype=dt)
        o = torch.full((5, 16), NAN, dtype=dt)
        pairs[(1,)](x, y, o, N=16)
        for name, row in zip(("maximum", "minimum", "maximum ALL", "minimum ALL",
                              "clamp(x, y, inf)"), o):
            show(name, fmt(row[:k]))
        xs = torch.tensor(ROWS + [ROWS[0]] * (16 - len(ROWS)), dtype=dt)
        o = torch.full((6, 16), NAN, dtype=dt)
        i = torch.full((4, 16), -7, dtype=torch.int32)
        try:
            rows[(1,)](xs, o, i, R=16, N=16)
            for name, row in zip(("rows max", "rows min", "max (indices)", "min (indices)",
                                  "reduce(maximum)", "reduce(minimum)"), o):
                show(name, fmt(row[:len(ROWS)]))
            print("  argmax, argmin, max and min's indices:", i[:, :len(ROWS)].tolist())
        except Exception as e:  # bf16: Triton's interpreter fails here
            print("  rows:", type(e).__name__, str(e)[:120])
        s = torch.tensor([-0.0, 0.0, -0.0, NAN, 0.0, -0.0, -0.0, -0.0], dtype=dt)
        so = torch.full((16,), NAN, dtype=dt)
        try:
            scans[(1,)](s, so, N=8)
            show("cummax", fmt(so[:8]))
            show("cummin", fmt(so[8:]))
        except Exception as e:
            print("  scans:", type(e).__name__, str(e)[:120])
        if dt is torch.float32:
            mx, mn = x.clone(), x.clone()
            atomics[(1,)](mx, mn, y, N=16)
            show("atomic_max", fmt(mx[:k]))
            show("atomic_min", fmt(mn[:k]))


if __name__ == "__main__":
    main()

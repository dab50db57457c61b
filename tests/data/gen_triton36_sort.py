"""Regenerate tests/data/triton36_sort.json from Triton 3.6.0 itself (not run by CI).

    PYTHONPATH=/work/triton-ref TRITON_INTERPRET=1 python tests/data/gen_triton36_sort.py

Each case runs `tl.sort(x, descending=D)` (k = 0) or `tl.topk(x, k)` on a tile of 1 to 3
dims in Triton's interpreter and records the input and Triton's output as bit patterns (so
NaN payloads and signed zeros compare exactly), and the output's dtype (tl.topk with k < n
widens as tl.max: fp16 to fp32, ints narrower than 32 bits to int32; the kernel asserts it).
Inputs are random with ties, and in the float rows NaN, +-0 and +-inf: Triton's network
then gives no sorted permutation, and that answer is what is compared. No bf16 case:
Triton's interpreter scrambles bf16 through the bitcasts of its compare-and-swap
(tests/test_triton_sort.py checks bf16 against kitjit's own fp32 sort). No 1-d top-1:
Triton rejects it (a top-k whose result is one element). Top-k's max rounds meet -0.0
against +0.0: Triton's interpreter (numpy's nanmax) then gives either zero, by dtype and
shape, its GPU code (max.f32) +0.0, as kitjit; the recorded cases happen to agree with the
GPU. tests/test_triton_sort.py runs the same cases in kitjit.
"""

from __future__ import annotations

import json
import os

import numpy as np
import torch
import triton
import triton.language as tl

# (name, torch dtype, shape, descending, k: 0 = tl.sort, else tl.topk)
CASES = [
    ("f32_8x16_asc", torch.float32, (8, 16), False, 0),
    ("f32_4x32_desc", torch.float32, (4, 32), True, 0),
    ("f32_1024_asc", torch.float32, (1024,), False, 0),
    ("f32_2x256_desc", torch.float32, (2, 256), True, 0),
    ("f32_4x1_asc", torch.float32, (4, 1), False, 0),
    ("f32_2x4x8_asc", torch.float32, (2, 4, 8), False, 0),
    ("f16_2x64_asc", torch.float16, (2, 64), False, 0),
    ("f64_2x32_desc", torch.float64, (2, 32), True, 0),
    ("i32_4x16_asc", torch.int32, (4, 16), False, 0),
    ("i64_2x8_desc", torch.int64, (2, 8), True, 0),
    ("i16_2x16_desc", torch.int16, (2, 16), True, 0),
    ("u8_4x32_asc", torch.uint8, (4, 32), False, 0),
    ("f32_4x64_top8", torch.float32, (4, 64), True, 8),
    ("f32_1024_top4", torch.float32, (1024,), True, 4),
    ("f32_2x512_top16", torch.float32, (2, 512), True, 16),
    ("f32_4x2_top1", torch.float32, (4, 2), True, 1),
    ("f32_2x4x16_top4", torch.float32, (2, 4, 16), True, 4),
    ("f16_2x32_top4", torch.float16, (2, 32), True, 4),
    ("f64_2x8_top8", torch.float64, (2, 8), True, 8),
    ("i32_2x16_top1", torch.int32, (2, 16), True, 1),
    ("u8_4x16_top2", torch.uint8, (4, 16), True, 2),
    ("i8_2x32_top8", torch.int8, (2, 32), True, 8),
]
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def out_dtype(dtype: torch.dtype, n: int, k: int) -> torch.dtype:
    """Triton's result dtype: tl.topk with k < n goes through tl.max, which widens."""
    if not k or k == n or dtype.itemsize >= 4:
        return dtype
    return torch.float32 if dtype.is_floating_point else torch.int32


def make_input(dtype: torch.dtype, shape: tuple, seed: int) -> torch.Tensor:
    """Random values with ties; floats also get NaN, +-0 and +-inf."""
    g = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dtype.is_floating_point:
        v = g.integers(-6, 7, n).astype(np.float64) * 0.5
        special = g.random(n)
        v[special < 0.06] = np.nan
        v[(special >= 0.06) & (special < 0.14)] = -0.0
        v[(special >= 0.14) & (special < 0.17)] = np.inf
        v[(special >= 0.17) & (special < 0.20)] = -np.inf
    elif dtype == torch.uint8:
        v = g.integers(0, 256, n)
    else:
        v = g.integers(-100, 101, n)
    return torch.tensor(v).to(dtype).reshape(shape)


@triton.jit
def sort_3d(X, Y, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr, K: tl.constexpr,
            DESC: tl.constexpr):
    a = tl.arange(0, A)[:, None, None]
    b = tl.arange(0, B)[None, :, None]
    x = tl.load(X + a * (B * C) + b * C + tl.arange(0, C)[None, None, :])
    if K == 0:
        y = tl.sort(x, descending=DESC)
        KO: tl.constexpr = C
    else:
        y = tl.topk(x, K)
        KO: tl.constexpr = K
    tl.static_assert(y.dtype == Y.dtype.element_ty)
    tl.store(Y + a * (B * KO) + b * KO + tl.arange(0, KO)[None, None, :], y)


@triton.jit
def sort_2d(X, Y, R: tl.constexpr, N: tl.constexpr, K: tl.constexpr, DESC: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    x = tl.load(X + r * N + tl.arange(0, N)[None, :])
    if K == 0:
        y = tl.sort(x, descending=DESC)
        KO: tl.constexpr = N
    else:
        y = tl.topk(x, K)
        KO: tl.constexpr = K
    tl.static_assert(y.dtype == Y.dtype.element_ty)
    tl.store(Y + r * KO + tl.arange(0, KO)[None, :], y)


@triton.jit
def sort_1d(X, Y, N: tl.constexpr, K: tl.constexpr, DESC: tl.constexpr):
    x = tl.load(X + tl.arange(0, N))
    if K == 0:
        y = tl.sort(x, descending=DESC)
        KO: tl.constexpr = N
    else:
        y = tl.topk(x, K)
        KO: tl.constexpr = K
    tl.static_assert(y.dtype == Y.dtype.element_ty)
    tl.store(Y + tl.arange(0, KO), y)


def bits(t: torch.Tensor) -> list[int]:
    return t.contiguous().view(BITS[t.element_size()]).reshape(-1).tolist()


def main() -> None:
    out = {"_about": "Triton 3.6.0's interpreter: tl.sort / tl.topk on the recorded inputs "
           "(bit patterns); tests/data/gen_triton36_sort.py wrote it"}
    for i, (name, dtype, shape, desc, k) in enumerate(CASES):
        x = make_input(dtype, shape, seed=200 + i)
        n = shape[-1]
        y = torch.empty(shape[:-1] + (k or n,), dtype=out_dtype(dtype, n, k))
        if len(shape) == 3:
            sort_3d[(1,)](x, y, *shape, k, desc)
        elif len(shape) == 2:
            sort_2d[(1,)](x, y, shape[0], n, k, desc)
        else:
            sort_1d[(1,)](x, y, n, k, desc)
        out[name] = {"dtype": str(dtype).split(".")[1], "shape": list(shape),
                     "descending": desc, "k": k, "out_dtype": str(y.dtype).split(".")[1],
                     "x": bits(x), "y": bits(y)}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "triton36_sort.json")
    with open(path, "w") as f:  # one case a line
        f.write("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}"
                                   for k, v in out.items()) + "\n}\n")
    print(f"wrote {path}: {len(CASES)} cases, Triton {triton.__version__}")


if __name__ == "__main__":
    main()

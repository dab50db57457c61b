"""Regenerate tests/data/triton36_bitonic_merge.json from Triton 3.6.0 itself (not run by CI).

    PYTHONPATH=/work/triton-ref TRITON_INTERPRET=1 python tests/data/gen_triton36_bitonic_merge.py

Each case runs `tl.bitonic_merge(x, descending=D)` on a [R, N] (or [N]) tile in Triton's
interpreter and records the input and Triton's output as bit patterns (so NaN payloads and
signed zeros compare exactly). The inputs are random with ties, NaNs and signed zeros in the
float rows; some rows are bitonic (the merge then sorts them), most are not (the network's
answer on arbitrary data is what is compared). tests/test_triton_bitonic_merge.py runs the
same cases in kitjit. No bf16 case: Triton's interpreter scrambles bf16 through the
merge's bitcasts (the test checks bf16 against kitjit's own fp32 merge instead).
"""

from __future__ import annotations

import json
import os

import numpy as np
import torch
import triton
import triton.language as tl

# (name, torch dtype, shape, descending)
CASES = [
    ("f32_8x16_asc", torch.float32, (8, 16), False),
    ("f32_4x32_desc", torch.float32, (4, 32), True),
    ("f32_64", torch.float32, (64,), False),
    ("f16_2x8_desc", torch.float16, (2, 8), True),
    ("i32_4x16_asc", torch.int32, (4, 16), False),
    ("i32_2x2_desc", torch.int32, (2, 2), True),
    ("u8_4x8_asc", torch.uint8, (4, 8), False),
    ("f32_4x1", torch.float32, (4, 1), False),
    ("f32_2x256", torch.float32, (2, 256), False),
    ("f32_2x4x8_desc", torch.float32, (2, 4, 8), True),
    ("f64_2x32", torch.float64, (2, 32), False),
    ("i64_2x8_desc", torch.int64, (2, 8), True),
]
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def make_input(dtype: torch.dtype, shape: tuple, seed: int) -> torch.Tensor:
    """Random values with ties; floats also get NaN, +-0 and +-inf; every other row (along
    the last dim) is made bitonic (ascending then descending halves)."""
    g = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dtype.is_floating_point:
        v = g.integers(-6, 7, n).astype(np.float64) * 0.5
        special = g.random(n)
        v[special < 0.08] = np.nan
        v[(special >= 0.08) & (special < 0.14)] = -0.0
        v[(special >= 0.14) & (special < 0.18)] = np.inf
        v[(special >= 0.18) & (special < 0.22)] = -np.inf
    elif dtype == torch.uint8:
        v = g.integers(0, 256, n)
    else:
        v = g.integers(-20, 21, n)
    t = torch.tensor(v).to(dtype).reshape(-1, shape[-1])
    if shape[-1] > 1 and len(shape) > 1:
        half = shape[-1] // 2
        for r in range(0, t.shape[0], 2):
            a = torch.sort(t[r, :half]).values
            b = torch.sort(t[r, half:], descending=True).values
            t[r] = torch.cat([a, b])
    return t.reshape(shape)


@triton.jit
def merge_2d(X, Y, R: tl.constexpr, N: tl.constexpr, DESC: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(Y + offs, tl.bitonic_merge(tl.load(X + offs), descending=DESC))


@triton.jit
def merge_3d(X, Y, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr, DESC: tl.constexpr):
    offs = (tl.arange(0, A)[:, None, None] * (B * C) + tl.arange(0, B)[None, :, None] * C
            + tl.arange(0, C)[None, None, :])
    tl.store(Y + offs, tl.bitonic_merge(tl.load(X + offs), descending=DESC))


@triton.jit
def merge_1d(X, Y, N: tl.constexpr, DESC: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(Y + offs, tl.bitonic_merge(tl.load(X + offs), descending=DESC))


def bits(t: torch.Tensor) -> list[int]:
    return t.contiguous().view(BITS[t.element_size()]).reshape(-1).tolist()


def main() -> None:
    out = {"_about": "Triton 3.6.0's interpreter: tl.bitonic_merge on the recorded inputs "
           "(bit patterns); tests/data/gen_triton36_bitonic_merge.py wrote it"}
    for i, (name, dtype, shape, desc) in enumerate(CASES):
        x = make_input(dtype, shape, seed=100 + i)
        y = torch.empty_like(x)
        if len(shape) == 3:
            merge_3d[(1,)](x, y, *shape, desc)
        elif len(shape) == 2:
            merge_2d[(1,)](x, y, shape[0], shape[1], desc)
        else:
            merge_1d[(1,)](x, y, shape[0], desc)
        out[name] = {"dtype": str(dtype).split(".")[1], "shape": list(shape),
                     "descending": desc, "x": bits(x), "y": bits(y)}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "triton36_bitonic_merge.json")
    with open(path, "w") as f:  # one case a line
        f.write("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}"
                                   for k, v in out.items()) + "\n}\n")
    print(f"wrote {path}: {len(CASES)} cases, Triton {triton.__version__}")


if __name__ == "__main__":
    main()

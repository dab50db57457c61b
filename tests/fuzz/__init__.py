"""The fuzzer: random kernels (hypothesis); valid ones compute the right values, broken ones
are reported.

A strategy builds a small random kernel as a tree of tile operations (masked loads of 1-3
tensors of fp32/fp16/bf16/fp64/int8/int16/int32/int64/uint8/uint32 and fp8 (e4m3, e5m2;
converted as they load), `+ - * /` (ints wrap), `// %` on ints (truncating), `x * M + K`
hashes that overflow, casts between all of these (float -> int truncates and saturates;
8-bit ints saturate to 16 bits and keep the low byte, as Triton's GPU), fp8 round trips
and fp8 outputs (round to nearest even, saturating), Python literals that
are large, negative, inexact or out of range for the tile's dtype (kitjit's weak typing:
`kit.minimum(x, 1e5)` on fp16 is min with +inf, `x_i32 + 2**40` is int64),
`kit.cumsum/cumprod`, `kit.flip/trans/permute/reshape`, `kit.split(kit.join(x, y))`,
`kit.math.tanh/erf/log1p/fma`, `kit.umulhi` on int32/uint32/int64, `kit.clamp`,
`kit.where` on a scalar condition, `kit.minimum`/`maximum`, comparisons and `kit.where`,
`exp exp2 log log2 sqrt abs sigmoid sin cos` on safe inputs, `sum max min argmax argmin`
along an axis with the result broadcast back by `[:, None]` / `[None, :]` / `keep_dims` /
`kit.expand_dims`, atomics (add max min and or xor xchg cas, with or without a mask, with
sem and scope: one address per lane returning the old values, and many lanes of every
program per address of a counter), `range`, `kit.static_range` and `while` loops carrying
an accumulator, `if` on a run-time scalar and on the loop variable inside loops, early
returns (the kernel's, after a store, and a helper's under a run-time condition), calls of
generated `@kit.jit` helpers) and writes it to a real .py file (the frontend reads source
with `inspect`), which is imported with importlib. From the same tree it computes a float64
reference together with a running error bound per element (each operation adds its
rounding error in its own dtype) and an "unstable" mask for elements whose value depends on
a comparison or truncation closer than that bound. Then:

- valid kernels run in the interpreter on random inputs and must match the reference within
  the bound wherever the result is stable (and be finite everywhere they are stored); they
  also carry `kit.static_assert`s on the dtype and shape the typing rules give; and each is
  compiled for sm_90a (PTX with `.target sm_90a`, an ELF cubin), without a GPU;
- broken kernels are valid ones with one known mistake inserted (in the kernel or in a
  called helper): they must raise `CompileError` whose message names the generated file and
  the line of the mistake (and the call site for mistakes inside helpers), the same from the
  interpreter's launch and from the sm_90a compile, and never `InternalCompilerError` or
  any other exception;
- launch mistakes on valid kernels raise TypeError / ValueError before anything runs.

Modules: `model` (dtypes, the tree's `Node`), `gen` (the generators), `kernel` (source
emission, the `kernels` strategy), `oracle` (the float64 reference), `broken` (mistakes,
launch mistakes), `runner` (running, checking, the differential mode and the long mode's
failure collection). The tests: tests/test_fuzz.py (the CI slice: hypothesis derandomized,
the same examples on every run), tests/test_fuzz_long.py (`--fuzz-minutes N`, and the
differential mode on a GPU), tests/test_fuzz_repros.py (kernels that once failed).
"""

from __future__ import annotations

"""3-D (batched) `kit.dot`: [B, M, K] x [B, K, N] (+ acc [B, M, N]) -> [B, M, N].

Why: Triton's `tl.dot` accepts rank-3 operands (one matrix product per leading index) and
real kernels use it (batched attention, grouped GEMMs). kitjit lowers it as B independent
2-D dots on slices of the register tiles, so every dtype rule, precision split and tensor-
core path of the 2-D dot applies to each slice unchanged; the slices are taken and put back
with register shape ops (permute/reshape/split and cat), B being a power of two as every
tile dim is. The cost grows with B like B separate dots (no wider MMA is formed).
"""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Value

from .base import _describe, _shape


def _check(b: Any, x: Value, w: Value, acc: Any) -> None:
    """Triton's rank-3 rules: same rank, same batch, matching K; acc of the result's shape."""
    for name, v in (("a", x), ("b", w)):
        if not isinstance(v, Value) or v.type.is_scalar or len(v.shape) not in (2, 3):
            raise b.error(f"kit.dot: '{name}' must be a 2-d or 3-d tile, got {_describe(v)}")
    if len(x.shape) != len(w.shape):
        raise b.error(f"kit.dot: a is {len(x.shape)}-d ({_shape(x.shape)}) but b is "
                      f"{len(w.shape)}-d ({_shape(w.shape)})",
                      "both operands are [M, K] x [K, N] or both [B, M, K] x [B, K, N]")
    (B, M, K), (B2, K2, N) = x.shape, w.shape
    if B != B2:
        raise b.error(f"kit.dot: batch dims differ: a is {_shape(x.shape)}, b is "
                      f"{_shape(w.shape)}", "a is [B, M, K] and b is [B, K, N]")
    if K != K2:
        raise b.error(f"kit.dot: inner dims differ: a is {_shape(x.shape)}, b is "
                      f"{_shape(w.shape)}", "a is [B, M, K] and b is [B, K, N]: load b "
                      "with the K offsets on its middle dim")
    if M < 16 or K < 16 or N < 16:
        raise b.error(f"kit.dot of 3-d tiles needs M, N and K >= 16 (as Triton), got "
                      f"M={M}, N={N}, K={K}", "pad the block sizes up and mask the edges")
    if acc is not None and (not isinstance(acc, Value) or acc.type.is_scalar
                            or acc.shape != (B, M, N)):
        raise b.error(f"kit.dot: acc must be a tile of shape [{B}, {M}, {N}] here, got "
                      f"{_describe(acc)}", f"start it as kit.zeros(({B}, {M}, {N}), "
                      "kit.float32)")


def slices(b: Any, v: Value) -> list[Value]:
    """The B 2-d slices v[0], ..., v[B-1] of a 3-d register tile, in order."""
    B = v.shape[0]
    if B == 1:
        return [b.reshape(v, v.shape[1:], "kit.dot")]
    # [B, R, C] -> [R, C, B/2, 2]: split takes even and odd batch indices apart
    p = b.permute(v, (1, 2, 0), "kit.dot")
    p = b.reshape(p, p.shape[:2] + (B // 2, 2), "kit.dot")
    even, odd = b.split(p)
    ev = slices(b, b.permute(even, (2, 0, 1), "kit.dot"))
    od = slices(b, b.permute(odd, (2, 0, 1), "kit.dot"))
    out = []
    for e, o in zip(ev, od):
        out += [e, o]
    return out


def stack(b: Any, parts: list[Value]) -> Value:
    """The 3-d tile whose slices are `parts` (a power-of-two count), in order."""
    tiles = [b.expand_dims(p, 0) for p in parts]
    while len(tiles) > 1:
        tiles = [b.cat(tiles[i], tiles[i + 1]) for i in range(0, len(tiles), 2)]
    return tiles[0]


def batched_dot(b: Any, x: Value, w: Value, acc: Any, precision: str | None,
                out_dtype: Any) -> Value:
    """acc + x @ w per batch index, each slice by the 2-d rule (`b.dot`)."""
    _check(b, x, w, acc)
    xs, ws = slices(b, x), slices(b, w)
    accs = slices(b, acc) if acc is not None else [None] * len(xs)
    return stack(b, [b.dot(xi, wi, ai, precision, out_dtype)
                     for xi, wi, ai in zip(xs, ws, accs)])

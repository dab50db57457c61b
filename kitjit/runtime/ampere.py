"""Row descriptors: what a `kit.tma_load` / `kit.tma_store` tensor argument carries below
sm_90 (Ampere and Ada have no TMA). The kernel parameter is the same 128-byte by-value slot
a CUtensorMap fills on Hopper; here it holds the 2-d tensor's base address, its rows and
columns and its row stride in bytes, which backend/lower/ampere.py reads at the kernel's
entry to compute each thread's `cp.async` addresses and bounds.

Layout (little-endian): u64 base | i32 rows | i32 cols | i64 row stride (bytes) | zeros;
a 3-d tensor's (`row_map3`): one batch entry's, then i64 batch stride (bytes) | i32 batch
entries | zeros.
"""

from __future__ import annotations

import ctypes
from typing import Any

_CACHE: dict = {}
_OLD: dict = {}


def row_map(t: Any, box_rows: int, box_cols: int, swizzle: int, dtype: str) -> int:
    """Address of the host-side row descriptor of 2-d tensor `t` (built once per pointer,
    shape and strides; cuLaunchKernel copies its 128 bytes into the parameter). The box,
    swizzle and dtype are the kernel's business: taken for the launcher's one signature."""
    ptr = t.data_ptr()
    key = (ptr, t.shape[0], t.shape[1], t.stride(0), t.stride(1))
    hit = _CACHE.get(key)
    if hit is not None:
        return hit[1]
    e = t.element_size()
    if t.dim() != 2 or t.stride(1) != 1 or ptr % 16 or (t.stride(0) * e) % 16 or \
            t.shape[0] >= 2**31 or t.shape[1] >= 2**31:
        raise ValueError(f"a tensor copied by kit.tma_load / kit.tma_store must be 2-d, "
                         f"contiguous in its last dim, 16-byte aligned, with rows a multiple "
                         f"of 16 bytes apart; got shape {tuple(t.shape)}, strides "
                         f"{tuple(t.stride())}, address {ptr:#x}")
    buf = (ctypes.c_uint64 * 16)()
    buf[0] = ptr
    buf[1] = t.shape[0] | (t.shape[1] << 32)
    buf[2] = t.stride(0) * e
    _keep(key, buf)
    return ctypes.addressof(buf)


def row_map3(t: Any, box_rows: int, box_cols: int, swizzle: int, dtype: str) -> int:
    """`row_map` of a 3-d tensor (batch, rows, cols), copied with (batch, row, col)
    coordinates: the row descriptor of one batch entry, then the batch stride in bytes (u64)
    and the number of entries (i32), so that a box past an entry's rows reads zeros."""
    ptr = t.data_ptr()
    key = (ptr, *t.shape, *t.stride())
    hit = _CACHE.get(key)
    if hit is not None:
        return hit[1]
    e = t.element_size()
    if t.dim() != 3 or t.stride(2) != 1 or ptr % 16 or (t.stride(1) * e) % 16 or \
            (t.stride(0) * e) % 16 or max(t.shape) >= 2**31:
        raise ValueError(f"a tensor copied by kit.tma_load / kit.tma_store with (batch, row, "
                         f"col) coordinates must be 3-d, contiguous in its last dim, 16-byte "
                         f"aligned, with rows and batch entries a multiple of 16 bytes apart; "
                         f"got shape {tuple(t.shape)}, strides {tuple(t.stride())}, address "
                         f"{ptr:#x}")
    buf = (ctypes.c_uint64 * 16)()
    buf[0] = ptr
    buf[1] = t.shape[1] | (t.shape[2] << 32)
    buf[2] = t.stride(1) * e
    buf[3] = t.stride(0) * e
    buf[4] = t.shape[0]
    _keep(key, buf)
    return ctypes.addressof(buf)


def _keep(key: tuple, buf: Any) -> None:
    if len(_CACHE) > 4096:  # keep the previous generation alive (another thread may be
        global _OLD         # about to launch with one of its buffers)
        _OLD = dict(_CACHE)
        _CACHE.clear()
    _CACHE[key] = (buf, ctypes.addressof(buf))


def unpack(addr: int) -> tuple[int, int, int, int]:
    """(base, rows, cols, row stride in bytes) of a descriptor (for tests)."""
    buf = (ctypes.c_uint64 * 3).from_address(addr)
    return buf[0], buf[1] & 0xFFFFFFFF, buf[1] >> 32, buf[2]

"""Tensor descriptors on TMA (sm_90a): `desc.load` / `desc.store` of a 2-d host
`TensorDescriptor` kernel argument or of a `kit.make_tensor_descriptor` made in the kernel,
expanded into the tma family's ops. A helper of block_ptr.py.

A descriptor made in the kernel gets its CUtensorMap from `tma_desc_create` where the call
is: thread 0 writes the map's fields into the program's 128-byte slot of the kernel's global
scratch (Triton's `set_allocator` memory; kitjit.launcher allocates it per launch) and
fences it for the TMA unit (backend/lower/tma.py). Its loads and stores are then the same
ops as a host descriptor's.

The launcher encodes one CUtensorMap per descriptor argument at launch (from the
descriptor's base, shape and strides; the box is one swizzle chunk of the block, as for
`kit.tma_load`), passed as a `__grid_constant__` parameter. In the kernel:

    desc.load(offs)          ->  tma_load(tile, map, offs, bar); mbar_wait(bar); smem_load(tile)
    desc.store(offs, value)  ->  tma_store(map, offs, value, staging)

Each `desc.load` has its own shared tile and mbarrier, allocated once at the kernel's start;
its wait flips a phase the backend keeps per barrier (`auto_phase`), so a load in a loop
waits for the copy of its own iteration. TMA reads out-of-bounds parts of the box as zero
and clips stores at the tensor's edge: the masked path's results. Descriptors that do not
fit (rank other than 2, a block over 256 in a dim or under 16 bytes a row, padding "nan",
dtypes TMA cannot copy, or shared memory past `_SMEM_BUDGET`) keep the masked path.
"""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Value
from kitjit.ir.types import TileType, mbarrier, tma_desc

_SMEM_BUDGET = 160 * 1024  # bytes of TMA tiles per kernel; scratch and the rest need room


def _shape_fits(desc) -> bool:
    """TMA can copy the descriptor's blocks (whatever shared memory is left)."""
    block = desc.block_shape
    elem = desc.dtype.element_ty
    if len(block) != 2 or elem.itemsize not in (1, 2, 4, 8) or elem.is_bool():
        return False
    return max(block) <= 256 and block[1] * elem.itemsize >= 16


def _fits(b, desc) -> bool:
    if not _shape_fits(desc):
        return False
    block = desc.block_shape
    elem = desc.dtype.element_ty
    nbytes = block[0] * block[1] * elem.itemsize
    used = b.fn.attrs.get("tma_desc_smem", 0)
    if used + nbytes > _SMEM_BUDGET:
        return False
    b.fn.attrs["tma_desc_smem"] = used + nbytes
    return True


def tma_eligible(desc) -> bool:
    """An in-kernel descriptor whose blocks sm_90a copies by TMA (else the masked path)."""
    return desc.padding == "zero" and _shape_fits(desc)


def device_map(b, desc) -> Value | None:
    """`kit.make_tensor_descriptor` on sm_90a: the kernel builds the descriptor's
    CUtensorMap where the call is (its box as the shared tile's layout splits it: one
    swizzle span of columns), or None where its blocks keep the masked path."""
    if not tma_eligible(desc):
        return None
    from kitjit.ir.layouts import shared_layout

    elem = desc.dtype.element_ty
    lay = shared_layout(tuple(desc.block_shape), elem)
    return b.tma_desc_create(desc.base, desc.shape[0], desc.shape[1], desc.strides[0],
                             tuple(desc.block_shape), lay.swizzle, lay.chunk)


def _map(b, desc) -> Value:
    """The CUtensorMap of the descriptor: the one the kernel built, or the parameter of a
    host descriptor argument (added on first use)."""
    if desc.dev_map is not None:
        return desc.dev_map
    fn = b.fn
    tma = fn.attrs.setdefault("tma", {})
    entry = tma.get(desc.tma_param)
    if entry is None:
        d = Value(TileType(tma_desc), f"{desc.tma_param}.map")
        fn.body.args.append(d)
        d.owner = fn.body
        entry = tma[desc.tma_param] = {"box": list(desc.block_shape),
                                       "dtype": desc.dtype.element_ty.name, "desc": d,
                                       "host": True}
    return entry["desc"]


def _hoisted(b, name: str, rtype: TileType, attrs: dict | None = None) -> Value:
    """An op with no operands emitted at the kernel's start (after the ones before it), so
    it runs once whatever loop or branch asked for it."""
    body = b.fn.body
    b.blocks.append(body)
    try:
        op = b.emit(name, [], [rtype], attrs)
    finally:
        b.blocks.pop()
    body.ops.remove(op)
    at = b.fn.attrs.get("hoisted", 0)
    body.ops.insert(at, op)
    b.fn.attrs["hoisted"] = at + 1
    return op.result


def tma_desc_load(b, desc, offsets: list) -> Value | None:
    """The block at `offsets` copied by TMA, in registers; None where the masked path must
    do it."""
    if not _fits(b, desc):
        return None
    elem = desc.dtype.element_ty
    block = tuple(desc.block_shape)
    nbytes = block[0] * block[1] * elem.itemsize
    m = _map(b, desc)
    tile = _hoisted(b, "smem_alloc", TileType(elem, block, space="smem"))
    bars = _hoisted(b, "smem_alloc", TileType(mbarrier, (1,), space="smem"), {"init": 1})
    bar = b.smem_index(bars, 0)
    b.emit("tma_load", [tile, m, offsets[0], offsets[1], bar], [], {"bytes": nbytes})
    b.emit("mbar_wait", [bar, b.constant(0)], [], {"auto_phase": True})
    return b.smem_load(tile)


def tma_desc_store(b, desc, offsets: list, value: Any) -> bool:
    """Store `value` (cast to the descriptor's dtype) at `offsets` by TMA; False where the
    masked path must do it."""
    elem = desc.dtype.element_ty
    block = tuple(desc.block_shape)
    if not isinstance(value, Value) or value.shape != block or not _fits(b, desc):
        return False
    value = b.cast(value, elem)
    m = _map(b, desc)
    staging = _hoisted(b, "smem_alloc", TileType(elem, block, space="smem"))
    b.emit("tma_store", [m, offsets[0], offsets[1], value, staging], [])
    return True

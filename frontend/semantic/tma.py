"""Level 2 (Hopper): shared tiles, mbarriers, TMA copies, warpgroup roles and barriers.

Call rules: kit.shared, kit.mbarriers, kit.mbarrier_arrive, kit.mbarrier_wait,
kit.tma_load, kit.tma_store, kit.warpgroup_id, kit.setmaxnreg, kit.barrier. kit.load and
kit.store of a shared tile (smem_load, smem_store) are typed here and called from the memory
family's rules.
"""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Op, Value
from kitjit.ir.layouts import shared_shape_error
from kitjit.ir.registry import typing_rule
from kitjit.ir.types import DType, TileType, int32, mbarrier, tma_desc

from .base import _describe, _shape, is_pow2
from .call_rules import Call, call_rule


class TmaOps:
    """Typing rules of the tma family."""

    @typing_rule("smem_alloc")
    def shared(self, shape: Any, dtype: Any) -> Value:
        if isinstance(shape, int):
            shape = (shape,)
        if not isinstance(shape, (tuple, list)) or not all(isinstance(s, int) for s in shape):
            raise self.error(f"kit.shared needs a shape of constexpr ints, got {_describe(shape)}")
        shape = tuple(shape)
        tile = shape[1:] if len(shape) == 3 else shape
        if len(tile) != 2 or (len(shape) == 3 and shape[0] < 1):
            raise self.error(f"kit.shared takes (rows, cols) or (stages, rows, cols), got "
                             f"{_shape(shape)}")
        if not isinstance(dtype, DType) or dtype.is_ptr():
            raise self.error(f"kit.shared needs an element dtype, got {_describe(dtype)}")
        why = shared_shape_error(tile[0], tile[1], dtype.itemsize)
        if why:
            raise self.error(f"kit.shared of shape {_shape(shape)} ({dtype}): {why}",
                             "rows: a power of two or a multiple of 8 (64 per warpgroup for "
                             "kit.mma's A); cols: a power of two or whole 32/64/128-byte "
                             "swizzle chunks")
        target = self.fn.attrs.get("target")
        if target and not all(is_pow2(s) for s in tile):
            raise self.error(f"kit.shared of shape {_shape(shape)}: on {target} shared tiles keep "
                             f"power-of-two rows and cols (the cp.async / ldmatrix path); "
                             f"other dims are for Hopper (sm_90a)")
        return self.emit1("smem_alloc", [], TileType(dtype, shape, space="smem"))

    def mbarriers(self, count: Any, arrivals: Any = 1) -> Value:
        if not isinstance(count, int) or count < 1:
            raise self.error(f"kit.mbarriers needs a positive constexpr count, got {count!r}")
        if not isinstance(arrivals, int) or arrivals < 1:
            raise self.error(f"kit.mbarriers: arrivals must be a positive constexpr, got "
                             f"{arrivals!r}")
        return self.emit1("smem_alloc", [], TileType(mbarrier, (count,), space="smem"),
                          {"init": arrivals})

    @typing_rule("mbar_arrive")
    def mbarrier_arrive(self, bar: Any) -> None:
        if not isinstance(bar, Value) or bar.dtype is not mbarrier or bar.shape != ():
            raise self.error(f"kit.mbarrier_arrive needs one mbarrier (bars[s]), got "
                             f"{_describe(bar)}")
        self.emit("mbar_arrive", [bar], [])

    @typing_rule("smem_index")
    def smem_index(self, x: Value, idx: Any) -> Value:
        if len(x.shape) < 1 or (x.dtype is not mbarrier and len(x.shape) != 3):
            raise self.error(f"only the stage dim of a shared tile can be indexed, and this "
                             f"tile has shape {_shape(x.shape)}")
        if isinstance(idx, int):
            if not 0 <= idx < x.shape[0]:
                raise self.error(f"index {idx} is out of range for {x.shape[0]} stages")
            idx = self.constant(idx, int32)
        elif not isinstance(idx, Value) or not idx.type.is_scalar or not idx.dtype.is_int():
            raise self.error(f"a stage index must be a scalar int, got {_describe(idx)}")
        else:
            idx = self.cast(idx, int32)
        return self.emit1("smem_index", [x, idx],
                          TileType(x.dtype, x.shape[1:], space="smem"))

    def tma_desc_arg(self, tensor: Value, box: tuple, what: str, rank: int = 2,
                     l2: int = 256) -> Value:
        """The TMA descriptor kernel parameter of tensor argument `tensor` (added on first
        use; the runtime builds it from the torch tensor and the box). `rank` 3: the tensor
        is (batch, rows, cols) and a box is one batch entry's (rows, cols), so a box that
        runs past `rows` reads zeros instead of the next batch entry's rows."""
        fn = self.fn
        if not isinstance(tensor, Value) or not tensor.dtype.is_ptr() or \
                tensor not in fn.args:
            raise self.error(f"{what} needs a tensor argument of the kernel (TMA copies whole "
                             f"boxes of a 2-d or 3-d tensor), got {_describe(tensor)}")
        tma = fn.attrs.setdefault("tma", {})
        entry = tma.get(tensor.name)
        if entry is None:
            d = Value(TileType(tma_desc), f"{tensor.name}.desc")
            fn.body.args.append(d)
            d.owner = fn.body
            tma[tensor.name] = entry = {"box": list(box), "dtype": tensor.dtype.element_ty.name,
                                        "desc": d}
            if rank == 3:
                entry["rank"] = 3
            if l2 != 256:
                entry["l2"] = l2
        elif entry.get("l2", 256) != l2:
            raise self.error(f"{what}: '{tensor.name}' is copied with l2_promotion="
                             f"{entry.get('l2', 256)} elsewhere and {l2} here",
                             "the promotion belongs to the tensor's descriptor: give every "
                             "copy of it the same value")
        elif tuple(entry["box"]) != tuple(box):
            raise self.error(f"{what}: '{tensor.name}' is copied with boxes of "
                             f"{_shape(tuple(entry['box']))} elsewhere and {_shape(box)} here",
                             "use one box shape per tensor argument")
        elif entry.get("rank", 2) != rank:
            raise self.error(f"{what}: '{tensor.name}' is copied with {entry.get('rank', 2)} "
                             f"coordinates elsewhere and {rank} here",
                             "a tensor argument is either 2-d (row, col) or 3-d (batch, row, "
                             "col) in every TMA copy")
        return entry["desc"]

    def tma_coords(self, coords: Any, what: str) -> list[Value]:
        """(row, col) or (batch, row, col) as int32 scalars."""
        if not isinstance(coords, (tuple, list)) or len(coords) not in (2, 3):
            raise self.error(f"{what}: coords must be (row, col) of a 2-d tensor or (batch, "
                             "row, col) of a 3-d one")
        return [self.cast(c, int32) if isinstance(c, Value) else self.constant(c, int32)
                for c in coords]

    @typing_rule("tma_load")
    def tma_load(self, dst: Any, tensor: Any, coords: Any, bar: Any, sync: Any = True,
                 multicast: int | None = None, split: Any = False,
                 l2_promotion: Any = 256) -> None:
        """`multicast`: a mask of cluster CTA ranks; the box lands at the same place in each
        of their tiles and counts on each one's barrier (thread-block clusters). Each CTA of
        the mask is expected to issue its own such load (its slice) with the same mask, so
        the bytes a barrier expects are the box's times the CTAs in the mask. `split`: `dst`
        and `coords` are the whole tile, and each CTA copies only its part of it (see
        `_split_part`), multicast to all: together the parts fill the tile in every CTA."""
        if not isinstance(dst, Value) or not dst.type.is_shared or len(dst.shape) != 2 or \
                (isinstance(dst.owner, Op) and dst.owner.name == "smem_trans"):
            raise self.error(f"kit.tma_load: 'dst' must be a 2-d shared tile (a stage a[s]), "
                             f"got {_describe(dst)}")
        if isinstance(tensor, Value) and tensor.dtype.is_ptr() and \
                tensor.dtype.element_ty is not dst.dtype:
            raise self.error(f"kit.tma_load: the tensor holds {tensor.dtype.element_ty} but the "
                             f"shared tile holds {dst.dtype}")
        cs = self.tma_coords(coords, "kit.tma_load")
        if not isinstance(bar, Value) or bar.dtype is not mbarrier or bar.shape != ():
            raise self.error(f"kit.tma_load: 'barrier' must be one mbarrier (bars[s]), got "
                             f"{_describe(bar)}")
        if not isinstance(sync, bool):
            raise self.error(f"kit.tma_load: sync must be a constexpr True or False, got "
                             f"{_describe(sync)}")
        if dst.shape[0] > 256:
            raise self.error(f"kit.tma_load: a TMA box has at most 256 rows, and the shared "
                             f"tile has {dst.shape[0]}",
                             "load it as several tiles (stages), each of 256 rows or fewer")
        if isinstance(l2_promotion, bool) or l2_promotion not in (0, 64, 128, 256):
            raise self.error(f"kit.tma_load: l2_promotion must be a constexpr 0, 64, 128 or "
                             f"256 (bytes), got {_describe(l2_promotion)}")
        box = tuple(dst.shape)
        if not isinstance(split, bool):
            raise self.error(f"kit.tma_load: split must be a constexpr True or False, got "
                             f"{_describe(split)}")
        if split:
            box, split_dim = self._split_part(dst, multicast, len(cs))
        desc = self.tma_desc_arg(tensor, box, "kit.tma_load", len(cs), l2_promotion)
        attrs = {"bytes": box[0] * box[1] * dst.dtype.itemsize}
        if split:
            attrs["split"] = split_dim
        if len(cs) == 3:  # operands: dst, desc, batch, row, col, barrier
            attrs["batched"] = True
        if not sync:  # the caller knows no thread still reads dst (no barrier before it)
            attrs["nosync"] = True
        if multicast is not None:
            attrs["multicast"] = multicast
            attrs["recv"] = attrs["bytes"] * bin(multicast).count("1")
        self.emit("tma_load", [dst, desc, *cs, bar], [], attrs)

    def _split_part(self, dst: Value, multicast: int | None, rank: int) -> tuple:
        """(the part's box, the dim it splits) for `kit.tma_load(..., split=True)`: the
        tile cut into as many equal parts as the mask has CTAs, part i copied by the CTA at
        position i of the mask (rank order), each part contiguous in shared memory as the
        swizzled layout stores it: whole 128/64/32-byte column chunks (dim 1) when a row
        holds several, else rows in whole swizzle atoms of 8 (dim 0)."""
        from kitjit.ir.layouts import shared_layout

        if multicast is None:
            raise self.error("kit.tma_load: split=True cuts the tile among the CTAs of a "
                             "multicast mask, and this load has none",
                             "add multicast=mask (e.g. multicast=3 for a 2-CTA cluster)")
        if rank != 2:
            raise self.error("kit.tma_load: split=True takes (row, col) coordinates of a 2-d "
                             "tensor (not supported yet for 3-d ones)")
        n = bin(multicast).count("1")
        (R, C), e = dst.shape, dst.dtype.itemsize
        lay = shared_layout((R, C), dst.dtype)
        chunk = lay.chunk if lay is not None else C
        if C // chunk > 1 and (C // chunk) % n == 0:
            part, dim = (R, C // n), 1
        elif C == chunk and R % (8 * n) == 0:
            part, dim = (R // n, C), 0
        else:
            raise self.error(f"kit.tma_load: split=True cannot cut a {_shape((R, C))} tile "
                             f"({dst.dtype}) into {n} contiguous parts",
                             f"a row of {C * e} bytes holds {max(C // chunk, 1)} swizzle "
                             f"chunk(s) of {chunk * e} bytes: the chunks must divide by {n}, "
                             f"or, with one chunk per row, the rows by 8 x {n}")
        pl = shared_layout(part, dst.dtype)
        if pl is None or lay is None or (pl.swizzle, pl.chunk) != (lay.swizzle, lay.chunk):
            raise self.error(f"kit.tma_load: split=True: a {_shape(part)} part of the "
                             f"{_shape((R, C))} tile would be laid out differently")
        return part, dim

    @typing_rule("tma_desc_create")
    def tma_desc_create(self, base: Value, rows: Value, cols: Value, row_stride: Value,
                        block: tuple, swizzle: int, chunk: int) -> Value:
        """A CUtensorMap built by the kernel (`kit.make_tensor_descriptor` on sm_90a) in its
        program's slot of the global scratch (`set_allocator`): box `block[0]` rows by
        `chunk` columns, as the shared tile's layout wants. Sizes and the row stride are
        int64 elements; the map's fields are 32-bit sizes and a byte stride."""
        fn = self.fn
        scratch = fn.attrs.get("_scratch_arg")
        if scratch is None:
            from kitjit.ir.types import dtype_from_name

            scratch = Value(TileType(dtype_from_name("*u8")), "kit.global_scratch")
            fn.body.args.append(scratch)
            scratch.owner = fn.body
            fn.attrs["_scratch_arg"] = scratch
        slot = fn.attrs.get("_scratch_slots", 0)
        fn.attrs["_scratch_slots"] = slot + 1
        attrs = {"slot": slot, "box": [block[0], chunk], "swizzle": swizzle}
        return self.emit1("tma_desc_create", [scratch, base, rows, cols, row_stride],
                          TileType(tma_desc), attrs)

    @typing_rule("smem_trans")
    def smem_trans(self, x: Value) -> Value:
        if len(x.shape) != 2:
            raise self.error(f".T needs a 2-d shared tile (a stage a[s]), got shape "
                             f"{_shape(x.shape)}")
        return self.emit1("smem_trans", [x], TileType(x.dtype, x.shape[::-1], space="smem"))

    @typing_rule("smem_store")
    def smem_store(self, dst: Value, value: Any) -> None:
        """kit.store(a[s], x): register tile x into shared tile a[s] (or its .T view)."""
        if len(dst.shape) != 2:
            raise self.error(f"kit.store into shared memory needs a 2-d tile (a stage a[s]), "
                             f"got shape {_shape(dst.shape)}")
        self._pow2_smem(dst, "kit.store into")
        if not isinstance(value, Value):
            value = self.full(dst.shape, value, dst.dtype)
        if value.type.is_shared:
            raise self.error("kit.store into shared memory takes a register tile, got a shared "
                             "tile", "kit.load it first")
        if value.shape != dst.shape:
            value = self.broadcast_to(value, dst.shape) if value.type.is_scalar else value
        if value.shape != dst.shape:
            raise self.error(f"kit.store: a tile of shape {_shape(value.shape)} does not fit "
                             f"the shared tile of shape {_shape(dst.shape)}")
        if value.dtype is not dst.dtype:
            value = self.cast(value, dst.dtype)
        self.emit("smem_store", [dst, value], [])

    def _pow2_smem(self, t: Value, what: str) -> None:
        """Register tiles have power-of-two dims (their layouts are linear over the bits of
        the coordinates), so a shared tile of other dims moves by TMA and feeds kit.mma
        (as its K side) only."""
        if not all(is_pow2(s) for s in t.shape):
            raise self.error(f"{what} a shared tile of shape {_shape(t.shape)}: register "
                             f"tiles have power-of-two dims, so a shared tile of other dims "
                             f"is only copied by TMA and read by kit.mma",
                             "use power-of-two dims for a tile that kit.load / kit.store "
                             "move")

    @typing_rule("smem_load")
    def smem_load(self, src: Value) -> Value:
        """kit.load(a[s]): shared tile a[s] (or its .T view) into registers (also what a host
        descriptor's TMA load gives: frontend/semantic/tma_desc.py)."""
        if len(src.shape) != 2:
            raise self.error(f"kit.load from shared memory needs a 2-d tile (a stage a[s]), "
                             f"got shape {_shape(src.shape)}")
        self._pow2_smem(src, "kit.load from")
        return self.emit1("smem_load", [src], TileType(src.dtype, src.shape))

    @typing_rule("tma_store")
    def tma_store(self, tensor: Any, coords: Any, value: Any, reduce: Any = None) -> None:
        if not isinstance(value, Value) or value.type.is_shared or len(value.shape) != 2:
            raise self.error(f"kit.tma_store stores a 2-d register tile, got {_describe(value)}")
        if isinstance(tensor, Value) and tensor.dtype.is_ptr() and \
                tensor.dtype.element_ty is not value.dtype:
            raise self.error(f"kit.tma_store: the tensor holds {tensor.dtype.element_ty} but the "
                             f"tile is {value.dtype}", "convert it with .to(...)")
        for s in value.shape:
            if not is_pow2(s) or s > 256:
                raise self.error(f"kit.tma_store: tile dims must be powers of two up to 256, "
                                 f"got {_shape(value.shape)}")
        if reduce is not None and self.fn.attrs.get("target"):
            raise self.error(f"kit.tma_store(reduce=...) is not supported on "
                             f"{self.fn.attrs['target']} yet (Hopper's TMA reduce-add)",
                             "use kit.atomic_add with a tile of pointers")
        if reduce is not None and reduce != "add":
            raise self.error(f"kit.tma_store: reduce={reduce!r} is not supported yet (only "
                             "'add', the TMA's reduce-add)")
        if reduce == "add" and value.dtype.name not in ("fp32", "fp16", "bf16"):
            raise self.error(f"kit.tma_store(reduce='add') adds fp32, fp16 or bf16 tiles, got "
                             f"{value.dtype}")
        cs = self.tma_coords(coords, "kit.tma_store")
        desc = self.tma_desc_arg(tensor, value.shape, "kit.tma_store", len(cs))
        staging = self.emit1("smem_alloc", [], TileType(value.dtype, value.shape, space="smem"),
                             {"staging": True})
        attrs = {"reduce": reduce} if reduce else {}
        if len(cs) == 3:  # operands: desc, batch, row, col, value, staging
            attrs["batched"] = True
        self.emit("tma_store", [desc, *cs, value, staging], [], attrs or None)

    @typing_rule("mbar_wait")
    def mbarrier_wait(self, bar: Any, phase: Any) -> None:
        if not isinstance(bar, Value) or bar.dtype is not mbarrier or bar.shape != ():
            raise self.error(f"kit.mbarrier_wait needs one mbarrier (bars[s]), got "
                             f"{_describe(bar)}")
        ph = self.cast(phase, int32) if isinstance(phase, Value) else self.constant(phase, int32)
        self.emit("mbar_wait", [bar, ph], [])

    @typing_rule("warpgroup_id")
    def warpgroup_id(self) -> Value:
        return self.emit1("warpgroup_id", [], TileType(int32))

    @typing_rule("setmaxnreg")
    def setmaxnreg(self, count: int) -> None:
        self.emit("setmaxnreg", [], [], {"count": count})

    @typing_rule("barrier")
    def barrier(self) -> None:
        self.emit("barrier", [], [])

    @typing_rule("named_bar")
    def named_barrier(self, id: Any, threads: int, arrive: bool) -> None:
        what = f"kit.named_barrier_{'arrive' if arrive else 'wait'}"
        if isinstance(id, Value):
            if not id.type.is_scalar or not id.dtype.is_int():
                raise self.error(f"{what}: the id must be an integer scalar, got {_describe(id)}")
            bid = self.cast(id, int32)
        elif isinstance(id, int) and not isinstance(id, bool) and 0 <= id < 8:
            bid = self.constant(id, int32)
        else:
            raise self.error(f"{what}: the id must be 0-7 or an integer scalar, got {id!r}")
        if not isinstance(threads, int) or threads <= 0 or threads % 32 or threads > 1024:
            raise self.error(f"{what}: threads must be a constant multiple of 32 up to 1024 "
                             f"(whole warps), got {threads!r}")
        self.emit("named_bar", [bid], [], {"threads": threads, "arrive": arrive})


# -------------------------------------------------------------------- kit.<name> calls
@call_rule("shared", lambda shape, dtype: None)
def _shared(c: Call) -> Any:
    return c.b.shared(c.const("shape"), c.const("dtype"))


@call_rule("mbarriers", lambda count, arrivals=1: None)
def _mbarriers(c: Call) -> Any:
    return c.b.mbarriers(c.const("count"), c.const("arrivals"))


@call_rule("mbarrier_arrive", lambda barrier, cta=None: None)
def _mbarrier_arrive(c: Call) -> Any:
    if c["cta"] is not None:  # a peer CTA's barrier (thread-block clusters: cluster.py)
        return c.b.cluster_arrive(c["barrier"], c["cta"])
    return c.b.mbarrier_arrive(c["barrier"])


@call_rule("warpgroup_id", lambda: None)
def _warpgroup_id(c: Call) -> Any:
    return c.b.warpgroup_id()


@call_rule("setmaxnreg", lambda count: None)
def _setmaxnreg(c: Call) -> Any:
    n = c.const("count")
    if not isinstance(n, int) or not 24 <= n <= 256 or n % 8:
        raise c.err(f"kit.setmaxnreg takes a multiple of 8 in [24, 256], got {n!r}")
    c.b.setmaxnreg(n)
    return None


@call_rule("tma_load", lambda dst, tensor, coords, barrier, sync=True, multicast=None,
           split=False, l2_promotion=256: None)
def _tma_load(c: Call) -> Any:
    mask = c.const("multicast")
    if mask is not None and (not isinstance(mask, int) or isinstance(mask, bool) or
                             not 0 < mask < 1 << 16):
        raise c.err(f"kit.tma_load: multicast takes a constexpr mask of CTA ranks (bit r for "
                    f"rank r, 1 to 0xffff), got {mask!r}")
    return c.b.tma_load(c["dst"], c["tensor"], c["coords"], c["barrier"], c.const("sync"),
                        mask, c.const("split"), c.const("l2_promotion"))


@call_rule("mbarrier_wait", lambda barrier, phase: None)
def _mbarrier_wait(c: Call) -> Any:
    return c.b.mbarrier_wait(c["barrier"], c["phase"])


@call_rule("tma_store", lambda tensor, coords, value, reduce=None: None)
def _tma_store(c: Call) -> Any:
    return c.b.tma_store(c["tensor"], c["coords"], c["value"],
                         c.const("reduce", "a constant string"))


@call_rule("barrier", lambda: None)
def _barrier(c: Call) -> Any:
    c.b.barrier()
    return None


@call_rule("named_barrier_wait", lambda id, threads: None)
def _named_barrier_wait(c: Call) -> Any:
    c.b.named_barrier(c["id"], c.const("threads"), False)
    return None


@call_rule("named_barrier_arrive", lambda id, threads: None)
def _named_barrier_arrive(c: Call) -> Any:
    c.b.named_barrier(c["id"], c.const("threads"), True)
    return None

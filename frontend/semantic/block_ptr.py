"""Block pointers (`kit.make_block_ptr`, `kit.advance`) and tensor descriptors
(`kit.make_tensor_descriptor`, `desc.load`, `desc.store`): helpers of the memory family with
no op of their own.

A block pointer is a compile-time structure of run-time scalars (base, shape, strides,
offsets) plus its constexpr block shape and order. `kit.load`/`kit.store` on one expand into
the ordinary ops: a tile of pointers `base + sum_d (offsets[d] + arange(block[d])) *
strides[d]` (64-bit offsets), masked on the dims of `boundary_check`. So every layer (layouts,
lowering, the interpreter) already handles them, and a loop carries their scalars
(frontend/codegen/statements.py flattens any structure with `kit_flatten`).

Out-of-bounds elements on a dim not in `boundary_check` are undefined in Triton; in kitjit
the access is made unmasked (the interpreter raises OutOfBoundsError when it leaves every
tensor argument; the GPU reads or writes whatever memory is there). `padding_option`: "zero"
(and "", Triton's undefined default) reads 0, "nan" reads NaN (float tensors only).
"""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Value
from kitjit.ir.types import DType, int32, int64

from .base import describe, shape_str
from .call_rules import Call, call_rule


class BlockPointer:
    """`kit.make_block_ptr(...)`: a pointer to a block of a strided tensor."""

    kind = "block pointer"

    def __init__(self, base: Value, shape: list, strides: list, offsets: list,
                 block_shape: tuple, order: tuple):
        self.base, self.shape, self.strides, self.offsets = base, shape, strides, offsets
        self.block_shape, self.order = tuple(block_shape), tuple(order)

    @property
    def dtype(self) -> DType:
        return self.base.dtype

    # the loop-carry protocol (frontend/codegen/statements.py)
    def kit_flatten(self) -> list:
        return [self.base, *self.shape, *self.strides, *self.offsets]

    def kit_rebuild(self, leaves: list) -> BlockPointer:
        r = len(self.block_shape)
        return type(self)(leaves[0], leaves[1:1 + r], leaves[1 + r:1 + 2 * r],
                          leaves[1 + 2 * r:1 + 3 * r], self.block_shape, self.order)

    def kit_static(self) -> tuple:
        return (type(self), self.dtype, self.block_shape, self.order)

    def kit_describe(self) -> str:
        return f"a {self.kind} to {self.dtype.element_ty} blocks of {shape_str(self.block_shape)}"

    def __repr__(self) -> str:
        return self.kit_describe()


class TensorDescriptor(BlockPointer):
    """`kit.make_tensor_descriptor(...)`, or a host `TensorDescriptor` kernel argument: a
    row-major tensor whose blocks `desc.load(offsets)` reads and `desc.store(offsets, value)`
    writes, bounds-checked on every dim (out-of-bounds reads give 0, or NaN with padding
    "nan"; out-of-bounds writes are dropped). Lowered onto masked pointer loads and stores;
    a host descriptor's 2-d blocks go through TMA where the target has it (`tma_param`, the
    kernel parameter, set by build_kernel_ir when it compiles for sm_90a)."""

    kind = "tensor descriptor"

    def __init__(self, base: Value, shape: list, strides: list, offsets: list,
                 block_shape: tuple, order: tuple, padding: str = "zero",
                 tma_param: str | None = None, dev_map: Value | None = None):
        super().__init__(base, shape, strides, offsets, block_shape, order)
        self.padding, self.tma_param = padding, tma_param
        # `kit.make_tensor_descriptor` on sm_90a: the CUtensorMap the kernel built
        # (frontend/semantic/tma_desc.py); None on the masked path
        self.dev_map = dev_map

    def kit_rebuild(self, leaves: list) -> TensorDescriptor:
        # (a device map describes the fields it was built from: a descriptor merged at an
        # `if` or carried by a loop keeps the masked path)
        bp = super().kit_rebuild(leaves)
        return TensorDescriptor(bp.base, bp.shape, bp.strides, bp.offsets, self.block_shape,
                                self.order, self.padding, self.tma_param)

    def kit_static(self) -> tuple:
        return (*super().kit_static(), self.padding, self.tma_param)

    def kit_methods(self) -> dict:
        return {"load": self._load, "store": self._store}

    def kit_attrs(self) -> dict:
        """What a kernel reads of a descriptor, as Triton's tensor_descriptor: dtype is the
        element type."""
        return {"dtype": self.dtype.element_ty, "block_shape": list(self.block_shape),
                "shape": list(self.shape), "strides": list(self.strides)}

    def _at(self, cg, offsets, node) -> BlockPointer:
        offs = _ints(cg, offsets, len(self.block_shape), "offsets", node, int32)
        return BlockPointer(self.base, self.shape, self.strides, offs, self.block_shape,
                            self.order)

    def _load(self, cg, args, kwargs, node):
        offsets = _one_arg(cg, args, kwargs, "offsets", node, "desc.load(offsets)")
        bp = self._at(cg, offsets, node)
        if (self.tma_param is not None or self.dev_map is not None) and \
                self.padding == "zero":
            from .tma_desc import tma_desc_load

            v = tma_desc_load(cg.b, self, bp.offsets)
            if v is not None:
                return v
        return load_block(cg.b, bp, tuple(range(len(self.block_shape))), self.padding)

    def _store(self, cg, args, kwargs, node):
        if len(args) != 2 or kwargs:
            raise cg.err(node, "desc.store(offsets, value) takes two arguments")
        bp = self._at(cg, args[0], node)
        value = args[1]
        if self.tma_param is not None or self.dev_map is not None:
            from .tma_desc import tma_desc_store

            if tma_desc_store(cg.b, self, bp.offsets, value):
                return
        store_block(cg.b, bp, value, tuple(range(len(self.block_shape))))


def _one_arg(cg, args, kwargs, name, node, usage):
    if len(args) == 1 and not kwargs:
        return args[0]
    if not args and set(kwargs) == {name}:
        return kwargs[name]
    raise cg.err(node, f"{usage} takes one argument")


def _ints(cg_or_c, xs: Any, rank: int | None, what: str, node, dt: DType) -> list:
    """A tuple of ints or integer scalars as `dt` scalars."""
    b = cg_or_c.b
    err = cg_or_c.err if node is None else (lambda m, h=None: cg_or_c.err(node, m, h))
    if isinstance(xs, Value) or not isinstance(xs, (tuple, list)):
        raise err(f"'{what}' must be a tuple of integers, got {describe(xs)}")
    if rank is not None and len(xs) != rank:
        raise err(f"'{what}' has {len(xs)} entries, but the block has {rank} dims")
    out = []
    for x in xs:
        if isinstance(x, Value):
            if not x.type.is_scalar or not x.dtype.is_int():
                raise err(f"'{what}' must hold integer scalars, got {describe(x)}")
            out.append(b.cast(x, dt))
        elif isinstance(x, int) and not isinstance(x, bool):
            out.append(b.constant(x, dt))
        else:
            raise err(f"'{what}' must hold integers, got {describe(x)}")
    return out


def _block_tiles(b, bp: BlockPointer, boundary_check: tuple) -> tuple[Value, Value | None]:
    """The tile of pointers of the block and its bounds mask (None without checks)."""
    shape = bp.block_shape
    r = len(shape)
    ptr, mask = None, None
    for d in range(r):
        idx = b.binary("add", b.arange(0, shape[d]), bp.offsets[d])  # i32 [shape[d]]
        for k in range(r):  # put it on dim d
            if k != d:
                idx = b.expand_dims(idx, k)
        off = b.binary("mul", b.cast(idx, int64), bp.strides[d])
        ptr = off if ptr is None else b.binary("add", ptr, off)
        if d in boundary_check:
            ok = b.binary("and", b.compare("ge", idx, 0),
                          b.compare("lt", b.cast(idx, int64), bp.shape[d]))
            mask = ok if mask is None else b.binary("and", mask, ok)
    ptrs = b.pointer_arith("add", bp.base, b.broadcast_to(ptr, shape))
    if mask is not None:
        mask = b.broadcast_to(mask, shape)
    return ptrs, mask


def _check_boundary(b, bp: BlockPointer, boundary_check: Any) -> tuple:
    if boundary_check is None:
        return ()
    if isinstance(boundary_check, int) and not isinstance(boundary_check, bool):
        boundary_check = (boundary_check,)
    if not isinstance(boundary_check, (tuple, list)) or \
            not all(isinstance(d, int) and 0 <= d < len(bp.block_shape) for d in boundary_check):
        raise b.error(f"boundary_check must be a tuple of dims of the block (0 to "
                      f"{len(bp.block_shape) - 1}), got {describe(boundary_check)}")
    return tuple(sorted(set(boundary_check)))


def load_block(b, bp: BlockPointer, boundary_check: Any, padding_option: Any) -> Value:
    dims = _check_boundary(b, bp, boundary_check)
    if padding_option not in (None, "", "zero", "nan"):
        raise b.error(f"padding_option must be 'zero' or 'nan', got {describe(padding_option)}")
    elem = bp.dtype.element_ty
    if padding_option == "nan" and not elem.is_floating():
        raise b.error(f"padding_option='nan' needs a float tensor, this one holds {elem}")
    ptrs, mask = _block_tiles(b, bp, dims)
    other = float("nan") if padding_option == "nan" else None
    return b.load(ptrs, mask, other if mask is not None else None)


def store_block(b, bp: BlockPointer, value: Any, boundary_check: Any) -> None:
    dims = _check_boundary(b, bp, boundary_check)
    if isinstance(value, Value) and value.shape != bp.block_shape and value.shape != ():
        raise b.error(f"the value stored through {bp.kit_describe()} must have the block's "
                      f"shape, got {describe(value)}")
    ptrs, mask = _block_tiles(b, bp, dims)
    b.store(ptrs, value, mask)


def _check_base(c: Call, base: Any, what: str) -> Value:
    if not isinstance(base, Value) or not base.dtype.is_ptr() or not base.type.is_scalar:
        raise c.err(f"{what}: 'base' must be a pointer (a tensor argument), got "
                    f"{describe(base)}")
    return base


def _block_shape(c: Call, block_shape: Any, rank: int, what: str) -> tuple:
    if not isinstance(block_shape, (tuple, list)) or len(block_shape) != rank:
        raise c.err(f"{what}: block_shape must be a tuple of {rank} constexpr ints, got "
                    f"{describe(block_shape)}")
    return c.b.check_shape(tuple(block_shape), what)


# -------------------------------------------------------------------- kit.<name> calls
@call_rule("make_block_ptr", lambda base, shape, strides, offsets, block_shape, order: None)
def _make_block_ptr(c: Call) -> Any:
    base = _check_base(c, c["base"], "kit.make_block_ptr")
    shape = c["shape"]
    if not isinstance(shape, (tuple, list)):
        raise c.err(f"kit.make_block_ptr: shape must be a tuple, got {describe(shape)}")
    r = len(shape)
    shp = _ints(c, shape, r, "shape", None, int64)
    strides = _ints(c, c["strides"], r, "strides", None, int64)
    offsets = _ints(c, c["offsets"], r, "offsets", None, int32)
    block = _block_shape(c, c.const("block_shape"), r, "kit.make_block_ptr")
    order = c.const("order")
    if not isinstance(order, (tuple, list)) or sorted(order) != list(range(r)):
        raise c.err(f"kit.make_block_ptr: order must be a permutation of 0..{r - 1}, got "
                    f"{describe(order)}")
    return BlockPointer(base, shp, strides, offsets, block, tuple(order))


@call_rule("advance", lambda base, offsets: None)
def _advance(c: Call) -> Any:
    bp = c["base"]
    if not isinstance(bp, BlockPointer) or isinstance(bp, TensorDescriptor):
        raise c.err(f"kit.advance needs a block pointer (kit.make_block_ptr), got "
                    f"{describe(bp)}")
    delta = _ints(c, c["offsets"], len(bp.block_shape), "offsets", None, int32)
    offs = [c.b.binary("add", o, d) for o, d in zip(bp.offsets, delta)]
    return BlockPointer(bp.base, bp.shape, bp.strides, offs, bp.block_shape, bp.order)


@call_rule("make_tensor_descriptor", lambda base, shape, strides, block_shape,
           padding_option="zero": None)
def _make_tensor_descriptor(c: Call) -> Any:
    base = _check_base(c, c["base"], "kit.make_tensor_descriptor")
    shape = c["shape"]
    if not isinstance(shape, (tuple, list)) or not 1 <= len(shape) <= 5:
        raise c.err(f"kit.make_tensor_descriptor: shape must be a tuple of 1 to 5 sizes, got "
                    f"{describe(shape)}")
    r = len(shape)
    if c.const("padding_option", "'zero'") != "zero":
        raise c.err("kit.make_tensor_descriptor: only padding_option='zero' is supported yet")
    strides = c["strides"]
    if isinstance(strides, (tuple, list)) and len(strides) == r and \
            isinstance(strides[-1], int) and strides[-1] != 1:
        raise c.err("kit.make_tensor_descriptor: the last stride must be 1 (as TMA needs)")
    shp = _ints(c, shape, r, "shape", None, int64)
    st = _ints(c, strides, r, "strides", None, int64)
    block = _block_shape(c, c.const("block_shape"), r, "kit.make_tensor_descriptor")
    zeros = [c.b.constant(0, int32) for _ in range(r)]
    desc = TensorDescriptor(base, shp, st, zeros, block, tuple(range(r - 1, -1, -1)))
    if isinstance(strides[-1], int):
        from .tma_desc import device_map, tma_eligible

        if c.b.fn.attrs.get("_tma_target"):
            desc.dev_map = device_map(c.b, desc)
        elif c.b.fn.attrs.get("target") is None and tma_eligible(desc):
            _assert_tma_aligned(c.b, desc)
    return desc


def _assert_tma_aligned(b, desc) -> None:
    """In the interpreter, Triton's rule for a descriptor the GPU copies by TMA (sm_90a): base
    and row stride multiples of 16 bytes. The GPU traps on them (a dead CUDA context); the
    interpreter stops at the call with the rule instead of computing a result."""
    e = desc.dtype.element_ty.itemsize
    addr = b.cast(desc.base, int64)
    row = b.binary("mul", desc.strides[0], e)
    bad = b.binary("or", b.binary("and", addr, 15), b.binary("and", row, 15))
    b.device_assert(b.compare("eq", bad, 0),
                    "kit.make_tensor_descriptor: base and row stride must be multiples of 16 "
                    "bytes (Triton's rule; on sm_90a the GPU copies by TMA and traps otherwise)")


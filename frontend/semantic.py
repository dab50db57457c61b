"""Typing rules and op construction: what `a + b`, `kit.load(...)`, `kit.sum(...)` mean.

The `Builder` appends ops to the current block and checks every rule a user can break
(shapes that cannot broadcast, dtypes that cannot meet, axes out of range), raising
`CompileError` at the current source location. Type promotion follows Triton: floats win
over ints, the wider float wins, fp16 with bf16 meets at fp32; ints of one signedness take
the wider; Python literals are weak and take the tile's type.
"""

from __future__ import annotations

from typing import Any

from kitjit.ir import ops as O
from kitjit.ir.core import Block, Function, Loc, Op, Value
from kitjit.ir.types import (
    DType,
    PointerDType,
    TileType,
    bfloat16,
    float16,
    float32,
    float64,
    int1,
    int32,
    int64,
    mbarrier,
    tma_desc,
)

from .errors import CompileError

Number = (int, float, bool)
MAX_TILE_NUMEL = 1 << 20  # as Triton: every element is unrolled into registers


def is_pow2(n: int) -> bool:
    return isinstance(n, int) and n > 0 and n & (n - 1) == 0


class Builder:
    def __init__(self, fn: Function):
        self.fn = fn
        self.blocks: list[Block] = [fn.body]
        self.loc: Loc | None = None
        self.warps: int = fn.attrs["num_warps"]  # of the current role (`if` on warpgroup_id)
        self.role: tuple[int, int] = (0, max(1, self.warps // 4))  # (first warpgroup, count)

    # ---------------------------------------------------------------- plumbing
    @property
    def block(self) -> Block:
        return self.blocks[-1]

    def error(self, msg: str, hint: str | None = None) -> CompileError:
        return CompileError(msg, self.loc, hint)

    def emit(self, name: str, operands: list[Value], result_types: list[TileType],
             attrs: dict | None = None, regions: list[Block] | None = None) -> Op:
        results = [Value(t) for t in result_types]
        op = Op(name, list(operands), results, dict(attrs or {}), list(regions or []), self.loc)
        self.block.append(op)
        return op

    def emit1(self, name, operands, rtype, attrs=None) -> Value:
        return self.emit(name, operands, [rtype], attrs).result

    # ---------------------------------------------------------------- constants
    def constant(self, value: Any, dtype: DType | None = None) -> Value:
        if not isinstance(value, Number):
            raise self.error(f"expected a number here, got {_describe(value)}")
        if isinstance(value, int) and not -(2 ** 64) < value < 2 ** 64:
            raise self.error("an integer constant this large fits no kernel dtype")
        if dtype is None:
            dtype = literal_dtype(value)
            if dtype is None:
                raise self.error(f"cannot use {value!r} as a value in a kernel")
        if dtype.is_floating():
            value = float(value)
        elif dtype.is_bool():
            value = bool(value)
        else:
            value = int(value)
            lo, hi = int_range(dtype)
            if not lo <= value <= hi:
                raise self.error(f"the constant {value} does not fit in {dtype}")
        return self.emit1("constant", [], TileType(dtype), {"value": value})

    def to_value(self, x: Any, like: Value | None = None) -> Value:
        """A Python literal becomes a constant of `like`'s dtype where that fits (weak typing)."""
        if isinstance(x, Value):
            return x
        if not isinstance(x, Number):
            raise self.error(f"expected a tile or a number, got {_describe(x)}")
        return self.constant(x, weak_dtype(x, like.dtype if like is not None else None))

    # ---------------------------------------------------------------- shapes
    def broadcast_shapes(self, a: tuple, b: tuple) -> tuple:
        ra, rb = len(a), len(b)
        a = (1,) * (rb - ra) + a if rb > ra else a
        b = (1,) * (ra - rb) + b if ra > rb else b
        out = []
        for x, y in zip(a, b):
            if x != y and x != 1 and y != 1:
                raise self.error(f"shapes {_shape(a)} and {_shape(b)} cannot broadcast",
                                 "each dim must match or be 1; use x[:, None] / x[None, :] "
                                 "to add a dim")
            out.append(max(x, y))
        self.check_numel(tuple(out), "broadcasting")
        return tuple(out)

    def broadcast_to(self, v: Value, shape: tuple) -> Value:
        shape = tuple(shape)
        if v.shape == shape:
            return v
        if v.type.is_scalar:
            return self.emit1("splat", [v], TileType(v.dtype, shape))
        if len(v.shape) > len(shape):
            raise self.error(f"cannot broadcast shape {_shape(v.shape)} to {_shape(shape)}")
        while len(v.shape) < len(shape):
            v = self.expand_dims(v, 0)
        for x, y in zip(v.shape, shape):
            if x != y and x != 1:
                raise self.error(f"cannot broadcast shape {_shape(v.shape)} to {_shape(shape)}")
        if v.shape == shape:
            return v
        return self.emit1("broadcast", [v], TileType(v.dtype, shape))

    def expand_dims(self, v: Value, axis: int) -> Value:
        if v.type.is_scalar:
            return self.emit1("splat", [v], TileType(v.dtype, (1,)))
        rank = len(v.shape) + 1
        if not -rank <= axis < rank:
            raise self.error(f"axis {axis} is out of range for a new dim of a "
                             f"{len(v.shape)}-d tile")
        axis %= rank
        shape = v.shape[:axis] + (1,) + v.shape[axis:]
        return self.emit1("expand_dims", [v], TileType(v.dtype, shape), {"axis": axis})

    # ---------------------------------------------------------------- dtypes
    def cast(self, v: Value, dtype: DType) -> Value:
        if v.dtype is dtype:
            return v
        if v.dtype.is_ptr() or dtype.is_ptr():
            raise self.error(f"cannot convert {v.dtype} to {dtype}",
                             "pointers only change by adding integer offsets")
        return self.emit1("cast", [v], TileType(dtype, v.shape))

    def binary_operands(self, a: Any, b: Any, opname: str) -> tuple[Value, Value]:
        """Both operands as Values of one dtype and shape, ready for an elementwise op."""
        if not isinstance(a, Value) and not isinstance(b, Value):
            raise self.error(f"internal: '{opname}' on two constants")
        if not isinstance(a, Value):
            a = self.to_value(a, b)
        if not isinstance(b, Value):
            b = self.to_value(b, a)
        dt = promote(a.dtype, b.dtype)
        if dt is None:
            raise self.error(f"'{opname}' cannot combine {a.dtype} and {b.dtype}",
                             "convert one side with .to(kit.<dtype>)")
        shape = self.broadcast_shapes(a.shape, b.shape)
        return (self.broadcast_to(self.cast(a, dt), shape),
                self.broadcast_to(self.cast(b, dt), shape))

    # ---------------------------------------------------------------- arithmetic
    def binary(self, opname: str, a: Any, b: Any) -> Value:
        """Python operators: add sub mul div floordiv mod and or xor shl shr minimum maximum."""
        va = a.dtype if isinstance(a, Value) else None
        vb = b.dtype if isinstance(b, Value) else None
        if opname in ("add", "sub") and ((va and va.is_ptr()) or (vb and vb.is_ptr())):
            return self.pointer_arith(opname, a, b)
        if opname == "div":
            a, b = self._float_operands(a, b)
        a, b = self.binary_operands(a, b, opname)
        dt = a.dtype
        if opname in ("and", "or", "xor", "shl", "shr") and dt.is_floating():
            raise self.error(f"bitwise '{_SYMBOL[opname]}' needs integer or bool operands, "
                             f"got {dt}", "convert with .to(kit.int32) first")
        if opname in ("shl", "shr") and dt.is_bool():
            raise self.error("shifts need integer operands, got bool")
        if dt.is_bool() and opname in ("add", "sub", "mul", "floordiv", "mod", "div"):
            a, b = self.cast(a, int32), self.cast(b, int32)
        return self.emit1(opname, [a, b], a.type)

    def _float_operands(self, a, b):
        def f(x, other):
            if isinstance(x, Value) and not x.dtype.is_floating():
                return self.cast(x, float32)
            if isinstance(x, (int, bool)) and not isinstance(other, Value):
                return float(x)
            if isinstance(x, (int, bool)) and not other.dtype.is_floating():
                return float(x)
            return x
        return f(a, b), f(b, a)

    def pointer_arith(self, opname: str, a: Any, b: Any) -> Value:
        if isinstance(b, Value) and b.dtype.is_ptr():
            if opname == "sub" or (isinstance(a, Value) and a.dtype.is_ptr()):
                raise self.error("pointers can only be offset by integers (ptr + int)",
                                 _PTR_HINT)
            a, b = b, a
        if isinstance(b, Value):
            if not b.dtype.is_int():
                raise self.error(f"a pointer offset must be an integer tile, got {b.dtype}",
                                 _PTR_HINT)
        elif not isinstance(b, int) or isinstance(b, bool):
            raise self.error(f"a pointer offset must be an integer, got {b!r}", _PTR_HINT)
        if not isinstance(b, Value):
            b = self.constant(b, int32 if -(2 ** 31) <= b < 2 ** 31 else int64)
        if opname == "sub":
            b = self.emit1("neg", [b], b.type)
        shape = self.broadcast_shapes(a.shape, b.shape)
        a, b = self.broadcast_to(a, shape), self.broadcast_to(b, shape)
        return self.emit1("addptr", [a, b], a.type)

    def compare(self, pred: str, a: Any, b: Any) -> Value:
        if isinstance(a, Value) and a.dtype.is_ptr() or isinstance(b, Value) and b.dtype.is_ptr():
            raise self.error("pointers cannot be compared")
        a, b = self.binary_operands(a, b, _CMP_SYMBOL[pred])
        return self.emit1("cmp", [a, b], TileType(int1, a.shape), {"pred": pred})

    def unary(self, opname: str, x: Any, ftz: bool = False) -> Value:
        x = self.to_value(x)
        dt = x.dtype
        if dt.is_ptr():
            raise self.error(f"'{opname}' does not apply to pointers")
        if opname == "not":
            if not dt.is_bool():
                x = self.compare("ne", x, 0)
            return self.emit1("not", [x], x.type)
        if opname == "invert":
            if dt.is_floating():
                raise self.error("'~' needs an integer or bool operand")
            return self.emit1("not" if dt.is_bool() else "invert", [x], x.type)
        if opname in O.FLOAT_MATH:
            if not dt.is_floating():
                x = self.cast(x, float32)
            if x.dtype is float64 and opname not in ("sqrt", "floor", "ceil"):
                raise self.error(f"kit.{opname} on fp64 is not supported yet",
                                 "compute in fp32: x.to(kit.float32)")
            return self.emit1(opname, [x], x.type, {"ftz": True} if ftz else None)
        if opname == "neg" and dt.is_bool():
            x = self.cast(x, int32)
        if opname == "abs" and dt.is_int_unsigned() or opname == "abs" and dt.is_bool():
            return x
        return self.emit1(opname, [x], x.type)

    def where(self, cond: Any, x: Any, y: Any) -> Value:
        if not isinstance(cond, Value):
            raise self.error("kit.where needs a tile condition (use Python's `x if c else y` "
                             "for constants)")
        if not cond.dtype.is_bool():
            cond = self.compare("ne", cond, 0)
        if not isinstance(x, Value) and not isinstance(y, Value):
            x = self.to_value(x)
        x, y = self.binary_operands(x, y, "where")
        shape = self.broadcast_shapes(cond.shape, x.shape)
        cond, x, y = (self.broadcast_to(v, shape) for v in (cond, x, y))
        return self.emit1("select", [cond, x, y], x.type)

    # ---------------------------------------------------------------- creation
    def check_numel(self, shape: tuple, what: str) -> None:
        n = 1
        for s in shape:
            n *= s
        if n > MAX_TILE_NUMEL:
            raise self.error(f"{what}: a tile of {n} elements is over kitjit's limit of "
                             f"{MAX_TILE_NUMEL}", "split the work over more programs")

    def check_shape(self, shape: Any, what: str) -> tuple[int, ...]:
        if isinstance(shape, int):
            shape = (shape,)
        if not isinstance(shape, (tuple, list)) or not all(isinstance(s, int) for s in shape):
            raise self.error(f"{what} needs a shape of constexpr ints, got {_describe(shape)}",
                             "shapes must be known at compile time: pass sizes as "
                             "kit.constexpr parameters")
        for s in shape:
            if not is_pow2(s):
                raise self.error(f"{what}: every dim of a tile must be a power of two, "
                                 f"got shape {_shape(tuple(shape))}",
                                 "round the block size up to a power of two and mask the tail")
        self.check_numel(tuple(shape), what)
        return tuple(shape)

    def full(self, shape: Any, value: Any, dtype: Any) -> Value:
        shape = self.check_shape(shape, "kit.full")
        if not isinstance(dtype, DType):
            raise self.error(f"expected a dtype such as kit.float32, got {_describe(dtype)}")
        v = self.cast(value, dtype) if isinstance(value, Value) else self.constant(value, dtype)
        if not v.type.is_scalar:
            raise self.error("kit.full needs a scalar fill value")
        return self.broadcast_to(v, shape)

    def arange(self, start: Any, end: Any) -> Value:
        if not isinstance(start, int) or not isinstance(end, int):
            raise self.error("kit.arange needs constexpr bounds",
                             "pass the block size as a kit.constexpr parameter")
        n = end - start
        if not is_pow2(n):
            raise self.error(f"kit.arange({start}, {end}) has {n} elements; tiles need a power "
                             "of two", "round the block up and mask the tail: "
                             "offs < n")
        self.check_numel((n,), f"kit.arange({start}, {end})")
        return self.emit1("arange", [], TileType(int32, (n,)), {"start": start, "end": end})

    # ---------------------------------------------------------------- memory
    def load(self, ptr: Any, mask: Any = None, other: Any = None) -> Value:
        if not isinstance(ptr, Value) or not ptr.dtype.is_ptr():
            raise self.error(f"kit.load needs a pointer or a tile of pointers, got "
                             f"{_describe(ptr)}", "pass a tensor argument plus offsets")
        elem = ptr.dtype.element_ty
        operands = [ptr]
        shape = ptr.shape
        if mask is not None:
            mask = self._mask(mask)
            shape = self.broadcast_shapes(shape, mask.shape)
        ptr = self.broadcast_to(ptr, shape)
        operands = [ptr]
        if mask is not None:
            operands.append(self.broadcast_to(mask, shape))
            if other is not None:
                o = self.cast(other, elem) if isinstance(other, Value) else \
                    self.constant(other, elem)
                operands.append(self.broadcast_to(o, shape))
        return self.emit1("load", operands, TileType(elem, shape),
                          {"has_mask": mask is not None,
                           "has_other": mask is not None and other is not None})

    def store(self, ptr: Any, value: Any, mask: Any = None) -> None:
        if not isinstance(ptr, Value) or not ptr.dtype.is_ptr():
            raise self.error(f"kit.store needs a pointer or a tile of pointers, got "
                             f"{_describe(ptr)}")
        elem = ptr.dtype.element_ty
        value = self.cast(value, elem) if isinstance(value, Value) else self.constant(value, elem)
        shape = self.broadcast_shapes(ptr.shape, value.shape)
        if mask is not None:
            mask = self._mask(mask)
            shape = self.broadcast_shapes(shape, mask.shape)
        operands = [self.broadcast_to(ptr, shape), self.broadcast_to(value, shape)]
        if mask is not None:
            operands.append(self.broadcast_to(mask, shape))
        self.emit("store", operands, [], {"has_mask": mask is not None})

    def _mask(self, mask: Any) -> Value:
        if isinstance(mask, bool):
            mask = self.constant(mask, int1)
        if not isinstance(mask, Value):
            raise self.error(f"a mask must be a bool tile, got {_describe(mask)}")
        if not mask.dtype.is_bool():
            mask = self.compare("ne", mask, 0)
        return mask

    # ---------------------------------------------------------------- reductions
    def reduce(self, kind: str, x: Any, axis: Any, keep_dims: bool = False) -> Value:
        if not isinstance(x, Value) or x.type.is_scalar:
            raise self.error(f"kit.{kind} needs a tile, got {_describe(x)}")
        if x.dtype.is_ptr():
            raise self.error(f"kit.{kind} does not apply to pointers")
        if axis is None:
            if kind in ("argmax", "argmin"):
                raise self.error(f"kit.{kind} needs an axis")
            v = x
            while not v.type.is_scalar:
                v = self.reduce(kind, v, len(v.shape) - 1)
            return v
        if not isinstance(axis, int):
            raise self.error("a reduction axis must be a constexpr int")
        rank = len(x.shape)
        if not -rank <= axis < rank:
            raise self.error(f"axis {axis} is out of range for a {rank}-d tile of shape "
                             f"{_shape(x.shape)}", f"use an axis in [{-rank}, {rank - 1}]")
        axis %= rank
        if kind == "sum":
            dt = x.dtype
            if dt.is_bool() or dt.is_int() and dt.bits < 32:
                x = self.cast(x, int32)
            elif dt in (float16, bfloat16):
                x = self.cast(x, float32)
        out_dt = int32 if kind in ("argmax", "argmin") else x.dtype
        shape = x.shape[:axis] + x.shape[axis + 1:]
        r = self.emit1("reduce", [x], TileType(out_dt, shape), {"kind": kind, "axis": axis})
        if keep_dims:
            r = self.expand_dims(r, axis)
        return r

    def dot(self, a: Any, b: Any, acc: Any = None) -> Value:
        for name, v in (("a", a), ("b", b)):
            if not isinstance(v, Value) or len(v.shape) != 2:
                raise self.error(f"kit.dot: '{name}' must be a 2-d tile, got {_describe(v)}")
        (M, K), (K2, N) = a.shape, b.shape
        if K != K2:
            raise self.error(f"kit.dot: inner dims differ: a is {_shape(a.shape)}, "
                             f"b is {_shape(b.shape)}",
                             "a is [M, K] and b is [K, N]: load b with the K offsets on its "
                             "rows")
        if a.dtype not in (float16, bfloat16) or b.dtype not in (float16, bfloat16):
            raise self.error(f"kit.dot takes fp16 or bf16 inputs for now, got {a.dtype} and "
                             f"{b.dtype}", "convert the inputs with .to(kit.bfloat16)")
        if a.dtype is not b.dtype:
            raise self.error(f"kit.dot: a is {a.dtype} but b is {b.dtype}",
                             "convert one side so both match")
        if M < 16 or K < 16 or N < 8:
            raise self.error(f"kit.dot needs M >= 16, K >= 16 and N >= 8 (tensor-core tile "
                             f"16x8x16), got M={M}, N={N}, K={K}",
                             "pad the block sizes up and mask the edges")
        if acc is None:
            acc = self.full((M, N), 0.0, float32)
        elif not isinstance(acc, Value) or acc.shape != (M, N) or acc.dtype is not float32:
            raise self.error(f"kit.dot: acc must be an fp32 tile of shape [{M}, {N}], got "
                             f"{_describe(acc)}",
                             f"start it as kit.zeros(({M}, {N}), kit.float32)")
        return self.emit1("dot", [a, b, acc], acc.type)


    # ---------------------------------------------------------------- level 2: Hopper
    def shared(self, shape: Any, dtype: Any) -> Value:
        if isinstance(shape, int):
            shape = (shape,)
        if not isinstance(shape, (tuple, list)) or not all(isinstance(s, int) for s in shape):
            raise self.error(f"kit.shared needs a shape of constexpr ints, got {_describe(shape)}")
        shape = tuple(shape)
        tile = shape[1:] if len(shape) == 3 else shape
        if len(tile) != 2 or not all(is_pow2(s) for s in tile) or (len(shape) == 3 and
                                                                  shape[0] < 1):
            raise self.error(f"kit.shared takes (rows, cols) or (stages, rows, cols) with "
                             f"power-of-two rows and cols, got {_shape(shape)}")
        if not isinstance(dtype, DType) or dtype.is_ptr():
            raise self.error(f"kit.shared needs an element dtype, got {_describe(dtype)}")
        return self.emit1("smem_alloc", [], TileType(dtype, shape, space="smem"))

    def mbarriers(self, count: Any, arrivals: Any = 1) -> Value:
        if not isinstance(count, int) or count < 1:
            raise self.error(f"kit.mbarriers needs a positive constexpr count, got {count!r}")
        if not isinstance(arrivals, int) or arrivals < 1:
            raise self.error(f"kit.mbarriers: arrivals must be a positive constexpr, got "
                             f"{arrivals!r}")
        return self.emit1("smem_alloc", [], TileType(mbarrier, (count,), space="smem"),
                          {"init": arrivals})

    def mbarrier_arrive(self, bar: Any) -> None:
        if not isinstance(bar, Value) or bar.dtype is not mbarrier or bar.shape != ():
            raise self.error(f"kit.mbarrier_arrive needs one mbarrier (bars[s]), got "
                             f"{_describe(bar)}")
        self.emit("mbar_arrive", [bar], [])

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

    def tma_desc_arg(self, tensor: Value, box: tuple, what: str) -> Value:
        """The TMA descriptor kernel parameter of tensor argument `tensor` (added on first
        use; the runtime builds it from the torch tensor and the box)."""
        fn = self.fn
        if not isinstance(tensor, Value) or not tensor.dtype.is_ptr() or \
                tensor not in fn.args:
            raise self.error(f"{what} needs a tensor argument of the kernel (TMA copies whole "
                             f"boxes of a 2-d tensor), got {_describe(tensor)}")
        tma = fn.attrs.setdefault("tma", {})
        entry = tma.get(tensor.name)
        if entry is None:
            d = Value(TileType(tma_desc), f"{tensor.name}.desc")
            fn.body.args.append(d)
            d.owner = fn.body
            tma[tensor.name] = entry = {"box": list(box), "dtype": tensor.dtype.element_ty.name,
                                        "desc": d}
        elif tuple(entry["box"]) != tuple(box):
            raise self.error(f"{what}: '{tensor.name}' is copied with boxes of "
                             f"{_shape(tuple(entry['box']))} elsewhere and {_shape(box)} here",
                             "use one box shape per tensor argument")
        return entry["desc"]

    def tma_load(self, dst: Any, tensor: Any, coords: Any, bar: Any) -> None:
        if not isinstance(dst, Value) or not dst.type.is_shared or len(dst.shape) != 2 or \
                (isinstance(dst.owner, Op) and dst.owner.name == "smem_trans"):
            raise self.error(f"kit.tma_load: 'dst' must be a 2-d shared tile (a stage a[s]), "
                             f"got {_describe(dst)}")
        if isinstance(tensor, Value) and tensor.dtype.is_ptr() and \
                tensor.dtype.element_ty is not dst.dtype:
            raise self.error(f"kit.tma_load: the tensor holds {tensor.dtype.element_ty} but the "
                             f"shared tile holds {dst.dtype}")
        if not isinstance(coords, (tuple, list)) or len(coords) != 2:
            raise self.error("kit.tma_load: coords must be (row, col)")
        cs = [self.cast(c, int32) if isinstance(c, Value) else self.constant(c, int32)
              for c in coords]
        if not isinstance(bar, Value) or bar.dtype is not mbarrier or bar.shape != ():
            raise self.error(f"kit.tma_load: 'barrier' must be one mbarrier (bars[s]), got "
                             f"{_describe(bar)}")
        desc = self.tma_desc_arg(tensor, dst.shape, "kit.tma_load")
        self.emit("tma_load", [dst, desc, *cs, bar], [],
                  {"bytes": dst.type.numel * dst.dtype.itemsize})

    def smem_trans(self, x: Value) -> Value:
        if len(x.shape) != 2:
            raise self.error(f".T needs a 2-d shared tile (a stage a[s]), got shape "
                             f"{_shape(x.shape)}")
        return self.emit1("smem_trans", [x], TileType(x.dtype, x.shape[::-1], space="smem"))

    def tma_store(self, tensor: Any, coords: Any, value: Any) -> None:
        if not isinstance(value, Value) or value.type.is_shared or len(value.shape) != 2:
            raise self.error(f"kit.tma_store stores a 2-d register tile, got {_describe(value)}")
        if isinstance(tensor, Value) and tensor.dtype.is_ptr() and \
                tensor.dtype.element_ty is not value.dtype:
            raise self.error(f"kit.tma_store: the tensor holds {tensor.dtype.element_ty} but the "
                             f"tile is {value.dtype}", "convert it with .to(...)")
        if not isinstance(coords, (tuple, list)) or len(coords) != 2:
            raise self.error("kit.tma_store: coords must be (row, col)")
        for s in value.shape:
            if not is_pow2(s) or s > 256:
                raise self.error(f"kit.tma_store: tile dims must be powers of two up to 256, "
                                 f"got {_shape(value.shape)}")
        cs = [self.cast(c, int32) if isinstance(c, Value) else self.constant(c, int32)
              for c in coords]
        desc = self.tma_desc_arg(tensor, value.shape, "kit.tma_store")
        staging = self.emit1("smem_alloc", [], TileType(value.dtype, value.shape, space="smem"))
        self.emit("tma_store", [desc, *cs, value, staging], [])

    def mbarrier_wait(self, bar: Any, phase: Any) -> None:
        if not isinstance(bar, Value) or bar.dtype is not mbarrier or bar.shape != ():
            raise self.error(f"kit.mbarrier_wait needs one mbarrier (bars[s]), got "
                             f"{_describe(bar)}")
        ph = self.cast(phase, int32) if isinstance(phase, Value) else self.constant(phase, int32)
        self.emit("mbar_wait", [bar, ph], [])

    def wgmma(self, a: Any, b: Any, acc: Any, pending: Any) -> Value:
        if not isinstance(a, Value) or len(a.shape) != 2:
            raise self.error(f"kit.mma: 'a' must be a 2-d tile (shared, or registers), got "
                             f"{_describe(a)}")
        if not isinstance(b, Value) or not b.type.is_shared or len(b.shape) != 2:
            raise self.error(f"kit.mma: 'b' must be a 2-d shared tile, got {_describe(b)}",
                             "load it with kit.tma_load into kit.shared(...)")
        (M, K), (K2, N) = a.shape, b.shape
        nw = self.warps
        if a.dtype not in (float16, bfloat16) or a.dtype is not b.dtype:
            raise self.error(f"kit.mma takes fp16 or bf16 tiles of one dtype, got {a.dtype} "
                             f"and {b.dtype}")
        if K != K2:
            raise self.error(f"kit.mma: inner dims differ: a is {_shape(a.shape)}, b is "
                             f"{_shape(b.shape)}")
        if nw % 4 or M % (16 * nw) or K % 16 or N % 8 or N > 256:
            raise self.error(f"kit.mma needs num_warps a multiple of 4 (warpgroups), M a "
                             f"multiple of 16*num_warps (64 rows per warpgroup), K a multiple "
                             f"of 16 and N a multiple of 8 up to 256; got M={M}, N={N}, K={K}, "
                             f"num_warps={nw}")
        if not isinstance(acc, Value) or acc.shape != (M, N) or acc.dtype is not float32:
            raise self.error(f"kit.mma: acc must be an fp32 register tile of shape [{M}, {N}], "
                             f"got {_describe(acc)}",
                             f"start it as kit.zeros(({M}, {N}), kit.float32)")
        if not isinstance(pending, int) or pending < 0:
            raise self.error("kit.mma: pending must be a constexpr int >= 0")
        return self.emit1("wgmma", [a, b, acc], acc.type, {"pending": pending})


# -------------------------------------------------------------------- type rules
def literal_dtype(x: Any) -> DType | None:
    if isinstance(x, bool):
        return int1
    if isinstance(x, int):
        return int32 if -(2 ** 31) <= x < 2 ** 31 else int64
    if isinstance(x, float):
        return float32
    return None


def weak_dtype(x: Any, other: DType | None) -> DType:
    """The dtype a Python literal takes next to a tile of dtype `other`."""
    if other is None or other.is_ptr():
        return literal_dtype(x)
    if isinstance(x, bool):
        return other if not other.is_floating() else other
    if isinstance(x, int):
        if other.is_bool():
            return literal_dtype(x)
        if other.is_int():
            lo, hi = int_range(other)
            return other if lo <= x <= hi else literal_dtype(x)
        return other
    if isinstance(x, float):
        return other if other.is_floating() else float32
    return literal_dtype(x)


def int_range(dt: DType) -> tuple[int, int]:
    if dt.is_bool():
        return 0, 1
    if dt.is_int_unsigned():
        return 0, 2 ** dt.bits - 1
    return -(2 ** (dt.bits - 1)), 2 ** (dt.bits - 1) - 1


def promote(a: DType, b: DType) -> DType | None:
    if a is b:
        return a
    if a.is_ptr() or b.is_ptr():
        return None
    if a.is_floating() or b.is_floating():
        if a.is_floating() and b.is_floating():
            if float64 in (a, b):
                return float64
            if float32 in (a, b):
                return float32
            return float32  # fp16 with bf16
        return a if a.is_floating() else b
    if a.is_bool():
        return b
    if b.is_bool():
        return a
    if a.kind == b.kind:
        return a if a.bits >= b.bits else b
    u, s = (a, b) if a.is_int_unsigned() else (b, a)
    return u if u.bits >= s.bits else s


_PTR_HINT = ("a pointer moves by a whole number of elements: add an integer tile such as "
             "kit.arange(0, BLOCK) (convert floats with .to(kit.int32))")
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%",
           "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}
_CMP_SYMBOL = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def _shape(s: tuple) -> str:
    return "[" + ", ".join(str(x) for x in s) + "]"


def _describe(x: Any) -> str:
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) > 10 ** 30:
        return "a very large integer"
    if isinstance(x, Value):
        art = "an" if x.dtype.name[0] in "aeiou" else "a"
        if x.type.is_scalar:
            return f"{art} {x.dtype} scalar"
        if x.type.is_shared:
            return f"{art} {x.dtype} shared tile of shape {_shape(x.shape)}"
        return f"{art} {x.dtype} tile of shape {_shape(x.shape)}"
    if isinstance(x, PointerDType):
        return f"the pointer type {x}"
    if isinstance(x, (tuple, list)) and any(isinstance(e, Value) for e in x):
        inner = ", ".join(_describe(e) if isinstance(e, Value) else repr(e) for e in x)
        return f"{type(x).__name__} ({inner})"
    return f"{type(x).__name__} {x!r}"


describe = _describe
shape_str = _shape

"""Global memory: the interpreter's copies of the tensor arguments (`_Memory`, which maps
byte addresses to them and names the nearest argument when an access misses), the tensors
behind TMA descriptors (`_TmaTensor`), and the semantics of the memory family (load, store,
atomics).

Atomics are plain read-modify-writes (programs run one at a time). The lanes of one atomic
apply in row-major lane order, so lanes that hit one address all contribute and each gets
the value the lanes before it left. An atomic that changes nothing, run again by the same
program with nothing written in between, is a spin: after `SPIN_LIMIT` of them in a row it
raises DeadlockError (a lock that only another program could release: that program runs
after this one here, so the kernel would hang)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from kitjit.ir.core import Function, Op
from kitjit.ir.registry import semantics
from kitjit.ir.types import DType, bfloat16, from_torch, tma_desc

from .errors import DeadlockError, OutOfBoundsError, _lane, _where
from .numeric import _bf16_bits, _mem_np, _np, _scalar_arg, from_bits, round_bf16, to_bits

if TYPE_CHECKING:
    from .compiler import Env, Handler, _Compiler
    from .sync import _Ctx


class _Buffer:
    """The whole storage of one or more tensor arguments, as a uint8 numpy array."""

    def __init__(self, u8: np.ndarray, writeback: Callable[[], None] | None = None):
        self.u8 = u8
        self.base = int(u8.ctypes.data) if u8.size else 0
        self.end = self.base + u8.size
        self.writeback = writeback
        self.written = False
        self._views: dict[Any, np.ndarray] = {}
        # the byte ranges of the arguments that live here (merged, sorted), or None when
        # they cover the whole storage: an access outside them is out of bounds even when
        # it lands in the storage (a view of a larger tensor)
        self.allowed: tuple[np.ndarray, np.ndarray] | None = None

    def restrict(self, spans: list[tuple[int, int]]) -> None:
        merged: list[list[int]] = []
        for lo, hi in sorted(spans):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        if merged and merged[0][0] <= self.base and merged[0][1] >= self.end:
            self.allowed = None
        else:
            self.allowed = (np.array([m[0] for m in merged], np.int64),
                            np.array([m[1] for m in merged], np.int64))

    def outside(self, addrs: np.ndarray, size: int) -> np.ndarray | None:
        """A mask of the accesses of `size` bytes at `addrs` that leave every argument's
        range in this storage, or None when all stay inside."""
        if self.allowed is None:
            return None
        starts, ends = self.allowed
        k = np.searchsorted(starts, addrs, side="right") - 1
        bad = (k < 0) | (addrs + size > ends[np.maximum(k, 0)])
        return bad if bad.any() else None

    def view(self, mdt: Any) -> np.ndarray:
        v = self._views.get(mdt)
        if v is None:
            n = self.u8.size - self.u8.size % mdt.itemsize
            v = self._views[mdt] = self.u8[:n].view(mdt)
        return v


class _ArgInfo:
    def __init__(self, name: str, start: int, numel: int, itemsize: int, dtype: str,
                 span: int | None = None):
        self.name, self.start, self.numel = name, start, numel
        self.itemsize, self.dtype = itemsize, dtype
        # bytes from the first element to the end of the last (strides included)
        self.end = start + (numel * itemsize if span is None else span)


class _TmaTensor:
    """What a TMA descriptor argument is in the interpreter: the 2-d tensor behind it, as a
    strided view of the buffer that holds its storage (bf16 as uint16 bits)."""

    def __init__(self, name: str, dt: DType, view: np.ndarray, buf: _Buffer | None):
        self.name, self.dt, self.view, self.buf = name, dt, view, buf

    def batch(self, b: int | None) -> _TmaTensor | None:
        """The 2-d tensor that (batch, row, col) coordinates address in a 3-d descriptor
        (each batch entry its own rows, as TMA's per-dimension bounds keep them): entry
        `b`, or None past either end (a box there reads zeros, a store drops it). b None:
        this 2-d tensor itself."""
        if b is None:
            return self
        if self.view.ndim != 3:
            raise TypeError(f"'{self.name}' is a 2-d TMA tensor, copied here with (batch, "
                            "row, col) coordinates")
        if not 0 <= b < self.view.shape[0]:
            return None
        return _TmaTensor(self.name, self.dt, self.view[b], self.buf)

    def _clip(self, r0: int, c0: int, rows: int, cols: int) -> tuple[int, int, int, int]:
        h, w = self.view.shape
        return max(r0, 0), min(r0 + rows, h), max(c0, 0), min(c0 + cols, w)

    def copy_box(self, dst: np.ndarray, r0: int, c0: int) -> None:
        """dst[:] = the box of dst's shape at (r0, c0); zero outside the tensor."""
        rows, cols = dst.shape
        rs, re, cs, ce = self._clip(r0, c0, rows, cols)
        if (rs, re, cs, ce) != (r0, r0 + rows, c0, c0 + cols):
            dst[...] = 0
        if rs < re and cs < ce:
            # bits in memory -> values (bf16 and fp8 are held as float32 here)
            dst[rs - r0:re - r0, cs - c0:ce - c0] = from_bits(self.view[rs:re, cs:ce],
                                                              self.dt)

    def store_box(self, src: np.ndarray, r0: int, c0: int, reduce: str | None = None) -> None:
        """The box of src's shape at (r0, c0) = src (reduce="add": += src, rounded to the
        tensor's dtype); what falls outside the tensor is dropped."""
        rows, cols = src.shape
        rs, re, cs, ce = self._clip(r0, c0, rows, cols)
        if rs >= re or cs >= ce:
            return
        v = src[rs - r0:re - r0, cs - c0:ce - c0]
        if reduce == "add":   # values of the dtype (bf16 and fp8 held as float32), rounded back
            v = from_bits(self.view[rs:re, cs:ce], self.dt).astype(np.float32) + v
        self.view[rs:re, cs:ce] = to_bits(v, self.dt)
        if self.buf is not None:
            self.buf.written = True


class _Memory:
    """Maps byte addresses to argument buffers; owns the CPU copies of device tensors."""

    def __init__(self, fn: Function, args: list):
        import torch

        self.bufs: list[_Buffer] = []
        self.args: list[_ArgInfo] = []
        self.values: list[Any] = []
        self._by_storage: dict[tuple, tuple[_Buffer, int]] = {}
        tma = {e["desc"].id: e for e in fn.attrs.get("tma", {}).values()
               if hasattr(e.get("desc"), "id")}
        spans: dict[int, tuple[_Buffer, list[tuple[int, int]]]] = {}
        for v, a in zip(fn.args, args):
            dt = v.dtype
            if dt is tma_desc:
                self.values.append(self._tma_tensor(v, a, tma.get(v.id)))
                continue
            if not dt.is_ptr():
                if isinstance(a, torch.Tensor) or hasattr(a, "data_ptr"):
                    raise TypeError(f"argument '{v.name}' is a {dt} scalar but got a tensor")
                self.values.append(_scalar_arg(dt, a))
                continue
            if not isinstance(a, torch.Tensor):
                raise TypeError(f"argument '{v.name}' is a pointer ({dt}) and needs a torch "
                                f"tensor, got {type(a).__name__}")
            buf, off = self._locate_tensor(a)
            ptr = buf.base + off
            self.values.append(np.int64(ptr))
            span = 0 if a.numel() == 0 else (
                sum((n - 1) * st for n, st in zip(a.shape, a.stride())) + 1) * a.element_size()
            self.args.append(_ArgInfo(v.name or f"arg{len(self.values) - 1}", ptr, a.numel(),
                                      a.element_size(), str(a.dtype).replace("torch.", ""),
                                      span))
            spans.setdefault(id(buf), (buf, []))[1].append((ptr, ptr + span))
        for buf, sp in spans.values():
            buf.restrict(sp)
        self.bufs.sort(key=lambda b: b.base)
        self.version = 0  # bumped by every write: a spin sees whether anything moved
        self.spins: dict[int, tuple[int, tuple, int]] = {}
        self.bases = np.array([b.base for b in self.bufs], dtype=np.int64)

    def add_tensors(self, tensors: list) -> None:
        """Map tensors that are no argument but that pointers may reach (the peers' buffers
        of a simulated world), without `_adopt`'s search."""
        for t in tensors:
            self._locate_tensor(t)
        self.bufs.sort(key=lambda b: b.base)
        self.bases = np.array([b.base for b in self.bufs], dtype=np.int64)

    def _locate_tensor(self, a: Any) -> tuple[_Buffer, int]:
        """The buffer holding tensor `a`'s storage (one per storage) and `a`'s byte offset."""
        st = a.untyped_storage()
        key = (str(a.device), st.data_ptr(), st.nbytes())
        if key not in self._by_storage:
            self._by_storage[key] = (self._buffer(a, st), st.data_ptr())
        buf, dev_base = self._by_storage[key]
        return buf, a.data_ptr() - dev_base

    def _tma_tensor(self, v: Any, a: Any, entry: dict | None) -> _TmaTensor:
        """A TMA descriptor argument: the tensor behind it, checked as the GPU launcher
        checks it, as a strided view of the interpreter's copy of its storage."""
        import torch

        name = v.name.removesuffix(".desc") if v.name else "?"
        if not isinstance(a, torch.Tensor):
            raise TypeError(f"argument '{v.name}' is a TMA descriptor and needs the torch "
                            f"tensor behind it, got {type(a).__name__}")
        dt = from_torch(a.dtype)
        if dt is None:
            raise TypeError(f"argument '{name}': TMA copies of {a.dtype} are not supported")
        if entry is not None and entry.get("dtype") not in (None, dt.name):
            raise TypeError(f"argument '{name}' holds {dt} but the kernel was built for "
                            f"{entry['dtype']}")
        # the launcher's checks (kitjit.runtime.driver.tensor_map), so that a kernel that
        # runs here also launches on the GPU
        e = a.element_size()
        rank = entry.get("rank", 2) if entry is not None else 2
        if a.dim() != rank or a.stride(-1) != 1 or a.data_ptr() % 16 or \
                any(st * e % 16 for st in a.stride()[:-1]):
            what = "2-d" if rank == 2 else "3-d (copied with (batch, row, col) coordinates)"
            raise ValueError(f"a tensor copied by TMA must be {what}, contiguous in its last "
                             f"dim, 16-byte aligned, with rows a multiple of 16 bytes apart; "
                             f"got shape {tuple(a.shape)}, strides {tuple(a.stride())}, "
                             f"address {a.data_ptr():#x} (argument '{name}')")
        mdt = _mem_np(dt)
        if a.numel() == 0:
            return _TmaTensor(name, dt, np.zeros(tuple(a.shape), mdt), None)
        buf, off = self._locate_tensor(a)
        span = (sum((n - 1) * st for n, st in zip(a.shape, a.stride())) + 1) * e
        flat = buf.u8[off:off + span].view(mdt)
        view = np.lib.stride_tricks.as_strided(flat, tuple(a.shape),
                                               tuple(st * e for st in a.stride()))
        return _TmaTensor(name, dt, view, buf)

    def region_2d(self, name: str, dt: DType, base: int, rows: int, cols: int,
                  stride: int) -> _TmaTensor:
        """The rows x cols region at byte address `base` (rows `stride` elements apart) as a
        TMA tensor: what a descriptor the kernel built describes."""
        mdt = _mem_np(dt)
        e = mdt.itemsize
        if rows <= 0 or cols <= 0:
            return _TmaTensor(name, dt, np.zeros((max(rows, 0), max(cols, 0)), mdt), None)
        span = ((rows - 1) * stride + cols) * e
        for b in self.bufs:
            if b.base <= base and base + span <= b.end:
                flat = b.u8[base - b.base:base - b.base + span].view(mdt)
                view = np.lib.stride_tricks.as_strided(flat, (rows, cols), (stride * e, e))
                return _TmaTensor(name, dt, view, b)
        raise ValueError(f"tensor descriptor over '{name}': its {rows} x {cols} region "
                         f"(rows {stride} elements apart) leaves every tensor argument")

    def _buffer(self, t: Any, st: Any) -> _Buffer:
        import torch

        if t.device.type == "cpu":
            buf = _Buffer(torch.empty(0, dtype=torch.uint8).set_(st).numpy())
        else:
            dev = torch.empty(0, dtype=torch.uint8, device=t.device).set_(st)
            host = dev.cpu()
            buf = _Buffer(host.numpy(), lambda: dev.copy_(host))
        self.bufs.append(buf)
        return buf

    def write_back(self) -> None:
        for b in self.bufs:
            if b.written and b.writeback is not None:
                b.writeback()

    # -- address resolution
    def locate(self, addrs: np.ndarray, mdt: Any, what: str, ctx: _Ctx, op: Op,
               lanes: np.ndarray | None) -> list[tuple[_Buffer, np.ndarray, Any]]:
        """Element indices into buffers for flat int64 `addrs`: [(buffer, index, sel)].

        `lanes[i]` is the tile lane (flat index) of `addrs[i]`, None when they coincide;
        it is only read to write error messages."""
        size = mdt.itemsize
        lo, hi = int(addrs.min()), int(addrs.max())
        for b in self.bufs:
            if b.base <= lo and hi + size <= b.end:
                bad = b.outside(addrs, size)
                if bad is not None:
                    self._oob(addrs, bad, mdt, what, ctx, op, lanes)
                return [(b, self._index(b, addrs, size, what, ctx, op, lanes), None)]
        if not self.bufs:
            if self._adopt(addrs):
                return self.locate(addrs, mdt, what, ctx, op, lanes)
            self._oob(addrs, np.ones(addrs.shape, bool), mdt, what, ctx, op, lanes)
        which = np.searchsorted(self.bases, addrs, side="right") - 1
        ends = np.array([b.end for b in self.bufs], dtype=np.int64)
        bad = (which < 0) | (addrs + size > ends[np.maximum(which, 0)])
        for k in np.unique(which[~bad]):
            sel = which == k
            out_k = self.bufs[int(k)].outside(addrs[sel], size)
            if out_k is not None:
                bad[np.flatnonzero(sel)[out_k]] = True
        if bad.any():
            if self._adopt(addrs[bad]):  # addresses of tensors that are not arguments
                return self.locate(addrs, mdt, what, ctx, op, lanes)
            self._oob(addrs, bad, mdt, what, ctx, op, lanes)
        out = []
        for k in np.unique(which):
            sel = which == k
            b = self.bufs[int(k)]
            sub = np.flatnonzero(sel) if lanes is None else lanes[sel]
            out.append((b, self._index(b, addrs[sel], size, what, ctx, op, sub), sel))
        return out

    def _adopt(self, addrs: np.ndarray) -> bool:
        """Pointers that a kernel loaded from memory (a table of `t.data_ptr()`, as grouped
        GEMM passes its operands) may point into CPU tensors that are no argument: find the
        live ones holding those addresses and map their storage (slow; only on a miss).
        True when some storage was added."""
        import gc

        import torch

        want = np.unique(addrs)
        added = False
        for t in gc.get_objects():
            if not issubclass(type(t), torch.Tensor) or t.device.type != "cpu":
                continue
            try:   # (a FakeTensor that torch.compile keeps alive has no data)
                st = t.untyped_storage()
                lo, n = st.data_ptr(), st.nbytes()
            except (RuntimeError, NotImplementedError):
                continue
            if not n or ((str(t.device), lo, n) in self._by_storage):
                continue
            if ((want >= lo) & (want < lo + n)).any():
                self._locate_tensor(t)
                added = True
        if added:
            self.bufs.sort(key=lambda b: b.base)
            self.bases = np.array([b.base for b in self.bufs], dtype=np.int64)
        return added

    def _index(self, b: _Buffer, addrs: np.ndarray, size: int, what: str, ctx: _Ctx, op: Op,
               lanes: np.ndarray | None) -> np.ndarray:
        off = addrs - b.base
        if size == 1:
            return off
        rem = off % size
        if rem.any():
            i = int(np.flatnonzero(rem)[0])
            raise OutOfBoundsError(_where(op, ctx, f"misaligned {what}") + "\n  lane "
                             f"{_lane(ctx, lanes[i])} accesses address {int(addrs[i]):#x}, "
                             f"which is not a multiple of the element size {size}")
        return off // size

    def _oob(self, addrs, bad, mdt, what, ctx, op, lanes) -> None:
        n_bad = int(np.count_nonzero(bad))
        i = int(np.flatnonzero(bad)[0])
        a = int(addrs[i])
        size = mdt.itemsize
        msg = _where(op, ctx, f"out-of-bounds {what}")
        msg += (f"\n  {n_bad} of {ctx.lanes_total} lanes {'read' if what == 'load' else 'write'}"
                f" outside every tensor argument; first: lane "
                f"{_lane(ctx, i if lanes is None else lanes[i])}")
        if self.args:
            near = min(self.args, key=lambda g: 0 if g.start <= a < g.end else
                       min(abs(a - g.start), abs(a - g.end)))
            rel = a - near.start
            el = f"element {rel // size}" if rel % size == 0 else f"byte {rel}"
            msg += (f" accesses '{near.name}' + {el} (byte offset {rel}), but '{near.name}' "
                    f"has {near.numel} elements of {near.dtype}")
            if near.itemsize != size:
                msg += f" ({near.numel * near.itemsize // size} of {size} bytes)"
        else:
            msg += f" accesses address {a:#x} (the kernel has no tensor arguments)"
        msg += "\n  hint: mask the access, e.g. kit.load(ptr, mask=offs < n)"
        raise OutOfBoundsError(msg)

    # -- gather / scatter
    def load(self, addrs: np.ndarray, mdt: Any, ctx: _Ctx, op: Op,
             lanes: np.ndarray | None) -> np.ndarray:
        parts = self.locate(addrs, mdt, "load", ctx, op, lanes)
        if len(parts) == 1:
            b, idx, _ = parts[0]
            return b.view(mdt)[idx]
        out = np.empty(addrs.shape, mdt)
        for b, idx, sel in parts:
            out[sel] = b.view(mdt)[idx]
        return out

    def store(self, addrs: np.ndarray, vals: np.ndarray, mdt: Any, ctx: _Ctx, op: Op,
              lanes: np.ndarray | None) -> None:
        for b, idx, sel in self.locate(addrs, mdt, "store", ctx, op, lanes):
            b.view(mdt)[idx] = vals if sel is None else vals[sel]
            b.written = True
        self.version += 1


# ----------------------------------------------------------------------------- load, store
@semantics("load")
def load(comp: _Compiler, op: Op) -> Handler:
    mem, ctx = comp.mem, comp.ctx
    dt = op.result.dtype
    mdt, nd = _mem_np(dt), _np(dt)
    if dt is bfloat16:
        def conv(raw):
            return (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)
    elif dt.is_bool():
        def conv(raw):
            return raw != 0
    elif dt.is_fp8():
        def conv(raw):
            return from_bits(raw, dt)
    else:
        def conv(raw):
            return raw
    ids = [v.id for v in op.operands]
    p_id = ids[0]
    m_id = ids[1] if op.attrs.get("has_mask", len(ids) > 1) else None
    o_id = ids[2] if op.attrs.get("has_other", len(ids) > 2) else None
    shape = op.result.shape
    r = op.result.id
    n = int(np.prod(shape)) if shape else 1

    def load(env: Env) -> None:
        addrs = np.asarray(env[p_id]).reshape(-1)
        mask = None
        if m_id is not None:
            mask = np.asarray(env[m_id]).reshape(-1)
            if mask.all():
                mask = None
        ctx.shape, ctx.lanes_total = shape, n
        if mask is None:
            vals = conv(mem.load(addrs, mdt, ctx, op, None))
            out = vals.reshape(shape)
        else:
            if o_id is not None:
                out = np.array(np.broadcast_to(env[o_id], shape), dtype=nd).reshape(-1)
            else:
                out = np.zeros(n, nd)
            if mask.any():
                lanes = np.flatnonzero(mask)
                out[lanes] = conv(mem.load(addrs[lanes], mdt, ctx, op, lanes))
            out = out.reshape(shape)
        env[r] = out if shape else out[()]
    return load


@semantics("store")
def store(comp: _Compiler, op: Op) -> Handler:
    mem, ctx = comp.mem, comp.ctx
    dt = op.operands[1].dtype
    mdt = _mem_np(dt)
    if dt is bfloat16:
        def conv(v):
            return (_bf16_bits(v) >> np.uint32(16)).astype(np.uint16)
    elif dt.is_bool():
        def conv(v):
            return np.asarray(v).astype(np.uint8)
    elif dt.is_fp8():
        def conv(v):
            return to_bits(v, dt)
    else:
        def conv(v):
            return np.asarray(v, mdt)
    ids = [v.id for v in op.operands]
    p_id, v_id = ids[0], ids[1]
    m_id = ids[2] if op.attrs.get("has_mask", len(ids) > 2) else None
    shape = op.operands[0].shape
    n = int(np.prod(shape)) if shape else 1

    def store(env: Env) -> None:
        addrs = np.asarray(env[p_id]).reshape(-1)
        vals = np.broadcast_to(env[v_id], shape).reshape(-1)
        ctx.shape, ctx.lanes_total = shape, n
        if m_id is not None:
            mask = np.asarray(env[m_id]).reshape(-1)
            if not mask.all():
                lanes = np.flatnonzero(mask)
                if lanes.size:
                    mem.store(addrs[lanes], conv(vals[lanes]), mdt, ctx, op, lanes)
                return
        mem.store(addrs, conv(vals), mdt, ctx, op, None)
    return store


# ----------------------------------------------------------------------------- atomics
SPIN_LIMIT = 4096  # atomics in a row that change nothing, with no write in between


def _ftz32(x: np.ndarray) -> np.ndarray:
    """fp32 subnormals to sign-preserving zero (what `atom.add.f32` does to its inputs and
    its result)."""
    return np.where(np.abs(x) < np.float32(2.0 ** -126), np.copysign(np.float32(0), x), x)


def _rmw_fn(kind: str, dt: DType):
    """(memory dtype the op works on, f(old, val) -> new) on raw memory values."""
    mdt = _mem_np(dt)
    if kind == "xchg":
        return mdt, lambda old, v: v
    if kind in ("and", "or", "xor"):
        return mdt, {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[kind]
    if kind == "add":
        if dt is bfloat16:
            def add_bf16(old, v):
                a = (old.astype(np.uint32) << np.uint32(16)).view(np.float32)
                b = (v.astype(np.uint32) << np.uint32(16)).view(np.float32)
                r = a.astype(np.float64) + b.astype(np.float64)
                return (_bf16_bits(round_bf16(r)) >> np.uint32(16)).astype(np.uint16)
            return mdt, add_bf16
        if dt.name == "fp32":
            return mdt, lambda old, v: _ftz32(_ftz32(old) + _ftz32(v))
        return mdt, np.add
    if dt.is_floating():  # Triton's trick: signed max/min on the bits of values >= +0,
        bits = dt.bits    # unsigned min/max on the bits of those with the sign bit set
        it, ut = np.dtype(f"int{bits}"), np.dtype(f"uint{bits}")
        pos_f, neg_f = (np.maximum, np.minimum) if kind == "max" else (np.minimum, np.maximum)

        def fminmax(old, v):
            neg = v.view(ut) >> ut.type(bits - 1) != 0
            p = pos_f(old.view(it), v.view(it))
            n = neg_f(old.view(ut), v.view(ut))
            return np.where(neg, n.view(it), p).view(mdt)
        return mdt, fminmax
    return mdt, np.maximum if kind == "max" else np.minimum


def _rounds(idx: np.ndarray) -> tuple[np.ndarray, int]:
    """For each lane, how many earlier lanes hit its address (lanes apply in that order)."""
    order = np.argsort(idx, kind="stable")
    s = idx[order]
    start = np.r_[0, np.flatnonzero(s[1:] != s[:-1]) + 1]
    rank_sorted = np.arange(s.size) - np.repeat(start, np.diff(np.r_[start, s.size]))
    rank = np.empty_like(rank_sorted)
    rank[order] = rank_sorted
    return rank, int(rank_sorted.max()) + 1 if s.size else 0


def _apply(mem: _Memory, parts, vals: np.ndarray, cmps: np.ndarray | None, f, mdt,
           old_out: np.ndarray) -> bool:
    """Read-modify-write the lanes of `parts` in lane order; the old values go to `old_out`
    (raw memory values); True when memory changed."""
    changed = False
    for b, idx, sel in parts:
        view = b.view(mdt)
        lanes = np.arange(vals.size) if sel is None else np.flatnonzero(sel)
        rank, n = _rounds(idx)
        for r in range(n):
            pick = rank == r if n > 1 else slice(None)
            i, ln = idx[pick], lanes[pick]
            old = view[i].copy()
            if cmps is None:
                new = np.asarray(f(old, vals[ln]), mdt)
            else:
                hit = old.view(f"u{mdt.itemsize}") == cmps[ln].view(f"u{mdt.itemsize}")
                new = np.where(hit, vals[ln], old)
            old_out[ln] = old
            if (new.view(f"u{mdt.itemsize}") != old.view(f"u{mdt.itemsize}")).any():
                view[i] = new
                b.written = changed = True
    return changed


def _atomic(comp: _Compiler, op: Op, cas: bool) -> Handler:
    mem, ctx = comp.mem, comp.ctx
    dt = op.result.dtype
    if cas:
        mdt, f = _mem_np(dt), None
    else:
        mdt, f = _rmw_fn(op.attrs["kind"], dt)
    if dt is bfloat16:
        def to_mem(v):
            return (_bf16_bits(v) >> np.uint32(16)).astype(np.uint16)

        def from_mem(raw):
            return (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)
    else:
        def to_mem(v):
            return np.asarray(v, mdt)

        def from_mem(raw):
            return raw
    ids = [v.id for v in op.operands]
    p_id = ids[0]
    c_id, v_id = (ids[1], ids[2]) if cas else (None, ids[1])
    m_id = ids[2] if not cas and op.attrs.get("has_mask") else None
    shape = op.result.shape
    r = op.result.id
    n = int(np.prod(shape)) if shape else 1
    key = id(op)
    what = "atomic_cas" if cas else f"atomic_{op.attrs['kind']}"

    def atomic(env: Env) -> None:
        addrs = np.asarray(env[p_id]).reshape(-1)
        vals = to_mem(np.broadcast_to(env[v_id], shape).reshape(-1))
        cmps = to_mem(np.broadcast_to(env[c_id], shape).reshape(-1)) if cas else None
        ctx.shape, ctx.lanes_total = shape, n
        old = np.zeros(n, mdt)
        lanes = None
        if m_id is not None:
            mask = np.asarray(env[m_id]).reshape(-1)
            if not mask.all():
                lanes = np.flatnonzero(mask)
        changed = False
        if lanes is None:
            changed = _apply(mem, mem.locate(addrs, mdt, what, ctx, op, None), vals, cmps,
                             f, mdt, old)
        elif lanes.size:
            sub = np.zeros(lanes.size, mdt)
            changed = _apply(mem, mem.locate(addrs[lanes], mdt, what, ctx, op, lanes),
                             vals[lanes], None if cmps is None else cmps[lanes], f, mdt, sub)
            old[lanes] = sub
        if changed:
            mem.version += 1
            mem.spins.pop(key, None)
        else:
            _spin(mem, ctx, op, key, what)
        out = from_mem(old).reshape(shape)
        env[r] = out if shape else out[()]
    return atomic


def _spin(mem: _Memory, ctx: _Ctx, op: Op, key: int, what: str) -> None:
    last = mem.spins.get(key)
    count = last[2] + 1 if last is not None and last[:2] == (mem.version, ctx.pid) else 1
    mem.spins[key] = (mem.version, ctx.pid, count)
    if count >= SPIN_LIMIT:
        raise DeadlockError(
            f"{_where(op, ctx, 'spin that cannot make progress')}\n"
            f"kit.{what} changed nothing {count} times in a row with nothing else written in "
            "between: the program waits for a value that only another program could write "
            "(a lock held by a program that has not run or will not release it). The "
            "interpreter runs programs one at a time, so it would wait forever; on the GPU "
            "this deadlocks whenever the other program cannot run at the same time.")


@semantics("atomic_rmw")
def atomic_rmw(comp: _Compiler, op: Op) -> Handler:
    return _atomic(comp, op, cas=False)


@semantics("atomic_cas")
def atomic_cas(comp: _Compiler, op: Op) -> Handler:
    return _atomic(comp, op, cas=True)

"""The CPU interpreter: runs tile IR with numpy, one program (CTA) at a time.

It exists so that every kernel can be checked where there is no GPU (CI, laptops) and so
that users can debug kernels: an out-of-bounds access raises `IndexError` naming the source
line, the program id and the offending address relative to the nearest tensor argument.

Values live in an environment `Value.id -> numpy value` (arrays for tiles, numpy scalars
for scalars). A pointer is an int64 byte address; loads and stores find the tensor argument
whose storage holds it. bf16 has no numpy type, so bf16 values are float32 arrays that are
kept exactly representable in bf16 (rounded to nearest even whenever one is produced).

Ops are compiled once per `run` into closures over env slots; ops that depend neither on
the program id nor on memory are evaluated once, before the first program.

Level 2 (Hopper): each program allocates its own shared memory (`smem_alloc`: zeroed numpy
arrays; a stage `a[s]` and a transpose `t.T` are views that alias them). A TMA descriptor
argument is a strided numpy view of the tensor's memory; `tma_load` copies a box from it at
once (zero outside the tensor) and `tma_store` writes one back (dropping what falls outside),
and `barrier()` has nothing to do. `wgmma` computes at issue, but an MMA issued with
`pending=p` counts as in flight until p later groups are issued or its result is read: a TMA
load that overwrites shared memory an in-flight MMA reads is a race on the GPU, and raises
`RaceError` here.

mbarriers keep their real state (PTX semantics): arrivals still expected in the current
phase (`kit.mbarriers(n, arrivals=k)`), a transaction byte count, and the number of
completed phases. A phase completes when both reach zero. `kit.mbarrier_arrive` arrives once
per warpgroup that runs it; the first TMA load of a group (`expect` > 0, see
frontend/tma_groups.py) arrives once and announces the group's bytes, and every load's bytes
come off when its copy lands: the data is copied at issue, but the copy counts as landed
only at the next wait (of any role), as the issuing thread runs on while a copy flies on the
GPU. `mbarrier_wait(bar, p)` passes when the phase of
parity p is the most recently completed one (the current phase's parity is not p; a fresh
barrier is in phase 0, so waiting for parity 1 passes at once).

Warp specialization: an `if` on `kit.warpgroup_id()` (`roles` attribute) runs its two
regions as coroutines (generators) that take turns, round robin, each running until it
waits for a phase that has not completed. When every role waits and no phase completes in a
full round, the program is deadlocked: `DeadlockError` names each wait, its barrier's state
and the loop iteration it is in ("this would hang the GPU"). Outside roles the program is one
thread of control, so a wait that is not satisfied at once raises the same error.
`kit.warpgroup_id()` is the first warpgroup of the role it runs in (0 outside roles).

The schedule is one of many the GPU could run, so right numbers here prove little about
ordering. Instead the interpreter tracks what the mbarriers order (vector clocks over roles
and barrier phases; see `_Ctx`) and raises `RaceError` where nothing does: an MMA reading a
shared tile before its role has seen the phase the TMA copy into it lands in (or a tile no
load has written), a TMA load over a tile that another role's MMA read (until that MMA was
retired) with no arrive/wait in between, or over a tile an earlier copy may still be
writing.
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from kitjit.ir import ops as O
from kitjit.ir.core import Block, Function, Op
from kitjit.ir.types import DType, bfloat16, float16, from_torch, mbarrier, tma_desc

__all__ = ["DeadlockError", "MBarrierError", "OutOfBoundsError", "RaceError", "round_bf16",
           "run"]

Env = dict[int, Any]
Handler = Callable[[Env], None]

# Ops that read or write memory, depend on the program, or hold regions: never hoisted.
# Shared memory is per program, so its allocation and everything touching it stay put too.
_NOT_HOISTABLE = frozenset({"load", "store", "program_id", "for", "if", "yield", "smem_alloc",
                            "smem_index", "smem_trans", "tma_load", "tma_store", "mbar_wait",
                            "mbar_arrive", "setmaxnreg", "barrier", "wgmma"})


# ----------------------------------------------------------------------------- dtypes
def _np(dt: DType) -> Any:
    """The numpy dtype a value of `dt` is held in (bf16: float32, pointers: int64)."""
    return np.dtype(dt.np_dtype)


def _mem_np(dt: DType) -> Any:
    """The numpy dtype of `dt` as laid out in memory."""
    if dt is bfloat16:
        return np.dtype(np.uint16)
    if dt.is_bool():
        return np.dtype(np.uint8)
    return np.dtype(dt.np_dtype)


def _bf16_bits(x: Any) -> np.ndarray:
    """float32 -> the uint32 bits of the nearest-even bf16 (low 16 bits zero); NaN stays NaN."""
    x = np.asarray(x, dtype=np.float32)
    b = x.view(np.uint32)
    r = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    nan = x != x
    if nan.any():
        r = np.where(nan, (b | np.uint32(0x00400000)) & np.uint32(0xFFFF0000), r)
    return r


def round_bf16(x: Any) -> np.ndarray:
    """Round to the nearest bf16 value (ties to even), returned as float32.

    float64 input is first rounded to float32 with round-to-odd, so the result is the
    correctly rounded bf16 of the float64 value (no double-rounding error)."""
    x = np.asarray(x)
    if x.dtype == np.float64 or x.dtype.kind in "iu" and x.dtype.itemsize > 2:
        x = _f64_to_f32_round_odd(x.astype(np.float64))
    return _bf16_bits(x).view(np.float32)


def _f64_to_f32_round_odd(x: np.ndarray) -> np.ndarray:
    f = x.astype(np.float32)
    bits = f.view(np.uint32).copy()
    fin = np.isfinite(x)
    back = f.astype(np.float64)
    # RNE went away from zero: step one ulp back toward zero (truncation), then mark inexact.
    away = fin & (np.abs(back) > np.abs(x))
    bits = np.where(away, bits - np.uint32(1), bits)
    inexact = fin & (back != x)
    bits = np.where(inexact, bits | np.uint32(1), bits)
    return bits.view(np.float32)


def _fixer(dt: DType) -> Callable[[Any], Any] | None:
    """How to bring a computed value back into `dt`'s set of values (None: nothing to do)."""
    if dt is bfloat16:
        return round_bf16
    return None


def _int_bounds(dt: DType) -> tuple[int, int]:
    if dt.is_int_unsigned():
        return 0, 2 ** dt.bits - 1
    return -(2 ** (dt.bits - 1)), 2 ** (dt.bits - 1) - 1


def _scalar_arg(dt: DType, x: Any) -> Any:
    """A Python number (an argument or a constant) as a numpy scalar of `dt`; ints wrap."""
    if dt.is_bool():
        return np.bool_(bool(x))
    if dt.is_int():
        n = int(x) & ((1 << dt.bits) - 1)
        if dt.is_int_signed() and n >= 1 << (dt.bits - 1):
            n -= 1 << dt.bits
        return _np(dt).type(n)
    if dt is bfloat16:
        return round_bf16(np.float64(float(x)))[()]
    return _np(dt).type(float(x))


class OutOfBoundsError(IndexError):
    """A load or store outside every tensor argument, or a misaligned one."""


class RaceError(RuntimeError):
    """Shared memory accessed with nothing ordering the access on the GPU: a TMA load over a
    tile an MMA may still read, a read before the copy into it is seen to land, or a read of
    a tile nothing has written."""


class DeadlockError(RuntimeError):
    """Every thread of control of a program waits for an mbarrier phase that never completes:
    the kernel would hang on the GPU."""


class MBarrierError(RuntimeError):
    """An mbarrier used in a way the GPU leaves undefined (more arrivals than a phase
    expects)."""


# ----------------------------------------------------------------------------- mbarriers
class _Role:
    """Who runs a region: warpgroups first .. first + count - 1; `key` tells roles apart
    (0: the whole CTA, outside roles)."""

    __slots__ = ("first", "count", "key")

    def __init__(self, first: int, count: int, key: int):
        self.first, self.count, self.key = first, count, key

    def __str__(self) -> str:
        if self.count == 1:
            return f"warpgroup {self.first}"
        return f"warpgroups {self.first}-{self.first + self.count - 1}"


class _MBar:
    """One mbarrier's state: arrivals still expected in the current phase, the transaction
    byte count (announced by arrive.expect_tx, taken off by landing TMA copies), and how
    many phases have completed (the current phase's parity is `phase & 1`)."""

    __slots__ = ("name", "init", "pending", "tx", "phase", "released", "completed")

    def __init__(self, name: str, init: int):
        self.name, self.init = name, init
        self.pending, self.tx, self.phase = init, 0, 0
        # vector clocks (see _Ctx): what the arrivals of the current phase release, and
        # what a wait that sees a completed phase acquires
        self.released: dict = {}
        self.completed: dict = {}

    def done(self, parity: int) -> bool:
        """try_wait.parity: has the phase of this parity completed (most recently)?"""
        return (self.phase & 1) != parity

    def arrive(self, ctx: _Ctx, op: Op, key: int, n: int = 1, tx: int = 0) -> None:
        """`n` arrivals by role `key` (releasing what it did so far), announcing `tx` bytes."""
        ctx.release(key, self)
        self.tx += tx
        for _ in range(n):
            if self.pending == 0:  # only while TMA bytes are outstanding
                ctx.shape, ctx.lanes_total = (), 1
                raise MBarrierError(
                    _where(op, ctx, "too many arrivals on an mbarrier") +
                    f"\n  {self.name} expects {self.init} arrival{'s' if self.init != 1 else ''}"
                    f" per phase and has had them in phase {self.phase}, which still waits "
                    f"for {self.tx} bytes of TMA copies: on the GPU this arrival is undefined "
                    "behaviour\n  hint: TMA loads written in a row on one barrier share one "
                    "arrival; each run of them that something else splits (an `if`, a wait, "
                    "an MMA) arrives once, so wait in between or give the barrier "
                    "arrivals=<runs>")
            self.pending -= 1
            self._check(ctx)

    def complete_tx(self, ctx: _Ctx, nbytes: int) -> None:
        self.tx -= nbytes
        self._check(ctx)

    def _check(self, ctx: _Ctx) -> None:
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.init
            ctx.events += 1
            _join(self.completed, self.released)
            self.completed[self] = self.phase
            self.released = {}


def _mbar_names(op: Op) -> list[str]:
    """Names for the barriers of a `kit.mbarriers` allocation: `ready[0]`, `ready[1]`, ...
    (the name is what the source line assigns, when it can be read)."""
    name = op.result.name
    if not name and op.loc is not None:
        src = linecache.getline(op.loc.file, op.loc.line)
        m = re.match(r"\s*([A-Za-z_]\w*)\s*=\s*[\w.]*mbarriers\b", src)
        if m:
            name = m.group(1)
    if not name:
        name = f"mbarriers (line {op.loc.line})" if op.loc else "mbarriers"
    return [f"{name}[{i}]" for i in range(op.result.shape[0] if op.result.shape else 1)]


class _Wait:
    """What a blocked coroutine hands the scheduler: the wait it is stuck at."""

    __slots__ = ("op", "bar", "parity", "role", "loops")

    def __init__(self, op: Op, bar: _MBar, parity: int, role: _Role):
        self.op, self.bar, self.parity, self.role = op, bar, parity, role
        self.loops: list[str] = []  # innermost first

    def leaves(self) -> list[_Wait]:
        return [self]

    def in_loop(self, where: str) -> None:
        self.loops.append(where)


class _Stuck:
    """What a group of roles hands its scheduler when all of them wait without progress."""

    __slots__ = ("waits",)

    def __init__(self, waits: list):
        self.waits = waits

    def leaves(self) -> list[_Wait]:
        return [w for x in self.waits for w in x.leaves()]

    def in_loop(self, where: str) -> None:
        for x in self.waits:
            x.in_loop(where)


# ----------------------------------------------------------------------------- memory
class _Buffer:
    """The whole storage of one or more tensor arguments, as a uint8 numpy array."""

    def __init__(self, u8: np.ndarray, writeback: Callable[[], None] | None = None):
        self.u8 = u8
        self.base = int(u8.ctypes.data) if u8.size else 0
        self.end = self.base + u8.size
        self.writeback = writeback
        self.written = False
        self._views: dict[Any, np.ndarray] = {}

    def view(self, mdt: Any) -> np.ndarray:
        v = self._views.get(mdt)
        if v is None:
            n = self.u8.size - self.u8.size % mdt.itemsize
            v = self._views[mdt] = self.u8[:n].view(mdt)
        return v


class _ArgInfo:
    def __init__(self, name: str, start: int, numel: int, itemsize: int, dtype: str):
        self.name, self.start, self.numel = name, start, numel
        self.itemsize, self.dtype = itemsize, dtype
        self.end = start + numel * itemsize


class _TmaTensor:
    """What a TMA descriptor argument is in the interpreter: the 2-d tensor behind it, as a
    strided view of the buffer that holds its storage (bf16 as uint16 bits)."""

    def __init__(self, name: str, dt: DType, view: np.ndarray, buf: _Buffer | None):
        self.name, self.dt, self.view, self.buf = name, dt, view, buf

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
            raw = self.view[rs:re, cs:ce]
            if self.dt is bfloat16:
                raw = (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)
            elif self.dt.is_bool():
                raw = raw != 0
            dst[rs - r0:re - r0, cs - c0:ce - c0] = raw

    def store_box(self, src: np.ndarray, r0: int, c0: int) -> None:
        """The box of src's shape at (r0, c0) = src; what falls outside the tensor is dropped."""
        rows, cols = src.shape
        rs, re, cs, ce = self._clip(r0, c0, rows, cols)
        if rs >= re or cs >= ce:
            return
        v = src[rs - r0:re - r0, cs - c0:ce - c0]
        if self.dt is bfloat16:
            v = (_bf16_bits(v) >> np.uint32(16)).astype(np.uint16)
        elif self.dt.is_bool():
            v = np.asarray(v).astype(np.uint8)
        self.view[rs:re, cs:ce] = v
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
            self.args.append(_ArgInfo(v.name or f"arg{len(self.values) - 1}", ptr, a.numel(),
                                      a.element_size(), str(a.dtype).replace("torch.", "")))
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
        if a.dim() != 2 or a.stride(1) != 1 or a.data_ptr() % 16 or (a.stride(0) * e) % 16:
            raise ValueError(f"a tensor copied by TMA must be 2-d, contiguous in its last dim, "
                             f"16-byte aligned, with rows a multiple of 16 bytes apart; got "
                             f"shape {tuple(a.shape)}, strides {tuple(a.stride())}, address "
                             f"{a.data_ptr():#x} (argument '{name}')")
        mdt = _mem_np(dt)
        rows, cols = a.shape
        if a.numel() == 0:
            return _TmaTensor(name, dt, np.zeros((rows, cols), mdt), None)
        buf, off = self._locate_tensor(a)
        span = ((rows - 1) * a.stride(0) + (cols - 1) * a.stride(1) + 1) * e
        flat = buf.u8[off:off + span].view(mdt)
        view = np.lib.stride_tricks.as_strided(flat, (rows, cols),
                                               (a.stride(0) * e, a.stride(1) * e))
        return _TmaTensor(name, dt, view, buf)

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
                return [(b, self._index(b, addrs, size, what, ctx, op, lanes), None)]
        if not self.bufs:
            self._oob(addrs, np.ones(addrs.shape, bool), mdt, what, ctx, op, lanes)
        which = np.searchsorted(self.bases, addrs, side="right") - 1
        ends = np.array([b.end for b in self.bufs], dtype=np.int64)
        bad = (which < 0) | (addrs + size > ends[np.maximum(which, 0)])
        if bad.any():
            self._oob(addrs, bad, mdt, what, ctx, op, lanes)
        out = []
        for k in np.unique(which):
            sel = which == k
            b = self.bufs[int(k)]
            sub = np.flatnonzero(sel) if lanes is None else lanes[sel]
            out.append((b, self._index(b, addrs[sel], size, what, ctx, op, sub), sel))
        return out

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


class _Ctx:
    """What error messages need to know about the running program."""

    def __init__(self, grid: tuple[int, int, int]):
        self.grid = grid
        self.pid = (0, 0, 0)
        self.shape: tuple[int, ...] = ()
        self.lanes_total = 1
        # MMAs of this program that may still read shared memory: (op, a, b, role key),
        # oldest first (a role waits only for its own MMAs; a TMA load races with any)
        self.inflight: list[tuple[Op, np.ndarray, np.ndarray, int]] = []
        self.events = 0  # mbarrier phases completed so far (the scheduler's progress)
        self.copies: list[tuple[_MBar, int, _Write]] = []  # TMA copies not landed yet
        self.roles: dict[int, _Role] = {}  # by key, for messages
        self.vc: dict[int, dict] = {}
        self.shadow: dict[tuple[int, int], _Shadow] = {}

    def start(self, pid: tuple[int, int, int]) -> None:
        """A new program: nothing in flight, nothing known about its shared memory."""
        self.pid = pid
        self.inflight.clear()
        self.copies.clear()
        self.vc = {0: {0: 1}}
        self.shadow = {}

    def land(self) -> None:
        """The TMA copies in flight land: their bytes count now (their data was written at
        issue). A copy takes its time on the GPU, so the thread that issued it runs on until
        it waits; here every wait lands what is in flight before it looks at its barrier."""
        if self.copies:
            copies, self.copies = self.copies, []
            for bar, n, w in copies:
                w.needed = bar.phase + 1  # seen by whoever sees this phase complete
                bar.complete_tx(self, n)

    # -- happens-before, with vector clocks
    # Each role (key; 0 outside roles) and each mbarrier is a clock component: a role's own
    # component counts its releases, a barrier's counts its completed phases. Arriving
    # releases the role's clock into the barrier's current phase; a wait that passes
    # acquires what the completed phases released; roles fork from and join into the role
    # around them. A TMA write is visible to a role once its clock has the barrier phase
    # the copy landed in; a read is ordered before a later write once the writer's clock
    # has the reader's component at the read.
    def release(self, key: int, bar: _MBar) -> None:
        vc = self.vc[key]
        _join(bar.released, vc)
        vc[key] += 1

    def acquire(self, key: int, bar: _MBar) -> None:
        _join(self.vc[key], bar.completed)

    def fork(self, parent: int, kids: list[int]) -> None:
        pv = self.vc[parent]
        for k in kids:
            vc = self.vc[k] = dict(pv)
            vc[k] = vc.get(k, 0) + 1
        pv[parent] += 1

    def join(self, parent: int, kids: list[int]) -> None:
        pv = self.vc[parent]
        for k in kids:
            _join(pv, self.vc[k])
        pv[parent] += 1

    def retire(self, mma: tuple) -> None:
        """An MMA of the inflight list is done: its reads of shared memory end now."""
        op, a, b, key = mma
        for v in (a, b):
            if v is not None:
                self.smem_read(op, v, key, "", False)

    def smem_read(self, op: Op, view: np.ndarray, key: int, what: str, check: bool) -> None:
        """Role `key` reads a shared tile (`what`: which operand, for messages)."""
        sh = self.shadow.get(_region(view))
        if check:
            if sh is None or sh.write is None:
                self.shape, self.lanes_total = (), 1
                raise RaceError(
                    _where(op, self, "read of uninitialized shared memory") +
                    f"\n  {what} is shared memory that no TMA load has written in this "
                    "program: on the GPU it holds whatever was there before")
            w = sh.write
            if w.needed is None or self.vc[key].get(w.bar, 0) < w.needed:
                self.shape, self.lanes_total = (), 1
                phase = w.bar.phase if w.needed is None else w.needed - 1
                when = "its copy is still in flight: nothing has waited since it was issued" \
                    if w.needed is None else \
                    f"{self.roles[key]} has not seen {w.bar.name} complete phase {phase}, " \
                    "the phase that copy lands in"
                raise RaceError(
                    _where(op, self, "race on shared memory") +
                    f"\n  {what} is written by the TMA load{_at(w.op)}, and {when}"
                    f"\n  hint: wait for that phase before the read: "
                    f"kit.mbarrier_wait({w.bar.name}, {phase & 1})")
        if sh is not None:
            sh.reads[key] = (self.vc[key][key], op)

    def smem_write(self, op: Op, view: np.ndarray, key: int, bar: _MBar) -> _Write:
        """Role `key` issues a TMA load into a shared tile; its copy lands on `bar`."""
        region = _region(view)
        sh = self.shadow.get(region)
        vc = self.vc[key]
        if sh is not None:
            w = sh.write
            if w is not None and (w.needed is None or vc.get(w.bar, 0) < w.needed):
                self.shape, self.lanes_total = (), 1
                raise RaceError(
                    _where(op, self, "race on shared memory") +
                    f"\n  this TMA load overwrites shared memory that the TMA load{_at(w.op)} "
                    "may still be writing: nothing has waited for the phase of "
                    f"{w.bar.name} that copy lands in"
                    f"{' since it was issued' if w.needed is None else ''}")
            for k, (c, rop) in sh.reads.items():
                if k != key and vc.get(k, 0) < c:
                    self.shape, self.lanes_total = (), 1
                    raise RaceError(
                        _where(op, self, "race on shared memory") +
                        f"\n  this TMA load overwrites shared memory that {self.roles[k]} "
                        f"read{'s' if self.roles[k].count == 1 else ''} in the "
                        f"kit.mma{_at(rop)}, and nothing orders that read before this load"
                        "\n  hint: the reader arrives on an mbarrier once its MMAs are done "
                        "with the tile (after the MMA, or after a later MMA or use of the "
                        "result retires it), and the writer waits for that phase")
        w = _Write(bar, op)
        self.shadow[region] = _Shadow(w)
        return w


class _Write:
    """A TMA load into a shared tile: `needed` is the number of completed phases of `bar`
    a role must have seen to see it (None while the copy is in flight)."""

    __slots__ = ("bar", "op", "needed")

    def __init__(self, bar: _MBar, op: Op):
        self.bar, self.op, self.needed = bar, op, None


class _Shadow:
    """What is known about one shared tile: its last write, and the last read of each role
    since (role key -> (the role's clock at the read, the op))."""

    __slots__ = ("write", "reads")

    def __init__(self, write: _Write):
        self.write = write
        self.reads: dict[int, tuple[int, Op]] = {}


def _region(view: np.ndarray) -> tuple[int, int]:
    """A shared tile's identity: its first byte and size (a stage and its .T agree)."""
    return view.__array_interface__["data"][0], view.nbytes


def _join(dst: dict, src: dict) -> None:
    for k, v in src.items():
        if dst.get(k, 0) < v:
            dst[k] = v


def _at(op: Op) -> str:
    loc = op.loc
    if loc is None:
        return ""
    src = linecache.getline(loc.file, loc.line).strip()
    return f" at line {loc.line}" + (f" ({src})" if src else "")


def _where(op: Op, ctx: _Ctx, title: str) -> str:
    """The first lines of a memory error: what, where in the source, which program."""
    loc = op.loc
    if loc is None:
        head = f"{title} (no source location), program {ctx.pid}"
    else:
        fn = f" in '{loc.func}'" if loc.func else ""
        head = f"{title} at {loc}{fn}, program {ctx.pid}"
        src = linecache.getline(loc.file, loc.line).strip()
        if src:
            head += f"\n    {src}"
    return head


def _lane(ctx: _Ctx, flat: Any) -> str:
    if not ctx.shape:
        return "(scalar)"
    return str(tuple(int(i) for i in np.unravel_index(int(flat), ctx.shape)))


# ----------------------------------------------------------------------------- op semantics
def _compute_in_f32(f: Callable, dt: DType) -> Callable:
    """Float math on fp16/bf16 runs in fp32 and rounds back, as on the GPU."""
    if dt is float16:
        return lambda x: f(np.asarray(x, np.float32)).astype(np.float16)
    if dt is bfloat16:
        return lambda x: round_bf16(f(x))
    return f


def _rsqrt(x):
    return np.reciprocal(np.sqrt(x))


def _sigmoid(x):
    one = np.asarray(x).dtype.type(1)
    return one / (one + np.exp(-x))


_FLOAT_UNARY = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2,
                "sqrt": np.sqrt, "rsqrt": _rsqrt, "sin": np.sin, "cos": np.cos,
                "sigmoid": _sigmoid, "floor": np.floor, "ceil": np.ceil}


def _unary(op: Op) -> Callable:
    name, dt = op.name, op.operands[0].dtype
    if name == "neg":
        return np.negative
    if name == "not":
        return np.logical_not
    if name == "invert":
        return np.logical_not if dt.is_bool() else np.invert
    if name == "abs":
        return np.abs
    f = _FLOAT_UNARY[name]
    if not dt.is_floating():
        raise NotImplementedError(f"interpreter: '{name}' on {dt} (the frontend casts to "
                                  "float first)")
    if op.attrs.get("ftz"):                        # results below 2**-126 flush to zero
        g = f

        def f(x):
            r = g(x)
            return np.where(np.abs(r) < np.float32(2.0 ** -126), r.dtype.type(0), r)
    return _compute_in_f32(f, dt)


def _int_floordiv(a, b):
    zero = b == 0
    bs = np.where(zero, 1, b).astype(np.asarray(b).dtype)
    if np.asarray(a).dtype.kind == "u":
        return np.where(zero, 0, np.floor_divide(a, bs)).astype(np.asarray(a).dtype)
    r = np.fmod(a, bs)
    # (a - r) is an exact multiple of b; floor division of it is exact, hence truncation.
    return np.where(zero, 0, np.floor_divide(a - r, bs)).astype(np.asarray(a).dtype)


def _int_mod(a, b):
    zero = b == 0
    bs = np.where(zero, 1, b).astype(np.asarray(b).dtype)
    return np.where(zero, 0, np.fmod(a, bs)).astype(np.asarray(a).dtype)


def _shifts(dt: DType):
    bits = dt.bits
    t = _np(dt).type

    def amount(b):
        big = (b >= bits) if dt.is_int_unsigned() else ((b < 0) | (b >= bits))
        return big, np.where(big, 0, b).astype(_np(dt))

    def shl(a, b):
        big, s = amount(b)
        return np.where(big, t(0), np.left_shift(a, s)).astype(_np(dt))

    def shr(a, b):  # numpy: arithmetic for signed, logical for unsigned, like the GPU
        big, s = amount(b)
        fill = t(0) if dt.is_int_unsigned() else np.where(a < 0, t(-1), t(0))
        return np.where(big, fill, np.right_shift(a, s)).astype(_np(dt))

    return shl, shr


def _binary(op: Op) -> Callable:
    name, dt = op.name, op.operands[0].dtype
    if name in ("add", "sub", "mul", "minimum", "maximum", "and", "or", "xor"):
        f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "minimum": np.minimum,
             "maximum": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
             "xor": np.bitwise_xor}[name]
        return f
    if name in ("shl", "shr"):
        if not dt.is_int():
            raise NotImplementedError(f"interpreter: '{name}' on {dt}")
        return _shifts(dt)[0 if name == "shl" else 1]
    if dt.is_floating():
        if name == "div":
            return np.true_divide
        if name == "floordiv":
            return lambda a, b: np.floor(np.true_divide(a, b))
        if name == "mod":
            return np.fmod
    elif dt.is_int():
        if name == "floordiv":
            return _int_floordiv
        if name == "mod":
            return _int_mod
    raise NotImplementedError(f"interpreter: '{name}' on {dt}")


_CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
        "eq": np.equal, "ne": np.not_equal}


def _cast(op: Op) -> Callable:
    src, dst = op.operands[0].dtype, op.result.dtype
    nd = _np(dst)
    if dst.is_bool():
        return lambda x: np.not_equal(x, 0)
    if src.is_bool():
        if dst is bfloat16:
            return lambda x: np.asarray(x).astype(np.float32)
        return lambda x: np.asarray(x).astype(nd)
    if dst.is_int():
        if src.is_int():
            return lambda x: np.asarray(x).astype(nd)  # wraps
        lo, hi = _int_bounds(dst)

        def f2i(x):  # truncate toward zero, saturate, NaN -> 0 (cvt.rzi)
            t = np.trunc(np.asarray(x, np.float64))
            safe = np.where((t >= lo) & (t < float(hi) + 1), t, 0)
            r = safe.astype(nd)
            r = np.where(t >= float(hi) + 1, nd.type(hi), r)
            return np.where(t < lo, nd.type(lo), r).astype(nd)
        return f2i
    if dst is bfloat16:
        return round_bf16
    # int/float -> fp16/fp32/fp64; bf16 sources are already float32.
    return lambda x: np.asarray(x).astype(nd)


def _reduce(op: Op) -> Callable:
    kind, axis = op.attrs["kind"], op.attrs["axis"]
    rdt = _np(op.result.dtype)
    fix = _fixer(op.result.dtype)
    if kind == "sum":
        def f(x):
            return np.sum(x, axis=axis, dtype=rdt)
    elif kind in ("max", "min"):
        g = np.max if kind == "max" else np.min

        def f(x):
            return g(x, axis=axis).astype(rdt)
    elif kind in ("argmax", "argmin"):
        g = np.argmax if kind == "argmax" else np.argmin  # first extreme element

        def f(x):
            return g(x, axis=axis).astype(rdt)
    else:
        raise NotImplementedError(f"interpreter: reduce kind '{kind}'")
    if fix is not None:
        return lambda x: fix(f(x))
    return f


def _dot(a, b, acc):
    return np.matmul(np.asarray(a, np.float32), np.asarray(b, np.float32)) + acc


def _pure(op: Op, ctx: _Ctx) -> Callable:
    """The numpy function of a pure op: operand values -> result value."""
    name, attrs = op.name, op.attrs
    if name in O.BINARY:
        f = _binary(op)
    elif name in O.UNARY:
        f = _unary(op)
    elif name == "cmp":
        return _CMP[attrs["pred"]]
    elif name == "cast":
        return _cast(op)
    elif name == "select":
        return np.where
    elif name == "addptr":
        size = np.int64(op.result.dtype.element_ty.itemsize)
        return lambda p, o: p + np.asarray(o).astype(np.int64) * size
    elif name == "splat":
        shape, nd = op.result.shape, _np(op.result.dtype)
        return lambda x: np.full(shape, x, nd)
    elif name == "broadcast":
        shape = op.result.shape
        return lambda x: np.broadcast_to(x, shape)
    elif name == "expand_dims":
        axis = attrs["axis"]
        return lambda x: np.expand_dims(x, axis)
    elif name == "convert_layout":
        return lambda x: x
    elif name == "reduce":
        return _reduce(op)
    elif name == "dot":
        return _dot
    elif name == "constant":
        v = _scalar_arg(op.result.dtype, attrs["value"])
        return lambda: v
    elif name == "arange":
        v = np.arange(attrs["start"], attrs["end"], dtype=np.int32)
        return lambda: v
    elif name == "num_programs":
        n = np.int32(ctx.grid[attrs["axis"]])
        return lambda: n
    else:
        raise NotImplementedError(_unknown(op))
    fix = _fixer(op.result.dtype)
    if fix is not None and name not in ("minimum", "maximum", "neg", "abs"):
        return lambda *xs: fix(f(*xs))
    return f


def _unknown(op: Op) -> str:
    where = f" (at {op.loc})" if op.loc else ""
    return f"the interpreter does not know the op '{op.name}'{where}"


# ----------------------------------------------------------------------------- compiler
class _Compiler:
    """Turns blocks into lists of closures `h(env)`; collects hoisted ops separately.

    Regions that run as roles are compiled as generator functions instead (`gblock`): they
    yield a `_Wait` each time they find the phase they wait for not yet completed."""

    def __init__(self, mem: _Memory, ctx: _Ctx, mma_values: frozenset[int] = frozenset(),
                 num_warps: int = 4):
        self.mem = mem
        self.ctx = ctx
        self.hoisted: list[Handler] = []
        self.varying: set[int] = set()
        self.mma_values = mma_values
        self.role = _Role(0, max(1, -(-num_warps // 4)), 0)  # who runs what is compiled
        self.n_roles = 0
        self._blocks: dict[int, bool] = {}

    def block(self, block: Block) -> list[Handler]:
        self.varying.update(a.id for a in block.args)
        out: list[Handler] = []
        for op in block.ops:
            h = self.one(op)
            if h is not None:
                out.append(h)
        return out

    def one(self, op: Op) -> Handler | None:
        """The handler of `op`; None for a yield or an op hoisted out of the programs."""
        if op.name == "yield":
            return None
        h = self.op(op)
        if self.mma_values and op.name not in ("wgmma", "for") and \
                any(v.id in self.mma_values for v in op.operands):
            h = _retiring(h, self.ctx, self.role.key)
        hoist = op.name not in _NOT_HOISTABLE and \
            not any(v.id in self.varying for v in op.operands)
        if hoist:
            self.hoisted.append(h)
            return None
        self.varying.update(r.id for r in op.results)
        return h

    # -- coroutines: the regions of roles
    def blocks(self, op: Op) -> bool:
        """Whether `op` may wait for another role: an mbarrier wait, roles, or a loop or
        branch that holds one."""
        r = self._blocks.get(id(op))
        if r is None:
            r = op.name == "mbar_wait" or bool(op.attrs.get("roles")) or \
                any(self.blocks(o) for g in op.regions for o in g.ops)
            self._blocks[id(op)] = r
        return r

    def gblock(self, block: Block) -> Callable[[Env], Iterator]:
        """`block` as a generator function: it yields whenever it waits for a phase that
        has not completed (a `_Wait`, or a `_Stuck` of roles within) and ends with the
        block."""
        self.varying.update(a.id for a in block.args)
        steps: list[tuple[Callable, bool]] = []
        for op in block.ops:
            if op.name != "yield" and self.blocks(op):
                self.varying.update(r.id for r in op.results)
                steps.append((self.gop(op), True))
            else:
                h = self.one(op)
                if h is not None:
                    steps.append((h, False))

        def run(env: Env) -> Iterator:
            for h, gen in steps:
                if gen:
                    yield from h(env)
                else:
                    h(env)
        return run

    def gop(self, op: Op) -> Callable[[Env], Iterator]:
        if op.name == "mbar_wait":
            return self.mbar_wait(op, gen=True)
        if op.name == "for":
            return self.for_(op, gen=True)
        if op.attrs.get("roles"):
            return self.roles(op, gen=True)
        return self.if_(op, gen=True)

    def roles(self, op: Op, gen: bool = False) -> Any:
        """`if kit.warpgroup_id() ...`: both regions at once, as coroutines."""
        kids, keys = [], []
        ctx, parent = self.ctx, self.role.key
        for region, (first, count) in zip(op.regions, op.attrs["roles"]):
            if count <= 0:
                continue  # no warpgroup runs it
            saved = self.role
            self.n_roles += 1
            self.role = ctx.roles[self.n_roles] = _Role(first, count, self.n_roles)
            keys.append(self.n_roles)
            kids.append(self.gblock(region))
            self.role = saved

        if gen:  # roles within a role: stuck when all of them are
            def roles_g(env: Env) -> Iterator:
                ctx.fork(parent, keys)
                yield from _par(ctx, [k(env) for k in kids])
                ctx.join(parent, keys)
            return roles_g

        def roles(env: Env) -> None:
            ctx.fork(parent, keys)
            for stuck in _par(ctx, [k(env) for k in kids]):
                raise _deadlock(ctx, stuck.leaves())
            ctx.join(parent, keys)
        return roles

    def op(self, op: Op) -> Handler:
        name = op.name
        if name == "load":
            return self.load(op)
        if name == "store":
            return self.store(op)
        if name == "for":
            return self.for_(op)
        if name == "if":
            if op.attrs.get("roles"):
                return self.roles(op)
            return self.if_(op)
        if name in _HOPPER:
            return getattr(self, name)(op)
        if name == "program_id":
            ctx, axis, r = self.ctx, op.attrs["axis"], op.result.id

            def pid(env: Env) -> None:
                env[r] = np.int32(ctx.pid[axis])
            return pid
        if name == "warpgroup_id":  # fixed per role: hoistable like a constant
            wg = np.int32(self.role.first)
            return _wrap(lambda: wg, [], op.result.id)
        if name == "setmaxnreg":
            return _nothing  # registers are not counted here
        f = _pure(op, self.ctx)
        return _wrap(f, [v.id for v in op.operands], op.result.id)

    # -- level 2: shared memory, TMA, mbarriers, WGMMA
    def smem_alloc(self, op: Op) -> Handler:
        t, r = op.result.type, op.result.id
        shape = t.shape
        if t.dtype is mbarrier:  # an object array of barrier states: bars[i] is a view
            names, init = _mbar_names(op), int(op.attrs.get("init", 1))

            def mbarriers(env: Env) -> None:
                a = np.empty(shape, object)
                for i, n in enumerate(names):
                    a.flat[i] = _MBar(n, init)
                env[r] = a
            return mbarriers
        nd = _np(t.dtype)

        def smem_alloc(env: Env) -> None:
            env[r] = np.zeros(shape, nd)
        return smem_alloc

    def smem_index(self, op: Op) -> Handler:
        x_id, i_id = (v.id for v in op.operands)
        n, r = op.operands[0].shape[0], op.result.id
        ctx = self.ctx

        def smem_index(env: Env) -> None:
            i = int(env[i_id])
            if not 0 <= i < n:
                ctx.shape, ctx.lanes_total = (), 1
                raise OutOfBoundsError(_where(op, ctx, "out-of-range shared-memory index") +
                                       f"\n  index {i} of a shared tile with {n} stages")
            env[r] = env[x_id][i, ...]  # a view: writes through it land in the allocation
        return smem_index

    def tma_load(self, op: Op) -> Handler:
        d_id, t_id, r_id, c_id, b_id = (v.id for v in op.operands)
        dt = op.operands[0].dtype
        nbytes = int(op.attrs["bytes"])
        expect = int(op.attrs.get("expect", nbytes))  # as the backend reads it
        ctx, key = self.ctx, self.role.key

        def tma_load(env: Env) -> None:
            dst, t = env[d_id], env[t_id]
            if t.dt is not dt:
                raise TypeError(_where(op, ctx, "TMA load of another dtype") +
                                f"\n  '{t.name}' holds {t.dt} but the shared tile holds {dt}")
            r0, c0 = int(env[r_id]), int(env[c_id])
            _check_box(op, ctx, t, r0, c0, "load")
            for mma, a, b, _ in ctx.inflight:
                if a is not None and np.may_share_memory(dst, a) or \
                        b is not None and np.may_share_memory(dst, b):
                    _race(op, mma, ctx)
            bar = env[b_id][()]
            w = ctx.smem_write(op, dst, key, bar)
            if expect:  # the group's one arrive.expect_tx
                bar.arrive(ctx, op, key, 1, expect)
            t.copy_box(dst, r0, c0)
            ctx.copies.append((bar, nbytes, w))  # its bytes count when it lands (at a wait)
        return tma_load

    def tma_store(self, op: Op) -> Handler:
        t_id, r_id, c_id, v_id, _ = (v.id for v in op.operands)
        dt = op.operands[3].dtype
        ctx = self.ctx

        def tma_store(env: Env) -> None:
            t = env[t_id]
            if t.dt is not dt:
                raise TypeError(_where(op, ctx, "TMA store of another dtype") +
                                f"\n  '{t.name}' holds {t.dt} but the tile holds {dt}")
            r0, c0 = int(env[r_id]), int(env[c_id])
            _check_box(op, ctx, t, r0, c0, "store")
            # (the staging tile is the GPU's business: nothing reads it back)
            t.store_box(np.asarray(env[v_id]), r0, c0)
        return tma_store

    def smem_trans(self, op: Op) -> Handler:
        x_id, r = op.operands[0].id, op.result.id

        def smem_trans(env: Env) -> None:
            env[r] = env[x_id].T  # a view, like the stage views
        return smem_trans

    def mbar_wait(self, op: Op, gen: bool = False) -> Any:
        b_id, p_id = (v.id for v in op.operands)
        ctx, role, key = self.ctx, self.role, self.role.key

        if gen:
            def mbar_wait_g(env: Env) -> Iterator:
                bar, parity = env[b_id][()], int(env[p_id]) & 1
                while True:
                    ctx.land()
                    if bar.done(parity):
                        ctx.acquire(key, bar)
                        return
                    yield _Wait(op, bar, parity, role)
            return mbar_wait_g

        def mbar_wait(env: Env) -> None:  # one thread of control: nothing else can arrive
            bar, parity = env[b_id][()], int(env[p_id]) & 1
            ctx.land()
            if not bar.done(parity):
                raise _deadlock(ctx, [_Wait(op, bar, parity, role)])
            ctx.acquire(key, bar)
        return mbar_wait

    def mbar_arrive(self, op: Op) -> Handler:
        b_id, n, ctx, key = op.operands[0].id, self.role.count, self.ctx, self.role.key

        def mbar_arrive(env: Env) -> None:
            env[b_id][()].arrive(ctx, op, key, n)  # one arrival per warpgroup of the role
        return mbar_arrive

    def barrier(self, op: Op) -> Handler:
        return _nothing  # one thread per program

    def wgmma(self, op: Op) -> Handler:
        a_id, b_id, c_id = (v.id for v in op.operands)
        r = op.result.id
        pending = int(op.attrs.get("pending", 0))
        ctx, key = self.ctx, self.role.key

        a_smem, b_smem = (v.type.space == "smem" for v in op.operands[:2])

        def wgmma(env: Env) -> None:
            a, b = env[a_id], env[b_id]
            if a_smem:
                ctx.smem_read(op, a, key, "the A tile of this kit.mma", True)
            if b_smem:
                ctx.smem_read(op, b, key, "the B tile of this kit.mma", True)
            env[r] = env[c_id] + np.matmul(np.asarray(a, np.float32), np.asarray(b, np.float32))
            # wgmma.wait_group(pending): the newest `pending` groups of this role may still
            # read their shared tiles
            fl = ctx.inflight
            fl.append((op, a if a_smem else None, b if b_smem else None, key))
            mine = [i for i, e in enumerate(fl) if e[3] == key]
            for i in reversed(mine[:max(len(mine) - pending, 0)]):
                ctx.retire(fl.pop(i))
        return wgmma

    def load(self, op: Op) -> Handler:
        mem, ctx = self.mem, self.ctx
        dt = op.result.dtype
        mdt, nd = _mem_np(dt), _np(dt)
        if dt is bfloat16:
            def conv(raw):
                return (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)
        elif dt.is_bool():
            def conv(raw):
                return raw != 0
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

    def store(self, op: Op) -> Handler:
        mem, ctx = self.mem, self.ctx
        dt = op.operands[1].dtype
        mdt = _mem_np(dt)
        if dt is bfloat16:
            def conv(v):
                return (_bf16_bits(v) >> np.uint32(16)).astype(np.uint16)
        elif dt.is_bool():
            def conv(v):
                return np.asarray(v).astype(np.uint8)
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

    def for_(self, op: Op, gen: bool = False) -> Any:
        body = op.regions[0]
        lb_id, ub_id, st_id = (v.id for v in op.operands[:3])
        init_ids = [v.id for v in op.operands[3:]]
        iv = body.args[0]
        iv_id, ivt = iv.id, _np(iv.dtype).type
        carried = [a.id for a in body.args[1:]]
        yields = [v.id for v in body.terminator.operands] if body.terminator else []
        results = [r.id for r in op.results]
        loc = op.loc
        where = f"line {loc.line}" if loc else "?"
        name = iv.name or "the induction variable"
        errors = (OutOfBoundsError, RaceError, DeadlockError, MBarrierError)

        def bounds(env: Env) -> tuple[int, int, int]:
            lb, ub, st = int(env[lb_id]), int(env[ub_id]), int(env[st_id])
            if st == 0:
                raise ValueError(f"range() step is zero at {loc}")
            return lb, ub, st

        if gen:
            run = self.gblock(body)

            def for_g(env: Env) -> Iterator:
                lb, ub, st = bounds(env)
                vals = [env[i] for i in init_ids]
                i = lb
                try:
                    for i in range(lb, ub, st):
                        env[iv_id] = ivt(i)
                        for k, v in zip(carried, vals):
                            env[k] = v
                        for w in run(env):
                            w.in_loop(f"in the loop at {where}: {name} = {i} "
                                      f"(range({lb}, {ub}, {st}))")
                            yield w
                        vals = [env[y] for y in yields]
                except errors as e:
                    raise type(e)(f"{e.args[0]}\n  in the loop at {where}: {name} = {i} "
                                  f"(range({lb}, {ub}, {st}))") from None
                for k, v in zip(results, vals):
                    env[k] = v
            return for_g

        handlers = self.block(body)

        def for_(env: Env) -> None:
            lb, ub, st = bounds(env)
            vals = [env[i] for i in init_ids]
            i = lb
            try:
                for i in range(lb, ub, st):
                    env[iv_id] = ivt(i)
                    for k, v in zip(carried, vals):
                        env[k] = v
                    for h in handlers:
                        h(env)
                    vals = [env[y] for y in yields]
            except errors as e:
                # say which iteration: bugs are often at the edges
                raise type(e)(f"{e.args[0]}\n  in the loop at {where}: {name} = {i} "
                              f"(range({lb}, {ub}, {st}))") from None
            for k, v in zip(results, vals):
                env[k] = v
        return for_

    def if_(self, op: Op, gen: bool = False) -> Any:
        c_id = op.operands[0].id
        compile_ = self.gblock if gen else self.block
        branches = []
        for region in op.regions:
            hs = compile_(region)
            ys = [v.id for v in region.terminator.operands] if region.terminator else []
            branches.append((hs, ys))
        results = [r.id for r in op.results]

        if gen:
            while len(branches) < 2:
                branches.append((self.gblock(Block()), []))
            (then_g, then_y), (else_g, else_y) = branches

            def if_g(env: Env) -> Iterator:
                g, ys = (then_g, then_y) if env[c_id] else (else_g, else_y)
                yield from g(env)
                for k, y in zip(results, ys):
                    env[k] = env[y]
            return if_g

        while len(branches) < 2:
            branches.append(([], []))
        (then_h, then_y), (else_h, else_y) = branches

        def if_(env: Env) -> None:
            hs, ys = (then_h, then_y) if env[c_id] else (else_h, else_y)
            for h in hs:
                h(env)
            for k, y in zip(results, ys):
                env[k] = env[y]
        return if_


_HOPPER = frozenset({"smem_alloc", "smem_index", "smem_trans", "tma_load", "tma_store",
                     "mbar_wait", "mbar_arrive", "barrier", "wgmma"})


def _nothing(env: Env) -> None:
    pass


def _retiring(h: Handler, ctx: _Ctx, key: int) -> Handler:
    """`h` reads the result of an MMA: the compiler waits for every MMA the role (`key`)
    has in flight first."""
    def retire(env: Env) -> None:
        fl = ctx.inflight
        if fl:
            for e in fl:
                if e[3] == key:
                    ctx.retire(e)
            fl[:] = [e for e in fl if e[3] != key]
        h(env)
    return retire


def _par(ctx: _Ctx, kids: list[Iterator]) -> Iterator[_Stuck]:
    """Run coroutines round robin, each until it waits (yields) or ends; yield `_Stuck`
    after a round in which all of them waited and no mbarrier phase completed (then none
    can go on until something outside them completes one)."""
    live = list(kids)
    while live:
        events = ctx.events
        waits = []
        for kid in list(live):
            try:
                waits.append(next(kid))
            except StopIteration:
                live.remove(kid)
        if live and ctx.events == events:
            yield _Stuck(waits)


_PARITY_HINT = ("hint: the k-th phase of a barrier (k = 0, 1, ...) has parity k % 2; a fresh "
                "barrier is in phase 0, so waiting for parity 1 passes at once (a producer's "
                "first wait for a free stage) and waiting for parity 0 needs one completed "
                "phase")


def _deadlock(ctx: _Ctx, waits: list[_Wait]) -> DeadlockError:
    ctx.shape, ctx.lanes_total = (), 1

    def awaits(w: _Wait) -> str:
        b = w.bar
        s = (f"{b.name} to complete phase {b.phase} (parity {w.parity}), which still needs "
             f"{b.pending} of {b.init} arrival{'s' if b.init != 1 else ''}")
        if b.tx > 0:
            s += f" and {b.tx} bytes of TMA copies"
        elif b.tx < 0:
            s += f" (and {-b.tx} bytes landed without an expect_tx)"
        return s

    if len(waits) == 1 and waits[0].role.key == 0:
        w = waits[0]
        return DeadlockError(
            _where(w.op, ctx, "deadlock") + f"\n  this waits for {awaits(w)}; nothing else "
            "runs in this program (it has no roles) and every TMA load it issued has landed: "
            f"this would hang the GPU\n  {_PARITY_HINT}")
    msg = (f"deadlock in program {ctx.pid}: every role waits for an mbarrier phase that "
           "never completes; this would hang the GPU")
    for w in waits:
        loc = w.op.loc
        at = "(no source location)" if loc is None else \
            f"at {loc}" + (f" in '{loc.func}'" if loc.func else "")
        msg += f"\n  {w.role} {at} wait{'s' if w.role.count == 1 else ''} for {awaits(w)}"
        src = linecache.getline(loc.file, loc.line).strip() if loc else ""
        if src:
            msg += f"\n      {src}"
        for where in w.loops:
            msg += f"\n      {where}"
    return DeadlockError(msg + f"\n  {_PARITY_HINT}")


def _check_box(op: Op, ctx: _Ctx, t: _TmaTensor, r0: int, c0: int, what: str) -> None:
    """What makes the GPU stop a TMA copy with an illegal instruction (seen on an H200): a
    box whose first column is not a multiple of 16 bytes into a row, and, for stores, a box
    that starts at a negative row or column (loads read zeros there, stores trap)."""
    e = t.dt.itemsize
    if (c0 * e) % 16:
        ctx.shape, ctx.lanes_total = (), 1
        raise OutOfBoundsError(
            _where(op, ctx, f"misaligned TMA {what}") +
            f"\n  the box starts at column {c0} of '{t.name}', {c0 * e} bytes into a row; a "
            f"TMA box must start a multiple of 16 bytes into a row (a multiple of {16 // e} "
            f"{t.dt} elements), or the GPU stops the kernel with an illegal instruction")
    if what == "store" and (r0 < 0 or c0 < 0):
        ctx.shape, ctx.lanes_total = (), 1
        raise OutOfBoundsError(
            _where(op, ctx, "out-of-bounds TMA store") +
            f"\n  the box starts at ({r0}, {c0}) of '{t.name}': a TMA store may run past the "
            "end of a tensor (that part is dropped) but not start before it, or the GPU stops "
            "the kernel with an illegal instruction")


def _race(op: Op, mma: Op, ctx: _Ctx) -> None:
    ctx.shape, ctx.lanes_total = (), 1
    at = f" at {mma.loc}" if mma.loc else ""
    raise RaceError(
        _where(op, ctx, "race on shared memory") +
        f"\n  this TMA load overwrites shared memory that the kit.mma{at} (issued with "
        f"pending={mma.attrs.get('pending', 0)}) may still be reading"
        "\n  hint: issue the load after an MMA with a smaller `pending`, or add stages")


def _mma_values(fn: Function) -> frozenset[int]:
    """Values that may hold an MMA result: wgmma results and what loops and branches carry
    them to (an over-approximation: reading one retires every MMA in flight)."""
    vals: set[int] = set()
    ops = [op for op in fn.walk() if op.name in ("wgmma", "for", "if")]
    if not any(op.name == "wgmma" for op in ops):
        return frozenset()
    changed = True
    while changed:
        changed = False
        for op in ops:
            new: list[int] = []
            if op.name == "wgmma":
                new.append(op.result.id)
            elif op.name == "for":
                body = op.regions[0]
                ys = body.terminator.operands if body.terminator else []
                for k, (arg, r) in enumerate(zip(body.args[1:], op.results)):
                    if op.operands[3 + k].id in vals or (k < len(ys) and ys[k].id in vals):
                        new += [arg.id, r.id]
            else:
                for k, r in enumerate(op.results):
                    if any(g.terminator is not None and k < len(g.terminator.operands) and
                           g.terminator.operands[k].id in vals for g in op.regions):
                        new.append(r.id)
            for i in new:
                if i not in vals:
                    vals.add(i)
                    changed = True
    return frozenset(vals)


def _wrap(f: Callable, ids: list[int], r: int) -> Handler:
    """A closure that applies `f` to env slots `ids` and stores the result at `r`."""
    if len(ids) == 0:
        def h0(env: Env) -> None:
            env[r] = f()
        return h0
    if len(ids) == 1:
        a = ids[0]

        def h1(env: Env) -> None:
            env[r] = f(env[a])
        return h1
    if len(ids) == 2:
        a, b = ids

        def h2(env: Env) -> None:
            env[r] = f(env[a], env[b])
        return h2
    if len(ids) == 3:
        a, b, c = ids

        def h3(env: Env) -> None:
            env[r] = f(env[a], env[b], env[c])
        return h3

    def hn(env: Env) -> None:
        env[r] = f(*[env[i] for i in ids])
    return hn


# ----------------------------------------------------------------------------- entry point
def run(fn: Function, grid: tuple[int, int, int], args: list) -> None:
    """Run kernel `fn` on the CPU for every program of `grid` (x fastest).

    `args` line up with `fn.args`: torch tensors for pointer arguments (device tensors are
    copied to the CPU and back), Python numbers for the rest.
    """
    if len(args) != len(fn.args):
        names = ", ".join(v.name or "?" for v in fn.args)
        raise TypeError(f"kernel '{fn.name}' takes {len(fn.args)} run-time arguments "
                        f"({names}), got {len(args)}")
    g = tuple(int(x) for x in grid) + (1,) * (3 - len(grid))
    if len(g) != 3 or min(g) < 0:
        raise ValueError(f"grid must have 1 to 3 non-negative sizes, got {grid!r}")
    if any(op.name == "tma_load" and "expect" not in op.attrs for op in fn.walk()):
        # IR built without the pipeline (by hand): group its TMA loads as kit.jit does
        from kitjit.frontend.tma_groups import group_tma_loads

        group_tma_loads(fn)
    mem = _Memory(fn, args)
    try:
        with np.errstate(all="ignore"):
            _execute(fn, (g[0], g[1], g[2]), mem)
    finally:
        mem.write_back()


def _execute(fn: Function, grid: tuple[int, int, int], mem: _Memory) -> None:
    ctx = _Ctx(grid)
    comp = _Compiler(mem, ctx, _mma_values(fn), int(fn.attrs.get("num_warps", 4)))
    ctx.roles[0] = comp.role
    body = comp.block(fn.body)
    base: Env = {v.id: x for v, x in zip(fn.args, mem.values)}
    if grid[0] * grid[1] * grid[2] == 0:
        return
    for h in comp.hoisted:
        h(base)
    gx, gy, gz = grid
    for z in range(gz):
        for y in range(gy):
            for x in range(gx):
                ctx.start((x, y, z))
                env = dict(base)
                for h in body:
                    h(env)


"""The state of a kernel's lowering and the helpers that several op families share.

`LoweringBase` holds what every family's mixin reads and writes: the LLVM module and
builder, the registers of each tile value (`get`/`set`), the thread coordinates, the shared
memory plan, and `block()`, which lowers a region op by op through the registry
(`kitjit.ir.registry.lowering_of`). A helper lives here when more than one family calls it
(`sync`, `smem_ptr`, `to_mem`/`from_mem`, `shfl_xor`, `binary_fn`, `wgmma_wait`...) or when
`block()`/`lower()` itself needs it; a helper of one family stays in that family's module.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir

from kitjit.ir import ops, registry  # noqa: F401  (ops declares what block() dispatches)
from kitjit.ir.core import Block, Function, Value, walk_block
from kitjit.ir.layouts import LinearLayout
from kitjit.ir.types import DType, TileType

from ..axis_info import AxisAnalysis
from ..nvvm import BF16, F16, F32, F64, I1, I8, I32, SPTR, VOID, Intrinsics, asm, barrier, llvm_type


class LoweringError(Exception):
    pass


def _ctas_per_sm(fn: Function, num_warps: int) -> int:
    """CTAs of a kernel with roles that fit on one SM by the register budgets its
    `kit.setmaxnreg` calls give each warpgroup (a later call in a nested role wins).

    setmaxnreg moves registers within a CTA only (measured: a CTA whose consumers asked for
    more than its own producer gave back hung): the budgets must fit in what the CTA holds
    at entry, threads x the entry cap, and the cap shrinks with each CTA more per SM.
    Budgets that do not fit even once are a CompileError (the kernel would hang).
    Without setmaxnreg: 1 (the cap is then unused)."""
    regs: dict[int, int] = {}

    def walk(block: Block, first: int, count: int) -> None:
        for op in block.ops:
            if op.name == "setmaxnreg":
                for w in range(first, first + count):
                    regs[w] = op.attrs["count"]
            roles = op.attrs.get("roles") if op.name == "if" else None
            for i, region in enumerate(op.regions):
                f, c = roles[i] if roles else (first, count)
                walk(region, f, c)

    groups = max(1, num_warps // 4)
    walk(fn.body, 0, groups)
    if not regs:
        return 1

    def cap(ctas: int) -> int:
        return min(255, 65536 // (128 * groups * ctas)) // 8 * 8

    budget = sum(128 * regs.get(w, cap(1)) for w in range(groups))
    if budget > 128 * groups * cap(1):
        from kitjit.frontend.errors import CompileError

        raise CompileError(
            f"kernel '{fn.name}': the kit.setmaxnreg budgets add up to {budget} registers "
            f"but a CTA of {32 * num_warps} threads holds at most {128 * groups * cap(1)}; "
            "the warpgroups that ask for more would wait forever",
            hint="lower the counts (e.g. a producer at 24-40 and consumers at 232-240 for "
                 "three warpgroups)")
    ctas = 1
    while budget <= 128 * groups * cap(ctas + 1) and cap(ctas + 1) >= 24:
        ctas += 1
    return ctas


def _allocs_by_role(block: Block, role):
    """(smem_alloc op, the role it runs in: (first warpgroup, count) or None), pre-order."""
    for op in block.ops:
        if op.name == "smem_alloc":
            yield op, role
        roles = op.attrs.get("roles") if op.name == "if" else None
        for i, r in enumerate(op.regions):
            yield from _allocs_by_role(r, tuple(roles[i]) if roles else role)


def _lin(t: TileType) -> LinearLayout | None:
    if t.is_scalar:
        return None
    return t.layout.to_linear(t.shape)


class LoweringBase:
    """A kernel's lowering state and shared helpers; `Lowering` adds the families."""

    def __init__(self, fn: Function):
        self.fn = fn
        self.num_warps = fn.attrs["num_warps"]
        self.module = ir.Module(name=fn.name)
        self.module.triple = "nvptx64-nvidia-cuda"
        self.module.data_layout = "e-p6:32:32-i64:64-i128:128-v16:16-v32:32-n16:32:64"
        self.intr = Intrinsics(self.module)
        self.vals: dict[int, list[ir.Value]] = {}
        self.smem_bytes = 0
        self.role = None  # (first warpgroup, warpgroups) inside `if kit.warpgroup_id() ...`
        self.uses_setmaxnreg = False
        # wgmma results whose MMAs may still run; `groups` lists those issued since the last
        # region boundary in issue order (one commit group each), so that reading one waits
        # only for it and what is older (wait_group <newer groups>); values in flight from
        # before the boundary are read after a wait_group 0
        self.inflight: set[int] = set()
        self.groups: list[int] = []
        self.carried: set[int] = set()  # loop-carried values (for-loop body arguments)
        self.retired_here: set[int] = set()  # read early (wgmma_done) in the current block
        self.scratch_base = 0
        self.static_bytes = 0
        self.axis = AxisAnalysis(fn)
        self._smem = None

    # ------------------------------------------------------------------ entry
    def lower(self) -> ir.Module:
        fn = self.fn
        params = []
        for a in fn.args:
            if a.dtype.name == "tmadesc":
                params.append(ir.PointerType())  # byval [128 x i8], see llvm_ir()
            else:
                params.append(I32 if a.dtype.is_bool() else llvm_type(a.dtype))
        self.plan_shared()
        fty = ir.FunctionType(VOID, params)
        self.kernel = ir.Function(self.module, fty, fn.name)
        entry = self.kernel.append_basic_block("entry")
        self.b = ir.IRBuilder(entry)
        for a, p in zip(fn.args, self.kernel.args):
            p.name = a.name
            v = p
            if a.dtype.is_bool():
                v = self.b.icmp_unsigned("!=", p, ir.Constant(I32, 0))
            self.vals[a.id] = [v]
        tid = self.intr.sreg(self.b, "tid.x")
        self.tid = self.tid_abs = tid
        self.total_warps = self.num_warps
        self.ctas_per_sm = _ctas_per_sm(fn, self.num_warps)
        self.role_bar = 0
        self.next_bar = 0
        self.lane = self.b.and_(tid, ir.Constant(I32, 31), name="lane")
        self.warp = self.b.lshr(tid, ir.Constant(I32, 5), name="warp")
        if self.static_bytes:
            # tiles start 1024-byte aligned: the 128-byte swizzle is a function of address bits
            base = self.b.ptrtoint(self.smem, I32)
            self.static_base = self.b.and_(self.b.add(base, self.c32(1023)), self.c32(-1024))
        self.has_tma_store = False
        self.block(fn.body)
        if self.has_tma_store:  # shared memory must outlive the bulk stores reading it
            asm(self.b, VOID, "@$0 cp.async.bulk.wait_group.read 0;", "b,~{memory}",
                [self.thread0()])
        self.b.ret_void()
        md = self.module.add_named_metadata("nvvm.annotations")
        md.add(self.module.add_metadata([self.kernel, "kernel", ir.Constant(I32, 1)]))
        md.add(self.module.add_metadata([self.kernel, "maxntidx",
                                         ir.Constant(I32, 32 * self.num_warps)]))
        if fn.attrs.get("maxnreg"):  # the maxnreg= launch option: .maxnreg in the entry
            md.add(self.module.add_metadata([self.kernel, "maxnreg",
                                             ir.Constant(I32, fn.attrs["maxnreg"])]))
        if self.uses_setmaxnreg:  # setmaxnreg needs a register cap at entry
            md.add(self.module.add_metadata([self.kernel, "minctasm",
                                             ir.Constant(I32, self.ctas_per_sm)]))
        return self.module

    @property
    def smem(self) -> ir.GlobalVariable:
        if self._smem is None:
            g = ir.GlobalVariable(self.module, ir.ArrayType(I8, 0), "kitjit_smem", addrspace=3)
            g.type = SPTR  # opaque pointer, so typed loads/stores through geps check
            g.linkage = "external"
            g.align = 16
            self._smem = g
        return self._smem

    def need_smem(self, nbytes: int) -> None:
        self.smem_bytes = max(self.smem_bytes, self.scratch_base + nbytes)

    def plan_shared(self) -> None:
        """Offsets of the kernel's shared tiles and mbarriers (static, from 1024-aligned base);
        scratch for reductions and conversions goes after them."""
        self.alloc_offset: dict[int, int] = {}

        def size_of(op) -> int:
            t = op.result.type
            return t.numel * (8 if t.dtype.name == "mbarrier" else t.dtype.itemsize)

        # the staging tiles of a role's TMA stores share one region (each store waits until
        # the bulk copies before it have read theirs: kit.tma_store's lowering)
        allocs = list(_allocs_by_role(self.fn.body, None))
        staging: dict = {}
        for op, role in allocs:
            if op.attrs.get("staging"):
                staging[role] = max(staging.get(role, 0), size_of(op))
        placed: dict = {}
        off = 0
        for op, role in allocs:
            if op.attrs.get("staging") and role in placed:
                self.alloc_offset[op.result.id] = placed[role]
                continue
            size = staging[role] if op.attrs.get("staging") else size_of(op)
            align = 8 if op.result.type.dtype.name == "mbarrier" else 1024
            off = (off + align - 1) // align * align
            self.alloc_offset[op.result.id] = off
            if op.attrs.get("staging"):
                placed[role] = off
            off += size
        self.static_bytes = off
        self.scratch_base = (1024 + off + 15) // 16 * 16 if off else 0
        self.smem_bytes = self.scratch_base

    def llvm_ir(self) -> str:
        """The module's text, with TMA descriptor parameters made `byval` grid constants
        (llvmlite cannot spell the byval type)."""
        text = str(self.lower())
        descs = [i for i, a in enumerate(self.fn.args) if a.dtype.name == "tmadesc"]
        if not descs:
            return text
        for i in descs:
            name = self.fn.args[i].name
            text = text.replace(f'ptr %"{name}"', f'ptr byval([128 x i8]) align 64 %"{name}"', 1)
        idx = ", ".join(f"i32 {i + 1}" for i in descs)
        md = f'!{{ptr @"{self.fn.name}", !"grid_constant", !{{{idx}}}}}'
        return text.replace("!nvvm.annotations = !{", "!nvvm.annotations = !{ !99999,", 1) \
            + f"\n!99999 = {md}\n"

    # ------------------------------------------------------------------ helpers
    def get(self, v: Value) -> list[ir.Value]:
        return self.vals[v.id]

    def set(self, v: Value, regs: list[ir.Value]) -> None:
        if not v.type.is_scalar:
            lin = _lin(v.type)
            if len(regs) != lin.nregs:
                raise LoweringError(f"internal: {len(regs)} registers for {v.type}")
        self.vals[v.id] = list(regs)

    def c32(self, x: int) -> ir.Constant:
        return ir.Constant(I32, x)

    def const(self, dt: DType, x) -> ir.Constant:
        t = llvm_type(dt)
        if dt.is_floating():
            x = float(x)
            if dt.bits == 16:  # beyond the 16-bit range rounds to inf, as a cast would
                import numpy as np

                with np.errstate(over="ignore"):
                    x = float(np.float16(x)) if dt.name == "fp16" else \
                        float(np.float32(x)) if abs(x) < 3.4e38 else x * float("inf")
                if dt.name == "bf16" and abs(x) >= 3.3961775292304087e38:
                    x = float("inf") if x > 0 else float("-inf")
            return ir.Constant(t, x)
        if dt.is_bool():
            return ir.Constant(I1, int(bool(x)))
        return ir.Constant(t, int(x) & ((1 << dt.bits) - 1))

    def thread_coord(self, lin: LinearLayout, dim: int) -> ir.Value:
        """The lane/warp part of this thread's coordinate along `dim`."""
        terms = sorted(lin.thread_terms(dim))
        b = self.b
        total = None
        runs: list[list] = []
        for src, bit, val in terms:
            if runs and runs[-1][0] == src and runs[-1][1] + runs[-1][3] == bit and \
                    runs[-1][2] << runs[-1][3] == val:
                runs[-1][3] += 1
            else:
                runs.append([src, bit, val, 1])
        for src, bit, val, n in runs:
            base = self.lane if src == "lane" else self.warp
            x = b.lshr(base, self.c32(bit)) if bit else base
            x = b.and_(x, self.c32((1 << n) - 1))
            sh = int(math.log2(val))
            if sh:
                x = b.shl(x, self.c32(sh))
            total = x if total is None else b.or_(total, x)
        return total if total is not None else self.c32(0)

    def thread_index(self, lin: LinearLayout, strides: list[int]) -> ir.Value:
        idx = None
        for d, s in enumerate(strides):
            c = self.thread_coord(lin, d)
            if isinstance(c, ir.Constant) and c.constant == 0:
                continue
            t = self.b.mul(c, self.c32(s)) if s != 1 else c
            idx = t if idx is None else self.b.add(idx, t)
        return idx if idx is not None else self.c32(0)

    def to_f32(self, x: ir.Value) -> ir.Value:
        if x.type in (F16, BF16):
            return self.b.fpext(x, F32)
        return x

    def from_f32(self, x: ir.Value, t: ir.Type) -> ir.Value:
        if t in (F16, BF16):
            return self.b.fptrunc(x, t)
        return x

    def thread0(self) -> ir.Value:
        return self.b.icmp_unsigned("==", self.tid, self.c32(0))

    # ------------------------------------------------------------------ shared memory and barriers
    def smem_ptr(self, elem_index: ir.Value, e: int) -> ir.Value:
        byte = self.b.mul(elem_index, self.c32(e)) if e != 1 else elem_index
        if self.scratch_base:
            byte = self.b.add(byte, self.c32(self.scratch_base))
        return self.b.gep(self.smem, [byte], source_etype=I8)

    def to_mem(self, v, dt: DType):
        return self.b.zext(v, I8) if dt.is_bool() else v

    def from_mem(self, v, dt: DType):
        return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if dt.is_bool() else v

    def sync(self) -> None:
        """bar.sync for the CTA, or a named barrier for the threads of the current role."""
        if self.role is None:
            barrier(self.b)
        else:
            asm(self.b, VOID, f"bar.sync {self.role_bar}, {128 * self.role[1]};", "~{memory}",
                [])

    # ------------------------------------------------ shared by several families
    def shfl_xor(self, v, mask: int):
        b = self.b
        t = v.type
        f = self.intr.get("llvm.nvvm.shfl.sync.bfly.i32", I32, [I32, I32, I32, I32])

        def sh(x):
            return b.call(f, [self.c32(-1), x, self.c32(mask), self.c32(0x1F)])
        bits = _bits(t)
        if bits == 64:
            pair = b.bitcast(v, ir.VectorType(I32, 2))
            lo = sh(b.extract_element(pair, self.c32(0)))
            hi = sh(b.extract_element(pair, self.c32(1)))
            pair = b.insert_element(ir.Constant(ir.VectorType(I32, 2), ir.Undefined), lo,
                                    self.c32(0))
            pair = b.insert_element(pair, hi, self.c32(1))
            return b.bitcast(pair, t)
        if bits == 32:
            return sh(v) if t == I32 else b.bitcast(sh(b.bitcast(v, I32)), t)
        it = ir.IntType(bits)
        x = b.bitcast(v, it) if t != it else v
        r = b.trunc(sh(b.zext(x, I32)), it)
        return b.bitcast(r, t) if t != it else r

    def binary_fn(self, name: str, dt: DType):
        b = self.b
        if dt.is_floating():
            t = llvm_type(dt)

            def wrap(g):
                if t in (F16, BF16):
                    return lambda x, y: self.from_f32(g(self.to_f32(x), self.to_f32(y)), t)
                return g

            # 'contract': a multiply feeding an add may become one FFMA (one rounding), as
            # nvcc's default --fmad=true and Triton's enable_fp_fusion do
            fl = {
                "add": lambda x, y: b.fadd(x, y, flags=("contract",)),
                "sub": lambda x, y: b.fsub(x, y, flags=("contract",)),
                "mul": lambda x, y: b.fmul(x, y, flags=("contract",)), "mod": b.frem,
                # like Triton's `/`: div.full.f32 (2 ulp, no slow path); fp64 stays exact
                "div": (lambda x, y: asm(b, F32, "div.full.f32 $0, $1, $2;", "=f,f,f", [x, y],
                                         side_effect=False)) if t in (F32, F16, BF16)
                else b.fdiv,
                "floordiv": lambda x, y: self.call_math("floor", b.fdiv(x, y)),
                "minimum": lambda x, y: self.minmax("minnum", x, y),
                "maximum": lambda x, y: self.minmax("maxnum", x, y),
            }
            if name not in fl:
                raise LoweringError(f"'{name}' on {dt}")
            return wrap(fl[name])
        signed = dt.is_int_signed()
        ints = {
            "add": b.add, "sub": b.sub, "mul": b.mul,
            "floordiv": b.sdiv if signed else b.udiv,
            "mod": b.srem if signed else b.urem,
            "and": b.and_, "or": b.or_, "xor": b.xor,
            "shl": lambda x, y: self.shift(b.shl, x, y, False),
            "shr": (lambda x, y: self.shift(b.ashr, x, y, True)) if signed else
                   (lambda x, y: self.shift(b.lshr, x, y, False)),
            "minimum": lambda x, y: b.select(
                (b.icmp_signed if signed else b.icmp_unsigned)("<", x, y), x, y),
            "maximum": lambda x, y: b.select(
                (b.icmp_signed if signed else b.icmp_unsigned)(">", x, y), x, y),
        }
        if name in ("floordiv", "mod"):
            op = ints[name]
            zero = ir.Constant(llvm_type(dt), 0)
            one = ir.Constant(llvm_type(dt), 1)

            def safe(x, y):  # x / 0 is undefined in LLVM: keep it defined (any value)
                nz = b.icmp_unsigned("!=", y, zero)
                return op(x, b.select(nz, y, one))
            return safe
        return ints[name]

    def shift(self, op, x, y, arithmetic: bool):
        """x shifted by y, defined for every y as the interpreter defines it (LLVM: poison
        when y >= the width; Triton leaves it undefined): an amount past the width (a
        negative one too, read unsigned) gives 0, or the sign for an arithmetic right
        shift. A constant amount folds the select away."""
        b = self.b
        width = ir.Constant(x.type, x.type.width)
        inside = b.icmp_unsigned("<", y, width)
        if arithmetic:
            return op(x, b.select(inside, y, ir.Constant(x.type, x.type.width - 1)))
        # the amount clamped to the width first: NVPTX folds the select into PTX's shr/shl
        # (which give 0 past the width) but passes it only the amount's low 32 bits
        clamped = b.select(inside, y, width)
        return b.select(inside, op(x, clamped), ir.Constant(x.type, 0))

    def minmax(self, which: str, x, y):
        t = x.type
        f = self.intr.get(f"llvm.{which}.{t.intrinsic_name}", t, [t, t])
        return self.b.call(f, [x, y])

    def call_math(self, name: str, x):
        t = x.type
        f = self.intr.get(f"llvm.{name}.{t.intrinsic_name}", t, [t])
        return self.b.call(f, [x])

    # ------------------------------------------------ wgmma accumulators in flight
    def wgmma_wait(self, v: Value, pending: int) -> None:
        """wgmma.wait_group with the accumulator registers tied through, so nothing reads them
        before the MMAs that write them have finished."""
        regs = self.get(v)
        n = len(regs)
        ret = ir.LiteralStructType([F32] * n)
        r = asm(self.b, ret, f"wgmma.wait_group.sync.aligned {pending};",
                ",".join(["=f"] * n + [str(i) for i in range(n)]) + ",~{memory}", regs)
        self.vals[v.id] = [self.b.extract_value(r, i) for i in range(n)]
        if pending == 0:
            self.inflight.discard(v.id)

    def wgmma_done(self, v: Value) -> None:
        """Wait until the MMA group that writes `v` has finished (and those before it): the
        groups issued after it, in this stretch of straight-line code, may go on running
        (`a = kit.mma(..., pending=1); b = kit.mma(..., pending=1); f(a)` overlaps b with f)."""
        if v.id in self.groups:
            newer = len(self.groups) - 1 - self.groups.index(v.id)
        elif v.id in self.carried and self.groups:
            # a loop-carried accumulator (the previous iteration's MMA) is older than every
            # group of this stretch: block-scaled fp8 adds the last K-block's partial while
            # the next one runs. (Values from before other region boundaries still wait for
            # everything: the same rule would move existing kernels' waits, unmeasured.)
            newer = len(self.groups)
        else:
            newer = 0
        self.wgmma_wait(v, newer)
        # complete only below this wait: the enclosing block() puts it back in flight (with
        # its registers from before) for the code that this block does not dominate
        self.retired_here.add(v.id)
        self.inflight.discard(v.id)
        if v.id in self.groups:
            self.groups.remove(v.id)

    # ------------------------------------------------------------------ blocks
    def block(self, block: Block) -> list[list[ir.Value]] | None:
        # a value read early (wait_group n > 0, wgmma_done) inside this block is complete
        # only where the block ran: an if branch or a loop of zero trips may not, so after
        # it the value is in flight again, with its registers from before it (a tie inside
        # dominates neither the if's other branch nor the code after the if or loop), and
        # back in `groups`, so that a later read waits for as few groups as before
        entry, outer = set(self.inflight), self.retired_here
        saved = {i: self.vals[i] for i in entry if i in self.vals}
        groups = list(self.groups)
        self.retired_here = set()
        try:
            return self._block_ops(block)
        finally:
            back = entry & self.retired_here
            self.inflight |= back
            for i in back & saved.keys():
                self.vals[i] = saved[i]
            if back:
                self.groups = [g for g in groups if g in self.inflight] + \
                    [g for g in self.groups if g not in groups]
            self.retired_here |= outer

    def _block_ops(self, block: Block) -> list[list[ir.Value]] | None:
        for i, op in enumerate(block.ops):
            self.later_ops = block.ops[i + 1:]   # (ampere.py's copies look ahead)
            if op.name == "yield":
                return [self.get(v) for v in op.operands]
            if self.inflight and op.name not in ("wgmma", "for"):
                for v in op.operands:
                    if v.id in self.inflight:
                        self.wgmma_done(v)
            fn = registry.lowering_of(op.name)
            if fn is None:
                raise LoweringError(f"no lowering for op '{op.name}'")
            # MMAs issued inside a region: their order is not known here
            mmas = op.regions and any(o.name == "wgmma" for r in op.regions
                                      for o in walk_block(r))
            if mmas:
                self.groups = []
            fn(self, op)
            if mmas:
                self.groups = []
        return None


def _bits(t: ir.Type) -> int:
    if isinstance(t, ir.IntType):
        return t.width
    if t in (F16, BF16):
        return 16
    if t is F32 or t == F32:
        return 32
    if t is F64 or t == F64:
        return 64
    if isinstance(t, ir.PointerType):
        return 64
    raise LoweringError(f"bits of {t}")

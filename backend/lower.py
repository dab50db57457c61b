"""Tile IR (with layouts) -> LLVM IR in NVVM form.

Each tile value becomes, in every thread, the list of LLVM values for the registers that
thread owns under the tile's layout (`LinearLayout`); a scalar is a list of one. Ops are
unrolled over those lists. Where data must cross threads - reductions, layout conversions,
mma operands - the lowering matches element coordinates between layouts: a register's
coordinate is its register-bit part (a compile-time constant) plus a lane/warp part
(computed once from the thread id). `for` and `if` become LLVM control flow whose phis carry
the lists.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir

from kitjit.ir import ops as O
from kitjit.ir.core import Block, Function, Op, Value
from kitjit.ir.layouts import LinearLayout, axis_vec
from kitjit.ir.types import DType, TileType

from .axis_info import AxisAnalysis, vector_width
from .nvvm import (
    BF16,
    F16,
    F32,
    F64,
    GPTR,
    I1,
    I8,
    I16,
    I32,
    I64,
    SPTR,
    VOID,
    Intrinsics,
    asm,
    barrier,
    llvm_type,
    mem_type,
)

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


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


def _lin(t: TileType) -> LinearLayout | None:
    if t.is_scalar:
        return None
    return t.layout.to_linear(t.shape)


class Lowering:
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
        self.inflight: set[int] = set()
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
        off = 0
        self.alloc_offset: dict[int, int] = {}
        for op in self.fn.walk():
            if op.name == "smem_alloc":
                t = op.result.type
                size = t.numel * (8 if t.dtype.name == "mbarrier" else t.dtype.itemsize)
                align = 8 if t.dtype.name == "mbarrier" else 1024
                off = (off + align - 1) // align * align
                self.alloc_offset[op.result.id] = off
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

    # ------------------------------------------------------------------ blocks
    def block(self, block: Block) -> list[list[ir.Value]] | None:
        for op in block.ops:
            if op.name == "yield":
                return [self.get(v) for v in op.operands]
            if self.inflight and op.name not in ("wgmma", "for"):
                for v in op.operands:
                    if v.id in self.inflight:
                        self.wgmma_wait(v, 0)
            meth = getattr(self, "op_" + op.name, None)
            if meth is None:
                if op.name in O.BINARY:
                    meth = self.op_binary
                elif op.name in O.UNARY:
                    meth = self.op_unary
                else:
                    raise LoweringError(f"no lowering for op '{op.name}'")
            meth(op)
        return None

    # ------------------------------------------------------------------ creation
    def op_constant(self, op: Op) -> None:
        self.set(op.result, [self.const(op.result.dtype, op.attrs["value"])])

    def op_program_id(self, op: Op) -> None:
        self.set(op.result, [self.intr.sreg(self.b, "ctaid." + "xyz"[op.attrs["axis"]])])

    def op_num_programs(self, op: Op) -> None:
        self.set(op.result, [self.intr.sreg(self.b, "nctaid." + "xyz"[op.attrs["axis"]])])

    def op_arange(self, op: Op) -> None:
        lin = _lin(op.result.type)
        base = self.b.add(self.thread_coord(lin, 0), self.c32(op.attrs["start"]))
        self.set(op.result, [self.b.add(base, self.c32(c[0])) if c[0] else base
                             for c in lin.reg_coords()])

    def op_splat(self, op: Op) -> None:
        (s,) = self.get(op.operands[0])
        n = _lin(op.result.type).nregs
        self.set(op.result, [s] * n)

    def op_expand_dims(self, op: Op) -> None:
        src = self.get(op.operands[0])
        if op.operands[0].type.is_scalar:
            self.set(op.result, src * _lin(op.result.type).nregs)
            return
        self.set(op.result, src)

    def op_broadcast(self, op: Op) -> None:
        x = op.operands[0]
        src = self.get(x)
        ls, ld = _lin(x.type), _lin(op.result.type)
        grow = [i for i, (a, b) in enumerate(zip(x.shape, op.result.shape)) if a != b]
        idx = ls.reg_index()
        out = []
        for c in ld.reg_coords():
            p = tuple(0 if i in grow else v for i, v in enumerate(c))
            if p not in idx:
                raise LoweringError(f"internal: broadcast {x.type} -> {op.result.type}")
            out.append(src[idx[p]])
        self.set(op.result, out)

    def op_convert_layout(self, op: Op) -> None:
        x = op.operands[0]
        src = self.get(x)
        ls, ld = _lin(x.type), _lin(op.result.type)
        if ls.lane == ld.lane and ls.warp == ld.warp:
            idx = ls.reg_index()
            self.set(op.result, [src[idx[c]] for c in ld.reg_coords()])
            return
        self.set(op.result, self.through_smem(src, x.type, ls, ld))

    def through_smem(self, src, t: TileType, ls: LinearLayout, ld: LinearLayout):
        """Every thread writes its registers at their row-major place in shared memory, then
        reads the registers its new layout gives it."""
        shape = t.shape
        strides = [1] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            strides[d] = strides[d + 1] * shape[d + 1]
        mt = mem_type(t.dtype)
        e = t.dtype.itemsize
        self.need_smem(t.numel * e)
        b = self.b
        self.sync()
        base_s = self.thread_index(ls, strides)
        for c, v in zip(ls.reg_coords(), src):
            off = sum(x * s for x, s in zip(c, strides))
            p = self.smem_ptr(b.add(base_s, self.c32(off)), e)
            b.store(self.to_mem(v, t.dtype), p)
        self.sync()
        base_d = self.thread_index(ld, strides)
        out = []
        for c in ld.reg_coords():
            off = sum(x * s for x, s in zip(c, strides))
            p = self.smem_ptr(b.add(base_d, self.c32(off)), e)
            out.append(self.from_mem(b.load(p, typ=mt), t.dtype))
        return out

    def smem_ptr(self, elem_index: ir.Value, e: int) -> ir.Value:
        byte = self.b.mul(elem_index, self.c32(e)) if e != 1 else elem_index
        if self.scratch_base:
            byte = self.b.add(byte, self.c32(self.scratch_base))
        return self.b.gep(self.smem, [byte], source_etype=I8)

    def to_mem(self, v, dt: DType):
        return self.b.zext(v, I8) if dt.is_bool() else v

    def from_mem(self, v, dt: DType):
        return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if dt.is_bool() else v

    # ------------------------------------------------------------------ elementwise
    def op_binary(self, op: Op) -> None:
        a, c = self.get(op.operands[0]), self.get(op.operands[1])
        dt = op.operands[0].dtype
        f = self.binary_fn(op.name, dt)
        self.set(op.result, [f(x, y) for x, y in zip(a, c)])

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
            "and": b.and_, "or": b.or_, "xor": b.xor, "shl": b.shl,
            "shr": b.ashr if signed else b.lshr,
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

    def minmax(self, which: str, x, y):
        t = x.type
        f = self.intr.get(f"llvm.{which}.{t.intrinsic_name}", t, [t, t])
        return self.b.call(f, [x, y])

    def call_math(self, name: str, x):
        t = x.type
        f = self.intr.get(f"llvm.{name}.{t.intrinsic_name}", t, [t])
        return self.b.call(f, [x])

    def approx(self, instr: str, x):
        return asm(self.b, F32, f"{instr} $0, $1;", "=f,f", [x], side_effect=False)

    def op_cmp(self, op: Op) -> None:
        a, c = self.get(op.operands[0]), self.get(op.operands[1])
        dt = op.operands[0].dtype
        sym = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}[
            op.attrs["pred"]]
        b = self.b
        if dt.is_floating():
            if sym == "!=":
                f = lambda x, y: b.fcmp_unordered("!=", x, y)  # noqa: E731
            else:
                f = lambda x, y: b.fcmp_ordered(sym, x, y)  # noqa: E731
        elif dt.is_int_signed():
            f = lambda x, y: b.icmp_signed(sym, x, y)  # noqa: E731
        else:
            f = lambda x, y: b.icmp_unsigned(sym, x, y)  # noqa: E731
        self.set(op.result, [f(x, y) for x, y in zip(a, c)])

    def op_unary(self, op: Op) -> None:
        xs = self.get(op.operands[0])
        dt = op.operands[0].dtype
        b = self.b
        name = op.name
        t = llvm_type(dt)
        if name == "neg":
            out = [b.fneg(x) if dt.is_floating() else b.neg(x) for x in xs]
        elif name == "not":
            out = [b.xor(x, ir.Constant(I1, 1)) for x in xs]
        elif name == "invert":
            out = [b.xor(x, ir.Constant(t, -1)) for x in xs]
        elif name == "abs":
            if dt.is_floating():
                out = [self.call_math("fabs", x) for x in xs]
            else:
                out = [b.select(b.icmp_signed("<", x, ir.Constant(t, 0)), b.neg(x), x)
                       for x in xs]
        else:
            out = [self.float_math(name, x, t, op.attrs.get("ftz", False)) for x in xs]
        self.set(op.result, out)

    def float_math(self, name: str, x, t, ftz: bool = False):
        b = self.b
        if t is F64:
            if name in ("sqrt", "floor", "ceil"):
                return self.call_math(name, x)
            raise LoweringError(f"{name} on fp64")
        y = self.to_f32(x)
        # without .ftz, ptxas wraps MUFU.EX2 in a range check and two multiplies to get
        # subnormal results right; kit.exp2(x, ftz=True) is the bare instruction
        ex2 = "ex2.approx.ftz.f32" if ftz else "ex2.approx.f32"
        if name == "exp":
            r = self.approx(ex2, b.fmul(y, ir.Constant(F32, LOG2E)))
        elif name == "exp2":
            r = self.approx(ex2, y)
        elif name == "log":
            r = b.fmul(self.approx("lg2.approx.f32", y), ir.Constant(F32, LN2))
        elif name == "log2":
            r = self.approx("lg2.approx.f32", y)
        elif name in ("sqrt", "floor", "ceil"):
            r = self.call_math(name, y)
        elif name == "rsqrt":
            r = self.approx("rsqrt.approx.f32", y)
        elif name == "sin":
            r = self.approx("sin.approx.f32", y)
        elif name == "cos":
            r = self.approx("cos.approx.f32", y)
        elif name == "sigmoid":
            e = self.approx("ex2.approx.f32", b.fmul(y, ir.Constant(F32, -LOG2E)))
            r = b.fdiv(ir.Constant(F32, 1.0), b.fadd(ir.Constant(F32, 1.0), e))
        else:
            raise LoweringError(f"no lowering for {name}")
        return self.from_f32(r, t)

    def op_cast(self, op: Op) -> None:
        src, dst = op.operands[0].dtype, op.result.dtype
        f = self.cast_fn(src, dst)
        self.set(op.result, [f(x) for x in self.get(op.operands[0])])

    def cast_fn(self, src: DType, dst: DType):
        b = self.b
        ts, td = llvm_type(src), llvm_type(dst)
        if dst.is_bool():
            if src.is_floating():
                return lambda x: b.fcmp_unordered("!=", x, ir.Constant(ts, 0.0))
            return lambda x: b.icmp_unsigned("!=", x, ir.Constant(ts, 0))
        if src.is_floating() and dst.is_floating():
            if src.bits == dst.bits:  # fp16 <-> bf16 through fp32
                return lambda x: b.fptrunc(b.fpext(x, F32), td)
            return (lambda x: b.fpext(x, td)) if dst.bits > src.bits else \
                (lambda x: b.fptrunc(x, td))
        if src.is_floating():
            return (lambda x: b.fptosi(x, td)) if dst.is_int_signed() else \
                (lambda x: b.fptoui(x, td))
        if dst.is_floating():
            if src.is_int_signed():
                return lambda x: b.sitofp(x, td)
            return lambda x: b.uitofp(x, td)
        if dst.bits == src.bits:
            return lambda x: x
        if dst.bits < src.bits:
            return lambda x: b.trunc(x, td)
        if src.is_int_signed():
            return lambda x: b.sext(x, td)
        return lambda x: b.zext(x, td)

    def op_select(self, op: Op) -> None:
        c, x, y = (self.get(v) for v in op.operands)
        self.set(op.result, [self.b.select(p, u, w) for p, u, w in zip(c, x, y)])

    def op_addptr(self, op: Op) -> None:
        p, o = self.get(op.operands[0]), self.get(op.operands[1])
        et = mem_type(op.result.dtype.element_ty)
        self.set(op.result, [self.b.gep(x, [y], source_etype=et) for x, y in zip(p, o)])

    # ------------------------------------------------------------------ memory
    def run_and_width(self, lin: LinearLayout, ptr: Value, mask: Value | None,
                      dim: int) -> tuple[int, int]:
        """(register bits a thread holds consecutively along `dim`, the widest access in
        elements that the pointers' contiguity and alignment and the mask's constancy
        allow there)."""
        rank = len(ptr.shape)
        run = 0
        while run < len(lin.reg) and lin.reg[run] == axis_vec(rank, dim, 1 << run):
            run += 1
        want = vector_width(self.axis[ptr], dim, ptr.dtype.element_ty.itemsize)
        if mask is not None:
            k = self.axis[mask].const[dim]
            while want > 1 and k % want:
                want //= 2
        return run, want

    def access_plan(self, ptr: Value, mask: Value | None) -> tuple[int, int]:
        """(dim, vector width) for a load/store through the tile of pointers `ptr`."""
        if ptr.type.is_scalar:
            return 0, 1
        lin = _lin(ptr.type)
        best = (0, 1)
        for dim in range(len(ptr.shape)):
            run, want = self.run_and_width(lin, ptr, mask, dim)
            v = min(1 << run, want) if run else 1
            if v > best[1]:
                best = (dim, v)
        return best

    def op_load(self, op: Op) -> None:
        ptrv = op.operands[0]
        mask = op.operands[1] if op.attrs.get("has_mask") else None
        other = op.operands[2] if op.attrs.get("has_other") else None
        ptrs = self.get(ptrv)
        masks = self.get(mask) if mask is not None else None
        others = self.get(other) if other is not None else None
        dt = op.result.dtype
        _, V = self.access_plan(ptrv, mask)
        out: list[ir.Value] = []
        for g in range(0, len(ptrs), V):
            m = masks[g] if masks is not None else None
            o = others[g:g + V] if others is not None else None
            out += self.load_vec(ptrs[g], m, o, dt, V)
        self.set(op.result, out)

    def word_plan(self, dt: DType, V: int) -> tuple[int, ir.IntType, str, str]:
        """How V elements travel as PTX registers: (count, type, constraint, width)."""
        nbytes = V * dt.itemsize
        if nbytes >= 4:
            return nbytes // 4, I32, "r", "b32"
        if nbytes == 2:
            return 1, I16, "h", "b16"
        return 1, I16, "h", "u8"

    def load_vec(self, ptr, mask, others, dt: DType, V: int) -> list[ir.Value]:
        b = self.b
        mt = mem_type(dt)
        if mask is None:
            vt = ir.VectorType(mt, V) if V > 1 else mt
            x = b.load(ptr, typ=vt, align=V * dt.itemsize)
            vals = [b.extract_element(x, self.c32(i)) for i in range(V)] if V > 1 else [x]
            return [self.from_mem(v, dt) for v in vals]
        n, wt, reg, width = self.word_plan(dt, V)
        outs = ", ".join(f"${i}" for i in range(n))
        outs = f"{{{outs}}}" if n > 1 else outs
        vec = f".v{n}" if n > 1 else ""
        args = [ptr, mask]
        cons = [f"={reg}"] * n + ["l", "b"]
        text = []
        if others is not None:
            for i, w in enumerate(self.pack(others, dt, V)):
                text.append(f"mov.b{wt.width} ${i}, ${n + 2 + i};")
                args.append(w)
                cons.append(reg)
        else:
            text += [f"mov.b{wt.width} ${i}, 0;" for i in range(n)]
        text.append(f"@${n + 1} ld.global{vec}.{width} {outs}, [${n}];")
        ret = ir.LiteralStructType([wt] * n) if n > 1 else wt
        r = asm(b, ret, " ".join(text), ",".join(cons), args)
        words = [b.extract_value(r, i) for i in range(n)] if n > 1 else [r]
        return [self.from_mem(v, dt) for v in self.unpack(words, dt, V)]

    def pack(self, vals, dt: DType, V: int) -> list[ir.Value]:
        """V element values -> the words of `word_plan` holding their bytes."""
        b = self.b
        mt = mem_type(dt)
        vals = [self.to_mem(v, dt) for v in vals]
        n, wt, _, _ = self.word_plan(dt, V)
        e = dt.itemsize
        if e == 8:
            words = []
            for v in vals:
                pair = b.bitcast(v, ir.VectorType(I32, 2))
                words += [b.extract_element(pair, self.c32(i)) for i in range(2)]
            return words
        if V * e == 1:
            return [b.zext(vals[0], I16)]
        per = V // n
        words = []
        for w in range(n):
            chunk = vals[w * per:(w + 1) * per]
            if per == 1:
                words.append(b.bitcast(chunk[0], wt))
                continue
            vec = ir.Constant(ir.VectorType(mt, per), ir.Undefined)
            for i, v in enumerate(chunk):
                vec = b.insert_element(vec, v, self.c32(i))
            words.append(b.bitcast(vec, wt))
        return words

    def unpack(self, words, dt: DType, V: int) -> list[ir.Value]:
        b = self.b
        mt = mem_type(dt)
        e = dt.itemsize
        if e == 8:
            out = []
            for i in range(V):
                pair = ir.Constant(ir.VectorType(I32, 2), ir.Undefined)
                pair = b.insert_element(pair, words[2 * i], self.c32(0))
                pair = b.insert_element(pair, words[2 * i + 1], self.c32(1))
                out.append(b.bitcast(pair, mt))
            return out
        if V * e == 1:
            return [b.trunc(words[0], I8)]
        per = V // len(words)
        out = []
        for w in words:
            if per == 1:
                out.append(b.bitcast(w, mt))
                continue
            vec = b.bitcast(w, ir.VectorType(mt, per))
            out += [b.extract_element(vec, self.c32(i)) for i in range(per)]
        return out

    def op_store(self, op: Op) -> None:
        ptrv, valv = op.operands[0], op.operands[1]
        mask = op.operands[2] if op.attrs.get("has_mask") else None
        ptrs, vals = self.get(ptrv), self.get(valv)
        masks = self.get(mask) if mask is not None else None
        dt = valv.dtype
        _, V = self.access_plan(ptrv, mask)
        lin = _lin(ptrv.type)
        # threads that hold copies of an element (broadcast lanes/warps) store it once
        if lin is None:
            tid = self.intr.sreg(self.b, "tid.x")
            dup = self.b.icmp_unsigned("==", tid, self.c32(0))
        else:
            dup = self.duplicate_pred(lin)
        widened = self.widen_store(ptrv, mask, lin, V, vals) if lin is not None else None
        if widened is not None:
            V, ptrs, vals, masks = widened
        for g in range(0, len(ptrs), V):
            m = masks[g] if masks is not None else None
            if dup is not None:
                m = dup if m is None else self.b.and_(m, dup)
            self.store_vec(ptrs[g], vals[g:g + V], m, dt, V)

    def widen_store(self, ptrv: Value, mask: Value | None, lin: LinearLayout, V: int,
                    vals: list):
        """Wider stores for layouts whose threads hold short runs of a row, such as the
        WGMMA accumulator (pairs of columns; the four lanes of a quad hold 8 columns).

        Each swap of a register bit with a lane bit (one shfl.bfly per register pair) gives
        a thread twice the consecutive elements, until the pointers' known contiguity,
        alignment and the mask's constancy allow no wider access (16 bytes). Four times
        fewer store instructions and memory requests for a bf16 accumulator: the GEMM
        epilogue was bound by the number of 16-byte requests, not by bytes.
        Returns (V, pointers, values, masks), one entry per vector group, or None."""
        e = ptrv.dtype.element_ty.itemsize
        if e > 4:
            return None
        rank = len(ptrv.shape)
        best = None
        for dim in range(rank):
            run, want = self.run_and_width(lin, ptrv, mask, dim)
            if run == 0 or (1 << run) >= want:
                continue
            need = {axis_vec(rank, dim, 1 << k) for k in range(want.bit_length() - 1)}
            swaps = []                                 # (register bit, lane bit)
            k = run
            while (1 << k) < want and k < len(lin.reg) and lin.reg[k] not in need:
                base = axis_vec(rank, dim, 1 << k)
                if base not in lin.lane:
                    break
                swaps.append((k, lin.lane.index(base)))
                k += 1
            # every other base moves `dim` by 0 or by a multiple of 2^k: groups stay aligned
            rest = [c[dim] for c in (*lin.reg, *lin.lane, *lin.warp) if c[dim]]
            for j in range(k):
                rest.remove(1 << j)
            if any(c % (1 << k) for c in rest):
                continue
            if swaps and (best is None or k > best[1]):
                best = (dim, k, run, swaps)
        if best is None or (1 << best[1]) <= V:
            return None
        dim, k, run, swaps = best
        b = self.b
        dt = ptrv.dtype.element_ty
        ptrs = self.get(ptrv)
        masks = self.get(mask) if mask is not None else None
        # move packed 32-bit words (the leading contiguous bits, run >= 1, as units)
        u = 0
        while u < run and (e << (u + 1)) <= 4:
            u += 1
        words = [self.pack(vals[i:i + (1 << u)], dt, 1 << u)[0]
                 for i in range(0, len(vals), 1 << u)]
        ys = {l_: b.icmp_unsigned("!=", b.and_(self.lane, self.c32(1 << l_)), self.c32(0))
              for _, l_ in swaps}
        for p, l_ in swaps:                            # new(r=a, lane=b) = old(r=b, lane=a)
            y, bit = ys[l_], 1 << (p - u)
            for i0 in range(len(words)):
                if i0 & bit:
                    continue
                w0, w1 = words[i0], words[i0 | bit]
                got = self.shfl_xor(b.select(y, w0, w1), 1 << l_)
                words[i0], words[i0 | bit] = b.select(y, got, w0), b.select(y, w1, got)
        new_vals = [x for w in words for x in self.unpack([w], dt, 1 << u)]
        # the first element of a group sits, before the swaps, in this thread's register
        # g | (y << p), moved by -y * (lane base) along dim: the same aligned group, so its
        # pointer (contiguous there) and its mask (constant there) serve the group
        def pick(lst, g, j=0):
            if j == len(swaps):
                return lst[g]
            p, l_ = swaps[j]
            return b.select(ys[l_], pick(lst, g | (1 << p), j + 1), pick(lst, g, j + 1))

        off = None
        for p, l_ in swaps:
            d = b.select(ys[l_], self.c32(-(1 << p)), self.c32(0))
            off = d if off is None else b.add(off, d)
        V2 = 1 << k
        new_p: list = [None] * len(ptrs)
        new_m: list | None = [None] * len(ptrs) if masks is not None else None
        for g in range(0, len(ptrs), V2):
            new_p[g] = b.gep(pick(ptrs, g), [off], source_etype=mem_type(dt))
            if new_m is not None:
                new_m[g] = pick(masks, g)
        return V2, new_p, new_vals, new_m

    def duplicate_pred(self, lin: LinearLayout):
        """True in the one thread of each group of copies (lane/warp bits with zero bases)."""
        bits_l = sum(1 << k for k, b in enumerate(lin.lane) if not any(b))
        bits_w = sum(1 << k for k, b in enumerate(lin.warp) if not any(b))
        b = self.b
        pred = None
        for base, mask in ((self.lane, bits_l), (self.warp, bits_w)):
            if mask:
                p = b.icmp_unsigned("==", b.and_(base, self.c32(mask)), self.c32(0))
                pred = p if pred is None else b.and_(pred, p)
        return pred

    def store_vec(self, ptr, vals, mask, dt: DType, V: int) -> None:
        n, _, reg, width = self.word_plan(dt, V)
        if width == "u8":
            width = "b8"
        words = self.pack(vals, dt, V)
        ins = ", ".join(f"${i + 1}" for i in range(n))
        ins = f"{{{ins}}}" if n > 1 else ins
        vec = f".v{n}" if n > 1 else ""
        pred = ""
        args = [ptr, *words]
        cons = ["l"] + [reg] * n
        if mask is not None:
            pred = f"@${n + 1} "
            args.append(mask)
            cons.append("b")
        asm(self.b, VOID, f"{pred}st.global{vec}.{width} [$0], {ins};",
            ",".join(cons) + ",~{memory}", args)

    # ------------------------------------------------------------------ reductions
    def combine_fn(self, kind: str, dt: DType):
        b = self.b
        if kind == "sum":
            return (lambda x, y: b.fadd(x, y)) if dt.is_floating() else \
                (lambda x, y: b.add(x, y))
        if kind in ("max", "min"):
            return self.binary_fn("maximum" if kind == "max" else "minimum", dt)
        raise LoweringError(kind)

    def op_reduce(self, op: Op) -> None:
        x = op.operands[0]
        kind, axis = op.attrs["kind"], op.attrs["axis"]
        lin = _lin(x.type)
        src = self.get(x)
        dt = x.dtype
        arg = kind in ("argmax", "argmin")
        b = self.b
        if arg:
            idx_base = self.thread_coord(lin, axis)
            coords = lin.reg_coords()
            items = [(v, b.add(idx_base, self.c32(c[axis])) if c[axis] else idx_base)
                     for v, c in zip(src, coords)]
            better = self.arg_better(kind, dt)

            def comb(p, q):
                take = better(p, q)
                return (b.select(take, q[0], p[0]), b.select(take, q[1], p[1]))
        else:
            f = self.combine_fn(kind, dt)
            items = [(v,) for v in src]

            def comb(p, q):
                return (f(p[0], q[0]),)
        # 1. inside the thread
        groups: dict[tuple, list] = {}
        for c, it in zip(lin.reg_coords(), items):
            key = c[:axis] + c[axis + 1:]
            groups.setdefault(key, []).append(it)
        partial = {}
        for key, its in groups.items():
            while len(its) > 1:  # tree order
                its = [comb(its[i], its[i + 1]) if i + 1 < len(its) else its[i]
                       for i in range(0, len(its), 2)]
            partial[key] = its[0]
        # 2. across lanes
        for k, base in enumerate(lin.lane):
            if base[axis]:
                for key, p in partial.items():
                    q = tuple(self.shfl_xor(v, 1 << k) for v in p)
                    partial[key] = comb(p, q)
        # 3. across warps, through shared memory
        wbits = [k for k, base in enumerate(lin.warp) if base[axis]]
        if op.result.type.is_scalar:
            out_keys = [()]
        else:
            out_lin = _lin(op.result.type)
            out_keys = out_lin.reg_coords()
        if wbits:
            partial = self.reduce_warps(partial, out_keys, wbits, lin, axis, comb, dt, arg)
        res = [partial[k][1] if arg else partial[k][0] for k in out_keys]
        self.set(op.result, res)

    def arg_better(self, kind: str, dt: DType):
        b = self.b
        signed = dt.is_int_signed()
        sym = ">" if kind == "argmax" else "<"

        def better(p, q):  # q beats p: strictly better value, or equal and smaller index
            if dt.is_floating():
                strict = b.fcmp_ordered(sym, q[0], p[0])
                eq = b.fcmp_ordered("==", q[0], p[0])
            else:
                cmp = b.icmp_signed if signed else b.icmp_unsigned
                strict = cmp(sym, q[0], p[0])
                eq = b.icmp_unsigned("==", q[0], p[0])
            return b.or_(strict, b.and_(eq, b.icmp_signed("<", q[1], p[1])))
        return better

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

    def reduce_warps(self, partial, out_keys, wbits, lin, axis, comb, dt, arg):
        """Warps along the reduced axis exchange partials through shared memory."""
        b = self.b
        nw = 1 << len(wbits)
        nk = len(out_keys)
        rt = llvm_type(dt)
        e = max(dt.itemsize, 4)
        # slot = (warp group along axis) * nk * T + key index * T + (thread's other coords)
        # keep it simple: each thread writes its partials for its own keys into
        # [wgroup][thread-slot][key]; thread-slot identifies the thread's non-axis position.
        widx = None
        for j, k in enumerate(wbits):
            bit = b.and_(b.lshr(self.warp, self.c32(k)), self.c32(1))
            bit = b.shl(bit, self.c32(j)) if j else bit
            widx = bit if widx is None else b.or_(widx, bit)
        # the thread's position among threads that differ in non-axis coordinates: use the
        # lane id and the warp bits that do not move along the axis
        other_w = [k for k in range(len(lin.warp)) if k not in wbits]
        slot = self.lane
        for j, k in enumerate(other_w):
            bit = b.and_(b.lshr(self.warp, self.c32(k)), self.c32(1))
            slot = b.or_(slot, b.shl(bit, self.c32(5 + j)))
        nslots = 32 << len(other_w)
        per_w = nslots * nk
        stride_item = 2 if arg else 1
        total = nw * per_w * stride_item
        self.need_smem(total * e)
        self.sync()
        base = b.mul(b.add(b.mul(widx, self.c32(nslots)), slot), self.c32(nk))
        for i, key in enumerate(out_keys):
            p = partial[key]
            off = b.add(base, self.c32(i))
            for j, v in enumerate(p):
                ptr = self.smem_ptr(b.add(b.mul(off, self.c32(stride_item)), self.c32(j)), e)
                b.store(self.widen(v, e), ptr)
        self.sync()
        out = {}
        for i, key in enumerate(out_keys):
            acc = None
            for w in range(nw):
                # warp w along the axis: same slot, other warp index
                off = b.add(b.mul(b.add(self.c32(w * nslots), slot), self.c32(nk)),
                            self.c32(i))
                vals = []
                for j in range(stride_item):
                    ptr = self.smem_ptr(b.add(b.mul(off, self.c32(stride_item)), self.c32(j)),
                                        e)
                    ty = rt if j == 0 else I32
                    vals.append(self.narrow(b.load(ptr, typ=self.wide_type(ty, e)), ty))
                item = tuple(vals)
                acc = item if acc is None else comb(acc, item)
            out[key] = acc
        return out

    def wide_type(self, t, e):
        return t if _bits(t) >= 8 * e else ir.IntType(8 * e)

    def widen(self, v, e):
        if _bits(v.type) >= 8 * e:
            return v
        it = ir.IntType(_bits(v.type))
        x = self.b.bitcast(v, it) if v.type != it else v
        return self.b.zext(x, ir.IntType(8 * e))

    def narrow(self, v, t):
        if v.type == t:
            return v
        it = ir.IntType(_bits(t))
        x = self.b.trunc(v, it)
        return self.b.bitcast(x, t) if t != it else x

    # ------------------------------------------------------------------ dot
    def op_dot(self, op: Op) -> None:
        a, bb, acc = op.operands
        la, lb, lc = _lin(a.type), _lin(bb.type), _lin(acc.type)
        A, B, C = self.get(a), self.get(bb), list(self.get(acc))
        ia, ib, ic = la.reg_index(), lb.reg_index(), lc.reg_index()
        M, K = a.shape
        N = bb.shape[1]
        mma = op.result.type.layout
        wm, wn = mma.wm, mma.wn
        kind = "bf16" if a.dtype.name == "bf16" else "f16"
        et = llvm_type(a.dtype)
        b = self.b

        def pack2(x, y):
            v = ir.Constant(ir.VectorType(et, 2), ir.Undefined)
            v = b.insert_element(v, x, self.c32(0))
            v = b.insert_element(v, y, self.c32(1))
            return b.bitcast(v, I32)

        text = (f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 "
                "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};")
        cons = "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f"
        ret = ir.LiteralStructType([F32] * 4)
        for m0 in range(0, M, 16 * wm):
            for n0 in range(0, N, 8 * wn):
                cidx = [ic[(m0, n0)], ic[(m0, n0 + 1)], ic[(m0 + 8, n0)], ic[(m0 + 8, n0 + 1)]]
                cv = [C[i] for i in cidx]
                for k0 in range(0, K, 16):
                    av = [pack2(A[ia[(m0 + r, k0 + c)]], A[ia[(m0 + r, k0 + c + 1)]])
                          for r, c in ((0, 0), (8, 0), (0, 8), (8, 8))]
                    bv = [pack2(B[ib[(k0 + r, n0)]], B[ib[(k0 + r + 1, n0)]]) for r in (0, 8)]
                    r = asm(b, ret, text, cons, av + bv + cv, side_effect=False)
                    cv = [b.extract_value(r, i) for i in range(4)]
                for i, v in zip(cidx, cv):
                    C[i] = v
        self.set(op.result, C)

    # ------------------------------------------------------------------ level 2: Hopper
    def thread0(self) -> ir.Value:
        return self.b.icmp_unsigned("==", self.tid, self.c32(0))

    def op_smem_alloc(self, op: Op) -> None:
        addr = self.b.add(self.static_base, self.c32(self.alloc_offset[op.result.id]))
        self.set_smem(op.result, addr)
        if "init" in op.attrs:
            p = self.thread0()
            for i in range(op.result.shape[0]):
                asm(self.b, VOID, "@$0 mbarrier.init.shared::cta.b64 [$1], $2;", "b,r,r",
                    [p, self.b.add(addr, self.c32(8 * i)), self.c32(op.attrs["init"])])
            asm(self.b, VOID, "fence.mbarrier_init.release.cluster;", "~{memory}", [])
            self.sync()

    def set_smem(self, v: Value, addr) -> None:
        self.vals[v.id] = [addr]

    def op_smem_index(self, op: Op) -> None:
        (base,) = self.get(op.operands[0])
        (idx,) = self.get(op.operands[1])
        t = op.result.type
        stage = t.numel * (8 if t.dtype.name == "mbarrier" else t.dtype.itemsize)
        self.set_smem(op.result, self.b.add(base, self.b.mul(idx, self.c32(stage))))

    def op_barrier(self, op: Op) -> None:
        self.sync()

    def sync(self) -> None:
        """bar.sync for the CTA, or a named barrier for the threads of the current role."""
        if self.role is None:
            barrier(self.b)
        else:
            asm(self.b, VOID, f"bar.sync {self.role_bar}, {128 * self.role[1]};", "~{memory}",
                [])

    def op_warpgroup_id(self, op: Op) -> None:
        self.set(op.result, [self.b.lshr(self.tid_abs, self.c32(7))])

    def op_setmaxnreg(self, op: Op) -> None:
        n = op.attrs["count"]
        threads = 32 * self.total_warps
        cap = min(255, 65536 // (threads * self.ctas_per_sm)) // 8 * 8
        kind = "inc" if n > cap else "dec"
        asm(self.b, VOID, f"setmaxnreg.{kind}.sync.aligned.u32 {n};", "~{memory}", [])
        self.uses_setmaxnreg = True

    def op_mbar_arrive(self, op: Op) -> None:
        (baddr,) = self.get(op.operands[0])
        p = self.b.icmp_unsigned("==", self.b.and_(self.tid, self.c32(127)), self.c32(0))
        asm(self.b, VOID, "@$0 mbarrier.arrive.shared::cta.b64 _, [$1];", "b,r,~{memory}",
            [p, baddr])

    def op_smem_trans(self, op: Op) -> None:
        self.vals[op.result.id] = self.get(op.operands[0])

    def op_tma_store(self, op: Op) -> None:
        """Registers -> swizzled staging tile -> one bulk tensor copy per column chunk."""
        desc, row, col, value, staging = op.operands
        b = self.b
        (saddr,) = self.get(staging)
        (r,) = self.get(row)
        (c,) = self.get(col)
        dptr = b.ptrtoint(self.get(desc)[0], I64)
        p = self.thread0()
        R, C = value.shape
        e = value.dtype.itemsize
        lay = staging.type.layout
        sw, cc = (lay.swizzle, lay.chunk) if lay is not None else (0, C)
        row_bytes = sw if sw else C * e
        # the previous store from this staging tile must have finished reading it
        asm(b, VOID, "@$0 cp.async.bulk.wait_group.read 0;", "b,~{memory}", [p])
        self.sync()
        lin = _lin(value.type)
        vals = self.get(value)
        rbase = self.thread_coord(lin, 0)
        cbase = self.thread_coord(lin, 1)
        coords = lin.reg_coords()
        idx = lin.reg_index()
        done = set()
        mt = mem_type(value.dtype)
        for i, (cr, ccol) in enumerate(coords):
            if i in done:
                continue
            # pack (c, c+1) pairs into one 32-bit store when the layout holds both
            pair = idx.get((cr, ccol + 1)) if e == 2 and ccol % 2 == 0 else None
            rr = b.add(rbase, self.c32(cr))
            cl = b.add(cbase, self.c32(ccol))
            chunk = b.udiv(cl, self.c32(cc)) if cc < C else self.c32(0)
            incol = b.urem(cl, self.c32(cc)) if cc < C else cl
            byte = b.mul(incol, self.c32(e))
            if sw:
                unit = b.lshr(byte, self.c32(4))
                unit = b.xor(unit, b.and_(rr, self.c32(sw // 16 - 1)))
                byte = b.or_(b.shl(unit, self.c32(4)), b.and_(byte, self.c32(15)))
            off = b.add(b.add(b.mul(chunk, self.c32(R * row_bytes)),
                              b.mul(rr, self.c32(row_bytes))), byte)
            ptr = b.inttoptr(b.add(saddr, off), SPTR)
            if pair is not None:
                vec = ir.Constant(ir.VectorType(mt, 2), ir.Undefined)
                vec = b.insert_element(vec, vals[i], self.c32(0))
                vec = b.insert_element(vec, vals[pair], self.c32(1))
                b.store(vec, ptr, align=4)
                done.add(pair)
            else:
                b.store(self.to_mem(vals[i], value.dtype), ptr)
        asm(b, VOID, "fence.proxy.async.shared::cta;", "~{memory}", [])
        self.sync()
        for j in range(max(1, C // cc)):
            sj = b.add(saddr, self.c32(j * R * row_bytes)) if j else saddr
            cj = b.add(c, self.c32(j * cc)) if j else c
            asm(b, VOID, "@$0 cp.async.bulk.tensor.2d.global.shared::cta.bulk_group "
                "[$1, {$2, $3}], [$4];", "b,l,r,r,r,~{memory}", [p, dptr, cj, r, sj])
        asm(b, VOID, "@$0 cp.async.bulk.commit_group;", "b,~{memory}", [p])
        self.has_tma_store = True

    def op_tma_load(self, op: Op) -> None:
        dst, desc, row, col, bar = op.operands
        b = self.b
        (daddr,) = self.get(dst)
        (r,) = self.get(row)
        (c,) = self.get(col)
        (baddr,) = self.get(bar)
        dptr = b.ptrtoint(self.get(desc)[0], I64)
        expect = op.attrs.get("expect", op.attrs["bytes"])  # see frontend/tma_groups.py
        p = self.thread0()
        if expect:
            if self.role is None:  # every warpgroup is done reading the stage it overwrites
                self.sync()
            asm(b, VOID, "@$0 mbarrier.arrive.expect_tx.shared::cta.b64 _, [$1], $2;",
                "b,r,r,~{memory}", [p, baddr, self.c32(expect)])
        lay = dst.type.layout
        R, C = dst.shape
        chunk = lay.chunk if lay is not None else C
        e = dst.dtype.itemsize
        for j in range(max(1, C // chunk)):
            dj = b.add(daddr, self.c32(j * R * chunk * e)) if j else daddr
            cj = b.add(c, self.c32(j * chunk)) if j else c
            asm(b, VOID, "@$0 cp.async.bulk.tensor.2d.shared::cluster.global.tile."
                "mbarrier::complete_tx::bytes [$1], [$2, {$3, $4}], [$5];",
                "b,r,l,r,r,r,~{memory}", [p, dj, dptr, cj, r, baddr])

    def op_mbar_wait(self, op: Op) -> None:
        (baddr,) = self.get(op.operands[0])
        (ph,) = self.get(op.operands[1])
        asm(self.b, VOID,
            "{ .reg .pred P1; \nKITWAIT${:uid}: \n"
            "mbarrier.try_wait.parity.shared::cta.b64 P1, [$0], $1; \n"
            "@!P1 bra.uni KITWAIT${:uid}; }",
            "r,r,~{memory}", [baddr, ph])

    @staticmethod
    def _desc_const(lbo: int, sbo: int, swizzle: int) -> int:
        mode = {128: 1, 64: 2, 32: 3, 0: 0}[swizzle]
        return ((lbo >> 4) & 0x3FFF) << 16 | ((sbo >> 4) & 0x3FFF) << 32 | mode << 62

    def _desc(self, addr, const: int):
        b = self.b
        a = b.zext(b.and_(b.lshr(addr, self.c32(4)), self.c32(0x3FFF)), I64)
        return b.or_(a, ir.Constant(I64, const))

    def op_wgmma(self, op: Op) -> None:
        a, bt, acc = op.operands
        b = self.b
        a_regs = not a.type.is_shared
        if a_regs:
            A = self.get(a)
            ia = _lin(a.type).reg_index()
            aaddr = None
        else:
            (aaddr,) = self.get(a)
        (baddr,) = self.get(bt)
        M, K = a.shape
        N = bt.shape[1]
        e = a.dtype.itemsize
        la, lb = (None if a_regs else a.type.layout), bt.type.layout
        lc = _lin(acc.type)
        C = list(self.get(acc))
        ic = lc.reg_index()
        nw = self.num_warps
        kind = "bf16" if a.dtype.name == "bf16" else "f16"
        # A: K-major rows of `swizzle` bytes, column chunks one after another
        sa, ca = (la.swizzle, la.chunk) if la else (128, 64)
        da = self._desc_const(16, 8 * sa, sa)
        if la is not None and la.transposed:
            raise LoweringError("kit.mma: a transposed A operand is not supported")
        sb, cb = lb.swizzle, lb.chunk
        if lb.transposed:  # B stored [N, K], K contiguous (K-major, imm-trans-b = 0)
            db = self._desc_const(16, 8 * sb, sb)
            trans_b = 0
        else:  # B stored [K, N], N contiguous (MN-major, imm-trans-b = 1): column chunks
            db = self._desc_const(K * sb, 8 * sb, sb)
            trans_b = 1
        wg = b.lshr(self.warp, self.c32(2))
        a_wg = b.add(aaddr, b.mul(wg, self.c32(64 * sa))) if not a_regs else None
        n_out = N // 2
        outs = ", ".join(f"${i}" for i in range(n_out))
        if a_regs:  # four 32-bit registers of the A fragment, then B's descriptor
            text = (f"{{ .reg .pred p; setp.ne.b32 p, ${n_out + 5}, 0; "
                    f"wgmma.mma_async.sync.aligned.m64n{N}k16.f32.{kind}.{kind} "
                    f"{{{outs}}}, {{${n_out}, ${n_out + 1}, ${n_out + 2}, ${n_out + 3}}}, "
                    f"${n_out + 4}, p, 1, 1, {trans_b}; }}")
            cons = ",".join(["=f"] * n_out + ["r"] * 4 + ["l", "r"] +
                            [str(i) for i in range(n_out)])
            et = llvm_type(a.dtype)

            def pack2(x, y):
                v = ir.Constant(ir.VectorType(et, 2), ir.Undefined)
                v = b.insert_element(v, x, self.c32(0))
                v = b.insert_element(v, y, self.c32(1))
                return b.bitcast(v, I32)
        else:
            text = (f"{{ .reg .pred p; setp.ne.b32 p, ${n_out + 2}, 0; "
                    f"wgmma.mma_async.sync.aligned.m64n{N}k16.f32.{kind}.{kind} "
                    f"{{{outs}}}, ${n_out}, ${n_out + 1}, p, 1, 1, 0, {trans_b}; }}")
            cons = ",".join(["=f"] * n_out + ["l", "l", "r"] + [str(i) for i in range(n_out)])
        ret = ir.LiteralStructType([F32] * n_out)
        # every operand (descriptors, packed A registers, accumulators) is computed before
        # wgmma.fence, so nothing writes a register the wgmmas read between them: ptxas
        # then issues them back to back instead of serializing them (C7517 / C7519)
        steps = []
        for r0 in range(0, M, 16 * nw):
            idx = [ic[(r0 + 8 * ((i // 2) % 2), 8 * (i // 4) + (i % 2))] for i in range(n_out)]
            ks = []
            for k0 in range(0, K, 16):
                if a_regs:
                    a_ops = [pack2(A[ia[(r0 + r, k0 + c)]], A[ia[(r0 + r, k0 + c + 1)]])
                             for r, c in ((0, 0), (8, 0), (0, 8), (8, 8))]
                    a_ops = [asm(b, I32, "mov.b32 $0, $1;", "=r,r", [x], side_effect=True)
                             for x in a_ops]
                else:
                    a_addr = b.add(a_wg, self.c32((k0 // ca) * M * sa + r0 * sa +
                                                  (k0 % ca) * e))
                if lb.transposed:
                    b_off = (k0 // cb) * N * sb + (k0 % cb) * e
                else:
                    b_off = k0 * sb
                b_addr = b.add(baddr, self.c32(b_off))
                if a_regs:
                    ins = a_ops + [self._desc(b_addr, db), self.c32(1)]
                else:
                    ins = [self._desc(a_addr, da), self._desc(b_addr, db), self.c32(1)]
                ks.append(ins)
            regs = [asm(b, F32, "mov.b32 $0, $1;", "=f,f", [C[i]], side_effect=True)
                    for i in idx]
            steps.append((idx, regs, ks))
        asm(b, VOID, "wgmma.fence.sync.aligned;", "~{memory}", [])
        for idx, regs, ks in steps:
            for ins in ks:
                r = asm(b, ret, text, cons, ins + regs)
                regs = [b.extract_value(r, i) for i in range(n_out)]
            for i, v in zip(idx, regs):
                C[i] = v
        asm(b, VOID, "wgmma.commit_group.sync.aligned;", "~{memory}", [])
        self.set(op.result, C)
        pending = op.attrs.get("pending", 0)
        if pending == 0:
            self.wgmma_wait(op.result, 0)
        else:
            self.wgmma_wait(op.result, pending)
            self.inflight.add(op.result.id)

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

    # ------------------------------------------------------------------ control flow
    def op_for(self, op: Op) -> None:
        b = self.b
        lb, ub, step = (self.get(v)[0] for v in op.operands[:3])
        inits = [self.get(v) for v in op.operands[3:]]
        body = op.regions[0]
        pre = b.block
        header = self.kernel.append_basic_block("for.header")
        loop = self.kernel.append_basic_block("for.body")
        exit_ = self.kernel.append_basic_block("for.exit")
        b.branch(header)
        b.position_at_end(header)
        iv = b.phi(lb.type, name=body.args[0].name or "iv")
        iv.add_incoming(lb, pre)
        phis = []
        for arg, init in zip(body.args[1:], inits):
            ps = []
            for x in init:
                p = b.phi(x.type)
                p.add_incoming(x, pre)
                ps.append(p)
            phis.append(ps)
            self.vals[arg.id] = ps
        self.vals[body.args[0].id] = [iv]
        ys_ops = body.ops[-1].operands
        for arg, init, y in zip(body.args[1:], op.operands[3:], ys_ops):
            o = y.owner
            if init.id in self.inflight or (isinstance(o, Op) and o.name == "wgmma" and
                                            o.attrs.get("pending", 0)):
                self.inflight.add(arg.id)
        step_info = self.axis[op.operands[2]].cval
        if step_info is not None and step_info > 0 or isinstance(step, ir.Constant) and \
                step.constant > 0:
            cond = b.icmp_signed("<", iv, ub)
        elif isinstance(step, ir.Constant) and step.constant < 0:
            cond = b.icmp_signed(">", iv, ub)
        else:
            pos = b.icmp_signed(">", step, ir.Constant(step.type, 0))
            cond = b.select(pos, b.icmp_signed("<", iv, ub), b.icmp_signed(">", iv, ub))
        b.cbranch(cond, loop, exit_)
        b.position_at_end(loop)
        ys = self.block(body)
        nxt = b.add(iv, step)
        end = b.block
        iv.add_incoming(nxt, end)
        for ps, y in zip(phis, ys):
            for p, v in zip(ps, y):
                p.add_incoming(v, end)
        b.branch(header)
        b.position_at_end(exit_)
        for r, ps, arg in zip(op.results, phis, body.args[1:]):
            self.vals[r.id] = ps
            if arg.id in self.inflight:
                self.inflight.add(r.id)

    def _yields_inflight(self, region: Block, i: int) -> bool:
        y = region.ops[-1] if region.ops and region.ops[-1].name == "yield" else None
        return y is not None and i < len(y.operands) and y.operands[i].id in self.inflight

    def op_if(self, op: Op) -> None:
        b = self.b
        (cond,) = self.get(op.operands[0])
        then_bb = self.kernel.append_basic_block("if.then")
        else_bb = self.kernel.append_basic_block("if.else")
        merge = self.kernel.append_basic_block("if.end")
        b.cbranch(cond, then_bb, else_bb)
        ends = []
        roles = op.attrs.get("roles")
        for i, (region, bb) in enumerate(zip(op.regions, (then_bb, else_bb))):
            b.position_at_end(bb)
            if roles:
                saved = (self.tid, self.warp, self.num_warps, self.role, self.role_bar)
                first, count = roles[i]
                self.role = (first, count)
                self.next_bar += 1  # a named barrier of its own (ids 1..15)
                if self.next_bar > 15:
                    raise LoweringError("more than 15 roles need named barriers")
                self.role_bar = self.next_bar
                self.tid = b.sub(self.tid_abs, self.c32(128 * first)) if first else self.tid_abs
                self.warp = b.lshr(self.tid, self.c32(5))
                self.num_warps = 4 * count
            ys = self.block(region) or []
            if roles:
                self.tid, self.warp, self.num_warps, self.role, self.role_bar = saved
            ends.append((b.block, ys))
            b.branch(merge)
        b.position_at_end(merge)
        for i, r in enumerate(op.results):
            if any(self._yields_inflight(region, i) for region in op.regions):
                self.inflight.add(r.id)
            regs = []
            for j in range(len(ends[0][1][i])):
                p = b.phi(ends[0][1][i][j].type)
                for blk, ys in ends:
                    p.add_incoming(ys[i][j], blk)
                regs.append(p)
            self.vals[r.id] = regs


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


__all__ = ["Lowering", "LoweringError", "GPTR", "SPTR", "I64"]

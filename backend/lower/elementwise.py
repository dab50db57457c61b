"""The `elementwise` family: binary and unary arithmetic, cmp, cast, select, addptr.

Every op maps register to register in the layout it has, so nothing crosses threads.
`binary_fn` (with `minmax`/`call_math`) is in `base.py` because the reductions combine with
it too; the fp32 math of fp16/bf16 (`float_math`, `approx`) is used here only.
"""

from __future__ import annotations

import llvmlite.ir as ir

from kitjit.ir import libm
from kitjit.ir import ops as O
from kitjit.ir.core import Op
from kitjit.ir.layouts import Mma
from kitjit.ir.libm_typed import TYPED, signature
from kitjit.ir.registry import lowering
from kitjit.ir.types import DType
from kitjit.ir.types import float32 as _F32

from ..nvvm import F32, F64, GPTR, I1, I16, I32, I64, asm, llvm_type, mem_type
from .base import LoweringBase, LoweringError
from .fp8 import fp8_cast_fn

LOG2E = 1.4426950408889634


def _accumulator(v) -> bool:
    """An MMA-layout tile straight from the MMAs: a dot / wgmma result, or a loop's or if's
    result (the carried accumulator), not a tile computed from one."""
    o = v.owner
    return isinstance(v.type.layout, Mma) and isinstance(o, Op) and \
        o.name in ("dot", "wgmma", "for", "while", "if")


class ElementwiseLowering(LoweringBase):
    """Register-by-register ops, unrolled over a thread's registers."""

    @lowering(*sorted(O.BINARY))
    def op_binary(self, op: Op) -> None:
        a, c = self.get(op.operands[0]), self.get(op.operands[1])
        dt = op.operands[0].dtype
        f = self.binary_fn(op.name, dt)
        self.set(op.result, [f(x, y) for x, y in zip(a, c)])

    @lowering("cmp")
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

    @lowering(*sorted(O.UNARY))
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

    def approx(self, instr: str, x):
        return asm(self.b, F32, f"{instr} $0, $1;", "=f,f", [x], side_effect=False)

    def float_math(self, name: str, x, t, ftz: bool = False):
        b = self.b
        if t is F64:
            if name in ("sqrt", "floor", "ceil"):
                return self.call_math(name, x)
            raise LoweringError(f"{name} on fp64 (the frontend emits a math op)")
        y = self.to_f32(x)
        # without .ftz, ptxas wraps MUFU.EX2 in a range check and two multiplies to get
        # subnormal results right; kit.exp2(x, ftz=True) is the bare instruction
        ex2 = "ex2.approx.ftz.f32" if ftz else "ex2.approx.f32"
        if name == "exp":
            r = self.approx(ex2, b.fmul(y, ir.Constant(F32, LOG2E)))
        elif name == "exp2":
            r = self.approx(ex2, y)
        elif name in ("log", "log2", "sin", "cos"):
            # libdevice, as Triton's tl.log/log2/sin/cos (checked on Triton 3.6's sm_90 PTX):
            # sin.approx/cos.approx lose ~|x| * 2**-24 absolutely in their range reduction
            # and lg2.approx is 2**-22.6 absolute near 1, far from its result's ulp there
            r = b.call(self.intr.get(f"__nv_{name}f", F32, [F32]), [y])
        elif name in ("sqrt", "floor", "ceil"):
            r = self.call_math(name, y)
        elif name == "rsqrt":
            r = self.approx("rsqrt.approx.f32", y)
        elif name == "sigmoid":
            e = self.approx("ex2.approx.f32", b.fmul(y, ir.Constant(F32, -LOG2E)))
            r = b.fdiv(ir.Constant(F32, 1.0), b.fadd(ir.Constant(F32, 1.0), e))
        else:
            raise LoweringError(f"no lowering for {name}")
        return self.from_f32(r, t)

    @lowering("math")
    def op_math(self, op: Op) -> None:
        """A libm function (kitjit/ir/libm.py): one instruction where PTX has it, else a
        call of libdevice's `__nv_*` (linked by backend/compiler.py)."""
        fn = op.attrs["fn"]
        regs = [self.get(v) for v in op.operands]
        if fn in TYPED:  # integer/conversion functions: the overload's libdevice symbol
            sig = signature(fn, tuple(v.dtype.name for v in op.operands))
            self._need_libdevice(fn, op)
            callee = self.intr.get(sig.symbol, llvm_type(op.result.dtype),
                                   [llvm_type(v.dtype) for v in op.operands])
            self.set(op.result, [self.b.call(callee, list(xs)) for xs in zip(*regs)])
            return
        spec = libm.FNS[fn]
        t = llvm_type(next(v.dtype for i, v in enumerate(op.operands) if i not in spec.int_args))
        if spec.inline:
            f = lambda *xs: self.inline_math(fn, t, *xs)  # noqa: E731
        else:
            self._need_libdevice(fn, op)
            sym = libm.symbol(fn, t is F64)
            fnty = [I32 if i in spec.int_args else t for i in range(spec.nargs)]
            callee = self.intr.get(sym, t, fnty)
            f = lambda *xs: self.b.call(callee, list(xs))  # noqa: E731
        self.set(op.result, [f(*xs) for xs in zip(*regs)])

    @staticmethod
    def _need_libdevice(fn: str, op: Op) -> None:
        from ..libdevice import HINT, find_libdevice

        if find_libdevice() is None:
            from kitjit.frontend.errors import CompileError

            raise CompileError(f"libdevice.10.bc, which has {fn}, was not found", op.loc, HINT)

    def inline_math(self, fn: str, t, *xs):
        b = self.b
        if fn in ("floor", "ceil", "trunc", "rint", "nearbyint", "fabs", "sqrt"):
            return self.call_math(fn, xs[0])
        if fn == "sqrt_rn":
            return self.call_math("sqrt", xs[0])  # llvm.sqrt: sqrt.rn without fast-math
        if fn == "div_rn":
            return b.fdiv(xs[0], xs[1])  # div.rn.f32 / div.rn.f64
        if fn in ("fma", "copysign"):
            f = self.intr.get(f"llvm.{fn}.{t.intrinsic_name}", t, [t] * len(xs))
            return b.call(f, list(xs))
        if fn in ("fmin", "fmax"):  # min.f32/max.f32: a NaN operand gives the other
            return self.minmax("minnum" if fn == "fmin" else "maxnum", *xs)
        x = xs[0]
        if fn == "isnan":
            p = b.fcmp_unordered("uno", x, x)
        elif fn == "isinf":
            p = b.fcmp_ordered("==", self.call_math("fabs", x), ir.Constant(t, float("inf")))
        elif fn == "isfinite":
            p = b.fcmp_ordered("<", self.call_math("fabs", x), ir.Constant(t, float("inf")))
        elif fn == "signbit":
            it = ir.IntType(64 if t is F64 else 32)
            p = b.icmp_signed("<", b.bitcast(x, it), ir.Constant(it, 0))
        else:
            raise LoweringError(f"no inline lowering for {fn}")
        return b.zext(p, I32)

    @lowering("cast")
    def op_cast(self, op: Op) -> None:
        src, dst = op.operands[0].dtype, op.result.dtype
        if op.attrs.get("bitcast"):
            td = llvm_type(dst)
            f = lambda x: self.b.bitcast(x, td)  # noqa: E731
        elif op.attrs.get("rounding") == "rtz":
            f = self.rtz_fn(src, dst)
        elif op.attrs.get("rounding") == "rtne":   # fp32 -> fp16/bf16, pinned (rn_pinned)
            self.set(op.result, self.rn_pinned(self.get(op.operands[0]), dst))
            return
        elif src.is_fp8() or dst.is_fp8():
            f = fp8_cast_fn(self, src, dst)
        elif src == _F32 and dst.name in ("bf16", "fp16") and _accumulator(op.operands[0]):
            self.set(op.result, self.rn_pairs(self.get(op.operands[0]), dst))
            return
        elif src.is_ptr() or dst.is_ptr():
            f = self.pointer_cast_fn(src, dst)
        else:
            f = self.cast_fn(src, dst)
        self.set(op.result, [f(x) for x in self.get(op.operands[0])])

    def pointer_cast_fn(self, src: DType, dst: DType):
        b = self.b
        if src.is_ptr() and dst.is_ptr():
            return lambda x: x
        if dst.is_ptr():
            return lambda x: b.inttoptr(x, GPTR)
        return lambda x: b.ptrtoint(x, I64)

    def rtz_fn(self, src: DType, dst: DType):
        """A float downcast rounding toward zero (cvt.rz)."""
        b = self.b
        if src.bits == 64 and dst.bits < 32:  # f64 -> f32 -> 16 bits: rz twice is rz
            first, second = self.rtz_fn(src, _F32), self.rtz_fn(_F32, dst)
            return lambda x: second(first(x))
        td = llvm_type(dst)
        ptx = {"fp32": ("f32", "f64", "=f,d"), "fp16": ("f16", "f32", "=h,f"),
               "bf16": ("bf16", "f32", "=h,f")}[dst.name]
        ity = I32 if dst.bits == 32 else I16

        def f(x):
            r = asm(b, ity if dst.bits == 16 else td, f"cvt.rz.{ptx[0]}.{ptx[1]} $0, $1;",
                    ptx[2], [x], side_effect=False)
            return b.bitcast(r, td) if dst.bits == 16 else r
        return f

    def rn_pinned(self, xs: list, dst: DType) -> list:
        """fp32 -> fp16/bf16 written out with fp_downcast_rounding='rtne': the default's
        rounding, as one cvt.rn per element that LLVM neither moves nor folds. A plain
        fptrunc of a loop-carried tile is turned by LLVM into an fp32 phi converted at the
        loop's top: twice the registers carried, and ptxas packs them early into swapped
        halves (32 PRMT a block in kitjit/nn/attention.py's overlapped loop). (Pairs as
        cvt.rn.bf16x2 gave the same instructions there but 16 bytes of spills.)"""
        b, td = self.b, llvm_type(dst)
        cvt = f"cvt.rn.{'bf16' if dst.name == 'bf16' else 'f16'}.f32 $0, $1;"
        return [b.bitcast(asm(b, I16, cvt, "=h,f", [x]), td) for x in xs]

    def rn_pairs(self, xs: list, dst: DType) -> list:
        """fp32 -> fp16/bf16 of an MMA accumulator as it leaves the MMAs, two neighbouring
        columns per cvt.rn.x2 (the default cast's rounding, bit for bit). ptxas packs scalar
        cvts into the same F2FP.PACK_AB, but when the 16-bit C stays live while the next
        tile's WGMMAs run (examples/matmul.py's OVERLAP), scalar cvts of the accumulator make
        it serialize every WGMMA of the kernel (C7514); the packed form does not. (LLVM turns
        llvm.nvvm.ff2bf16x2.rn and vector fptrunc back into scalar cvts: inline PTX. Tiles
        computed from an accumulator, such as attention's P, keep the scalar cvts: pairs
        spilled 16 bytes in its warp-specialized loop, as rn_pinned notes.)"""
        b, td = self.b, llvm_type(dst)
        cvt = f"cvt.rn.{'bf16x2' if dst.name == 'bf16' else 'f16x2'}.f32 $0, $2, $1;"
        out = []
        for i in range(0, len(xs) - 1, 2):   # $0 = {hi: xs[i + 1], lo: xs[i]}
            r = b.bitcast(asm(b, I32, cvt, "=r,f,f", [xs[i], xs[i + 1]], side_effect=False),
                          ir.VectorType(td, 2))
            out += [b.extract_element(r, ir.Constant(I32, k)) for k in (0, 1)]
        if len(xs) % 2:
            out.append(b.fptrunc(xs[-1], td))
        return out

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
            # the saturating intrinsics: truncate toward zero, clamp to the range, NaN -> 0,
            # as PTX's cvt.rzi does and as the interpreter does. Plain fptosi/fptoui make an
            # out-of-range value poison: LLVM then folds fptoui(sitofp(x)) to x (a negative
            # int came back as a huge uint32). An 8-bit int saturates to 16 bits and keeps
            # the low byte, as Triton's GPU code does (cvt.rzi.s16: 200.5 -> int8 is -56)
            kind = "fptosi" if dst.is_int_signed() else "fptoui"
            tw = I16 if dst.bits == 8 else td
            f = self.intr.get(f"llvm.{kind}.sat.{tw.intrinsic_name}.{ts.intrinsic_name}",
                              tw, [ts])
            if tw is td:
                return lambda x: b.call(f, [x])
            return lambda x: b.trunc(b.call(f, [x]), td)
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

    @lowering("select")
    def op_select(self, op: Op) -> None:
        c, x, y = (self.get(v) for v in op.operands)
        self.set(op.result, [self.b.select(p, u, w) for p, u, w in zip(c, x, y)])

    @lowering("addptr")
    def op_addptr(self, op: Op) -> None:
        p, o = self.get(op.operands[0]), self.get(op.operands[1])
        et = mem_type(op.result.dtype.element_ty)
        self.set(op.result, [self.b.gep(x, [y], source_etype=et) for x, y in zip(p, o)])

    @lowering("inline_asm")
    def op_inline_asm(self, op: Op) -> None:
        """Triton's inline_asm_elementwise: one asm call per `pack` of a thread's elements
        (which elements share a call is unspecified, as in Triton; a short last group is
        padded with undef and its extra results dropped). Elements narrower than 32 bits go
        packed into one register per 32 bits (a vector <4 x i8>), inputs and results alike;
        outputs are operands $0.. , inputs follow."""
        b, pack = self.b, op.attrs["pack"]
        ins = [(llvm_type(v.dtype), self.get(v)) for v in op.operands]
        outs = [llvm_type(r.dtype) for r in op.results]
        n = len(ins[0][1])

        def per_reg(t: ir.Type) -> int:
            bits = t.width if isinstance(t, ir.IntType) else \
                {"half": 16, "bfloat": 16, "float": 32, "double": 64}[str(t)]
            return min(32 // bits, pack) if bits < 32 else 1

        reg_types = []  # per result: (element type, elements per register, registers)
        for t in outs:
            k = per_reg(t)
            reg_types.append((t, k, -(-pack // k)))
        flat = [ir.VectorType(t, k) if k > 1 else t for t, k, nr in reg_types for _ in range(nr)]
        ret = flat[0] if len(flat) == 1 else ir.LiteralStructType(flat)
        results: list[list] = [[] for _ in outs]
        for g in range(0, n, pack):
            args = []
            for t, vals in ins:
                k = per_reg(t)
                for j in range(0, pack, k):
                    lane = [vals[g + j + i] if g + j + i < n else ir.Constant(t, ir.Undefined)
                            for i in range(k)]
                    if k == 1:
                        args.append(lane[0])
                        continue
                    vec = ir.Constant(ir.VectorType(t, k), ir.Undefined)
                    for i, x in enumerate(lane):
                        vec = b.insert_element(vec, x, ir.Constant(I32, i))
                    args.append(vec)
            r = asm(b, ret, op.attrs["asm"], op.attrs["constraints"], args,
                    side_effect=not op.attrs["is_pure"])
            regs = [r] if len(flat) == 1 else [b.extract_value(r, i) for i in range(len(flat))]
            pos = 0
            for ri, (_t, k, nr) in enumerate(reg_types):
                elems = []
                for reg in regs[pos:pos + nr]:
                    elems += [reg] if k == 1 else \
                        [b.extract_element(reg, ir.Constant(I32, i)) for i in range(k)]
                pos += nr
                results[ri] += elems[:min(pack, n - g)]
        for res, vals in zip(op.results, results):
            self.set(res, vals)

    @lowering("umulhi")
    def op_umulhi(self, op: Op) -> None:
        """zext, multiply, take the high half: NVPTX selects mul.hi.u32 / mul.hi.u64."""
        b = self.b
        t = llvm_type(op.result.dtype)
        w = ir.IntType(2 * t.width)
        sh = ir.Constant(w, t.width)

        def f(x, y):
            return b.trunc(b.lshr(b.mul(b.zext(x, w), b.zext(y, w)), sh), t)
        a, c = self.get(op.operands[0]), self.get(op.operands[1])
        self.set(op.result, [f(x, y) for x, y in zip(a, c)])

"""The `dot` family: dot (mma.sync m16n8k16 on registers) and wgmma (Hopper's
warpgroup MMA on shared-memory descriptors or register A fragments).

`wgmma_wait` is in `base.py`: `block()` calls it before an op reads an accumulator that is
still in flight.
"""

from __future__ import annotations

import llvmlite.ir as ir

from kitjit.ir.core import Op
from kitjit.ir.registry import lowering

from ..nvvm import F32, I32, I64, VOID, asm, llvm_type
from .base import LoweringBase, LoweringError, _lin

_WGMMA_KIND = {"bf16": "bf16", "fp16": "f16", "fp8e4nv": "e4m3", "fp8e5": "e5m2"}


class DotLowering(LoweringBase):
    """Tensor-core matrix multiply-accumulate."""

    @lowering("dot")
    def op_dot(self, op: Op) -> None:
        a, bb, acc = op.operands
        la, lb, lc = _lin(a.type), _lin(bb.type), _lin(acc.type)
        A, B, C = self.get(a), self.get(bb), list(self.get(acc))
        ia, ib, ic = la.reg_index(), lb.reg_index(), lc.reg_index()
        M, K = a.shape
        N = bb.shape[1]
        mma = op.result.type.layout
        wm = mma.wm
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
            for n0 in mma.n_tiles(N):
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

    @staticmethod
    def _desc_const(lbo: int, sbo: int, swizzle: int) -> int:
        mode = {128: 1, 64: 2, 32: 3, 0: 0}[swizzle]
        if lbo >> 4 > 0x3FFF or sbo >> 4 > 0x3FFF:  # 14-bit fields of 16-byte units
            raise LoweringError(f"kit.mma: a shared operand's stride ({max(lbo, sbo)} bytes "
                                f"between column chunks) is past the WGMMA descriptor's "
                                f"256 KB; use fewer rows")
        return ((lbo >> 4) & 0x3FFF) << 16 | ((sbo >> 4) & 0x3FFF) << 32 | mode << 62

    @classmethod
    def b_operand(cls, lb, K: int, N: int, e: int) -> tuple[int, int, list[int]]:
        """B's descriptor constant (LBO, SBO, swizzle mode), imm-trans-b and the byte offset
        of each K step (32 bytes of K) in the tile; pure, so that tests/test_swap_constructs.py
        checks the addresses they make against the tile's layout on the CPU."""
        kw = 32 // e
        sb, cb = lb.swizzle, lb.chunk
        if lb.transposed:  # B stored [N, K], K contiguous (K-major, imm-trans-b = 0)
            return (cls._desc_const(16, 8 * sb, sb), 0,
                    [(k0 // cb) * N * sb + (k0 % cb) * e for k0 in range(0, K, kw)])
        if sb:  # B stored [K, N], N contiguous (MN-major, imm-trans-b = 1): column chunks
            return cls._desc_const(K * sb, 8 * sb, sb), 1, [k0 * sb for k0 in range(0, K, kw)]
        # MN-major, unswizzled: N 8 of a 16-bit type, rows of 16 bytes, so each 8-row core
        # matrix is 128 contiguous bytes and the next along K (LBO) 128 bytes on
        if N * e != 16:  # (SharedLayout swizzles every wider power-of-two row)
            raise LoweringError(f"kit.mma: an unswizzled [K, N] B operand of {N * e}-byte "
                                f"rows is not supported yet")
        return cls._desc_const(128, K * 16, 0), 1, [k0 * 16 for k0 in range(0, K, kw)]

    def _desc(self, addr, const: int):
        b = self.b
        a = b.zext(b.and_(b.lshr(addr, self.c32(4)), self.c32(0x3FFF)), I64)
        return b.or_(a, ir.Constant(I64, const))

    @lowering("wgmma")
    def op_wgmma(self, op: Op) -> None:
        if self.ampere:  # sm_80/86/89: ldmatrix + mma.sync (ampere.py)
            return self.sm80_mma(op)
        if op.attrs.get("next"):   # (the frontend stops it on sm_90a first)
            raise LoweringError("kit.mma(..., next=...) is an sm_80/86/89 form; on "
                                f"{self.fn.attrs.get('arch', 'this target')} it is not "
                                "supported yet")
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
        fp8 = a.dtype.is_fp8()
        kind = _WGMMA_KIND[a.dtype.name]
        bkind = _WGMMA_KIND[bt.dtype.name]
        kw = 32 // e        # K per instruction: 32 bytes of each row (k16 16-bit, k32 fp8)
        # A: K-major rows of `swizzle` bytes, column chunks one after another; or (a `.T`
        # view) stored [K, M] with M contiguous (MN-major, imm-trans-a = 1), each
        # warpgroup's 64 rows of M a run of column chunks
        sa, ca = (la.swizzle, la.chunk) if la else (128, 64)
        trans_a = int(la is not None and la.transposed)
        if trans_a and 64 % ca:
            raise LoweringError(f"kit.mma: a transposed A operand of {ca}-column chunks")
        da = self._desc_const(K * sa, 8 * sa, sa) if trans_a else self._desc_const(16, 8 * sa, sa)
        db, trans_b, b_offs = self.b_operand(lb, K, N, e)
        if fp8 and (a_regs or not lb.transposed or la.transposed):  # the typing rule's check
            raise LoweringError("kit.mma: fp8 operands must both be K-major shared tiles")
        wg = b.lshr(self.warp, self.c32(2))
        if a_regs:
            a_wg = None
        elif trans_a:  # warpgroup w: stored columns 64w.. (64 // ca chunks of K rows each)
            a_wg = b.add(aaddr, b.mul(wg, self.c32(64 // ca * K * sa)))
        else:
            a_wg = b.add(aaddr, b.mul(wg, self.c32(64 * sa)))
        # one descriptor per operand, each K step a constant added to it (the address field
        # is bits 0-13 of addr >> 4, and every step's address is a shared address too, so
        # nothing carries out); the base goes through an opaque mov, so that LLVM computes
        # the steps here instead of hoisting each out of a loop into registers of its own
        def opaque(x):
            return asm(b, I32, "mov.b32 $0, $1;", "=r,r", [x], side_effect=True)

        def step(d0, off: int):
            return b.add(d0, ir.Constant(I64, off >> 4)) if off else d0

        a_desc0 = None if a_regs else self._desc(opaque(a_wg), da)
        b_desc0 = self._desc(opaque(baddr), db)
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
        else:   # fp8 has no transpose operands: both tiles are K-major (QGMMA)
            trans = "" if fp8 else f", {trans_a}, {trans_b}"
            text = (f"{{ .reg .pred p; setp.ne.b32 p, ${n_out + 2}, 0; "
                    f"wgmma.mma_async.sync.aligned.m64n{N}k{kw}.f32.{kind}.{bkind} "
                    f"{{{outs}}}, ${n_out}, ${n_out + 1}, p, 1, 1{trans}; }}")
            cons = ",".join(["=f"] * n_out + ["l", "l", "r"] + [str(i) for i in range(n_out)])
        ret = ir.LiteralStructType([F32] * n_out)
        # every operand (descriptors, packed A registers, accumulators) is computed before
        # wgmma.fence, so nothing writes a register the wgmmas read between them: ptxas
        # then issues them back to back instead of serializing them (C7517 / C7519)
        steps = []
        for r0 in range(0, M, 16 * nw):
            idx = [ic[(r0 + 8 * ((i // 2) % 2), 8 * (i // 4) + (i % 2))] for i in range(n_out)]
            ks = []
            for k0 in range(0, K, kw):
                if a_regs:
                    a_ops = [pack2(A[ia[(r0 + r, k0 + c)]], A[ia[(r0 + r, k0 + c + 1)]])
                             for r, c in ((0, 0), (8, 0), (0, 8), (8, 8))]
                    a_ops = [asm(b, I32, "mov.b32 $0, $1;", "=r,r", [x], side_effect=True)
                             for x in a_ops]
                elif trans_a:
                    a_off = r0 // ca * K * sa + k0 * sa
                else:
                    a_off = (k0 // ca) * M * sa + r0 * sa + (k0 % ca) * e
                b_off = b_offs[k0 // kw]
                if a_regs:
                    ins = a_ops + [step(b_desc0, b_off), self.c32(1)]
                else:
                    ins = [step(a_desc0, a_off), step(b_desc0, b_off), self.c32(1)]
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
            self.groups.append(op.result.id)

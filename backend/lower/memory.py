"""The `memory` family: load and store through tiles of global pointers, and atomics.

`access_plan`/`run_and_width` choose the vector width from the layout and the axis
analysis (contiguity, alignment, mask constancy); `widen_store` swaps register and lane bits
so a thread holds longer runs before it stores; `word_plan`/`pack`/`unpack` move elements as
the 16/32-bit words of the inline PTX.
"""

from __future__ import annotations

import llvmlite.ir as ir

from kitjit.ir.core import Op, Value
from kitjit.ir.layouts import LinearLayout, axis_vec
from kitjit.ir.registry import lowering
from kitjit.ir.types import DType

from ..axis_info import vector_width
from ..nvvm import I8, I16, I32, VOID, asm, llvm_type, mem_type
from .base import LoweringBase, _lin


class MemoryLowering(LoweringBase):
    """Vectorized, predicated global loads and stores."""

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

    @lowering("load")
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

    @lowering("store")
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

    # ------------------------------------------------------------------ atomics
    @lowering("atomic_rmw", "atomic_cas")
    def op_atomic(self, op: Op) -> None:
        """One predicated `atom.global.<sem>.<scope>.<op>.<type>` per element, in the one
        thread of each group of copies (a broadcast layout holds an element in several);
        when the old values are used and copies exist, the owner hands them on through
        shared memory. Masked-off lanes return 0."""
        cas = op.name == "atomic_cas"
        ptrv = op.operands[0]
        dt = op.result.dtype
        ptrs = self.get(ptrv)
        if cas:
            cmps, vals, masks = self.get(op.operands[1]), self.get(op.operands[2]), None
        else:
            cmps, vals = None, self.get(op.operands[1])
            masks = self.get(op.operands[2]) if op.attrs.get("has_mask") else None
        lin = _lin(ptrv.type)
        dup = self.thread0() if lin is None else self.duplicate_pred(lin)
        b = self.b
        sem, scope = op.attrs["sem"], op.attrs["scope"]
        old = []
        for i, p in enumerate(ptrs):
            m = masks[i] if masks is not None else None
            if dup is not None:
                m = dup if m is None else b.and_(m, dup)
            if cas:
                old.append(self.atom(f"cas.b{dt.bits}", dt, p, [cmps[i], vals[i]], m, sem,
                                     scope))
            else:
                old.append(self.atom_rmw(op.attrs["kind"], dt, p, vals[i], m, sem, scope))
        if dup is not None and self.result_used(op):
            old = self.from_owner(old, ptrv.type, lin, dup, dt)
        self.set(op.result, old)

    def atom_rmw(self, kind: str, dt: DType, p, v, m, sem: str, scope: str):
        b = self.b
        if kind in ("max", "min") and dt.is_floating():
            # Triton's trick: signed max (min) on the bits where v's sign bit is clear,
            # unsigned min (max) where it is set
            n = dt.bits
            it = ir.IntType(n)
            bits = b.bitcast(v, it)
            neg = b.icmp_signed("<", bits, ir.Constant(it, 0))
            pos = b.xor(neg, ir.Constant(ir.IntType(1), 1))
            other = "min" if kind == "max" else "max"
            mp = pos if m is None else b.and_(m, pos)
            mn = neg if m is None else b.and_(m, neg)
            rp = self.atom(f"{kind}.s{n}", None, p, [bits], mp, sem, scope, it)
            rn = self.atom(f"{other}.u{n}", None, p, [bits], mn, sem, scope, it)
            return b.bitcast(b.select(neg, rn, rp), llvm_type(dt))
        if kind == "add":
            suffix = {"fp16": "noftz.f16", "bf16": "noftz.bf16", "fp32": "f32",
                      "fp64": "f64"}.get(dt.name, f"u{dt.bits}")
        elif kind in ("max", "min"):
            suffix = f"{'s' if dt.is_int_signed() else 'u'}{dt.bits}"
        else:
            suffix = f"b{dt.bits}"
        name = "exch" if kind == "xchg" else kind
        return self.atom(f"{name}.{suffix}", dt, p, [v], m, sem, scope)

    def atom(self, what: str, dt: DType | None, p, args: list, m, sem: str, scope: str,
             t: ir.Type | None = None):
        """`@m atom.global.<sem>.<scope>.<what> $0, [p], args...`; 0 where m is false."""
        t = t or llvm_type(dt)
        w = _width(t)
        it = ir.IntType(w)                  # float operands travel in bit registers
        b = self.b
        args = [x if x.type == it else b.bitcast(x, it) for x in args]
        reg = {16: "h", 32: "r", 64: "l"}[w]
        ins = ", ".join(f"${i + 2}" for i in range(len(args)))
        pred = f"@${len(args) + 2} " if m is not None else ""
        text = f"mov.b{w} $0, 0; {pred}atom.global.{sem}.{scope}.{what} $0, [$1], {ins};"
        cons = [f"={reg}", "l"] + [reg] * len(args) + (["b"] if m is not None else [])
        ops = [p, *args] + ([m] if m is not None else [])
        r = asm(b, it, text, ",".join(cons) + ",~{memory}", ops)
        return r if t == it else b.bitcast(r, t)

    def result_used(self, op: Op) -> bool:
        used = getattr(self, "_used", None)
        if used is None:
            used = self._used = {v.id for o in self.fn.walk() for v in o.operands}
        return op.result.id in used

    def from_owner(self, vals: list, t, lin, dup, dt: DType) -> list:
        """Every copy of an element gets the value its owner thread (`dup`) holds: the owners
        write them at their row-major place in shared memory, then all threads read."""
        b = self.b
        e = dt.itemsize
        mt = mem_type(dt)
        shape = t.shape
        strides = [1] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            strides[d] = strides[d + 1] * shape[d + 1]
        self.need_smem(max(1, t.numel) * e)
        base = self.thread_index(lin, strides) if lin is not None else self.c32(0)
        coords = lin.reg_coords() if lin is not None else [()]
        ptrs = []
        self.sync()
        with b.if_then(dup):
            for c, v in zip(coords, vals):
                off = sum(x * s for x, s in zip(c, strides))
                p = self.smem_ptr(b.add(base, self.c32(off)), e)
                ptrs.append(p)
                b.store(v, p)
        self.sync()
        out = []
        for c in coords:
            off = sum(x * s for x, s in zip(c, strides))
            out.append(b.load(self.smem_ptr(b.add(base, self.c32(off)), e), typ=mt))
        self.sync()
        return out


def _width(t: ir.Type) -> int:
    if isinstance(t, ir.IntType):
        return t.width
    return {"half": 16, "bfloat": 16, "float": 32, "double": 64}[str(t)]

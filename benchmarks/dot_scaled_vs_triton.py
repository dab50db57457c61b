"""kit.dot_scaled on the GPU against Triton's own tl.dot_scaled on the same inputs (GPU only;
needs the real Triton installed beside kitjit).

Triton 3.6's interpreter has no dot_scaled, so this is the one place where kitjit meets
Triton's answer: every format pair Triton compiles for Hopper (e2m1 packed along M / N too,
which Triton's sm_90 compiler cannot build: kitjit against the reference there), NaN and zero
scales, ragged M, N, K, with an acc. Prints, per case, the largest difference
relative to K * 2**-24 * (|A| @ |B|) (<= 1: within fp32 accumulation order; the two sum in
different orders: kitjit mma.sync, Triton wgmma), whether NaN and inf sit at the same places,
and whether the two are bit-identical. Run from the repository root:

    python benchmarks/dot_scaled_vs_triton.py
"""

from __future__ import annotations

import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from test_dot_scaled import PAIRS, _inputs, _reference, _run  # noqa: E402


@triton.jit
def _triton_scaled_mm(A, AS, B, BS, C, Acc, M, N, K,
                      FA: tl.constexpr, FB: tl.constexpr, KPA: tl.constexpr, KPB: tl.constexpr,
                      HAS_SA: tl.constexpr, HAS_SB: tl.constexpr, PAK: tl.constexpr,
                      PAM: tl.constexpr, PBK: tl.constexpr, PBN: tl.constexpr,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """tests/test_dot_scaled.py's _scaled_mm, line for line, in Triton (with an acc)."""
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    am = pm * (BM // PAM) + tl.arange(0, BM // PAM)
    bn = pn * (BN // PBN) + tl.arange(0, BN // PBN)
    cmask = (rm[:, None] < M) & (rn[None, :] < N)
    acc = tl.load(Acc + rm[:, None] * N + rn[None, :], mask=cmask, other=0.0)
    for k0 in range(0, K, BK):
        ak = k0 // PAK + tl.arange(0, BK // PAK)
        bk = k0 // PBK + tl.arange(0, BK // PBK)
        a = tl.load(A + am[:, None] * (K // PAK) + ak[None, :],
                    mask=(am[:, None] < M // PAM) & (ak[None, :] < K // PAK), other=0)
        b = tl.load(B + bk[:, None] * (N // PBN) + bn[None, :],
                    mask=(bk[:, None] < K // PBK) & (bn[None, :] < N // PBN), other=0)
        sk = k0 // 32 + tl.arange(0, BK // 32)
        if HAS_SA:
            sa = tl.load(AS + rm[:, None] * (K // 32) + sk[None, :],
                         mask=(rm[:, None] < M) & (sk[None, :] < K // 32), other=0)
        else:
            sa = None
        if HAS_SB:
            sb = tl.load(BS + rn[:, None] * (K // 32) + sk[None, :],
                         mask=(rn[:, None] < N) & (sk[None, :] < K // 32), other=0)
        else:
            sb = None
        acc = tl.dot_scaled(a, sa, FA, b, sb, FB, acc, lhs_k_pack=KPA, rhs_k_pack=KPB)
    tl.store(C + rm[:, None] * N + rn[None, :], acc, mask=cmask)


def _triton(fa, fb, a, sa, b, sb, M, N, K, kpa, kpb, acc, BM=32, BN=32, BK=64):
    dev = [t.cuda() if t is not None else None for t in (a, sa, b, sb, acc)]
    a, sa, b, sb, acc = dev
    c = torch.full((M, N), float("nan"), device="cuda")
    dummy = torch.zeros(1, dtype=torch.uint8, device="cuda")
    e2 = (fa == "e2m1", fb == "e2m1")
    _triton_scaled_mm[(-(-M // BM), -(-N // BN))](
        a, sa if sa is not None else dummy, b, sb if sb is not None else dummy, c, acc,
        M, N, K, FA=fa, FB=fb, KPA=kpa, KPB=kpb, HAS_SA=sa is not None, HAS_SB=sb is not None,
        PAK=2 if e2[0] and kpa else 1, PAM=2 if e2[0] and not kpa else 1,
        PBK=2 if e2[1] and kpb else 1, PBN=2 if e2[1] and not kpb else 1, BM=BM, BN=BN, BK=BK)
    return c.cpu()


def main() -> int:
    cases = [(fa, fb, True, True) for fa, fb in PAIRS] + \
        [("e2m1", "e2m1", False, False), ("e4m3", "e2m1", True, False)]
    M, N, K = 72, 40, 96
    print(f"{'lhs':>5} {'rhs':>5} kpack  {'kit/bound':>9} {'vs triton':>9}  nan/inf same  "
          "bit-identical")
    bad = 0
    for fa, fb, kpa, kpb in cases:
        a, sa, b, sb = _inputs(fa, fb, M, N, K, kpa, kpb, seed=11)
        if sa is not None:
            sa[3, 1], sa[5, 0] = 255, 0
        acc = torch.randn(M, N, generator=torch.Generator().manual_seed(2))
        kit_c = _run(fa, fb, a, sa, b, sb, M, N, K, kpa, kpb, acc=acc, device="cuda")
        ref, bound = _reference(fa, fb, a, sa, b, sb, kpa, kpb, acc, False)
        lim = K * 2.0 ** -24 * bound
        fin = ref.isfinite()
        # Triton 3.6's sm_90 compiler asserts on *_k_pack=False (MMAv2.cpp, "Both $a and %b
        # should be DotOperand layout"): those cases check kitjit against the reference only
        tri_c = _triton(fa, fb, a, sa, b, sb, M, N, K, kpa, kpb, acc) if kpa and kpb \
            else ref.float()
        same_special = torch.equal(kit_c.isnan(), tri_c.isnan()) and torch.equal(
            kit_c.isinf() & (kit_c > 0), tri_c.isinf() & (tri_c > 0))
        r_ref = ((kit_c.double() - ref).abs()[fin] / lim[fin].clamp_min(1e-300)).max().item()
        r_tri = ((kit_c.double() - tri_c.double()).abs()[fin] / lim[fin].clamp_min(1e-300)) \
            .max().item()
        ident = torch.equal(kit_c.view(torch.int32), tri_c.view(torch.int32)) \
            if kpa and kpb else "n/a (Triton fails)"
        bad += not (same_special and r_ref <= 1 and r_tri <= 2)
        print(f"{fa:>5} {fb:>5} {int(kpa)}{int(kpb):<5} {r_ref:9.3f} {r_tri:9.3f}  "
              f"{str(same_special):>12}  {ident}")
    print("all agree" if not bad else f"{bad} case(s) disagree")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

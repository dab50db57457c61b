"""Tensor descriptors made in the kernel (`kit.make_tensor_descriptor`, TMA on sm_90a) against
the same kernel with host descriptors (`TensorDescriptor` arguments, the map encoded by the
launcher) and cuBLAS: what building the CUtensorMaps in the kernel costs.

    python benchmarks/devdesc_bench.py [--check]

Two tilings of C = A @ B^T (fp16, fp32 accumulation): one program per output tile (each
builds its three maps: the most map building per FLOP) and persistent programs (one per
SM, three maps each). Interleaved rounds of kit.testing.do_bench; medians.
"""

from __future__ import annotations

import argparse
import statistics

import torch

import kitjit as kit
from kitjit.testing import do_bench
from kitjit.tools.tensor_descriptor import TensorDescriptor


@kit.jit
def mm_dev(A, B, C, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
           PERSISTENT: kit.constexpr):
    ad = kit.make_tensor_descriptor(A, [M, K], [K, 1], [BM, BK])
    bd = kit.make_tensor_descriptor(B, [N, K], [K, 1], [BN, BK])
    cd = kit.make_tensor_descriptor(C, [M, N], [N, 1], [BM, BN])
    _tiles(ad, bd, cd, M, N, K, BM, BN, BK, PERSISTENT)


@kit.jit
def mm_host(ad, bd, cd, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
            PERSISTENT: kit.constexpr):
    _tiles(ad, bd, cd, M, N, K, BM, BN, BK, PERSISTENT)


@kit.jit
def _tiles(ad, bd, cd, M, N, K, BM: kit.constexpr, BN: kit.constexpr, BK: kit.constexpr,
           PERSISTENT: kit.constexpr):
    tiles_n = kit.cdiv(N, BN)
    step = kit.num_programs(0) if PERSISTENT else kit.cdiv(M, BM) * tiles_n
    for t in range(kit.program_id(0), kit.cdiv(M, BM) * tiles_n, step):
        pm, pn = t // tiles_n, t % tiles_n
        acc = kit.zeros((BM, BN), kit.float32)
        for k in range(0, kit.cdiv(K, BK)):
            acc = kit.dot(ad.load([pm * BM, k * BK]), bd.load([pn * BN, k * BK]).T, acc)
        cd.store([pm * BM, pn * BN], acc.to(kit.float16))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, nargs=3, default=[4096, 4096, 4096])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    M, N, K = args.size
    BM, BN, BK, W = 128, 128, 64, 8
    a = torch.randn(M, K, device="cuda").half()
    b = torch.randn(N, K, device="cuda").half()
    ref = (a.double() @ b.double().T)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tiles = kit.cdiv(M, BM) * kit.cdiv(N, BN)
    c = torch.empty(M, N, device="cuda").half()
    ds = [TensorDescriptor.from_tensor(x, blk) for x, blk in
          ((a, [BM, BK]), (b, [BN, BK]), (c, [BM, BN]))]
    runs = {}
    for pers in (False, True):
        g = (min(sms, tiles),) if pers else (tiles,)
        tag = "persistent" if pers else "per tile"
        runs[f"kit device descriptors, {tag}"] = (
            lambda g=g, p=pers: mm_dev[g](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK,
                                          PERSISTENT=p, num_warps=W))
        runs[f"kit host descriptors, {tag}"] = (
            lambda g=g, p=pers: mm_host[g](*ds, M, N, K, BM=BM, BN=BN, BK=BK, PERSISTENT=p,
                                           num_warps=W))
    runs["torch.matmul (cuBLAS)"] = lambda: torch.matmul(a, b.T, out=c)
    for name, fn in runs.items():  # compile, check
        c.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
        assert err < 1e-2, (name, err)
    times = {n: [] for n in runs}
    for _ in range(args.rounds):
        for n, fn in runs.items():
            times[n].append(do_bench(fn, warmup=25, rep=100, return_mode="median"))
    flop = 2.0 * M * N * K
    base = statistics.median(times["torch.matmul (cuBLAS)"])
    print(f"C = A @ B^T fp16 {M}x{N}x{K}, {torch.cuda.get_device_name(0)}")
    print(f"{'variant':44s} {'ms':>8s} {'TFLOP/s':>8s} {'vs cuBLAS':>9s}")
    for n, ts in times.items():
        ms = statistics.median(ts)
        print(f"{n:44s} {ms:8.3f} {flop / ms / 1e9:8.1f} {base / ms:9.2f}")


if __name__ == "__main__":
    main()

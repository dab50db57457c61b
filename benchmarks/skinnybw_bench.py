"""Weight-streaming GEMMs at the memory roofline (helper "skinnybw", issues 14 and 15): the
weights' TMA L2 promotion (256 bytes, the default, against 0) and the ring depth (bytes in
flight), timed interleaved in one process against eager / cuBLAS in the same rounds.

    python benchmarks/skinnybw_bench.py            # H200: about 3 minutes
    python benchmarks/skinnybw_bench.py --model-only   # the bandwidth model (CPU)

Sections: (1) the bandwidth model of rms_norm + linear 16x4096x6144 (bytes, the DRAM floor,
what the rest of the time goes to); (2) kit.graph: a short search of rms_norm + linear (the
timed set now holds the best candidates with and without promotion); for it and the gated
MLP, the fused plan's kernels at L2W 256 / 0 and two ring depths, graph replays against
eager; LoRA's generated kernels are level 1 (no TMA: nothing to switch); (3) the example
GEMM (examples/matmul.py, weights [N, K]) at M = 16 and 128 on Llama-3-8B qkv / o / gate-up
/ down with l2_b 256 / 0 and a deeper split-K ring, and the cluster split-K (cluster-a)
with L2_B 256 / 0, against cuBLAS (F.linear), L2 flushed before each run."""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
import time

import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))                 # this tree's kitjit, wherever it is run from
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))

SMS = 132
L2_SM_BPS = 38e9      # what one SM's TMA ring pulled on the H200 (kitjit/graph/space.py)
LATENCY_S = 1.0e-6    # a loaded memory system's round trip


# ----------------------------------------------------------------------------- (1) model
def rms_linear_model(M=16, K=4096, N=6144, BN=64, SPLIT=4, STAGES=4, bw=4.4e12,
                     smem_per_sm=227 * 1024) -> list[tuple[str, float, str]]:
    """(item, us, how) of the fused rms_norm + linear kernel (NORM "smem", FUSE) at one
    parameter set: the DRAM floor, the busiest SM's stream, and the fixed costs on top."""
    BK, MP = 64, max(16, 1 << (M - 1).bit_length())
    gn = -(-N // BN)
    progs = gn * SPLIT
    nbk = -(-K // BK)
    n_k = -(-nbk // SPLIT)
    w_bytes, x_bytes, out_bytes = K * N * 2, M * K * 2, M * N * 2
    parts = SPLIT * M * N * 4 if SPLIT > 1 else 0
    stage = (MP * BK + BK * BN) * 2
    smem = STAGES * stage + 3 * MP * BK * 2
    per_sm = min(smem_per_sm // smem, 64 // (4 * BN // 64), 32)   # shared memory, warps
    busiest = -(-progs // SMS)
    co = min(per_sm, busiest)
    flight = co * (STAGES - 1) * stage          # bytes one SM has asked for and not received
    need = bw / SMS * LATENCY_S                 # Little's law at the SM's share of DRAM
    floor = (w_bytes + x_bytes + out_bytes) / bw
    sm_stream = busiest * n_k * stage / min(L2_SM_BPS, flight / LATENCY_S)
    rows = [
        ("weights (DRAM, once)", w_bytes / bw * 1e6, f"{w_bytes / 1e6:.1f} MB"),
        ("x + out (DRAM, once)", (x_bytes + out_bytes) / bw * 1e6,
         f"{(x_bytes + out_bytes) / 1e3:.0f} KB"),
        ("DRAM floor", floor * 1e6, f"at {bw / 1e12:.1f} TB/s"),
        ("x re-read from L2", gn * x_bytes / 10e12 * 1e6,
         f"{gn * x_bytes / 1e6:.1f} MB over {gn} column blocks (L2 ~10 TB/s, overlapped)"),
        ("busiest SM's stream", sm_stream * 1e6,
         f"{busiest} programs x {n_k} k-steps x {stage / 1024:.0f} KB at <= "
         f"{L2_SM_BPS / 1e9:.0f} GB/s; {progs} programs on {SMS} SMs"),
        ("bytes in flight an SM", flight / 1024,
         f"KB ({co} programs x {STAGES - 1} stages x {stage / 1024:.0f} KB; Little needs "
         f"~{need / 1024:.0f} KB at {LATENCY_S * 1e6:.0f} us)"),
        ("launch + ramp", 1.5, "us: kernel start in a graph, descriptor fetch, the first "
         "copies' round trip before the first MMA"),
        ("split-K combine", (1.0 if SPLIT > 1 else 0.0),
         f"us: the last part's counter atomic and {SPLIT - 1} partials "
         f"({parts / 1e6:.2f} MB in all) read from L2, then the scaled store"),
        ("tail", 0.4 if progs % SMS else 0.2, "us: SMs with fewer programs idle at the end; "
         "the last k-steps drain the ring with nothing to overlap"),
    ]
    total = max(floor, sm_stream) * 1e6 + sum(r[1] for r in rows[-3:])
    rows.append(("modelled total", total, "max(DRAM floor, busiest SM) + fixed"))
    return rows


def print_model() -> None:
    print("== (1) bandwidth model: rms_norm + linear 16x4096x6144 fp16, fused (NORM smem)")
    for cfg in (dict(BN=64, SPLIT=4, STAGES=4), dict(BN=128, SPLIT=8, STAGES=3)):
        print(f"  -- BN {cfg['BN']} split {cfg['SPLIT']} stages {cfg['STAGES']} (H200 "
              "4.4 TB/s)")
        for item, v, how in rms_linear_model(**cfg):
            print(f"    {item:22s} {v:7.2f}  {how}")
    print("  measured (session 9, BN 64 split 4, 4 stages): search 15.7 us, graph replays "
          "17.3 us", flush=True)


# ----------------------------------------------------------------------------- (2) graph
def fused_params(g) -> tuple[str, object, list[dict]]:
    """The most fused plan's level-2 group and the params to time: the model's best two
    (BN, split) at L2W 256 and 0, each also with deeper rings (more bytes in flight)."""
    from kitjit.graph import plan, space

    name, groups = plan.partitions(g)[0]
    grp = groups[0]
    seen, out = set(), []
    for _, p in space.ranked(grp):
        if p.get("FORM") != "wgmma" or p.get("NORM") == "epi":
            continue
        key = (p["BN"], p["SPLIT"])
        if key in seen:
            continue
        seen.add(key)
        base = {k: v for k, v in p.items() if k != "L2W"}
        deeper = [s for s in (4, 6, 8) if s > base["STAGES"] and _fits(grp, dict(base, STAGES=s))]
        for st in dict.fromkeys((base["STAGES"], *deeper[:1], *deeper[-1:])):
            out += [dict(base, STAGES=st), dict(base, STAGES=st, L2W=0)]
        if len(seen) == 2:
            break
    return name, grp, out


def _fits(grp, p) -> bool:
    """A ring within the form's budget, no deeper than a program's k-steps, that still
    leaves every program resident at once (no second wave)."""
    from kitjit.graph import codegen_wgmma

    nbk = -(-grp.mms[0].inputs[0].shape[-1] // 64)
    progs = -(-grp.mms[0].shape[-1] // p["BN"]) * p["SPLIT"]
    smem = codegen_wgmma.smem_bytes(grp, p) + 1024
    return (smem <= codegen_wgmma.MAX_RING and p["STAGES"] <= -(-nbk // p["SPLIT"]) + 1
            and min(227 * 1024 // smem, 64 // p["num_warps"]) * SMS >= progs)


def _label(p: dict) -> str:
    return (f"BN{p['BN']} s{p['SPLIT']} st{p['STAGES']}{' F' if p.get('FUSE') else ''} "
            f"L2W{p.get('L2W', 256)}")


def bench_graph(args) -> list:
    import graph_bench as gb

    from kitjit.graph import search
    from kitjit.graph.module import module_source

    rows = []
    for wname in ("rmsnorm_linear", "gated_mlp"):
        wl = gb.WORKLOADS[wname]()
        g = wl["graph"]
        print(f"\n== (2) kit.graph {wl['desc']}", flush=True)
        if args.search_budget > 0 and wname == "rmsnorm_linear":
            t0 = time.perf_counter()
            opt = g.superoptimize(budget=args.search_budget, cache=False, progress=False,
                                  max_candidates=args.candidates)
            tim = sorted(opt.info["search"].get("timings", []), key=lambda x: x[0])
            print(f"  search {time.perf_counter() - t0:.0f} s, picked {opt.info['plan']}")
            for t, m, _, p in tim[:6]:
                print(f"    {t:6.1f} us (model {m:5.1f}) {p}")
        name, grp, params = fused_params(g)
        in_bytes = sum(math.prod(t.shape) * t.dtype.itemsize for t in g.inputs)
        sets = [wl["inputs"]("cuda") for _ in range(max(1, min(8, math.ceil(
            2 * gb.L2_BYTES / in_bytes))))]
        variants = {"eager": wl["eager"]}
        for i, p in enumerate(params):
            grp.params = p
            src = module_source(g, [grp], "skinnybw")
            mod = search._import(_write(src, f"skinnybw_{wname}_{i}"))
            ref = g.reference(sets[0])[0]
            err = gb._rel(mod.run(*sets[0])[0], ref)
            if not err <= 1e-2:
                print(f"  {_label(p)}: WRONG (rel err {err:.2e}), not timed")
                continue
            variants[_label(p)] = mod.run
        times = gb.time_variants(variants, sets, rounds=args.rounds, warm=0.2, seconds=0.05)
        eager = times["eager"][0]
        print(f"  {'variant':26s} {'graph us':>9s} {'called us':>9s} {'x eager':>8s}")
        for k, (gm, cm) in times.items():
            print(f"  {k:26s} {gm * 1e3:9.2f} {cm * 1e3:9.2f} {eager / gm:8.3f}", flush=True)
            rows.append((wname, k, gm * 1e3, eager / gm))
    print("\n  LoRA 16x256x4096 r16: level-1 kernels only (low-rank chain: no TMA, no "
          "promotion to switch)")
    return rows


def _write(src: str, stem: str) -> pathlib.Path:
    import tempfile

    path = pathlib.Path(tempfile.mkdtemp()) / f"{stem}.py"
    path.write_text(src)
    return path


# ----------------------------------------------------------------------------- (3) GEMM
LLAMA8B = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096),
           "down": (4096, 14336)}


def _steady(fn) -> float:
    from kitjit.testing import bench

    return bench(fn, warmup=2, rep=25)


class _Poisoned:
    """torch.empty / empty_like hand out NaN-filled float tensors inside the block, so an
    element a variant forgets to write fails its check instead of showing a recycled one."""

    def __enter__(self):
        self.orig = torch.empty, torch.empty_like

        def poisoning(orig):
            def alloc(*a, **k):
                t = orig(*a, **k)
                return t.fill_(math.nan) if t.dtype.is_floating_point else t
            return alloc
        torch.empty, torch.empty_like = map(poisoning, self.orig)

    def __exit__(self, *exc):
        torch.empty, torch.empty_like = self.orig


def fill_split(tiles: int, n_k: int, sms: int = SMS) -> int:
    """The split (2-16, >= 4 k-steps a part) whose tiles x split fill the SMs in the most
    nearly whole waves (ties: the smaller): 8B qkv's 48 column blocks split 2 leave 36 of
    132 SMs idle, split 11 is 4 whole waves of the persistent grid."""
    def waste(s):
        return -(tiles * s) / (-(-(tiles * s) // sms) * sms)
    return min((s for s in range(2, 17) if n_k // s >= 4), key=lambda s: (waste(s), s),
               default=1)


def bench_gemm(args) -> list:
    import matmul as mm

    from kitjit.nn.matmul_splitk import matmul_splitk_cluster

    rows = []
    print("\n== (3) examples/matmul.py, weights [N, K] (us; x cuBLAS), L2 flushed",
          flush=True)
    for layer, (N, K) in LLAMA8B.items():
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * K ** -0.5
        for M in args.m:
            a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            ref = F.linear(a, w).double()
            split = mm.splitk_for(M, N, K, mm.num_sms(a.device))
            runs = {"cublas": lambda: F.linear(a, w)}
            for l2 in (256, 0):
                runs[f"ex l2b{l2}"] = lambda l2=l2: mm.matmul(a, w, trans_b=True, l2_b=l2)
            if split > 1:     # the split path's ring, deeper (one program an SM)
                deep = dict(BM=64 if M <= 64 else 128, BN=128, BK=64, STAGES=6,
                            num_warps=4 if M <= 64 else 8, SPLIT_K=split, SLABS=M > 64)
                for l2 in (256, 0):
                    runs[f"ex st6 l2b{l2}"] = lambda l2=l2, d=deep: mm.matmul(
                        a, w, trans_b=True, l2_b=l2, **d)
                fill = fill_split(mm.kit.cdiv(N, 128), K // 64)
                if M <= 64 and fill != split:   # split-K that fills the SMs in whole waves
                    cfg = dict(deep, STAGES=4, SPLIT_K=fill)
                    for l2 in (256, 0):
                        runs[f"ex fill{fill} l2b{l2}"] = lambda l2=l2, c=cfg: mm.matmul(
                            a, w, trans_b=True, l2_b=l2, **c)
                for l2 in (256, 0):
                    runs[f"cluster-a l2b{l2}"] = lambda l2=l2: matmul_splitk_cluster(
                        a, w, True, share_a=True, L2_B=l2)
            ok = {}
            for n, f in runs.items():
                try:
                    with _Poisoned():
                        out = f().double()
                    err = ((out - ref).abs().max() / ref.abs().max()).item()
                    if err <= 1e-2:
                        ok[n] = f
                    else:
                        print(f"  {layer} M{M} {n}: WRONG (rel err {err:.2e})")
                except Exception as e:  # noqa: BLE001 (reported, not timed)
                    print(f"  {layer} M{M} {n}: failed {type(e).__name__}: {str(e)[:120]}")
            ms = {n: _steady(f) for n, f in ok.items()}
            for _ in range(args.rounds - 1):
                for n, f in ok.items():
                    ms[n] = min(ms[n], _steady(f))
            cub = ms["cublas"]
            line = "  ".join(f"{n} {v * 1e3:.1f} ({cub / v:.3f})" for n, v in ms.items())
            print(f"  8B {layer:7s} {M}x{N}x{K} split {split}: {line}", flush=True)
            rows.append((layer, M, {n: cub / v for n, v in ms.items()}))
        torch.cuda.empty_cache()
    for M in args.m:
        for n in ("ex l2b256", "ex l2b0", "ex st6 l2b256", "ex st6 l2b0", "cluster-a l2b256",
                  "cluster-a l2b0"):
            xs = [r[2][n] for r in rows if r[1] == M and n in r[2]]
            if xs:
                print(f"  geomean x cuBLAS M={M} {n:17s} "
                      f"{math.exp(sum(map(math.log, xs)) / len(xs)):.3f} ({len(xs)} shapes)")
        best = [max(v for k, v in r[2].items() if k != "cublas") for r in rows if r[1] == M]
        print(f"  geomean x cuBLAS M={M} best of each   "
              f"{math.exp(sum(map(math.log, best)) / len(best)):.3f}")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-only", action="store_true")
    ap.add_argument("--only", default="graph,gemm")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--m", type=lambda s: [int(x) for x in s.split(",")], default=[16, 128])
    ap.add_argument("--search-budget", type=float, default=15.0,
                    help="seconds of kit.graph search of rms_norm + linear (0: none)")
    ap.add_argument("--candidates", type=int, default=12)
    args = ap.parse_args()
    print_model()
    if args.model_only:
        return 0
    if not torch.cuda.is_available():
        print("no GPU: the model only")
        return 0
    print(f"\n{torch.cuda.get_device_name()}", flush=True)
    if "graph" in args.only:
        bench_graph(args)
    if "gemm" in args.only:
        bench_gemm(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

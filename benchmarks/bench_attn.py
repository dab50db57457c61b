"""The attention backward and decode sections of `benchmarks/bench.py` (issue 12, item 7).

- `bench_attention_bwd`: dQ+dK+dV of kitjit's backward (kitjit/nn/attention_backward.py) on
  the issue's six forward cases (and D=256, outside their geomean), against the backward
  of torch's flash and cuDNN SDPA backends, FA4 (when staged) and Triton's tutorial
  backward (06-fused-attention, benchmarks/triton_fused_attention.py; "not installed"
  without triton), FLOPs counted as 2.5x the forward's, every variant timed in the same
  interleaved rounds.
- `bench_decode`: one query row per head against a long KV cache (B 1/8/64, H 32, H_kv 8,
  Skv 4096/16384/32768, D 128, bf16), kitjit's sdpa (split-KV, kitjit/nn/attention_decode.py)
  against every torch SDPA backend that takes the call (math skipped: it materializes the
  scores). Timed two ways: with CUDA events around each call after an L2 flush, as the other
  sections (host launch cost included), and as CUDA-graph replays over enough copies of the
  cache to overflow L2 (the kernels alone, as a served model runs them). Where kitjit merges
  the splits in-kernel (one launch), the same splits through the combine kernel beside it.
"""

from __future__ import annotations

import math

import peers as peer_getters  # benchmarks/peers.py: FA4, when staged
import torch
import triton_fused_attention as tutorial  # Triton's 06-fused-attention (a peer)

from kitjit.testing import check

BWD_CASES = [(4, 32, 4096, 128), (4, 32, 4096, 64), (2, 16, 16384, 128)]   # x causal: six
BWD_D256 = [(2, 16, 4096, 256)]   # x causal; outside the geomean (its six cases)
DECODE_CASES = [(B, 32, 8, Skv, 128) for B in (1, 8, 64) for Skv in (4096, 16384, 32768)]


def _torch_backends():
    from torch.nn.attention import SDPBackend

    return (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION))


def bench_attention_bwd(results: dict, interleaved) -> None:
    """`interleaved`: bench.py's steady-state rounds (name -> fn to milliseconds)."""
    from attention_backward import reference_grads
    from torch.nn.attention import sdpa_kernel

    from kitjit.nn.attention import attention
    from kitjit.nn.attention_backward import attention_backward

    F = torch.nn.functional.scaled_dot_product_attention
    results["attention_bwd"] = []
    for B, H, S, D in BWD_CASES + BWD_D256:
        for causal in (False, True):
            q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                           for _ in range(4))
            flop = 2.5 * 4 * B * H * S * S * D / (2 if causal else 1) / 1e9
            o, lse = attention(q, k, v, causal)
            err = None
            if S <= 4096:       # float64 gradients of two heads (a head's own: no GQA here)
                got = attention_backward(do[:1, :2], q[:1, :2], k[:1, :2], v[:1, :2],
                                         o[:1, :2].contiguous(), lse[:1, :2].contiguous(),
                                         causal)
                want = reference_grads(q[:1, :2], k[:1, :2], v[:1, :2], do[:1, :2], causal)
                err = max(check(g, r, 2e-2, f"backward {B},{H},{S},{D} {n}")
                          for g, r, n in zip(got, want, ("dq", "dk", "dv")))
            runs = {"kitjit": lambda: attention_backward(do, q, k, v, o, lse, causal)}
            peers = {}
            for name, be in _torch_backends()[:2]:
                qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
                try:
                    with sdpa_kernel(be):
                        out = F(qg, kg, vg, is_causal=causal)
                    torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)

                    def run(out=out, qg=qg, kg=kg, vg=vg):
                        return torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
                    runs[name] = run
                except Exception as e:
                    peers[name] = f"n/a: {type(e).__name__}: {str(e)[:80]}"
            _tutorial_peer(q, k, v, do, causal, S, runs, peers)
            fa4 = peer_getters.fa4_backward(q, k, v, causal)   # None: not installed
            if fa4 is not None:
                runs["fa4"] = fa4
            else:
                peers["fa4"] = peer_getters.status().get("fa4", "not installed")
            ms = interleaved(runs)
            for name in ("flash", "cudnn", "fa4", "triton"):
                if name in ms:
                    peers[name] = round(flop / ms[name], 1)
            kit_tf = flop / ms["kitjit"]
            row = {"case": f"B{B} H{H} S{S} D{D}{' causal' if causal else ''}",
                   "kitjit_tflops": round(kit_tf, 1), "peers": peers, "rel_err": err}
            for name in ("flash", "cudnn", "fa4", "triton"):
                if isinstance(peers.get(name), float):
                    row[f"vs_{name}"] = round(kit_tf / peers[name], 3)
            results["attention_bwd"].append(row)
            print(row, flush=True)
    six = [r for r in results["attention_bwd"] if r["case"].split()[3] != "D256"]
    for name in ("flash", "cudnn", "triton"):
        xs = [r[f"vs_{name}"] for r in six if f"vs_{name}" in r]
        if xs:
            results[f"attention_bwd_geomean_vs_{name}"] = round(
                math.exp(sum(map(math.log, xs)) / len(xs)), 3)


def _tutorial_peer(q, k, v, do, causal: bool, S: int, runs: dict, peers: dict) -> None:
    """Triton's tutorial backward beside kitjit's (same bf16 inputs: the file casts P and dS
    to the inputs' dtype where the tutorial casts to fp16), checked like kitjit's on two
    heads in float64 where S <= 4096; its failure is a row entry, never the section's."""
    from attention_backward import reference_grads

    if not tutorial.available():
        peers["triton"] = "not installed"
        return
    try:
        run = tutorial.backward_runner(q, k, v, do, causal)
        if S <= 4096:
            got = tutorial.backward(do[:1, :2], q[:1, :2], k[:1, :2], v[:1, :2],
                                    *tutorial.forward(q[:1, :2], k[:1, :2], v[:1, :2], causal,
                                                      q.shape[-1] ** -0.5),
                                    causal, q.shape[-1] ** -0.5)
            want = reference_grads(q[:1, :2], k[:1, :2], v[:1, :2], do[:1, :2], causal)
            for g, r, n in zip(got, want, ("dq", "dk", "dv")):
                check(g, r, 2e-2, f"Triton tutorial backward {n}")
        run()
        runs["triton"] = run
    except Exception as e:          # e.g. out of shared memory at D=256
        peers["triton"] = f"n/a: {type(e).__name__}: {str(e)[:80]}"


def graph_ms(fns: list, min_ms: float = 20.0) -> float:
    """Milliseconds per call of the kernels alone: `fns` (one closure per copy of the inputs)
    captured round-robin into one CUDA graph, about `min_ms` of work; best of 5 replays."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        for f in fns:
            f()
        t1.record()
        torch.cuda.synchronize()
        n = max(len(fns), min(2000, int(min_ms / max(t0.elapsed_time(t1) / len(fns), 1e-3))))
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for i in range(n):
                fns[i % len(fns)]()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        g.replay()
        t1.record()
        torch.cuda.synchronize()
        best = min(best, t0.elapsed_time(t1) / n)
    del g
    return best


def host_us(fn, n: int = 200) -> float:
    """Host microseconds per call (few enough calls that the launch queue never fills)."""
    import time

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return dt


def bench_decode(results: dict, interleaved) -> None:
    from torch.nn.attention import sdpa_kernel

    import kitjit.nn.attention_decode as AD
    import kitjit.nn.functional as KF

    F = torch.nn.functional.scaled_dot_product_attention
    results["decode"] = []
    for B, H, Hkv, Skv, D in DECODE_CASES:
        kv_bytes = 2 * B * Hkv * Skv * D * 2
        copies = max(1, min(16, math.ceil(256e6 / kv_bytes)))   # graphs: overflow the 50 MB L2
        sets = []
        for _ in range(copies):
            sets.append((torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16),
                         torch.randn(B, Hkv, Skv, D, device="cuda", dtype=torch.bfloat16),
                         torch.randn(B, Hkv, Skv, D, device="cuda", dtype=torch.bfloat16)))
        q, k, v = sets[0]
        nb = min(B, 2)                  # float64 reference on two sequences of the batch
        r = F(q[:nb].double(), k[:nb].double(), v[:nb].double(), enable_gqa=True)
        plan = AD.route(B, H, Hkv, 1, Skv, D, False, D ** -0.5, None, None, None, True,
                        torch.bfloat16, 0)
        check(KF.sdpa(q, k, v, enable_gqa=True)[:nb], r, 1e-2, f"sdpa decode B{B} Skv{Skv}")
        runs = {"kitjit": lambda: KF.sdpa(q, k, v, enable_gqa=True)}
        gfns = {"kitjit": [lambda t=t: KF.sdpa(*t, enable_gqa=True) for t in sets]}
        if plan.fused:   # the same splits merged by the combine kernel (PDL): two launches
            o, _ = AD.attention_decode(q, k, v, fused=False)
            check(o[:nb], r, 1e-2, f"decode B{B} Skv{Skv} combine kernel")
            runs["kitjit_combine"] = lambda: AD.attention_decode(q, k, v, fused=False)
            gfns["kitjit_combine"] = [lambda t=t: AD.attention_decode(*t, fused=False)
                                      for t in sets]
        peers = {}
        for name, be in _torch_backends():
            def run(be=be, q=q, k=k, v=v):
                with sdpa_kernel(be):
                    return F(q, k, v, enable_gqa=True)
            try:
                check(run()[:nb], r, 1e-2, f"torch {name} decode")
                runs[name] = run
                gfns[name] = [lambda be=be, t=t: run(be, *t) for t in sets]
            except Exception as e:       # this backend does not take the call
                peers[name] = f"n/a: {type(e).__name__}: {str(e)[:80]}"
        fa4 = peer_getters.fa4_forward(q, k, v, False)    # FA4 packs GQA; no split-KV on sm90
        if fa4 is not None:
            runs["fa4"] = fa4
        else:
            peers["fa4"] = peer_getters.status().get("fa4", "not installed")
        ms = interleaved(runs)
        host = {n: round(host_us(runs[n]), 1) for n in ("kitjit", "kitjit_combine", "flash",
                                                         "cudnn") if n in runs}
        graph = {}
        for name, fns in gfns.items():
            try:
                graph[name] = round(graph_ms(fns) * 1e3, 2)
            except Exception as e:
                graph[name] = f"failed: {type(e).__name__}: {str(e)[:80]}"
        torch_us = {n: round(ms[n] * 1e3, 2) for n in ("flash", "cudnn", "efficient")
                    if n in ms}
        if "fa4" in ms:
            peers["fa4_us"] = round(ms["fa4"] * 1e3, 2)
        best_torch = min(torch_us.values()) if torch_us else None
        g_torch = [x for n, x in graph.items() if not n.startswith("kitjit")
                   and isinstance(x, float)]
        row = {"case": f"B{B} H{H}/{Hkv} Sq1 Skv{Skv} D{D}",
               "kitjit_us": round(ms["kitjit"] * 1e3, 2),
               "combine_us": round(ms["kitjit_combine"] * 1e3, 2) if plan.fused else None,
               "config": f"splits {plan.splits}" + (" fused" if plan.fused else ""),
               "torch_us": torch_us, "peers": peers, "graph_us": graph, "host_us": host,
               "kitjit_gbs": round(kv_bytes / ms["kitjit"] / 1e6, 1)}
        if best_torch:
            row["vs_best_torch"] = round(best_torch / row["kitjit_us"], 3)
        if g_torch and isinstance(graph.get("kitjit"), float):
            row["graph_vs_best_torch"] = round(min(g_torch) / graph["kitjit"], 3)
            row["graph_kitjit_gbs"] = round(kv_bytes / graph["kitjit"] / 1e3, 1)
        results["decode"].append(row)
        print(row, flush=True)
        sets = runs = gfns = r = None               # free this shape's caches
        torch.cuda.empty_cache()


def table_lines(results: dict) -> list[str]:
    def f(x, w=7, p=0):
        return f"{x:>{w}.{p}f}" if isinstance(x, (int, float)) else f"{'-':>{w}}"
    lines = []
    if results.get("attention_bwd"):
        lines.append(f"{'attention backward (bf16)':26} {'kitjit':>7} {'flash':>7} {'cuDNN':>7} "
                     f"{'FA4':>7} {'Triton':>7} {'x flash':>8} {'x cuDNN':>8} {'x FA4':>6} "
                     f"{'x Triton':>8}  (TFLOP/s, 2.5x fwd FLOPs)")
        for r in results["attention_bwd"]:
            p = r["peers"]
            lines.append(f"{r['case']:26} {f(r['kitjit_tflops'])} {f(p.get('flash'))} "
                         f"{f(p.get('cudnn'))} {f(p.get('fa4'))} {f(p.get('triton'))} "
                         f"{f(r.get('vs_flash'), 8, 2)} {f(r.get('vs_cudnn'), 8, 2)} "
                         f"{f(r.get('vs_fa4'), 6, 2)} {f(r.get('vs_triton'), 8, 2)}")
        lines.append("geomean (the six D 64/128 cases): x flash "
                     f"{results.get('attention_bwd_geomean_vs_flash')}, x cuDNN "
                     f"{results.get('attention_bwd_geomean_vs_cudnn')}, x Triton tutorial "
                     f"{results.get('attention_bwd_geomean_vs_triton')}")
        why = {r["peers"].get("triton") for r in results["attention_bwd"]} - {None}
        why = [w for w in why if isinstance(w, str)]
        if why:
            lines.append(f"Triton tutorial backward: {'; '.join(sorted(why))}")
        lines.append("Triton tutorial: benchmarks/triton_fused_attention.py (its algorithm and "
                     "launch; P, dS in the inputs' dtype; non-causal without its mask)")
    if results.get("decode"):
        lines.append(f"{'decode (bf16, us)':28} {'kitjit':>7} {'flash':>7} {'cuDNN':>7} "
                     f"{'effic.':>7} {'x best':>7} | graph: {'kitjit':>7} {'flash':>7} "
                     f"{'cuDNN':>7} {'x best':>7} {'GB/s':>6}  config; combine kernel "
                     "(events / graph us)")
        for r in results["decode"]:
            t, g = r["torch_us"], r["graph_us"]
            lines.append(f"{r['case']:28} {f(r['kitjit_us'], 7, 1)} {f(t.get('flash'), 7, 1)} "
                         f"{f(t.get('cudnn'), 7, 1)} {f(t.get('efficient'), 7, 1)} "
                         f"{f(r.get('vs_best_torch'), 7, 2)} |        {f(g.get('kitjit'), 7, 1)} "
                         f"{f(g.get('flash'), 7, 1)} {f(g.get('cudnn'), 7, 1)} "
                         f"{f(r.get('graph_vs_best_torch'), 7, 2)} "
                         f"{f(r.get('graph_kitjit_gbs'), 6)}  {r['config']}; "
                         f"{f(r.get('combine_us'), 5, 1)} / "
                         f"{f(g.get('kitjit_combine'), 5, 1)}; FA4 us "
                         f"{r['peers'].get('fa4_us', 'n/i')} host us {r.get('host_us')}")
    return lines

"""superoptimize(): enumerate fusion plans and their tile/grid choices, rank them by the cost
model, verify each candidate on fresh random inputs against the float64 reference (a wrong
kernel is dropped and counted, never returned), time the survivors on the GPU within the
budget (without one: the best-ranked candidate of each fusion plan is verified in the
interpreter, and the cheapest verified one wins), and cache the winner's source on disk
per (graph, GPU, kitjit version) under <kitjit cache dir>/graph/."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time
import uuid

import torch

from .. import __version__
from ..cache import cache_dir, disk_cache_enabled
from ..testing import has_gpu, rel_error
from . import plan
from .graph import KernelGraph

GENERATOR_VERSION = "1"
TOL = {torch.float16: 1e-2, torch.bfloat16: 3e-2, torch.float32: 1e-4}
_loaded = 0


class Optimized:
    """The searched graph: call it with the inputs (torch tensors), get the outputs (a
    list). `source()` is the generated kitjit module, runnable as-is from a file."""

    def __init__(self, module, path: pathlib.Path, info: dict):
        self.module, self.path, self.info = module, path, info

    def __call__(self, *args, inputs=None):
        if inputs is None:
            inputs = args
        elif args:
            raise TypeError("pass the inputs either positionally or as inputs=[...]")
        return self.module.run(*inputs)

    def source(self) -> str:
        return self.path.read_text()

    def __repr__(self) -> str:
        return f"<kit.graph optimized: {self.info.get('plan')} from {self.path}>"


def _import(path: pathlib.Path):
    global _loaded
    _loaded += 1
    spec = importlib.util.spec_from_file_location(f"kitjit_graph_{_loaded}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _gpu_name() -> str:
    return torch.cuda.get_device_name() if has_gpu() else "interpreter"


def _random_inputs(g: KernelGraph, device, positive: bool):
    out = []
    for t in g.inputs:
        x = torch.rand(t.shape) + 0.5 if positive else torch.randn(t.shape)
        x = torch.empty_strided(t.shape, t.strides, dtype=t.dtype, device=device).copy_(x)
        out.append(x)
    return out


def verify(g: KernelGraph, mod, device, trials: int = 3) -> str | None:
    """None if the module matches the reference on `trials` fresh inputs, else why not.
    Outputs are allocated NaN-filled, so an element never written fails."""
    def poisoned(shape, dtype, dev):
        return torch.full(shape, float("nan"), dtype=dtype, device=dev)

    saved, mod._empty = mod._empty, poisoned
    try:
        for _ in range(trials):
            ins = _random_inputs(g, device, positive=False)
            refs = g.reference([x.cpu() for x in ins])
            if not all(bool(r.isfinite().all()) for r in refs):
                ins = _random_inputs(g, device, positive=True)   # sqrt/rsqrt of negatives
                refs = g.reference([x.cpu() for x in ins])
            try:
                outs = mod.run(*ins)
            except Exception as e:  # a candidate that fails to compile or run is dropped
                return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            for i, (o, r, t) in enumerate(zip(outs, refs, g.outputs)):
                if tuple(o.shape) != t.shape:
                    return f"output {i}: shape {tuple(o.shape)}, expected {t.shape}"
                err = rel_error(o, r)
                if not err <= TOL[t.dtype]:
                    return f"output {i}: relative error {err:.3g} over {TOL[t.dtype]:g}"
    finally:
        mod._empty = saved
    return None


def candidates(g: KernelGraph, per_class: int = 4):
    """(cost, class name, groups with params) ranked by the cost model: for each fusion
    plan, its groups' r-th best parameter choices together, r < per_class."""
    import copy

    out = []
    for name, groups in plan.partitions(g):
        ranked = []
        for grp in groups:
            ps = sorted(plan.param_choices(grp), key=lambda p: plan.cost(grp, p))
            if not ps:
                break
            ranked.append(ps)
        else:
            for r in range(min(per_class, max(len(ps) for ps in ranked))):
                gs = []
                for grp, ps in zip(groups, ranked):
                    c = copy.copy(grp)
                    c.params = ps[min(r, len(ps) - 1)]
                    gs.append(c)
                out.append((sum(plan.cost(c, c.params) for c in gs), name, gs))
    return out


def superoptimize(g: KernelGraph, budget: float = 60.0, trials: int = 3, cache: bool = True,
                  progress: bool = True, per_class: int = 4) -> Optimized:
    if not g.outputs:
        raise ValueError("superoptimize: mark at least one output (g.mark_output(t))")
    if not g.inputs:
        raise ValueError("superoptimize: the graph has no inputs")
    start = time.time()
    gpu = has_gpu()
    device = "cuda" if gpu else "cpu"
    key = hashlib.sha256(f"{g.signature()}|{_gpu_name()}|{__version__}|"
                         f"{GENERATOR_VERSION}".encode()).hexdigest()[:32]
    root = cache_dir() / "graph"
    final = root / key
    use_cache = cache and disk_cache_enabled()

    def say(msg: str) -> None:
        if progress:
            print(f"kit.graph [{time.time() - start:5.1f}s] {msg}", file=sys.stderr, flush=True)

    if use_cache and (final / "kernel.py").exists():
        info = json.loads((final / "meta.json").read_text())
        say(f"cached: {info.get('plan')}")
        return Optimized(_import(final / "kernel.py"), final / "kernel.py", info)

    cands = sorted(candidates(g, per_class), key=lambda c: c[0])
    if not cands:
        raise NotImplementedError("superoptimize: no candidate fits this graph yet (rows "
                                  "too long for registers, or tiles over budget)")
    classes = list(dict.fromkeys(name for _, name, _ in cands))
    mode = "GPU" if gpu else "no GPU: verifying the best of each plan in the interpreter"
    say(f"{len(cands)} candidates in {len(classes)} fusion plans ({mode})")
    if not gpu:   # verification only: the first candidate of each class
        todo = [next(c for c in cands if c[1] == name) for name in classes]
    else:
        todo = cands
    work = pathlib.Path(tempfile.mkdtemp(prefix="kitjit-graph-"))
    stats = {"candidates": len(cands), "classes": len(classes), "verified": 0, "failed": 0,
             "timed": 0, "failures": []}
    best = None   # (ms or cost, source, name, groups)
    try:
        for i, (est, name, groups) in enumerate(todo):
            if best is not None and time.time() - start > budget:
                say(f"budget of {budget:g}s spent after {i} of {len(todo)} candidates")
                break
            header = (f"kitjit.graph kernels for graph {g.signature()[:16]} ({name}).\n\n"
                      + "\n".join(f"k{j}: {grp.describe()}" for j, grp in enumerate(groups))
                      + f"\ncost model: {est * 1e6:.1f} us on an H100")
            src = plan.module_source(g, groups, header)
            path = work / f"cand{i}.py"
            path.write_text(src)
            mod = _import(path)
            why = verify(g, mod, device, trials)
            if why is not None:
                stats["failed"] += 1
                stats["failures"].append(f"{name}: {why}")
                say(f"candidate {i + 1}/{len(todo)} ({name}) dropped: {why}")
                continue
            stats["verified"] += 1
            score = est
            if gpu:
                from ..testing import do_bench

                ins = _random_inputs(g, device, positive=False)
                score = do_bench(lambda m=mod, a=ins: m.run(*a)) * 1e-3
                stats["timed"] += 1
            say(f"candidate {i + 1}/{len(todo)} ({name}) ok: "
                f"{'measured' if gpu else 'modelled'} {score * 1e6:.1f} us")
            if best is None or score < best[0]:
                best = (score, src, name, groups, est)
        if best is None:
            raise RuntimeError("superoptimize: every candidate failed verification:\n  "
                               + "\n  ".join(stats["failures"][:10]))
        score, src, name, groups, est = best
        info = {"plan": name, "kernels": [grp.describe() for grp in groups],
                "seconds": score, "measured": gpu, "model_seconds": est, "gpu": _gpu_name(),
                "kitjit": __version__, "search": stats}
        say(f"chose {name}: {len(groups)} kernel(s), {score * 1e6:.1f} us "
            f"({'measured' if gpu else 'modelled'}); {stats['failed']} dropped")
        if use_cache:
            path = _store(root, final, src, info)
        else:
            path = work / "kernel.py"
            path.write_text(src)
            work = None   # keep it: the module's kernels read their source from it
        return Optimized(_import(path), path, info)
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


def _store(root: pathlib.Path, final: pathlib.Path, src: str, info: dict) -> pathlib.Path:
    """Write kernel.py and meta.json into a temp dir and rename it into place (atomic:
    readers see all or nothing; a concurrent writer's equal result wins or loses whole)."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    (tmp / "kernel.py").write_text(src)
    (tmp / "meta.json").write_text(json.dumps(info, indent=1, default=str))
    try:
        os.replace(tmp, final)
    except OSError:       # another process stored it first
        shutil.rmtree(tmp, ignore_errors=True)
    return final / "kernel.py"

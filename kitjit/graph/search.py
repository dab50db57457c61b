"""superoptimize(): enumerate fusion plans (plan.py) and their tile/grid choices (space.py),
rank them by the cost model, verify each candidate on random inputs against the float64
reference (a wrong kernel is dropped and counted, never returned), drop candidates whose
kernels spill registers, time the survivors on the GPU within the budget, check the winner
once more on fresh inputs, and cache its source per (graph, GPU, kitjit version) in kitjit's
kernel cache (`kitjit cache list` shows it as graph:<ops>).

Without a GPU the interpreter verifies the best-modelled candidate of each fusion plan, and
the cheapest verified one by the model wins (so CI runs the whole search)."""

from __future__ import annotations

import hashlib
import importlib.util
import pathlib
import shutil
import tempfile
import warnings

import torch

from .. import __kitjit_version__
from ..cache import KernelCache, disk_cache_enabled
from ..testing import has_gpu
from . import advisories, plan, space
from .graph import VIEWS, KernelGraph
from .host import Host
from .module import module_source
from .progress import Progress

GENERATOR_VERSION = "8"
TOL = {torch.float16: 1e-2, torch.bfloat16: 1e-2, torch.float32: 1e-4}
MAX_CANDIDATES = 24
L2W_TWINS = 4    # timed candidates whose twin with promoted weight copies is timed too
_loaded = 0


class Optimized:
    """The searched graph: call it with the inputs (torch tensors), get the outputs (a
    list). `source()` is the generated kitjit module, runnable as-is from a file. Calls
    after the first of an input signature replay a route made from it (host.py: the
    module's `run` with its per-call Python precomputed)."""

    def __init__(self, module, path: pathlib.Path, info: dict):
        self.module, self.path, self.info = module, path, info
        self.host = Host(module)

    def __call__(self, *args, inputs=None):
        if inputs is None:
            inputs = args
        elif args:
            raise TypeError("pass the inputs either positionally or as inputs=[...]")
        return self.host(inputs)

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


# ----------------------------------------------------------------------------- verification
def random_inputs(g: KernelGraph, device, kind: str = "normal") -> list[torch.Tensor]:
    """Fresh inputs in the declared layouts: standard normal, or uniform in [0.5, 1.5) for
    graphs that take square roots."""
    out = []
    for t in g.inputs:
        if kind == "normal":
            x = torch.randn(t.shape, device=device)
        else:
            x = torch.rand(t.shape, device=device) + 0.5
        out.append(torch.empty_strided(t.shape, t.strides, dtype=t.dtype,
                                       device=device).copy_(x))
    return out


class Trials:
    """Input sets and their float64 reference outputs, made once per search (on the GPU
    when there is one), so that every candidate is checked on the same several draws."""

    def __init__(self, g: KernelGraph, device, n: int):
        self.g, self.sets = g, []
        for _ in range(n):
            ins = random_inputs(g, device)
            refs = g.reference(ins)
            if not all(bool(r.isfinite().all()) for r in refs):
                ins = random_inputs(g, device, "positive")   # sqrt/rsqrt of negatives
                refs = g.reference(ins)
            self.sets.append((ins, refs))


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64 on the tensors' device; NaN anywhere: inf."""
    o = out.detach().to(ref.device, torch.float64)
    if not bool(o.isfinite().all()) and bool(ref.isfinite().all()):
        return float("inf")
    n = float(ref.norm())
    d = float((o - ref).norm())
    return d / n if n else d


def verify(g: KernelGraph, mod, trials: Trials) -> str | None:
    """None if the module matches the reference on every trial, else why not. Outputs and
    workspaces are allocated NaN-filled, so an element never written fails."""
    def poisoned(shape, dtype, dev):
        return torch.full(shape, float("nan"), dtype=dtype, device=dev)

    saved = mod._empty, mod._work
    mod._empty = poisoned
    mod._work = lambda shape, dev: poisoned(shape, torch.float32, dev)
    try:
        for ins, refs in trials.sets:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")   # spills: reported by resources()
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
        mod._empty, mod._work = saved
    return None


def resources(mod) -> list:
    """The compiled kernels of a module that ran on the GPU (their CompiledKernel)."""
    from ..jit import JITFunction
    from ..launcher import record_kernel

    out = []
    for v in vars(mod).values():
        if isinstance(v, JITFunction):
            for record in v.cache.values():
                ck = record_kernel(record)
                if ck is not None:
                    out.append(ck)
    return out


# ----------------------------------------------------------------------------- candidates
def candidates(g: KernelGraph, per_class: int = 8) -> list:
    """(modelled seconds, plan name, groups with params, family), best first. For each
    fusion plan: its groups' r-th best parameter choices together (r < per_class), and for
    each group the best choice of each of its families (form, packing, prefetch, norm
    placement, split) with the other groups at their best."""
    import copy

    out, seen = [], set()
    for name, groups in plan.partitions(g):
        ranked = [space.ranked(grp) for grp in groups]
        if not all(ranked):
            continue
        picks = [[min(r, len(rs) - 1) for rs in ranked]
                 for r in range(min(per_class, max(len(rs) for rs in ranked)))]
        for j, rs in enumerate(ranked):
            fams: dict = {}
            for i, (_, p) in enumerate(rs):
                fams.setdefault(_param_family(p, groups[j]), i)
            for i in fams.values():
                picks.append([i if k == j else 0 for k in range(len(ranked))])
        for sel in picks:
            if (name, tuple(sel)) in seen:
                continue
            seen.add((name, tuple(sel)))
            gs = []
            for grp, rs, i in zip(groups, ranked, sel):
                c = copy.copy(grp)
                c.params = rs[i][1]
                gs.append(c)
            est = sum(space.cost(c, c.params) for c in gs)
            out.append((est, name, gs, name + "|" + "|".join(_param_family(c.params, c)
                                                              for c in gs)))
    out.sort(key=lambda c: c[0])
    return out


def _param_family(p: dict, grp=None) -> str:
    """What makes parameter sets different in kind (not just in tile size). For the level-2
    attention form the key tile BN and the split count instead of the stages: they set how
    many steps a program's loop takes and how many programs share an SM, which the model
    only estimates (BN 32 against 64 was 1.4x on an H200; one program per SM against two
    1.06x), and whether the ring is deep (3+ stages) where the grid has one program an SM or
    fewer (space.deep_ring: ~4% for the hand decode kernel there, a guess for the model;
    elsewhere a deeper ring changed little, so 2 and 3+ are both timed only there). For the
    level-2 matmul the tile BN and how many programs its busiest SM runs (column blocks x
    splits over the SMs):
    whether co-resident programs share an SM's stream or add to it is the model's guess
    (space.L2_SM_BPS), so each count is timed at its best split. (The weights' L2
    promotion is no family: `pick` times the best candidates with both.)"""
    if p.get("FORM") == "wgmma" and grp is not None and grp.kind == "matmul":
        progs = -(-grp.mms[0].shape[-1] // p["BN"]) * p.get("SPLIT", 1)
        norm = f",NORM={p['NORM']}" if "NORM" in p else ""
        return f"FORM=wgmma{norm},BN={p['BN']},per_sm={-(-progs // space.SMS)}"
    if "PACK" in p and p.get("FORM") == "wgmma":   # (and a deep ring where it may pay)
        keys = ("FORM", "PACK", "BN", "SPLIT")
        deep = grp is not None and space.deep_ring(grp, p)
        return ",".join(f"{k}={p[k]}" for k in keys) + (",deep" if deep else "") + (
            ",fused" if p.get("FUSE") else "")
    else:
        keys = ("FORM", "PACK", "STAGES", "NORM")
    return ",".join(f"{k}={p[k]}" for k in keys if k in p) + (
        ",split" if p.get("SPLIT", 1) > 1 else "") + (",fused" if p.get("FUSE") else "")


def l2w_twin(c):
    """Candidate `c` with its weights' copies at L2's default 256-byte promotion (None where
    no group of it reads weights with promotion 0, L2W 0, which the model prefers in ties)."""
    import copy

    if not any(g.params.get("L2W") == 0 for g in c[2]):
        return None
    gs = []
    for g in c[2]:
        t = copy.copy(g)
        t.params = {k: v for k, v in g.params.items() if k != "L2W"}
        gs.append(t)
    return (sum(space.cost(g, g.params) for g in gs), c[1], gs,
            c[1] + "|" + "|".join(_param_family(g.params, g) for g in gs))


def pick(cands: list, limit: int) -> list:
    """What the GPU times, `limit` in all: the best of each fusion plan, the best of each
    form and then of each family of the two best plans (the model may misjudge a whole
    family), then the rest by modelled time; and the best L2W_TWINS of those that read
    weights without L2 promotion once more with it (l2w_twin), so that timing, not the
    model's tie-break, picks the promotion."""
    n_twins = min(L2W_TWINS, limit // 6)
    chosen = _pick(cands, limit - n_twins)
    twins = [t for t in map(l2w_twin, chosen) if t is not None][:n_twins]
    return sorted(chosen + twins, key=lambda c: c[0])


def _pick(cands: list, limit: int) -> list:
    plans = list(dict.fromkeys(c[1] for c in cands))
    chosen: list = []

    def add(c) -> None:
        if c not in chosen and len(chosen) < limit:
            chosen.append(c)

    for name in plans:
        add(next(c for c in cands if c[1] == name))
    forms: set = set()   # each form (level 2, mma, FMA) of the two best plans: a hedge
    for c in cands:      # against a model that misjudges a whole level
        f = (c[1], tuple(gr.params.get("FORM") for gr in c[2]))
        if c[1] in plans[:2] and f not in forms:
            forms.add(f)
            add(c)
    fams: set = set()
    for c in cands:
        if c[1] in plans[:2] and c[3] not in fams:
            fams.add(c[3])
            add(c)
    for c in cands:
        add(c)
    return sorted(chosen, key=lambda c: c[0])


# ----------------------------------------------------------------------------- search
def superoptimize(g: KernelGraph, budget: float = 120.0, trials: int = 3, cache: bool = True,
                  progress: bool | None = None, max_candidates: int = MAX_CANDIDATES
                  ) -> Optimized:
    """Search, verify, time and cache fused kernels for `g`; returns a callable module.
    `budget`: seconds of search (honoured between candidates; the search goes on past it
    only while no candidate has verified yet, and says so). `progress`: the stderr line
    (None: on unless KITJIT_LOG routes the events through logging)."""
    if not g.outputs:
        raise ValueError("superoptimize: mark at least one output (g.mark_output(t))")
    if not g.inputs:
        raise ValueError("superoptimize: the graph has no inputs")
    bar = Progress(progress)
    gpu = has_gpu()
    device = "cuda" if gpu else "cpu"
    key = hashlib.sha256(f"kit.graph|{g.signature()}|{_gpu_name()}|{__kitjit_version__}|"
                         f"{GENERATOR_VERSION}".encode()).hexdigest()
    kc = KernelCache()
    use_cache = cache and disk_cache_enabled()
    if use_cache and (entry := kc.get(key)) is not None and entry.has("kernel.py"):
        bar.say(f"cached: {entry.meta.get('plan')}")
        return Optimized(_import(entry.path / "kernel.py"), entry.path / "kernel.py",
                         dict(entry.meta))

    cands = candidates(g)
    if not cands:
        raise NotImplementedError("superoptimize: no candidate fits this graph yet (rows "
                                  "too long for registers, or tiles over budget)")
    classes = list(dict.fromkeys(c[1] for c in cands))
    if gpu:
        todo = pick(cands, max_candidates)
        mode = "GPU: verify, time"
    else:   # verification only: the first candidate of each class
        todo = [next(c for c in cands if c[1] == name) for name in classes]
        mode = "no GPU: verifying the best of each plan in the interpreter"
    bar.total = len(todo)
    bar.say(f"{len(cands)} candidates in {len(classes)} fusion plans; trying {len(todo)} "
            f"({mode}); budget {budget:g}s")
    work = pathlib.Path(tempfile.mkdtemp(prefix="kitjit-graph-"))
    stats = {"candidates": len(cands), "classes": len(classes), "tried": 0, "verified": 0,
             "failed": 0, "spilled": 0, "timed": 0, "failures": [], "timings": [],
             "advisories": {}}   # candidate #: the assembler's notes (advisories.py)
    ok: list = []        # (score, est, src, name, groups, mod)
    spilled: list = []   # verified, but their kernels spill registers
    try:
        sets = Trials(g, device, trials)
        over = False
        for i, (est, name, groups, _) in enumerate(todo):
            if bar.elapsed() > budget:
                if ok:
                    bar.say(f"budget of {budget:g}s spent after {i} of {len(todo)} "
                            "candidates")
                    break
                if not over:
                    bar.say("budget spent, but no candidate verified yet: going on")
                    over = True
            stats["tried"] += 1
            src = module_source(g, groups, _header(g, name, groups, est))
            path = work / f"cand{i}.py"
            path.write_text(src)
            mod = _import(path)
            notes: list[str] = []
            with advisories.held(notes):   # compiled here: ptxas's notes on a mere try
                why = verify(g, mod, sets)
            if notes:
                stats["advisories"][f"#{i + 1}"] = notes
            if why is None and gpu and (spills := sum(ck.n_spills for ck in resources(mod))):
                # correct but spilling: kept only as a last resort, never timed
                stats["spilled"] += 1
                spilled.append((est, est, src, name, groups, mod))
                bar.step(f"#{i + 1} set aside: spills {spills} bytes of registers")
                continue
            if why is not None:
                stats["failed"] += 1
                stats["failures"].append(f"{name} {[gr.params for gr in groups]}: {why}")
                bar.step(f"#{i + 1} dropped: {why}")
                continue
            stats["verified"] += 1
            score = est
            if gpu:
                try:
                    with advisories.held(notes):
                        score = _time(mod, sets.sets[0][0])
                except Exception as e:  # noqa: BLE001 (a run that fails when timed)
                    stats["failed"] += 1
                    stats["failures"].append(f"{name}: timing failed: {e}")
                    bar.step(f"#{i + 1} dropped: timing failed ({type(e).__name__})")
                    continue
                if notes:
                    stats["advisories"][f"#{i + 1}"] = notes
                stats["timed"] += 1
                stats["timings"].append((round(score * 1e6, 2), round(est * 1e6, 2), name,
                                         [gr.params for gr in groups]))
            ok.append((score, est, src, name, groups, mod))
            best = min(ok, key=lambda c: c[0])
            bar.step(f"#{i + 1} {'%.1f us' % (score * 1e6)}"
                     f"{'' if gpu else ' (modelled)'}", best=f"{best[0] * 1e6:.1f} us")
        bar.close()
        if not ok and spilled:
            bar.say("every verified candidate spills registers: taking the best modelled")
            ok = spilled
        if not ok:
            raise RuntimeError("superoptimize: every candidate failed verification:\n  "
                               + "\n  ".join(stats["failures"][:10]))
        # the winner once more, on inputs no candidate has seen
        fresh = Trials(g, device, trials)
        winner = None
        for cand in sorted(ok, key=lambda c: c[0]):
            why = verify(g, cand[5], fresh)
            if why is None:
                winner = cand
                break
            stats["failures"].append(f"{cand[3]}: failed on fresh inputs: {why}")
            bar.say(f"the best candidate failed on fresh inputs ({why}); next")
        if winner is None:
            raise RuntimeError("superoptimize: no candidate passed the check on fresh "
                               "inputs:\n  " + "\n  ".join(stats["failures"][-5:]))
        score, est, src, name, groups, _ = winner
        info = {"name": _entry_name(g), "plan": name,
                "kernels": [grp.describe() for grp in groups],
                "signature": ",".join(f"{_SHORT[t.dtype]}[{','.join(map(str, t.shape))}]"
                                      for t in g.inputs),
                "arch": _gpu_name(), "seconds": score, "measured": gpu,
                "model_seconds": est, "search_seconds": round(bar.elapsed(), 2),
                "graph": g.signature(), "kitjit": __kitjit_version__, "search": stats}
        bar.say(f"chose {name}: {len(groups)} kernel(s), {score * 1e6:.1f} us "
                f"({'measured' if gpu else 'modelled'}); {stats['failed']} dropped")
        path = None
        if use_cache:
            entry = kc.put(key, {"kernel.py": src}, info)
            if entry.persisted:
                path = entry.path / "kernel.py"
        if path is None:
            keep = pathlib.Path(tempfile.mkdtemp(prefix="kitjit-graph-"))
            path = keep / "kernel.py"
            path.write_text(src)
        return Optimized(_import(path), path, info)
    finally:
        bar.close()
        shutil.rmtree(work, ignore_errors=True)


_SHORT = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}


def _entry_name(g: KernelGraph) -> str:
    """What `kitjit cache list` shows: graph:<its ops>, shortened past 40 characters."""
    ops = "+".join(dict.fromkeys(t.op for t in g.nodes if t.op not in ("input", *VIEWS)))
    return "graph:" + (ops if len(ops) <= 40 else ops[:37] + "...")


def _header(g: KernelGraph, name: str, groups, est: float) -> str:
    return (f"kitjit.graph kernels for graph {g.signature()[:16]} ({name}).\n\n"
            + "\n".join(f"k{j}: {grp.describe()}" for j, grp in enumerate(groups))
            + f"\ncost model: {est * 1e6:.1f} us ({space.bandwidth() / 1e12:.2f} TB/s DRAM)")


def _time(mod, ins) -> float:
    """Seconds per run on the GPU: CUDA-graph replays (launch gaps shrunk, as a serving
    loop runs it), or plain timed calls where capture fails."""
    from ..testing import do_bench, do_bench_cudagraph

    def fn():
        return mod.run(*ins)

    try:
        return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e-3
    except Exception:   # noqa: BLE001 (capture is an optimisation of the measurement)
        torch.cuda.synchronize()
        return do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e-3


__all__ = ["Optimized", "superoptimize", "verify", "candidates", "Trials"]

"""The differential mode for any kernel: `shadowed()` runs every GPU launch of a @kit.jit
kernel a second time in the interpreter, on CPU copies of its tensor arguments taken just
before the launch (whole storages, so views, offsets and aliasing stay as they were), and
compares every tensor argument after both ran: integers and bools bit for bit, floats
within a few units of the dtype's precision relative to the tensor's largest value (the
GPU's reductions and fused multiply-adds round in another order), NaN and infinity at the
same places. Used by tests/test_differential.py for the examples and, with `--shadow`, for
any gpu test (the port suite: `pytest -m gpu --shadow tests/ports`)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys

import torch

from kitjit.jit import JITFunction

# normwise tolerance per dtype: max|gpu - interpreter| <= TOL * max|interpreter|
TOL = {torch.float64: 1e-10, torch.float32: 1e-4, torch.float16: 2e-3,
       torch.bfloat16: 1.6e-2, torch.float8_e4m3fn: 0.13, torch.float8_e5m2: 0.26}
MAX_BYTES = 64 << 20  # storages larger than this are not mirrored (the launch is skipped)


@dataclasses.dataclass
class Shadow:
    kernel: str
    verdict: str        # "agree", "DISAGREE", "skipped: <why>"
    detail: str = ""


def _mirror(args, kw):
    """CPU copies of the CUDA tensors among `args` / `kw` (one copy per storage), and the
    (gpu tensor, cpu tensor) pairs to compare afterwards."""
    storages: dict[int, torch.UntypedStorage] = {}
    pairs = []

    def cpu(a):
        if not (isinstance(a, torch.Tensor) and a.is_cuda):
            return a
        st = a.untyped_storage()
        key = st.data_ptr()
        if key not in storages:
            copy = torch.UntypedStorage(st.nbytes())
            copy.copy_(st)
            storages[key] = copy
        t = torch.empty(0, dtype=a.dtype).set_(storages[key], a.storage_offset(), a.size(),
                                               a.stride())
        pairs.append((a, t))
        return t

    return [cpu(a) for a in args], {k: cpu(v) for k, v in kw.items()}, pairs


def _compare(gpu: torch.Tensor, ref: torch.Tensor) -> str | None:
    """None where they agree, else what differs."""
    g = gpu.detach().cpu()
    if not g.dtype.is_floating_point:
        bad = (g != ref).nonzero()
        return None if bad.numel() == 0 else (
            f"{bad.shape[0]} of {g.numel()} {g.dtype} elements differ, first at "
            f"{bad[0].tolist()}: GPU {g[tuple(bad[0])].item()}, interpreter "
            f"{ref[tuple(bad[0])].item()}")
    a, b = g.double(), ref.double()
    if not torch.equal(a.isnan(), b.isnan()) or not torch.equal(a.isinf(), b.isinf()) or \
            not torch.equal(a[a.isinf()], b[b.isinf()]):
        return f"NaN/inf at different places ({g.dtype})"
    fin = a.isfinite()
    if not fin.any():
        return None
    err = (a[fin] - b[fin]).abs().max().item()
    scale = b[fin].abs().max().item()
    tol = TOL.get(g.dtype, 1e-4)
    if err > tol * scale + 1e-300:
        return f"max |GPU - interpreter| = {err:.3g}, {err / max(scale, 1e-300):.3g} of the " \
               f"largest value (tolerance {tol:g}, {g.dtype})"
    return None


def _in_autotuning() -> bool:
    """Inside the autotuner's timing of configs (kitjit.autotune's _measure) or a
    benchmark (do_bench): launched hundreds of times, not shadowed."""
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name in ("_measure", "_time_configs", "do_bench",
                                "do_bench_cudagraph"):
            return True
        f = f.f_back
    return False


def _interpret(jf: JITFunction, grid, args, kw):
    saved = os.environ.get("KITJIT_INTERPRET")
    os.environ["KITJIT_INTERPRET"] = "1"
    try:
        kw = {k: v for k, v in kw.items() if k != "stream"}
        jf._launch(grid, *args, **kw)
    finally:
        if saved is None:
            del os.environ["KITJIT_INTERPRET"]
        else:
            os.environ["KITJIT_INTERPRET"] = saved


@contextlib.contextmanager
def shadowed(records: list[Shadow], raise_on_disagreement: bool = True):
    """Every GPU launch inside the block is shadowed by the interpreter (see the module
    docstring); each is recorded in `records`. A disagreement raises AssertionError at the
    launch (with `raise_on_disagreement`)."""
    originals = {n: getattr(JITFunction, n) for n in ("__getitem__", "run", "_run")}

    def shadow(jf: JITFunction, grid, args, kw):
        tensors = [a for a in [*args, *kw.values()] if isinstance(a, torch.Tensor)]
        why = None
        if not any(t.is_cuda for t in tensors):
            why = "no CUDA tensor"
        elif sum(t.untyped_storage().nbytes() for t in tensors) > MAX_BYTES:
            why = "too large to mirror"
        elif _in_autotuning():
            why = "an autotuning run"
        if why is not None:
            records.append(Shadow(jf.__name__, f"skipped: {why}"))
            return jf._launch(grid, *args, **kw)
        cargs, ckw, pairs = _mirror(args, kw)
        r = jf._launch(grid, *args, **kw)
        torch.cuda.synchronize()
        try:
            _interpret(jf, grid, cargs, ckw)
        except Exception as e:  # noqa: BLE001 - the interpreter failing is a disagreement
            problems = [f"the interpreter raised {type(e).__name__}: {e}"]
        else:
            problems = [f"tensor argument {i}: {p}" for i, (g, c) in enumerate(pairs)
                        if (p := _compare(g, c)) is not None]
        records.append(Shadow(jf.__name__, "DISAGREE" if problems else "agree",
                              "; ".join(problems)))
        if problems and raise_on_disagreement:
            raise AssertionError(f"{jf.__name__}: the GPU and the interpreter disagree: "
                                 + "; ".join(problems))
        return r

    def getitem(self, grid):
        launch = originals["__getitem__"](self, grid)
        if not isinstance(self, JITFunction) or launch.func is not self._launch:
            return launch  # (traced by torch.compile)
        return lambda *a, **kw: shadow(self, grid, a, kw)

    JITFunction.__getitem__ = getitem
    JITFunction.run = lambda self, *a, grid, **kw: shadow(self, grid, a, kw)
    JITFunction._run = lambda self, *a, grid, **kw: shadow(self, grid, a, kw)
    try:
        yield records
    finally:
        for n, f in originals.items():
            setattr(JITFunction, n, f)


def summary(records: list[Shadow]) -> str:
    agree = sum(r.verdict == "agree" for r in records)
    bad = [r for r in records if r.verdict == "DISAGREE"]
    skipped: dict[str, int] = {}
    for r in records:
        if r.verdict.startswith("skipped"):
            skipped[r.verdict] = skipped.get(r.verdict, 0) + 1
    kernels = sorted({r.kernel for r in records if r.verdict in ("agree", "DISAGREE")})
    s = (f"{len(records)} launches: {agree} agree, {len(bad)} disagree, "
         f"{sum(skipped.values())} skipped {skipped or ''}; kernels compared: "
         f"{', '.join(kernels)}")
    return s + "".join(f"\n  DISAGREE {r.kernel}: {r.detail}" for r in bad)

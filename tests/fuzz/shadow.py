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
import gc
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


def _interpret(launch, grid, args, kw):
    saved = os.environ.get("KITJIT_INTERPRET")
    os.environ["KITJIT_INTERPRET"] = "1"
    try:
        kw = {k: v for k, v in kw.items() if k != "stream"}
        launch(grid, *args, **kw)
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
    def shadow(jf: JITFunction, orig, grid, args, kw):
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
            return orig(grid, *args, **kw)
        cargs, ckw, pairs = _mirror(args, kw)
        r = orig(grid, *args, **kw)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        cached = set(jf.cache)
        try:
            _interpret(orig, grid, cargs, ckw)
        except Exception as e:  # noqa: BLE001 - the interpreter failing is a disagreement
            problems = [f"the interpreter raised {type(e).__name__}: {e}"]
        else:
            problems = [f"tensor argument {i}: {p}" for i, (g, c) in enumerate(pairs)
                        if (p := _compare(g, c)) is not None]
        finally:  # (the interpreter's launchers, keyed on CPU tensors, leave with it)
            for key in set(jf.cache) - cached:
                jf.cache.pop(key, None)
        records.append(Shadow(jf.__name__, "DISAGREE" if problems else "agree",
                              "; ".join(problems)))
        if problems and raise_on_disagreement:
            raise AssertionError(f"{jf.__name__}: the GPU and the interpreter disagree: "
                                 + "; ".join(problems))
        return r

    # every kernel's launch entry (`_launch`, which `kernel[grid]` (through `_bind`), `run` and the
    # autotuner's bound `_run` all call), in existing kernels and in those made inside
    wrapped: list[JITFunction] = []

    def wrap(jf: JITFunction) -> None:
        orig = jf.__dict__.get("_launch")
        if orig is None or getattr(orig, "_kit_shadow", False):
            return

        def launch(grid, *a, **kw):
            return shadow(jf, orig, grid, a, kw)
        launch._kit_shadow = True
        launch._kit_orig = orig
        launch._kit_orig_bind = jf.__dict__.get("_bind")
        jf._launch = launch
        jf._bind = launch.__get__  # `kernel[grid]` binds the grid to the launch entry
        wrapped.append(jf)

    init = JITFunction.__init__

    def new_init(self, *a, **kw):
        init(self, *a, **kw)
        wrap(self)

    for obj in gc.get_objects():
        if issubclass(type(obj), JITFunction):  # (isinstance would touch deprecated objects)
            wrap(obj)
    JITFunction.__init__ = new_init
    try:
        yield records
    finally:
        JITFunction.__init__ = init
        for jf in wrapped:
            jf._bind = jf._launch._kit_orig_bind
            jf._launch = jf._launch._kit_orig


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

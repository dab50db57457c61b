"""Running generated kernels: write the source to a file and import it, launch in the
interpreter, compile for sm_90a, check against the oracle; the differential mode (the
interpreter against the GPU); and `for_seconds`, the long mode's loop, which keeps going
after a failure and collects every one (its seed, its shrunk kernel) for one report."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import os
import random
import re
import time
import warnings

import numpy as np
import torch
from hypothesis import HealthCheck, Phase, given, note, seed, settings
from kitjit.frontend.errors import InternalCompilerError

from kitjit.ir.types import from_torch

from .kernel import Kernel
from .model import TORCH
from .oracle import Expected, reference

_files = itertools.count()
# the source of the kernel run last (after hypothesis shrinks a failure, it replays the
# minimal example last, so this is the minimal failing kernel)
last_source: list[str | None] = [None]


def load_kernel(source: str, workdir) -> tuple:
    """Write `source` to a fresh file (fresh: linecache and inspect key on the name) and
    import it; returns (the @kit.jit kernel, the file's path)."""
    last_source[0] = source
    path = workdir / f"fuzz_{next(_files)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"_kitjit_fuzz_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.fuzz_kernel, str(path)


def spec_of(a) -> tuple:
    """The specialization a launch gives an argument (what JITFunction.compile takes)."""
    if isinstance(a, torch.Tensor):
        return (f"*{from_torch(a.dtype).name}", 16 if a.data_ptr() % 16 == 0 else 1)
    if isinstance(a, bool):
        return ("i1", 1)
    if isinstance(a, int):
        return ("const", 1) if a == 1 else ("i32", 16 if a % 16 == 0 else 1)
    if isinstance(a, float):
        return ("fp32", 1)
    raise TypeError(type(a))


def launch(jf, k: Kernel, args, **extra):
    return jf[(k.grid,)](*args, **k.constexprs(), num_warps=k.num_warps, **extra)


def compile_sm90(jf, k: Kernel, args):
    consts = tuple(k.constexprs()[c] for c in jf.constexprs)
    return jf.compile([spec_of(a) for a in args], consts, k.num_warps, "sm_90a")


def fresh_output(k: Kernel) -> torch.Tensor:
    shape = (k.sizes["n"],) if k.mode == "1d" else (k.sizes["M"], k.sizes["N"])
    return torch.full(shape, float("nan"), dtype=TORCH[k.out_dtype])


def no_internal_errors(fn, source: str):
    """Run `fn`; an InternalCompilerError (a crash in kitjit) fails with the kernel's source."""
    try:
        return fn()
    except InternalCompilerError as e:
        raise AssertionError(f"internal compiler error on a generated kernel:\n{source}\n{e}"
                             ) from e


def _within(what: str, got: np.ndarray, v, e, u, source: str) -> int:
    ok = ~u
    bad = ok & ~(np.abs(got - v) <= 2 * e + 1e-300)
    if bad.any():
        i = tuple(int(x) for x in np.argwhere(bad)[0])
        raise AssertionError(f"{int(bad.sum())} of {got.size} {what} differ from the float64 "
                             f"reference, first at {i}: got {got[i]!r}, want {v[i]!r} "
                             f"(error bound {e[i]:.3g})\n{source}")
    return int(ok.sum())


def check_values(k: Kernel, out: torch.Tensor, side: dict, ts, source: str) -> int:
    """Out (and the atomics' Acc / Cnt) against the oracle; returns how many outputs were
    stable (compared)."""
    exp = reference(k, ts)
    got = out.double().numpy()
    assert np.isfinite(got).all(), f"non-finite or unwritten outputs:\n{got}\n{source}"
    stable = _within("outputs", got, exp.v, exp.e, exp.u, source)
    for p, t in side.items():
        _within(f"elements of {p} (after the atomics)", t.double().numpy(), *exp.side[p],
                source)
    return stable


def fuzz(max_examples: int) -> settings:
    """Derandomized (CI sees the same kernels on every run), no deadline (the first compile
    in a process is slower), no example database."""
    return settings(max_examples=max_examples, deadline=None, derandomize=True,
                    database=None, print_blob=False,
                    phases=[Phase.explicit, Phase.generate, Phase.shrink],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture,
                                           HealthCheck.filter_too_much])


def run_valid(k: Kernel, workdir) -> int:
    """Interpreter run against the oracle, then a compile for sm_90a (PTX and cubin)."""
    k.build()
    source, _ = k.render()
    note(source)
    jf, _ = load_kernel(source, workdir)
    ts = k.tensors()
    out = fresh_output(k)
    side = k.side_tensors()
    args = k.args(ts, out, side)
    no_internal_errors(lambda: launch(jf, k, args), source)
    stable = check_values(k, out, side, ts, source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a spill warning is not a failure here
        ck = no_internal_errors(lambda: compile_sm90(jf, k, args), source)
    assert ".target sm_90a" in ck.asm["ptx"]
    assert ".entry fuzz_kernel(" in ck.asm["ptx"]
    assert ck.asm["cubin"][:4] == b"\x7fELF"
    return stable


def _same(what: str, a: torch.Tensor, b: torch.Tensor, exp: tuple | None, source: str):
    """The interpreter's `a` and the GPU's `b`: integers bit for bit; floats within twice the
    oracle's bound of each other, NaN and infinity at the same places; both only where the
    oracle calls the value stable (a truncation or comparison within the error bound may
    go either way on either path)."""
    if not a.dtype.is_floating_point:
        stable = torch.from_numpy(~np.asarray(exp[2], bool).reshape(a.shape))
        diff = ((a != b) & stable).nonzero()
        assert diff.numel() == 0, (f"{what}: integer results differ at {diff[:4].tolist()} "
                                   f"(interpreter {a[tuple(diff[0])].item()}, GPU "
                                   f"{b[tuple(diff[0])].item()}):\n{source}")
        return
    _, err, unstable = exp
    x, y = a.double().numpy(), b.double().numpy()
    special = ((x != x) == (y != y)) & ((np.abs(x) == np.inf) == (np.abs(y) == np.inf))
    assert special[~unstable].all(), f"{what}: NaN/inf at different places:\n{source}"
    finite = np.isfinite(x) & np.isfinite(y)
    bad = finite & ~unstable & (np.abs(x - y) > 2 * err + 1e-30)
    if bad.any():
        i = tuple(int(v) for v in np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} results differ beyond twice the error "
                             f"bound between the interpreter and the GPU, first at {i}: "
                             f"{x[i]!r} vs {y[i]!r} (bound {err[i]:.3g}):\n{source}")


def run_differential(k: Kernel, workdir) -> None:
    """The same kernel and inputs in the interpreter and on the GPU, compared (Out and the
    atomics' Acc / Cnt)."""
    k.build()
    source, _ = k.render()
    note(source)
    jf, _ = load_kernel(source, workdir)
    ts = k.tensors()
    out_cpu, side_cpu = fresh_output(k), k.side_tensors()
    os.environ["KITJIT_INTERPRET"] = "1"
    try:
        no_internal_errors(lambda: launch(jf, k, k.args(ts, out_cpu, side_cpu)), source)
    finally:
        del os.environ["KITJIT_INTERPRET"]
    ts_gpu = [t.cuda() for t in ts]
    out_gpu = fresh_output(k).cuda()
    side_gpu = {p: t.cuda() for p, t in k.side_tensors().items()}
    no_internal_errors(lambda: launch(jf, k, k.args(ts_gpu, out_gpu, side_gpu)), source)
    torch.cuda.synchronize()
    exp: Expected = reference(k, ts)
    _same("Out", out_cpu, out_gpu.cpu(), (exp.v, exp.e, exp.u), source)
    for p in side_cpu:
        _same(p, side_cpu[p], side_gpu[p].cpu(), exp.side[p], source)


# ------------------------------------------------------------------ the long mode
@dataclasses.dataclass
class Failure:
    test: str
    seed: int          # hypothesis's seed for the batch that failed (--fuzz-seed replays it)
    kind: str          # the error's first line, numbers and names masked (for grouping)
    message: str
    source: str | None  # the shrunk kernel
    blob: str           # @reproduce_failure(...) for this example, where hypothesis gave one


def _kind(e: BaseException) -> str:
    first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
    first = re.sub(r"fuzz_\d+\.py:\d+:\d+", "FILE", first)
    return f"{type(e).__name__}: " + re.sub(r"\b(v|c|q|i|p|_h|bad)?\d+\b", "N", first)[:160]


def for_seconds(seconds: float, strategy, body, test: str, failures: list[Failure],
                batch: int = 25, seeds: list[int] | None = None) -> int:
    """Run `body` on fresh examples of `strategy` for `seconds` (or one batch per seed of
    `seeds`), in batches of `batch` examples, each batch from a random seed. A failing batch
    is shrunk by hypothesis, recorded in `failures` (with its seed and the shrunk kernel's
    source) and the run goes on. Returns how many examples ran."""
    end = time.monotonic() + seconds
    ran, rng = 0, random.Random()
    todo = list(seeds) if seeds else None
    while todo if todo is not None else time.monotonic() < end:
        s = todo.pop(0) if todo is not None else rng.getrandbits(32)

        @seed(s)
        @settings(max_examples=batch, deadline=None, derandomize=False, database=None,
                  print_blob=True, phases=[Phase.generate, Phase.shrink],
                  suppress_health_check=list(HealthCheck))
        @given(x=strategy)
        def run(x):
            body(x)

        last_source[0] = None
        try:
            run()
        except Exception as e:  # noqa: BLE001 - every failure goes into the report
            notes = "\n".join(getattr(e, "__notes__", []))
            blob = re.search(r"@reproduce_failure\([^)]*\)", notes)
            failures.append(Failure(test, s, _kind(e), str(e), last_source[0],
                                    blob.group(0) if blob else ""))
        ran += batch
    return ran


def report(failures: list[Failure], out_dir=None, per_kind: int = 2) -> str:
    """Every failure of a run, grouped by kind: count, then the seeds, and for the first
    `per_kind` of each kind the message and the shrunk kernel. With `out_dir`, each shrunk
    kernel is written there as repro_<n>.py (a file kitjit can import and launch)."""
    groups: dict[str, list[Failure]] = {}
    for f in failures:
        groups.setdefault(f"{f.test}: {f.kind}", []).append(f)
    lines = [f"{len(failures)} failing batch(es), {len(groups)} kind(s):"]
    n = 0
    for kind, fs in groups.items():
        lines.append(f"\n== {kind}  [{len(fs)}x; seeds {', '.join(str(f.seed) for f in fs)}]")
        for f in fs[:per_kind]:
            lines.append(f"-- seed {f.seed} (replay: --fuzz-seed {f.seed}) {f.blob}")
            lines.append(f.message.strip()[:4000])
            if out_dir is not None and f.source:
                path = out_dir / f"repro_{n}.py"
                path.write_text(f"# {f.test}, seed {f.seed}: {f.kind}\n{f.source}")
                lines.append(f"(kernel written to {path})")
                n += 1
    return "\n".join(lines)

"""The host path of a superoptimized graph: what `opt(...)` costs before its kernels reach
the GPU.

A skinny graph is a few microseconds of GPU work, so the Python of the generated `run`
decides the speed of plain calls: per call it checks every input, allocates every buffer
through torch, builds a specialization key per launch from every argument, asks torch for
the current stream, and takes the generic launch path (H200, rms_norm + linear: 42.9 us a
call against 18.2 us replayed in a CUDA graph; eager torch 26.0).

So the first call for an input signature (each input's shape, strides, dtype and device,
all 16-byte aligned) runs `run` with its helpers and kernels wrapped (`record`): every
buffer, launch and output is noted, and a `Route` is made from them: a generated function
that checks the inputs against the signature in one expression, allocates the outputs, puts
the intermediates (row-kernel outputs, split partials, arrival counters) in the calling
thread's workspace for the current stream (kitjit/nn/_host.py: stream-ordered reuse, none
while a stream is being captured), and launches through each kernel's own generated launcher
(launcher.py's `_make_launcher`) with grids, constexprs, options (PDL) and argument
positions bound. Valid for the same reasons as kitjit.nn's sites: everything a launch's
specialization key holds is fixed by the signature (dtypes, device, alignment, the ints and
options the generated code passes as constants) and `run` is straight-line code whose
every value is a constant of the graph.

Anything the route does not cover takes `run` as before, with all its checks: an input
whose signature differs (wrong shape or dtype raises there; other strides are copied), the
interpreter, torch.compile's tracing, stream capture, a run whose record holds something
unexpected."""

from __future__ import annotations

import types
import weakref
from typing import Any

import torch

from .. import launcher as _launcher
from ..compiled_kernel import CompiledKernel
from ..jit import JITFunction

ALIGN = 256          # bytes between the workspace's intermediates (TMA needs 16)
_OPTIONS = {"num_warps", "launch_pdl"}   # the launch options a generated run passes
# what else a generated run() may name (besides its kernels and torch's dtypes): its helpers,
# the device of an input, and the views it returns or passes
_RUN_NAMES = {"_input", "_empty", "_work", "_counters", "_pdl", "torch", "device",
              "as_strided", "view"}


def signature(inputs) -> tuple | None:
    """The key of a route: per input (shape, strides, dtype, device index), or None when an
    input is not a tensor or not 16-byte aligned (those calls take `run`)."""
    key = []
    for x in inputs:
        if not isinstance(x, torch.Tensor) or x.data_ptr() & 15:
            return None
        key.append((tuple(x.shape), x.stride(), x.dtype, x.get_device()))
    return tuple(key)


# ----------------------------------------------------------------------------- recording
class _Unroutable(Exception):
    """The recorded run holds something a route cannot replay (the call itself was fine)."""


class _Record:
    """What one run of the generated `run` did: its buffers (slots) and its launches."""

    def __init__(self, mod, inputs):
        self.mod, self.inputs = mod, inputs
        self.slots: dict[int, tuple] = {}     # id(tensor) -> (kind, ...)
        self.keep: list = []                  # the tensors, alive while ids are compared
        self.launches: list[tuple] = []       # (kernel, grid, args, kwargs, returned)
        self.bad: str | None = None
        self.n_inputs = 0

    def note(self, t, slot: tuple) -> None:
        self.slots[id(t)] = slot
        self.keep.append(t)

    # the helpers and kernels of the module, wrapped
    def _input(self, x, shape, strides, dtype):
        """run() checks its inputs in order: the n-th call is input n."""
        y = self.mod._input(x, shape, strides, dtype)
        i = self.n_inputs
        self.n_inputs += 1
        if y is not x or i >= len(self.inputs) or self.inputs[i] is not x:
            self.bad = self.bad or "an input was copied to its declared strides"
        elif id(x) in self.slots:
            self.bad = self.bad or "one tensor was passed for two inputs"
        else:
            self.note(y, ("in", i))
        return y

    def _empty(self, shape, dtype, device):
        t = self.mod._empty(shape, dtype, device)
        self.note(t, ("buf", tuple(shape), dtype))
        return t

    def _work(self, shape, device):
        t = self.mod._work(shape, device)
        self.note(t, ("buf", tuple(shape), torch.float32))
        return t

    def _counters(self, n, device):
        t = self.mod._counters(n, device)
        self.note(t, ("cnt", n))
        return t

    class Kernel:
        """A kernel of the module, its launches noted (`k[grid](...)` as the kernel's)."""

        def __init__(self, rec, jf: JITFunction):
            self.rec, self.jf = rec, jf

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                ck = self.jf[grid](*args, **kwargs)
                self.rec.launches.append((self.jf, grid, args, kwargs, ck))
                return ck
            return launch


def record(mod, inputs) -> tuple[list, Route | None, str | None]:
    """Run `mod.run(*inputs)` once, watched: (its outputs, the route that replays it or
    None, why not)."""
    rec = _Record(mod, inputs)
    ns = dict(vars(mod))
    ns.update(_input=rec._input, _empty=rec._empty, _work=rec._work, _counters=rec._counters)
    for name, v in vars(mod).items():
        if isinstance(v, JITFunction):
            ns[name] = _Record.Kernel(rec, v)
    run = types.FunctionType(mod.run.__code__, ns, "run", mod.run.__defaults__)
    outs = run(*inputs)
    unknown = {n for n in mod.run.__code__.co_names if n not in _RUN_NAMES and not
               isinstance(ns.get(n), _Record.Kernel) and
               not isinstance(getattr(torch, n, None), torch.dtype)}
    if unknown:   # run() does something a route would not repeat (a torch op, say)
        return outs, None, f"run() uses {sorted(unknown)}"
    if rec.bad is not None:
        return outs, None, rec.bad
    try:
        return outs, Route(rec, outs), None
    except _Unroutable as e:
        return outs, None, str(e)


# ----------------------------------------------------------------------------- the route
def _outputs(rec: _Record, outs: list) -> list[tuple[int, tuple | None]]:
    """Per output: (id of its buffer in the record, None or the view of it returned as
    (shape, strides, storage offset))."""
    spec = []
    for o in outs:
        base = o if id(o) in rec.slots else o._base
        if base is None or id(base) not in rec.slots:
            raise _Unroutable("an output is not a buffer of the run")
        spec.append((id(base), None if base is o else
                     (tuple(o.shape), o.stride(), o.storage_offset())))
    return spec


def _view_pointer(a: torch.Tensor, rec: _Record, ref: dict) -> str:
    """The replay's pointer expression of `a`, a view that run() made of one of its buffers
    or inputs (the only tensor of the record on a's storage): that one's pointer plus a's
    byte offset from it, fixed by the signature (run's views take constant arguments)."""
    st = a.untyped_storage().data_ptr()
    on = [t for t in rec.keep if id(t) in ref and ref[id(t)][1] != "w[2]"
          and t.untyped_storage().data_ptr() == st]
    if len(on) != 1 or a.data_ptr() < on[0].data_ptr():
        raise _Unroutable("a tensor argument that is not a buffer of the run or one view of "
                          "one")
    delta = a.data_ptr() - on[0].data_ptr()
    ptr = ref[id(on[0])][1]
    return f"({ptr} + {delta})" if delta else ptr


def _workspace_layout(rec: _Record, outputs: set) -> tuple[dict, int, int]:
    """(byte offset of each buffer that is not an output, bytes in all, counters): the
    intermediates live in the workspace, ALIGN bytes apart."""
    offsets: dict[int, int] = {}
    size = counters = 0
    for i, slot in rec.slots.items():
        if slot[0] == "buf" and i not in outputs:
            offsets[i] = size
            n = slot[2].itemsize
            for d in slot[1]:
                n *= d
            size += -(-n // ALIGN) * ALIGN
        elif slot[0] == "cnt":
            counters = max(counters, slot[1])
    return offsets, size, counters


class Route:
    """One input signature's calls, replayed: `route.replay(inputs)` returns the outputs, or
    None when the inputs do not match the signature (or the stream is being captured): the
    caller then takes `run`. `source` is the generated replay function."""

    def __init__(self, rec: _Record, outs: list):
        from ..nn import _host  # (not at import: kitjit.nn imports kitjit)

        if _launcher._is_compiling():
            raise _Unroutable("traced by torch.compile")
        inputs = rec.inputs
        dev = inputs[0].get_device() if inputs else -1
        if any(x.get_device() != dev for x in inputs):
            raise _Unroutable("inputs on several devices")
        self.ns: dict[str, Any] = {
            "_ws": _host.workspace, "_Region": _host.Region, "_new": torch.empty, "_DEV": dev,
            "_TDEV": torch.device("cuda", dev) if dev >= 0 else torch.device("cpu")}
        out_spec = _outputs(rec, outs)
        offsets, size, counters = _workspace_layout(rec, {i for i, _ in out_spec})
        lines = ["def replay(inputs):", *self._check_lines(inputs),
                 f"    w = _ws(_DEV, {max(1, -(-size // 4))}, {counters})",
                 "    if w is None:   # the stream is being captured: run() allocates",
                 "        return None",
                 "    wp = w[1]"]
        # what the replay calls each buffer: (tensor, pointer); a workspace buffer has no
        # tensor (a Region where a kernel reads it by TMA)
        ref: dict[int, tuple[str | None, str]] = {}
        for i, slot in rec.slots.items():
            if slot[0] == "in":
                ref[i] = (f"x{slot[1]}", f"p{slot[1]}")
            elif slot[0] == "cnt":
                ref[i] = ("None", "w[2]")
        for i, _ in out_spec:   # (new_empty on an input: the device checked, and cheaper)
            if i not in ref:   # (an input, or a buffer two outputs view: there already)
                k = len(ref)
                self.ns[f"_OS{k}"], self.ns[f"_OD{k}"] = rec.slots[i][1:]
                lines += [f"    o{k} = x0.new_empty(_OS{k}, dtype=_OD{k})" if inputs else
                          f"    o{k} = _new(_OS{k}, dtype=_OD{k}, device=_TDEV)",
                          f"    q{k} = o{k}.data_ptr()"]
                ref[i] = (f"o{k}", f"q{k}")
        for i, off in offsets.items():
            ref[i] = (None, f"b{len(ref)}")
            lines.append(f"    {ref[i][1]} = wp + {off}")
        regions: list[tuple] = []
        for j, (jf, grid, args, kwargs, ck) in enumerate(rec.launches):
            lines.append(self._launch_line(j, jf, grid, args, kwargs, ck, rec, ref, regions,
                                           dev))
        self.ns["_R"] = [self.ns["_Region"](-1, (), (), 0) for _ in regions]
        ret = []
        for k, (i, view) in enumerate(out_spec):
            self.ns[f"_V{k}"] = view
            ret.append(ref[i][0] if view is None else f"{ref[i][0]}.as_strided(*_V{k})")
        lines.append(f"    return [{', '.join(ret)}]")
        self.source = "\n".join(lines) + "\n"
        exec(self.source, self.ns)
        self.replay = self.ns["replay"]

    def _check_lines(self, inputs) -> list[str]:
        """The signature check, one expression: each input's shape, strides, dtype and
        device as recorded, every pointer 16-byte aligned (the launches specialized on it)."""
        n = len(inputs)
        lines = [f"    if len(inputs) != {n}:", "        return None"]
        if not n:
            return lines
        lines.append(f"    {', '.join(f'x{i}' for i in range(n))}{',' if n == 1 else ''} "
                     "= inputs")
        lines += [f"    p{i} = x{i}.data_ptr()" for i in range(n)]
        checks = [f"({' | '.join(f'p{i}' for i in range(n))}) & 15"]
        for i, x in enumerate(inputs):
            self.ns[f"_S{i}"], self.ns[f"_T{i}"] = tuple(x.shape), x.stride()
            self.ns[f"_D{i}"] = x.dtype
            checks += [f"x{i}.shape != _S{i}", f"x{i}.stride() != _T{i}",
                       f"x{i}.dtype is not _D{i}", f"x{i}.get_device() != _DEV"]
        return lines + ["    if " + " or \\\n            ".join(checks) + ":",
                        "        return None"]

    def _launch_line(self, j, jf, grid, args, kwargs, ck, rec, ref, regions, dev) -> str:
        """`_L<j>(grid, a..., v...)`: the kernel's own launcher, its tensor arguments as
        the route names them (a Region for a workspace buffer read by TMA)."""
        import inspect

        if not isinstance(ck, CompiledKernel):
            raise _Unroutable(f"{jf.__name__} did not launch on the GPU path")
        opts = {k: v for k, v in kwargs.items() if k in _OPTIONS and k not in jf.params}
        if any(k in _launcher.LAUNCH_OPTIONS and k not in _OPTIONS for k in kwargs):
            raise _Unroutable(f"{jf.__name__}: a launch option a route does not bind")
        bound = inspect.signature(jf.fn).bind(
            *args, **{k: v for k, v in kwargs.items() if k not in opts})
        bound.apply_defaults()
        rt = [bound.arguments[n] for n in jf.runtime_params]
        consts = tuple(bound.arguments[c] for c in jf.constexprs)
        ldev = dev if dev >= 0 else _launcher._torch_current_device()
        self.ns[f"_L{j}"] = _launcher._make_launcher(jf, ck, ldev, consts,
                                                     pdl=bool(opts.get("launch_pdl")))
        g = tuple(grid) if isinstance(grid, tuple) else (grid,)
        if not all(isinstance(x, int) for x in g) or not 1 <= len(g) <= 3:
            raise _Unroutable(f"{jf.__name__}: grid {grid!r}")
        self.ns[f"_G{j}"] = (g + (1, 1))[:3]
        tma = {t["param"] for t in ck.metadata.get("tma", [])}
        a_src, v_src = [], []
        for p, a in enumerate(rt):
            if isinstance(a, torch.Tensor):
                if id(a) in ref:
                    t, ptr = ref[id(a)]
                else:   # a view of a buffer or an input (x.view(-1, D)): at a fixed offset
                    ptr = _view_pointer(a, rec, ref)
                    t = None
                if t is None and p in tma:   # a workspace buffer or a view: a Region
                    r = len(regions)
                    regions.append((ptr, tuple(a.shape), a.stride(), a.element_size()))
                    t = f"_r{r}"
                a_src.append(t if p in tma else "None")
                v_src.append(ptr)
            elif a is None or isinstance(a, (bool, int, float)):
                self.ns[f"_C{j}_{p}"] = a
                a_src.append(f"_C{j}_{p}")
                v_src.append(f"_C{j}_{p}")
            else:
                raise _Unroutable(f"{jf.__name__}: an argument of type {type(a).__name__}")
        pre = []
        for r, (ptr, shape, strides, esize) in enumerate(regions):
            if f"_r{r}" in a_src:
                self.ns[f"_RS{r}"] = (shape, strides, esize)
                pre += [f"    _r{r} = _R[{r}]",
                        f"    if _r{r}.ptr != {ptr}:",
                        f"        _r{r} = _R[{r}] = _Region({ptr}, *_RS{r})"]
        return "\n".join(pre + [f"    _L{j}(_G{j}, {', '.join(a_src + v_src)})"])

    def __call__(self, inputs):
        return self.replay(inputs)


# ----------------------------------------------------------------------------- the calls
_ROUTED: weakref.WeakSet = weakref.WeakSet()


def _forget() -> None:
    """Drop every route (kitjit.nn's reset: a FakeDriver's launchers must not outlive it)."""
    for h in list(_ROUTED):
        h.forget()


class Host:
    """The calls of one generated module: a route per input signature, the last one tried
    first; `run` where no route applies. `fast_calls` counts the calls a route served."""

    def __init__(self, mod):
        self.mod = mod
        self.routes: dict[tuple, Route | None] = {}
        self.why: dict[tuple, str] = {}   # signatures without a route, and why
        self.last = None
        self.fast_calls = 0
        if not _ROUTED:   # the first: forgotten with kitjit.nn's routes (a FakeDriver's end)
            from ..nn import _host

            if _forget not in _host._RESET_HOOKS:
                _host.on_reset(_forget)
        _ROUTED.add(self)

    def forget(self) -> None:
        self.routes.clear()
        self.why.clear()
        self.last = None

    def __call__(self, inputs):
        last = self.last
        if last is not None:
            out = last(inputs)
            if out is not None:
                self.fast_calls += 1
                return out
        return self.slow(inputs)

    def slow(self, inputs):
        """The first call of a signature (recorded), another signature than the last one,
        or anything a route does not cover."""
        if _launcher._is_compiling():
            return self.mod.run(*inputs)
        key = signature(inputs)
        if key is None:
            return self.mod.run(*inputs)
        if key in self.routes:
            route = self.routes[key]
            if route is None:
                return self.mod.run(*inputs)
            out = route.replay(inputs)
            if out is None:   # stream capture
                return self.mod.run(*inputs)
            self.last = route.replay
            self.fast_calls += 1
            return out
        outs, route, why = record(self.mod, inputs)
        self.routes[key] = route
        if route is None:
            self.why[key] = why or ""
        else:
            self.last = route.replay
        return outs

"""The launch path: what a `kernel[grid](...)` call runs once its kernel is compiled.

`_make_runner` generates, per @kit.jit function, the Python function a launch calls: it
binds the arguments, computes the specialization key from cheap facts (dtype, 16-byte
alignment, divisibility of ints), finds the compiled launcher in a dict and calls it;
`_make_launcher` makes that launcher per (kernel, device): it fills the calling thread's
ctypes parameter block and calls cuLaunchKernel on the tensors' device and stream. Checks
that can only fail on a cache miss (`_check_launch_args`) run on the miss. Why generated
code: the cached launch is the hot path (benchmarks/NOTES.md has its host cost).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .ir.types import from_torch

if TYPE_CHECKING:
    from .jit import CompiledKernel, JITFunction

_MAX_GRID = (2 ** 31 - 1, 65535, 65535)


class _MissingArg:
    def __repr__(self) -> str:
        return "<missing argument>"


MISSING_ARG = _MissingArg()


def _arg_spec(name: str, a: Any, specialize: bool = True, align: bool = True) -> tuple:
    """The specialization of one run-time argument: (type string, divisibility) or
    ('const', value) for values folded into the kernel. `specialize=False`
    (do_not_specialize): an int 1 is not folded and nothing is assumed 16-divisible;
    `align=False` (do_not_specialize_on_alignment): only the latter."""
    align = align and specialize
    if hasattr(a, "kit_values"):  # a host TensorDescriptor (kitjit.tools.tensor_descriptor)
        return desc_spec(name, a)
    if hasattr(a, "data_ptr"):
        dt = from_torch(a.dtype)
        return (f"*{dt.name}", 16 if align and a.data_ptr() % 16 == 0 else 1)
    if a is None:
        return ("const", None)
    if isinstance(a, bool):
        return ("i1", 1)
    if isinstance(a, int):
        if not -(2 ** 63) <= a < 2 ** 63:
            raise ValueError(f"argument '{name}' is {a}, outside the range of int64")
        if a == 1 and specialize:
            return ("const", 1)
        ty = "i32" if -(2 ** 31) <= a < 2 ** 31 else "i64"
        return (ty, 16 if align and a % 16 == 0 else 1)
    if isinstance(a, float):
        return ("fp32", 1)
    raise TypeError(f"argument '{name}': kitjit cannot pass {type(a).__name__} to a kernel "
                    "(tensors, ints, floats, bools and None can be passed)")


def desc_spec(name: str, d: Any) -> tuple:
    """The specialization of a host tensor descriptor: ('desc', element dtype, rank, block
    shape, padding); its shape and strides are run-time values."""
    dt = from_torch(d.base.dtype)
    if dt is None:
        raise TypeError(f"argument '{name}': tensor descriptors of dtype {d.base.dtype} are "
                        "not supported")
    d._check_block()
    return ("desc", dt.name, len(d.shape), tuple(d.block_shape), d.padding)


def flat_kinds(kinds: list[str]) -> list[str]:
    """The C parameters of run-time parameters of these kinds: a descriptor of rank r
    ('desc<r>') passes its base pointer, r sizes and r - 1 strides (int64)."""
    out = []
    for k in kinds:
        if k.startswith("desc"):
            r = int(k[4:])
            out += ["ptr"] + ["i64"] * (2 * r - 1)
        else:
            out.append(k)
    return out


def _key_part(a):
    """What the specialization depends on, for one run-time argument (kept cheap: this runs
    on every launch)."""
    if a.__class__ is int:
        return (a == 1, a & 15 == 0, 0 if -2147483648 <= a <= 2147483647 else
                1 if -9223372036854775808 <= a <= 9223372036854775807 else 2)
    try:
        return (a.get_device(), a.dtype, a.data_ptr() & 15 == 0)
    except AttributeError:
        key = getattr(a, "kit_key", None)  # a host TensorDescriptor
        return a.__class__ if key is None else key()


_LAUNCH_TEMPLATE = """
def launch(grid, {args}, stream=None):
    if grid.__class__ is tuple and len(grid) == 1:
        g0 = grid[0]
        g1 = g2 = 1
    else:
        g0, g1, g2 = _grid3(grid({meta}) if callable(grid) else grid, _NAME)
    if not (0 < g0 <= 2147483647 and 0 < g1 <= 65535 and 0 < g2 <= 65535):
        if g0 * g1 * g2 == 0 and _grid3((g0, g1, g2), _NAME):
            return _CK
        _grid3((g0, g1, g2), _NAME)
    try:
        _st, _ptrs, _addr = _TLS.fast
    except AttributeError:
        _st, _ptrs, _addr = _CK._fast_params()
{sets}
    try:
        r = _launch(_FN, g0, g1, g2, _THREADS, 1, 1, _SHARED,
                    _stream(_DEV) if stream is None else _handle(stream, _DEV), _addr, 0)[0]
    except TypeError:
        _grid3((g0, g1, g2), _NAME)
        raise
    if r is not _OK:  # a thread with no (or another device's) context current: retry once
        r = _retry(int(r), _DEV, lambda: _launch(
            _FN, g0, g1, g2, _THREADS, 1, 1, _SHARED,
            _stream(_DEV) if stream is None else _handle(stream, _DEV), _addr, 0)[0])
        if r is not _OK:
            _fail(int(r))
    return _CK
"""


def _make_launcher(jf: JITFunction, ck: CompiledKernel, device: int, consts: tuple,
                   pdl: bool = False):
    """A generated function that fills the calling thread's parameter block from the
    arguments and calls cuLaunchKernel on `device` (its module loaded there, the stream that
    device's current one unless `stream=` is given): no loops, no dict lookups on the hot
    path; the thread's block is one attribute read of a threading.local. `pdl`: launched by
    cuLaunchKernelEx with programmatic stream serialization (`launch_pdl=True`).

    A grid function gets every bound argument by name, the constexprs and num_warps, as
    Triton's `grid(bound_args)`."""
    from .runtime import driver

    block = ck.params()
    launch_fn, wrap = driver.pdl_launch() if pdl else driver.raw_launch()
    names = [f"a{i}" for i in range(len(jf.runtime_params))]
    values = [f"v{i}" for i in range(len(jf.runtime_params))]
    sets = []
    f = 0  # the parameter block's field
    for i in ck.runtime_index:  # v_i: a tensor's data pointer, or the value
        kind = ck.arg_kinds[i]
        if kind.startswith("desc"):  # a host tensor descriptor: its values, in order
            n = 2 * int(kind[4:])
            sets.append(f"    _d = {values[i]}.kit_values()")
            sets += [f"    _st.{block.names[f + k]} = _d[{k}]" for k in range(n)]
            f += n
        else:
            sets.append(f"    _st.{block.names[f]} = {values[i]}")
            f += 1
    for j, t in enumerate(ck.metadata.get("tma", [])):
        # a CUtensorMap of a tensor (Hopper), of a host TensorDescriptor, or a row
        # descriptor below sm_90 (kitjit/runtime/ampere.py)
        tmap = "_rowmap" if t.get("kind") == "rows" else "_tmapd" if t.get("desc") else "_tmap"
        sets.append(f"    _ptrs[{block.desc_base + j}] = {tmap}({names[t['param']]}, "
                    f"{t['box'][0]}, {t['box'][1]}, {t['swizzle']}, '{t['dtype']}')")
    meta = "{" + "".join(f"{n!r}: {a}, " for n, a in zip(jf.runtime_params, names)) + \
        "**_META}"
    src = _LAUNCH_TEMPLATE.format(args=", ".join(names + values) or "*_",
                                  sets="\n".join(sets) or "    pass", meta=meta)
    ns = {
        "_ONES": (1, 1, 1), "_grid3": _grid3, "_NAME": jf.__name__, "_CK": ck,
        "_META": dict(zip(jf.constexprs, consts),
                      num_warps=ck.num_warps),
        "_TLS": ck._tls, "_launch": launch_fn, "_fail": driver.launch_failed,
        "_retry": driver.launch_retry,
        "_FN": wrap(ck.function(device)),
        "_THREADS": ck.threads, "_SHARED": ck.shared, "_stream": _stream_getter(),
        "_DEV": device, "_handle": _stream_handle,
        "_tmap": driver.tensor_map, "_tmapd": driver.descriptor_map, "_rowmap": _row_map(),
        "_OK": driver.launch_ok(),
    }
    exec(src, ns)
    return ns["launch"]


def _row_map():
    from .runtime.ampere import row_map

    return row_map


def _check_launch_args(jf: JITFunction, rt_args, gpu: bool) -> None:
    """Every check that must pass before anything runs; raised as TypeError/ValueError."""
    devices = set()
    for name, a in zip(jf.runtime_params, rt_args):
        if hasattr(a, "kit_values"):  # a host TensorDescriptor: its base tensor
            desc_spec(name, a)
            a = a.base
        if hasattr(a, "data_ptr"):
            if from_torch(a.dtype) is None:
                raise TypeError(f"argument '{name}' of {jf.__name__}: tensors of dtype "
                                f"{a.dtype} are not supported")
            if a.device.type == "meta":  # (its key's device is -1: never a cached GPU hit)
                raise ValueError(f"argument '{name}' of {jf.__name__} is a tensor on the "
                                 "meta device (a shape and a dtype, no memory): a kernel "
                                 "reads and writes real memory; pass a CUDA tensor (or a "
                                 "CPU tensor for the interpreter)")
            if gpu and a.device.type != "cuda":
                raise ValueError(f"argument '{name}' of {jf.__name__} is on {a.device}, but "
                                 "the kernel runs on the GPU: move it with .cuda()")
            devices.add(str(a.device))
        else:
            _arg_spec(name, a)
    if gpu and len(devices) > 1:
        raise ValueError(f"{jf.__name__}: tensor arguments are on different devices "
                         f"({', '.join(sorted(devices))})")


def _grid3(grid, name: str) -> tuple[int, int, int]:
    if isinstance(grid, int):
        grid = (grid,)
    import operator

    try:
        g = tuple(operator.index(x) for x in grid)
    except TypeError:
        raise TypeError(f"{name}: the grid must be a tuple of ints or a function of the "
                        f"meta-parameters returning one, got {grid!r}") from None
    if not 1 <= len(g) <= 3:
        raise ValueError(f"{name}: the grid has {len(g)} dims; it takes 1 to 3")
    g = g + (1,) * (3 - len(g))
    for i, (x, m) in enumerate(zip(g, _MAX_GRID)):
        if x < 0:
            raise ValueError(f"{name}: grid dim {i} is negative ({x})")
        if x > m:
            raise ValueError(f"{name}: grid dim {i} is {x}, over the hardware limit {m}")
    return g


def _stream_getter():
    """torch's current stream for a device, as a raw handle (a C call, no Stream object)."""
    import torch

    return torch._C._cuda_getCurrentRawStream


def _stream_handle(stream, device: int) -> int:
    """The raw CUstream of a `stream=` launch option: a torch.cuda.Stream (or ExternalStream)
    of the launch's device, or an int handle taken as it is (0 is the legacy default
    stream)."""
    if stream.__class__ is int:
        return stream
    handle = getattr(stream, "cuda_stream", None)
    if not isinstance(handle, int) or isinstance(stream, bool):
        raise TypeError(f"stream= takes a torch.cuda.Stream, an int handle or None, got "
                        f"{type(stream).__name__}")
    sdev = getattr(getattr(stream, "device", None), "index", None)
    if sdev is not None and sdev != device:
        raise ValueError(f"stream= is a stream of cuda:{sdev}, but the kernel runs on "
                         f"cuda:{device} (where its tensors are)")
    return handle


class _first_launch_during_capture:
    """Around a GPU miss (compile + module load): if a stream is being captured into a CUDA
    graph, loading a module is forbidden in torch's (global) capture mode, so this thread
    switches to the relaxed mode for the load; if the driver still refuses, one clear error
    says to launch once before capturing."""

    def __init__(self, name: str):
        self.name = name
        self.prev = None

    def __enter__(self):
        from .runtime import driver

        if _capturing():
            self.prev = driver.exchange_capture_mode(driver.CU_STREAM_CAPTURE_MODE_RELAXED)
        return self

    def __exit__(self, exc_type, exc, tb):
        from .runtime import driver

        if self.prev is not None:
            driver.exchange_capture_mode(self.prev)
        if exc_type is not None and issubclass(exc_type, driver.DriverError) and \
                (self.prev is not None or "captur" in str(exc)):
            raise RuntimeError(
                f"kitjit: the first launch of {self.name} with these argument types came "
                f"during CUDA graph capture, and loading the kernel failed there ({exc}); "
                "launch once before capturing (a warm-up call outside the graph)") from exc
        return False


def _capturing() -> bool:
    import torch

    try:
        return bool(torch.cuda.is_current_stream_capturing())
    except Exception:  # no CUDA torch
        return False


def _is_compiling() -> bool:  # replaced by _make_runner (before any launch can be traced)
    return False


def _torch_current_device() -> int:
    import torch

    return torch.cuda.current_device()


# Triton's launch options (`kernel[grid](..., num_warps=8)`), with their defaults. A kernel
# parameter may share an option's name (Liger's `num_warps: tl.constexpr`): as in Triton the
# keyword then binds the parameter and is the launch option too (`_make_runner`).
# `extern_libs` ({"libdevice": path}, Triton's CUDA option) is accepted and not used: kitjit
# links the libdevice of the nvidia-cuda-nvcc wheel, the same library.
LAUNCH_OPTIONS = {"num_warps": 4, "num_stages": None, "num_ctas": 1, "maxnreg": None,
                  "launch_pdl": False, "extern_libs": None, "arch": None}


def _make_runner(jf: JITFunction, sig):
    """The generated launch entry `<kernel>(grid, <params>, num_warps=4, num_stages=None,
    num_ctas=1, maxnreg=None, launch_pdl=False, extern_libs=None, arch=None, stream=None)`:
    binds the call's
    arguments, builds the specialization key and launches, in one Python frame (a TypeError
    from binding names the kernel and the parameter).

    `arch`: compile for this target instead of the GPU's own ("sm_80" on an H100 runs the
    Ampere code path from PTX the driver assembles; `JITFunction._compile_for_launch`).

    `stream`: a torch.cuda.Stream, a raw int CUstream, or None for the current torch stream
    of the tensors' device (ignored by the interpreter). The options other than num_warps
    are part of the key only (num_stages is not: kitjit does not use it), so a hit costs
    nothing more; their checks run on a miss (`JITFunction._miss`).

    A parameter named like a launch option takes the option's value as Triton binds it: the
    launch option is the *keyword* argument of that name (Triton's `parse_options(kwargs)`),
    its default when the parameter is passed by position or not at all, while the parameter
    gets whatever binds to it. Such kernels get a thin wrapper that reads the keyword."""
    import torch

    global _is_compiling
    # dynamo folds it to True while it traces (bound once here, never rebound while traced,
    # which would be a guard failure); in eager code one trivial call (~1/3 of is_compiling)
    _is_compiling = torch.compiler.is_dynamo_compiling
    params = []
    ns: dict[str, Any] = {"_kit_kp": _key_part, "_kit_get": jf.cache.get,
                          "_kit_miss": jf._miss, "_kit_T": torch.Tensor, "_kit_M": MISSING_ARG}
    shared_opts = []  # launch options that are also parameters of the kernel
    for i, (pname, p) in enumerate(sig.parameters.items()):
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY):
            raise TypeError(f"{jf.__name__}: kernels take plain parameters (no *args/**kwargs)")
        if pname in ("stream", "grid") or pname.startswith("_kit_"):
            raise TypeError(f"{jf.__name__}: '{pname}' is reserved for launch options; "
                            "rename the parameter")
        if pname in LAUNCH_OPTIONS:
            shared_opts.append(pname)
        if p.default is not p.empty:
            ns[f"_kit_d{i}"] = p.default
            params.append(f"{pname}=_kit_d{i}")
        else:  # checked on a cache miss only: a missing argument never reaches a kernel
            params.append(f"{pname}=_kit_M")
    opt = {o: (f"_kit_o_{o}" if o in shared_opts else o) for o in LAUNCH_OPTIONS}
    rt = jf.runtime_params
    dns = set(getattr(jf, "do_not_specialize", ()))
    dna = set(getattr(jf, "do_not_specialize_on_alignment", ())) - dns
    consts = "(" + "".join(c + ", " for c in jf.constexprs) + ")"
    # per run-time argument: its key part, and the value the launcher stores (a tensor's
    # data pointer, read once here; anything else as it is). Parameters in
    # do_not_specialize(_on_alignment) key on their type only (`_key_part_plain`).
    body = []
    for i, n in enumerate(rt):
        if n in dns or n in dna:
            ns["_kit_kpp"] = _key_part_plain
            body += [f"    _kit_v{i} = {n}.data_ptr() if isinstance({n}, _kit_T) else {n}",
                     f"    _kit_k{i} = _kit_kpp({n}, {n in dna})"]
            continue
        body += [f"    if {n}.__class__ is _kit_T:",
                 f"        _kit_v{i} = {n}.data_ptr()",
                 f"        _kit_k{i} = ({n}.get_device(), {n}.dtype, _kit_v{i} & 15 == 0)",
                 f"    elif {n}.__class__ is int or not isinstance({n}, _kit_T):",
                 f"        _kit_v{i} = {n}",
                 f"        _kit_k{i} = _kit_kp({n})",
                 "    else:  # a Tensor subclass (nn.Parameter, ...): passed as a tensor",
                 f"        _kit_v{i} = {n}.data_ptr()",
                 f"        _kit_k{i} = ({n}.get_device(), {n}.dtype, _kit_v{i} & 15 == 0)"]
    parts = "".join(f", _kit_k{i}" for i in range(len(rt)))
    vals = "".join(f", _kit_v{i}" for i in range(len(rt)))
    args = ", ".join(rt)
    name = jf.__name__ if jf.__name__.isidentifier() else "kernel"
    opts = [f"{opt[o]}={d!r}" for o, d in LAUNCH_OPTIONS.items()] + ["stream=None"]
    nw, mr, nc, pdl = opt["num_warps"], opt["maxnreg"], opt["num_ctas"], opt["launch_pdl"]
    arch = opt["arch"]
    src = (f"def {name}(grid, {', '.join(params + opts)}):\n"
           + "".join(line + "\n" for line in body) +
           f"    _kit_key = ({consts}, {nw}, {mr}, {nc}, {pdl}, {arch}{parts})\n"
           f"    _kit_l = _kit_get(_kit_key)\n"
           f"    if _kit_l is None:\n"
           f"        _kit_l = _kit_miss(_kit_key, ({args}{',' if len(rt) == 1 else ''}), "
           f"{consts}, {nw}, {mr}, {nc}, {pdl}, {arch})\n"
           f"    return _kit_l(grid{', ' if rt else ''}{args}{vals}, stream)\n")
    exec(src, ns)
    inner = ns[name]
    if not shared_opts:
        return inner

    def launch(grid, *args, **kw):
        for o in shared_opts:
            kw[f"_kit_o_{o}"] = kw.get(o, LAUNCH_OPTIONS[o])
        return inner(grid, *args, **kw)

    return launch


def _key_part_plain(a, one: bool):
    """The key part of a do_not_specialize(_on_alignment) argument: its type (and a
    tensor's device and dtype), not its alignment; ints equal to 1 apart only when `one`
    (do_not_specialize_on_alignment keeps that specialization, as in Triton)."""
    if a.__class__ is int:
        return (one and a == 1, 0 if -2147483648 <= a <= 2147483647 else
                1 if -9223372036854775808 <= a <= 9223372036854775807 else 2)
    try:
        return (a.get_device(), a.dtype)
    except AttributeError:
        return a.__class__

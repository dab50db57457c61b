"""The launch path: what a `kernel[grid](...)` call runs once its kernel is compiled.

`_make_runner` generates, per @kit.jit function, the Python function a launch calls: it
binds the arguments, computes the specialization key from cheap facts (dtype, device, 16-byte
alignment of tensors; ints equal to 1, 32/64-bit, divisible by 16), finds the
specialization's launch record in a dict (`_make_launch_record`, per kernel and device) and
launches in the same frame: a parameter block off the kernel's free list, filled, and
cuLaunchKernel on the tensors' device and stream. The interpreter and kernels with TMA
descriptors go through a generated per-key launcher instead (`_make_launcher`). Checks that
can only fail on a cache miss (`_check_launch_args`) run on the miss. Why generated code:
the cached launch is the hot path (benchmarks/NOTES.md has its host cost and what each
step of it costs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .ir.types import from_torch
from .kernel_interface import MockTensor, TensorWrapper, check_wrapper_arg

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
    if isinstance(a, TensorWrapper):
        check_wrapper_arg("the kernel", name, a, False)
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


def _key_part(a) -> tuple:
    """The three key elements of a run-time argument that is neither a torch.Tensor nor an
    int (the generated entry inlines those two): a float, bool or None keys on its type; a
    host TensorDescriptor on its `kit_key()`; an object with a data pointer like a tensor.
    Kept cheap: this runs on every launch."""
    c = a.__class__
    if c is float or c is bool or a is None:
        return (c, None, None)
    key = getattr(a, "kit_key", None)  # a host TensorDescriptor
    if key is not None:
        return (c, key(), None)
    try:
        return (a.dtype, a.get_device(), not a.data_ptr() & 15)
    except AttributeError:
        return (c, None, None)


_LAUNCH_TEMPLATE = """
def launch(grid, {args}, stream=None):
    if grid.__class__ is tuple and len(grid) == 1:
        g0 = grid[0]
        g1 = g2 = 1
        if not 0 < g0 <= 2147483647 and _grid3(grid, _NAME)[0] == 0:  # (raises if bad)
            return _CK  # an empty grid launches nothing
    elif grid.__class__ is tuple and len(grid) == 3:
        g0, g1, g2 = grid
        if not (0 < g0 <= 2147483647 and 0 < g1 <= 65535 and 0 < g2 <= 65535) and \
                0 in _grid3(grid, _NAME):
            return _CK
    else:
        g0, g1, g2 = _grid3(grid({meta}) if callable(grid) else grid, _NAME)
        if g0 == 0 or g1 == 0 or g2 == 0:
            return _CK
    try:  # a parameter block no other launch holds (list.pop is atomic: no lock)
        _blk = _FREE.pop()
    except IndexError:
        _blk = _CK._new_fast()
    _st, _ptrs, _addr = _blk
{sets}
    _s = _stream(_DEV) if stream is None else _handle(stream, _DEV)
    try:
        r = _launch(_FN, g0, g1, g2, _THREADS, 1, 1, _SHARED, _cs(_s) or _cs_new(_s),
                    _addr, 0)[0]
    except TypeError:
        _grid3((g0, g1, g2), _NAME)
        raise
    _FREE.append(_blk)  # (cuLaunchKernel copied the values)
    if r is not _OK:  # a thread with no (or another device's) context current: retry once
        _relaunch(r, _launch, _FN, g0, g1, g2, _THREADS, _SHARED, _cs_new(_s), _addr, _DEV)
    return _CK
"""


def _relaunch(r, launch, fn, g0, g1, g2, threads, shared, stream, addr, device) -> None:
    """After a failed launch: retried once in `device`'s context where that can help
    (`driver.launch_retry`), else the error raised. A function of its own: a lambda in the
    launcher would make its locals closure cells, a cost on every launch."""
    from .runtime import driver

    ok = driver.launch_ok()
    if r is not ok:
        r = driver.launch_retry(int(r), device, lambda: launch(
            fn, g0, g1, g2, threads, 1, 1, shared, stream, addr, 0)[0])
    if r is not ok:
        driver.launch_failed(int(r))


# The generated entry's launch, after the key lookup: the record unpacked (`_RECORD`),
# the grid checked, a parameter block off the kernel's free list filled, cuLaunchKernel.
_RUN_TEMPLATE = """\
    {fields} = _kit_l
    if _kit_slow is not None:  # the interpreter, TMA descriptors
        return _kit_slow(grid{comma}{all}, stream)
    if grid.__class__ is _kit_tuple and _kit_len(grid) == 1:
        _kit_g0 = grid[0]
        _kit_g1 = _kit_g2 = 1
        if not 0 < _kit_g0 <= 2147483647 and _kit_grid3(grid, _kit_NAME)[0] == 0:
            return _kit_ck  # an empty grid launches nothing (_kit_grid3 raises if bad)
    elif grid.__class__ is _kit_tuple and _kit_len(grid) == 3:
        _kit_g0, _kit_g1, _kit_g2 = grid
        if not (0 < _kit_g0 <= 2147483647 and 0 < _kit_g1 <= 65535 and
                0 < _kit_g2 <= 65535) and 0 in _kit_grid3(grid, _kit_NAME):
            return _kit_ck
    else:
        _kit_g0, _kit_g1, _kit_g2 = _kit_grid3(
            grid({meta}) if _kit_callable(grid) else grid, _kit_NAME)
        if _kit_g0 == 0 or _kit_g1 == 0 or _kit_g2 == 0:
            return _kit_ck
    try:  # a parameter block no other launch holds (list.pop is atomic: no lock)
        _kit_b = _kit_free.pop()
    except IndexError:
        _kit_b = _kit_ck._new_fast()
    _kit_st, _kit_p, _kit_addr = _kit_b
{sets}\
    _kit_s = _kit_stream(_kit_device) if stream is None else _kit_handle(stream, _kit_device)
    try:
        _kit_r = _kit_launch(_kit_fn, _kit_g0, _kit_g1, _kit_g2, _kit_threads, 1, 1,
                             _kit_shared, _kit_cs(_kit_s) or _kit_cs_new(_kit_s), _kit_addr,
                             0)[0]
    except TypeError:
        _kit_grid3((_kit_g0, _kit_g1, _kit_g2), _kit_NAME)
        raise
    _kit_free.append(_kit_b)  # (cuLaunchKernel copied the values)
    if _kit_r is not _kit_ok:  # a thread with no (or another device's) context: retry once
        _kit_relaunch(_kit_r, _kit_launch, _kit_fn, _kit_g0, _kit_g1, _kit_g2, _kit_threads,
                      _kit_shared, _kit_cs_new(_kit_s), _kit_addr, _kit_device)
    return _kit_ck
"""


def _make_launcher(jf: JITFunction, ck: CompiledKernel, device: int, consts: tuple,
                   pdl: bool = False, cluster: tuple | None = None):
    """A generated function that fills a parameter block from the arguments and calls
    cuLaunchKernel on `device` (its module loaded there, the stream that device's current one
    unless `stream=` is given): no loops, no dict lookups on the hot path. Each launch pops a
    block off the kernel's free list and puts it back after the call (both atomic, so
    concurrent launches never share a block; cheaper than a threading.local read), a new
    block when the list is empty. `pdl`: launched by cuLaunchKernelEx with programmatic
    stream serialization (`launch_pdl=True`); `cluster`: launched by cuLaunchKernelEx in
    clusters of that shape (`driver.cluster_launch`, which checks the grid first).

    A grid function gets every bound argument by name, the constexprs and num_warps, as
    Triton's `grid(bound_args)`."""
    from .runtime import driver

    block = ck.params()
    launch_fn, wrap = _launch_callable(jf, pdl, cluster)
    stream_get, stream_new = _stream_objects(driver.stream_wrap())
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
        rows = t.get("kind") == "rows"
        tmap = ("_rowmap3" if t.get("batched") else "_rowmap") if rows else "_tmapd" if \
            t.get("desc") else "_tmap3" if t.get("batched") else "_tmap"
        l2 = f", {t['l2']}" if t.get("l2", 256) != 256 and not rows else ""
        sets.append(f"    _ptrs[{block.desc_base + j}] = {tmap}({names[t['param']]}, "
                    f"{t['box'][0]}, {t['box'][1]}, {t['swizzle']}, '{t['dtype']}'{l2})")
    if ck.metadata.get("scratch"):  # CUtensorMaps the kernel builds: per program, per launch
        sets.append(f"    _scr = _scratch({ck.metadata['scratch']} * g0 * g1 * g2, _DEV, "
                    "stream)")
        sets.append("    _st.scratch = _scr.data_ptr()")
    meta = "{" + "".join(f"{n!r}: {a}, " for n, a in zip(jf.runtime_params, names)) + \
        "**_META}"
    src = _LAUNCH_TEMPLATE.format(args=", ".join(names + values) or "*_",
                                  sets="\n".join(sets) or "    pass", meta=meta)
    ns = {
        "_ONES": (1, 1, 1), "_grid3": _grid3, "_NAME": jf.__name__, "_CK": ck,
        "_META": dict(zip(jf.constexprs, consts),
                      num_warps=ck.num_warps),
        "_FREE": ck._free, "_launch": launch_fn, "_relaunch": _relaunch,
        "_FN": wrap(ck.function(device)),
        "_THREADS": ck.threads, "_SHARED": ck.shared, "_stream": _stream_getter(),
        "_DEV": device, "_handle": _stream_handle, "_cs": stream_get, "_cs_new": stream_new,
        "_tmap": driver.tensor_map, "_tmap3": driver.tensor_map3,
        "_tmapd": driver.descriptor_map, "_rowmap": _row_map(), "_rowmap3": _row_map(3),
        "_OK": driver.launch_ok(), "_scratch": alloc_scratch,
    }
    exec(src, ns)
    return ns["launch"]


def alloc_scratch(size: int, device: int, stream: Any = None) -> Any:
    """The global scratch of one launch (`size` bytes, 128-byte aligned): from the
    function given to `kitjit.set_allocator` as Triton calls it, `fn(size, alignment,
    stream)` with the CUstream handle, else a torch uint8 tensor on the device (torch's
    caching allocator, ordered on the current stream). Held by the launcher until
    cuLaunchKernel returns, as Triton holds it."""
    from .runtime import get_allocator

    fn = get_allocator()
    if fn is None:
        import torch

        return torch.empty(size, dtype=torch.uint8, device=f"cuda:{device}")
    if stream is None or not isinstance(stream, int):
        import torch

        stream = torch.cuda.current_stream(device).cuda_stream if stream is None else \
            getattr(stream, "cuda_stream", stream)
    buf = fn(size, 128, stream)
    if buf.data_ptr() % 128:
        raise ValueError(f"the allocator given to kitjit.set_allocator returned memory at "
                         f"{buf.data_ptr():#x}, not 128-byte aligned")
    return buf


def _row_map(rank: int = 2):
    from .runtime import ampere

    return ampere.row_map3 if rank == 3 else ampere.row_map


def _launch_callable(jf: JITFunction, pdl: bool, cluster: tuple | None):
    """(launch, wrap): cuLaunchKernel for plain kernels, cuLaunchKernelEx with its
    attributes for `launch_pdl=True` or a `cluster=` launch."""
    from .runtime import driver

    if cluster is not None:
        return driver.cluster_launch(cluster_dims(cluster), pdl, jf.__name__)
    return driver.pdl_launch() if pdl else driver.raw_launch()


def cluster_dims(cluster) -> tuple[int, int, int]:
    """A checked `cluster=` option as three sizes (x, y, z)."""
    c = tuple(cluster)
    return (c + (1, 1, 1))[:3]  # type: ignore[return-value]


def _make_launch_record(jf: JITFunction, ck: CompiledKernel, device: int, consts: tuple,
                        pdl: bool = False, cluster: tuple | None = None) -> tuple:
    """The cache value of one GPU specialization on `device`: what the generated entry
    unpacks to launch it without another Python call (`_RECORD` names the fields): the
    function handle, the kernel's free list of parameter blocks, the launch callable, block
    size, shared memory, device, the CompiledKernel, and the stream getter, CUstream cache and
    success value of the driver the record was made with. Kernels with TMA descriptors or
    host TensorDescriptor parameters take the generated per-key launcher instead (`slow`)."""
    from .runtime import driver

    if ck.metadata.get("tma") or ck.metadata.get("scratch") or \
            any(k.startswith("desc") for k in ck.arg_kinds):
        return slow_record(_make_launcher(jf, ck, device, consts, pdl, cluster))
    launch_fn, wrap = _launch_callable(jf, pdl, cluster)
    stream_get, stream_new = _stream_objects(driver.stream_wrap())
    return (wrap(ck.function(device)), ck._free, launch_fn, ck.threads, ck.shared, device, ck,
            None, _stream_getter(), stream_get, stream_new, driver.launch_ok())


_RECORD = ("fn", "free", "launch", "threads", "shared", "device", "ck", "slow", "stream",
           "cs", "cs_new", "ok")


def record_kernel(record: tuple):
    """The CompiledKernel a cache value launches (None for the interpreter's)."""
    if record[6] is not None:
        return record[6]
    return getattr(record[7], "__globals__", {}).get("_CK")  # a per-key launcher's


def slow_record(launcher) -> tuple:
    """A cache value whose launches all go to `launcher(grid, *args, *values, stream)`: the
    interpreter, kernels with TMA descriptors or host TensorDescriptors."""
    return (None,) * 7 + (launcher,) + (None,) * 4


def _check_launch_args(jf: JITFunction, rt_args, gpu: bool, shape_only: bool = False) -> None:
    """Every check that must pass before anything runs; raised as TypeError/ValueError.
    `shape_only` (kernel.warmup): MockTensors stand for tensors."""
    devices = set()
    for name, a in zip(jf.runtime_params, rt_args):
        if hasattr(a, "kit_values"):  # a host TensorDescriptor: its base tensor
            desc_spec(name, a)
            a = a.base
        check_wrapper_arg(jf.__name__, name, a, shape_only)
        if hasattr(a, "data_ptr"):
            if from_torch(a.dtype) is None:
                raise TypeError(f"argument '{name}' of {jf.__name__}: tensors of dtype "
                                f"{a.dtype} are not supported")
            if isinstance(a, MockTensor):  # (shape_only: a dtype and a shape, nothing to run)
                continue
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


_STREAM_OBJECTS: dict = {}


def _stream_objects(wrap) -> tuple:
    """(get, new) for the launch call's stream argument: cuda.bindings converts an int
    handle into a CUstream object on every call (~0.1 us), so the launcher passes one made
    once per handle: `get(handle) or new(handle)` (a CUstream is never falsy). Shared by
    all launchers of one wrap; bounded (streams come and go in long runs)."""
    cache = _STREAM_OBJECTS.setdefault(wrap, {})

    def new(handle):
        s = wrap(handle)
        if len(cache) >= 256:
            cache.clear()
        cache[handle] = s
        return s

    return cache.get, new


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
                  "launch_pdl": False, "extern_libs": None, "arch": None, "cluster": None}


def _make_runner(jf: JITFunction, sig):
    """The generated launch entry `<kernel>(grid, <params>, num_warps=4, num_stages=None,
    num_ctas=1, maxnreg=None, launch_pdl=False, extern_libs=None, arch=None, cluster=None,
    stream=None)`:
    binds the call's
    arguments, builds the specialization key and launches, in one Python frame (a TypeError
    from binding names the kernel and the parameter).

    `arch`: compile for this target instead of the GPU's own ("sm_80" on an H100 runs the
    Ampere code path from PTX the driver assembles; `JITFunction._compile_for_launch`).
    `cluster`: (x, y, z) CTAs per thread-block cluster (sm_90+; `kit.cluster_ctarank()`
    and friends); None launches plain CTAs.

    `stream`: a torch.cuda.Stream, a raw int CUstream, or None for the current torch stream
    of the tensors' device (ignored by the interpreter). The options other than num_warps
    are part of the key only (num_stages is not: kitjit does not use it), so a hit costs
    nothing more; their checks run on a miss (`JITFunction._miss`).

    A parameter named like a launch option takes the option's value as Triton binds it: the
    launch option is the *keyword* argument of that name (Triton's `parse_options(kwargs)`),
    its default when the parameter is passed by position or not at all, while the parameter
    gets whatever binds to it. Such kernels get a thin wrapper that reads the keyword."""
    global _is_compiling
    torch = _torch_or_none()
    if torch is not None:
        # dynamo folds it to True while it traces (bound once here, never rebound while
        # traced, which would be a guard failure); in eager code one trivial call
        _is_compiling = torch.compiler.is_dynamo_compiling
    params = []
    ns: dict[str, Any] = {"_kit_kp": _key_part, "_kit_C": jf.cache,
                          "_kit_miss": jf._miss, "_kit_M": MISSING_ARG,
                          "_kit_T": _NoTorchTensor if torch is None else torch.Tensor}
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
    flat = "".join(c + ", " for c in jf.constexprs)
    consts = "(" + flat + ")"
    # per run-time argument: its key part, and the value the launcher stores (a tensor's
    # data pointer, read once here; anything else as it is). Parameters in
    # do_not_specialize(_on_alignment) key on their type only (`_key_part_plain`).
    body = []
    for i, n in enumerate(rt):
        k = f"_kit_k{i}, _kit_d{i}, _kit_a{i}"
        if n in dns or n in dna:
            ns["_kit_kpp"] = _key_part_plain
            body += [f"    _kit_v{i} = {n}.data_ptr() if _kit_isinstance({n}, _kit_T) "
                     f"else {n}",
                     f"    {k} = _kit_kpp({n}, {n in dna})"]
            continue
        tensor = [f"        _kit_v{i} = {n}.data_ptr()",
                  f"        {k} = {n}.dtype, {n}.get_device(), not _kit_v{i} & 15"]
        body += [f"    if {n}.__class__ is _kit_T:", *tensor,
                 f"    elif {n}.__class__ is _kit_int:  # == 1, 32/64-bit/too wide, "
                 "divisible by 16",
                 f"        _kit_v{i} = {n}",
                 f"        {k} = {n} == 1, -2147483648 <= {n} <= 2147483647 or "
                 f"(-9223372036854775808 <= {n} <= 9223372036854775807 and 2), not {n} & 15",
                 f"    elif not _kit_isinstance({n}, _kit_T):",
                 f"        _kit_v{i} = {n}",
                 f"        {k} = _kit_kp({n})",
                 "    else:  # a Tensor subclass (nn.Parameter, ...): passed as a tensor",
                 *tensor]
    # the key is flat (hashing nested tuples costs more): the constexprs, the options, then
    # three elements per run-time argument (tensor: dtype, device, aligned; int: == 1, width,
    # divisible by 16; anything else: its type, None, None)
    parts = "".join(f", _kit_k{i}, _kit_d{i}, _kit_a{i}" for i in range(len(rt)))
    vals = "".join(f", _kit_v{i}" for i in range(len(rt)))
    args = ", ".join(rt)
    name = jf.__name__ if jf.__name__.isidentifier() else "kernel"
    # what a grid function gets: every argument by name, the constexprs, num_warps (Triton's)
    meta = "{" + "".join(f"{p!r}: {p}, " for p in [*rt, *jf.constexprs]) + \
        f"'num_warps': {opt['num_warps']}}}"
    ns.update(_kit_grid3=_grid3, _kit_relaunch=_relaunch, _kit_handle=_stream_handle,
              _kit_NAME=jf.__name__, _kit_tuple=tuple, _kit_len=len, _kit_callable=callable,
              _kit_int=int, _kit_isinstance=isinstance)  # (a parameter may be named `len`)
    opts = [f"{opt[o]}={d!r}" for o, d in LAUNCH_OPTIONS.items()] + ["stream=None"]
    nw, mr, nc, pdl = opt["num_warps"], opt["maxnreg"], opt["num_ctas"], opt["launch_pdl"]
    arch, cl = opt["arch"], opt["cluster"]
    src = (f"def {name}(grid, {', '.join(params + opts)}):\n"
           + "".join(line + "\n" for line in body) +
           f"    _kit_key = ({flat}{nw}, {mr}, {nc}, {pdl}, {arch}, {cl}{parts})\n"
           f"    try:\n"
           f"        _kit_l = _kit_C[_kit_key]\n"
           f"    except KeyError:\n"
           f"        _kit_l = None\n"
           f"    except TypeError:  # an unhashable option (cluster=[2, 1]): _kit_miss says\n"
           f"        _kit_l = None\n"
           f"    if _kit_l is None:\n"
           f"        _kit_l = _kit_miss(_kit_key, ({args}{',' if len(rt) == 1 else ''}), "
           f"{consts}, {nw}, {mr}, {nc}, {pdl}, {arch}, {cl})\n"
           + _RUN_TEMPLATE.format(
               fields=", ".join(f"_kit_{f}" for f in _RECORD), all=f"{args}{vals}",
               comma=", " if rt else "", name=name, meta=meta,
               sets="".join(f"    _kit_st.a{i} = _kit_v{i}\n" for i in range(len(rt)))))
    exec(src, ns)
    inner = ns[name]
    if not shared_opts:
        return inner

    def launch(grid, *args, **kw):
        for o in shared_opts:  # (kitjit::launch passes the option itself, `_kit_o_<o>`)
            kw.setdefault(f"_kit_o_{o}", kw.get(o, LAUNCH_OPTIONS[o]))
        return inner(grid, *args, **kw)

    return launch


class _NoTorchTensor:
    """Stands in for torch.Tensor where torch is not installed (kernels compile ahead of
    time with no torch, `kitjit compile`; nothing can be an instance of it)."""


def _torch_or_none():
    """torch, or None where it is not installed (kitjit imports and compiles without it;
    launching needs it)."""
    try:
        import torch
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        return None
    return torch


def _key_part_plain(a, one: bool) -> tuple:
    """The three key elements of a do_not_specialize(_on_alignment) argument: its type (a
    tensor's dtype and device), not its alignment; ints equal to 1 apart only when `one`
    (do_not_specialize_on_alignment keeps that specialization, as in Triton)."""
    if a.__class__ is int:
        return (one and a == 1, 0 if -2147483648 <= a <= 2147483647 else
                1 if -9223372036854775808 <= a <= 9223372036854775807 else 2, None)
    key = getattr(a, "kit_key", None)  # a host TensorDescriptor
    if key is not None:
        return (a.__class__, key(), None)
    try:
        return (a.dtype, a.get_device(), None)
    except AttributeError:
        return (a.__class__, None, None)

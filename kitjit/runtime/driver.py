"""The CUDA driver through ctypes: load cubins, launch kernels.

ctypes straight onto libcuda keeps the launch path to a handful of C calls: the parameter
block (one ctypes struct per kernel and thread, whose field addresses sit in a `void*[]`) is
filled in place and `cuLaunchKernel` is called with its address, so a cached launch costs
little more than the driver's own work. Modules are loaded into the primary context of the
device they run on (pushed for the load, then popped: torch's current device is left alone);
a CUfunction then launches in its own context whatever context is current. No GPU (no
libcuda, or cuInit fails) is reported by `available()`, and the JIT falls back to the
interpreter.
"""

from __future__ import annotations

import ctypes
import threading
from abc import ABCMeta, abstractmethod
from typing import Any, NamedTuple

CUDA_SUCCESS = 0
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16

_lock = threading.Lock()
_lib: Any = None
_init_error: str | None = None


class DriverError(RuntimeError):
    pass


def _load() -> Any:
    global _lib, _init_error
    if _lib is not None or _init_error is not None:
        return _lib
    with _lock:
        if _lib is not None or _init_error is not None:
            return _lib
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            _init_error = f"no CUDA driver (libcuda.so.1: {e})"
            return None
        vp, i, u = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
        P = ctypes.POINTER
        sigs = {
            "cuInit": [u],
            "cuDeviceGet": [P(i), i],
            "cuDeviceGetCount": [P(i)],
            "cuDeviceGetAttribute": [P(i), i, i],
            "cuCtxGetCurrent": [P(vp)],
            "cuCtxSetCurrent": [vp],
            "cuCtxPushCurrent_v2": [vp],
            "cuCtxPopCurrent_v2": [P(vp)],
            "cuThreadExchangeStreamCaptureMode": [P(i)],
            "cuDevicePrimaryCtxRetain": [P(vp), i],
            "cuModuleLoadData": [P(vp), ctypes.c_char_p],
            "cuModuleGetFunction": [P(vp), vp, ctypes.c_char_p],
            "cuModuleUnload": [vp],
            "cuFuncSetAttribute": [vp, i, i],
            "cuFuncGetAttribute": [P(i), i, vp],
            "cuLaunchKernel": [vp, u, u, u, u, u, u, u, vp, vp, vp],
            "cuGetErrorString": [i, P(ctypes.c_char_p)],
            "cuStreamIsCapturing": [vp, P(i)],
        }
        for name, args in sigs.items():
            f = getattr(lib, name)
            f.argtypes = args
            f.restype = i
        f = getattr(lib, "cuStreamWriteValue32_v2", None)   # (CUDA >= 11.7)
        if f is not None:
            f.argtypes = [vp, ctypes.c_uint64, ctypes.c_uint32, u]
            f.restype = i
        r = lib.cuInit(0)
        if r != CUDA_SUCCESS:
            _init_error = f"cuInit failed: {_err(lib, r)}"
            return None
        n = ctypes.c_int(0)
        lib.cuDeviceGetCount(ctypes.byref(n))
        if n.value == 0:
            _init_error = "no CUDA device"
            return None
        _lib = lib
        return lib


def _err(lib, code: int) -> str:
    s = ctypes.c_char_p()
    try:
        lib.cuGetErrorString(code, ctypes.byref(s))
    except Exception:
        return f"CUDA error {code}"
    return f"{(s.value or b'?').decode()} ({code})"


def check(code: int, what: str) -> None:
    if code != CUDA_SUCCESS:
        raise DriverError(f"{what}: {_err(_lib, code)}")


def stream_write_value32(stream: int, address: int, value: int) -> None:
    """Write `value` to the 32-bit word at `address` when `stream` reaches this point, after
    the stream's earlier work (cuStreamWriteValue32; no kernel, so no SM is needed, and the
    driver fences before the write): a copy engine's copy followed by this is a signal."""
    lib = _load()
    f = getattr(lib, "cuStreamWriteValue32_v2", None) if lib is not None else None
    if f is None:
        raise DriverError("cuStreamWriteValue32_v2 is not available: "
                          f"{_init_error or 'driver older than 11.7'}")
    check(f(stream, address, value & 0xFFFFFFFF, 0), "cuStreamWriteValue32_v2")


def available() -> bool:
    return _load() is not None


def unavailable_reason() -> str:
    _load()
    return _init_error or ""


def ensure_context(device: int) -> None:
    lib = _load()
    ctx = ctypes.c_void_p()
    check(lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    if not ctx.value:
        check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device), "cuDevicePrimaryCtxRetain")
        check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


_primary: dict[int, int] = {}


def primary_context(device: int) -> int:
    """`device`'s primary context (retained once per process: torch uses the same one)."""
    ctx = _primary.get(device)
    if ctx is None:
        lib = _load()
        c = ctypes.c_void_p()
        check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(c), device),
              f"cuDevicePrimaryCtxRetain({device})")
        ctx = _primary.setdefault(device, c.value)
    return ctx


class device_context:
    """`with device_context(d):` makes device d's primary context current in this thread for
    the block (pushed only if another one is current; none current: d's is set, as torch
    would), and restores the previous one after."""

    def __init__(self, device: int):
        self.device = device
        self.pushed = False

    def __enter__(self):
        lib = _load()
        want = primary_context(self.device)
        cur = ctypes.c_void_p()
        check(lib.cuCtxGetCurrent(ctypes.byref(cur)), "cuCtxGetCurrent")
        if not cur.value:
            check(lib.cuCtxSetCurrent(want), "cuCtxSetCurrent")
        elif cur.value != want:
            check(lib.cuCtxPushCurrent_v2(want), "cuCtxPushCurrent")
            self.pushed = True
        return self

    def __exit__(self, *exc):
        if self.pushed:
            old = ctypes.c_void_p()
            check(_load().cuCtxPopCurrent_v2(ctypes.byref(old)), "cuCtxPopCurrent")
        return False


CU_STREAM_CAPTURE_MODE_RELAXED = 2


def stream_capturing(stream: int) -> bool:
    """Whether the raw CUstream `stream` is being captured into a CUDA graph (also when the
    driver cannot tell: the caller then takes its capture-safe path)."""
    status = ctypes.c_int(0)
    r = _load().cuStreamIsCapturing(ctypes.c_void_p(stream), ctypes.byref(status))
    return r != CUDA_SUCCESS or status.value != 0


def exchange_capture_mode(mode: int) -> int:
    """Set this thread's stream-capture interaction mode (cuThreadExchangeStreamCaptureMode)
    and return the previous one. RELAXED lets the thread load a module while some stream is
    being captured into a CUDA graph (the global mode torch captures in forbids it)."""
    m = ctypes.c_int(mode)
    check(_load().cuThreadExchangeStreamCaptureMode(ctypes.byref(m)),
          "cuThreadExchangeStreamCaptureMode")
    return m.value


def device_attribute(attr: int, device: int = 0) -> int:
    lib = _load()
    v = ctypes.c_int(0)
    check(lib.cuDeviceGetAttribute(ctypes.byref(v), attr, device), "cuDeviceGetAttribute")
    return v.value


def device_arch(device: int = 0) -> str:
    major = device_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
    minor = device_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
    return f"sm_{major}{minor}{'a' if major >= 9 else ''}"


def max_shared_memory(device: int = 0) -> int:
    return device_attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device)


def load_function(cubin: bytes, name: str, shared: int, device: int) -> tuple[int, int]:
    """(module, function) handles for `name` in `cubin`, loaded into `device`'s primary
    context (made current for the load only, whatever device is current)."""
    lib = _load()
    with device_context(device):
        mod = ctypes.c_void_p()
        check(lib.cuModuleLoadData(ctypes.byref(mod), cubin), f"loading the cubin of {name}")
        fn = ctypes.c_void_p()
        check(lib.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()),
              f"cuModuleGetFunction({name})")
        if shared > 48 * 1024:
            check(lib.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         shared),
                  f"raising the shared memory of {name} to {shared} bytes")
    return mod.value, fn.value


def function_registers(fn: int) -> int:
    """Registers per thread of a loaded function (CU_FUNC_ATTRIBUTE_NUM_REGS), as Triton
    reads `n_regs` at `_init_handles`."""
    v = ctypes.c_int(0)
    check(_load().cuFuncGetAttribute(ctypes.byref(v), 4, ctypes.c_void_p(fn)),
          "cuFuncGetAttribute(NUM_REGS)")
    return v.value


_CTYPES = {"ptr": ctypes.c_uint64, "i32": ctypes.c_int32, "i64": ctypes.c_int64,
           "u32": ctypes.c_uint32, "u64": ctypes.c_uint64, "fp32": ctypes.c_float,
           "fp64": ctypes.c_double, "i1": ctypes.c_int32}


class ParamBlock:
    """The kernel's parameters as one ctypes struct plus the void* array cuLaunchKernel reads;
    TMA descriptors come last, their slots pointing at host-side CUtensorMaps. A launch fills
    it in place, so a block serves one launch at a time (CompiledKernel's free list):
    cuLaunchKernel copies the values before it returns.

    `kinds`: one per run-time parameter, "const" for those folded into the kernel. Field
    `a<i>` holds parameter i, so a launch fills every block the same way whatever the
    specialization; a const's field (it takes None or 1) is not in the void* array."""

    def __init__(self, kinds: list[str], n_desc: int = 0, scratch: bool = False):
        self.kinds = [k for k in kinds if k != "const"]
        fields = [(f"a{i}", ctypes.c_void_p if k == "const" else _CTYPES[k])
                  for i, k in enumerate(kinds)]
        if scratch:  # the global scratch pointer: a field, the last parameter
            fields.append(("scratch", ctypes.c_void_p))
        self.struct_t = type("Params", (ctypes.Structure,), {"_fields_": fields})
        self.struct = self.struct_t()
        self.names = [f for (f, _), k in zip(fields, kinds) if k != "const"]
        self.desc_base = len(self.names)
        n = max(1, len(self.names) + n_desc + scratch)
        self.ptrs = (ctypes.c_void_p * n)()
        base = ctypes.addressof(self.struct)
        for i, fname in enumerate(self.names):
            self.ptrs[i] = base + getattr(self.struct_t, fname).offset
        if scratch:
            self.ptrs[n - 1] = base + self.struct_t.scratch.offset
        self.address = ctypes.addressof(self.ptrs)


_TMAP_CACHE: dict = {}
_TMAP_OLD: dict = {}
_TMAP_MAX = 4096
_DTYPES_TMA = {"bf16": 9, "fp16": 6, "fp32": 7, "u8": 0, "i32": 3, "fp64": 8,
               "fp8e4nv": 0, "fp8e5": 0}  # fp8 travels as bytes
_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}
_L2_PROMOTION = {0: 0, 64: 1, 128: 2, 256: 3}  # CU_TENSOR_MAP_L2_PROMOTION_{NONE, L2_64B, ...}
_TMA_BY_SIZE = {1: 0, 2: 1, 4: 2, 8: 4}  # UINT8/16/32/64: a copy is a copy (zeros fill)


def encode_tiled(data_type: int, ptr: int, rows: int, cols: int, row_bytes: int,
                 box_rows: int, box_cols: int, swizzle: int,
                 batch: tuple[int, int] | None = None, l2: int = 256) -> tuple[Any, int]:
    """cuTensorMapEncodeTiled for a 2-d row-major region (rows x cols elements, rows
    `row_bytes` apart) and a box of box_rows x box_cols: (the object that owns the 128-byte
    CUtensorMap, its host address). `batch` = (count, bytes apart): `count` such regions,
    a 3-d map whose box is one region deep (a box past `rows` reads zeros, not the next
    region). `l2`: the L2 promotion in bytes (0: none). Pure host work (no context, no
    GPU); kitjit.testing's FakeDriver replaces it on machines without libcuda. Raises
    DriverError."""
    from cuda.bindings import driver as cu

    u64, u32 = cu.cuuint64_t, cu.cuuint32_t
    dims, strides = [u64(cols), u64(rows)], [u64(row_bytes)]
    box, estr = [u32(box_cols), u32(box_rows)], [u32(1), u32(1)]
    if batch is not None:
        dims.append(u64(batch[0]))
        strides.append(u64(batch[1]))
        box.append(u32(1))
        estr.append(u32(1))
    err, tmap = cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType(data_type), u32(len(dims)), ptr, dims, strides, box, estr,
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        cu.CUtensorMapSwizzle(_SWIZZLE[swizzle]),
        cu.CUtensorMapL2promotion(_L2_PROMOTION[l2]),
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if int(err):
        raise DriverError(f"cuTensorMapEncodeTiled failed ({err})")
    return tmap, tmap.getPtr()


def cached_map(key: tuple, data_type: int, ptr: int, rows: int, cols: int, row_bytes: int,
               box_rows: int, box_cols: int, swizzle: int,
               batch: tuple[int, int] | None = None, l2: int = 256) -> int:
    """The address of the CUtensorMap `encode_tiled` makes from these values, cached under
    `key`, which must determine every one of them (a cached map is then never stale: the
    same key encodes the same 128 bytes). When full the cache starts over but keeps the
    previous generation alive, so a map another thread is about to launch with is never
    freed (cuLaunchKernel copies the 128 bytes before it returns)."""
    hit = _TMAP_CACHE.get(key)
    if hit is not None:
        return hit[1]
    extra = () if batch is None else (batch,)  # (kitjit.testing's fake records the values)
    kw = {} if l2 == 256 else {"l2": l2}
    owner, addr = encode_tiled(data_type, ptr, rows, cols, row_bytes, box_rows, box_cols,
                               swizzle, *extra, **kw)
    if len(_TMAP_CACHE) >= _TMAP_MAX:
        global _TMAP_OLD
        _TMAP_OLD = dict(_TMAP_CACHE)
        _TMAP_CACHE.clear()
    _TMAP_CACHE[key] = (owner, addr)
    return addr


def tensor_map(t: Any, box_rows: int, box_cols: int, swizzle: int, dtype: str,
               l2: int = 256) -> int:
    """Address of a CUtensorMap for 2-d tensor `t` (whose element type is `dtype`, the
    kernel's: the launch specialized on it) and the box, built once per (pointer, shape,
    strides, dtype, box, swizzle) and cached: encoding costs microseconds, a dict lookup
    does not. The encoding is host-side and the pointer is unique across devices (unified
    addressing), so one cache serves every device. `l2`: the L2 promotion (bytes)."""
    ptr = t.data_ptr()
    key = (ptr, t.shape, t.stride(), box_rows, box_cols, swizzle, dtype, l2)
    hit = _TMAP_CACHE.get(key)
    if hit is not None:
        return hit[1]
    if t.dim() != 2 or t.stride(1) != 1 or ptr % 16 or (t.stride(0) * t.element_size()) % 16:
        raise ValueError(f"a tensor copied by TMA must be 2-d, contiguous in its last dim, "
                         f"16-byte aligned, with rows a multiple of 16 bytes apart; got shape "
                         f"{tuple(t.shape)}, strides {tuple(t.stride())}, address {ptr:#x}")
    try:
        return cached_map(key, _DTYPES_TMA[dtype], ptr, t.shape[0], t.shape[1],
                          t.stride(0) * t.element_size(), box_rows, box_cols, swizzle, l2=l2)
    except DriverError as e:
        raise DriverError(f"{e} for shape {tuple(t.shape)} box [{box_rows}, {box_cols}]"
                          ) from None


def tensor_map3(t: Any, box_rows: int, box_cols: int, swizzle: int, dtype: str,
                l2: int = 256) -> int:
    """`tensor_map` for a 3-d tensor (batch, rows, cols) copied by boxes of one batch entry
    (kit.tma_load's (batch, row, col) coordinates): the map's third dimension keeps each
    entry's rows apart, so TMA reads zeros past an entry's last row (attention's K and V
    tiles past a head's last key)."""
    ptr = t.data_ptr()
    key = (ptr, t.shape, t.stride(), box_rows, box_cols, swizzle, dtype, l2)
    hit = _TMAP_CACHE.get(key)
    if hit is not None:
        return hit[1]
    e = t.element_size()
    if t.dim() != 3 or t.stride(2) != 1 or ptr % 16 or (t.stride(1) * e) % 16 or \
            (t.stride(0) * e) % 16:
        raise ValueError(f"a tensor copied by TMA with (batch, row, col) coordinates must be "
                         f"3-d, contiguous in its last dim, 16-byte aligned, with rows and "
                         f"batch entries a multiple of 16 bytes apart; got shape "
                         f"{tuple(t.shape)}, strides {tuple(t.stride())}, address {ptr:#x}")
    try:
        return cached_map(key, _DTYPES_TMA[dtype], ptr, t.shape[1], t.shape[2],
                          t.stride(1) * e, box_rows, box_cols, swizzle,
                          (t.shape[0], t.stride(0) * e), l2=l2)
    except DriverError as err:
        raise DriverError(f"{err} for shape {tuple(t.shape)} box [1, {box_rows}, "
                          f"{box_cols}]") from None


def descriptor_map(d: Any, box_rows: int, box_cols: int, swizzle: int, dtype: str,
                   l2: int = 256) -> int:
    """Address of a CUtensorMap for a 2-d host TensorDescriptor `d` (its base, shape and
    strides; the box one swizzle chunk of its block), cached like `tensor_map`."""
    ptr = d.base.data_ptr()
    (rows, cols), stride = d.shape, d.strides[0]
    e = d.base.element_size()
    key = ("desc", ptr, rows, cols, stride, e, box_rows, box_cols, swizzle, dtype, l2)
    hit = _TMAP_CACHE.get(key)
    if hit is not None:
        return hit[1]
    try:
        return cached_map(key, _DTYPES_TMA.get(dtype, _TMA_BY_SIZE[e]), ptr, rows, cols,
                          stride * e, box_rows, box_cols, swizzle, l2=l2)
    except DriverError as err:
        raise DriverError(f"{err} for a descriptor of shape {[rows, cols]}, strides "
                          f"{list(d.strides)}, box [{box_rows}, {box_cols}]") from None


def raw_launch():
    """(cuLaunchKernel, wrap): cuda.bindings' Cython wrapper where it imports (measured
    0.8 us faster per call than ctypes with argtypes on an H200 host), else libcuda's own
    through ctypes; `wrap` turns a raw function handle into what that callable takes."""
    try:
        from cuda.bindings import driver as cu

        return cu.cuLaunchKernel, cu.CUfunction
    except ImportError:  # pragma: no cover - cuda-bindings is a dependency
        lib = _load()
        return (lambda *a: (lib.cuLaunchKernel(*a),)), (lambda h: h)


def stream_wrap():
    """What the launch callable takes as its stream (see `raw_launch`): cuda.bindings'
    CUstream, or the int handle itself for libcuda through ctypes."""
    try:
        from cuda.bindings import driver as cu

        return cu.CUstream
    except ImportError:  # pragma: no cover - cuda-bindings is a dependency
        return lambda h: h


def launch_ok():
    """What the launch call returns on success (compared by identity on the hot path)."""
    try:
        from cuda.bindings import driver as cu

        return cu.CUresult.CUDA_SUCCESS
    except ImportError:  # pragma: no cover
        return 0


CUDA_ERROR_INVALID_CONTEXT = 201
CUDA_ERROR_INVALID_HANDLE = 400


def launch_retry(code: int, device: int, relaunch):
    """After a failed launch: in a thread whose current context is none or another
    device's (a thread that never touched torch.cuda gets no context), launch again with
    `device`'s primary context current (kept current when none was, as torch would do;
    pushed and popped around the launch otherwise). Off the hot path: only a failed launch
    comes here. Returns the new result, or the old code's when retrying cannot help."""
    if code not in (CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_HANDLE):
        return code
    with device_context(device):
        return relaunch()


def launch_failed(code: int) -> None:
    check(code, "cuLaunchKernel")


def pdl_launch():
    """(launch, wrap) like `raw_launch`, but the launch is cuLaunchKernelEx with the
    programmatic-stream-serialization attribute (`launch_pdl=True`): the kernel may start
    before the previous kernel in its stream has finished, up to its `kit.gdc_wait`, once
    that kernel has run `kit.gdc_launch_dependents` (or exited). Same call signature as
    cuLaunchKernel, so the generated launcher is unchanged."""
    from cuda.bindings import driver as cu

    attr = cu.CUlaunchAttribute()
    attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.programmaticStreamSerializationAllowed = 1
    launch_ex = cu.cuLaunchKernelEx
    tls = threading.local()   # one config per thread, its attribute set once (making a
    # CUlaunchConfig and its attribute array cost ~1 us per launch; the driver reads the
    # config during the call only)

    def launch(f, g0, g1, g2, b0, b1, b2, shared, stream, params, extra):
        try:
            config = tls.config
        except AttributeError:
            config = tls.config = cu.CUlaunchConfig()
            config.attrs = [attr]
            config.numAttrs = 1
        config.gridDimX, config.gridDimY, config.gridDimZ = g0, g1, g2
        config.blockDimX, config.blockDimY, config.blockDimZ = b0, b1, b2
        config.sharedMemBytes = shared
        config.hStream = stream if stream.__class__ is cu.CUstream else cu.CUstream(stream)
        return launch_ex(config, f, params, extra)

    return launch, cu.CUfunction


def check_cluster_grid(name: str, grid: tuple, cluster: tuple) -> None:
    """A grid launched in clusters: each size a multiple of the cluster's (else ValueError,
    before the launch; the driver's CUDA_ERROR_INVALID_CLUSTER_SIZE would not say why)."""
    if any(g % c for g, c in zip(grid, cluster)):
        raise ValueError(f"{name}: grid {tuple(grid)} is not a whole number of clusters of "
                         f"{tuple(cluster)} CTAs: each grid size must be a multiple of the "
                         "cluster's")


def cluster_launch(cluster: tuple[int, int, int], pdl: bool, name: str):
    """(launch, wrap) like `pdl_launch`, for a kernel launched in thread-block clusters
    (`cluster=(x, y, z)`): cuLaunchKernelEx with the cluster-dimension attribute (and
    programmatic stream serialization too when `pdl`). The grid is checked first: each of
    its sizes must be a multiple of the cluster's (the driver's error would not say which).
    A cluster of more than 8 CTAs (non-portable) needs the function attribute that allows
    it: set once per function handle, here, before its first launch."""
    from cuda.bindings import driver as cu

    cx, cy, cz = cluster
    attrs = []
    a = cu.CUlaunchAttribute()
    a.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z = cx, cy, cz
    attrs.append(a)
    if pdl:
        p = cu.CUlaunchAttribute()
        p.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        p.value.programmaticStreamSerializationAllowed = 1
        attrs.append(p)
    launch_ex = cu.cuLaunchKernelEx
    tls = threading.local()
    nonportable = cx * cy * cz > 8
    allowed: set = set()

    def launch(f, g0, g1, g2, b0, b1, b2, shared, stream, params, extra):
        if g0 % cx or g1 % cy or g2 % cz:
            check_cluster_grid(name, (g0, g1, g2), cluster)
        if nonportable and int(f) not in allowed:
            check(cu.cuFuncSetAttribute(
                f, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                1)[0], "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)")
            allowed.add(int(f))
        try:
            config = tls.config
        except AttributeError:
            config = tls.config = cu.CUlaunchConfig()
            config.attrs = attrs
            config.numAttrs = len(attrs)
        config.gridDimX, config.gridDimY, config.gridDimZ = g0, g1, g2
        config.blockDimX, config.blockDimY, config.blockDimZ = b0, b1, b2
        config.sharedMemBytes = shared
        config.hStream = stream if stream.__class__ is cu.CUstream else cu.CUstream(stream)
        return launch_ex(config, f, params, extra)

    return launch, cu.CUfunction


# cuDeviceGetAttribute numbers for the device properties Triton reports
_PROPERTY_ATTRS = {
    "max_shared_mem": CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
    "max_num_regs": 12,  # CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK
    "multiprocessor_count": CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
    "warpSize": 10,  # CU_DEVICE_ATTRIBUTE_WARP_SIZE
    "sm_clock_rate": 13,  # CU_DEVICE_ATTRIBUTE_CLOCK_RATE (kHz)
    "mem_clock_rate": 36,  # CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE (kHz)
    "mem_bus_width": 37,  # CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH (bits)
}


def _require_driver(what: str) -> None:
    if not available():
        raise RuntimeError(f"kitjit.runtime.driver.active.{what} needs a CUDA GPU: "
                           f"{unavailable_reason()}")


# What the interpreter reports without a GPU: the nominal properties of kitjit's default
# compile target, sm_90a (an H100 SXM), so host code doing occupancy arithmetic runs.
_NO_GPU_PROPERTIES = {"max_shared_mem": 232448, "max_num_regs": 65536,
                      "multiprocessor_count": 132, "warpSize": 32, "sm_clock_rate": 1980000,
                      "mem_clock_rate": 2619000, "mem_bus_width": 5120}


class _Utils:
    """`driver.active.utils`, as Triton's CUDA driver utils."""

    @staticmethod
    def get_device_properties(device: int = 0) -> dict[str, int]:
        """The device's properties read from the driver, with Triton's keys:
        max_shared_mem (opt-in bytes per block), max_num_regs (per block),
        multiprocessor_count, warpSize, sm_clock_rate, mem_clock_rate (kHz),
        mem_bus_width (bits). Without a GPU (kernels run in the interpreter): the nominal
        values of sm_90a, kitjit's default compile target (132 SMs, 227 KiB of shared
        memory per block, 64K registers), so a tutorial's occupancy arithmetic runs."""
        if not available():
            return dict(_NO_GPU_PROPERTIES)
        device = getattr(device, "index", device)
        if device is None:
            device = _ActiveDriver.get_current_device()
        return {k: device_attribute(a, device) for k, a in _PROPERTY_ATTRS.items()}


class DriverBase(metaclass=ABCMeta):
    """Triton's base class of backend drivers (`triton.backends.driver.DriverBase`), for
    host code that checks or annotates against it; kitjit's one driver derives from it."""

    @classmethod
    @abstractmethod
    def is_active(cls) -> bool: ...

    @abstractmethod
    def map_python_to_cpp_type(self, ty: str) -> str: ...

    @abstractmethod
    def get_current_target(self) -> Any: ...

    @abstractmethod
    def get_active_torch_device(self) -> Any: ...

    @abstractmethod
    def get_benchmarker(self) -> Any: ...


_CPP_TYPES = {"i1": "int8_t", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t",
              "i64": "int64_t", "u1": "uint8_t", "u8": "uint8_t", "u16": "uint16_t",
              "u32": "uint32_t", "u64": "uint64_t", "fp16": "double", "bf16": "double",
              "fp32": "double", "f32": "double", "fp64": "double"}


class _ActiveDriver(DriverBase):
    """`kitjit.runtime.driver.active`: what Triton's `triton.runtime.driver.active` offers
    kernels' host code (devices and streams are torch's, as in Triton)."""

    utils = _Utils()

    @classmethod
    def is_active(cls) -> bool:
        """Always: without a GPU, kitjit's driver runs kernels in the interpreter."""
        return True

    def map_python_to_cpp_type(self, ty: str) -> str:
        """The C type of a kernel parameter's type string ('*fp16' -> CUdeviceptr), as
        Triton's CUDA driver's launcher declares it (floats pass as double to Python)."""
        if ty.startswith("*"):
            return "CUdeviceptr"
        if ty not in _CPP_TYPES:
            raise ValueError(f"kitjit.runtime.driver: no C type for {ty!r}")
        return _CPP_TYPES[ty]

    @staticmethod
    def get_benchmarker() -> Any:
        """The benchmarking function: kitjit.testing.do_bench, as Triton's is do_bench."""
        from kitjit.testing import do_bench

        return do_bench

    @staticmethod
    def get_current_device() -> int:
        import torch

        _require_driver("get_current_device")
        return torch.cuda.current_device()

    @staticmethod
    def get_current_stream(device: int | None = None) -> int:
        """The raw CUstream handle of torch's current stream on `device`."""
        import torch

        _require_driver("get_current_stream")
        if device is None:
            device = torch.cuda.current_device()
        return torch.cuda.current_stream(device).cuda_stream

    @staticmethod
    def get_active_torch_device():
        """torch's current CUDA device; without a GPU, `cpu`: kernels then run in the
        interpreter on CPU tensors, so code that allocates on this device runs there."""
        import torch

        if not available():
            return torch.device("cpu")
        return torch.device("cuda", torch.cuda.current_device())

    @staticmethod
    def get_device_interface():
        import torch

        return torch.cuda

    @staticmethod
    def get_current_target():
        """(backend, arch, warp_size) like Triton's GPUTarget: ("cuda", 90, 32). Without a
        GPU, ("cpu", 0, 32): kernels run in the interpreter, and host code that asks
        `backend == "cuda"` before calling torch.cuda takes its other path."""
        if not available():
            return GPUTarget("cpu", 0, 32)
        import torch

        d = torch.cuda.current_device()
        major = device_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d)
        minor = device_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d)
        return GPUTarget("cuda", 10 * major + minor, 32)


class GPUTarget(NamedTuple):
    """Triton's GPUTarget(backend, arch, warp_size)."""

    backend: str
    arch: int
    warp_size: int


active = _ActiveDriver()


class DriverConfig:
    """Triton's `triton.runtime.driver.driver` object: `.active` and `.default` are kitjit's
    one driver (`from triton.runtime.driver import driver; driver.active...`). Setting
    another driver active is not supported yet: kitjit launches through its own."""

    def __init__(self) -> None:
        self._active: DriverBase = active

    @property
    def default(self) -> DriverBase:
        return active

    @property
    def active(self) -> DriverBase:
        return self._active

    def set_active(self, driver: DriverBase) -> None:
        if driver is not active:
            raise NotImplementedError(
                "kitjit.runtime.driver.driver.set_active(another driver) is not supported "
                "yet: kitjit's launches, streams and device queries go through its own CUDA "
                "driver")
        self._active = driver

    def reset_active(self) -> None:
        self._active = active


driver = DriverConfig()
# `triton.runtime.driver` is that object in Triton (triton.runtime imports it over the
# module): its methods on this module too, for `triton.runtime.driver.set_active(...)`
default = active
set_active = driver.set_active
reset_active = driver.reset_active


from kitjit.language.triton_names import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("kitjit.runtime.driver", "triton.runtime.driver")

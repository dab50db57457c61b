"""What a C/C++ host needs to launch an ahead-of-time compiled kernel (`kitjit compile
--header / --json-sidecar`): the launch description (entry, parameter layout, block size,
shared memory, TMA descriptors) as a JSON-able dict, and a C header that embeds the cubin and
loads and launches it through the CUDA driver API.

The parameter layout is the one kitjit's own launcher uses (kitjit.runtime.driver.ParamBlock):
the run-time parameters in order (constexprs are folded into the cubin), then one CUtensorMap
per TMA-loaded tensor, passed by value (128 bytes, 64-byte aligned), in `metadata['tma']`
order. Sizes are checked against the PTX entry's own `.param` declarations, so the
description cannot drift from what the kernel reads.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

__all__ = ["launch_description", "c_header", "FORMAT"]

FORMAT = "kitjit-launch/1"
SHARED_OPT_IN = 48 * 1024  # above this, cuFuncSetAttribute must raise the dynamic limit

# kind (CompiledKernel.arg_kinds) -> (C type, size, alignment, note)
_C_TYPES: dict[str, tuple[str, int, int, str]] = {
    "ptr": ("CUdeviceptr", 8, 8, "device address"),
    "i1": ("int32_t", 4, 4, "bool, 0 or 1"),
    "i8": ("int8_t", 1, 1, ""),
    "u8": ("uint8_t", 1, 1, ""),
    "i16": ("int16_t", 2, 2, ""),
    "i32": ("int32_t", 4, 4, ""),
    "u32": ("uint32_t", 4, 4, ""),
    "i64": ("int64_t", 8, 8, ""),
    "u64": ("uint64_t", 8, 8, ""),
    "fp16": ("uint16_t", 2, 2, "raw bits of an IEEE half"),
    "bf16": ("uint16_t", 2, 2, "raw bits of a bfloat16"),
    "fp32": ("float", 4, 4, ""),
    "fp64": ("double", 8, 8, ""),
}
# dtype -> CUtensorMapDataType enumerator (the values kitjit.runtime.driver encodes)
_TMA_DTYPES = {d: "CU_TENSOR_MAP_DATA_TYPE_" + e for d, e in (
    ("bf16", "BFLOAT16"), ("fp16", "FLOAT16"), ("fp32", "FLOAT32"), ("fp64", "FLOAT64"),
    ("u8", "UINT8"), ("i32", "INT32"))}
_TMA_SWIZZLE = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B",
                64: "CU_TENSOR_MAP_SWIZZLE_64B", 128: "CU_TENSOR_MAP_SWIZZLE_128B"}
_L2_PROMOTION = {0: "CU_TENSOR_MAP_L2_PROMOTION_NONE", 64: "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
                 128: "CU_TENSOR_MAP_L2_PROMOTION_L2_128B",
                 256: "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"}
_ELEM_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8, "u8": 1, "i32": 4}
_PTX_SIZES = {"8": 1, "16": 2, "32": 4, "64": 8}
_C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto "
    "if inline int long register restrict return short signed sizeof static struct switch "
    "typedef union unsigned void volatile while bool true false class new delete this "
    "template typename namespace private public protected friend virtual operator".split())


class HeaderError(ValueError):
    """The kernel cannot be described for a C host (said in one line)."""


def _ptx_params(ptx: str, entry: str) -> list[tuple[int, int]]:
    """(size, alignment) of each `.param` of `.entry entry` in `ptx`."""
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\(([^)]*)\)", ptx)
    if m is None:
        if re.search(r"\.entry\s+" + re.escape(entry) + r"\s*(\{|$)", ptx, re.M):
            return []
        raise HeaderError(f"the PTX has no entry '{entry}'")
    out = []
    for decl in filter(None, (d.strip() for d in m.group(1).split(","))):
        d = re.match(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.[a-z]+?(8|16|32|64)\b.*?"
                     r"(?:\[(\d+)\])?$", decl)
        if d is None:
            raise HeaderError(f"cannot read the PTX parameter '{decl}'")
        elem = _PTX_SIZES[d.group(2)]
        size = elem * int(d.group(3) or 1)
        out.append((size, int(d.group(1) or elem)))
    return out


def _c_name(name: str, used: set[str]) -> str:
    n = name + "_" if name in _C_KEYWORDS or name.startswith("kitjit_") else name
    while n in used:
        n += "_"
    used.add(n)
    return n


def launch_description(ck: Any, cubin_file: str | None = None) -> dict[str, Any]:
    """The JSON sidecar of a CompiledKernel `ck` (from `kit.compile_aot`): every fact a host
    needs to load and launch it, parameter by parameter."""
    meta = ck.metadata
    name = str(meta["name"])
    kinds = list(meta["arg_kinds"])
    sig = meta.get("signature") or {}
    names = list(sig) if len(sig) == len(kinds) else [f"arg{i}" for i in range(len(kinds))]
    params: list[dict[str, Any]] = []
    used: set[str] = set()
    for i, (pname, kind) in enumerate(zip(names, kinds)):
        if kind == "const":
            continue
        if kind not in _C_TYPES:
            raise HeaderError(f"parameter '{pname}' has type {kind!r}, which has no C type yet")
        ctype, size, align, note = _C_TYPES[kind]
        p: dict[str, Any] = {"name": pname, "c_name": _c_name(pname, used),
                             "kind": "pointer" if kind == "ptr" else "scalar",
                             "type": sig.get(pname, kind), "c_type": ctype, "size": size,
                             "align": align, "source_index": i}
        if note:
            p["note"] = note
        params.append(p)
    if meta.get("scratch"):
        raise HeaderError("the kernel builds tensor descriptors on the device "
                          "(kit.make_tensor_descriptor on sm_90a), which need a global "
                          "scratch parameter the header cannot describe yet")
    for t in meta.get("tma", []):
        src = names[t["param"]]
        dtype = t["dtype"]
        if dtype not in _TMA_DTYPES or t["swizzle"] not in _TMA_SWIZZLE:
            raise HeaderError(f"TMA descriptor of '{src}' has dtype {dtype} / swizzle "
                              f"{t['swizzle']}, which the header cannot encode yet")
        batched = bool(t.get("batched"))
        rows, cols = t["box"]
        e = _ELEM_BYTES[dtype]
        params.append({
            "name": f"{src}_desc", "c_name": _c_name(f"{src}_desc", used),
            "kind": "tma_descriptor", "c_type": "CUtensorMap", "size": 128, "align": 64,
            "by_value": True, "for_param": src, "dtype": dtype,
            "box": [rows, cols], "swizzle": t["swizzle"], "batched": batched,
            # the cuTensorMapEncodeTiled arguments kitjit's launcher uses for a 2-d
            # row-major tensor of `rows x cols` elements, `row_stride` elements apart; a
            # batched one (kit.tma_load with (batch, row, col)) is `batch` such tensors,
            # `batch_stride` elements apart, and its box one entry deep (rows past an
            # entry's end read zeros)
            "encode": {"data_type": _TMA_DTYPES[dtype], "rank": 3 if batched else 2,
                       "global_dim": ["cols", "rows"] + (["batch"] if batched else []),
                       "global_strides": [f"row_stride * {e}"] +
                       ([f"batch_stride * {e}"] if batched else []),
                       "box_dim": [cols, rows] + ([1] if batched else []),
                       "element_strides": [1, 1] + ([1] if batched else []),
                       "interleave": "CU_TENSOR_MAP_INTERLEAVE_NONE",
                       "swizzle": _TMA_SWIZZLE[t["swizzle"]],
                       "l2_promotion": _L2_PROMOTION[t.get("l2", 256)],
                       "oob_fill": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"},
            "requires": "tensor 16-byte aligned, contiguous rows, row stride a multiple of "
                        "16 bytes" + (", batch stride a multiple of 16 bytes" if batched
                                      else "")})
    try:  # a cache hit reads its stages lazily: ask, don't test `in`
        ptx = ck.asm["ptx"]
    except KeyError:
        ptx = None
    declared = _ptx_params(ptx, name) if isinstance(ptx, str) else None
    if declared is not None:
        if len(declared) != len(params):
            raise HeaderError(f"the PTX entry of {name} declares {len(declared)} parameters, "
                              f"kitjit's metadata {len(params)}")
        for p, (size, align) in zip(params, declared):
            if p["size"] != size:
                raise HeaderError(f"parameter '{p['name']}': the PTX declares {size} bytes, "
                                  f"kitjit's metadata {p['size']}")
            p["align"] = max(p["align"], align)
    offset = 0
    for p in params:  # the packed layout (CU_LAUNCH_PARAM_BUFFER_POINTER), C struct rules
        offset = -(-offset // p["align"]) * p["align"]
        p["offset"] = offset
        offset += p["size"]
    for i, p in enumerate(params):
        p["index"] = i
    cubin = bytes(ck.asm["cubin"])
    shared = int(meta.get("shared", 0))
    desc: dict[str, Any] = {
        "format": FORMAT,
        "kernel": name,
        "entry": name,
        "arch": meta.get("arch"),
        "binary": "ptx" if meta.get("ptx_target") else "cubin",
        "cubin_file": cubin_file,
        "cubin_bytes": len(cubin),
        "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
        "num_warps": int(meta["num_warps"]),
        "block": [32 * int(meta["num_warps"]), 1, 1],
        "grid": "chosen by the caller (kitjit's grid: programs along x, y, z)",
        "dynamic_shared_bytes": shared,
        "needs_shared_opt_in": shared > SHARED_OPT_IN,
        "cluster": None,
        "params": params,
        "param_buffer_bytes": offset,
        "signature": dict(sig),
        "constexprs": dict(meta.get("constexprs") or {}),
        "registers": meta.get("registers"),
        "spills": meta.get("spills"),
        "kitjit_version": (meta.get("versions") or {}).get("kitjit"),
    }
    return desc


def _ident(text: str) -> str:
    return re.sub(r"\W", "_", text)


def c_header(desc: dict[str, Any], cubin: bytes, prefix: str | None = None) -> str:
    """A self-contained C99/C++ header: the cubin as a byte array, a loader and a launch
    helper over the CUDA driver API (include <cuda.h> first, link -lcuda)."""
    pre = prefix or f"kitjit_{_ident(desc['kernel'])}"
    guard = pre.upper() + "_H"
    threads = desc["block"][0]
    shared = desc["dynamic_shared_bytes"]
    params = desc["params"]
    out = [f"/* {desc['kernel']}: generated by kitjit {desc.get('kitjit_version') or ''} "
           f"(`kitjit compile --header`) for {desc['arch']}. Do not edit.",
           " *",
           f" * block {threads} threads ({desc['num_warps']} warps), {shared} bytes of dynamic "
           "shared memory, no cluster.",
           " * Parameters, in order:"]
    for p in params:
        if p["kind"] == "tma_descriptor":
            out.append(f" *   {p['c_name']}: CUtensorMap by value for '{p['for_param']}' "
                       f"({p['dtype']}, box {p['box'][0]}x{p['box'][1]}, swizzle "
                       f"{p['swizzle']}): build it with {pre}_encode_{p['c_name']}()")
        else:
            note = f" ({p['note']})" if p.get("note") else ""
            out.append(f" *   {p['c_name']}: {p['c_type']} ({p['type']}){note}")
    if desc["constexprs"]:
        out.append(" * Compiled with " + ", ".join(f"{k}={v}" for k, v in
                                                   desc["constexprs"].items()) + ".")
    out += [" */", f"#ifndef {guard}", f"#define {guard}", "",
            "#include <stddef.h>", "#include <stdint.h>", "#include <cuda.h>", "",
            "#if defined(__GNUC__) || defined(__clang__)",
            "#define KITJIT_ALIGNED8 __attribute__((aligned(8)))",
            "#else", "#define KITJIT_ALIGNED8", "#endif", ""]
    out += [f"#define {pre.upper()}_NAME \"{desc['entry']}\"",
            f"#define {pre.upper()}_THREADS {threads}",
            f"#define {pre.upper()}_SHARED_BYTES {shared}",
            f"#define {pre.upper()}_NUM_PARAMS {len(params)}", ""]
    hexes = [f"0x{b:02x}" for b in cubin]
    rows = [",".join(hexes[i:i + 16]) for i in range(0, len(hexes), 16)]
    out.append(f"static const unsigned char {pre}_cubin[{len(cubin)}] KITJIT_ALIGNED8 = {{")
    out += [f"  {r}," for r in rows[:-1]] + [f"  {rows[-1]}" if rows else ""]
    out += ["};", ""]
    out += ["/* Loads the kernel into the current context; the module lives until "
            "cuModuleUnload. */",
            f"static inline CUresult {pre}_load(CUmodule *module, CUfunction *function) {{",
            "  CUresult r;",
            f"  r = cuModuleLoadData(module, (const void *){pre}_cubin);",
            "  if (r != CUDA_SUCCESS) return r;",
            f"  r = cuModuleGetFunction(function, *module, {pre.upper()}_NAME);",
            "  if (r != CUDA_SUCCESS) return r;"]
    if desc["needs_shared_opt_in"]:
        out += ["  r = cuFuncSetAttribute(*function, "
                "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,",
                f"                         {pre.upper()}_SHARED_BYTES);",
                "  if (r != CUDA_SUCCESS) return r;"]
    out += ["  return CUDA_SUCCESS;", "}", ""]
    for p in params:
        if p["kind"] != "tma_descriptor":
            continue
        e = p["encode"]
        esize = _ELEM_BYTES[p["dtype"]]
        n = e["rank"]
        if n == 3:
            what = ["batch tensors of rows x cols elements, rows row_stride and tensors "
                    "batch_stride elements apart",
                    f" * (16-byte aligned base, row_stride * {esize} and batch_stride * "
                    f"{esize} multiples of 16; rows past a tensor's end read zeros). */"]
            extra = ["    uint64_t batch, uint64_t rows, uint64_t cols, uint64_t row_stride,",
                     "    uint64_t batch_stride) {"]
        else:
            what = ["rows x cols elements, rows row_stride elements apart",
                    f" * (16-byte aligned base, row_stride * {esize} a multiple of 16). */"]
            extra = ["    uint64_t rows, uint64_t cols, uint64_t row_stride) {"]
        box = ", ".join(str(b) for b in e["box_dim"])
        out += [f"/* The CUtensorMap of '{p['for_param']}': row-major {p['dtype']}, "
                + what[0], what[1],
                f"static inline CUresult {pre}_encode_{p['c_name']}(CUtensorMap *map, "
                "CUdeviceptr base,", *extra,
                f"  cuuint64_t dims[{n}];",
                f"  cuuint64_t strides[{n - 1}];",
                f"  cuuint32_t box[{n}] = {{{box}}};",
                f"  cuuint32_t elem[{n}] = {{{', '.join(['1'] * n)}}};",
                "  dims[0] = cols;",
                "  dims[1] = rows;",
                f"  strides[0] = row_stride * {esize};"]
        if n == 3:
            out += ["  dims[2] = batch;", f"  strides[1] = batch_stride * {esize};"]
        out += [f"  return cuTensorMapEncodeTiled(map, {e['data_type']}, {n}, (void *)base, "
                "dims, strides, box, elem,",
                f"      {e['interleave']}, {e['swizzle']},",
                f"      {e['l2_promotion']}, {e['oob_fill']});",
                "}", ""]
    args = []
    for p in params:
        if p["kind"] == "tma_descriptor":
            args.append(f"const CUtensorMap *{p['c_name']}")
        else:
            args.append(f"{p['c_type']} {p['c_name']}")
    sig = ", ".join(["CUfunction function", "CUstream stream", "unsigned int grid_x",
                     "unsigned int grid_y", "unsigned int grid_z"] + args)
    out += ["/* Launches on `stream` (0: the legacy default stream); TMA descriptors are read "
            "when the call",
            " * is made, so they may be reused or freed once it returns. */",
            f"static inline CUresult {pre}_launch({sig}) {{"]
    if params:
        refs = [f"(void *){p['c_name']}" if p["kind"] == "tma_descriptor" else
                f"(void *)&{p['c_name']}" for p in params]
        out.append(f"  void *params[{len(params)}];")
        out += [f"  params[{i}] = {r};" for i, r in enumerate(refs)]
        argv = "params"
    else:
        argv = "NULL"
    out += [f"  return cuLaunchKernel(function, grid_x, grid_y, grid_z, "
            f"{pre.upper()}_THREADS, 1, 1,",
            f"                        {pre.upper()}_SHARED_BYTES, stream, {argv}, NULL);",
            "}", "", f"#endif /* {guard} */", ""]
    return "\n".join(out)

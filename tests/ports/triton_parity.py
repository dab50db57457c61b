"""Triton 3.6's public surface against kitjit's: the script behind docs/triton_parity.md.

Two steps, so that Triton never enters kitjit's environment:

    # 1. dump Triton's names (Triton importable only here, from a --target install)
    pip install --no-deps --target /work/triton-ref-names triton-3.6.0-*.whl
    PYTHONPATH=/work/triton-ref-names python tests/ports/triton_parity.py --dump
    # 2. classify each name against kitjit and print the markdown table
    python tests/ports/triton_parity.py > docs/triton_parity.md

Step 1 writes kitjit/language/triton_surface.py (checked in: each kitjit module's
`__getattr__` reads it to say "not supported yet" for a Triton name it lacks, and
tests/test_triton_names.py checks every name). A name is "works" when kitjit has it,
"accepted, ignored" when kitjit takes it and does nothing with it (IGNORED says why), else
"missing" with the one-line error it raises.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import types
import typing

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
SURFACE = os.path.join(ROOT, "kitjit", "language", "triton_surface.py")

#: Triton modules whose names kernel files import (`import triton.x as y`, `from triton.x ...`)
MODULES = [
    "triton", "triton.language", "triton.language.core", "triton.language.standard",
    "triton.language.math", "triton.language.extra", "triton.language.extra.libdevice",
    "triton.language.extra.cuda", "triton.language.extra.cuda.libdevice", "triton.testing",
    "triton.runtime", "triton.runtime.jit", "triton.runtime.autotuner",
    "triton.runtime.driver", "triton.runtime.errors", "triton.compiler",
    "triton.compiler.errors", "triton.tools", "triton.tools.tensor_descriptor",
    "triton.knobs",
]

#: kitjit names that exist but do nothing, and why (a kernel using them still runs right)
IGNORED = {
    "must_use_result": "recorded on the function; kitjit does not check the result is used",
}

#: what a "works" name does differently from Triton's, or only partly
NOTES = {
    ("triton.knobs", "cache"): "only .dir (KITJIT_CACHE_DIR); other knobs: not supported yet",
    ("triton.knobs", "runtime"): ".interpret (KITJIT_INTERPRET); .debug reads True (kitjit "
    "always checks device_assert; setting False: not supported yet)",
    ("triton.knobs", "autotuning"): ".print (KITJIT_PRINT_AUTOTUNING); .cache reads whether "
    "the disk cache is on (setting it otherwise: not supported yet)",
    ("triton.knobs", "compilation"): ".always_compile (KITJIT_CACHE_DISABLE); "
    ".disable_line_info reads True (no line info; False: not supported yet); others: not "
    "supported yet",
    ("triton.knobs", "language"): ".default_fp_fusion reads True (kitjit always fuses; "
    "False: not supported yet)",
    ("triton.knobs", "nvidia"): ".ptxas only, read-only (KITJIT_PTXAS picks it)",
    ("triton.knobs", "NvidiaTool"): "what knobs.nvidia.ptxas reads (path, version)",
    **{(m, n): note for m in ("triton", "triton.runtime", "triton.runtime.jit")
       for n, note in {
           "TensorWrapper": "host methods work; as a kernel argument: not supported yet (a "
           "clear TypeError)",
           "reinterpret": "gives a TensorWrapper: see TensorWrapper",
           "MockTensor": "kernel.warmup(MockTensor(dtype), ...) (or a torch dtype) compiles; "
           "a launch with one raises",
           "KernelInterface": "the base of JITFunction, Autotuner, Heuristics; "
           "Autotuner/Heuristics .warmup: not supported yet"}.items()},
    ("triton.runtime.jit", "JITCallable"): "a marker base of JITFunction and "
    "ConstexprFunction (isinstance only)",
    ("triton.runtime.jit", "TRITON_MODULE"): "'kitjit.language'",
    ("triton.runtime.driver", "driver"): "DriverConfig: .active/.default are kitjit's driver; "
    "set_active(another): not supported yet",
    ("triton.runtime.jit", "driver"): "as triton.runtime.driver.driver",
    ("triton.runtime.autotuner", "driver"): "as triton.runtime.driver.driver",
    ("triton.runtime.autotuner", "KernelInterface"): "as triton.runtime.jit.KernelInterface",
    ("triton.language", "inline_asm_elementwise"): "GPU only: the interpreter raises, as "
    "Triton's does",
    ("triton.language", "map_elementwise"): "inlined over whole tiles; pack > 1 and control "
    "flow on an element: not supported yet",
    ("triton.language", "tuple"): "Python's tuple",
    **{(m, n): note for m in ("triton.language", "triton.language.core")
       for n, note in {
           "const": "a store or atomic through it is a compile error (Triton's compiler; its "
           "interpreter does not check); a pointer carried through a loop or an if is not "
           "followed; tl.pointer_type(..., const=True): not supported yet",
           "condition": "disable_licm is accepted and ignored (kitjit hoists nothing)",
           "target_info": "the compile's arch (a GPU newer than sm_90a compiles as sm_90: "
           "9.0); interpreter and host: the driver's GPU, no CUDA target without one",
           "slice": "the class (isinstance); slicing a tuple in a kernel: not supported yet",
           "void": "a dtype no tile holds: a cast to it is an error",
           "block_type": "x.type of a tile in a kernel; not a kit.dtype subclass as Triton's",
           "base_value": "isinstance(x, base_value) is True for every kernel value",
           "tensor_descriptor_base": "kit.tensor_descriptor (isinstance)"}.items()},
}


def _public(mod: types.ModuleType) -> list[str]:
    """A module's public names: its __all__, else what it defines or re-exports from Triton
    (not the stdlib/typing names it imported for itself)."""
    names = getattr(mod, "__all__", None)
    if names is not None:
        return sorted(set(names))
    out = []
    for n, v in vars(mod).items():
        if n.startswith("_"):
            continue
        if isinstance(v, types.ModuleType):
            if v.__name__.startswith(mod.__name__ + "."):  # its own submodule
                out.append(n)
            continue
        if isinstance(v, typing.TypeVar):
            continue
        owner = getattr(v, "__module__", None)
        if owner is None and not isinstance(v, (types.FunctionType, type)):
            if isinstance(v, (int, float, str, tuple)) and n.isupper():
                out.append(n)  # a Triton constant: TRITON_MAX_TENSOR_NUMEL
            continue
        if owner and owner.split(".")[0] == "triton":
            out.append(n)
    return sorted(out)


_KERNEL_SRC = '''
import triton
import triton.language as tl

@triton.jit
def kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass
'''


def dump() -> None:
    """Write Triton's surface (run with Triton importable)."""
    import triton
    import triton.language as tl

    surface = {"version": triton.__version__, "modules": {}}
    for m in MODULES:
        surface["modules"][m] = _public(importlib.import_module(m))
    surface["tensor_methods"] = sorted(n for n in dir(tl.tensor) if not n.startswith("_"))
    surface["dtype_attrs"] = sorted(n for n in dir(tl.float32) if not n.startswith("_"))
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "tri_kernel.py"), "w") as f:
            f.write(_KERNEL_SRC)
        sys.path.insert(0, d)
        kern = importlib.import_module("tri_kernel").kernel
    surface["jit_function_attrs"] = sorted(
        n for n in set(dir(kern)) | set(vars(kern)) if not n.startswith("_"))
    with open(SURFACE, "w") as f:
        f.write(_surface_module(surface))
    print(f"wrote {os.path.relpath(SURFACE)}: Triton {triton.__version__}")


def _words(names: list[str], indent: str = "    ") -> str:
    """Names as lines of at most 95 characters."""
    lines, cur = [], indent
    for n in names:
        if len(cur) + len(n) + 1 > 95:
            lines.append(cur.rstrip())
            cur = indent
        cur += n + " "
    lines.append(cur.rstrip())
    return "\n".join(lines)


def _surface_module(surface: dict) -> str:
    out = ['"""Triton ' + surface["version"] + "'s public names, per module (generated by "
           "tests/ports/triton_parity.py --dump;",
           "do not edit): what kitjit's modules compare a missing name against.\"\"\"", "",
           f"TRITON_VERSION = {surface['version']!r}", "", "MODULES = {"]
    for m, names in surface["modules"].items():
        out.append(f'    "{m}": frozenset("""\n{_words(names, "    ")}\n""".split()),')
    out.append("}")
    for key in ("tensor_methods", "dtype_attrs", "jit_function_attrs"):
        out += ["", f'{key.upper()} = frozenset("""\n{_words(surface[key], "")}\n""".split())']
    return "\n".join(out) + "\n"


def load_surface() -> dict:
    sys.path.insert(0, ROOT)
    from kitjit.language import triton_surface as ts

    return {"version": ts.TRITON_VERSION,
            "modules": {m: sorted(n) for m, n in ts.MODULES.items()},
            "tensor_methods": sorted(ts.TENSOR_METHODS),
            "dtype_attrs": sorted(ts.DTYPE_ATTRS),
            "jit_function_attrs": sorted(ts.JIT_FUNCTION_ATTRS)}


def kit_module_name(triton_module: str) -> str:
    return "kitjit" + triton_module[len("triton"):]


def classify(triton_module: str, name: str) -> tuple[str, str]:
    """(status, note) of `triton_module.name` in kitjit: works / ignored / missing."""
    kit_mod = kit_module_name(triton_module)
    try:
        mod = importlib.import_module(kit_mod)
    except ImportError as e:
        return "missing", f"ImportError: {e}"
    try:
        obj = getattr(mod, name)
    except AttributeError as e:
        return "missing", str(e)
    q = getattr(obj, "__kit_builtin__", "")
    if isinstance(q, str) and q.startswith("unsupported."):
        return "missing", obj.__doc__ or q
    if name in IGNORED:
        return "ignored", IGNORED[name]
    return "works", NOTES.get((triton_module, name), "")


def classify_tensor_method(name: str) -> tuple[str, str]:
    from kitjit.language.triton_names import tensor_method_status

    return tensor_method_status(name)


def classify_attr(obj, name: str, what: str) -> tuple[str, str]:
    try:
        getattr(obj, name)
    except AttributeError as e:
        return "missing", str(e).splitlines()[0] if str(e) else f"{what} has no {name}"
    except Exception as e:  # noqa: BLE001 -- a property that needs a GPU still exists
        return "works", f"(needs a GPU here: {type(e).__name__})"
    return "works", ""


def rows() -> dict[str, list[tuple[str, str, str]]]:
    """{section: [(name, status, note)]} for every Triton name."""
    import kitjit
    import kitjit.language as tl

    s = load_surface()
    out: dict[str, list[tuple[str, str, str]]] = {}
    for m, names in s["modules"].items():
        out[m] = [(n, *classify(m, n)) for n in names]
    out["tensor methods (x.<name>)"] = [(n, *classify_tensor_method(n))
                                        for n in s["tensor_methods"]]
    out["dtype attributes (tl.float32.<name>)"] = [
        (n, *classify_attr(tl.float32, n, "kit.float32")) for n in s["dtype_attrs"]]

    @kitjit.jit
    def kernel(x_ptr, n, BLOCK: tl.constexpr):
        pass

    out["JITFunction attributes (kernel.<name>)"] = [
        (n, *classify_attr(kernel, n, "JITFunction")) for n in s["jit_function_attrs"]]
    return out


def markdown() -> str:
    s = load_surface()
    table = rows()
    lines = [
        "# Triton parity: every public Triton name and kitjit's status",
        "",
        f"Generated by `python tests/ports/triton_parity.py` against Triton {s['version']}'s "
        "surface (kitjit/language/triton_surface.py; the script's docstring says how to "
        "refresh it). Do not edit by hand.",
        "",
        "Status: **works** (kitjit has it, Triton's semantics); **ignored** (accepted, "
        "does nothing; the note says why); **missing** (the note is the one-line error a "
        "kernel or host code gets).",
        "",
    ]
    summary = []
    for sec, rs in table.items():
        counts = {k: sum(1 for r in rs if r[1] == k) for k in ("works", "ignored", "missing")}
        summary.append(f"| `{sec}` | {len(rs)} | {counts['works']} | {counts['ignored']} | "
                       f"{counts['missing']} |")
    lines += ["| section | names | works | ignored | missing |", "|---|---|---|---|---|",
              *summary, ""]
    for sec, rs in table.items():
        lines += [f"## `{sec}`", "", "| name | status | note |", "|---|---|---|"]
        for n, st, note in rs:
            note = note.replace("|", "\\|")
            lines.append(f"| `{n}` | {st} | {note} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    if "--dump" in sys.argv:
        dump()
    else:
        print(markdown())

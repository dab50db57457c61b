"""`kitjit compile FILE.py:KERNEL`: one specialization built ahead of time (no GPU needed),
written as a cubin or any stage (.ptx/.ll/.tir), and for C/C++ hosts a header and a JSON
sidecar (kitjit/aot_header.py)."""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
from typing import Any

from kitjit.cli_common import DTYPES, CliError, _fmt_size

_TYPE_RE = re.compile(r"^\*?(?:" + "|".join(DTYPES) + r")$")


def parse_signature(text: str) -> list[str]:
    """Check ``"x:*bf16, n:i32:16"`` or ``"*bf16,*bf16,i32"`` and return the stripped items.

    Each item is ``[name:]type[:16]`` (``:16`` promises divisibility by 16, as in Triton);
    the items go to ``compile_aot`` unchanged, which matches names against the kernel.
    """
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in items):
        raise CliError(f"empty item in --signature {text!r}")
    for item in items:
        parts = [p.strip() for p in item.split(":")]
        if len(parts) > 1 and not _TYPE_RE.match(parts[0]) and parts[0].isidentifier():
            parts = parts[1:]  # a parameter name
        if len(parts) == 2 and parts[1] in ("1", "16"):
            parts = parts[:1]
        if len(parts) != 1 or not _TYPE_RE.match(parts[0]):
            raise CliError(
                f"bad --signature item {item!r} (want [name:]type[:16], e.g. *bf16, n:i32; "
                f"dtypes: {' '.join(DTYPES)})"
            )
    return items


def _parse_constexpr(item: str) -> tuple[str, Any]:
    name, sep, raw = item.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise CliError(f"bad --constexpr {item!r} (want NAME=VALUE)")
    try:
        value = ast.literal_eval(raw.strip())
    except (ValueError, SyntaxError):
        value = raw.strip()
    return name, value


_OUT_SUFFIXES = {  # -o suffix -> the asm keys that hold that stage
    ".cubin": ("cubin",),
    ".ptx": ("ptx",),
    ".ll": ("llir", "llvm", "ll"),
    ".tir": ("tir",),
}
_SIDE_SUFFIXES = (".h", ".json")  # -o: a C header (cubin inside) / a sidecar beside the cubin


def _kernel_constexprs(path: str, kernel: str) -> list[str] | None:
    """The constexpr parameters of `def kernel` in `path`, read from its AST (the file is not
    run); None when the file does not define it plainly (then compile_aot decides)."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == kernel:
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            return [a.arg for a in args if a.annotation is not None
                    and ast.unparse(a.annotation).split(".")[-1] == "constexpr"]
    return None


def cmd_compile(args: argparse.Namespace) -> int:
    path, sep, kernel = args.target.rpartition(":")
    if not sep or not path or not kernel.isidentifier():
        raise CliError(f"bad target {args.target!r} (want FILE.py:KERNEL)")
    if not os.path.isfile(path):
        raise CliError(f"no such file: {path}")
    from kitjit.toolchain import SUPPORTED_ARCHS

    if args.arch not in SUPPORTED_ARCHS:
        raise CliError(f"unsupported --arch {args.arch!r} (use one of "
                       f"{', '.join(SUPPORTED_ARCHS)})", code=2)
    out = args.output or f"{kernel}.cubin"
    suffix = os.path.splitext(out)[1]
    if suffix not in _OUT_SUFFIXES and suffix not in _SIDE_SUFFIXES:
        raise CliError(f"-o {out!r}: unknown output suffix {suffix or '(none)'!r} (use "
                       f"{', '.join([*_OUT_SUFFIXES, *_SIDE_SUFFIXES])}: the suffix picks "
                       "the stage)", code=2)
    header, sidecar = _side_outputs(args, out, suffix)
    n = args.num_warps  # what a launch accepts (JITFunction._miss)
    if not 1 <= n <= 32 or (n & (n - 1) and n % 4):
        raise CliError(f"--num-warps must be a power of two from 1 to 32, or a whole number "
                       f"of warpgroups (12, 20, ...) for kernels split into roles; not {n}")
    signature = parse_signature(args.signature)
    constexprs = dict(_parse_constexpr(c) for c in args.constexpr or [])
    known = _kernel_constexprs(path, kernel)
    unknown = sorted(set(constexprs) - set(known)) if known is not None else []
    if unknown:
        raise CliError(f"{kernel} has no constexpr {', '.join(map(repr, unknown))} (its "
                       f"constexprs: {', '.join(known) or 'none'})", code=2)
    try:
        from kitjit.jit import compile_aot
    except (ImportError, AttributeError) as e:
        raise CliError(f"ahead-of-time compilation is not available: {e}", code=2) from None
    try:
        compiled = compile_aot(path, kernel, signature, constexprs, args.num_warps, args.arch)
    except ValueError as e:  # compile_aot's word for a bad signature / constexpr / name
        if os.environ.get("KITJIT_DEBUG"):
            raise
        raise CliError(str(e).strip().splitlines()[0] if str(e).strip() else repr(e)) from None
    except Exception as e:
        # The frontend's CompileError renders file:line, the source line and a caret:
        # print it whole. Anything else falls through to main's one-line handler.
        if type(e).__name__ != "CompileError" or os.environ.get("KITJIT_DEBUG"):
            raise
        print(str(e), file=sys.stderr)
        return 1
    asm = getattr(compiled, "asm", None)
    if not isinstance(asm, dict):
        raise CliError("compile_aot returned no .asm dict")
    if suffix in _SIDE_SUFFIXES:  # -o k.h / -o k.json: the cubin goes beside the sidecar
        out = None if suffix == ".h" else os.path.splitext(out)[0] + ".cubin"
    if out is not None:
        _write_stage(asm, out, kernel, args.arch)
    if header or sidecar:
        _write_host_files(compiled, header, sidecar, out, kernel)
    return 0


def _side_outputs(args: argparse.Namespace, out: str,
                  suffix: str) -> tuple[str | None, str | None]:
    """Paths of the C header and JSON sidecar asked for (`-o k.h`, `--header [PATH]`,
    `-o k.json`, `--json-sidecar [PATH]`), each checked for its suffix and for clashes."""
    base = os.path.splitext(out)[0]
    header = sidecar = None
    if args.header is not None:
        if suffix == ".h":
            raise CliError("-o already names the header: drop --header (or -o the cubin)",
                           code=2)
        header = args.header or base + ".h"
        if os.path.splitext(header)[1] != ".h":
            raise CliError(f"--header {header!r}: a C header's name ends in .h", code=2)
    elif suffix == ".h":
        header = out
    if args.json_sidecar is not None:
        if suffix == ".json":
            raise CliError("-o already names the JSON sidecar: drop --json-sidecar", code=2)
        sidecar = args.json_sidecar or base + ".json"
        if os.path.splitext(sidecar)[1] != ".json":
            raise CliError(f"--json-sidecar {sidecar!r}: the sidecar's name ends in .json",
                           code=2)
    elif suffix == ".json":
        sidecar = out
    if (header or sidecar) and suffix in _OUT_SUFFIXES and suffix != ".cubin":
        raise CliError(f"--header and --json-sidecar describe a cubin; -o {out!r} writes "
                       f"{suffix} (use -o KERNEL.cubin, or no -o)", code=2)
    for path in (header, sidecar):
        if path is not None and os.path.abspath(path) == os.path.abspath(
                os.path.splitext(out)[0] + ".cubin") and suffix not in _SIDE_SUFFIXES:
            raise CliError(f"{path!r} would overwrite the cubin", code=2)
    return header, sidecar


def _write_host_files(compiled: Any, header: str | None, sidecar: str | None,
                      cubin_path: str | None, kernel: str) -> None:
    from kitjit.aot_header import HeaderError, c_header, launch_description

    try:
        desc = launch_description(
            compiled, os.path.basename(cubin_path) if cubin_path else None)
    except HeaderError as e:
        raise CliError(f"cannot describe {kernel} for a C host: {e}") from None
    cubin = bytes(compiled.asm["cubin"])
    if header is not None:
        with open(header, "w", encoding="utf-8") as f:
            f.write(c_header(desc, cubin))
        print(f"wrote {header} (C header: {kernel}'s cubin, load and launch helpers)")
    if sidecar is not None:
        with open(sidecar, "w", encoding="utf-8") as f:
            json.dump(desc, f, indent=2)
            f.write("\n")
        print(f"wrote {sidecar} (launch description of {kernel})")


def _write_stage(asm: Any, out: str, kernel: str, arch: str) -> None:
    keys = _OUT_SUFFIXES[os.path.splitext(out)[1]]
    blob = None
    for k in keys:          # a cache hit holds the stages lazily: ask, don't test `in`
        try:
            blob = asm[k]
            break
        except KeyError:
            continue
    if blob is None:
        raise CliError(f"compiler produced no {keys[0]} (have: {', '.join(asm)})")
    mode = "w" if isinstance(blob, str) else "wb"
    with open(out, mode) as f:
        f.write(blob)
    print(f"wrote {out} ({_fmt_size(len(blob))}, {kernel} for {arch})")



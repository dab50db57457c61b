"""The ``kitjit`` command: inspect and manage the kernel cache, compile ahead of time.

Every failure is one line on stderr and a non-zero exit code, never a traceback (set
``KITJIT_DEBUG=1`` to get the traceback back). The compiler is imported only by
``kitjit compile``, so the cache commands start fast and work without torch or a GPU.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from kitjit.cache import CacheEntry, KernelCache, parse_age, parse_size
from kitjit.cli_common import DTYPES, CliError, _fmt_size  # noqa: F401 (API)
from kitjit.cli_compile import cmd_compile, parse_signature  # noqa: F401 (API)
from kitjit.doctor import doctor_report

__all__ = ["main"]

_STAGES = {  # flag -> (title, file suffix)
    "tir": ("tile IR", ".tir"),
    "llvm": ("LLVM IR", ".ll"),
    "ptx": ("PTX", ".ptx"),
    "sass": ("SASS", ".cubin"),
}
_SORT_KEYS = ("name", "size", "created", "used", "hits")


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are one line (no usage dump) and exit with code 2; options are
    spelled out (no abbreviations: `--json` is not a prefix of `--json-sidecar`)."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# --------------------------------------------------------------------------- formatting


def _fmt_time(t: float | None) -> str:
    if not t:
        return "-"
    return _dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")


def _fmt_source(meta: dict) -> str:
    src = meta.get("source_file")
    if not src:
        return "-"
    src = str(src)
    try:
        rel = os.path.relpath(src)
        if not rel.startswith(".."):
            src = rel
    except ValueError:
        pass
    if len(src) > 40:
        src = "..." + src[-37:]
    line = meta.get("source_line")
    return f"{src}:{line}" if line is not None else src


def _fmt_spec(meta: dict) -> str:
    """Signature types, constexprs and num_warps in one short string."""
    parts = []
    sig = meta.get("signature")
    if isinstance(sig, dict):
        parts.append(",".join(str(v) for v in sig.values()))
    elif isinstance(sig, (list, tuple)):
        parts.append(",".join(str(v) for v in sig))
    elif sig:
        parts.append(str(sig))
    ce = meta.get("constexprs")
    if isinstance(ce, dict):
        parts.extend(f"{k}={v}" for k, v in ce.items())
    if meta.get("num_warps") is not None:
        parts.append(f"warps={meta['num_warps']}")
    return " ".join(parts) or "-"


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    return "\n".join(lines)


def _entry_record(e: CacheEntry) -> dict[str, Any]:
    u = e.usage()
    return {
        "key": e.key,
        "name": e.meta.get("name"),
        "path": str(e.path),
        "bytes": e.size(),
        "created": e.created,
        "last_used": u["last_used"],
        "hits": u["hits"],
        "meta": e.meta,
    }


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


# --------------------------------------------------------------------------- cache commands


def _cache(args: argparse.Namespace) -> KernelCache:
    return KernelCache(args.cache_dir)


def _find(cache: KernelCache, key: str) -> CacheEntry:
    """Entry by key prefix, or by kernel name when that is unique."""
    try:
        return cache.find(key)
    except KeyError as e:
        by_name = [x for x in cache.entries() if x.meta.get("name") == key]
        if len(by_name) == 1:
            return by_name[0]
        if len(by_name) > 1:
            raise CliError(
                f"kernel name {key!r} has {len(by_name)} entries; give a key prefix "
                "(see kitjit cache list)"
            ) from None
        raise CliError(str(e.args[0])) from None


def _tuning_records(args: argparse.Namespace, name: str | None = None,
                    exact: bool = False) -> list[dict[str, Any]]:
    """Autotuning records (kitjit.autotune) whose kernel name contains (or is) `name`."""
    from kitjit.autotune import tuning_records

    recs = tuning_records(_cache(args).root)
    if name:
        recs = [r for r in recs if (str(r.get("kernel")) == name if exact
                                    else name in str(r.get("kernel", "")))]
    return recs


def _print_tuning(recs: list[dict[str, Any]], detail: bool = False) -> None:
    from kitjit.autotune import format_tuning_records

    print(format_tuning_records(recs, detail=detail))


def cmd_list(args: argparse.Namespace) -> int:
    if args.tuning:
        recs = _tuning_records(args, args.name)
        if args.json:
            _print_json(recs)
        else:
            _print_tuning(recs)
        return 0
    entries = _cache(args).entries()
    if args.name:
        entries = [e for e in entries if args.name in str(e.meta.get("name", ""))]
    recs = [_entry_record(e) for e in entries]
    sort_field = {
        "name": lambda r: (str(r["name"] or ""), r["key"]),
        "size": lambda r: -r["bytes"],
        "created": lambda r: -r["created"],
        "used": lambda r: -r["last_used"],
        "hits": lambda r: -r["hits"],
    }[args.sort]
    recs.sort(key=sort_field)
    if args.json:
        _print_json(recs)
        return 0
    tuning = _tuning_records(args, args.name)
    if not recs:
        print(f"no cache entries in {_cache(args).root}", file=sys.stderr)
        if tuning:
            print("tuning records:")
            _print_tuning(tuning)
        return 0
    rows = []
    for r in recs:
        m = r["meta"]
        rows.append(
            [
                r["key"][:12],
                str(m.get("name", "?")),
                _fmt_source(m),
                _fmt_spec(m),
                str(m.get("arch", "-")),
                _fmt_size(r["bytes"]),
                _fmt_time(r["created"]),
                _fmt_time(r["last_used"]),
                str(r["hits"]),
            ]
        )
    header = ["KEY", "NAME", "SOURCE", "SPECIALIZATION", "ARCH", "SIZE", "CREATED", "USED", "HITS"]
    print(_table(rows, header))
    if tuning:
        print("\ntuning records:")
        _print_tuning(tuning)
    return 0


def _stage_file(entry: CacheEntry, suffix: str) -> str | None:
    names = entry.files
    preferred = "kernel" + suffix
    if preferred in names:
        return preferred
    matches = [n for n in names if n.endswith(suffix)]
    return matches[0] if matches else None


def _resources(entry: CacheEntry) -> dict[str, Any]:
    m = entry.meta
    res = {k: m[k] for k in ("registers", "spills", "shared") if k in m}
    if len(res) < 3:
        cubin = _stage_file(entry, ".cubin")
        if cubin is not None:
            from kitjit.tools import ToolError, resource_usage

            try:
                ru = resource_usage(entry.read(cubin))
            except ToolError as e:
                if not res:
                    raise CliError(str(e)) from None
            else:
                res.setdefault("registers", ru.get("registers"))
                res.setdefault("shared", ru.get("shared"))
                res.setdefault("local", ru.get("local"))
                res["source"] = "cuobjdump"
    if not res:
        raise CliError(f"entry {entry.key[:12]} records no resource usage and has no cubin")
    return res


def _show_meta(entry: CacheEntry, problem: str | None) -> None:
    m = entry.meta
    u = entry.usage()
    lines = [
        ("key", entry.key),
        ("name", m.get("name", "?")),
        ("path", str(entry.path)),
        ("status", "ok" if problem is None else f"CORRUPT ({problem})"),
        ("source", _fmt_source(m)),
        ("arch", m.get("arch", "-")),
    ]
    sig = m.get("signature")
    if isinstance(sig, dict):
        lines.append(("signature", ", ".join(f"{k}: {v}" for k, v in sig.items())))
    elif sig is not None:
        lines.append(("signature", sig))
    ce = m.get("constexprs")
    if isinstance(ce, dict) and ce:
        lines.append(("constexprs", ", ".join(f"{k}={v}" for k, v in ce.items())))
    for k in ("num_warps", "num_stages", "cluster"):
        if k in m:
            lines.append((k, m[k]))
    for k in ("registers", "spills"):
        if k in m:
            lines.append((k, m[k]))
    if "shared" in m:
        lines.append(("shared", f"{m['shared']} bytes"))
    lines += [
        ("size", _fmt_size(entry.size())),
        ("created", _fmt_time(entry.created)),
        ("last used", _fmt_time(u["last_used"])),
        ("hits", u["hits"]),
    ]
    known = {
        "key", "name", "source_file", "source_line", "arch", "signature", "constexprs",
        "num_warps", "num_stages", "cluster", "registers", "spills", "shared", "created",
        "files", "versions",
    }  # fmt: skip
    for k, v in m.items():
        if k not in known:
            lines.append((k, json.dumps(v, default=str) if isinstance(v, (dict, list)) else v))
    if isinstance(m.get("versions"), dict):
        lines.append(("versions", ", ".join(f"{k} {v}" for k, v in m["versions"].items())))
    width = max(len(k) for k, _ in lines)
    for k, v in lines:
        print(f"{k.ljust(width)}  {v}")
    files = m.get("files")
    if isinstance(files, dict):
        print("files:")
        for fname, info in files.items():
            info = info if isinstance(info, dict) else {}
            sha = str(info.get("sha256", ""))[:12]
            print(f"  {fname:<20} {_fmt_size(info.get('bytes')):>10}  sha256 {sha}")


def cmd_show(args: argparse.Namespace) -> int:
    stages = [s for s in ("tir", "llvm", "ptx", "sass") if getattr(args, s)]
    try:
        entry = _find(_cache(args), args.key)
    except CliError as e:
        tuning = _tuning_records(args, args.key, exact=True)
        if not tuning or stages or args.resources:
            raise
        print(f"kitjit: note: {e} (showing its tuning records)", file=sys.stderr)
        if args.json:  # a kernel known only by its tuning records
            _print_json({"name": args.key, "tuning": tuning})
        else:
            _print_tuning(tuning, detail=True)
        return 0
    if args.json and not stages and not args.resources:
        rec = _entry_record(entry)
        rec["problem"] = entry.verify()
        tuning = _tuning_records(args, str(entry.meta.get("name", "")), exact=True)
        if tuning:
            rec["tuning"] = tuning
        _print_json(rec)
        return 0
    if not stages and not args.resources:
        _show_meta(entry, entry.verify())
        tuning = _tuning_records(args, str(entry.meta.get("name", "")), exact=True)
        if tuning:
            print("tuning:")
            _print_tuning(tuning, detail=True)
        return 0
    many = len(stages) + bool(args.resources) > 1
    for stage in stages:
        title, suffix = _STAGES[stage]
        fname = _stage_file(entry, suffix)
        if fname is None:
            have = ", ".join(entry.files) or "none"
            raise CliError(f"entry {entry.key[:12]} has no {suffix} file (files: {have})")
        if stage == "sass":
            from kitjit.tools import ToolError, disassemble

            try:
                text = disassemble(entry.read(fname))
            except ToolError as e:
                raise CliError(str(e)) from None
        else:
            text = entry.text(fname)
        if many:
            print(f"// ---- {title} ({fname}) ----")
        print(text, end="" if text.endswith("\n") else "\n")
    if args.resources:
        res = _resources(entry)
        if args.json:
            _print_json(res)
        else:
            if many:
                print("// ---- resources ----")
            for k, v in res.items():
                unit = " bytes" if k in ("shared", "local") and v is not None else ""
                print(f"{k:<10} {v}{unit}")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    cache = _cache(args)
    s = cache.stats()
    tuning = cache.tuning_dir
    s["tuning_records"] = sum(1 for p in tuning.rglob("*.json") if p.is_file() and not
                              p.name.startswith(".")) if tuning.is_dir() else 0
    if args.json:
        _print_json(s)
        return 0
    rate = s["hit_rate"]
    print(f"dir       {s['dir']}")
    print(f"entries   {s['entries']}")
    print(f"size      {_fmt_size(s['bytes'])}")
    print(f"hits      {s['hits']}")
    print(f"misses    {s['misses']}")
    print(f"hit rate  {'-' if rate is None else f'{rate:.1%}'}")
    print(f"tuning    {s['tuning_records']} records")
    return 0


def cmd_dir(args: argparse.Namespace) -> int:
    print(_cache(args).root)
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    cache = _cache(args)
    entries = cache.entries()
    n = len(entries) if args.name is None else sum(e.meta.get("name") == args.name for e in entries)
    what = "all entries, tuning records and stats" if args.name is None else f"{n} entries"
    if not args.yes:
        if not sys.stdin.isatty():
            raise CliError(f"refusing to remove {what} from {cache.root} without --yes")
        answer = input(f"remove {what} ({n} kernels) from {cache.root}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing removed")
            return 1
    removed = cache.clear(args.name)
    print(f"removed {removed} entr{'y' if removed == 1 else 'ies'}")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    if args.max_size is None and args.older_than is None:
        raise CliError("give --max-size and/or --older-than")
    try:
        max_size = parse_size(args.max_size) if args.max_size is not None else None
        older = parse_age(args.older_than) if args.older_than is not None else None
    except ValueError as e:
        raise CliError(str(e)) from None
    cache = _cache(args)
    before = cache.stats()["bytes"]
    removed = cache.prune(max_size=max_size, older_than=older)
    after = cache.stats()["bytes"]
    if args.json:
        _print_json({"removed": removed, "freed_bytes": before - after, "bytes": after})
        return 0
    print(f"removed {len(removed)} entries, freed {_fmt_size(before - after)}")
    for k in removed:
        print(f"  {k[:12]}")
    return 0


# --------------------------------------------------------------------------- doctor


def _fmt_fact(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k} {'-' if x is None else x}" for k, x in v.items())
    if isinstance(v, list):
        return "; ".join(_fmt_fact(x) for x in v) or "none"
    return "-" if v is None or v == "" else str(v)


def cmd_doctor(args: argparse.Namespace) -> int:
    rep = doctor_report(args.cache_dir)
    if args.json:
        _print_json(rep)
        return 0
    rows = []
    for k, v in rep.items():
        if k == "gpus" and isinstance(v, list):
            v = [f"{g['index']}: {g['name']} ({g['arch']}, {g['kitjit']})" for g in v] \
                or "none visible to torch"
        elif k in ("llvmlite", "nvjitlink") and isinstance(v, dict):
            v = v["version"] or "not installed"
        elif k == "cache" and isinstance(v, dict):
            v = (f"{v['dir']} ({v['entries']} entries, {_fmt_size(v['bytes'])}, "
                 f"{'enabled' if v['enabled'] else 'disabled'})")
        elif k in ("ptxas", "cuobjdump", "nvdisasm") and isinstance(v, dict):
            v = " ".join(str(x) for x in (v.get("path") or "not found", v.get("version"),
                                          v.get("note")) if x)
        rows.append((k, _fmt_fact(v)))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k.ljust(width)}  {v}")
    return 0


# --------------------------------------------------------------------------- parser


def _version() -> str:
    try:
        from kitjit import __kitjit_version__

        return str(__kitjit_version__)
    except ImportError:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("kitjit")
        except PackageNotFoundError:
            return "unknown"




def build_parser() -> argparse.ArgumentParser:
    """The argparse tree (exposed for tests and docs)."""
    p = _Parser(prog="kitjit", description="kitjit: a Python JIT for GPU tile kernels.")
    p.add_argument("--version", action="version", version=f"kitjit {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    cache = sub.add_parser("cache", help="inspect and manage the on-disk kernel cache")
    cache.add_argument(
        "--cache-dir", metavar="DIR", help="cache root (default: $KITJIT_CACHE_DIR or "
        "~/.cache/kitjit)"
    )  # fmt: skip
    csub = cache.add_subparsers(dest="cache_command", metavar="ACTION", parser_class=_Parser)
    csub.required = True

    c = csub.add_parser("list", help="one row per cached kernel")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.add_argument("--sort", choices=_SORT_KEYS, default="name", help="sort order")
    c.add_argument("--name", metavar="SUBSTR", help="only kernels whose name contains SUBSTR")
    c.add_argument("--tuning", action="store_true",
                   help="only autotuning records (kernel, key, GPU, winner, time)")
    c.set_defaults(func=cmd_list)

    c = csub.add_parser("show", help="metadata or one compilation stage of an entry, and "
                        "its kernel's tuning records")
    c.add_argument("key", metavar="KEY", help="key prefix (from `list`) or unique kernel name")
    c.add_argument("--tir", action="store_true", help="print the tile IR")
    c.add_argument("--llvm", action="store_true", help="print the LLVM IR")
    c.add_argument("--ptx", action="store_true", help="print the PTX")
    c.add_argument("--sass", action="store_true", help="disassemble the cubin (cuobjdump)")
    c.add_argument("--resources", action="store_true", help="registers, spills, shared memory")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.set_defaults(func=cmd_show)

    c = csub.add_parser("stats", help="entries, size and hit rate")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.set_defaults(func=cmd_stats)

    c = csub.add_parser("dir", help="print the cache directory")
    c.set_defaults(func=cmd_dir)

    c = csub.add_parser("clear", help="remove entries (all, or one kernel's)")
    c.add_argument("--name", metavar="NAME", help="only the entries of kernel NAME")
    c.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    c.set_defaults(func=cmd_clear)

    c = csub.add_parser("prune", help="remove old or least recently used entries")
    c.add_argument("--max-size", metavar="SIZE", help="shrink to SIZE (e.g. 2GB, 500M)")
    c.add_argument("--older-than", metavar="AGE", help="remove entries unused for AGE (7d, 12h)")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.set_defaults(func=cmd_prune)

    c = sub.add_parser(
        "compile",
        help="compile a kernel ahead of time (no GPU needed)",
        description="Compile FILE.py:KERNEL for one specialization and write its cubin. "
                    "FILE is imported to find the kernel: its top-level code runs, as on "
                    "`import`; what sits under `if __name__ == '__main__':` does not.",
    )
    c.add_argument("target", metavar="FILE.py:KERNEL", help="source file and kernel name")
    c.add_argument(
        "--signature", required=True, metavar="SIG",
        help='argument types, "*bf16,*bf16,i32" or "x:*bf16,n:i32"',
    )  # fmt: skip
    c.add_argument("--arch", default="sm_90a", help="target architecture (default: sm_90a)")
    c.add_argument(
        "--constexpr", action="append", metavar="NAME=VALUE", help="a constexpr (repeatable)"
    )
    c.add_argument("--num-warps", type=int, default=4, metavar="N",
                   help="warps per program (4); 12, 20, ... for kernels split into "
                        "warpgroup roles")
    c.add_argument(
        "-o", "--output", metavar="OUT",
        help="output file; .cubin/.ptx/.ll/.tir picks the stage (default: KERNEL.cubin); "
             ".h writes a C header holding the cubin, .json the launch description "
             "beside OUT's .cubin",
    )  # fmt: skip
    c.add_argument("--header", nargs="?", const="", metavar="PATH",
                   help="also write a C header: the cubin as a byte array, load and launch "
                        "helpers over the CUDA driver API (default PATH: OUT with .h)")
    c.add_argument("--json-sidecar", nargs="?", const="", metavar="PATH",
                   help="also write the launch description as JSON: entry, parameter "
                        "layout, TMA descriptors, block, shared memory, arch (default PATH: "
                        "OUT with .json)")
    c.set_defaults(func=cmd_compile)

    c = sub.add_parser("doctor", aliases=["env"],
                       help="driver, GPU, arch, torch, llvmlite, nvJitLink, ptxas, cache",
                       description="Print what decides how kitjit compiles and runs here.")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.add_argument("--cache-dir", metavar="DIR", help="cache root to describe")
    c.set_defaults(func=cmd_doctor)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kitjit`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, usage errors
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    try:
        return int(args.func(args) or 0)
    except CliError as e:
        print(f"kitjit: error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print("kitjit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `kitjit cache show --sass KEY | head`
        try:
            sys.stdout = open(os.devnull, "w")  # silence the flush at exit
        except OSError:
            pass
        return 0
    except Exception as e:  # a bug or a compile error: one line unless debugging
        if os.environ.get("KITJIT_DEBUG"):
            raise
        msg = str(e).strip().splitlines()
        first = msg[0] if msg else ""
        print(
            f"kitjit: error: {type(e).__name__}: {first} (KITJIT_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())


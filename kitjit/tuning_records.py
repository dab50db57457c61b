"""Tuning records on disk: one JSON file per (kernel source, key, GPU, kitjit version), each
config's median milliseconds (or "failed: reason"); read by the autotuner on its first launch
with a key and listed by `kitjit cache list`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import time
import uuid
from typing import TYPE_CHECKING, Any

from . import __kitjit_version__

if TYPE_CHECKING:
    from .autotune import Autotuner, Config, Target
    from .jit import JITFunction

RECORD_VERSION = 1


# --------------------------------------------------------------------------- records
def safe_name(name: str) -> str:
    s = "".join(ch if ch.isalnum() or ch in "_.-" else "_" for ch in name)[:100]
    return s or "kernel"


def record_path(tuning_dir: pathlib.Path, fn: JITFunction, keyrec: dict[str, Any],
                 target: Target) -> pathlib.Path:
    """One file per (kernel source, key, GPU, kitjit version); the config list is *not* part
    of it, so adding a config keeps the others' timings."""
    ident = {"kitjit": __kitjit_version__, "dep_hash": fn.dep_hash, "key": keyrec["key"],
             "dtypes": keyrec["dtypes"], "gpu": target.name, "arch": target.arch}
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32]
    return tuning_dir / safe_name(fn.__name__) / f"{digest}.json"


def read_record(path: pathlib.Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            rec = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("version") != RECORD_VERSION:
        return None
    t = rec.get("timings")
    if not isinstance(t, dict):
        return None
    rec["timings"] = {k: (float(v) if isinstance(v, (int, float)) else v) for k, v in t.items()
                      if isinstance(k, str) and (isinstance(v, (int, float))
                                                 and not isinstance(v, bool)
                                                 or isinstance(v, str) and v.startswith("failed"))}
    return rec


def timings_on_disk(path: pathlib.Path | None, configs: list[Config]
                    ) -> tuple[dict[str, float | str], set[str], list[Config]]:
    """(timings on disk, configs they cover, configs still to time) for a record path."""
    stored = read_record(path) if path is not None else None
    timings: dict[str, float | str] = dict(stored["timings"]) if stored else {}
    return (timings, {str(c) for c in configs if str(c) in timings},
            [c for c in configs if str(c) not in timings])


def record_lock(path: pathlib.Path | None, name: str) -> Any:
    """The inter-process lock of a tuning record (`.<digest>.lock` beside it, see
    kitjit.cache_lock): processes tuning one key at once time it once. None kept: no lock."""
    if path is None:
        return contextlib.nullcontext()
    from .cache_lock import KeyLock

    return KeyLock(path.with_name(f".{path.stem}.lock"), f"autotuning {name}")


def write_record(path: pathlib.Path, tuner: Autotuner, keyrec: dict[str, Any], target: Target,
                  new: dict[str, float | str], configs: list[Config]) -> None:
    """Merge `new` into the record (re-read first: another process may have added to it) and
    publish it with one os.replace, so readers never see a torn file."""
    rec = read_record(path) or {}
    timings = dict(rec.get("timings", {}))
    timings.update(new)
    ok = [(timings[str(c)], str(c)) for c in configs if isinstance(timings.get(str(c)), float)]
    fn = tuner.fn
    parsed = fn.parsed
    rec = {
        "version": RECORD_VERSION,
        "kernel": fn.__name__,
        "source": f"{parsed.file}:{parsed.first_line}",
        "dep_hash": fn.dep_hash,
        "kitjit": __kitjit_version__,
        "gpu": target.name,
        "arch": target.arch,
        "key": keyrec["key"],
        "dtypes": keyrec["dtypes"],
        "timings": timings,
        "winner": min(ok)[1] if ok else None,
        "winner_ms": min(ok)[0] if ok else None,
        "configs": [str(c) for c in configs],
        "bench": ({"method": "custom do_bench"} if tuner.do_bench is not None else
                  {"method": "cuda events, L2 flushed, median", "warmup_ms": tuner.warmup,
                   "rep_ms": tuner.rep}),
        "updated": time.time(),
    }
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(rec, f, indent=1)
        os.replace(tmp, path)
    except OSError as e:
        import warnings

        from .cache import KitCacheWarning

        warnings.warn(f"kitjit: cannot write the tuning record {path} ({e}); the result is kept "
                      "in memory only", KitCacheWarning, stacklevel=2)
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass


def tuning_records(root: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """Every tuning record under the cache root (default: the kernel cache's), each with its
    `path`, sorted by kernel and key; unreadable files are skipped."""
    from .cache import KernelCache

    tdir = KernelCache(root).tuning_dir
    out = []
    if not tdir.is_dir():
        return out
    for p in sorted(tdir.rglob("*.json")):
        rec = read_record(p)
        if rec is not None:
            rec["path"] = str(p)
            out.append(rec)
    out.sort(key=lambda r: (str(r.get("kernel")), fmt_key(r.get("key"), r.get("dtypes"))))
    return out


def format_tuning_records(records: list[dict[str, Any]], detail: bool = False) -> str:
    """A table of tuning records (kernel, key, GPU, winner, its time, configs timed); with
    `detail`, every config's time under each record."""
    if not records:
        return "no tuning records"
    rows = []
    for r in records:
        t = r.get("timings", {})
        n_ok = sum(isinstance(v, float) for v in t.values())
        ms = r.get("winner_ms")
        rows.append([str(r.get("kernel", "?")), fmt_key(r.get("key"), r.get("dtypes")),
                     str(r.get("gpu", "?")), str(r.get("winner") or "-"),
                     f"{ms:.4f}" if isinstance(ms, (int, float)) else "-",
                     f"{n_ok}/{len(t)}"])
    if not detail:
        return table(rows, ["KERNEL", "KEY", "GPU", "WINNER", "MS", "TIMED"])
    blocks = []
    for r, row in zip(records, rows):
        lines = [f"{row[0]} [{row[1]}] on {row[2]} ({r.get('arch', '?')})",
                 f"  winner {row[3]} ({row[4]} ms)  record {r.get('path', '')}"]
        t = r.get("timings", {})
        order = sorted(t, key=lambda s: (not isinstance(t[s], float),
                                         t[s] if isinstance(t[s], float) else 0.0, s))
        cfg_rows = [["*" if s == r.get("winner") else "", s,
                     f"{t[s]:.4f}" if isinstance(t[s], float) else str(t[s])] for s in order]
        lines.append(table(cfg_rows, ["", "config", "ms"], indent="  "))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def fmt_key(key: Any, dtypes: Any) -> str:
    parts = [f"{k}={v}" for k, v in (key or {}).items()]
    groups: dict[str, list[str]] = {}
    for name, dt in (dtypes or {}).items():
        groups.setdefault(str(dt), []).append(name)
    parts += [f"{','.join(names)}: {dt}" for dt, names in groups.items()]
    return "; ".join(parts) or "-"


def table(rows: list[list[str]], header: list[str], indent: str = "") -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
                     for r in [header, *rows])

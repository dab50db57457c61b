"""What kitjit may delete from its cache, and nothing else.

A cache command (clear, prune, a corrupt entry's removal) removes only what kitjit itself
wrote, inside the cache: an entry folder holding nothing but what `put` writes, tuning
records and stats by their format, never through a symlink and never outside the root,
even when KITJIT_CACHE_DIR points at a folder that holds other files.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import uuid
from typing import Any

from .cache_lock import KERNEL_LOCK_RE, TUNING_LOCK_RE, remove_stale_lock

META = "meta.json"
USAGE = "usage.json"
STATS = "stats.json"
RESERVED = {META, USAGE}
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")
TRASH_PREFIX = ".trash-"
_USAGE_TMP = re.compile(r"^usage\.json\.\d+\.[0-9a-f]{8}\.tmp$")


def read_json(path: pathlib.Path) -> Any:
    with open(path, "rb") as f:
        return json.loads(f.read())


def inside(path: pathlib.Path, root: pathlib.Path) -> bool:
    """Whether `path` lies under `root` with no symlink on the way (neither `path` nor any
    folder between it and `root`): what kitjit may delete never leads out of the cache."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        return False
    p = root
    for part in rel.parts:
        p = p / part
        if p.is_symlink():
            return False
    try:
        return path.resolve().is_relative_to(root.resolve())
    except OSError:
        return False


def is_entry_dir(path: pathlib.Path, need_meta: bool = True) -> bool:
    """Whether `path` holds what `put` writes and nothing else: regular files only (meta.json
    among them), named like stage files, usage.json or its temp files. A folder that holds
    anything more is not kitjit's and is never deleted."""
    try:
        if path.is_symlink() or not path.is_dir():
            return False
        names = []
        with os.scandir(path) as it:
            for e in it:
                if not e.is_file(follow_symlinks=False):
                    return False
                names.append(e.name)
    except OSError:
        return False
    return (META in names or not need_meta) and all(
        n in RESERVED or NAME_RE.match(n) or _USAGE_TMP.match(n) for n in names)


def remove_entry_dir(path: pathlib.Path, root: pathlib.Path | None = None,
            need_meta: bool = True) -> bool:
    """Remove an entry directory so that no reader sees it half-deleted: rename aside, then
    delete. Refuses (silently) anything outside `root` (default: the path's grandparent, the
    cache root), behind a symlink, or holding files `put` does not write."""
    root = path.parent.parent if root is None else root
    if not inside(path, root) or not is_entry_dir(path, need_meta):
        return False
    trash = root / f"{TRASH_PREFIX}{path.name[:16]}-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return False
    except OSError:
        trash = path  # cannot move it aside: delete in place
    shutil.rmtree(trash, ignore_errors=True)
    return True



def clear_tuning(root: pathlib.Path, tdir: pathlib.Path) -> None:
    """Delete the tuning records (JSON objects with a version and timings, and their
    temp files) and the folders they leave empty; anything else stays."""
    if not inside(tdir, root) or not tdir.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(tdir, topdown=False):
        d = pathlib.Path(dirpath)
        for fname in filenames:
            f = d / fname
            if TUNING_LOCK_RE.match(fname):
                remove_stale_lock(f)
                continue
            if f.is_symlink() or not (fname.endswith(".json") or fname.endswith(".tmp")):
                continue
            if fname.endswith(".json"):
                try:
                    rec = read_json(f)
                except (OSError, ValueError):
                    continue
                if not (isinstance(rec, dict) and "version" in rec and "timings" in rec):
                    continue
            elif not fname.startswith("."):
                continue
            try:
                f.unlink()
            except OSError:
                pass
        for sub in dirnames:
            if not (d / sub).is_symlink():
                try:
                    (d / sub).rmdir()
                except OSError:
                    pass
    try:
        tdir.rmdir()
    except OSError:
        pass


def remove_kernel_locks(root: pathlib.Path) -> int:
    """Delete the compile locks (`<shard>/.<key>.lock`, empty files) that no process holds:
    left by a process that died while compiling (a live holder's lock stays). Returns how
    many."""
    removed = 0
    try:
        shards = [s for s in os.scandir(root) if len(s.name) == 2 and not s.name.startswith(".")
                  and s.is_dir(follow_symlinks=False)]
    except OSError:
        return 0
    for shard in shards:
        try:
            with os.scandir(shard.path) as it:
                names = [e.name for e in it]
        except OSError:
            continue
        for n in names:
            m = KERNEL_LOCK_RE.match(n)
            if m and m.group(1)[:2] == shard.name and \
                    remove_stale_lock(pathlib.Path(shard.path) / n):
                removed += 1
    return removed


def remove_stats(root: pathlib.Path) -> None:
    """Delete stats.json and its lock when they are what `_bump` writes."""
    st = root / STATS
    try:
        obj = read_json(st) if not st.is_symlink() else None
    except (OSError, ValueError):
        obj = None
    if isinstance(obj, dict) and set(obj) <= {"hits", "misses"}:
        try:
            st.unlink()
        except OSError:
            pass
    lock = root / (STATS + ".lock")
    try:
        if not lock.is_symlink() and lock.is_file() and lock.stat().st_size == 0:
            lock.unlink()
    except OSError:
        pass

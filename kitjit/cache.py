"""On-disk cache of compiled kernels.

One directory per specialization key, ``<root>/<key[:2]>/<key>/``, holding the stages the
JIT produced (``kernel.tir``, ``kernel.ll``, ``kernel.ptx``, ``kernel.cubin``, ...) and a
``meta.json`` that records the sha256 of every file. Entries are written to a temporary
directory inside the root and published with one ``os.rename``, so concurrent processes
(torch.distributed ranks) either see a whole entry or none; on a miss, ``lock(key)`` (an
flock on ``<root>/<key[:2]>/.<key>.lock``, kitjit.cache_lock) makes one of them compile while
the others wait and load its entry. ``get`` checks every hash before
handing an entry out: a corrupt entry is removed with one warning and the caller recompiles.

The cache never raises on an unusable disk: the JIT keeps its own in-memory cache, so a
read-only or missing home directory costs a warning, not a crash.

Stdlib only on purpose: the CLI and the hot path import it without torch or the compiler.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pathlib
import re
import shutil
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

from .cache_lock import KeyLock
from .cache_removal import (
    META,
    NAME_RE,
    RESERVED,
    STATS,
    TRASH_PREFIX,
    USAGE,
    clear_tuning,
    read_json,
    remove_entry_dir,
    remove_kernel_locks,
    remove_stats,
)

try:  # POSIX only; stats are best-effort elsewhere.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "CacheEntry",
    "KernelCache",
    "KitCacheWarning",
    "cache_dir",
    "disk_cache_enabled",
    "parse_age",
    "parse_size",
]

TUNING = "tuning"
_KEY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{1,199}$")
_TMP_PREFIX = ".tmp-"
_STALE_TMP_S = 3600.0  # a temp dir this old belongs to a process that died mid-put

_TRUE = {"1", "true", "yes", "on"}
# The standard cache-directory tag (https://bford.info/cachedir/): backup tools skip the
# directory, and it tells kitjit the root is a cache it made.
MARKER = "CACHEDIR.TAG"
_MARKER_TEXT = ("Signature: 8a477f597d28d172789f06886806bc55\n"
                "# This directory is kitjit's kernel cache (kitjit cache dir / clear).\n")


class KitCacheWarning(UserWarning):
    """Something is wrong with the on-disk cache; kitjit carries on without it."""


def cache_dir() -> pathlib.Path:
    """The cache root: ``$KITJIT_CACHE_DIR`` or ``~/.cache/kitjit``."""
    env = os.environ.get("KITJIT_CACHE_DIR")
    if env:
        return pathlib.Path(env).expanduser()
    return pathlib.Path.home() / ".cache" / "kitjit"


def disk_cache_enabled() -> bool:
    """False when ``KITJIT_CACHE_DISABLE`` is set to 1/true/yes/on."""
    return os.environ.get("KITJIT_CACHE_DISABLE", "").strip().lower() not in _TRUE


# --------------------------------------------------------------------------- parsing

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
    "tib": 1 << 40,
}
_AGE_UNITS = {
    "": 1.0,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
}
_NUM_UNIT_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Bytes from "2GB", "500M", "64KiB" or "1048576" (K/M/G/T are powers of 1024)."""
    if isinstance(text, int):
        return text
    m = _NUM_UNIT_RE.match(str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _SIZE_UNITS:
        raise ValueError(f"invalid size {text!r} (expected e.g. 500M, 2GB, 1048576)")
    return int(float(m.group(1)) * _SIZE_UNITS[unit])


def parse_age(text: str | float) -> float:
    """Seconds from "7d", "12h", "30m", "90s", "2w" or plain seconds."""
    if isinstance(text, (int, float)):
        return float(text)
    m = _NUM_UNIT_RE.match(str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _AGE_UNITS:
        raise ValueError(f"invalid age {text!r} (expected e.g. 7d, 12h, 30m, 90s, 3600)")
    return float(m.group(1)) * _AGE_UNITS[unit]


# --------------------------------------------------------------------------- helpers

logger = logging.getLogger("kitjit.cache")
_warned_roots: set[str] = set()
_counted: set[tuple[str, str]] = set()
_bad_env: set[str] = set()
_lock = threading.Lock()


def _warn(msg: str) -> None:
    warnings.warn(msg, KitCacheWarning, stacklevel=3)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()




def _write_json_atomic(path: pathlib.Path, obj: Any) -> None:
    """Write JSON next to ``path`` and rename it in, so readers never see a torn file."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _dir_size(path: pathlib.Path) -> int:
    total = 0
    try:
        with os.scandir(path) as it:
            for e in it:
                try:
                    if e.is_file(follow_symlinks=False):
                        total += e.stat(follow_symlinks=False).st_size
                    elif e.is_dir(follow_symlinks=False):
                        total += _dir_size(pathlib.Path(e.path))
                except OSError:
                    pass
    except OSError:
        pass
    return total


def _check_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise ValueError(f"invalid cache key {key!r} (want 2-200 chars of [A-Za-z0-9_.-])")
    return key


# --------------------------------------------------------------------------- entries


class CacheEntry:
    """One published cache entry: a key, its directory and its metadata.

    Files read by ``KernelCache.get`` are kept in memory, so what was verified is exactly
    what the caller loads (no second read that could race with a writer or pruner).
    """

    def __init__(
        self,
        key: str,
        path: pathlib.Path,
        meta: dict,
        data: dict[str, bytes] | None = None,
        persisted: bool = True,
    ):
        self.key = key
        self.path = pathlib.Path(path)
        self.meta = meta
        self._data: dict[str, bytes] = dict(data or {})
        #: False when the disk cache was off or unwritable and this entry lives in memory.
        self.persisted = persisted

    def __repr__(self) -> str:
        return f"CacheEntry({self.key[:12]!r}, name={self.name!r}, path={str(self.path)!r})"

    @property
    def name(self) -> str:
        """Kernel name from the metadata ("?" when unknown)."""
        return str(self.meta.get("name", "?"))

    @property
    def files(self) -> list[str]:
        """Names of the stage files this entry holds (not meta.json / usage.json)."""
        listed = self.meta.get("files")
        if isinstance(listed, dict):
            return list(listed)
        try:
            return sorted(p.name for p in self.path.iterdir() if p.name not in RESERVED)
        except OSError:
            return sorted(self._data)

    def has(self, name: str) -> bool:
        """Whether the entry has a file called ``name``."""
        return name in self.files

    def read(self, name: str) -> bytes:
        """The bytes of one stage file (``kernel.cubin``, ...)."""
        if name in self._data:
            return self._data[name]
        if not NAME_RE.match(name):
            raise KeyError(f"invalid file name {name!r}")
        try:
            return (self.path / name).read_bytes()
        except FileNotFoundError:
            raise KeyError(f"cache entry {self.key[:12]} has no file {name!r}") from None

    def text(self, name: str) -> str:
        """A text stage (``kernel.ptx``, ``kernel.ll``, ``kernel.tir``) as str."""
        return self.read(name).decode("utf-8", errors="replace")

    def size(self) -> int:
        """Bytes the entry takes on disk (all files, metadata included)."""
        if not self.persisted:
            return sum(len(v) for v in self._data.values())
        return _dir_size(self.path)

    @property
    def created(self) -> float:
        """Creation time (epoch seconds)."""
        c = self.meta.get("created")
        if isinstance(c, (int, float)):
            return float(c)
        try:
            return self.path.stat().st_mtime
        except OSError:
            return 0.0

    def usage(self) -> dict:
        """``{"last_used": epoch, "hits": n}`` from usage.json (created / 0 when absent)."""
        try:
            u = read_json(self.path / USAGE)
            if not isinstance(u, dict):
                raise ValueError
        except (OSError, ValueError):
            u = {}
        last = u.get("last_used")
        hits = u.get("hits")
        return {
            "last_used": float(last) if isinstance(last, (int, float)) else self.created,
            "hits": int(hits) if isinstance(hits, int) else 0,
        }

    @property
    def last_used(self) -> float:
        """Last time ``get`` returned this entry (its creation time if never)."""
        return self.usage()["last_used"]

    @property
    def hits(self) -> int:
        """How many times ``get`` returned this entry."""
        return self.usage()["hits"]

    def verify(self, keep: bool = False) -> str | None:
        """Check every listed file against its sha256; return the problem or None if sound.

        With ``keep`` the verified bytes stay in memory for ``read``.
        """
        files = self.meta.get("files")
        if not isinstance(files, dict) or not files:
            return "meta.json lists no files"
        if self.meta.get("key") != self.key:
            return "meta.json belongs to another key"
        data: dict[str, bytes] = {}
        for fname, info in files.items():
            if not isinstance(info, dict) or not isinstance(fname, str):
                return f"bad file record for {fname!r}"
            if not NAME_RE.match(fname) or fname in RESERVED:
                return f"bad file name {fname!r}"
            try:
                blob = (self.path / fname).read_bytes()
            except FileNotFoundError:
                return f"{fname} is missing"
            except OSError as e:
                return f"{fname} unreadable ({e.strerror})"
            if len(blob) != info.get("bytes"):
                return f"{fname} has {len(blob)} bytes, expected {info.get('bytes')}"
            if _sha256(blob) != info.get("sha256"):
                return f"{fname} fails its sha256 check"
            data[fname] = blob
        if keep:
            self._data = data
        return None


# --------------------------------------------------------------------------- the cache


class KernelCache:
    """The on-disk kernel cache under ``root`` (default: :func:`cache_dir`)."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = pathlib.Path(root).expanduser() if root is not None else cache_dir()

    def __repr__(self) -> str:
        return f"KernelCache({str(self.root)!r})"

    @property
    def tuning_dir(self) -> pathlib.Path:
        """Where autotuning records live; ``clear(name)`` and ``prune`` leave it alone."""
        return self.root / TUNING

    def _path(self, key: str) -> pathlib.Path:
        return self.root / key[:2] / key

    def _warn_unusable(self, err: BaseException) -> None:
        """Warn once per process and root that the disk cache is not usable."""
        root = str(self.root)
        with _lock:
            if root in _warned_roots:
                return
            _warned_roots.add(root)
        reason = getattr(err, "strerror", None) or str(err)
        _warn(
            f"kitjit: cache directory {root} is not writable ({reason}); compiled kernels "
            "are kept in memory only (set KITJIT_CACHE_DIR to a writable directory)"
        )

    # ------------------------------------------------------------------ read

    def _load_meta(self, key: str) -> CacheEntry:
        path = self._path(key)
        meta = read_json(path / META)
        if not isinstance(meta, dict):
            raise ValueError("meta.json is not an object")
        return CacheEntry(key, path, meta)

    def get(self, key: str, record: bool = True) -> CacheEntry | None:
        """The verified entry for ``key``, or None (absent, disabled or corrupt).

        A corrupt entry is removed with one :class:`KitCacheWarning`; the caller
        recompiles and ``put``s again. With ``record`` (the default) the lookup counts in
        the hit/miss statistics and the entry's last-used time; the CLI passes False.
        """
        _check_key(key)
        if not disk_cache_enabled():
            return None
        path = self._path(key)
        entry: CacheEntry | None = None
        problem: str | None = None
        for attempt in range(2):
            try:
                entry = self._load_meta(key)
                problem = entry.verify(keep=True)
            except FileNotFoundError:
                # Absent, or published by another process between our open() and now:
                # a directory that exists is complete (rename is atomic), so look again.
                exists = path.is_dir()  # ask once: the answer may change any moment
                if exists and attempt == 0:
                    continue
                problem = "meta.json is missing" if exists else None
            except (OSError, ValueError) as e:  # JSONDecodeError is a ValueError
                problem = f"meta.json unreadable ({e.__class__.__name__})"
            break
        if problem is not None:
            if path.is_dir():  # still there: not merely removed by someone else meanwhile
                remove_entry_dir(path, self.root, need_meta=False)  # our own key: meta may be gone
                _warn(f"kitjit: corrupt cache entry {key[:12]} ({problem}); removed, recompiling")
            entry = None
        if entry is None:
            logger.debug("miss %s in %s", key[:12], self.root)
            if record:
                self.record_miss(key)
            return None
        logger.debug("hit %s (%s) in %s", key[:12], entry.meta.get("name", "?"), self.root)
        if record:
            self._touch(entry)
            self.record_hit(key)
        return entry

    def _touch(self, entry: CacheEntry) -> None:
        """Bump last_used and hits in the entry's usage.json (best effort)."""
        try:
            u = entry.usage()
            _write_json_atomic(
                entry.path / USAGE, {"last_used": time.time(), "hits": u["hits"] + 1}
            )
        except OSError:
            pass

    def _iter_entry_dirs(self) -> Iterator[tuple[str, pathlib.Path]]:
        try:
            shards = list(os.scandir(self.root))
        except OSError:
            return
        for shard in shards:
            if len(shard.name) != 2 or shard.name.startswith(".") or \
                    not shard.is_dir(follow_symlinks=False):
                continue  # a symlinked shard leads out of the cache: never entered
            try:
                with os.scandir(shard.path) as it:
                    for d in it:
                        if d.name[:2] == shard.name and _KEY_RE.match(d.name) and \
                                d.is_dir(follow_symlinks=False):
                            yield d.name, pathlib.Path(d.path)
            except OSError:
                continue

    def entries(self) -> list[CacheEntry]:
        """Every entry on disk, unverified (an unreadable meta.json gives ``meta == {}``)."""
        out = []
        for key, path in self._iter_entry_dirs():
            try:
                entry = self._load_meta(key)
            except (OSError, ValueError):
                entry = CacheEntry(key, path, {})
            out.append(entry)
        out.sort(key=lambda e: e.key)
        return out

    def find(self, prefix: str) -> CacheEntry:
        """The one entry whose key starts with ``prefix``; KeyError if none or several."""
        prefix = prefix.strip()
        if not prefix:
            raise KeyError("empty cache key")
        matches = [e for e in self.entries() if e.key.startswith(prefix)]
        if not matches:
            raise KeyError(f"no cache entry matches {prefix!r} in {self.root}")
        if len(matches) > 1:
            shown = ", ".join(e.key[:12] for e in matches[:5])
            more = ", ..." if len(matches) > 5 else ""
            raise KeyError(
                f"key prefix {prefix!r} is ambiguous: {len(matches)} entries ({shown}{more})"
            )
        return matches[0]

    # ------------------------------------------------------------------ write

    def lock(self, key: str, what: str = "") -> KeyLock:
        """The inter-process lock of ``key`` (``<root>/<key[:2]>/.<key>.lock``), taken on a
        miss around "get again, compile, put" so that one process compiles and the others
        load its entry (kitjit.cache_lock says how it never deadlocks)."""
        _check_key(key)
        shard = self.root / key[:2]
        # a symlinked shard leads out of the cache: no lock file there (put repairs it)
        return KeyLock(shard / f".{key}.lock", what or f"compiling key {key[:12]}",
                       timeout=0 if shard.is_symlink() else None)


    def put(self, key: str, files: dict[str, bytes | str], meta: dict) -> CacheEntry:
        """Publish ``files`` and ``meta`` under ``key`` atomically and return the entry.

        ``meta`` gains ``key``, ``created`` and ``files`` (name -> sha256 and bytes). If
        another process published the key first, its entry wins and is returned. When the
        disk cache is disabled or unwritable nothing is stored (one warning per process for
        an unwritable root) and an in-memory entry (``persisted=False``) is returned.
        """
        _check_key(key)
        blobs: dict[str, bytes] = {}
        for fname, content in files.items():
            if not isinstance(fname, str) or not NAME_RE.match(fname) or fname in RESERVED:
                raise ValueError(f"invalid cache file name {fname!r}")
            blobs[fname] = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        if not blobs:
            raise ValueError("a cache entry needs at least one file")
        now = time.time()
        full_meta = dict(meta)
        full_meta["key"] = key
        full_meta["created"] = now
        full_meta["files"] = {n: {"sha256": _sha256(b), "bytes": len(b)} for n, b in blobs.items()}
        path = self._path(key)
        memory = CacheEntry(key, path, full_meta, data=blobs, persisted=False)
        if not disk_cache_enabled():
            return memory

        tmp: pathlib.Path | None = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._mark()
            tmp = pathlib.Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=self.root))
            for fname, blob in blobs.items():
                (tmp / fname).write_bytes(blob)
            (tmp / USAGE).write_text(json.dumps({"last_used": now, "hits": 0}))
            # meta.json last: its presence means the directory is complete.
            (tmp / META).write_text(json.dumps(full_meta, indent=1, default=str))
            self._shard_dir(path.parent)
            for _attempt in range(3):
                try:
                    os.rename(tmp, path)
                    tmp = None
                    break
                except OSError:
                    if not path.exists():
                        raise
                # Another process published first: keep theirs if it is sound.
                existing = self.get(key, record=False)
                if existing is not None:
                    return existing
            else:  # pragma: no cover - lost three races against corrupt writers
                return memory
        except OSError as e:
            self._warn_unusable(e)
            return memory
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

        entry = CacheEntry(key, path, full_meta, data=blobs)
        logger.debug("stored %s (%s, %d bytes) in %s", key[:12], meta.get("name", "?"),
                     sum(len(b) for b in blobs.values()), self.root)
        self._auto_prune(keep=key)
        return entry

    def _mark(self) -> None:
        """Tag the root as kitjit's cache (CACHEDIR.TAG), once."""
        tag = self.root / MARKER
        if not tag.exists() and not tag.is_symlink():
            try:
                with open(tag, "x", encoding="utf-8") as f:
                    f.write(_MARKER_TEXT)
            except OSError:
                pass

    def _shard_dir(self, shard: pathlib.Path) -> None:
        """Make the shard folder; where something that is not a folder took its name (a
        plain file, a symlink), move it aside (renamed, never deleted) with one warning, so
        the cache repairs itself instead of staying memory-only."""
        try:
            shard.mkdir(exist_ok=True)
            return
        except FileExistsError:
            pass
        if shard.is_dir() and not shard.is_symlink():
            return
        aside = self.root / f".displaced-{shard.name}-{uuid.uuid4().hex[:8]}"
        os.rename(shard, aside)
        _warn(f"kitjit: {shard} was not a cache folder; moved aside to {aside.name}")
        shard.mkdir(exist_ok=True)

    def _auto_prune(self, keep: str) -> None:
        limit = os.environ.get("KITJIT_CACHE_MAX_SIZE", "").strip()
        if not limit:
            return
        try:
            max_size = parse_size(limit)
        except ValueError as e:
            with _lock:
                if limit in _bad_env:
                    return
                _bad_env.add(limit)
            _warn(f"kitjit: ignoring KITJIT_CACHE_MAX_SIZE: {e}")
            return
        self.prune(max_size=max_size, _keep=keep)

    # ------------------------------------------------------------------ removal

    def remove(self, key: str) -> None:
        """Delete one entry (no error if it is absent)."""
        _check_key(key)
        if remove_entry_dir(self._path(key)):
            logger.debug("removed %s from %s", key[:12], self.root)

    def clear(self, name: str | None = None) -> int:
        """Remove the entries of kernel ``name``, or everything (tuning and stats too)."""
        removed = 0
        for entry in self.entries():
            if (name is None or entry.meta.get("name") == name) and \
                    remove_entry_dir(entry.path, self.root):
                removed += 1
        if name is None:
            clear_tuning(self.root, self.tuning_dir)
            remove_stats(self.root)
            remove_kernel_locks(self.root)  # stale ones only: a held lock is a live compile
            self._sweep(tmp_age=60.0)  # a younger temp dir may be a put in progress
            for shard in self.root.glob("??"):
                if shard.is_symlink():
                    continue
                try:
                    shard.rmdir()  # only succeeds when empty
                except OSError:
                    pass
        return removed

    def _sweep(self, tmp_age: float = _STALE_TMP_S) -> None:
        """Delete trash directories, and temp directories older than ``tmp_age`` seconds
        (left by processes that died in the middle of a put)."""
        now = time.time()
        try:
            it = list(os.scandir(self.root))
        except OSError:
            return
        for d in it:
            if not d.name.startswith((_TMP_PREFIX, TRASH_PREFIX)) or \
                    not d.is_dir(follow_symlinks=False):
                continue
            try:
                if d.name.startswith(TRASH_PREFIX) or d.stat().st_mtime <= now - tmp_age:
                    shutil.rmtree(d.path, ignore_errors=True)
            except OSError:
                pass

    def prune(
        self,
        max_size: int | None = None,
        older_than: float | None = None,
        *,
        _keep: str | None = None,
    ) -> list[str]:
        """Remove entries unused for ``older_than`` seconds, then least recently used ones
        until the total is at most ``max_size`` bytes. Returns removed keys, LRU first."""
        self._sweep()
        items = []
        for e in self.entries():
            items.append((e.last_used, e.key, e.size(), e))
        items.sort(key=lambda t: (t[0], t[1]))
        removed: list[str] = []
        total = sum(t[2] for t in items)
        cutoff = time.time() - older_than if older_than is not None else None
        for last_used, key, size, entry in items:
            if key == _keep:
                continue
            too_old = cutoff is not None and last_used < cutoff
            too_big = max_size is not None and total > max_size
            if (too_old or too_big) and remove_entry_dir(entry.path, self.root):
                removed.append(key)
                total -= size
        if removed:
            logger.info("pruned %d entries from %s (%s)", len(removed), self.root,
                        "unused too long" if max_size is None else "over the size limit")
        return removed

    # ------------------------------------------------------------------ statistics

    def stats(self) -> dict:
        """Entries, bytes, hits, misses and hit_rate (None before any lookup)."""
        entries = self.entries()
        s = self._read_stats()
        hits, misses = s["hits"], s["misses"]
        return {
            "dir": str(self.root),
            "entries": len(entries),
            "bytes": sum(e.size() for e in entries),
            "hits": hits,
            "misses": misses,
            "hit_rate": hits / (hits + misses) if hits + misses else None,
        }

    def _read_stats(self) -> dict:
        try:
            s = read_json(self.root / STATS)
            if not isinstance(s, dict):
                raise ValueError
        except (OSError, ValueError):
            s = {}
        return {k: int(s.get(k, 0)) if isinstance(s.get(k), int) else 0 for k in ("hits", "misses")}

    def _bump(self, field: str, key: str) -> None:
        """Add one to a counter in stats.json, at most once per key per process."""
        with _lock:
            mark = (str(self.root), key)
            if mark in _counted:
                return
            _counted.add(mark)
        if not disk_cache_enabled():
            return
        lock_path = self.root / (STATS + ".lock")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with open(lock_path, "a") as lf:
                if fcntl is not None:
                    fcntl.flock(lf, fcntl.LOCK_EX)
                s = self._read_stats()
                s[field] += 1
                _write_json_atomic(self.root / STATS, s)
        except OSError:
            pass

    def record_hit(self, key: str) -> None:
        """Count a disk-cache hit (``get`` already does; counted once per key per process)."""
        self._bump("hits", key)

    def record_miss(self, key: str) -> None:
        """Count a disk-cache miss (``get`` already does; counted once per key per process)."""
        self._bump("misses", key)

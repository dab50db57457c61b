"""Inter-process locks that make N processes (torch.distributed ranks on one machine) that
miss the same cache key compile it once, and tune an autotuning key once.

A lock is an empty file beside what it guards: ``<root>/<key[:2]>/.<key>.lock`` for a
kernel, ``<root>/tuning/<kernel>/.<digest>.lock`` for a tuning record. The first process
takes it (``fcntl.flock``), checks the cache again, compiles and publishes; the others block,
then find the entry and load it. The holder deletes the file before releasing it, so a cache
holds lock files only while someone compiles (or after a process died holding one: the kernel
released its lock, and the file, now stale, blocks nobody; ``kitjit cache clear`` removes it).
A waiter that took the lock of a file deleted meanwhile retries on the file now at the path,
so at most one process holds the lock of a path at any time.

Never a deadlock: a waiter gives up after ``KITJIT_COMPILE_LOCK_TIMEOUT`` seconds (default
600; 0 turns the locks off) and compiles on its own, with one warning. Where the lock cannot
be taken (no ``fcntl``, as on Windows; an unwritable cache; a file system without locks)
every process compiles on its own, as without the lock: publishing stays atomic.

Stdlib only, as kitjit.cache.
"""

from __future__ import annotations

import errno
import os
import pathlib
import re
import stat
import time
import warnings

try:  # POSIX only: elsewhere no lock, each process compiles (the documented fallback)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["KeyLock", "lock_timeout", "remove_stale_lock", "KERNEL_LOCK_RE", "TUNING_LOCK_RE"]

DEFAULT_TIMEOUT_S = 600.0
#: ``.<key>.lock`` in a shard folder (the key as kitjit.cache's _KEY_RE allows it).
KERNEL_LOCK_RE = re.compile(r"^\.([A-Za-z0-9_][A-Za-z0-9_.-]{1,199})\.lock$")
#: ``.<digest>.lock`` beside a tuning record ``<digest>.json``.
TUNING_LOCK_RE = re.compile(r"^\.[0-9a-f]{32}\.lock$")

_bad_timeout: set[str] = set()


def lock_timeout() -> float:
    """Seconds a process waits for another one's compile: ``KITJIT_COMPILE_LOCK_TIMEOUT``
    (default 600; 0 or less: no lock). An unparsable value warns once and means 600."""
    text = os.environ.get("KITJIT_COMPILE_LOCK_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        return float(text)
    except ValueError:
        if text not in _bad_timeout:
            _bad_timeout.add(text)
            _warn(f"kitjit: ignoring KITJIT_COMPILE_LOCK_TIMEOUT={text!r} (want seconds); "
                  f"waiting at most {DEFAULT_TIMEOUT_S:.0f} s for another process's compile")
        return DEFAULT_TIMEOUT_S


def _warn(msg: str) -> None:
    from .cache import KitCacheWarning

    warnings.warn(msg, KitCacheWarning, stacklevel=4)


def _same_file(fd: int, path: pathlib.Path) -> bool:
    try:
        st, cur = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (st.st_ino, st.st_dev) == (cur.st_ino, cur.st_dev)


class KeyLock:
    """``with KeyLock(path, what):`` holds the inter-process lock at ``path`` (an empty file,
    created with its folder), or gives up after the timeout; ``.held`` says which. ``what``
    names the work in the timeout warning ("compiling kernel k (key 1a2b...)").

    flock locks belong to an open file, so two threads of one process that open the path
    exclude each other too; the lock is not re-entrant (kitjit never nests one key's lock)."""

    def __init__(self, path: pathlib.Path, what: str, timeout: float | None = None):
        self.path = pathlib.Path(path)
        self.what = what
        self.timeout = lock_timeout() if timeout is None else timeout
        self.fd: int | None = None
        self.held = False
        self.waited = 0.0

    def __enter__(self) -> KeyLock:
        if fcntl is None or self.timeout <= 0:
            return self
        t0 = time.monotonic()
        deadline = t0 + self.timeout
        delay = 0.005
        while True:
            fd = self._open()
            if fd is None:
                return self
            got = self._wait(fd, deadline, delay)
            if got is None:  # timed out, or the file system refuses locks
                os.close(fd)
                self.waited = time.monotonic() - t0
                if self.waited >= self.timeout:
                    _warn(f"kitjit: waited {self.waited:.0f} s for another process "
                          f"{self.what} (lock {self.path}); doing it here too (set "
                          f"KITJIT_COMPILE_LOCK_TIMEOUT to wait longer)")
                return self
            if _same_file(fd, self.path):
                self.fd, self.held = fd, True
                self.waited = time.monotonic() - t0
                return self
            os.close(fd)  # its holder deleted it on release: lock the file at the path now

    def _open(self) -> int | None:
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | \
            getattr(os, "O_CLOEXEC", 0)
        for _attempt in range(3):
            try:
                return os.open(self.path, flags, 0o644)
            except FileNotFoundError:  # the folder is new (or `cache clear` just removed it)
                try:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                except OSError:
                    return None
            except OSError:  # unwritable cache, a symlink in the way: no lock
                return None
        return None

    @staticmethod
    def _wait(fd: int, deadline: float, delay: float) -> bool | None:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES, errno.EINTR):
                    return None  # ENOLCK and friends: this file system has no locks
            now = time.monotonic()
            if now >= deadline:
                return None
            time.sleep(min(delay, deadline - now))
            delay = min(delay * 2, 0.05)

    def __exit__(self, *exc) -> bool:
        if self.fd is not None:
            try:  # delete while holding it: a waiter then sees another file and retries
                if _same_file(self.fd, self.path):
                    os.unlink(self.path)
            except OSError:
                pass
            os.close(self.fd)
            self.fd, self.held = None, False
        return False


def remove_stale_lock(path: pathlib.Path) -> bool:
    """Delete the lock file at ``path`` when no process holds it (a live compile's lock
    stays); only an empty regular file, never through a symlink. True if removed."""
    if fcntl is None:
        try:
            if not path.is_symlink() and path.is_file() and path.stat().st_size == 0:
                path.unlink()
                return True
        except OSError:
            pass
        return False
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != 0:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held: someone is compiling
        if not _same_file(fd, path):
            return False
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)

"""The on-disk kernel cache: roundtrip, corruption, unusable roots, pruning, concurrency."""

from __future__ import annotations

import json
import os
import time
import warnings

import child_procs
import pytest

from kitjit import cache as cache_mod
from kitjit.cache import (
    KernelCache,
    KitCacheWarning,
    cache_dir,
    disk_cache_enabled,
    parse_age,
    parse_size,
)

CUBIN = bytes(range(256)) * 64  # 16 KiB of fake cubin
FILES = {"kernel.tir": "tile ir\n", "kernel.ptx": ".version 8.0\n", "kernel.cubin": CUBIN}


def key_of(i: int) -> str:
    return f"{i:064x}"


def meta_of(name: str = "softmax", **extra) -> dict:
    return {"name": name, "signature": {"X": "*bf16", "n": "i32"}, "num_warps": 4, **extra}


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Every test gets its own cache root and fresh per-process warning state."""
    monkeypatch.setenv("KITJIT_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("KITJIT_CACHE_DISABLE", "KITJIT_CACHE_MAX_SIZE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(cache_mod, "_warned_roots", set())
    monkeypatch.setattr(cache_mod, "_counted", set())
    monkeypatch.setattr(cache_mod, "_bad_env", set())


@pytest.fixture
def kc(tmp_path) -> KernelCache:
    return KernelCache()


def set_last_used(entry, t: float) -> None:
    (entry.path / "usage.json").write_text(json.dumps({"last_used": t, "hits": 0}))


# --------------------------------------------------------------------------- basics


def test_cache_dir_env_and_default(tmp_path, monkeypatch):
    assert cache_dir() == tmp_path / "cache"
    assert KernelCache().root == tmp_path / "cache"
    monkeypatch.delenv("KITJIT_CACHE_DIR")
    assert cache_dir() == cache_dir().home() / ".cache" / "kitjit"


@pytest.mark.parametrize("value,enabled", [("1", False), ("true", False), ("TRUE", False),
                                           ("0", True), ("", True)])  # fmt: skip
def test_disk_cache_enabled(monkeypatch, value, enabled):
    monkeypatch.setenv("KITJIT_CACHE_DISABLE", value)
    assert disk_cache_enabled() is enabled


def test_roundtrip(kc):
    assert kc.get(key_of(1)) is None
    e = kc.put(key_of(1), FILES, meta_of(source_file="k.py", constexprs={"BLOCK": 64}))
    assert e.persisted
    assert e.path == kc.root / key_of(1)[:2] / key_of(1)
    got = kc.get(key_of(1))
    assert got is not None and got.key == key_of(1)
    assert got.read("kernel.cubin") == CUBIN
    assert got.text("kernel.tir") == "tile ir\n"
    assert got.meta["name"] == "softmax"
    assert got.meta["constexprs"] == {"BLOCK": 64}
    assert got.meta["key"] == key_of(1)
    assert got.meta["created"] <= time.time()
    assert got.meta["files"]["kernel.cubin"]["bytes"] == len(CUBIN)
    assert len(got.meta["files"]["kernel.cubin"]["sha256"]) == 64
    assert got.size() >= len(CUBIN)
    assert got.hits == 1
    assert sorted(got.files) == sorted(FILES)
    assert not any(p.name.startswith(".tmp-") for p in kc.root.iterdir())


def test_get_updates_usage(kc):
    e = kc.put(key_of(1), FILES, meta_of())
    set_last_used(e, 1000.0)
    assert kc.get(key_of(1), record=False).last_used == 1000.0  # CLI lookups leave no mark
    kc.get(key_of(1))
    kc.get(key_of(1))
    assert kc.get(key_of(1), record=False).hits == 2
    assert kc.get(key_of(1), record=False).last_used > time.time() - 60


def test_stats_hits_and_misses(kc):
    assert kc.stats()["hit_rate"] is None
    kc.get(key_of(1))  # miss
    kc.put(key_of(1), FILES, meta_of())
    kc.put(key_of(2), FILES, meta_of())
    kc.get(key_of(2))  # hit
    kc.record_hit(key_of(2))  # the same lookup reported twice counts once
    kc.get(key_of(3))  # miss
    s = kc.stats()
    assert (s["entries"], s["hits"], s["misses"]) == (2, 1, 2)
    assert s["hit_rate"] == pytest.approx(1 / 3)
    assert s["bytes"] == sum(e.size() for e in kc.entries())


def test_invalid_keys_and_names(kc):
    for bad in ("", "a", "../etc", "ab/cd", ".hidden"):
        with pytest.raises(ValueError):
            kc.get(bad)
    with pytest.raises(ValueError):
        kc.put(key_of(1), {"../x": b""}, meta_of())
    with pytest.raises(ValueError):
        kc.put(key_of(1), {"meta.json": b"{}"}, meta_of())


def test_put_existing_key_keeps_first(kc):
    kc.put(key_of(1), FILES, meta_of("first"))
    e = kc.put(key_of(1), FILES, meta_of("second"))
    assert e.meta["name"] == "first"
    assert [x.key for x in kc.entries()] == [key_of(1)]


def test_find(kc):
    kc.put("abc123" + "0" * 58, FILES, meta_of())
    kc.put("abd456" + "0" * 58, FILES, meta_of())
    assert kc.find("abc").key.startswith("abc123")
    with pytest.raises(KeyError, match="ambiguous"):
        kc.find("ab")
    with pytest.raises(KeyError, match="no cache entry"):
        kc.find("ffff")


def test_meta_needs_only_name(kc):
    kc.put(key_of(1), {"kernel.cubin": b"x"}, {"name": "k", "odd": object()})
    assert kc.get(key_of(1)).meta["name"] == "k"


# --------------------------------------------------------------------------- corruption


def _one_warning(rec) -> None:
    cache_warnings = [w for w in rec if issubclass(w.category, KitCacheWarning)]
    assert len(cache_warnings) == 1, [str(w.message) for w in rec]


def test_truncated_cubin_detected(kc):
    e = kc.put(key_of(1), FILES, meta_of())
    (e.path / "kernel.cubin").write_bytes(CUBIN[:100])
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert kc.get(key_of(1)) is None
        assert kc.get(key_of(1)) is None  # gone now: a plain miss, no second warning
    _one_warning(rec)
    assert "corrupt" in str(rec[0].message)
    assert not e.path.exists()
    assert kc.entries() == []
    # the caller recompiles and puts again
    kc.put(key_of(1), FILES, meta_of())
    assert kc.get(key_of(1)).read("kernel.cubin") == CUBIN


def test_altered_cubin_same_size_detected(kc):
    e = kc.put(key_of(1), FILES, meta_of())
    bad = bytearray(CUBIN)
    bad[1000] ^= 0xFF
    (e.path / "kernel.cubin").write_bytes(bytes(bad))
    with pytest.warns(KitCacheWarning, match="sha256"):
        assert kc.get(key_of(1)) is None


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p.write_text(p.read_text()[:-20]),  # truncated json
        lambda p: p.write_text("[]"),  # not an object
        lambda p: p.write_text(p.read_text().replace('"bytes": 16384', '"bytes": 16385')),
        lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "files": {}})),
        lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "key": "x" * 64})),
        lambda p: p.unlink(),
    ],
    ids=["truncated", "not-object", "wrong-size", "no-files", "other-key", "missing"],
)
def test_altered_meta_detected(kc, mutate):
    e = kc.put(key_of(1), FILES, meta_of())
    mutate(e.path / "meta.json")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert kc.get(key_of(1)) is None
    _one_warning(rec)
    assert not e.path.exists()


def test_missing_file_detected(kc):
    e = kc.put(key_of(1), FILES, meta_of())
    (e.path / "kernel.ptx").unlink()
    with pytest.warns(KitCacheWarning, match="missing"):
        assert kc.get(key_of(1)) is None


def test_verify_reports_without_removing(kc):
    e = kc.put(key_of(1), FILES, meta_of())
    assert e.verify() is None
    (e.path / "kernel.cubin").write_bytes(b"")
    assert "kernel.cubin" in kc.find(key_of(1)[:8]).verify()
    assert e.path.exists()


# --------------------------------------------------------------------------- unusable roots


def test_root_under_a_file_warns_once(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    kc = KernelCache(blocker / "cache")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        e = kc.put(key_of(1), FILES, meta_of())
        e2 = kc.put(key_of(2), FILES, meta_of())
        assert kc.get(key_of(1)) is None
        kc.record_hit(key_of(3))
        kc.record_miss(key_of(4))
    _one_warning(rec)
    assert "not writable" in str(rec[0].message)
    assert not e.persisted and not e2.persisted
    assert e.read("kernel.cubin") == CUBIN  # the in-memory entry still works
    assert kc.entries() == []
    assert kc.stats()["entries"] == 0
    assert kc.prune(max_size=0) == []


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_read_only_root(tmp_path):
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o500)
    try:
        kc = KernelCache(root)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            for i in range(3):
                kc.put(key_of(i), FILES, meta_of())
        if os.geteuid() == 0:  # root ignores the mode bits: the writes just work
            assert len(kc.entries()) == 3
        else:
            _one_warning(rec)
            assert kc.entries() == []
            assert kc.get(key_of(1)) is None
    finally:
        root.chmod(0o700)


def test_disabled(kc, monkeypatch):
    kc.put(key_of(1), FILES, meta_of())
    monkeypatch.setenv("KITJIT_CACHE_DISABLE", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kc.get(key_of(1)) is None
        e = kc.put(key_of(2), FILES, meta_of())
    assert not e.persisted
    assert [x.key for x in kc.entries()] == [key_of(1)]


# --------------------------------------------------------------------------- sizes, pruning


@pytest.mark.parametrize(
    "text,value",
    [("1048576", 1 << 20), ("500M", 500 << 20), ("2GB", 2 << 30), ("64KiB", 64 << 10),
     ("1.5k", 1536), ("10 mb", 10 << 20), ("0", 0), ("7b", 7)],
)  # fmt: skip
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize(
    "text,value",
    [("7d", 7 * 86400), ("12h", 43200), ("30m", 1800), ("90s", 90), ("3600", 3600),
     ("1.5h", 5400), ("2w", 14 * 86400)],
)  # fmt: skip
def test_parse_age(text, value):
    assert parse_age(text) == value


@pytest.mark.parametrize("bad", ["", "abc", "-5M", "5XB", "1e9"])
def test_parse_errors(bad):
    with pytest.raises(ValueError):
        parse_size(bad)
    with pytest.raises(ValueError):
        parse_age(bad)


def _filled(kc: KernelCache, n: int) -> list:
    """n entries, entry i last used at t=1000+i (entry 0 is the least recently used)."""
    out = []
    for i in range(n):
        e = kc.put(key_of(i), FILES, meta_of(f"k{i}"))
        set_last_used(e, 1000.0 + i)
        out.append(e)
    return out


def test_prune_by_size_lru_order(kc):
    es = _filled(kc, 5)
    # make entry 1 the most recently used
    set_last_used(es[1], 2000.0)
    size = es[0].size()
    removed = kc.prune(max_size=int(2.5 * size))
    assert removed == [key_of(0), key_of(2), key_of(3)]
    assert sorted(e.key for e in kc.entries()) == [key_of(1), key_of(4)]
    assert kc.prune(max_size=10 * size) == []


def test_prune_by_age(kc):
    es = _filled(kc, 3)
    set_last_used(es[2], time.time())
    assert kc.prune(older_than=parse_age("1d")) == [key_of(0), key_of(1)]
    assert [e.key for e in kc.entries()] == [key_of(2)]


def test_prune_removes_stale_temp_dirs(kc):
    _filled(kc, 1)
    stale = kc.root / ".tmp-dead"
    stale.mkdir()
    os.utime(stale, (0, 0))
    fresh = kc.root / ".tmp-live"
    fresh.mkdir()
    kc.prune(max_size=1 << 40)
    assert not stale.exists() and fresh.exists()


def test_max_size_env_auto_prunes(kc, monkeypatch):
    es = _filled(kc, 4)
    size = es[0].size()
    monkeypatch.setenv("KITJIT_CACHE_MAX_SIZE", str(int(3.5 * size)))
    kc.put(key_of(10), FILES, meta_of("new"))
    keys = sorted(e.key for e in kc.entries())
    assert keys == [key_of(2), key_of(3), key_of(10)]
    # a limit below one entry still keeps the entry just written
    monkeypatch.setenv("KITJIT_CACHE_MAX_SIZE", "1")
    kc.put(key_of(11), FILES, meta_of("newer"))
    assert [e.key for e in kc.entries()] == [key_of(11)]


def test_max_size_env_invalid_warns_once(kc, monkeypatch):
    monkeypatch.setenv("KITJIT_CACHE_MAX_SIZE", "lots")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        kc.put(key_of(1), FILES, meta_of())
        kc.put(key_of(2), FILES, meta_of())
    _one_warning(rec)
    assert len(kc.entries()) == 2


def test_clear_by_name_keeps_tuning(kc):
    for i, name in enumerate(["softmax", "softmax", "matmul"]):
        kc.put(key_of(i), FILES, meta_of(name))
    kc.tuning_dir.mkdir(parents=True)
    (kc.tuning_dir / "matmul.json").write_text("{}")
    assert kc.clear("softmax") == 2
    assert [e.meta["name"] for e in kc.entries()] == ["matmul"]
    assert kc.clear("nothing") == 0
    kc.prune(max_size=0)
    assert kc.entries() == []
    assert (kc.tuning_dir / "matmul.json").exists()


def test_clear_all(kc):
    _filled(kc, 3)
    kc.get(key_of(0))
    kc.tuning_dir.mkdir(parents=True)
    (kc.tuning_dir / "x.json").write_text('{"version": 1, "timings": {}}')  # a record
    assert kc.clear() == 3
    assert kc.entries() == []
    assert not kc.tuning_dir.exists()
    assert kc.stats()["hits"] == 0


def test_clear_spares_a_put_in_progress(kc):
    _filled(kc, 1)
    busy = kc.root / ".tmp-busy"  # another process is writing this entry right now
    busy.mkdir()
    trash = kc.root / ".trash-left"
    trash.mkdir()
    assert kc.clear() == 1
    assert busy.exists() and not trash.exists()


def test_remove(kc):
    _filled(kc, 2)
    kc.remove(key_of(0))
    kc.remove(key_of(0))  # absent: no error
    assert [e.key for e in kc.entries()] == [key_of(1)]


def test_entries_lists_unreadable_meta(kc):
    e = kc.put(key_of(1), FILES, meta_of())
    (e.path / "meta.json").write_text("{")
    [x] = kc.entries()
    assert x.meta == {} and x.name == "?"
    assert kc.clear() == 1


# --------------------------------------------------------------------------- concurrency


def _run_all(procs, results, n: int) -> list:
    """Start, join and check the exit codes first, so a crashed child fails fast."""
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.is_alive():
            p.kill()
    assert codes == [0] * len(procs), f"child exit codes {codes} (see captured stderr)"
    return [results.get(timeout=10) for _ in range(n)]


def _put_same(root: str, barrier, results) -> None:
    warnings.simplefilter("error")
    kc = KernelCache(root)
    barrier.wait()
    kc.put(key_of(7), FILES, meta_of("race"))
    e = kc.get(key_of(7))
    results.put(e is not None and e.read("kernel.cubin") == CUBIN)


def test_concurrent_put_same_key(tmp_path):
    ctx = child_procs.Children()
    root = str(tmp_path / "shared")
    barrier = ctx.Barrier(8)
    results = ctx.Queue()
    procs = [ctx.Process(_put_same, (root, barrier, results)) for _ in range(8)]
    oks = _run_all(procs, results, len(procs))
    assert oks == [True] * 8
    kc = KernelCache(root)
    [entry] = kc.entries()
    assert entry.verify() is None
    assert kc.get(key_of(7)).read("kernel.cubin") == CUBIN
    leftovers = [p.name for p in kc.root.iterdir() if p.name.startswith((".tmp-", ".trash-"))]
    assert leftovers == []


def _writer(root: str, start: int, barrier) -> None:
    kc = KernelCache(root)
    barrier.wait()
    for i in range(start, 40, 2):
        kc.put(key_of(i), FILES, meta_of(f"k{i}"))


def _reader(root: str, barrier, results) -> None:
    warnings.simplefilter("error")  # a half-written entry would warn as corrupt
    kc = KernelCache(root)
    barrier.wait()
    seen = 0
    deadline = time.time() + 30
    while seen < 40 and time.time() < deadline:
        seen = sum(kc.get(key_of(i), record=False) is not None for i in range(40))
    results.put(seen)


def test_readers_never_see_half_an_entry(tmp_path):
    ctx = child_procs.Children()
    root = str(tmp_path / "shared")
    barrier = ctx.Barrier(4)
    results = ctx.Queue()
    procs = [ctx.Process(_writer, (root, s, barrier)) for s in (0, 1)]
    procs += [ctx.Process(_reader, (root, barrier, results)) for _ in range(2)]
    seen = _run_all(procs, results, 2)
    assert seen == [40, 40]


# --------------------------------------------------------------------------- data safety
def _outside_files(tmp_path):
    """A folder outside the cache whose files a cache command must never touch."""
    out = tmp_path / "precious"
    key = "ff" + key_of(3)[2:]
    (out / key).mkdir(parents=True)
    for name in ("meta.json", "kernel.cubin", "usage.json"):
        (out / key / name).write_text("mine")
    (out / "notes.txt").write_text("mine")
    return out, key


def test_clear_never_follows_a_symlinked_shard(kc, tmp_path):
    _filled(kc, 1)
    out, key = _outside_files(tmp_path)
    (kc.root / key[:2]).symlink_to(out, target_is_directory=True)
    kc.clear()
    kc.prune(max_size=0)
    kc.remove(key)
    assert sorted(p.name for p in (out / key).iterdir()) == ["kernel.cubin", "meta.json",
                                                             "usage.json"]
    assert (out / "notes.txt").read_text() == "mine"


def test_get_of_a_corrupt_key_behind_a_symlink_deletes_nothing(kc, tmp_path):
    kc.root.mkdir(parents=True, exist_ok=True)
    out, key = _outside_files(tmp_path)
    (kc.root / key[:2]).symlink_to(out, target_is_directory=True)
    assert kc.get(key) is None  # "corrupt" (meta.json is not JSON): but not ours to remove
    assert (out / key / "kernel.cubin").read_text() == "mine"


def test_clear_in_a_folder_of_other_files_removes_only_kitjits(kc):
    _filled(kc, 2)
    root = kc.root
    (root / "notes.txt").write_text("mine")
    (root / "stats.json").write_text('{"budget": 3}')  # a user's, not kitjit's counters
    key = "ee" + key_of(9)[2:]
    (root / key[:2] / key).mkdir(parents=True)  # looks like an entry, but holds a folder
    (root / key[:2] / key / "meta.json").write_text("{}")
    (root / key[:2] / key / "data").mkdir()
    (root / key[:2] / key / "data" / "x.csv").write_text("1,2")
    (root / "tuning" / "mine").mkdir(parents=True)
    (root / "tuning" / "mine" / "plan.json").write_text('{"todo": 1}')
    (root / "tuning" / "mine" / "plan.txt").write_text("todo")
    assert kc.clear() == 2
    assert (root / "notes.txt").read_text() == "mine"
    assert (root / "stats.json").read_text() == '{"budget": 3}'
    assert (root / key[:2] / key / "data" / "x.csv").read_text() == "1,2"
    assert (root / "tuning" / "mine" / "plan.json").exists()
    assert (root / "tuning" / "mine" / "plan.txt").exists()


def test_cache_root_is_tagged(kc):
    _filled(kc, 1)
    assert (kc.root / "CACHEDIR.TAG").read_text().startswith(
        "Signature: 8a477f597d28d172789f06886806bc55")


def test_a_shard_replaced_by_a_file_is_repaired(kc):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        kc.root.mkdir(parents=True)
        (kc.root / key_of(1)[:2]).write_text("in the way")
        e = kc.put(key_of(1), FILES, meta_of())
    assert e.persisted and kc.get(key_of(1)) is not None
    moved = list(kc.root.glob(".displaced-*"))
    assert len(moved) == 1 and moved[0].read_text() == "in the way"  # kept, not deleted
    assert len([w for w in rec if issubclass(w.category, KitCacheWarning)]) == 1


@pytest.mark.parametrize("field, bad", [("num_warps", "4"), ("arg_kinds", 7),
                                        ("tma", [{"param": "x"}]), ("name", None)])
def test_meta_with_wrong_field_types_is_rebuilt(tmp_path, monkeypatch, field, bad):
    """A meta.json that is valid JSON with fields of the wrong type (hand-edited, another
    kitjit) is a corrupt entry: one warning, then a rebuild, never a TypeError."""
    import pathlib

    import kitjit as kit

    monkeypatch.setenv("KITJIT_CACHE_DIR", str(tmp_path / "c"))
    src = pathlib.Path(__file__).resolve().parents[1] / "examples" / "vector_add.py"
    sig = ["*fp32:16", "*fp32:16", "*fp32:16", "i32"]
    kit.compile_aot(str(src), "add_kernel", sig, {"BLOCK": 256}, 4, "sm_90a")
    [e] = KernelCache(tmp_path / "c").entries()
    meta = json.loads((e.path / "meta.json").read_text())
    meta[field] = bad
    (e.path / "meta.json").write_text(json.dumps(meta))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        ck = kit.compile_aot(str(src), "add_kernel", sig, {"BLOCK": 256}, 4, "sm_90a")
    assert ck.num_warps == 4 and isinstance(ck.metadata["arg_kinds"], list)
    assert any("bad meta.json" in str(w.message) for w in rec)
    [e2] = KernelCache(tmp_path / "c").entries()
    assert json.loads((e2.path / "meta.json").read_text())[field] != bad

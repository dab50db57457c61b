"""Brings the port corpus's package sources into `.corpus/` (gitignored), at the commits
pinned in `manifest.json` (committed).

Only `.py` files under each source's `paths` are copied, laid out so that the package
imports from `.corpus/<source>/` (a `src/` prefix dropped). The copy comes from a git
directory holding the commit: a local mirror (`--mirrors DIR`, where `DIR/<owner>+<name>/repo`
is a bare clone: the layout of this project's snapshot tool) or, failing that, a clone from
GitHub. `--update` pins each source to its mirror's HEAD instead and rewrites the manifest.

    python benchmarks/port_corpus/fetch.py [--only SOURCE] [--mirrors /work/.mirror] [--update]

Also copies the pure-Python dependencies in DEPS into `.corpus/_deps/` (the harness puts it
on sys.path), so `.corpus/` alone carries to a machine without network access.

Nothing is fetched in CI: the corpus tests skip where `.corpus/` is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MANIFEST = os.path.join(HERE, "manifest.json")
CACHE = os.path.join(ROOT, ".corpus")


def load_manifest() -> dict:
    with open(MANIFEST) as f:
        return json.load(f)


def _git(git_dir: str, *args: str, binary: bool = False):
    out = subprocess.run(["git", "--git-dir", git_dir, *args], check=True,
                         capture_output=True)
    return out.stdout if binary else out.stdout.decode()


def _git_dir(repo: str, mirrors: str, tmp: str) -> str:
    mirror = os.path.join(mirrors, repo.replace("/", "+"), "repo")
    if os.path.isdir(mirror):
        return mirror
    dest = os.path.join(tmp, repo.replace("/", "+"))
    print(f"  no mirror at {mirror}: cloning https://github.com/{repo}", flush=True)
    subprocess.run(["git", "clone", "--bare", "--filter=blob:none", "-q",
                    f"https://github.com/{repo}", dest], check=True)
    return dest


def fetch_source(name: str, entry: dict, mirrors: str, update: bool, tmp: str) -> dict:
    git_dir = _git_dir(entry["repo"], mirrors, tmp)
    commit = _git(git_dir, "rev-parse", "HEAD").strip() if update else entry["commit"]
    out = os.path.join(CACHE, name)
    shutil.rmtree(out, ignore_errors=True)
    files = total = 0
    strip = entry.get("strip", "")
    listing = _git(git_dir, "ls-tree", "-r", "-l", commit, "--", *entry["paths"])
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        _mode, kind, sha, size = meta.split()
        if kind != "blob" or not path.endswith(".py"):
            continue
        rel = path[len(strip):] if strip and path.startswith(strip) else path
        dest = os.path.join(out, rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as f:
            f.write(_git(git_dir, "cat-file", "blob", sha, binary=True))
        files += 1
        total += int(size)
    with open(os.path.join(out, "COMMIT"), "w") as f:
        f.write(f"{entry['repo']} {commit}\n")
    return {**entry, "commit": commit, "files": files, "bytes": total}


# Pure-Python packages the corpus's sources import that a GPU machine may lack (it cannot
# reach a registry): copied from this machine's installation into .corpus/_deps/.
DEPS = ("einops", "packaging")


def copy_deps() -> None:
    import importlib

    out = os.path.join(CACHE, "_deps")
    for name in DEPS:
        mod = importlib.import_module(name)
        src = os.path.dirname(mod.__file__)
        dest = os.path.join(out, name)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        print(f"_deps      {name} {getattr(mod, '__version__', '?')} (from {src})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", help="a source name (repeatable)")
    ap.add_argument("--mirrors", default="/work/.mirror")
    ap.add_argument("--update", action="store_true",
                    help="pin each source to its mirror's HEAD and rewrite manifest.json")
    args = ap.parse_args(argv)
    manifest = load_manifest()
    names = args.only or list(manifest)
    unknown = sorted(set(names) - set(manifest))
    if unknown:
        ap.error(f"unknown source(s) {unknown}; known: {sorted(manifest)}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            entry = fetch_source(name, manifest[name], args.mirrors, args.update, tmp)
            print(f"{name:10s} {entry['repo']}@{entry['commit'][:12]}: {entry['files']} "
                  f"files, {entry['bytes'] / 1e6:.2f} MB", flush=True)
            if entry["commit"] != manifest[name]["commit"] and not args.update:
                return 1
            manifest[name] = entry
    copy_deps()
    if args.update:
        with open(MANIFEST, "w") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The import swap, done mechanically as a user porting a Triton package would do it.

An import hook (`TritonToKitjitFinder`) loads the modules of one installed package (say
`liger_kernel`) from their own source with every import of Triton rewritten to kitjit:

    import triton                        ->  import kitjit as triton
    import triton.language as tl         ->  import kitjit.language as tl
    from triton.language.math import x   ->  from kitjit.language.math import x
    import triton.language               ->  import kitjit.language, kitjit as triton

Only the module name inside import statements changes (found with `ast`, so strings,
comments and names such as `triton.jit` in the code are untouched); every other byte of the
kernel text is the package's own.

Harness choice, not a change of kernel text: the package's `__init__` files of the packages
named in `skip_init` are not run (their modules are imported one by one, each test its own),
so a name kitjit lacks in one op module fails that op's test only, not every import of the
package.
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from contextlib import contextmanager

SWAP_FROM = "triton"
SWAP_TO = "kitjit"


def swap_name(name: str) -> str | None:
    if name == SWAP_FROM or name.startswith(SWAP_FROM + "."):
        return SWAP_TO + name[len(SWAP_FROM):]
    return None


def swap_imports(source: str) -> str:
    """The source with every absolute import of `triton[.x]` rewritten to `kitjit[.x]`,
    binding the same local names as before."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits = []  # (line index, col start, col end, replacement)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            if not any(swap_name(a.name) for a in node.names):
                continue
            parts = []
            for a in node.names:
                new = swap_name(a.name)
                if new is None:
                    parts.append(a.name + (f" as {a.asname}" if a.asname else ""))
                elif a.asname:
                    parts.append(f"{new} as {a.asname}")
                elif a.name == SWAP_FROM:
                    parts.append(f"{SWAP_TO} as {SWAP_FROM}")
                else:  # `import triton.x` binds `triton`, with triton.x loaded
                    parts.append(f"{new}, {SWAP_TO} as {SWAP_FROM}")
            if node.lineno != node.end_lineno:
                raise NotImplementedError(f"multi-line import at line {node.lineno}")
            edits.append((node.lineno - 1, node.col_offset, node.end_col_offset,
                          "import " + ", ".join(parts)))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            new = swap_name(node.module)
            if new is None:
                continue
            line = lines[node.lineno - 1]
            start = line.index(node.module, node.col_offset + len("from"))
            edits.append((node.lineno - 1, start, start + len(node.module), new))
    for li, c0, c1, text in sorted(edits, reverse=True):
        # ast columns are UTF-8 byte offsets; import lines are ASCII in practice
        lines[li] = lines[li][:c0] + text + lines[li][c1:]
    return "".join(lines)


class _SwapLoader(importlib.machinery.SourceFileLoader):
    """Loads a module from its file with the imports swapped (never from a stale .pyc)."""

    def __init__(self, fullname, path, skip_init: bool):
        super().__init__(fullname, path)
        self.skip_init = skip_init

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        if self.skip_init:
            source = ""
        else:
            source = swap_imports(self.get_data(path).decode("utf-8"))
        return compile(source, path, "exec", dont_inherit=True)


class TritonToKitjitFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of `package` (and its subpackages) and loads them swapped."""

    def __init__(self, package: str, skip_init: tuple[str, ...] = ()):
        self.package = package
        self.skip_init = set(skip_init)

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.package and not fullname.startswith(self.package + "."):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if not (spec.origin or "").endswith(".py"):
            return spec
        loader = _SwapLoader(fullname, spec.origin, fullname in self.skip_init)
        return importlib.util.spec_from_file_location(
            fullname, spec.origin, loader=loader,
            submodule_search_locations=spec.submodule_search_locations)


def _drop(package: str) -> None:
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]


@contextmanager
def swapped(package: str, skip_init: tuple[str, ...] = ()):
    """While active, `import <package>...` loads the swapped source (fresh modules; the
    package's modules are dropped from sys.modules on entry and on exit)."""
    finder = TritonToKitjitFinder(package, skip_init)
    _drop(package)
    sys.meta_path.insert(0, finder)
    try:
        yield finder
    finally:
        sys.meta_path.remove(finder)
        _drop(package)


def is_swapped(module: types.ModuleType) -> bool:
    return isinstance(getattr(module, "__loader__", None), _SwapLoader)

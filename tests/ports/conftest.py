"""Fixtures of the port suite: real Triton kernels from an installed PyPI package, loaded
with only their imports swapped to kitjit (swap.py), run as the package's own Python code
calls them.

Test harness, not kernel text: uninitialised torch memory is poisoned (NaN for floats, the
largest value for ints: torch's `fill_uninitialized_memory` under deterministic mode), so an
output element a kernel forgets to write fails the comparison.
"""

from __future__ import annotations

import importlib
import os
import sys
import types

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from swap import swap_name, swapped  # noqa: E402

LIGER_VERSION = "0.8.5"
LIGER_INSTALL = f'pip install --no-deps liger-kernel=={LIGER_VERSION}'


def _require(package: str, install: str):
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        pytest.skip(f"the port suite needs {package} (its kernels are loaded from the "
                    f"installed package): {install}")


@pytest.fixture
def poisoned():
    """torch.empty* returns NaN-filled memory for the test's duration."""
    from kitjit.testing import poisoned_empty

    with poisoned_empty():
        yield


@pytest.fixture
def liger(poisoned, request):
    """`liger(name)` imports `liger_kernel.ops.<name>` swapped to kitjit (fresh per test).

    Harness, not kernel text:
    - the packages `liger_kernel` and `liger_kernel.ops` are entered without running their
      `__init__` (which imports every op and picks a vendor backend): each op stands alone;
    - Liger's `infer_device()` answers the test's device ("cpu" for the interpreter runs,
      also on a GPU machine);
    - Liger's dispatcher gates its Triton implementations on
      `importlib.import_module("triton")`, a module named in a string rather than an import
      statement: that one lookup is answered with the swapped name.
    """
    _require("liger_kernel", LIGER_INSTALL)
    device = request.node.callspec.params.get("device", "cpu")
    with swapped("liger_kernel", skip_init=("liger_kernel", "liger_kernel.ops")):
        utils = importlib.import_module("liger_kernel.utils")
        utils.infer_device = lambda: device
        cap = importlib.import_module("liger_kernel.backends.capability")
        cap.importlib = types.SimpleNamespace(
            import_module=lambda name, package=None: importlib.import_module(
                swap_name(name) or name, package))
        yield lambda name: importlib.import_module(f"liger_kernel.ops.{name}")

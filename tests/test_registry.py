"""Every op is whole in every layer: the registry that ties an op's typing rule (frontend),
its lowering (backend) and its interpreter semantics together, walked from end to end.

An op declared in kitjit/ir/ops.py without one of the three fails here, and so does one
registered outside the module named after its family (docs/architecture.md: how to add an
op). Every `kit.<name>` marker needs a call rule in the frontend, and the reverse.
"""

from __future__ import annotations

import pathlib
import re

import pytest

import kitjit as kit
from kitjit.ir import registry

ROOT = pathlib.Path(__file__).resolve().parents[1]

registry.load_all_layers()


def test_every_declared_op_has_all_three_layers():
    missing = registry.missing()
    assert not missing, "ops missing a layer (op, layer): " + ", ".join(
        f"({n}, {layer})" for n, layer in missing)


@pytest.mark.parametrize("layer", registry.LAYERS)
def test_each_layer_registers_an_op_in_its_familys_module(layer):
    wrong = []
    for d in registry.OPS.values():
        mod = d.where.get(layer)
        if mod is not None and mod.rsplit(".", 1)[-1] != d.family:
            wrong.append(f"{d.name} ({d.family}) in {mod}")
    assert not wrong, f"{layer} registered outside the family's module: {wrong}"


def test_families_are_known_and_ops_are_all_declared():
    assert set(d.family for d in registry.OPS.values()) <= set(registry.FAMILIES)
    from kitjit.ir import ops as O

    for name in O.ELEMENTWISE | O.CONTROL | {"load", "store", "reduce", "dot"}:
        assert name in registry.OPS, name


def test_registering_an_undeclared_op_is_refused():
    with pytest.raises(KeyError, match="declare it in kitjit/ir/ops.py"):
        registry.lowering("no_such_op")(lambda self, op: None)


def test_every_marker_has_a_call_rule_and_back():
    from kitjit.frontend.semantic.call_rules import CALL_RULES

    from kitjit.language.base import NAMESPACED

    markers = set(kit.BUILTINS) | {q for q in NAMESPACED if not q.startswith("unsupported.")}
    assert markers - set(CALL_RULES) == set(), "kit.<name> without a frontend call rule"
    assert set(CALL_RULES) - markers == set(), "call rules without a kit.<name> marker"


def test_family_modules_have_the_same_names_in_every_layer():
    """The parallel rooms: a family module in one layer exists in the others."""
    rooms = {
        "frontend/semantic": ROOT / "frontend" / "semantic",
        "backend/lower": ROOT / "backend" / "lower",
        "kitjit/interpreter": ROOT / "kitjit" / "interpreter",
    }
    used = {d.family for d in registry.OPS.values()}
    for where, folder in rooms.items():
        have = {p.stem for p in folder.glob("*.py")}
        assert used <= have, f"{where} lacks family modules {sorted(used - have)}"


def test_pyproject_lists_every_package():
    """Packages are listed by hand (frontend/ and backend/ are mapped into kitjit): a new
    sub-package that is not listed would be missing from a wheel."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[tool.setuptools]")[1].split("\n[", 1)[0]
    listed = set(re.findall(r'"(kitjit[\w.]*)"', section))
    found = set()
    for top, name in (("kitjit", "kitjit"), ("frontend", "kitjit.frontend"),
                      ("backend", "kitjit.backend")):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top).parts
            found.add(".".join((name, *rel)))
    assert found == listed, f"unlisted: {sorted(found - listed)}, stale: {sorted(listed - found)}"

"""Text form of the tile IR, for `kitjit cache show --tir` and for debugging."""

from __future__ import annotations

from .core import Block, Function, Op, Value


class _Namer:
    def __init__(self):
        self.names: dict[int, str] = {}

    def __call__(self, v: Value) -> str:
        if v.id not in self.names:
            base = v.name if v.name and v.name.isidentifier() else ""
            n = len(self.names)
            self.names[v.id] = f"%{base}{'.' if base else ''}{n}"
        return self.names[v.id]


def _attr(v) -> str:
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _print_block(block: Block, name: _Namer, indent: int, out: list[str]):
    pad = "  " * indent
    for op in block.ops:
        _print_op(op, name, indent, out, pad)


def _print_op(op: Op, name: _Namer, indent: int, out: list[str], pad: str):
    res = ", ".join(name(r) for r in op.results)
    lhs = f"{res} = " if res else ""
    ops = ", ".join(name(o) for o in op.operands)
    attrs = ", ".join(f"{k}={_attr(v)}" for k, v in op.attrs.items())
    attrs = f" {{{attrs}}}" if attrs else ""
    tys = ", ".join(str(r.type) for r in op.results)
    tys = f" : {tys}" if tys else ""
    loc = f"  # line {op.loc.line}" if op.loc else ""
    out.append(f"{pad}{lhs}{op.name} {ops}{attrs}{tys}{loc}".replace("  ,", ","))
    for i, region in enumerate(op.regions):
        args = ", ".join(f"{name(a)}: {a.type}" for a in region.args)
        label = {"for": "do", "if": "then" if i == 0 else "else",
                 "while": "cond" if i == 0 else "do"}.get(op.name, f"region{i}")
        out.append(f"{pad}  {label}({args}):")
        _print_block(region, name, indent + 2, out)


def print_function(fn: Function) -> str:
    name = _Namer()
    args = ", ".join(f"{name(a)}: {a.type}" for a in fn.args)
    attrs = ", ".join(f"{k}={v}" for k, v in fn.attrs.items() if not k.startswith("_"))
    out = [f"func @{fn.name}({args}) {{{attrs}}} {{"]
    _print_block(fn.body, name, 1, out)
    convs = sum(1 for op in fn.walk() if op.name == "convert_layout")
    out.append(f"}}  # layout conversions: {convs}")
    return "\n".join(out) + "\n"

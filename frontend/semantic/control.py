"""Control flow: the `for`, `while` and `if` ops (their regions and carried types come from
`frontend/codegen/statements.py`, which also ends each region with its `yield`).

Call rules: kit.static_assert, kit.static_print, kit.device_print (and Python's print in a
kernel, as in Triton), kit.device_assert, kit.debug_barrier, kit.gdc_wait,
kit.gdc_launch_dependents.
"""

from __future__ import annotations

from typing import Any

from kitjit.ir.core import Block, Op, Value
from kitjit.ir.registry import typing_rule
from kitjit.ir.types import TileType, int32, int64

from .base import describe
from .call_rules import Call, call_rule


class ControlOps:
    """Typing rules of the control family."""

    @typing_rule("for")
    def for_op(self, bounds: list[Value], inits: list[Value], types: list[TileType],
               body: Block) -> Op:
        """A `for` over `bounds` (lb, ub, step) carrying `inits` (of `types`) through `body`."""
        return self.emit("for", [*bounds, *inits], types, regions=[body])

    @typing_rule("if")
    def if_op(self, cond: Value, types: list[TileType], then: Block, orelse: Block) -> Op:
        """An `if` on the i1 scalar `cond` whose branches yield values of `types`."""
        return self.emit("if", [cond], types, regions=[then, orelse])


    @typing_rule("while")
    def while_op(self, inits: list[Value], types: list[TileType], cond: Block,
                 body: Block) -> Op:
        """A `while` carrying `inits` (of `types`): region `cond` takes the carried values and
        yields the i1 scalar condition; region `body` takes them and yields the next ones."""
        for a, t in zip(inits, types):
            if a.shape != t.shape or a.dtype is not t.dtype:
                raise self.error(f"internal: while carries {a.type} as {t}")
        return self.emit("while", list(inits), types, regions=[cond, body])


    @typing_rule("print")
    def device_print(self, prefix: str, values: list[Value], hex: bool = False) -> None:
        """Prints `values` (each element, with the program id and its index) at run time."""
        self.emit("print", values, [], {"prefix": prefix, "hex": bool(hex)})

    @typing_rule("assert")
    def device_assert(self, cond: Value, msg: str) -> None:
        """Stops the kernel with `msg` where an element of `cond` is false."""
        if not cond.dtype.is_bool():
            cond = self.compare("ne", cond, 0)
        self.emit("assert", [cond], [], {"msg": msg})

    @typing_rule("gdc_wait")
    def gdc_wait(self) -> None:
        self.emit("gdc_wait", [], [])

    @typing_rule("gdc_launch_dependents")
    def gdc_launch_dependents(self) -> None:
        self.emit("gdc_launch_dependents", [], [])

    @typing_rule("read_sreg")
    def read_sreg(self, name: str) -> Value:
        """A special register: %smid (the SM running this program, int32) or %globaltimer
        (the GPU's nanosecond clock, int64)."""
        return self.emit1("read_sreg", [], TileType(int32 if name == "smid" else int64),
                          {"name": name})


# -------------------------------------------------------------------- kit.<name> calls
@call_rule("static_assert", lambda cond, msg="": None)
def _static_assert(c: Call) -> Any:
    cond = c.const("cond")
    if not cond:
        from kitjit.frontend.errors import StaticAssertionError

        e = c.err(f"static assertion failed{': ' + str(c['msg']) if c['msg'] else ''}")
        raise StaticAssertionError(e.message, e.loc, e.hint)
    return None


@call_rule("static_print", lambda *values, sep=" ", end="\n", file=None, flush=False: None)
def _static_print(c: Call) -> Any:
    text = c["sep"].join(describe(v) if isinstance(v, Value) else str(v)
                         for v in c["values"])
    print(text, end=c["end"], file=c["file"], flush=c["flush"])
    return None


@call_rule("device_print", lambda prefix, *args, hex=False: None)
def _device_print(c: Call) -> Any:
    prefix = c["prefix"]
    if not isinstance(prefix, str):
        raise c.err(f"kit.device_print: the prefix must be a string, got {describe(prefix)}",
                    "kit.device_print(\"x:\", x)")
    return _emit_print(c, prefix, list(c["args"]), c.const("hex"))


def _emit_print(c: Call, prefix: str, args: list, hex: bool = False) -> None:
    if prefix and not prefix.endswith(" "):
        prefix += " "
    values = []
    for a in args:
        if isinstance(a, Value):
            if a.type.is_shared or not (a.dtype.is_int() or a.dtype.is_floating() or
                                        a.dtype.is_ptr() or a.dtype.is_bool()):
                raise c.err(f"cannot print {describe(a)}")
            values.append(a)
        elif isinstance(a, (bool, int, float)):
            values.append(c.b.to_value(a))
        else:
            prefix += f"{a} "  # compile-time text joins the prefix
    c.b.device_print(prefix, values, hex)
    return None


@call_rule("device_assert", lambda cond, msg="", mask=None: None)
def _device_assert(c: Call) -> Any:
    cond, msg = c["cond"], c.const("msg")
    if c["mask"] is not None:
        raise c.err("kit.device_assert: 'mask' is not supported yet")
    if not isinstance(cond, Value):
        if not cond:
            raise c.err(f"kit.device_assert fails for every program: {msg}")
        return None
    c.b.device_assert(cond, str(msg))
    return None


@call_rule("debug_barrier", lambda: None)
def _debug_barrier(c: Call) -> Any:
    return c.b.barrier()


@call_rule("gdc_wait", lambda: None)
def _gdc_wait(c: Call) -> Any:
    return c.b.gdc_wait()


@call_rule("gdc_launch_dependents", lambda: None)
def _gdc_launch_dependents(c: Call) -> Any:
    return c.b.gdc_launch_dependents()


@call_rule("cuda.smid", lambda: None)
def _smid(c: Call) -> Any:
    """Triton's tl.extra.cuda.smid(): the SM this program runs on (int32; 0 in the
    interpreter, which runs programs one after another)."""
    return c.b.read_sreg("smid")


@call_rule("cuda.globaltimer", lambda: None)
def _globaltimer(c: Call) -> Any:
    """Triton's tl.extra.cuda.globaltimer(): the GPU's global nanosecond timer (int64; the
    host's time.time_ns() in the interpreter), read where it stands (never hoisted)."""
    return c.b.read_sreg("globaltimer")


@call_rule("cuda.num_warps", lambda: None)
def _num_warps(c: Call) -> int:
    """Triton's tl.extra.cuda.num_warps(): the kernel's num_warps, a compile-time int."""
    return c.b.fn.attrs["num_warps"]


@call_rule("cuda.num_threads", lambda: None)
def _num_threads(c: Call) -> int:
    """Triton's tl.extra.cuda.num_threads(): 32 * num_warps, a compile-time int."""
    return 32 * c.b.fn.attrs["num_warps"]


def python_print(cg: Any, args: list, kwargs: dict, node: Any) -> None:
    """Python's `print(...)` in a kernel: kit.device_print, with a leading string as the
    prefix (sep, end, file and flush are not supported)."""
    c = Call(cg, "print", {}, node)
    if set(kwargs) - {"hex"}:
        raise c.err(f"print() in a kernel takes no {', '.join(sorted(set(kwargs) - {'hex'}))}",
                    "kit.device_print(prefix, *values, hex=False)")
    args = list(args)
    prefix = args.pop(0) if args and isinstance(args[0], str) else ""
    return _emit_print(c, prefix, args, bool(kwargs.get("hex", False)))

"""kitjit under `torch.compile`.

Two routes, both with no graph break under `fullgraph=True`:

- `kernel[grid](...)` itself: while dynamo traces, `JITFunction.__getitem__` hands the launch
  to `traced_launch`, which records it in the graph as one call of the opaque custom op
  `kitjit::launch` (every tensor argument declared mutated, since a kernel may write any of
  them). When the graph runs, the op launches the kernel as eager code would. Constexprs must
  be plain values (ints, floats, bools, strings, None).
- `kit.custom_op`: register your own Python function that launches kitjit kernels as a
  `torch.library` custom op, with a fake (meta) function for its output shapes and, if you
  like, a backward: the usual way to give torch.compile (and autograd) a whole fused op.
"""

from __future__ import annotations

import ast
import itertools
import weakref
from collections.abc import Callable
from typing import Any

_KERNELS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_ids = itertools.count()
_op = None


def register_kernel(jf) -> str:
    """A process-unique name for `jf` (taken at @kit.jit time), by which the op finds it."""
    name = f"{jf.fn.__module__}.{jf.fn.__qualname__}#{next(_ids)}"
    _KERNELS[name] = jf
    _launch_op()
    return name


def _launch_op():
    """`kitjit::launch`, defined when the first kernel is (it must exist before dynamo
    traces a launch: defining it is not traceable)."""
    global _op
    if _op is None:
        import torch

        @torch.library.custom_op(
            "kitjit::launch", mutates_args={"tensors"},
            schema="(str kernel, str consts, int num_warps, SymInt[] grid, "
                   "Tensor(a!)[] tensors, SymInt[] ints, float[] floats, str layout) -> ()")
        def launch(kernel, consts, num_warps, grid, tensors, ints, floats, layout):
            jf = _KERNELS[kernel]
            names = dict(zip(jf.constexprs, ast.literal_eval(consts)))
            ii, fi = iter(ints), iter(floats)
            args = []
            for code in layout.split(","):
                if code[0] == "t":
                    args.append(tensors[int(code[1:])])
                elif code == "i":
                    args.append(next(ii))
                elif code == "b":
                    args.append(bool(next(ii)))
                elif code == "f":
                    args.append(next(fi))
                else:
                    args.append(None)
            jf._launch(tuple(grid), *args, num_warps=num_warps, **names)

        @launch.register_fake
        def _(kernel, consts, num_warps, grid, tensors, ints, floats, layout):
            return None

        _op = launch
    return _op


def traced_launch(jf, grid, *args, num_warps=4, num_stages=None, stream=None, **kwargs):
    """What `kernel[grid](...)` becomes while dynamo traces: the arguments bound by name,
    the grid evaluated, and one `kitjit::launch` call in the graph."""
    bound = dict(zip(jf.params, args))
    if len(args) > len(jf.params):
        raise TypeError(f"{jf.__name__}() takes {len(jf.params)} arguments, got {len(args)}")
    bound.update(kwargs)
    for n, d in jf._defaults.items():
        if n not in bound:
            bound[n] = d
    missing = [n for n in jf.params if n not in bound]
    if missing:
        raise TypeError(f"{jf.__name__}() missing required arguments: {', '.join(missing)}")
    consts = tuple(bound[n] for n in jf.constexprs)
    for n, c in zip(jf.constexprs, consts):
        if not (c is None or isinstance(c, (bool, int, float, str))):
            raise TypeError(f"{jf.__name__}: constexpr '{n}' is a {type(c).__name__}; under "
                            "torch.compile constexprs must be ints, floats, bools, strings "
                            "or None (or wrap the launch in kit.custom_op)")
    if callable(grid):
        meta = dict(zip(jf.constexprs, consts))
        meta["num_warps"] = num_warps
        grid = grid(meta)
    if isinstance(grid, int):
        grid = (grid,)
    tensors, layout, ints, floats = [], [], [], []
    import torch

    for n in jf.runtime_params:
        a = bound[n]
        if isinstance(a, torch.Tensor):
            for j, t in enumerate(tensors):  # one entry per tensor: no aliased mutations
                if t is a:
                    layout.append(f"t{j}")
                    break
            else:
                layout.append(f"t{len(tensors)}")
                tensors.append(a)
        elif a is None:
            layout.append("n")
        elif isinstance(a, bool):
            layout.append("b")
            ints.append(int(a))
        elif isinstance(a, int):
            layout.append("i")
            ints.append(a)
        elif isinstance(a, float):
            layout.append("f")
            floats.append(a)
        else:
            raise TypeError(f"argument '{n}': kitjit cannot pass {type(a).__name__} to a "
                            "kernel")
    _op(jf._op_name, repr(consts), num_warps, list(grid), tensors, ints, floats,
                 ",".join(layout))
    return None


def custom_op(name: str, fn: Callable | None = None, *, mutates_args: Any = (),
              fake: Callable | None = None, backward: Callable | None = None,
              setup_context: Callable | None = None, device_types: Any = None,
              schema: str | None = None):
    """Register `fn` (a Python function that launches kitjit kernels, with type hints) as
    the torch custom op `name` ("namespace::op"), so that code calling it compiles with
    `torch.compile(fullgraph=True)`: dynamo records one opaque call, and `fake` (same
    arguments, returns empty tensors of the output shapes and dtypes; for an op returning
    None, a no-op fake is registered for you) tells it the outputs. `mutates_args`: the
    arguments `fn` writes in place. `backward` / `setup_context`: as
    `torch.library.register_autograd`. Usable as a decorator:

        @kit.custom_op("mylib::softmax", fake=lambda x: torch.empty_like(x))
        def softmax(x: torch.Tensor) -> torch.Tensor:
            y = torch.empty_like(x)
            softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=...)
            return y
    """
    import torch

    def register(f):
        op = torch.library.custom_op(name, f, mutates_args=mutates_args,
                                     device_types=device_types, schema=schema)
        if fake is not None:
            op.register_fake(fake)
        elif f.__annotations__.get("return", "missing") in (None, "None"):
            op.register_fake(lambda *a, **k: None)
        if backward is not None:
            op.register_autograd(backward, setup_context=setup_context)
        return op

    return register(fn) if fn is not None else register

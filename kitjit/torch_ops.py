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
        from .launcher import _torch_or_none

        torch = _torch_or_none()
        if torch is None:  # no torch installed: nothing to trace, nothing to register
            return None

        @torch.library.custom_op(
            "kitjit::launch", mutates_args={"tensors"},
            schema="(str kernel, str consts, int num_warps, int num_ctas, int? maxnreg, "
                   "bool launch_pdl, str? arch, SymInt[] grid, Tensor(a!)[] tensors, "
                   "SymInt[] ints, float[] floats, str layout) -> ()")
        def launch(kernel, consts, num_warps, num_ctas, maxnreg, launch_pdl, arch, grid,
                   tensors, ints, floats, layout):
            jf = _KERNELS[kernel]
            kw = dict(zip(jf.constexprs, ast.literal_eval(consts)))
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
            opts = {"num_warps": num_warps, "num_ctas": num_ctas, "maxnreg": maxnreg,
                    "launch_pdl": launch_pdl, "arch": arch}
            for o, v in opts.items():  # an option-named parameter keeps its own value
                kw[f"_kit_o_{o}" if o in jf.params else o] = v
            jf._launch(tuple(grid), *args, **kw)

        @launch.register_fake
        def _(kernel, consts, num_warps, num_ctas, maxnreg, launch_pdl, arch, grid, tensors,
              ints, floats, layout):
            return None

        _op = launch
    return _op


def traced_launch(jf, grid, *args, **kwargs):
    """What `kernel[grid](...)` becomes while dynamo traces: the arguments bound by name as
    the eager launch binds them (a parameter named like a launch option takes the keyword,
    which is then the option too), the launch options checked, the grid evaluated, and one
    `kitjit::launch` call in the graph carrying the options."""
    from .launch_options import _check_arch_option, _check_options
    from .launcher import LAUNCH_OPTIONS

    opts = {o: kwargs.get(o, d) for o, d in LAUNCH_OPTIONS.items()}
    stream = kwargs.pop("stream", None)
    if stream is not None:
        raise TypeError(f"{jf.__name__}: stream= is not supported under torch.compile (the "
                        "graph's launch runs on the current stream); compile a function that "
                        "enters `with torch.cuda.stream(s):` instead, or launch outside it")
    for o in LAUNCH_OPTIONS:
        if o not in jf.params:
            kwargs.pop(o, None)
    if len(args) > len(jf.params):
        raise TypeError(f"{jf.__name__}() takes {len(jf.params)} arguments, got {len(args)}")
    bound = dict(zip(jf.params, args))
    for n, v in kwargs.items():
        if n not in jf.params:
            raise TypeError(f"{jf.__name__}() got an unexpected keyword argument '{n}'")
        if n in bound:
            raise TypeError(f"{jf.__name__}() got multiple values for argument '{n}'")
        bound[n] = v
    for n, d in jf._defaults.items():
        if n not in bound:
            bound[n] = d
    missing = [n for n in jf.params if n not in bound]
    if missing:
        raise TypeError(f"{jf.__name__}() missing required arguments: {', '.join(missing)}")
    num_warps = opts["num_warps"]
    if not isinstance(num_warps, int) or not 1 <= num_warps <= 32 or \
            (num_warps & (num_warps - 1) and num_warps % 4):
        raise ValueError(f"{jf.__name__}: num_warps must be a power of two from 1 to 32, or a "
                         f"whole number of warpgroups (12, 20, ...); got {num_warps!r}")
    _check_options(jf.__name__, opts["maxnreg"], opts["num_ctas"], opts["launch_pdl"])
    if opts["cluster"] is not None:
        raise ValueError(f"{jf.__name__}: cluster= is not supported under torch.compile yet; "
                         "launch clustered kernels outside the compiled region")
    _check_arch_option(jf.__name__, opts["arch"])
    consts = tuple(bound[n] for n in jf.constexprs)
    for n, c in zip(jf.constexprs, consts):
        if not (c is None or isinstance(c, (bool, int, float, str))):
            raise TypeError(f"{jf.__name__}: constexpr '{n}' is a {type(c).__name__}; under "
                            "torch.compile constexprs must be ints, floats, bools, strings "
                            "or None (or wrap the launch in kit.custom_op)")
    if callable(grid):  # as the eager launch calls it: every argument by name, num_warps
        grid = grid({**{n: bound[n] for n in jf.runtime_params},
                     **dict(zip(jf.constexprs, consts)), "num_warps": num_warps})
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
    _op(jf._op_name, repr(consts), num_warps, opts["num_ctas"], opts["maxnreg"],
        bool(opts["launch_pdl"]), opts["arch"], list(grid), tensors, ints, floats,
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

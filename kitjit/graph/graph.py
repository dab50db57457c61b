"""The kernel graph: a few PyTorch-level ops on tensors of fixed shape, built node by node,
and a float64 reference evaluator (what every generated kernel is verified against).

Shapes and strides are fixed when the graph is built, so the generated kernels bake them in
as constants (readable source, no shape arguments). Views (reshape, transpose) alias their
base's buffer with other strides; they never launch a kernel."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import torch

ELEMENTWISE_UNARY = ("exp", "silu", "gelu", "sqrt", "rsqrt", "neg")
ELEMENTWISE_BINARY = ("add", "sub", "mul", "div")
REDUCTIONS = ("sum", "max")
ROW_OPS = ("softmax", "rms_norm", "layer_norm")
VIEWS = ("reshape", "transpose")


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


def broadcast_shapes(a, b) -> tuple[int, ...]:
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ValueError(f"shapes {a} and {b} do not broadcast")
        out.append(max(x, y))
    return tuple(out)


@dataclass(eq=False)
class Tensor:
    """A node of the graph: an input, an op's result, or a view of one."""

    graph: KernelGraph
    id: int
    op: str
    inputs: tuple  # Tensor or python float (scalar operands of elementwise ops)
    shape: tuple[int, ...]
    dtype: torch.dtype
    attrs: dict = field(default_factory=dict)
    # views and inputs: strides into their base's buffer (inputs: the declared strides)
    strides: tuple[int, ...] | None = None

    @property
    def dims(self) -> tuple[int, ...]:
        return self.shape

    @property
    def is_view(self) -> bool:
        return self.op in VIEWS

    def base(self) -> Tensor:
        """The node that owns the buffer this tensor lives in."""
        t = self
        while t.is_view:
            t = t.inputs[0]
        return t

    def __repr__(self) -> str:
        return f"t{self.id}:{self.op}{list(self.shape)}"

    # python operators, for graphs written as formulas
    def __add__(self, o): return self.graph.add(self, o)
    def __radd__(self, o): return self.graph.add(o, self)
    def __sub__(self, o): return self.graph.sub(self, o)
    def __rsub__(self, o): return self.graph.sub(o, self)
    def __mul__(self, o): return self.graph.mul(self, o)
    def __rmul__(self, o): return self.graph.mul(o, self)
    def __truediv__(self, o): return self.graph.div(self, o)
    def __rtruediv__(self, o): return self.graph.div(o, self)
    def __matmul__(self, o): return self.graph.matmul(self, o)
    def __neg__(self): return self.graph.neg(self)


_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


class KernelGraph:
    """Build with new_input / ops / mark_output, then `superoptimize()`."""

    def __init__(self):
        self.nodes: list[Tensor] = []
        self.inputs: list[Tensor] = []
        self.outputs: list[Tensor] = []

    # ------------------------------------------------------------------ building
    def _node(self, op, inputs, shape, dtype, attrs=None, strides=None) -> Tensor:
        t = Tensor(self, len(self.nodes), op, tuple(inputs), tuple(int(d) for d in shape),
                   dtype, dict(attrs or {}), strides)
        self.nodes.append(t)
        return t

    def _own(self, t, what: str) -> Tensor:
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}: expected a tensor of this graph, got {type(t).__name__}")
        if t.graph is not self:
            raise ValueError(f"{what}: the tensor belongs to another graph")
        return t

    def new_input(self, dims, dtype=torch.float16, strides=None) -> Tensor:
        """An input of shape `dims`; `strides` (elements) default to contiguous. Tensors
        handed to the optimized callable must have these shapes (other strides are copied
        into the declared layout first)."""
        dtype = _torch_dtype(dtype)
        dims = tuple(int(d) for d in dims)
        if not dims or any(d < 1 for d in dims):
            raise ValueError(f"new_input: dims must be positive, got {dims}")
        strides = contiguous_strides(dims) if strides is None else tuple(int(s) for s in strides)
        if len(strides) != len(dims) or any(s < 0 for s in strides):
            raise ValueError(f"new_input: strides {strides} do not fit dims {dims}")
        t = self._node("input", (), dims, dtype, strides=strides)
        self.inputs.append(t)
        return t

    def mark_output(self, t: Tensor) -> None:
        self.outputs.append(self._own(t, "mark_output"))

    def matmul(self, a: Tensor, b: Tensor) -> Tensor:
        """Batched a @ b: a (..., M, K), b (..., K, N); batch dims broadcast as in torch."""
        a, b = self._own(a, "matmul"), self._own(b, "matmul")
        if len(a.shape) < 2 or len(b.shape) < 2:
            raise ValueError("matmul: both operands need at least 2 dims")
        if a.shape[-1] != b.shape[-2]:
            raise ValueError(f"matmul: inner dims differ: {a.shape} @ {b.shape}")
        if a.dtype != b.dtype or a.dtype not in (torch.float16, torch.bfloat16):
            raise NotImplementedError(
                f"matmul of {a.dtype} and {b.dtype} is not supported yet: kit.dot takes fp16 "
                "or bf16 operands of one dtype")
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        return self._node("matmul", (a, b), (*batch, a.shape[-2], b.shape[-1]), a.dtype)

    def _binary(self, op, a, b) -> Tensor:
        ts = [x for x in (a, b) if isinstance(x, Tensor)]
        if not ts:
            raise TypeError(f"{op}: at least one operand must be a tensor")
        for x in (a, b):
            if isinstance(x, Tensor):
                self._own(x, op)
            elif not isinstance(x, (int, float)):
                raise TypeError(f"{op}: operands are tensors or python numbers, got {x!r}")
        shape = ts[0].shape if len(ts) == 1 else broadcast_shapes(a.shape, b.shape)
        dtype = ts[0].dtype if len(ts) == 1 else torch.promote_types(a.dtype, b.dtype)
        ins = tuple(x if isinstance(x, Tensor) else float(x) for x in (a, b))
        return self._node(op, ins, shape, dtype)

    def add(self, a, b): return self._binary("add", a, b)
    def sub(self, a, b): return self._binary("sub", a, b)
    def mul(self, a, b): return self._binary("mul", a, b)
    def div(self, a, b): return self._binary("div", a, b)

    def _unary(self, op, x) -> Tensor:
        x = self._own(x, op)
        return self._node(op, (x,), x.shape, x.dtype)

    def exp(self, x): return self._unary("exp", x)
    def silu(self, x): return self._unary("silu", x)
    def gelu(self, x):
        """The exact (erf) GELU, torch's default."""
        return self._unary("gelu", x)
    def sqrt(self, x): return self._unary("sqrt", x)
    def rsqrt(self, x): return self._unary("rsqrt", x)
    def neg(self, x): return self._unary("neg", x)

    def _reduce(self, op, x, dim, keepdim) -> Tensor:
        x = self._own(x, op)
        d = _axis(dim, len(x.shape), op)
        shape = list(x.shape)
        shape[d] = 1
        r = self._node(op, (x,), shape, x.dtype, {"dim": d})
        if keepdim:
            return r
        return self.reshape(r, tuple(s for i, s in enumerate(x.shape) if i != d) or (1,))

    def sum(self, x, dim=-1, keepdim=False): return self._reduce("sum", x, dim, keepdim)
    def max(self, x, dim=-1, keepdim=False): return self._reduce("max", x, dim, keepdim)

    def softmax(self, x, dim=-1) -> Tensor:
        x = self._own(x, "softmax")
        return self._node("softmax", (x,), x.shape, x.dtype,
                          {"dim": _axis(dim, len(x.shape), "softmax")})

    def _norm_param(self, p, x, what):
        if p is None:
            return None
        p = self._own(p, what)
        if p.shape != (x.shape[-1],):
            raise ValueError(f"{what}: expected shape ({x.shape[-1]},), got {p.shape}")
        return p

    def rms_norm(self, x, weight=None, eps=1e-6) -> Tensor:
        """x * rsqrt(mean(x^2 over the last dim) + eps) * weight (torch's F.rms_norm)."""
        x = self._own(x, "rms_norm")
        w = self._norm_param(weight, x, "rms_norm weight")
        return self._node("rms_norm", (x,) + ((w,) if w is not None else ()), x.shape,
                          x.dtype, {"eps": float(eps), "weight": w is not None})

    def layer_norm(self, x, weight=None, bias=None, eps=1e-5) -> Tensor:
        """torch's F.layer_norm over the last dim."""
        x = self._own(x, "layer_norm")
        w = self._norm_param(weight, x, "layer_norm weight")
        b = self._norm_param(bias, x, "layer_norm bias")
        ins = (x,) + tuple(p for p in (w, b) if p is not None)
        return self._node("layer_norm", ins, x.shape, x.dtype,
                          {"eps": float(eps), "weight": w is not None, "bias": b is not None})

    def reshape(self, x, dims) -> Tensor:
        x = self._own(x, "reshape")
        dims = tuple(int(d) for d in dims)
        if -1 in dims:
            known = math.prod(d for d in dims if d != -1)
            dims = tuple(math.prod(x.shape) // known if d == -1 else d for d in dims)
        if math.prod(dims) != math.prod(x.shape):
            raise ValueError(f"reshape: {x.shape} has {math.prod(x.shape)} elements, "
                             f"{dims} {math.prod(dims)}")
        strides = _view_strides(x, dims)
        return self._node("reshape", (x,), dims, x.dtype, {"dims": dims}, strides)

    def transpose(self, x, dim0=-2, dim1=-1) -> Tensor:
        x = self._own(x, "transpose")
        n = len(x.shape)
        a, b = _axis(dim0, n, "transpose"), _axis(dim1, n, "transpose")
        perm = list(range(n))
        perm[a], perm[b] = perm[b], perm[a]
        st = buffer_strides(x)
        return self._node("transpose", (x,), [x.shape[p] for p in perm], x.dtype,
                          {"dims": (a, b)}, tuple(st[p] for p in perm) if st else None)

    # ------------------------------------------------------------------ using
    def signature(self) -> str:
        """A hash of the graph: nodes, shapes, strides, dtypes, attributes, outputs."""
        parts = []
        for t in self.nodes:
            ins = [f"t{x.id}" if isinstance(x, Tensor) else repr(x) for x in t.inputs]
            parts.append(f"{t.op}({','.join(ins)}){t.shape}{t.strides}{t.dtype}"
                         f"{sorted(t.attrs.items())}")
        parts.append("out:" + ",".join(f"t{t.id}" for t in self.outputs))
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def reference(self, inputs, dtype: torch.dtype | None = torch.float64
                  ) -> list[torch.Tensor]:
        """The graph's outputs computed by torch in float64 (the verification reference;
        on the inputs' device, so a GPU computes it when the inputs live there). With
        `dtype=None` every op runs in its graph dtype: what torch eager does with the same
        graph (the benchmark's eager and torch.compile baselines)."""
        if len(inputs) != len(self.inputs):
            raise ValueError(f"expected {len(self.inputs)} inputs, got {len(inputs)}")
        vals: dict[int, Any] = {}
        for t, x in zip(self.inputs, inputs):
            vals[t.id] = x if dtype is None else x.to(dtype)
        for t in self.nodes:
            if t.op != "input":
                vals[t.id] = _eval(t, [vals[x.id] if isinstance(x, Tensor) else x
                                       for x in t.inputs])
        return [vals[t.id] for t in self.outputs]

    def superoptimize(self, budget: float = 120.0, **kwargs):
        """Search fused kitjit kernels for this graph; returns a callable (see search.py)."""
        from .search import superoptimize

        return superoptimize(self, budget=budget, **kwargs)


def new_kernel_graph() -> KernelGraph:
    return KernelGraph()


def _torch_dtype(d) -> torch.dtype:
    if isinstance(d, torch.dtype):
        t = d
    else:
        name = getattr(d, "name", str(d)).replace("torch.", "")
        t = {"fp16": torch.float16, "float16": torch.float16, "bf16": torch.bfloat16,
             "bfloat16": torch.bfloat16, "fp32": torch.float32,
             "float32": torch.float32}.get(name)
    if t not in _DTYPES:
        raise NotImplementedError(f"dtype {d} is not supported yet (float16, bfloat16, "
                                  "float32)")
    return t


def _axis(dim, n, what) -> int:
    if not -n <= dim < n:
        raise ValueError(f"{what}: dim {dim} out of range for {n} dims")
    return dim % n


def buffer_strides(x: Tensor) -> tuple[int, ...] | None:
    """Strides of x in its base's buffer: inputs and views carry them; other nodes are
    materialized contiguous when stored."""
    if x.strides is not None:
        return x.strides
    return contiguous_strides(x.shape)


def _view_strides(x: Tensor, dims) -> tuple[int, ...]:
    """Strides that read x's buffer as `dims` (torch's view rule, on a meta tensor); a
    reshape that would need a copy is not supported yet."""
    st = buffer_strides(x)
    try:
        return tuple(torch.empty_strided(x.shape, st, device="meta").view(dims).stride())
    except RuntimeError:
        raise NotImplementedError(f"reshape of {x.shape} (strides {st}) to {tuple(dims)} "
                                  "would need a copy: not supported yet") from None


def _eval(t: Tensor, a: list) -> Any:
    op = t.op
    if op == "matmul":
        return a[0] @ a[1]
    if op == "add":
        return a[0] + a[1]
    if op == "sub":
        return a[0] - a[1]
    if op == "mul":
        return a[0] * a[1]
    if op == "div":
        return a[0] / a[1]
    if op == "exp":
        return torch.exp(a[0])
    if op == "neg":
        return -a[0]
    if op == "silu":
        return torch.nn.functional.silu(a[0])
    if op == "gelu":
        return torch.nn.functional.gelu(a[0])
    if op == "sqrt":
        return torch.sqrt(a[0])
    if op == "rsqrt":
        return torch.rsqrt(a[0])
    if op == "sum":
        return a[0].sum(t.attrs["dim"], keepdim=True)
    if op == "max":
        return a[0].amax(t.attrs["dim"], keepdim=True)
    if op == "softmax":
        return torch.softmax(a[0], t.attrs["dim"])
    if op == "rms_norm":
        w = a[1] if t.attrs["weight"] else None
        return torch.nn.functional.rms_norm(a[0], (a[0].shape[-1],), w, t.attrs["eps"])
    if op == "layer_norm":
        w = a[1] if t.attrs["weight"] else None
        b = a[1 + t.attrs["weight"]] if t.attrs["bias"] else None
        return torch.nn.functional.layer_norm(a[0], (a[0].shape[-1],), w, b, t.attrs["eps"])
    if op == "reshape":
        return a[0].reshape(t.shape)
    if op == "transpose":
        return a[0].transpose(*t.attrs["dims"])
    raise NotImplementedError(op)

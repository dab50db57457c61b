"""kit.graph: write a small PyTorch-level graph (matmul, softmax, norms, elementwise ops,
reductions, views), call `superoptimize()`, get fused kitjit kernels found by search and
verified against a float64 reference, as readable kitjit source (`opt.source()`)."""

from .graph import KernelGraph, Tensor, new_kernel_graph
from .search import Optimized, superoptimize

__all__ = ["KernelGraph", "Tensor", "new_kernel_graph", "Optimized", "superoptimize"]

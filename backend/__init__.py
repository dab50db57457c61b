"""Tile IR -> LLVM IR (NVVM) -> PTX -> cubin, and the resource report."""

"""What the tests against Triton 3.6's frozen tables share (tests/test_triton_semantics_*.py):
the dtype names the tables use, their torch and kitjit dtypes, and the table loader. The
generators in tests/data/ write the same names (they run beside Triton, not here)."""

from __future__ import annotations

import json
import os

import torch

import kitjit as kit

#: every tile dtype of the tables, in their order
NAMES = ["i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "fp16", "bf16", "fp32",
         "fp64"]
TORCH = {"i1": torch.bool, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32,
         "i64": torch.int64, "u8": torch.uint8, "u16": torch.uint16, "u32": torch.uint32,
         "u64": torch.uint64, "fp16": torch.float16, "bf16": torch.bfloat16,
         "fp32": torch.float32, "fp64": torch.float64}
#: the kitjit dtype of each name, and its spelling in a generated kernel (`kit.<name>`)
KIT_NAME = {"i1": "int1", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
            "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
            "fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64"}
KIT = {n: getattr(kit, s) for n, s in KIT_NAME.items()}


def load_table(filename: str) -> dict:
    """A frozen table of tests/data/, without its `_about` text."""
    with open(os.path.join(os.path.dirname(__file__), "data", filename)) as f:
        table = json.load(f)
    table.pop("_about")
    return table

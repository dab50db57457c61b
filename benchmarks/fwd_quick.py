"""Forward attention TFLOP/s of whichever kitjit this process imports, against cuDNN's, on the
benchmark's six cases (interleaved timing, as benchmarks/bwd_variants.py). Run it with two
trees to compare their forwards in one session:

    PYTHONPATH=/path/to/other/tree python benchmarks/fwd_quick.py
"""

import sys

import torch
import torch.nn.functional as F
from bwd_variants import CASES, interleaved

import kitjit
from kitjit.nn.attention import attention


def main() -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    print("kitjit from", kitjit.__file__)
    only = sys.argv[1:]   # e.g. "B4 H32 S4096 D128 causal" names to keep
    for B, H, S, D in CASES:
        for causal in (False, True):
            name = f"B{B} H{H} S{S} D{D}{' causal' if causal else ''}"
            if only and name not in only:
                continue
            q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                       for _ in range(3))
            flop = 4 * B * H * S * S * D / (2 if causal else 1) / 1e9

            def cudnn():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            ms = interleaved({"kitjit": lambda: attention(q, k, v, causal), "cudnn": cudnn})
            print(f"fwd {name}: kitjit "
                  f"{flop / ms['kitjit']:.1f} cudnn {flop / ms['cudnn']:.1f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()

"""Decode configs (K/V stages, key block, splits) against torch's cuDNN and flash backends on
the bandwidth-bound shapes, in interleaved rounds (issue 12: on an H200 the default trails
cuDNN by 3-8% at B8 Skv 16K/32K and B64; which config closes it?).

    python benchmarks/decode_sweep.py [--quick] [--wave] [--variants]

--variants: the kernel variants of attention_decode (issue 12, B64 and B8 32K at 0.92-0.97x
cuDNN): `kvbar` K and V on barriers of their own (K refilled right after S = Q Kᵀ), `pers*`
a persistent grid (programs per SM, stages; the K/V ring streams across work items), `b`: the
split count that balances the items over the programs (benchmarks/decode_sweep.py's
`balanced_splits`), `kv`: with kvbar's barriers; `swap*`: the MMAs' operands swapped (keys on
the MMA's rows, the 4 query rows of a group on its N: an eighth of the MMA and softmax work).

Shapes: bf16, H 32 / Hkv 8, Sq 1, D 128. Each config is checked against a float64 reference
before it is timed (a config that fails to build or is wrong prints why). Figures: us per
call (CUDA events over back-to-back calls, best of ROUNDS), GB/s of the K/V cache read.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from kitjit.nn.attention_decode import attention_decode, num_splits
from kitjit.testing import rel_error

ROUNDS = 3
SHAPES = [(1, 4096), (1, 32768), (8, 4096), (8, 16384), (8, 32768), (64, 4096), (64, 16384),
          (64, 32768)]
VARIANT_SHAPES = [(1, 4096), (8, 16384), (8, 32768), (64, 4096), (64, 16384)]
VARIANTS = {"default": {}, "kvbar": dict(kv_barriers=True),
            "pers1s4": dict(persistent=1, STAGES=4), "pers1s5": dict(persistent=1, STAGES=5),
            "pers2s2": dict(persistent=2, STAGES=2),
            "pers1s4kv": dict(persistent=1, STAGES=4, kv_barriers=True),
            "pers1s4b": "balanced", "swap": dict(swap=True), "swaps3": dict(swap=True, STAGES=3)}
WAVE_SHAPES = [(1, 4096), (1, 16384), (1, 32768), (8, 4096), (8, 16384), (8, 32768), (64, 4096)]
CONFIGS = {"default": {}, "s2": dict(STAGES=2), "s3": dict(STAGES=3), "s4": dict(STAGES=4),
           "bn128": dict(BN=128), "bn128s3": dict(BN=128, STAGES=3),
           "split2": dict(splits=2), "split2s3": dict(splits=2, STAGES=3)}


def balanced_splits(heads: int, n_blocks: int, programs: int) -> int:
    """The fewest key chunks per K/V head (at most 64) whose items (heads x chunks) spread
    over `programs` persistent programs with every program within 1% of the busiest."""
    best, best_eff = 1, 0.0
    for s in range(1, min(64, n_blocks) + 1):
        chunk = -(-n_blocks // s)
        items = heads * -(-n_blocks // chunk)
        eff = items / programs / -(-items // programs)
        if eff > best_eff + 1e-9:
            best, best_eff = s, eff
        if eff >= 0.99:
            break
    return best


def per_call_us(fn, n: int = 50) -> float:
    for _ in range(3):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / n * 1e3


def torch_backend(q, k, v, backend):
    def run():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    return run


def main() -> None:
    global CONFIGS
    shapes = SHAPES[:2] if "--quick" in sys.argv else SHAPES
    if "--variants" in sys.argv:
        shapes, CONFIGS = VARIANT_SHAPES, VARIANTS
    if "--wave" in sys.argv:   # num_splits for one program per SM instead of two
        shapes, CONFIGS = WAVE_SHAPES, {"default": {}, "wave1": "wave1"}
    print(f"{'shape':>12} " + " ".join(f"{n:>9}" for n in [*CONFIGS, "cudnn", "flash"])
          + "   best/cuDNN  GB/s(best)")
    for B, SK in shapes:
        g = torch.Generator(device="cuda").manual_seed(SK + B)
        q = torch.randn(B, 32, 1, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(B, 8, SK, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(B, 8, SK, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        ends = [0, B - 1]   # the first and last batch (memory); a persistent grid's last
        ref = F.scaled_dot_product_attention(q[ends].double(), k[ends].double(),   # items
                                             v[ends].double(), enable_gqa=True)
        runs = {}
        for name, cfg in CONFIGS.items():
            if cfg == "wave1":
                cfg = dict(splits=num_splits(B * 8, SK // 64, torch.cuda.get_device_properties(
                    0).multi_processor_count // 2))
            elif cfg == "balanced":
                cfg = dict(persistent=1, STAGES=4, splits=balanced_splits(
                    B * 8, SK // 64, torch.cuda.get_device_properties(0).multi_processor_count))
            def run(cfg=cfg):
                return attention_decode(q, k, v, **cfg)[0]
            try:
                out = run()
                err = rel_error(out[ends], ref)
                if not err <= 1e-2:
                    print(f"  {name}: wrong, rel. error {err:.3g}")
                    continue
            except Exception as e:   # noqa: BLE001  (a config that does not build is reported)
                print(f"  {name}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
                continue
            runs[name] = run
        runs["cudnn"] = torch_backend(q, k, v, SDPBackend.CUDNN_ATTENTION)
        runs["flash"] = torch_backend(q, k, v, SDPBackend.FLASH_ATTENTION)
        us = {n: per_call_us(f) for n, f in runs.items()}
        for _ in range(ROUNDS - 1):
            for n, f in runs.items():
                us[n] = min(us[n], per_call_us(f))
        ours = {n: t for n, t in us.items() if n in CONFIGS}
        best = min(ours, key=ours.get)
        gbs = 2 * k.numel() * k.element_size() / (ours[best] * 1e-6) / 1e9
        cells = " ".join(f"{us[n]:9.1f}" if n in us else f"{'-':>9}"
                         for n in [*CONFIGS, "cudnn", "flash"])
        print(f"{f'B{B} {SK // 1024}K':>12} {cells}   {us['cudnn'] / ours[best]:.3f} {best:>8}"
              f"  {gbs:.0f}  (default/cuDNN {us['cudnn'] / us['default']:.3f})", flush=True)


if __name__ == "__main__":
    main()

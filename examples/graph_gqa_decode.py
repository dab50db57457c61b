"""kit.graph: grouped-query attention at decode time (one new token per sequence; 32 query
heads share 8 KV heads). Written as a user would in PyTorch: the query heads of a group
are a reshape, K and V broadcast over them, one scaled softmax between two matmuls. The
search may pack each group's query heads into the rows of one program (K and V read once
per KV head), split the keys over programs with a combine kernel or the last split program
merging (flash-decoding), feed K/V tiles by TMA to WGMMA (level 2, as
kitjit/nn/attention_decode.py), or run one row per program on the CUDA cores."""

import math

import torch

import kitjit as kit
from kitjit.testing import check, device, has_gpu


def build(batch: int, heads: int = 32, kv_heads: int = 8, keys: int = 4096, d: int = 128,
          dtype=kit.float16):
    g = kit.graph.new_kernel_graph()
    group = heads // kv_heads
    q = g.new_input(dims=(batch, heads, 1, d), dtype=dtype)
    k = g.new_input(dims=(batch, kv_heads, keys, d), dtype=dtype)    # the KV cache
    v = g.new_input(dims=(batch, kv_heads, keys, d), dtype=dtype)
    q5 = g.reshape(q, (batch, kv_heads, group, 1, d))
    k5 = g.reshape(k, (batch, kv_heads, 1, keys, d))
    v5 = g.reshape(v, (batch, kv_heads, 1, keys, d))
    s = g.matmul(q5, g.transpose(k5, -2, -1)) * (1.0 / math.sqrt(d))
    o = g.matmul(g.softmax(s, dim=-1), v5)
    g.mark_output(g.reshape(o, (batch, heads, 1, d)))
    return g


def torch_gqa(q, k, v):
    """The same computation in torch (eager / torch.compile baselines)."""
    b, h, _, d = q.shape
    hk = k.shape[1]
    q5 = q.view(b, hk, h // hk, 1, d)
    s = q5 @ k.unsqueeze(2).transpose(-2, -1) * (1.0 / math.sqrt(d))
    return (torch.softmax(s, dim=-1) @ v.unsqueeze(2)).view(b, h, 1, d)


def main(batch: int = 8, heads: int = 32, kv_heads: int = 8, keys: int = 4096, d: int = 128,
         **search) -> None:
    if not has_gpu():
        batch, heads, kv_heads, keys, d = 2, 4, 2, 48, 32
    dev = device()
    opt = build(batch, heads, kv_heads, keys, d).superoptimize(**search)
    q = torch.randn(batch, heads, 1, d, device=dev, dtype=torch.float16)
    k = torch.randn(batch, kv_heads, keys, d, device=dev, dtype=torch.float16)
    v = torch.randn(batch, kv_heads, keys, d, device=dev, dtype=torch.float16)
    err = check(opt(q, k, v)[0], torch_gqa(q.double(), k.double(), v.double()), 1e-2)
    print(f"graph GQA decode B{batch} H{heads}/{kv_heads} S{keys} D{d}: rel err {err:.2e} "
          f"plan {opt.info['plan']} ({'GPU' if has_gpu() else 'interpreter'})")


if __name__ == "__main__":
    main()

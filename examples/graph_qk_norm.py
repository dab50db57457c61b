"""kit.graph: QK-normalization before attention (rms_norm of each query and key over the
head dim, then scaled softmax attention; Mirage's shapes: 16 heads x 256 queries against
4096 keys, head dim 64). The search may fuse both norms into the attention kernel: a
query tile is normalized once when loaded, each key tile as it streams in."""

import torch

import kitjit as kit
from kitjit.testing import check, device, has_gpu


def build(heads: int, queries: int, keys: int, d: int, dtype=kit.float16):
    g = kit.graph.new_kernel_graph()
    q = g.new_input(dims=(heads, queries, d), dtype=dtype)
    k = g.new_input(dims=(heads, keys, d), dtype=dtype)
    v = g.new_input(dims=(heads, keys, d), dtype=dtype)
    wq = g.new_input(dims=(d,), dtype=dtype)
    wk = g.new_input(dims=(d,), dtype=dtype)
    qn = g.rms_norm(q, wq, eps=1e-6)
    kn = g.rms_norm(k, wk, eps=1e-6)
    s = g.matmul(qn, g.transpose(kn, -2, -1)) * (d ** -0.5)
    g.mark_output(g.matmul(g.softmax(s, dim=-1), v))
    return g


def torch_qk_norm(q, k, v, wq, wk):
    d = q.shape[-1]
    qn = torch.nn.functional.rms_norm(q, (d,), wq, 1e-6)
    kn = torch.nn.functional.rms_norm(k, (d,), wk, 1e-6)
    return torch.softmax(qn @ kn.transpose(-2, -1) * d ** -0.5, dim=-1) @ v


def main(heads: int = 16, queries: int = 256, keys: int = 4096, d: int = 64,
         **search) -> None:
    if not has_gpu():
        heads, queries, keys, d = 2, 20, 48, 32
    dev = device()
    opt = build(heads, queries, keys, d).superoptimize(**search)
    q = torch.randn(heads, queries, d, device=dev, dtype=torch.float16)
    k = torch.randn(heads, keys, d, device=dev, dtype=torch.float16)
    v = torch.randn(heads, keys, d, device=dev, dtype=torch.float16)
    wq = torch.rand(d, device=dev, dtype=torch.float16) + 0.5
    wk = torch.rand(d, device=dev, dtype=torch.float16) + 0.5
    ref = torch_qk_norm(*(x.double() for x in (q, k, v, wq, wk)))
    err = check(opt(q, k, v, wq, wk)[0], ref, 1e-2)
    print(f"graph QK-norm attention {heads}x{queries}x{keys} D{d}: rel err {err:.2e} plan "
          f"{opt.info['plan']} ({'GPU' if has_gpu() else 'interpreter'})")


if __name__ == "__main__":
    main()

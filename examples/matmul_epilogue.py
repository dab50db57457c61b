"""A GEMM with its epilogue fused: out = act(x @ w.T + bias) [* (x @ w_up.T)] [* row_scale]
[+ residual], the shape of a transformer's linear layers (w is [N, K], as nn.Linear stores
its weight). The epilogue is plain kitjit code after the mainloop: it runs on the fp32
accumulator while it is still in registers, so bias, activation, gate, scale and residual
cost no extra pass over C through memory.

The mainloop is examples/matmul.py's (persistent, TMA ring across tiles, WGMMA); with a
second weight (SwiGLU / GEGLU: act(x @ w_gate.T) * (x @ w_up.T)) each stage holds a tile of
both weights and the warpgroups keep two accumulators, so x is read once for both.
"""

import torch
import torch.nn.functional as F
from matmul import load_stage, num_sms, refill, tile_origin

import kitjit as kit
from kitjit.testing import bench, check, device, has_gpu


@kit.jit
def matmul_epilogue_kernel(A, B, B2, C, BIAS, RES, SCALE, M, N, K, BM: kit.constexpr,
                           BN: kit.constexpr, BK: kit.constexpr, STAGES: kit.constexpr,
                           GROUP: kit.constexpr, ACT: kit.constexpr, HAS_BIAS: kit.constexpr,
                           GATED: kit.constexpr, HAS_SCALE: kit.constexpr,
                           HAS_RES: kit.constexpr):
    a = kit.shared((STAGES, BM, BK), A.dtype.element_ty)
    b = kit.shared((STAGES, BN, BK), B.dtype.element_ty)   # w is [N, K]: K-major tiles
    b2 = kit.shared((STAGES, BN, BK), B.dtype.element_ty) if GATED else None
    ready = kit.mbarriers(STAGES)
    n_k = kit.cdiv(K, BK)
    n_tiles = kit.cdiv(M, BM) * kit.cdiv(N, BN)
    step, first = kit.num_programs(0), kit.program_id(0)
    B2g = B2 if GATED else None
    for s in kit.static_range(STAGES - 1):                   # prologue, as in matmul.py
        t = first + s // n_k * step
        if t < n_tiles:
            m0, n0, k0 = tile_origin(t, M, N, n_k, BM, BN, BK, GROUP, 1)
            load_stage(a, b, ready, A, B, m0, n0, k0, s % n_k, s, BK, STAGES, True, b2, B2g)
    it = 0
    for tile in range(first, n_tiles, step):
        m0, n0, k0 = tile_origin(tile, M, N, n_k, BM, BN, BK, GROUP, 1)
        m1, n1, k1 = tile_origin(tile + step, M, N, n_k, BM, BN, BK, GROUP, 1)
        acc = kit.zeros((BM, BN), kit.float32)
        up = kit.zeros((BM, BN), kit.float32)               # (unused unless GATED)
        for kk in range(n_k):
            kit.mbarrier_wait(ready[it % STAGES], it // STAGES % 2)
            acc = kit.mma(a[it % STAGES], b[it % STAGES].T, acc, pending=1)
            if GATED:
                up = kit.mma(a[it % STAGES], b2[it % STAGES].T, up, pending=1)
            refill(a, b, ready, A, B, tile, step, n_tiles, kk, it, m0, n0, k0, m1, n1, k1, M,
                   N, n_k, BM, BN, BK, STAGES, GROUP, True, 1, b2, B2g)
            it += 1
        # ---- the epilogue: fp32 math on the accumulator registers, then one store
        rm = m0 + kit.arange(0, BM)
        rn = n0 + kit.arange(0, BN)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        if HAS_BIAS:
            acc += kit.load(BIAS + rn, mask=rn < N, other=0.0).to(kit.float32)[None, :]
        if ACT == "gelu":                                    # exact GELU (torch's default)
            acc = 0.5 * acc * (1.0 + kit.erf(acc * 0.7071067811865476))
        elif ACT == "silu":                                  # `/` is div.full.f32 (2 ulp):
            acc = acc / (1.0 + kit.exp(-acc))                # no IEEE slow path to spill
        if GATED:                                            # SwiGLU / GEGLU
            acc = acc * up
        if HAS_SCALE:                                        # per-row (per-token) scale
            acc = acc * kit.load(SCALE + rm, mask=rm < M, other=0.0).to(kit.float32)[:, None]
        if HAS_RES:                                          # residual stream
            acc += kit.load(RES + rm[:, None] * N + rn[None, :], mask=mask,
                            other=0.0).to(kit.float32)
        kit.store(C + rm[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty), mask=mask)


# one accumulator: 256x128 tiles (matmul.py's 128x256 turned: the bias and column vectors
# then take half the registers, which the activation needs); two (gated): 128x128 each,
# three tiles of 128x64 per stage (48 KB)
DEFAULT = dict(BM=256, BN=128, BK=64, STAGES=4, num_warps=8)
DEFAULT_GATED = dict(BM=128, BN=128, BK=64, STAGES=4, num_warps=8)


def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
           act: str = "none", w_up: torch.Tensor | None = None,
           row_scale: torch.Tensor | None = None, residual: torch.Tensor | None = None,
           **config) -> torch.Tensor:
    """act(x @ w.T + bias) [* (x @ w_up.T)] [* row_scale[:, None]] [+ residual], one kernel.
    x [M, K], w and w_up [N, K] (bf16/fp16, K a multiple of 8), bias [N], row_scale [M],
    residual [M, N]; act is 'none', 'gelu' or 'silu' (with w_up: SwiGLU / GEGLU)."""
    if act not in ("none", "gelu", "silu"):
        raise ValueError(f"act must be 'none', 'gelu' or 'silu', got {act!r}")
    M, K = x.shape
    N = w.shape[0]
    for name, t, shape in (("w", w, (N, K)), ("w_up", w_up, (N, K)), ("bias", bias, (N,)),
                           ("row_scale", row_scale, (M,)), ("residual", residual, (M, N))):
        if t is not None and (tuple(t.shape) != shape or not t.is_contiguous()):
            raise ValueError(f"{name} must be a contiguous {list(shape)} tensor, got "
                             f"{list(t.shape)}")
    c = torch.empty(M, N, device=x.device, dtype=x.dtype)
    cfg = dict(DEFAULT_GATED if w_up is not None else DEFAULT, **config)
    grid = (min(kit.cdiv(M, cfg["BM"]) * kit.cdiv(N, cfg["BN"]), num_sms(x.device)),)
    matmul_epilogue_kernel[grid](
        x, w, w if w_up is None else w_up, c, c if bias is None else bias,
        c if residual is None else residual, c if row_scale is None else row_scale, M, N, K,
        GROUP=8, ACT=act, HAS_BIAS=bias is not None, GATED=w_up is not None,
        HAS_SCALE=row_scale is not None, HAS_RES=residual is not None, **cfg)
    return c


def reference(x, w, bias=None, act="none", w_up=None, row_scale=None, residual=None):
    """The same in float64 torch."""
    y = x.double() @ w.double().T
    if bias is not None:
        y = y + bias.double()
    y = {"none": y, "gelu": F.gelu(y), "silu": F.silu(y)}[act]
    if w_up is not None:
        y = y * (x.double() @ w_up.double().T)
    if row_scale is not None:
        y = y * row_scale.double()[:, None]
    if residual is not None:
        y = y + residual.double()
    return y


def main() -> None:
    dev = device()
    M, N, K = (300, 264, 200) if has_gpu() else (100, 72, 96)
    small = {} if has_gpu() else dict(BM=64, BN=64, BK=32, STAGES=3, num_warps=4)
    x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    w, wu = (torch.randn(N, K, device=dev, dtype=torch.bfloat16) / K ** 0.5 for _ in "12")
    bias = torch.randn(N, device=dev, dtype=torch.bfloat16)
    res = torch.randn(M, N, device=dev, dtype=torch.bfloat16)
    scale = torch.rand(M, device=dev, dtype=torch.bfloat16) + 0.5
    cases = {"bias+gelu": dict(bias=bias, act="gelu"), "bias+silu": dict(bias=bias, act="silu"),
             "scale+residual": dict(row_scale=scale, residual=res),
             "swiglu": dict(act="silu", w_up=wu)}
    for name, kw in cases.items():
        err = check(linear(x, w, **kw, **small), reference(x, w, **kw), 1e-2, name)
        print(f"linear {M}x{N}x{K} {name}: rel err {err:.2e} "
              f"({'GPU' if has_gpu() else 'interpreter'})")
    if has_gpu():
        M, N, K = 8192, 8192, 4096
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w, wu = (torch.randn(N, K, device="cuda", dtype=torch.bfloat16) for _ in "12")
        bias = torch.randn(N, device="cuda", dtype=torch.bfloat16)
        ms_k = bench(lambda: linear(x, w, bias, "gelu"))
        ms_t = bench(lambda: F.gelu(F.linear(x, w, bias)))
        print(f"  {M}x{N}x{K} bias+gelu: kitjit {ms_k:.3f} ms, cuBLAS + torch {ms_t:.3f} ms "
              f"({ms_t / ms_k:.2f}x)")
        ms_k = bench(lambda: linear(x, w, act="silu", w_up=wu))
        ms_t = bench(lambda: F.silu(F.linear(x, w)) * F.linear(x, wu))
        print(f"  {M}x{N}x{K} swiglu: kitjit {ms_k:.3f} ms, cuBLAS + torch {ms_t:.3f} ms "
              f"({ms_t / ms_k:.2f}x)")


if __name__ == "__main__":
    main()

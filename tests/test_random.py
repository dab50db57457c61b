"""kit.randint/rand/randn/philox: bit-identical to Philox-4x32-10 (Random123's known
answers, and an independent numpy Philox written from the paper), the seed split into two
keys as Triton does, uniform/normal sanity, a deterministic dropout mask; kit.umulhi; the
PTX (mul.hi) and no spills."""

import pathlib

import numpy as np
import pytest
import torch
from random_kernels import (
    dropout_kernel,
    philox_kernel,
    rand_kernel,
    randint4x_kernel,
    randint64_kernel,
    umulhi_kernel,
)

import kitjit as kit

KERNELS = str(pathlib.Path(__file__).resolve().parent / "random_kernels.py")
M32, M64 = (1 << 32) - 1, (1 << 64) - 1


def philox_ref(ctr, key, rounds=10, w=32):
    """Philox-4xW (Salmon et al., SC'11) on Python ints: each round multiplies c0 and c2
    by the round constants, swaps the words and xors in the key; the key then steps by the
    Weyl constants."""
    if w == 32:
        ma, mb, ka, kb, mask = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85, M32
    else:
        ma, mb, ka, kb, mask = (0xD2E7470EE14C6C93, 0xCA5A826395121157, 0x9E3779B97F4A7C15,
                                0xBB67AE8584CAA73B, M64)
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(rounds):
        p0, p1 = ma * c0, mb * c2
        c0, c1, c2, c3 = ((p1 >> w) ^ c1 ^ k0) & mask, p1 & mask, \
            ((p0 >> w) ^ c3 ^ k1) & mask, p0 & mask
        k0, k1 = (k0 + ka) & mask, (k1 + kb) & mask
    return c0, c1, c2, c3


def philox_np(offsets, seed):
    """Vectorized Philox-4x32-10 of counters (offset, 0, 0, 0), keys = the seed's words."""
    seed &= M64
    c = [np.asarray(offsets, np.int64).astype(np.uint32)] + \
        [np.zeros(len(offsets), np.uint32)] * 3
    k0, k1 = np.uint32(seed & M32), np.uint32(seed >> 32)
    for _ in range(10):
        p0 = c[0].astype(np.uint64) * np.uint64(0xD2511F53)
        p1 = c[2].astype(np.uint64) * np.uint64(0xCD9E8D57)
        hi = lambda p: (p >> np.uint64(32)).astype(np.uint32)  # noqa: E731
        c = [hi(p1) ^ c[1] ^ k0, p1.astype(np.uint32), hi(p0) ^ c[3] ^ k1, p0.astype(np.uint32)]
        with np.errstate(over="ignore"):
            k0, k1 = k0 + np.uint32(0x9E3779B9), k1 + np.uint32(0xBB67AE85)
    return c


KAT = [  # Random123 kat_vectors, philox4x32_10: counter, key -> output
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((M32,) * 4, (M32, M32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def _s32(x):
    return x - (1 << 32) if x >= 1 << 31 else x


def test_reference_matches_known_answers():
    for ctr, key, want in KAT:
        assert philox_ref(ctr, key) == want
        c = philox_np([ctr[0]], key[0] | key[1] << 32)
        if ctr[1:] == (0, 0, 0):
            assert tuple(int(x[0]) for x in c) == want


@pytest.mark.parametrize("case", range(len(KAT)))
def test_philox_impl_known_answers(case):
    ctr, key, want = KAT[case]
    out = torch.full((16 * 4,), 7, dtype=torch.int32)
    philox_kernel[(1,)](out, *map(_s32, ctr), *map(_s32, key), BLOCK=16)
    got = out.view(16, 4).numpy().view(np.uint32)
    assert (got == np.array(want, np.uint32)).all()


@pytest.mark.parametrize("seed", [0, 12345, -7, 0x1234_5678_9ABC_DEF0])
def test_randint4x_matches_philox(seed):
    n = 300  # not a multiple of the block
    out = torch.full((4 * n,), 7, dtype=torch.int32)
    randint4x_kernel[(3,)](out, seed, n, BLOCK=128)
    ref = philox_np(np.arange(n), seed)
    got = out.view(4, n).numpy().view(np.uint32)
    for i in range(4):
        np.testing.assert_array_equal(got[i], ref[i])


def test_randint_64bit_offsets_is_philox_4x64():
    n, seed = 37, 987654321
    out = torch.zeros(n, dtype=torch.int64)
    randint64_kernel[(1,)](out, seed, n, BLOCK=64)
    ref = [philox_ref((i, 0, 0, 0), (seed, 0), w=64)[0] for i in range(n)]
    assert [x & M64 for x in out.tolist()] == ref


def test_rand_uniform_and_randn_normal():
    n, seed = 1 << 16, 42
    u = torch.full((n,), float("nan"))
    z = torch.full((n,), float("nan"))
    rand_kernel[(n // 1024,)](u, z, seed, n, BLOCK=1024)
    # rand: the int32 bits folded to >= 0, times 4.6566127342e-10, in fp32: exactly
    x = philox_np(np.arange(n), seed)[0].view(np.int32)
    x = np.where(x < 0, -x - 1, x)
    np.testing.assert_array_equal(u.numpy(), x.astype(np.float32) * np.float32(4.6566127342e-10))
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean().item() - 0.5) < 0.01 and abs(u.var().item() - 1 / 12) < 0.005
    assert abs(z.mean().item()) < 0.02 and abs(z.var().item() - 1) < 0.03
    assert torch.isfinite(z).all()


def test_dropout_mask_is_deterministic():
    n, p = 1000, 0.3
    x = torch.randn(n) + 3.0  # never zero

    def run(seed):
        y = torch.full((n,), float("nan"))
        dropout_kernel[(2,)](x, y, n, p, seed, BLOCK=512)
        return y

    y1, y2, y3 = run(1234), run(1234), run(999)
    assert torch.equal(y1, y2) and not torch.equal(y1 != 0, y3 != 0)
    keep = _rand_ref(np.arange(n), 1234) > np.float32(p)
    np.testing.assert_array_equal((y1 != 0).numpy(), keep)
    torch.testing.assert_close(y1[y1 != 0], x[y1 != 0] / (1 - p))
    assert 0.6 < keep.mean() < 0.8


def _rand_ref(offsets, seed):
    x = philox_np(offsets, seed)[0].view(np.int32)
    return np.where(x < 0, -x - 1, x).astype(np.float32) * np.float32(4.6566127342e-10)


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint32, torch.int64, torch.uint64])
def test_umulhi(dtype):
    bits = 32 if dtype in (torch.int32, torch.uint32) else 64
    n = 50
    rng = np.random.default_rng(bits)
    a = rng.integers(0, 1 << bits, n, dtype=np.uint64 if bits == 64 else np.int64)
    b = rng.integers(0, 1 << bits, n, dtype=np.uint64 if bits == 64 else np.int64)
    npdt = {torch.int32: np.int32, torch.uint32: np.uint32, torch.int64: np.int64,
            torch.uint64: np.uint64}[dtype]
    ta = torch.from_numpy(a.astype(npdt))
    tb = torch.from_numpy(b.astype(npdt))
    out = torch.zeros(n, dtype=dtype)
    umulhi_kernel[(1,)](ta, tb, out, n, BLOCK=64)
    mask = (1 << bits) - 1
    ref = [((int(x) & mask) * (int(y) & mask)) >> bits for x, y in zip(a, b)]
    got = [int(v) & mask for v in out.numpy().astype(npdt).view(f"u{bits // 8}")]
    assert got == ref


def test_sass_philox_uses_mul_hi_and_does_not_spill():
    from kitjit import tools

    if tools.find_tool("cuobjdump") is None:
        pytest.skip("cuobjdump not found")
    ck = kit.compile_aot(KERNELS, "randint4x_kernel", ["*i32:16", "i32", "i32"],
                         {"BLOCK": 512}, 4, "sm_90a")
    assert "mul.hi.u32" in ck.asm["ptx"]
    assert ck.metadata["spills"] == 0 and ck.n_spills == 0
    ops = tools.sass_opcodes(tools.disassemble(ck.asm["cubin"]))
    assert any(o.startswith("IMAD.WIDE.U32") or o.startswith("IMAD.HI") for o in ops), ops


@pytest.mark.gpu
def test_gpu_randint_and_rand_bit_identical():
    n, seed = 5000, 0xDEADBEEF12
    out = torch.empty(4 * n, dtype=torch.int32, device="cuda")
    randint4x_kernel[(-(-n // 1024),)](out, seed, n, BLOCK=1024)
    ref = philox_np(np.arange(n), seed)
    got = out.view(4, n).cpu().numpy().view(np.uint32)
    for i in range(4):
        np.testing.assert_array_equal(got[i], ref[i])
    u = torch.empty(n, device="cuda")
    z = torch.empty(n, device="cuda")
    rand_kernel[(-(-n // 1024),)](u, z, seed, n, BLOCK=1024)
    np.testing.assert_array_equal(u.cpu().numpy(), _rand_ref(np.arange(n), seed))

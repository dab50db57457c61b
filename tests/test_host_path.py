"""kitjit.nn's host path (kitjit/nn/_host.py) and the TMA descriptor cache, on the CPU.

The descriptor cache (`driver.tensor_map`) must never hand out a map encoded for another
tensor: every input of the encoding (pointer, shape, strides, element type and so size, box,
swizzle) is in its key. The ops' direct launches (after a route's first, checked launch)
must pass exactly what the checked launch passes: FakeDriver(ir_compile=True) builds the
real kernels' tile IR for sm_90a (their parameters and TMA operands, no code), records every
launch with its parameter values and the encodings of the descriptors it passed, and the
tests compare the direct launches with the checked ones (same kernel, grid, values,
descriptors; only the scratch buffers' addresses differ) and check that a new tensor
(pointer, dtype, shape, strides) gets its own descriptors. The workspace is private per
(device, stream, thread) and never handed out during capture. The values the kernels
compute on this path are checked on the GPU (test_sdpa_decode.py).
"""

from __future__ import annotations

import threading

import pytest
import torch

import kitjit.nn.functional as KF
from kitjit.nn import _host
from kitjit.nn.attention import attention
from kitjit.runtime import driver
from kitjit.testing import FakeDriver

BF16, FP16, FP32 = 9, 6, 7          # CUtensorMapDataType


def randn(*shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


# ============================================================================ descriptor cache
@pytest.fixture
def encoder(monkeypatch):
    """A fresh, faked descriptor cache: `driver.encode_tiled` records each encoding."""
    monkeypatch.setattr(driver, "_TMAP_CACHE", {})
    monkeypatch.setattr(driver, "_TMAP_OLD", {})
    fake = FakeDriver()
    monkeypatch.setattr(driver, "encode_tiled", fake._encode_tiled)
    return fake


def test_tensor_map_key_has_everything_the_encoding_reads(encoder):
    raw = torch.zeros(64 * 256 * 4, dtype=torch.uint8)     # 64 KiB, 64-byte aligned
    bf = raw.view(torch.bfloat16).view(-1, 128)[:64]       # (64, 128), rows 256 bytes
    hf = raw.view(torch.float16).view(-1, 128)[:64]        # same pointer, shape, strides
    f32 = raw.view(torch.float32).view(-1, 128)[:64]       # ... rows 512 bytes apart
    ptr = raw.data_ptr()
    enc = lambda t, dt, box=(64, 64), swz=128: encoder.encoding_of(  # noqa: E731
        driver.tensor_map(t, box[0], box[1], swz, dt))
    assert enc(bf, "bf16") == (BF16, ptr, 64, 128, 256, 64, 64, 128)
    assert enc(hf, "fp16") == (FP16, ptr, 64, 128, 256, 64, 64, 128)
    # the same pointer, shape and element strides with 4-byte elements: a map of its own
    # (before the key held the element type, this one got the bf16 map: rows 256 bytes)
    assert enc(f32, "fp32") == (FP32, ptr, 64, 128, 512, 64, 64, 128)
    assert enc(bf[16:], "bf16") == (BF16, ptr + 16 * 256, 48, 128, 256, 64, 64, 128)
    assert enc(bf[:32], "bf16") == (BF16, ptr, 32, 128, 256, 64, 64, 128)
    wide = raw.view(torch.bfloat16).view(-1, 256)[:64, :128]   # rows 512 bytes apart
    assert enc(wide, "bf16") == (BF16, ptr, 64, 128, 512, 64, 64, 128)
    assert enc(bf, "bf16", box=(32, 64)) == (BF16, ptr, 64, 128, 256, 32, 64, 128)
    assert enc(bf, "bf16", box=(64, 32), swz=64) == (BF16, ptr, 64, 128, 256, 64, 32, 64)
    # the L2 promotion (kit.tma_load(..., l2_promotion=)): a map of its own
    l2 = encoder.encoding_of(driver.tensor_map(bf, 64, 64, 128, "bf16", 0))
    assert l2 == (BF16, ptr, 64, 128, 256, 64, 64, 128, {"l2": 0})
    n = len(encoder.encodings)
    # asked again: the cached maps, nothing encoded
    assert enc(bf, "bf16") == (BF16, ptr, 64, 128, 256, 64, 64, 128)
    assert enc(f32, "fp32")[4] == 512 and enc(hf, "fp16")[0] == FP16
    assert len(encoder.encodings) == n
    # a Rows (kitjit.nn's TMA operand by pointer) is the tensor it describes
    assert driver.tensor_map(_host.Rows(ptr, 64, 128, 2), 64, 64, 128, "bf16") == \
        driver.tensor_map(bf, 64, 64, 128, "bf16")
    assert enc(_host.Rows(ptr + 512, 8, 128, 2), "bf16") == (BF16, ptr + 512, 8, 128, 256,
                                                             64, 64, 128)


def test_tensor_map_generations_keep_maps_alive(encoder, monkeypatch):
    """When the cache starts over, the previous generation's maps stay valid (a launch in
    another thread may hold one's address)."""
    monkeypatch.setattr(driver, "_TMAP_MAX", 4)
    t = torch.zeros(16, 128, dtype=torch.bfloat16)
    addrs = [driver.tensor_map(t[: 16 - i], 8, 64, 128, "bf16") for i in range(9)]
    for i, a in enumerate(addrs):
        assert encoder.encoding_of(a)[2] == 16 - i   # each map still holds its encoding
    assert len(set(addrs)) == 9


def test_tensor_map_refuses_what_tma_cannot_copy(encoder):
    t = torch.zeros(64, 130, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="16-byte aligned"):
        driver.tensor_map(t[:, 1:], 8, 64, 128, "bf16")
    with pytest.raises(ValueError, match="2-d"):
        driver.tensor_map(torch.zeros(2, 8, 64, dtype=torch.bfloat16), 8, 64, 128, "bf16")
    assert not encoder.encodings


# ============================================================================ workspace
@pytest.fixture
def gpu_workspace(monkeypatch):
    """workspace() as on a GPU (streams, capture), with CPU memory behind it."""
    state = {"stream": 0x100, "capturing": False}
    monkeypatch.setattr(_host, "_stream", lambda device: state["stream"] + device)
    monkeypatch.setattr(_host, "_capturing", lambda stream: state["capturing"])
    monkeypatch.setattr(_host, "_torch_device", lambda device: torch.device("cpu"))
    _host.reset()
    yield state
    _host.reset()


def test_workspace_private_per_stream_device_and_thread(gpu_workspace):
    a, pa, _ = _host.workspace(0, 1000)
    assert a.numel() >= 1000 and a.dtype == torch.float32 and pa == a.data_ptr()
    assert _host.workspace(0, 10)[1] == pa                 # the same stream and thread
    assert _host.workspace(1, 10)[1] != pa                 # another device
    gpu_workspace["stream"] = 0x200
    assert _host.workspace(0, 10)[1] != pa                 # another stream
    gpu_workspace["stream"] = 0x100
    other = []
    th = threading.Thread(target=lambda: other.append(_host.workspace(0, 10)[1]))
    th.start()
    th.join()
    assert other[0] != pa                                  # another thread, same stream
    big, pb, _ = _host.workspace(0, 5000)                     # grown: a new, larger buffer
    assert big.numel() >= 5000 and _host.workspace(0, 1000)[1] == pb
    gpu_workspace["capturing"] = True                      # a graph may replay anywhere
    assert _host.workspace(0, 10) is None


# ============================================================================ direct launches
@pytest.fixture
def fake(monkeypatch):
    """The GPU launch path with the real kernels' parameters and TMA operands and a faked
    driver (sdpa takes CPU tensors on it under KITJIT_INTERPRET=1)."""
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    with FakeDriver(allow_cpu=True, ir_compile=True) as f, torch.no_grad():
        yield f


def pairs(fake, start, per_call):
    """The launches since `start`, grouped per call."""
    ls = fake.launches[start:]
    assert len(ls) % per_call == 0
    return [ls[i:i + per_call] for i in range(0, len(ls), per_call)]


def same_launch(a, b, skip=()):
    """Two launches of one kernel with the same grid, values (but those at `skip`: scratch
    buffers) and descriptors."""
    assert a["function"] == b["function"] and a["grid"] == b["grid"]
    assert a["block"] == b["block"] and a["shared"] == b["shared"] and a["pdl"] == b["pdl"]
    assert [x for i, x in enumerate(a["values"]) if i not in skip] == \
        [x for i, x in enumerate(b["values"]) if i not in skip]
    assert a["tma"] == b["tma"]


def test_sdpa_decode_direct_launches_pass_what_the_checked_one_does(fake):
    """Several splits merged in-kernel (FUSED): one launch per call; Q, K, V, the partials
    and their LSEs (scratch), the output, the LSE (scratch for sdpa), the counters (zeroed
    workspace, the same every call), then the ints."""
    B, H, Hkv, SK, D = 1, 8, 2, 1000, 64      # 16 key blocks: several splits
    q, k, v = randn(B, H, 1, D), randn(B, Hkv, SK, D, seed=1), randn(B, Hkv, SK, D, seed=2)
    outs = []
    n0 = len(fake.launches)
    for _ in range(3):
        outs.append(KF.sdpa(q, k, v, enable_gqa=True))
    calls = pairs(fake, n0, 1)                  # the split kernel alone, per call
    (s0,), (s1,), (s2,) = calls
    same_launch(s0, s1, skip=(3, 4, 5, 6, 7))   # the checked call's buffers are torch's
    same_launch(s1, s2, skip=(5,))              # the same workspace from call to call
    assert s0["values"][:3] == (q.data_ptr(), k.data_ptr(), v.data_ptr())
    for s, o in ((s1, outs[1]), (s2, outs[2])):
        assert s["values"][5] == o.data_ptr()
        assert len({*s["values"][3:8]}) == 5    # partials, LSEs, sink, counters: apart
    e = 2
    heads = (B * Hkv, SK * D * e)               # K, V: 3-d maps, one head per box
    stream = {"l2": 0}                          # the K/V cache: no L2 promotion (streamed)
    assert s1["tma"] == [(BF16, q.data_ptr(), B * H, D, D * e, 64, 64, 128),
                         (BF16, k.data_ptr(), SK, D, D * e, 64, 64, 128, heads, stream),
                         (BF16, v.data_ptr(), SK, D, D * e, 64, 64, 128, heads, stream)]
    assert outs[1].data_ptr() != outs[2].data_ptr()         # a new output every call
    assert all(o.shape == q.shape and o.dtype == q.dtype and o.is_contiguous()
               for o in outs)

    # a new q (another address): its own Q descriptor, the cache's K/V ones kept
    q2 = randn(B, H, 1, D, seed=3)
    n1 = len(fake.launches)
    KF.sdpa(q2, k, v, enable_gqa=True)
    (s3,), = pairs(fake, n1, 1)
    assert s3["values"][0] == q2.data_ptr()
    assert s3["tma"][0] == (BF16, q2.data_ptr(), B * H, D, D * e, 64, 64, 128)
    assert s3["tma"][1:] == s1["tma"][1:]

    # another dtype, the same shapes: other kernels, fp16 maps
    qh, kh, vh = q.half(), k.half(), v.half()
    for _ in range(2):
        n2 = len(fake.launches)
        KF.sdpa(qh, kh, vh, enable_gqa=True)
        (sh,), = pairs(fake, n2, 1)
        assert sh["function"] != s1["function"]
        assert sh["tma"] == [(FP16, qh.data_ptr(), B * H, D, D * e, 64, 64, 128)] + \
            [(FP16, t.data_ptr(), SK, D, D * e, 64, 64, 128, heads, stream) for t in (kh, vh)]

    # a longer cache: its own rows; a strided K (a view of a wider tensor): copied first,
    # never passed by its own address
    k5, v5 = randn(B, Hkv, SK + 5, D, seed=4), randn(B, Hkv, SK + 5, D, seed=5)
    kw = randn(B, Hkv, SK + 5, 2 * D, seed=6)[..., :D]
    for kk in (k5, kw, k5):
        n3 = len(fake.launches)
        KF.sdpa(q, kk, v5, enable_gqa=True)
        (sk,), = pairs(fake, n3, 1)
        assert sk["tma"][1][2] == SK + 5 and sk["tma"][1][4] == D * e
        assert sk["tma"][1][8] == (B * Hkv, (SK + 5) * D * e)
        if kk is kw:
            assert sk["values"][1] != kw.data_ptr() and sk["tma"][1][1] != kw.data_ptr()
        else:
            assert sk["values"][1] == k5.data_ptr() == sk["tma"][1][1]


def test_decode_combine_kernel_direct_launches(fake):
    """fused=False: the split kernel writes partials, the combine kernel merges them
    into the output and the LSE returned."""
    from kitjit.nn.attention_decode import attention_decode

    B, H, Hkv, SK, D = 1, 8, 2, 1000, 64
    q, k, v = randn(B, H, 1, D), randn(B, Hkv, SK, D, seed=1), randn(B, Hkv, SK, D, seed=2)
    n0 = len(fake.launches)
    outs = [attention_decode(q, k, v, fused=False) for _ in range(3)]
    (s0, c0), (s1, c1), (s2, c2) = pairs(fake, n0, 2)   # split kernel + combine, per call
    same_launch(s0, s1, skip=(3, 4, 5, 6, 7))
    same_launch(s1, s2)                         # the same workspace from call to call
    same_launch(c0, c1, skip=(0, 1, 2, 3))
    for s, c, (o, lse) in ((s1, c1, outs[1]), (s2, c2, outs[2])):
        assert c["values"][:2] == s["values"][3:5]
        assert c["values"][2:4] == (o.data_ptr(), lse.data_ptr())


def test_sdpa_decode_one_split_and_attention_decode_lse(fake):
    """Causal decode takes one split (no combine): the output written directly; the API
    (attention_decode) returns a real LSE, sdpa writes its LSE to scratch."""
    from kitjit.nn.attention_decode import attention_decode

    q, k, v = randn(2, 4, 2, 64), randn(2, 2, 100, 64, seed=1), randn(2, 2, 100, 64, seed=2)
    n0 = len(fake.launches)
    for _ in range(2):
        o, lse = attention_decode(q, k, v, causal=True)
        assert lse.shape == (2, 4, 2) and lse.dtype == torch.float32
        (s,), = pairs(fake, len(fake.launches) - 1, 1)
        assert s["values"][3:5] == (o.data_ptr(), lse.data_ptr())
    out = KF.sdpa(q, k, v, is_causal=True, enable_gqa=True)
    (s,), = pairs(fake, len(fake.launches) - 1, 1)
    assert s["values"][3] == out.data_ptr()
    first, second = pairs(fake, n0, 1)[:2]
    same_launch(first[0], second[0], skip=(3, 4, 5, 6, 7))   # O, L passed twice, L again


def test_forward_direct_launches(fake):
    q, k, v = randn(1, 4, 40, 64), randn(1, 2, 40, 64, seed=1), randn(1, 2, 40, 64, seed=2)
    n0 = len(fake.launches)
    for _ in range(2):
        o, lse = attention(q, k, v)
        assert o.shape == q.shape and lse.shape == (1, 4, 40)
    (f0,), (f1,) = pairs(fake, n0, 1)
    same_launch(f0, f1, skip=(3, 4))
    assert f1["values"][3:5] == (o.data_ptr(), lse.data_ptr())
    assert [t[1] for t in f1["tma"]] == [q.data_ptr(), k.data_ptr(), v.data_ptr()]
    out = KF.sdpa(q, k, v, enable_gqa=True)             # Sq > 16: the forward route
    (f2,), = pairs(fake, len(fake.launches) - 1, 1)
    same_launch(f1, f2, skip=(3, 4))
    assert f2["values"][3] == out.data_ptr()


@pytest.mark.parametrize("D,causal", [(128, False), (64, True), (256, True)],
                         ids=["D128", "D64-causal", "D256-causal"])
def test_backward_direct_launches(fake, D, causal):
    """The FA3 backward's three kernels (preprocess, which also zeroes the dQ sums; the main
    kernel; the dQ conversion), launched directly from the second call on: the values and
    descriptors of the checked first launch, the workspace's buffers in place of torch's,
    the new gradients' addresses."""
    from kitjit.nn.attention_backward import attention_backward

    B, H, Hkv, S, SK = 1, 4, 2, 100, 130
    q, k, v = randn(B, H, S, D), randn(B, Hkv, SK, D, seed=1), randn(B, Hkv, SK, D, seed=2)
    do, o, lse = randn(B, H, S, D, seed=3), randn(B, H, S, D, seed=4), torch.randn(B, H, S)
    n0 = len(fake.launches)
    grads = [attention_backward(do, q, k, v, o, lse, causal) for _ in range(3)]
    (p0, m0, c0), (p1, m1, c1), (p2, m2, c2) = pairs(fake, n0, 3)
    same_launch(p0, p1, skip=(3, 4, 5))          # Δ, LSE, dQ sums: torch's, then workspace
    # dK, dV (new), dQ sums, LSE, Δ; the maps of the last three: the same but the address
    ins = {q.data_ptr(), k.data_ptr(), v.data_ptr(), do.data_ptr()}

    def maps(m, inputs):
        return [t if inputs else t[:1] + t[2:] for t in m["tma"] if (t[1] in ins) == inputs]
    assert len(maps(m1, True)) == 4 and len(maps(m1, False)) == 3
    same_launch(dict(m0, tma=maps(m0, True)), dict(m1, tma=maps(m1, True)),
                skip=(4, 5, 6, 7, 8))
    assert maps(m0, False) == maps(m1, False)
    same_launch(c0, c1, skip=(0, 1))             # dQ sums, dQ
    same_launch(p1, p2)                          # the same workspace from call to call
    same_launch(m1, m2, skip=(4, 5))
    same_launch(c1, c2, skip=(1,))
    assert p1["values"][:3] == (o.data_ptr(), do.data_ptr(), lse.data_ptr())
    assert m1["values"][:4] == (q.data_ptr(), k.data_ptr(), v.data_ptr(), do.data_ptr())
    for (dq, dk, dv), m, c, p in ((grads[1], m1, c1, p1), (grads[2], m2, c2, p2)):
        assert m["values"][4:6] == (dk.data_ptr(), dv.data_ptr())
        assert c["values"][:2] == (m["values"][6], dq.data_ptr())
        assert p["values"][3:6] == (m["values"][8], m["values"][7], m["values"][6])
        assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    # the workspace's maps: its dQ sums, LSE and Δ
    assert {t[1] for t in m1["tma"]} - ins == {m1["values"][i] for i in (6, 7, 8)}
    # a strided dO: copied (the checked path), never passed by its own address
    dow = randn(B, H, S, 2 * D, seed=5)[..., :D]
    n1 = len(fake.launches)
    attention_backward(dow, q, k, v, o, lse, causal)
    (p3, m3, _), = pairs(fake, n1, 3)
    assert p3["values"][1] != dow.data_ptr() and m3["values"][3] != dow.data_ptr()


def test_sdpa_decode_under_torch_compile_is_one_graph(monkeypatch):
    """Traced by dynamo, an inference sdpa skips the direct path (it reads pointers): one
    graph (fullgraph), the forward as kitjit's opaque op, eager's result."""
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    def f(q, k, v):
        return KF.sdpa(q, k, v, enable_gqa=True) * 2

    q, k, v = randn(1, 4, 1, 64), randn(1, 2, 70, 64, seed=1), randn(1, 2, 70, 64, seed=2)
    with torch.no_grad():
        eager = f(q, k, v)
        torch._dynamo.reset()
        out = torch.compile(f, fullgraph=True, backend=backend)(q, k, v)
    torch._dynamo.reset()     # (its fake tensors need not outlive the test)
    assert len(graphs) == 1 and "kitjit.attention_fwd" in graphs[0], graphs
    assert torch.equal(out, eager)

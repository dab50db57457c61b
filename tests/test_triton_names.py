"""Triton parity of names: every public name of Triton 3.6 (kitjit/language/triton_surface.py,
dumped by tests/ports/triton_parity.py) is either present in kitjit's counterpart module or
raises AttributeError with a one-line "not supported yet" (never a bare AttributeError with
a module path); Triton's tensor methods work in kernels (interpreter vs float64 torch, and
compiled for sm_90a)."""

from __future__ import annotations

import importlib
import pathlib

import pytest
from kitjit.frontend.errors import CompileError

import kitjit as kit
from kitjit.language.triton_names import tensor_method_status
from kitjit.language.triton_surface import MODULES, TENSOR_METHODS

torch = pytest.importorskip("torch")
KERNELS = str(pathlib.Path(__file__).with_name("triton_names_kernels.py"))


def _kit_module(triton_module: str):
    return importlib.import_module("kitjit" + triton_module[len("triton"):])


@pytest.mark.parametrize("triton_module", sorted(MODULES))
def test_every_triton_name_is_present_or_not_supported_yet(triton_module):
    mod = _kit_module(triton_module)  # every Triton module path imports
    bad = []
    for name in sorted(MODULES[triton_module]):
        try:
            getattr(mod, name)
        except AttributeError as e:
            msg = str(e)
            if "not supported yet" not in msg or "\n" in msg:
                bad.append(f"{name}: {msg!r}")
    assert not bad, f"{mod.__name__}: " + "; ".join(bad[:10])


def test_every_triton_tensor_method_is_known():
    for name in TENSOR_METHODS:
        status, msg = tensor_method_status(name)
        assert status == "works" or "not supported yet" in msg, name


def test_a_missing_name_in_a_kernel_is_a_one_line_error_at_the_user_line():
    import tests.triton_names_kernels as k

    x = torch.rand(16)
    with pytest.raises(CompileError) as ei:
        k.missing_name_kernel[(1,)](x, BLOCK=16)
    assert "kit.float8e4b8 is not supported yet (Triton's tl.float8e4b8" in str(ei.value)
    assert f"triton_names_kernels.py:{_line_of('tl.float8e4b8')}:" in str(ei.value)
    with pytest.raises(CompileError) as ei:  # x.item() of 16 elements: Triton's error too
        k.item_kernel[(1,)](x, BLOCK=16)
    assert "single-element tile" in str(ei.value)
    assert f"triton_names_kernels.py:{_line_of('x.item()')}:" in str(ei.value)


def _line_of(text: str) -> int:
    """The 1-based line of triton_names_kernels.py that holds `text`."""
    lines = pathlib.Path(KERNELS).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def _reference(x):
    xd = x.double()
    a = xd.cumsum(0)
    s = torch.softmax(xd, 0)
    b = ((xd > 0.25) & (xd < 0.75)).double()
    c = ((xd > 0.9) | (xd < 0.1)).double()
    d = xd * 2 + a - 1
    e = float((xd > 0.5).any())
    f = xd.cos().sin() + xd + xd.rsqrt() + xd
    return a + s + b + c + d + e + f + xd.max()


@pytest.mark.parametrize("n", [16, 13])
def test_tensor_methods_interpreter_match_torch(n, monkeypatch):
    import tests.triton_names_kernels as k

    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    x = torch.rand(n) * 0.98 + 0.01
    o = torch.full((n,), float("nan"))
    k.tensor_methods_kernel[(1,)](x, o, n, BLOCK=16)
    torch.testing.assert_close(o.double(), _reference(x), rtol=1e-5, atol=1e-5)


def test_tensor_methods_compile_for_sm90a():
    tools = pytest.importorskip("kitjit.tools")
    ck = kit.compile_aot(KERNELS, "tensor_methods_kernel", ["*fp32:16", "*fp32:16", "i32"],
                         {"BLOCK": 128}, 4, "sm_90a")
    assert ck.n_spills == 0
    if tools.find_tool("cuobjdump") is None:
        pytest.skip("cuobjdump not found")
    ops = tools.sass_opcodes(tools.disassemble(ck.asm["cubin"]))
    assert any(op.startswith("MUFU") for op in ops)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [128, 100])
def test_tensor_methods_gpu_match_torch(n):
    import tests.triton_names_kernels as k

    x = torch.rand(n, device="cuda") * 0.98 + 0.01
    o = torch.full((n,), float("nan"), device="cuda")
    k.tensor_methods_kernel[(1,)](x, o, n, BLOCK=128)
    torch.testing.assert_close(o.double().cpu(), _reference(x.cpu()), rtol=1e-5, atol=1e-5)


def test_dtype_predicates_answer_as_triton():
    tl = kit.language
    assert tl.float16.is_fp16() and tl.bfloat16.is_bf16() and not tl.float32.is_fp16()
    assert tl.float32.is_standard_floating() and not tl.float8e5.is_standard_floating()
    assert (tl.float32.fp_mantissa_width, tl.float32.exponent_bias) == (23, 127)
    assert (tl.float8e4nv.fp_mantissa_width, tl.float8e4nv.exponent_bias) == (3, 7)
    assert (tl.int8.get_int_min_value(), tl.int8.get_int_max_value()) == (-128, 127)
    assert tl.uint16.get_int_max_value() == 65535 and tl.int1.is_int1()
    assert tl.int64.primitive_bitwidth == 64 and tl.int64.scalar is tl.int64


def test_jit_function_attributes_host_wrappers_read():
    import tests.triton_names_kernels as k

    f = k.item_kernel
    assert f.src.startswith("def item_kernel(x_ptr, BLOCK: tl.constexpr):")
    assert f.raw_src[0].startswith("@triton.jit")
    assert f.starting_line_number == _line_of("def item_kernel") - 1
    assert f.module == "tests.triton_names_kernels"
    assert list(f.signature.parameters) == f.arg_names == ["x_ptr", "BLOCK"]
    assert f.fn.__name__ == "item_kernel" and f.repr() == "item_kernel"


def _inline_asm_inputs(n, device="cpu"):
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    o = torch.full((n,), float("nan"), device=device)
    p = torch.full((n,), -1, dtype=torch.int32, device=device)
    return x, y, o, p


def test_inline_asm_in_the_interpreter_is_a_clear_error_at_the_user_line(monkeypatch):
    import tests.triton_names_kernels as k

    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    x, y, o, p = _inline_asm_inputs(16)
    with pytest.raises(CompileError) as ei:
        k.inline_asm_kernel[(1,)](x, y, o, p, 16, BLOCK=16)
    msg = str(ei.value)
    assert "inline_asm_elementwise runs PTX, which the CPU interpreter cannot run" in msg
    assert "triton_names_kernels.py:" in msg and "max.f32" in msg


def test_inline_asm_compiles_for_sm90a_with_packed_bytes():
    ck = kit.compile_aot(KERNELS, "inline_asm_kernel", ["*fp32:16"] * 3 + ["*i32:16", "i32"],
                         {"BLOCK": 256}, 4, "sm_90a")
    ptx = ck.asm["ptx"]
    n_f32, n_u8 = ptx.count("max.f32"), ptx.count("0x0F0F0F0F;")
    assert n_f32 >= 1 and 1 <= n_u8 < n_f32 * 4  # pack=1: an asm per element; 4 per u8 asm
    assert ck.n_spills == 0


@pytest.mark.parametrize("bad,msg", [
    ("dtype=tl.int1, is_pure=True, pack=1", "result dtype i1 is not supported yet"),
    ("dtype=tl.float32, is_pure=True, pack=0", "'pack' must be a positive int"),
])
def test_inline_asm_refuses_what_it_cannot_do(bad, msg, tmp_path):
    src = KERNELS_SRC_BAD.format(bad=bad)
    f = tmp_path / "bad_asm.py"
    f.write_text(src)
    with pytest.raises(CompileError, match=msg):
        kit.compile_aot(str(f), "bad", ["*fp32:16"], {}, 4, "sm_90a")


KERNELS_SRC_BAD = '''
import kitjit as triton
import kitjit.language as tl

@triton.jit
def bad(x_ptr):
    x = tl.load(x_ptr + tl.arange(0, 16))
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], {bad})
    tl.store(x_ptr + tl.arange(0, 16), y)
'''


@pytest.mark.gpu
@pytest.mark.parametrize("n", [256, 200])
def test_inline_asm_gpu_matches_torch(n):
    import tests.triton_names_kernels as k

    x, y, o, p = _inline_asm_inputs(n, "cuda")
    k.inline_asm_kernel[(1,)](x, y, o, p, n, BLOCK=256)
    torch.testing.assert_close(o.double().cpu(), torch.maximum(x, y).double().cpu() + 1)
    assert torch.equal(p.cpu(), torch.arange(n, dtype=torch.int32) % 251)


def test_constexpr_function_and_must_use_result(monkeypatch):
    import tests.triton_names_kernels as k

    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    x = torch.randn(16)
    o = torch.full((16,), float("nan"))
    k.constexpr_function_kernel[(1,)](x, o, BLOCK=16)
    torch.testing.assert_close(o[:8].double(), x[:8].double() * 2 + 8)
    assert o[8:].isnan().all()
    assert k._half_block(kit.constexpr(32)) == 16 and k._twice._must_use_result is True
    assert kit.must_use_result("why")(lambda: 0)._must_use_result == "why"


def test_testing_assert_close_as_triton():
    kit.testing.assert_close(torch.tensor([1.0, float("nan")]),
                             torch.tensor([1.005, float("nan")]))
    kit.testing.assert_close(2.0, 2.001)
    with pytest.raises(AssertionError):
        kit.testing.assert_close(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5]))
    with pytest.raises(AssertionError, match="is not close"):
        kit.testing.assert_close(1.0, 1.5, err_msg="scalar")
    kit.testing.assert_close(torch.ones(3, dtype=torch.bfloat16), torch.ones(3), atol=0)


@pytest.mark.parametrize("n", [16, 11])
def test_map_elementwise_interpreter_matches_torch(n, monkeypatch):
    import tests.triton_names_kernels as k

    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    x = torch.randn(n)
    o, p = torch.full((n,), float("nan")), torch.full((n,), float("nan"))
    k.map_elementwise_kernel[(1,)](x, o, p, n, BLOCK=16)
    xd = x.double()
    torch.testing.assert_close(o.double(), torch.where(xd > 0, xd, 1.5 * (xd.exp() - 1)))
    torch.testing.assert_close(p.double(), xd * 1.5)


def test_map_elementwise_compiles_for_sm90a_and_refuses_branches():
    ck = kit.compile_aot(KERNELS, "map_elementwise_kernel", ["*fp32:16"] * 3 + ["i32"],
                         {"BLOCK": 128}, 4, "sm_90a")
    assert ck.n_spills == 0
    with pytest.raises(CompileError, match="kit.where"):
        kit.compile_aot(KERNELS, "map_elementwise_branchy_kernel", ["*fp32:16"],
                        {"BLOCK": 128}, 4, "sm_90a")


@pytest.mark.gpu
def test_map_elementwise_gpu_matches_torch():
    import tests.triton_names_kernels as k

    n = 100
    x = torch.randn(n, device="cuda")
    o, p = (torch.full((n,), float("nan"), device="cuda") for _ in range(2))
    k.map_elementwise_kernel[(1,)](x, o, p, n, BLOCK=128)
    xd = x.double().cpu()
    torch.testing.assert_close(o.double().cpu(), torch.where(xd > 0, xd, 1.5 * (xd.exp() - 1)),
                               rtol=1e-6, atol=1e-6)  # exp: 2 ulp on the GPU
    torch.testing.assert_close(p.double().cpu(), xd * 1.5, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("m,n", [(32, 64), (30, 52)])  # rows: 16-byte multiples (TMA)
def test_functional_tensor_descriptor_load_store(m, n, monkeypatch):
    import tests.triton_names_kernels as k

    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    x = torch.randn(m, n)
    o = torch.full((m, n), float("nan"))
    k.descriptor_functions_kernel[(kit.cdiv(m, 16), kit.cdiv(n, 32))](x, o, m, n, BM=16, BN=32)
    torch.testing.assert_close(o.double(), x.double() * 2)


def test_functional_tensor_descriptor_compiles_for_sm90a():
    ck = kit.compile_aot(KERNELS, "descriptor_functions_kernel",
                         ["*fp32:16", "*fp32:16", "i32", "i32:16"], {"BM": 16, "BN": 32}, 4,
                         "sm_90a")
    assert ck.n_spills == 0


@pytest.mark.gpu
@pytest.mark.parametrize("m,n", [(32, 64), (30, 52)])
def test_functional_tensor_descriptor_gpu(m, n):
    import tests.triton_names_kernels as k

    x = torch.randn(m, n, device="cuda")
    o = torch.full((m, n), float("nan"), device="cuda")
    k.descriptor_functions_kernel[(kit.cdiv(m, 16), kit.cdiv(n, 32))](x, o, m, n, BM=16, BN=32)
    torch.testing.assert_close(o.cpu(), x.cpu() * 2)


def _bits_run(device="cpu", block=16):
    import numpy as np

    import tests.triton_names_kernels as k

    x = torch.randn(block, device=device)
    x[0], x[1] = 0.0, float("-inf")
    d = torch.randn(block, dtype=torch.float64, device=device)
    i = torch.full((block,), -1, dtype=torch.int32, device=device)
    f = torch.full((block,), float("nan"), device=device)
    ll = torch.full((block,), -1, dtype=torch.int64, device=device)
    nt = torch.full((256,), -1, dtype=torch.int32, device=device)
    k.libdevice_bits_kernel[(1,)](x, d, i, f, ll, nt, BLOCK=block, num_warps=4)
    xn, dn = x.cpu().numpy(), d.cpu().numpy()
    assert torch.equal(i.cpu(), x.cpu().view(torch.int32))
    assert np.array_equal(f.cpu().numpy(), np.nextafter(xn, np.float32(np.inf)))
    assert np.array_equal(ll.cpu().numpy(), np.nextafter(dn, 0.0).view(np.int64))
    assert (nt[:128].cpu() == 4).all() and (nt[128:].cpu() == -1).all()


def test_libdevice_bits_nextafter_num_threads_interpreter(monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    _bits_run()


def test_libdevice_bits_compile_for_sm90a_and_refuse_wrong_dtypes(tmp_path):
    ck = kit.compile_aot(KERNELS, "libdevice_bits_kernel", ["*fp32:16", "*fp64:16",
                         "*i32:16", "*fp32:16", "*i64:16", "*i32:16"], {"BLOCK": 128}, 4,
                         "sm_90a")
    assert ck.n_spills == 0
    f = tmp_path / "bad_bits.py"
    f.write_text("import kitjit as triton\nimport kitjit.language as tl\n"
                 "from kitjit.language.extra import libdevice\n\n\n@triton.jit\n"
                 "def bad(x_ptr):\n    x = tl.load(x_ptr + tl.arange(0, 16))\n"
                 "    tl.store(x_ptr + tl.arange(0, 16), libdevice.nextafter(x, x))\n")
    with pytest.raises(CompileError, match="nextafter needs fp32 or fp64 tiles"):
        kit.compile_aot(str(f), "bad", ["*fp16:16"], {}, 4, "sm_90a")
    with pytest.raises(CompileError, match="float_as_int takes an fp32 tile"):
        f.write_text(f.read_text().replace("libdevice.nextafter(x, x)",
                                           "libdevice.float_as_int(x)"))
        kit.compile_aot(str(f), "bad", ["*fp64:16"], {}, 4, "sm_90a")


@pytest.mark.gpu
def test_libdevice_bits_nextafter_num_threads_gpu():
    _bits_run("cuda", 128)


def test_tl_tuple_builds_and_matches_tuples(monkeypatch):
    import tests.triton_names_kernels as k

    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    x = torch.randn(16)
    o = torch.full((16,), float("nan"))
    k.tuple_kernel[(1,)](x, o, BLOCK=16)
    xd = x.double()
    torch.testing.assert_close(o.double(), xd + 1 + (xd * 2) ** 2)


def test_testing_roofline_helpers_as_triton_without_a_gpu():
    from kitjit.runtime import driver

    if driver.available():
        pytest.skip("the nominal figures are those without a GPU")
    assert kit.testing.get_dram_gbps() == pytest.approx(2619000 * 5120 * 2 / 1e6 / 8)
    assert kit.testing.get_max_tensorcore_tflops(torch.bfloat16, 1_000_000) == \
        pytest.approx(132 * 4 * 1e6 * 512 * 1e-9)
    assert kit.testing.get_max_tensorcore_tflops(kit.float8e4nv, 1_000_000) == \
        pytest.approx(132 * 4 * 1e6 * 1024 * 1e-9)
    assert kit.testing.get_max_simd_tflops(torch.float32, 1_000_000) == \
        pytest.approx(132 * 4 * 1e6 * 32 * 1e-9)
    with pytest.raises(RuntimeError, match="not supported"):
        kit.testing.get_max_simd_tflops(torch.int8, 1_000_000)


def test_knobs_are_views_of_kitjit_environment_variables(monkeypatch):
    from kitjit.cache import cache_dir

    monkeypatch.delenv("KITJIT_PRINT_AUTOTUNING", raising=False)
    monkeypatch.setenv("KITJIT_CACHE_DIR", "/tmp/kitjit-knobs-a")
    assert kit.knobs.cache.dir == "/tmp/kitjit-knobs-a"
    kit.knobs.cache.dir = "/tmp/kitjit-knobs-b"
    assert str(cache_dir()) == "/tmp/kitjit-knobs-b"
    assert kit.knobs.autotuning.print is False
    kit.knobs.autotuning.print = True
    assert kit.knobs.autotuning.print is True
    kit.knobs.autotuning.print = False
    assert "KITJIT_PRINT_AUTOTUNING" not in __import__("os").environ
    with pytest.raises(AttributeError, match=r"^kitjit.knobs.amd is not supported yet"):
        kit.knobs.amd  # noqa: B018
    with pytest.raises(AttributeError, match="knobs.cache.home_dir is not supported yet"):
        kit.knobs.cache.home_dir = "/x"


def test_docs_triton_parity_is_what_the_script_prints():
    import importlib.util

    root = pathlib.Path(__file__).parent.parent
    spec = importlib.util.spec_from_file_location(
        "triton_parity", root / "tests" / "ports" / "triton_parity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    doc = (root / "docs" / "triton_parity.md").read_text()
    assert doc == mod.markdown() + "\n", ("docs/triton_parity.md is stale: run python "
                                           "tests/ports/triton_parity.py > docs/triton_parity.md")


def test_jit_function_params_are_triton_kernel_params():
    import tests.triton_names_kernels as k

    p = k.inline_asm_kernel.params
    assert p == ["x_ptr", "y_ptr", "o_ptr", "p_ptr", "n", "BLOCK"]  # names, as before
    assert [q.name for q in p if q.is_constexpr] == ["BLOCK"]
    assert [q.num for q in p] == list(range(6)) and not p[0].do_not_specialize
    assert p[5].annotation == "constexpr" and not p[5].has_default and p[0].is_const is False

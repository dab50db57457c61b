"""The public names of Triton's `triton.language` (its `__all__`, Triton 3.x, plus the few
newer ones kernels use), so that a name kitjit lacks is reported as "not supported yet"
rather than as a missing attribute: `kit.foo` in a kernel is a CompileError at the user's
line, and from plain Python the modules' `__getattr__` raises AttributeError with the same
one-line message (`missing_name_message`)."""

from __future__ import annotations

import types

from .triton_surface import MODULES

TRITON_LANGUAGE_NAMES = frozenset("""
PropagateNan TRITON_MAX_TENSOR_NUMEL load_tensor_descriptor store_tensor_descriptor
make_tensor_descriptor tensor_descriptor abs add advance arange argmax argmin
associative_scan assume async_task atomic_add atomic_and atomic_cas atomic_max atomic_min
atomic_or atomic_xchg atomic_xor bfloat16 bitonic_merge block_type broadcast broadcast_to cat
cast cdiv ceil clamp condition const constexpr constexpr_type cos cumprod cumsum
debug_barrier device_assert device_print div_rn dot dot_scaled dtype erf exp exp2 expand_dims
extra fdiv flip float16 float32 float64 float8e4b15 float8e4nv float8e4b8 float8e5
float8e5b16 floor fma full gather histogram inline_asm_elementwise interleave int1 int16
int32 int64 int8 join load log log2 make_block_ptr map_elementwise math max max_constancy
max_contiguous maximum min minimum mul multiple_of num_programs pair_uniform_to_normal
permute philox philox_impl pi32_t pointer_type program_id rand rand4x randint randint4x
randn randn4x range ravel reduce reduce_or reshape rsqrt slice sigmoid sin softmax sort
split sqrt sqrt_rn squeeze static_assert static_print static_range store sub sum swizzle2d
target_info tensor topk to_tensor trans tuple uint16 uint32 uint64 uint8
uint_to_uniform_float umulhi unsqueeze view void where xor_sum zeros zeros_like
""".split()) | MODULES["triton.language"]


# Triton's top-level `triton` names (3.x) that are not language names: reached as
# `triton.<name>` after the import swap, i.e. `kitjit.<name>`
TRITON_TOP_NAMES = MODULES["triton"] | frozenset("""
AsyncCompileMode CompilationError Config FutureKernel InterpreterError JITFunction
KernelInterface MockTensor OutOfResources TensorWrapper autotune cdiv compile
constexpr_function heuristics jit knobs language must_use_result next_power_of_2
reinterpret runtime set_allocator testing tools
""".split())


#: why a Triton name stays missing, where there is more to say than "not yet"
MISSING_REASONS = {
    "float8e4b8": "AMD's fp8 format (e4m3, bias 8); kitjit targets NVIDIA GPUs",
    "float8e5b16": "AMD's fp8 format (e5m2, bias 16); kitjit targets NVIDIA GPUs",
    **dict.fromkeys(("dispatch", "extern", "extern_elementwise"), "calls into an external "
                    "bitcode library; kitjit's libdevice functions are built in"),
    **dict.fromkeys(("binary_op_type_legalization", "builtin_max", "builtin_min",
                     "check_bit_width", "to_tensor"), "an internal of Triton's code "
                    "generator; kernels use +, max(), kit.maximum"),
    **dict.fromkeys(("tensor_descriptor_type", "tensor_descriptor_base_type"), "the IR type "
                    "of a descriptor; isinstance(d, kit.tensor_descriptor) works"),
    "sort_impl": "the body of Triton's sort and topk; call kit.sort / kit.topk",
}


def missing_name_message(name: str, module: str = "kit", top: bool = False) -> str:
    """The one-line message for `kit.<name>` when kitjit has no such name (`top`: asked of
    the top-level package, where Triton's own top-level names are known too)."""
    if top and name in TRITON_TOP_NAMES:
        return f"kitjit.{name} is not supported yet (Triton's triton.{name})"
    if name in MISSING_REASONS:
        return (f"{module}.{name} is not supported yet (Triton's tl.{name}: "
                f"{MISSING_REASONS[name]})")
    if name in TRITON_LANGUAGE_NAMES:
        return f"{module}.{name} is not supported yet (Triton's tl.{name})"
    return f"{module}.{name} does not exist (Triton's triton.language has no '{name}' either)"


# Triton's tensor methods (`x.sum(0)`, `x.to(kit.float16)`, `x.T`, ...): each is the kit
# function of the same name with `x` as its first argument, except these
TRITON_TENSOR_METHODS = frozenset("""
T abs advance argmax argmin associative_scan atomic_add atomic_and atomic_cas atomic_max
atomic_min atomic_or atomic_xchg atomic_xor broadcast_to cast cdiv ceil cos cumprod cumsum erf
exp exp2 expand_dims flip floor gather histogram item log log2 logical_and logical_or max min
permute ravel reduce reduce_or reshape rsqrt sigmoid sin softmax sort split sqrt sqrt_rn store
sum to trans view xor_sum
""".split())
_TENSOR_METHOD_TARGET = {"to": "cast", "logical_and": "_logical_and",
                         "logical_or": "_logical_or"}


def tensor_method_target(name: str):
    """The kit function (builtin marker or @kit.jit) that `x.<name>(...)` calls with `x`
    first, or None when kitjit has no such method."""
    if name not in TRITON_TENSOR_METHODS or name == "T":
        return None
    import kitjit.language as kl

    from . import standard

    target = _TENSOR_METHOD_TARGET.get(name, name)
    fn = getattr(standard, target, None) or vars(kl).get(target)
    return fn if fn is not None and callable(fn) else None


def tensor_method_status(name: str) -> tuple[str, str]:
    """("works", "") or ("missing", the one-line error) of Triton's tensor method `x.<name>`
    in a kernel (for docs/triton_parity.md)."""
    if name == "T" or tensor_method_target(name) is not None:
        return "works", ""
    return "missing", tensor_method_message(name)


def tensor_method_message(name: str) -> str:
    if name in TRITON_TENSOR_METHODS:
        return f"x.{name} is not supported yet (Triton's tensor.{name})"
    return f"a tile has no attribute '{name}'"


def module_getattr(kit_module: str, triton_module: str, *fallbacks):
    """A module `__getattr__` for kitjit's counterpart of `triton_module`: a name found in
    one of `fallbacks` (modules, or functions name -> object) is that object; a Triton name
    kitjit lacks raises AttributeError with a one-line "not supported yet"."""
    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        for fb in fallbacks:
            try:
                return getattr(fb, name) if isinstance(fb, types.ModuleType) else fb(name)
            except AttributeError:
                pass
        raise AttributeError(missing_module_name_message(kit_module, triton_module, name))

    return __getattr__


def missing_module_name_message(kit_module: str, triton_module: str, name: str) -> str:
    """The one-line message for `<kit_module>.<name>` that kitjit lacks."""
    if name in MODULES.get(triton_module, ()):
        why = f": {MISSING_REASONS[name]}" if name in MISSING_REASONS else ""
        return (f"{kit_module}.{name} is not supported yet (Triton's "
                f"{triton_module}.{name}{why})")
    return f"module '{kit_module}' has no attribute '{name}'"


def language_attr(name: str):
    """`kitjit.language.<name>` when kitjit has it (Triton's triton.language.core and
    .standard define what `triton.language` re-exports)."""
    import kitjit.language as kl

    try:
        return vars(kl)[name]
    except KeyError:
        raise AttributeError(name) from None


def top_attr(name: str):
    """`kitjit.<name>` when kitjit has it (Triton's runtime modules re-export top names)."""
    import kitjit

    try:
        return vars(kitjit)[name]
    except KeyError:
        raise AttributeError(name) from None

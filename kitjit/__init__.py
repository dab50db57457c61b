"""kitjit: a Python JIT for GPU tile kernels.

`import kitjit as kit`, decorate a function with `@kit.jit`, launch it with
`kernel[grid](*args, BLOCK=...)`. The language (`kit.load`, `kit.sum`, `kit.dot`, ...) follows
Triton's names; see README.md.
"""

__kitjit_version__ = "0.1.0"   # this package's release: pip's version, the CLI, the cache key
#: What `triton.__version__` reads after `import kitjit as triton`: the Triton language version
#: kitjit follows, with kitjit's release as the PEP 440 local label. Kernels' host code that
#: branches on Triton's version (unsloth takes a pre-3.0 path below "3.0") then takes the
#: path written for the semantics kitjit implements.
__version__ = f"3.6.0+kitjit.{__kitjit_version__}"


def _mount_top_level_packages() -> None:
    """frontend/ and backend/ sit at the top of the repository and install as
    kitjit.frontend / kitjit.backend (pyproject's package-dir). Why this hook exists: when
    this kitjit/ is a checkout's folder (python run in the repo root, where ./kitjit shadows
    any installed kitjit), nothing in packaging maps the two names; and when another checkout
    is installed editable, its finder would answer for them, mixing two trees. So a kitjit/
    that has a sibling frontend/ and backend/ in a checkout (a pyproject.toml beside them)
    always takes those; an installed kitjit (whose package holds frontend/ and backend/ or
    whose editable finder maps them for this very tree) is left to packaging."""
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    if not os.path.exists(os.path.join(root, "pyproject.toml")):
        return  # an installed wheel: frontend/ and backend/ are inside the package
    for sub in ("frontend", "backend"):
        name = f"{__name__}.{sub}"
        init = os.path.join(root, sub, "__init__.py")
        if name in sys.modules or not os.path.exists(init):
            continue
        spec = importlib.util.spec_from_file_location(
            name, init, submodule_search_locations=[os.path.join(root, sub)])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        setattr(sys.modules[__name__], sub, mod)
        spec.loader.exec_module(mod)


_mount_top_level_packages()

from .log_config import configure as _configure_logging  # noqa: E402

_configure_logging()  # KITJIT_LOG

from . import (  # noqa: E402
    compiler,  # triton.compiler.CompiledKernel, CompilationError
    distributed,  # kit.distributed: peer pointers, the simulated world
    knobs,  # triton.knobs: each knob says "not supported yet"
    runtime,  # triton.runtime.driver
    testing,  # kit.testing.do_bench, as triton.testing
    tools,  # triton.tools.tensor_descriptor
)

try:
    from . import graph  # kit.graph: the superoptimizer (issue 14); needs torch
except ModuleNotFoundError as _e:  # kitjit imports (and compiles) without torch
    if _e.name != "torch":
        raise
from .autotune import Autotuner, Config, Heuristics, autotune, heuristics  # noqa: E402
from .constexpr_fn import constexpr_function, must_use_result  # noqa: E402
from .frontend.errors import CompileError as CompilationError  # noqa: E402  (triton's name)
from .frontend.errors import KitjitError as TritonError  # noqa: E402  (triton's name)
from .jit import CompiledKernel, JITFunction, compile_aot, interpret_mode, jit  # noqa: E402
from .kernel_interface import KernelInterface, MockTensor, TensorWrapper, reinterpret  # noqa: E402,E501
from .language import *  # noqa: E402,F403
from .language import __all__ as _lang_all  # noqa: E402
from .runtime import set_allocator  # noqa: E402
from .runtime.errors import OutOfResources  # noqa: E402,F401  (Triton: triton.OutOfResources)
from .torch_ops import custom_op  # noqa: E402

__all__ = ["jit", "JITFunction", "CompiledKernel", "compile_aot", "interpret_mode",
           "autotune", "Autotuner", "Config", "heuristics", "Heuristics", "set_allocator",
           "runtime", "custom_op", "testing", "compiler", "knobs", "tools", "graph",
           "distributed", "__version__", "__kitjit_version__", "constexpr_function",
           "must_use_result", "CompilationError", "TritonError", "OutOfResources",
           "KernelInterface", "MockTensor", "TensorWrapper", "reinterpret", *_lang_all]


def __getattr__(name: str):
    """`kit.foo` for a name kitjit lacks: Triton's names say "not supported yet"."""
    if name.startswith("__"):
        raise AttributeError(name)
    if name == "graph":  # not imported: torch is missing; say so
        import kitjit.graph  # noqa: F401
    if name == "InterpreterError":  # Triton's triton.InterpreterError (imported on use)
        from .interpreter.errors import InterpreterError

        return InterpreterError
    from .language.triton_names import missing_name_message

    raise AttributeError(missing_name_message(name, top=True))

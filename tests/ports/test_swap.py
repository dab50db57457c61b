"""The import swap rewrites only the module name of Triton imports."""

from swap import swap_imports


def test_swap_rewrites_import_statements_only():
    src = ("import triton\n"
           "import triton.language as tl\n"
           "import triton.language\n"
           "import os, triton\n"
           "if True:\n"
           "    from triton.language.extra.libdevice import rsqrt  # triton stays\n"
           "from .triton import x\n"
           "s = 'import triton'\n"
           "y = triton.jit\n")
    assert swap_imports(src) == (
        "import kitjit as triton\n"
        "import kitjit.language as tl\n"
        "import kitjit.language, kitjit as triton\n"
        "import os, kitjit as triton\n"
        "if True:\n"
        "    from kitjit.language.extra.libdevice import rsqrt  # triton stays\n"
        "from .triton import x\n"
        "s = 'import triton'\n"
        "y = triton.jit\n")

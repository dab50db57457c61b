"""`kitjit.language.extra`: what `triton.language.extra` becomes after the import swap."""

from ..triton_names import module_getattr as _module_getattr  # noqa: E402
from . import cuda, libdevice  # noqa: F401

__getattr__ = _module_getattr("kitjit.language.extra", "triton.language.extra")

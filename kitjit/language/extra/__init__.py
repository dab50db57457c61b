"""`kitjit.language.extra`: what `triton.language.extra` becomes after the import swap."""

from . import cuda, libdevice  # noqa: F401

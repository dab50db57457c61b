"""`kitjit.language.extra.cuda`: `from triton.language.extra.cuda import libdevice`."""

from . import libdevice  # noqa: F401

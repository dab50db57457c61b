"""The same functions as `kitjit.language.extra.libdevice` (Triton's CUDA spelling)."""

from ..libdevice import *  # noqa: F401,F403
from ..libdevice import __all__, __getattr__  # noqa: F401

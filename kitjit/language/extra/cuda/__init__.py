"""`kitjit.language.extra.cuda`: `from triton.language.extra.cuda import libdevice`, and
Triton's CUDA-only builtins (`tl.extra.cuda.gdc_wait()`, `gdc_launch_dependents()`: the same
markers as `kit.gdc_wait`, `kit.gdc_launch_dependents`)."""

from ...base import namespaced
from ...control import gdc_launch_dependents, gdc_wait  # noqa: F401
from ...triton_names import module_getattr as _module_getattr
from . import libdevice  # noqa: F401

num_warps = namespaced("cuda.num_warps", "tl.extra.cuda.num_warps(): the kernel's num_warps "
                       "(a compile-time int)")
num_threads = namespaced("cuda.num_threads", "tl.extra.cuda.num_threads(): 32 * num_warps "
                         "(a compile-time int)")
smid = namespaced("cuda.smid", "tl.extra.cuda.smid(): the SM running this program (int32; 0 "
                  "in the interpreter)")
globaltimer = namespaced("cuda.globaltimer", "tl.extra.cuda.globaltimer(): the GPU's "
                         "nanosecond timer (int64; time.time_ns() in the interpreter)")

__getattr__ = _module_getattr("kitjit.language.extra.cuda", "triton.language.extra.cuda")

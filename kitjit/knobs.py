"""Triton's module path `triton.knobs` (Triton 3.4+'s typed settings: `knobs.cache.dir`,
`knobs.autotuning.print`, ...). kitjit's settings are its KITJIT_* environment variables
(README.md); each Triton knob is a one-line "not supported yet" rather than a setting that
would be silently ignored."""

from kitjit.language.triton_names import module_getattr

__getattr__ = module_getattr("kitjit.knobs", "triton.knobs")

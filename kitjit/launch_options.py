"""The launch options of `kernel[grid](..., maxnreg=, num_ctas=, launch_pdl=, cluster=,
arch=)`, checked on a cache miss (they are part of the key), and the PTX directives a
cluster launch needs."""

from __future__ import annotations


def _check_options(name: str, maxnreg, num_ctas, launch_pdl, cluster=None) -> None:
    """The launch options kitjit takes, checked on a miss (they are part of the key).

    `num_ctas` is Triton's: on sm_90 Triton launches each program as a cluster of num_ctas
    CTAs and splits the program's tiles over them (CTA layouts), so one program runs on
    several SMs. kitjit keeps one CTA per program and takes clusters explicitly instead:
    `cluster=(x, y, z)` groups the programs of the grid into clusters whose CTAs reach each
    other through `kit.cluster_*` ops (ranks, cluster barriers). num_ctas must therefore
    stay 1."""
    if maxnreg is not None and (not isinstance(maxnreg, int) or isinstance(maxnreg, bool)
                                or not 16 <= maxnreg <= 255):
        raise ValueError(f"{name}: maxnreg is a cap on registers per thread, an int from 16 "
                         f"to 255 (or None); got {maxnreg!r}")
    if num_ctas != 1:
        raise ValueError(f"{name}: num_ctas={num_ctas!r} (Triton's split of one program over "
                         "a cluster of CTAs) is not supported; kitjit launches one CTA per "
                         "program (num_ctas=1): use cluster=(x, y, z) to group programs "
                         "into thread-block clusters")
    if cluster is not None:
        check_cluster(name, cluster)
    if launch_pdl not in (False, True, 0, 1):
        raise ValueError(f"{name}: launch_pdl takes True or False, got {launch_pdl!r}")


def check_cluster(name: str, cluster) -> None:
    """`cluster=`: a tuple of 1 to 3 positive ints, at most 16 CTAs in all (more than 8 is
    non-portable: Hopper allows 16 where the kernel's resources let it)."""
    ok = isinstance(cluster, tuple) and 1 <= len(cluster) <= 3 and all(
        isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in cluster)
    if not ok:
        raise ValueError(f"{name}: cluster takes a tuple of 1 to 3 positive ints, the CTAs "
                         f"per thread-block cluster along x, y, z; got {cluster!r}")
    n = 1
    for c in cluster:
        n *= c
    if n > 16:
        raise ValueError(f"{name}: cluster={cluster!r} has {n} CTAs; a thread-block cluster "
                         "holds at most 8 CTAs (portable), 16 on Hopper (non-portable)")


def cluster_entry(ptx: str, cluster: tuple[int, int, int]) -> str:
    """The PTX with `.reqnctapercluster x, y, z` and `.explicitcluster` in the kernel's
    entry directives (after `.maxntid`): the kernel must be launched in clusters of that
    shape, and %cluster_ctarank etc. mean what they say."""
    x, y, z = cluster
    out, done = [], False
    for line in ptx.splitlines(keepends=True):
        out.append(line)
        if not done and line.lstrip().startswith(".maxntid"):
            out.append(f".reqnctapercluster {x}, {y}, {z}\n.explicitcluster\n")
            done = True
    if not done:
        raise RuntimeError("kitjit: no .maxntid in the kernel's PTX to put the cluster "
                           "directives after")
    return "".join(out)


def _check_arch_option(name: str, arch) -> None:
    from .toolchain import SUPPORTED_ARCHS

    if arch is not None and arch not in SUPPORTED_ARCHS:
        raise ValueError(f"{name}: arch={arch!r} is not a target kitjit compiles for (use one "
                         f"of {', '.join(SUPPORTED_ARCHS)}, or None for the GPU's own)")


def _check_runs_on(name: str, arch: str, device_arch: str) -> None:
    """`arch`'s PTX runs on a GPU of `device_arch` when that GPU is at least as new, and
    sm_90a code only on sm_90 itself."""
    from .toolchain import compute_capability

    want, have = compute_capability(arch), compute_capability(device_arch)
    if have is None or want is None or want > have or \
            (arch.endswith("a") and want != have):
        raise ValueError(f"{name}: arch={arch!r} code cannot run on this GPU "
                         f"({device_arch})")

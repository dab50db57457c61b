"""The generated module: the kernels of a fusion plan and `run(*inputs)`, which allocates
the outputs and workspaces and launches the kernels in order. Self-contained (imports torch
and kitjit only), so `opt.source()` saved to a file runs as-is."""

from __future__ import annotations

from . import codegen
from .codegen_attn import attention_kernel
from .codegen_attn_wgmma import attention_wgmma_kernel
from .codegen_mm import matmul_kernel
from .codegen_wgmma import wgmma_kernel
from .graph import KernelGraph
from .plan import Group

HELPERS = [
    "def _empty(shape, dtype, device):",
    "    return torch.empty(shape, dtype=dtype, device=device)",
    "",
    "",
    "def _work(shape, device):",
    '    """fp32 scratch for split partials (every element is written before it is read)."""',
    "    return torch.empty(shape, dtype=torch.float32, device=device)",
    "",
    "",
    "_COUNTERS = {}",
    "",
    "",
    "def _counters(n, device):",
    '    """int32 arrival counters of split-K programs, zero at every launch (the last program',
    "    of a tile puts its counter back): one buffer per device and stream, as launches on a",
    '    stream run in order."""',
    "    stream = torch.cuda.current_stream(device).cuda_stream if device.type == 'cuda' else 0",
    "    t = _COUNTERS.get((device, stream))",
    "    if t is None or t.numel() < n:",
    "        t = _COUNTERS[device, stream] = torch.zeros(max(n, 1024), dtype=torch.int32,",
    "                                                    device=device)",
    "    return t",
    "",
    "",
    "_PDL = {}",
    "",
    "",
    "def _pdl(x):",
    '    """Whether a kernel reading x launches as its predecessor\'s programmatic dependent',
    '    (PDL: sm_90 and later)."""',
    "    if not x.is_cuda:",
    "        return False",
    "    if x.device not in _PDL:",
    "        _PDL[x.device] = torch.cuda.get_device_capability(x.device)[0] >= 9",
    "    return _PDL[x.device]",
    "",
    "",
    "def _input(x, shape, strides, dtype):",
    "    if tuple(x.shape) != shape or x.dtype != dtype:",
    "        raise ValueError(f'expected an input of shape {shape} and {dtype}, got '",
    "                         f'{tuple(x.shape)} and {x.dtype}')",
    "    if x.stride() != strides:   # the kernels bake the declared strides in",
    "        x = torch.empty_strided(shape, strides, dtype=dtype, device=x.device).copy_(x)",
    "    return x",
    "",
    "",
]


def group_source(grp: Group, name: str, pdl: bool = False) -> tuple[list[str], list[str]]:
    if grp.kind == "row":
        return codegen.row_kernel(grp, name)
    if grp.kind == "matmul":
        if grp.params.get("FORM") == "wgmma":
            return wgmma_kernel(grp, name, pdl)
        return matmul_kernel(grp, name)
    if grp.params.get("FORM") == "wgmma":
        return attention_wgmma_kernel(grp, name)
    return attention_kernel(grp, name)


def _after_row(groups: list[Group], i: int) -> bool:
    """Whether group i is a level-2 matmul right after a row kernel whose outputs are not
    its weights: launched as that kernel's programmatic dependent (PDL), it streams the
    weights while the row kernel (rms_norm, say) finishes and reads x past kit.gdc_wait
    (every kernel before the row kernel finished before it started)."""
    if i == 0 or groups[i - 1].kind != "row" or groups[i].kind != "matmul" \
            or groups[i].params.get("FORM") != "wgmma" or groups[i].prologue is not None:
        return False
    made = groups[i - 1].store_ids
    return all(mm.inputs[1].base().id not in made for mm in groups[i].mms)


def module_source(g: KernelGraph, groups: list[Group], header: str) -> str:
    """A self-contained python module: the kernels and `run(*inputs) -> list of outputs`."""
    kernels, body = [], []
    ins = [f"t{t.id}" for t in g.inputs]
    body.append(f"def run({', '.join(ins)}):")
    body.append(f'    """The graph on torch tensors: {len(ins)} inputs in, '
                f'{len(g.outputs)} outputs out (a list)."""')
    for t in g.inputs:
        body.append(f"    t{t.id} = _input(t{t.id}, {t.shape}, {t.strides}, {t.dtype})")
    dev = f"t{g.inputs[0].id}.device"
    prev_def = 0   # the line of the last kernel's `def`
    for i, grp in enumerate(groups):
        for t in grp.nodes:
            if t.id in grp.store_ids:
                body.append(f"    t{t.id} = _empty({t.shape}, {t.dtype}, {dev})")
        name = f"k{i}_{grp.kind}"
        pdl = _after_row(groups, i)
        src, launch = group_source(grp, name, pdl)
        if pdl and any("kit.gdc_wait()" in ln for ln in src):   # the row kernel lets it in
            kernels.insert(prev_def + 1, "    kit.gdc_launch_dependents()   # the matmul after "
                           "may start (it reads x past kit.gdc_wait)")
        prev_def = len(kernels) + 1 + next(j for j, ln in enumerate(src)
                                           if ln.startswith("def "))
        kernels += [f"# {grp.describe()}", *src, "", ""]
        body += ["    " + ln for ln in launch]
    outs = []
    for t in g.outputs:
        b = t.base()
        outs.append(f"t{b.id}" if t is b else
                    f"t{b.id}.as_strided({t.shape}, {codegen.buffer_strides(t)})")
    body.append(f"    return [{', '.join(outs)}]")
    return "\n".join([f'"""{header}"""', "", "import torch", "", "import kitjit as kit", "",
                      "", *kernels, *HELPERS, *body]) + "\n"


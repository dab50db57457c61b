"""Shape ops on register tiles, with Triton's semantics (`triton.language`).

Element order is always row-major: kitjit never reorders elements, so `can_reorder=True`
(and `view`, Triton's reordering reshape) give the same result as the ordered forms. Which
ops move no data (a relabeling of each thread's registers) and which go through shared
memory is said per op; `kitjit compile -o k.tir` shows the layouts the compiler picked.
"""

from __future__ import annotations

from .base import builtin


@builtin
def expand_dims(input, axis):
    """Insert dims of size 1 at `axis` (an int or a sequence of ints, indices into the
    result), like `x[None, :]` / `x[:, None]`. No data moves."""


@builtin
def broadcast_to(input, *shape):
    """Broadcast `x` to `shape` (a tuple or separate ints): dims of size 1 grow. No data
    moves."""


@builtin
def broadcast(input, other):
    """Broadcast two tiles to their common shape; returns both."""


@builtin
def permute(input, *dims):
    """Reorder the dims of `x`: result dim i is x's dim `dims[i]` (a tuple or separate
    ints, a permutation of 0..rank-1). In registers: the result takes x's layout with its
    coordinates permuted, so no data moves (a later op that needs another layout converts
    through shared memory once)."""


@builtin
def trans(input, *dims):
    """`permute(x, dims)`; with no dims, the (1, 0) permutation of a 2-d tile (as Triton:
    other ranks must give dims). `x.T` is the same as `x.trans()`."""


@builtin
def reshape(input, *shape, can_reorder=False):
    """A tile with x's elements in a new shape of the same size, in row-major order. In
    registers (a relabeling: each thread keeps its elements). `can_reorder=True` lets Triton
    reorder the elements; kitjit keeps row-major order either way."""


@builtin
def view(input, *shape):
    """Triton's deprecated reordering reshape (`reshape(x, shape, can_reorder=True)`);
    kitjit keeps row-major order, so this is `reshape`."""


@builtin
def ravel(x, can_reorder=False):
    """`reshape(x, [x.numel])`: row-major order (kitjit keeps it with can_reorder too)."""


@builtin
def squeeze(x, dim):
    """Remove dim `dim`, which must have size 1 (a reshape; no data moves)."""


@builtin
def unsqueeze(x, dim):
    """Insert a dim of size 1 at `dim` (a reshape; no data moves)."""


@builtin
def join(a, b):
    """Join two tiles in a new last dim of size 2: `join(a, b)[..., 0] == a`. a and b are
    broadcast to one shape and must have one dtype; two scalars give a tile of shape [2].
    In registers: the result's new dim is a register of each thread."""


@builtin
def split(a):
    """Split `a` along its last dim, which must have size 2, into two tiles (the inverse of
    `join`). In registers when that dim is held in each thread's registers (as after a
    `join` or a load of a [..., 2] tile); through shared memory otherwise. A tile of shape
    [2] (split into scalars) is not supported yet."""


@builtin
def interleave(a, b):
    """Interleave a and b along their last dim: `reshape(join(a, b), [..., 2 * n])`. In
    registers, like join."""


@builtin
def cat(input, other, can_reorder=False):
    """Concatenate two tiles of one shape and dtype along dim 0. Triton asks for
    `can_reorder=True` and may then reorder elements; kitjit keeps the order (input first,
    then other) either way. In registers: each thread holds its elements of both."""


@builtin
def flip(x, dim=None):
    """Reverse `x` along `dim` (the last dim when None). In registers when that dim is held
    within each thread, by warp shuffles when it spans lanes, through shared memory when it
    spans warps."""


@builtin
def gather(src, index, axis):
    """`out[i][j] = src[index[i][j]][j]` for axis 0 (and likewise for other axes, as
    torch.gather): index is an integer tile of src's rank whose dims other than `axis`
    equal src's. Triton leaves an index outside [0, n) undefined; kitjit takes it modulo n
    (n is a power of two), on the GPU and in the interpreter alike, so -1 is the last.
    Through shared memory."""

"""Level 2: shared tiles, TMA copies, mbarriers, warpgroup roles and WGMMA on Hopper; the
same calls on Ampere / Ada (cp.async, ldmatrix + mma.sync: backend/lower/ampere.py)."""

from __future__ import annotations

from .base import builtin


@builtin
def shared(shape, dtype):
    """A tile in shared memory; a leading dim makes pipeline stages (`a[s]` is stage s). The
    swizzle is chosen from the row width, the same for the TMA box and the WGMMA descriptor.

    Rows and cols are powers of two, or (Hopper) rows a multiple of 8 and cols whole 32-byte
    swizzle chunks: FA4's 192-row Q tile, an 80-row K/V tile. A TMA box is at most 256
    rows. Register tiles keep power-of-two dims, so such a tile is copied by TMA and read by
    kit.mma (on its K side, or as a 192-row A split over three warpgroups), not kit.load."""


@builtin
def mbarriers(count, arrivals=1):
    """`count` mbarriers in shared memory, each completing a phase after `arrivals` arrivals
    (and the bytes that TMA copies announced)."""


@builtin
def mbarrier_arrive(barrier):
    """Arrive on `barrier`, once per warpgroup that runs this (its first thread arrives):
    a consumer warpgroup tells the producer a stage is free."""


@builtin
def warpgroup_id():
    """Which warpgroup (4 warps) this thread belongs to. `if kit.warpgroup_id() == 0:` splits
    the CTA into roles (a producer and consumers); tiles inside a role are spread over that
    role's warps only, and kit.barrier() syncs that role."""


@builtin
def setmaxnreg(count):
    """Set this warpgroup's register budget (setmaxnreg): a producer gives registers up
    (e.g. 40), consumers take them (e.g. 232).

    On Ampere / Ada (sm_80 / 86 / 89) there is no such instruction and this is a no-op, so a
    warp-specialized kernel text still compiles there: every warp keeps the one register
    allocation ptxas gives the kernel (at most 65536 / threads per thread, e.g. 168 for
    three warpgroups), and consumers that counted on 232 may spill."""


@builtin
def named_barrier_wait(id, threads):
    """Wait at named barrier `id` (0-7; an int32 scalar may differ per warpgroup) until
    `threads` threads (a multiple of 32) have arrived, this warpgroup's included (bar.sync).
    With `named_barrier_arrive` it orders warpgroups of one role: warpgroup w waits at
    barrier w, the one before it arrives there when w may go (FA3's scheduler barrier, see
    kitjit/nn/attention.py's TURNS). It orders execution only; data still goes through
    mbarriers. The interpreter runs a role's warpgroups as one program, so it has nothing
    to wait for: waits and arrivals that do not pair up hang on the GPU alone. Ids 0-7 are
    hardware barriers 8-15 (kit.barrier() uses 0, roles 1-7)."""


@builtin
def named_barrier_arrive(id, threads):
    """Count this warpgroup's threads at named barrier `id` towards `threads` and go on
    without waiting (bar.arrive): lets a warpgroup waiting there in
    `named_barrier_wait(id, threads)` proceed."""


@builtin
def tma_load(dst, tensor, coords, barrier, sync=True, multicast=None, split=False,
             l2_promotion=256):
    """Copy the box of the 2-d `tensor` argument at `coords` (row, col) into shared tile `dst`
    with the Tensor Memory Accelerator, completing on `barrier`. Out-of-range parts of the
    box read as zero. One thread issues it; loads on the same barrier in a row share one
    arrival with their total byte count.

    A 3-d `tensor` (batch, rows, cols) takes coords (batch, row, col): the box is one batch
    entry's rows, and rows past that entry's end read as zero, not as the next entry's
    (each dimension is bounded on its own, as the hardware does). Attention reads K and V
    per head this way. A tensor argument keeps one rank in every copy; Hopper only.

    Outside warpgroup roles the CTA first synchronizes, so no thread still reads `dst`;
    `sync=False` skips that barrier where the kernel knows it already (see
    examples/matmul_ampere.py).

    On Ampere / Ada (sm_80 / 86 / 89, no TMA) every thread of the role copies its 16-byte
    pieces with `cp.async` and the barrier completes when all of them have landed (each
    thread arrives: `kit.mbarrier_wait` means the same on both targets). The column
    coordinate must then be a multiple of 16 bytes.

    Clusters (sm_90a): `multicast=mask` lands the box in every CTA of the mask (bit r: CTA
    rank r) at `dst`'s place, counted on each one's `barrier`; each CTA of the mask issues
    its own load with the same mask. With `split=True`, `dst` and `coords` name the whole
    tile that all of them need, and each CTA copies only its part: the tile cut into as many
    parts as the mask has CTAs (part i for the CTA at position i of the mask, in rank
    order), along whole 128-byte column chunks when a row holds several, else along rows
    (multiples of 8); the barrier expects the whole tile. Two CTAs sharing a 64x256 bf16 B
    tile then each copy 64x128 of it, and every MMA reads the whole tile.

    `l2_promotion` (0, 64, 128 or 256 bytes; a constexpr, one value per tensor argument):
    the size of the L2 requests the descriptor's copies make. 256 (the default) suits tiles
    that are reused; a stream read once (decode's K/V cache) runs ~7% faster on an H200 with
    0 (measured, benchmarks/NOTES.md, session 9). A hint: the values loaded are the same.
    Ignored below sm_90 (cp.async)."""


@builtin
def mbarrier_wait(barrier, phase):
    """Wait until `barrier` completes phase `phase` (0 or 1, alternating)."""


@builtin
def mma(a, b, acc, pending=0, next=None):
    """acc + a @ b on Hopper's warpgroup tensor cores (WGMMA), a and b in shared memory, acc in
    registers. Either operand may be a `.T` view of a shared tile (the MMA reads it
    transposed, no copy), and `a` may be a register tile (16-bit, e.g. P of attention).
    Returns with at most `pending` MMA groups still running: reading the result before they
    finish is safe (the compiler waits for that MMA and those before it only), so
    `s = kit.mma(..., pending=1); t = kit.mma(..., pending=1); f(s)` runs f under the second
    MMA, and `pending=1` overlaps an MMA with the next loads; a loop-carried result of the
    previous iteration, read after this iteration's MMA, waits for nothing more.

    M is a multiple of 64 rows per warpgroup of the role (16 * its warps): a role of three
    warpgroups (`num_warps=16` with a producer) takes a 192-row A, one m64 block each, and
    its result, row vectors and elementwise tiles may be 192 rows (kitjit/nn/attention.py,
    BM=192).

    fp16/bf16 tiles, or fp8 on Hopper (float8e4nv / float8e5, mixed allowed; QGMMA). fp8 has
    no transpose bits: A stored [M, K] and B stored [N, K], passed as `b[s].T`, K a multiple
    of 32 (examples/matmul_fp8.py).

    On Ampere / Ada: `ldmatrix` fragments into `mma.sync.m16n8k16` (a may be a register
    tile, or a transposed shared view `a[s].T`); M and K multiples of 16, N of 8; the warps
    split the rows where the result's rows are reduced (softmax), else a squarer grid.
    Synchronous: `pending` has nothing to wait for.

    `next=(a_next, b_next, barrier, phase[, cond])` (Ampere / Ada only; A in shared
    memory): when `cond` (default True) holds, after the MMAs of every k-slice but the last,
    wait for `barrier` to complete `phase` (as `kit.mbarrier_wait`) and load the first
    k-slice fragments of a_next / b_next (views like a and b: `a[s1]`, `b[s1]`); then the
    last slice's MMAs run while they land. The next run of this same `kit.mma` whose tiles
    are a_next / b_next (the loop's next step) starts from those registers instead of
    loading its first slice after its own stage wait. So a_next / b_next must not be
    written between the two runs (the interpreter checks it), and the copies into them must
    be issued before this call (else the wait never ends: the interpreter reports the
    deadlock). With cond False nothing is waited for or loaded (the loop's last step).
    Costs registers: the carried slice (4 a 16-row m-tile and 2 an 8-col n-tile of the
    warp's) and 3 more, live across the loop."""


@builtin
def tma_store(tensor, coords, value, reduce=None):
    """Store register tile `value` into the box of the 2-d `tensor` argument at `coords`
    through shared memory and the Tensor Memory Accelerator: the registers go to a swizzled
    staging tile, one thread issues the bulk copy, and the kernel goes on while it drains.
    Parts of the box outside the tensor are not written. `reduce="add"` adds the tile into
    the box instead (cp.reduce.async.bulk.tensor: atomic per element, so programs may add
    into the same box; fp32, fp16, bf16). A 3-d `tensor` takes (batch, row, col), as
    `tma_load`: rows past the batch entry's end are not written."""


@builtin
def barrier():
    """Synchronize the threads of the CTA (bar.sync)."""

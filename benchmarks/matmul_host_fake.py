"""Host cost of the example GEMM's `matmul(a, w, trans_b=True)` with the driver faked
(kitjit.testing.FakeDriver, sm_90a tile IR so the launcher builds its TMA descriptors as on
a GPU): microseconds of this thread's CPU time per call, best of 5 rounds, at the Llama-3 8B
o projection (N = K = 4096) for M = 16 (split-K in the kernel), 128 (fp32 slabs + a second
launch) and 4096 (autotuned), (a) the same tensors every call, (b) pointers rotating over 3
copies (as benchmarks/gemm_family.py's skinny timing). The descriptor encodes are faked
(one trivial call): on a GPU each new pointer adds a real cuTensorMapEncodeTiled.

    python benchmarks/matmul_host_fake.py [--profile M] [--examples DIR] [--ab OLD.py]

`--ab OLD.py` times another copy of matmul.py (main's, say) in the same process, rounds
interleaved, so that a shared machine's load falls on both alike."""
import os
import sys
import time

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
EXAMPLES = sys.argv[sys.argv.index("--examples") + 1] if "--examples" in sys.argv else \
    os.path.join(ROOT, "examples")   # (another matmul.py to compare: a copy of the old one)
sys.path[:0] = [ROOT, EXAMPLES]
import matmul as mm  # noqa: E402

from kitjit.testing import FakeDriver  # noqa: E402

N = K = 4096


def per_call_us(fn, n=2000, rounds=5):
    for _ in range(50):
        fn()
    best = 1e9
    for _ in range(rounds):
        s = time.thread_time()
        for _ in range(n):
            fn()
        best = min(best, (time.thread_time() - s) / n * 1e6)
    return best


def calls(M: int, mm=mm):
    """(same tensors, rotating pointers) as two zero-argument callables."""
    copies = [(torch.empty(M, K, dtype=torch.bfloat16), torch.empty(N, K, dtype=torch.bfloat16))
              for _ in range(3)]
    a, w = copies[0]
    state = [0]

    def rotate():
        state[0] = (state[0] + 1) % 3
        x, y = copies[state[0]]
        return mm.matmul(x, y, trans_b=True)
    return (lambda: mm.matmul(a, w, trans_b=True)), rotate


def ab(path: str) -> None:
    """Old against new, rounds interleaved: us per call, best of 9 rounds each."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_matmul_old", path)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    old._SMS[torch.device("cpu")] = 132
    print(f"{'M':>5} {'old same':>9} {'new same':>9} {'old rotate':>11} {'new rotate':>11}")
    for M in (16, 128, 4096):
        fns = [*calls(M, old), *calls(M)]           # old same, old rot, new same, new rot
        best = [1e9] * 4
        for _ in range(9):
            for i, fn in enumerate(fns):
                best[i] = min(best[i], per_call_us(fn, n=1000, rounds=1))
        print(f"{M:>5} {best[0]:9.2f} {best[2]:9.2f} {best[1]:11.2f} {best[3]:11.2f}",
              flush=True)


def main():
    prof = int(sys.argv[sys.argv.index("--profile") + 1]) if "--profile" in sys.argv else None
    mm._SMS[torch.device("cpu")] = 132           # an H200's SMs: the GPU's split decisions
    with FakeDriver(record=False, allow_cpu=True, ir_compile=True) as fake:
        if "--ab" in sys.argv:
            return ab(sys.argv[sys.argv.index("--ab") + 1])
        if prof is not None:
            import cProfile
            import pstats
            same, rot = calls(prof)
            for _ in range(50):
                rot()
            cProfile.runctx("for _ in range(3000): rot()", globals(), {"rot": rot},
                            "/tmp/matmul_host.prof")
            pstats.Stats("/tmp/matmul_host.prof").sort_stats("tottime").print_stats(25)
            return
        print(f"{'M':>5} {'plan':22} {'same us':>8} {'rotate us':>10} {'encodes/call':>12} "
              f"{'empty(M,N) us':>13}")
        for M in (16, 128, 4096):
            same, rot = calls(M)
            t_same = per_call_us(same)
            n0 = len(fake.encodings)
            t_rot = per_call_us(rot)
            enc = (len(fake.encodings) - n0) / (50 + 5 * 2000)
            split = mm.splitk_for(M, N, K, 132)
            plan = f"split {split}" + (" slabs" if split > 1 and M > 64 else
                                       " in-kernel" if split > 1 else " autotuned")
            t_empty = per_call_us(lambda: torch.empty(M, N, dtype=torch.bfloat16))  # (CPU
            print(f"{M:>5} {plan:22} {t_same:8.2f} {t_rot:10.2f} {enc:12.2f} "  # malloc)
                  f"{t_empty:13.2f}", flush=True)
        print("noop lambda", f"{per_call_us(lambda: None):.3f} us")


if __name__ == "__main__":
    main()

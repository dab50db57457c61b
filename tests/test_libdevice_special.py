"""libdevice's special cases of the Bessel functions, tgamma, erfcinv and erfcx as the
interpreter gives them (kitjit/interpreter/libm_special.py: rules read off libdevice.10.bc,
checked on an H200's answers in test_libdevice_recorded.py), and a GPU test on probe inputs
beyond that record: every order and edge value each rule speaks of."""

from __future__ import annotations

import math

import numpy as np
import pytest
from libdevice_bounds import mismatches
from test_libdevice_ext import NP, N, run  # (tests/ is on sys.path)

NAN_POS, NAN_NEG = "+nan", "-nan"

# (fn, dtype, order or None, x, libdevice's answer)
RULES = [
    ("j0", "fp32", None, 0.0, 1.0 + 2.0 ** -23), ("j0", "fp64", None, -0.0, 1.0 - 2.0 ** -52),
    ("j0", "fp32", None, -math.inf, 0.0), ("j1", "fp64", None, -math.inf, -0.0),
    ("j1", "fp32", None, -0.0, -0.0), ("y0", "fp64", None, math.inf, 0.0),
    ("y0", "fp32", None, -0.0, -math.inf), ("y1", "fp64", None, -1.0, NAN_NEG),
    ("y1", "fp32", None, -math.inf, NAN_POS),
    ("jn", "fp64", -1, 3.0, NAN_NEG), ("jn", "fp32", -3, 0.0, NAN_POS),
    ("jn", "fp64", 7, 0.0, NAN_NEG), ("jn", "fp32", 2, -0.0, NAN_POS),
    ("jn", "fp64", 5, 1e-300, NAN_NEG), ("jn", "fp64", 3, -math.inf, 0.0),
    ("jn", "fp32", 2, math.inf, 0.0), ("jn", "fp64", 1, -math.inf, -0.0),
    ("yn", "fp64", 2, -0.0, math.inf), ("yn", "fp32", 2, -0.0, -math.inf),
    ("yn", "fp64", 7, 0.0, -math.inf), ("yn", "fp64", 3, math.nan, NAN_NEG),
    ("yn", "fp64", 2, 5e-309, -0.6366197723675814 / 5e-309), ("yn", "fp32", 4, 1e-39, -math.inf),
    ("yn", "fp64", 2, math.inf, 0.0), ("yn", "fp64", 4, -2.5, NAN_NEG),
    ("yn", "fp32", -1, 2.0, NAN_POS),
    ("tgamma", "fp64", None, -5e-324, -math.inf), ("tgamma", "fp64", None, -0.0, -math.inf),
    ("tgamma", "fp64", None, -2.0, NAN_NEG), ("tgamma", "fp32", None, -math.inf, NAN_POS),
    ("erfcinv", "fp64", None, 5e-324, 27.21329321081295), ("erfcinv", "fp32", None, 1.0, 0.0),
    ("erfcinv", "fp64", None, -5e-324, NAN_NEG), ("erfcinv", "fp64", None, 0.0, math.inf),
    ("erfcinv", "fp32", None, 2.0, -math.inf),
    ("erfcx", "fp64", None, 1e30, 5.641895835477563e-31), ("erfcx", "fp32", None, -math.inf,
                                                           math.inf),
]


def _bits(v, dt: str) -> int:
    return int(np.array([v], NP[dt]).view(np.int32 if dt == "fp32" else np.int64)[0])


def _want(v, dt: str):
    if v == NAN_POS:
        return np.array([np.nan], NP[dt])[0]
    if v == NAN_NEG:
        return -np.array([np.nan], NP[dt])[0]
    return NP[dt](v)


@pytest.mark.parametrize("fn,dt,n,x,want", RULES,
                         ids=[f"{r[0]}-{r[1]}-{r[2]}-{r[3]!r}" for r in RULES])
def test_libdevice_rule(fn, dt, n, x, want, monkeypatch):
    monkeypatch.setenv("KITJIT_INTERPRET", "1")
    xs = ([np.full(N, n, np.int32)] if n is not None else []) + [np.full(N, x, NP[dt])]
    got = run(fn, xs, dt)
    w = _want(want, dt)
    assert _bits(got[0], dt) == _bits(w, dt), (fn, dt, n, x, got[0], w)


# ------------------------------------------------------------------ GPU probes
_X32 = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.4e-45, -1.4e-45, 1.17549435e-38, 2.0 ** -24,
        2.0 ** -25, 1e-30, 1e-20, 1e-10, 1e-7, 1e-3, 0.5, 1.0, 2.0, 2.404825557695773, 3.0,
        7.99, 8.0, 8.01, 29.5, 100.0, 1e6, 1e15, 3.4028234663852886e38, -0.5, -2.5, -8.01,
        -100.0]
_X64 = _X32 + [5e-324, -5e-324, 2.2250738585072014e-308, 5e-309, 1e-300, 2.0 ** -53, 1e100,
               1.7976931348623157e308]
_ORDERS = [-5, -1, 0, 1, 2, 3, 7, 10, 30]
_ONE_ARG = {
    "j0": None, "j1": None, "y0": None, "y1": None,
    "tgamma": [0.0, -0.0, math.inf, -math.inf, math.nan, -1.0, -2.0, -0.5, -5.5, 0.5, 1.0, 2.0,
               10.0, 30.0, 34.0, 36.0, 171.0, 172.0, 1e-30, -1e-30, 1.4e-45, -1.4e-45,
               5e-324, -5e-324, -1e-300],
    "erfcinv": [0.0, -0.0, 2.0, 2.0000002, -1.4e-45, 1.0, 0.99999994, 1.0000001, 1.4e-45,
                5e-324, 1e-30, 1e-10, 0.5, 1.5, 1.999, math.inf, -math.inf, math.nan, 3.0],
    "erfcx": [0.0, -0.0, math.inf, -math.inf, math.nan, -27.0, -26.0, -9.0, -10.0, 1e30, 1e300,
              3.4028234663852886e38, 1.7976931348623157e308, 1e-30, 0.5, 5.0, 30.0, -0.5],
}


def _probes(fn: str, dt: str) -> list[np.ndarray]:
    base = _X32 if dt == "fp32" else _X64
    xs = _ONE_ARG.get(fn) or base
    with np.errstate(over="ignore"):
        x = np.array([v for v in xs], np.float64).astype(NP[dt])
    if fn in ("jn", "yn"):
        n = np.repeat(np.array(_ORDERS, np.int32), len(x))
        return [n, np.tile(x, len(_ORDERS))]
    return [x]


def _chunks(xs: list[np.ndarray]):
    k = len(xs[0])
    for i in range(0, k, N):
        part = [np.resize(x[i:i + N], N) for x in xs]  # (the last chunk wraps around)
        yield part, min(N, k - i)


@pytest.mark.gpu
@pytest.mark.parametrize("fn", ["j0", "j1", "y0", "y1", "jn", "yn", "tgamma", "erfcinv",
                                "erfcx"])
@pytest.mark.parametrize("dt", ["fp32", "fp64"])
def test_gpu_special_probes(fn, dt, monkeypatch):
    bad = []
    for part, k in _chunks(_probes(fn, dt)):
        got = run(fn, part, dt, device="cuda")
        monkeypatch.setenv("KITJIT_INTERPRET", "1")
        want = run(fn, part, dt)
        monkeypatch.delenv("KITJIT_INTERPRET")
        bad += mismatches(fn, dt == "fp32", [x[:k] for x in part], got[:k], want[:k])
    assert not bad, (fn, dt, len(bad), bad[:10])

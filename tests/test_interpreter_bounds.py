"""Out-of-bounds accesses are reported relative to the argument, not its storage."""

from __future__ import annotations

import pytest
import torch

import kitjit as kit
from kitjit.interpreter import OutOfBoundsError


@kit.jit
def _copy16(X, Y):
    offs = kit.arange(0, 16)
    kit.store(Y + offs, kit.load(X + offs))


def test_oob_past_a_view_in_the_same_storage():
    """A read past the end of an argument is out of bounds even when it lands in the
    storage of a larger tensor the argument is a view of."""
    big = torch.arange(64, dtype=torch.float32)
    y = torch.empty(16)
    _copy16[(1,)](big[:16], y)  # inside the view: fine
    assert torch.equal(y, big[:16])
    with pytest.raises(OutOfBoundsError, match="out-of-bounds load") as e:
        _copy16[(1,)](big[:10], y)
    assert "'X' + element 10" in str(e.value) and "has 10 elements" in str(e.value)
    with pytest.raises(OutOfBoundsError, match="out-of-bounds store"):
        _copy16[(1,)](big[:16], big[20:30])
    # a strided view: its span runs from its first to its last element (61 here)
    _copy16[(1,)](big[::4], y)
    assert torch.equal(y, big[:16])
    with pytest.raises(OutOfBoundsError):
        _copy16[(1,)](big[50::4], y)  # elements 50..62: the reads run to 65
    # two views of one storage: each access must fall inside one of them
    _copy16[(1,)](big[:16], big[16:32])
    assert torch.equal(big[16:32], big[:16])

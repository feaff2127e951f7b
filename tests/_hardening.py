"""Helpers shared by the hardening tests: arrays of any layout, guarded buffers, RSS.

Every array built here lives inside a larger buffer whose other bytes hold a
known pattern, so a test can check that a call wrote exactly the elements it
owns and nothing around them (``Guarded.check_outside``).
"""

import math
import os
from dataclasses import dataclass

import numpy as np
import pytest
from conftest import np_dtype
from hypothesis import strategies as st

SENTINEL_BYTE = 0xA5
# Set by ci/sanitize.sh: ASan's shadow memory and quarantine make RSS
# measurements meaningless there.
UNDER_SANITIZER = bool(os.environ.get("TRILINEAR_BWD_SANITIZER"))
# GCC 12's ASan allocator takes no lock around fork(): a child forked while
# another thread is inside malloc or free can wait forever on the
# allocator's own lock (seen in tests/test_torch_fast.py's forked children,
# a backtrace ending in SizeClassAllocator64's mutex).  A test that forks
# while other threads of the process allocate runs everywhere but there;
# the package's own fork safety is what the plain runs test.
forks_while_threads_allocate = pytest.mark.skipif(
    UNDER_SANITIZER, reason="ASan's allocator is not fork-safe while other threads allocate")


@dataclass(frozen=True)
class Layout:
    """Where the elements of a 5-D array live inside a flat buffer.

    Attributes
    ----------
    perm : tuple of int
        Memory order of the logical axes, outermost first.
    steps : tuple of int
        Element step per logical axis (2 leaves gaps between elements).
    flips : tuple of bool
        Logical axes walked backwards (negative strides).
    offset, tail : int
        Elements of buffer before and after the block the view spans.
    """

    perm: tuple = (0, 1, 2, 3, 4)
    steps: tuple = (1, 1, 1, 1, 1)
    flips: tuple = (False,) * 5
    offset: int = 0
    tail: int = 0

    def describe(self):
        return (f"perm={self.perm} steps={self.steps} flips={self.flips} "
                f"offset={self.offset} tail={self.tail}")


NCDHW = Layout()
NDHWC = Layout(perm=(0, 2, 3, 4, 1))


@st.composite
def layouts(draw, ndim=5):
    """Any layout: a permutation of the axes, gaps, reversed axes, offsets."""
    perm = tuple(draw(st.permutations(range(ndim))))
    steps = tuple(draw(st.lists(st.sampled_from([1, 1, 1, 2]), min_size=ndim, max_size=ndim)))
    flips = tuple(draw(st.lists(st.booleans(), min_size=ndim, max_size=ndim)))
    return Layout(perm, steps, flips, draw(st.integers(0, 3)), draw(st.integers(0, 2)))


def _view(buf, shape, layout):
    """The view of flat ``buf`` that ``layout`` describes (works for any dtype)."""
    mem_shape = [shape[a] * layout.steps[a] for a in layout.perm]
    size = math.prod(mem_shape)
    mem = buf[layout.offset:layout.offset + size].reshape(mem_shape)
    mem = mem[tuple(slice(None, None, layout.steps[a]) for a in layout.perm)]
    view = mem.transpose(np.argsort(layout.perm))
    return view[tuple(slice(None, None, -1) if f else slice(None) for f in layout.flips)]


class Guarded:
    """A view of ``shape`` and ``dtype`` laid out as ``layout`` inside a larger buffer.

    The buffer's bytes start as ``SENTINEL_BYTE``; ``check_outside`` verifies
    that every byte outside the view still holds it (nothing written out of
    bounds or into the gaps).
    """

    def __init__(self, shape, dtype, layout=NCDHW, values=None, fill=None):
        dtype = np_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)
        self.shape = tuple(shape)
        self.layout = layout
        n = layout.offset + math.prod(shape[a] * layout.steps[a] for a in layout.perm) + layout.tail
        self.buffer = np.empty(n, dtype=dtype)
        self.buffer.view(np.uint8)[...] = SENTINEL_BYTE
        self.view = _view(self.buffer, self.shape, layout)
        mask = np.zeros(n, dtype=bool)
        _view(mask, self.shape, layout)[...] = True
        self._outside = ~mask
        if values is not None:
            self.view[...] = values
        elif fill is not None:
            self.view[...] = fill
        self._snapshot = self.buffer.view(np.uint8).copy()

    def check_outside(self):
        """Assert that no element outside the view was written."""
        outside = self.buffer[self._outside].view(np.uint8)
        assert (outside == SENTINEL_BYTE).all(), (
            f"bytes outside the view were written ({self.layout.describe()})")

    def check_untouched(self):
        """Assert that the whole buffer, view included, is as it was built."""
        assert np.array_equal(self.buffer.view(np.uint8), self._snapshot), (
            f"the array was written ({self.layout.describe()})")

    def reset(self):
        """Restore the buffer as it was built."""
        self.buffer.view(np.uint8)[...] = self._snapshot


def guarded_bytes(nbytes, shift=0, guard=64):
    """A writable ``uint8`` block of ``nbytes`` starting ``shift`` bytes past a
    64-byte boundary, with ``guard`` sentinel bytes on each side.

    Returns (block, check) where ``check()`` asserts that the guards are intact.
    """
    raw = np.empty(nbytes + 2 * guard + 128, dtype=np.uint8)
    raw[...] = SENTINEL_BYTE
    start = (-raw.ctypes.data % 64) + guard + shift
    # Keep the leading guard: start at a line boundary plus guard plus shift.
    start = start if start >= guard else start + 64
    block = raw[start:start + nbytes]

    def check():
        assert (raw[:start] == SENTINEL_BYTE).all(), "workspace underrun"
        assert (raw[start + nbytes:] == SENTINEL_BYTE).all(), "workspace overrun"

    return block, check


def rss_bytes():
    """Resident set size of this process, from /proc/self/statm."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def torch_or_none():
    """PyTorch if it can be imported (the sanitizer run may go without it)."""
    if os.environ.get("TRILINEAR_BWD_NO_TORCH"):
        return None
    try:
        import torch
    except Exception:  # noqa: BLE001 - missing, or failing to load under a sanitizer
        return None
    return torch


def blocked_stream(stream):
    """Occupy ``stream``'s worker until the returned event is set (what is launched next waits)."""
    import threading

    started, release = threading.Event(), threading.Event()
    stream._submit(lambda: (started.set(), release.wait()))
    started.wait()
    return release

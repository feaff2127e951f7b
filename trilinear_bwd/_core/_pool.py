"""A bounded LRU pool of already-faulted memory for the results the library allocates.

A fresh result of tens of megabytes costs more to fault in than the kernel
costs to compute: the operating system maps and zeroes each page on its first
write (``docs/performance.md``, "Large results and the memory pool").  The
NumPy results the library allocates (the one call without ``out``,
``trilinear_bwd.dask``'s blocks on the local schedulers; a
``dask.distributed`` worker's come from ``np.empty``, memory Dask can see
and free) come from here instead of ``np.empty``.  A block comes back to
the pool only from the finalizer of the object that owns it, which runs
when its result and every view of it (NumPy, DLPack, ``torch.from_numpy``)
have died: nothing can reach a block when it is handed out again.  The next
result of the same size reuses it, already faulted in -- what PyTorch's
caching allocators do for GPU memory.  Torch results are PyTorch's own
(``torch.empty``): memory PyTorch frees cannot come back here.

The pool holds at most ``limit()`` bytes of free blocks (``POOL_BYTES`` by
default, ``$TRILINEAR_BWD_POOL_BYTES`` or :func:`set_limit` to change; 0
turns it off) and serves the current working set: a block handed back goes
in as the most recently used, and the least recently used blocks (by size,
by when a block of that size was last taken or given back) are released to
the operating system until the pool is within its limit again.  A block
larger than the limit is released at once.  Results smaller than
``MIN_BYTES`` come from ``np.empty``: malloc already reuses small blocks
without faulting.  :func:`stats` says what the pool holds.
"""

import collections
import math
import threading

import numpy as np

from . import _environ, _fork
from ._coerce import as_int, invalid
from ._constants import LINE

POOL_BYTES = 512 * 2**20
MIN_BYTES = 2**20

_lock = threading.Lock()
_fork.renew(globals(), "_lock", threading.Lock)
_free = collections.OrderedDict()    # nbytes -> list of raw blocks, least recently used first
_held = 0
_hits = 0
_misses = 0
_limit = _environ.read_bytes(_environ.POOL_BYTES, POOL_BYTES)
# Blocks handed back by finalizers, which may run in any thread at any time
# (a garbage collection inside this module included): appending to a deque
# needs no lock, and the next take() files them.
_returned = collections.deque()


@_fork.at_child
def _after_fork_in_child():
    # A fork between two updates made under the lock (a block taken, the
    # bytes not yet counted) leaves them apart in the child: count again.
    global _held
    _held = sum(size * len(blocks) for size, blocks in _free.items())


class _Owner:
    """The owner of a pooled result's memory: it hands the block back when the last view dies."""

    __slots__ = ("_raw", "__array_interface__")

    def __init__(self, raw, shape, typestr, strides):
        self._raw = raw
        start = -raw.ctypes.data % LINE
        self.__array_interface__ = {
            "shape": shape, "typestr": typestr, "strides": strides,
            "data": (raw.ctypes.data + start, False), "version": 3,
        }

    def __del__(self):
        _returned.append(self._raw)


def limit():
    """Return the most bytes of free blocks the pool keeps.

    Returns
    -------
    int
        ``POOL_BYTES`` (512 MiB) unless ``$TRILINEAR_BWD_POOL_BYTES`` or
        :func:`set_limit` said otherwise; 0 means no pool.
    """
    return _limit


def set_limit(nbytes):
    """Set the most bytes of free blocks the pool keeps (0: no pool); return the previous limit.

    Parameters
    ----------
    nbytes : int
        Bytes, >= 0; the least recently used blocks beyond it are released
        to the operating system now.

    Returns
    -------
    int
        The previous limit.

    Raises
    ------
    InvalidArgumentError
        (161002) ``nbytes`` is not an integer, or is negative.
    """
    global _limit
    nbytes = as_int(nbytes, "nbytes")
    if nbytes < 0:
        raise invalid(f"nbytes must be >= 0, got {nbytes}")
    with _lock:
        previous, _limit = _limit, nbytes
        _file_returned()
    return previous


def held():
    """Return the bytes of free blocks the pool holds now."""
    with _lock:
        _file_returned()
        return _held


def stats():
    """Describe what the pool holds now and how it has served.

    Returns
    -------
    dict
        ``limit`` (bytes), ``held`` (bytes of free blocks), ``blocks``
        (``{block bytes: count}``, least recently used size first; a block
        is a result's bytes plus 64 for alignment), ``hits`` and ``misses``
        (results of ``MIN_BYTES`` or more served from a pooled block or
        freshly allocated since the process started or :func:`clear`).
    """
    with _lock:
        _file_returned()
        return {"limit": _limit, "held": _held,
                "blocks": {size: len(blocks) for size, blocks in _free.items()},
                "hits": _hits, "misses": _misses}


def _file_returned():
    """File the blocks finalizers handed back as most recently used, then trim (lock held)."""
    global _held
    while _returned:
        raw = _returned.popleft()
        if raw.nbytes > _limit:
            continue                      # would evict everything else, and more
        _free.setdefault(raw.nbytes, []).append(raw)
        _free.move_to_end(raw.nbytes)
        _held += raw.nbytes
    while _held > _limit:
        size, blocks = next(iter(_free.items()))   # the least recently used size
        blocks.pop()
        _held -= size
        if not blocks:
            del _free[size]


def empty(shape, dtype, channels_last=False):
    """Return an uninitialised array of ``shape`` (N, C, D, H, W), pooled when large.

    Parameters
    ----------
    shape : tuple of 5 int
    dtype : numpy dtype
        float32, float64, float16 or bfloat16.
    channels_last : bool
        C innermost in memory (strides of an NDHWC array), else C order.

    Returns
    -------
    ndarray
        Writable; its memory returns to the pool when it and all its views die.
    """
    global _held, _hits, _misses
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < MIN_BYTES or _limit == 0:
        if not channels_last:
            return np.empty(shape, dtype)
        n, c, d, h, w = shape
        return np.empty((n, d, h, w, c), dtype).transpose(0, 4, 1, 2, 3)
    order = (0, 2, 3, 4, 1) if channels_last else (0, 1, 2, 3, 4)
    size = nbytes + LINE
    raw = None
    with _lock:
        _file_returned()
        blocks = _free.get(size)
        if blocks:
            raw = blocks.pop()
            _held -= size
            if blocks:
                _free.move_to_end(size)
            else:
                del _free[size]
            _hits += 1
        else:
            _misses += 1
    if raw is None:
        raw = np.empty(size, np.uint8)
    stored_shape = tuple(shape[k] for k in order)
    step = dtype.itemsize
    stored_strides = [0] * 5
    for k in range(4, -1, -1):
        stored_strides[k] = step
        step *= stored_shape[k]
    strides = [0] * 5
    for k, axis in enumerate(order):
        strides[axis] = stored_strides[k]
    # The interface speaks in plain types; 16-bit floats NumPy cannot name
    # there (bfloat16) are laid out as uint16 and viewed.
    plain = dtype if dtype.kind == "f" and dtype.name != "bfloat16" else np.dtype(np.uint16)
    arr = np.asarray(_Owner(raw, tuple(shape), plain.str, tuple(strides)))
    return arr if plain == dtype else arr.view(dtype)


def clear():
    """Release every free block to the operating system and reset the counts of :func:`stats`."""
    global _held, _hits, _misses
    with _lock:
        _file_returned()
        _free.clear()
        _held = _hits = _misses = 0

"""Reused storages for the large tensors the torch front ends return.

A tensor handed to PyTorch code must behave like one PyTorch allocated
(``resize_``, ``out=`` of another shape), so those results come from
PyTorch's allocator, not from the NumPy blocks of :mod:`._pool`.  PyTorch's
CPU allocator keeps nothing, so a fresh result of tens of megabytes would pay
the first touch of its pages on every call (``docs/performance.md``, "Fresh
results").  This module keeps the storages of earlier large results: a
storage that nothing but this module refers to any more (every tensor and
view of it has died; PyTorch counts the references) is handed out again,
already faulted in.  A storage someone resized, or made unresizable
(``Tensor.numpy()`` does), is dropped instead of reused.  The storages kept,
in use or free, take at most :func:`._pool.limit` bytes; free ones leave
least recently used first.

Only ``trilinear_bwd.torch`` and the one call given a tensor come here; the
rest of the package never imports this module.
"""

import collections
import math
import threading

import torch

from . import _fork, _pool

# PyTorch's count of the references to a storage (every tensor, view and
# Python storage object); without it nothing can be known free, and nothing
# is kept.
_use_count = getattr(torch._C, "_storage_Use_Count", None)

_lock = threading.Lock()
_fork.renew(globals(), "_lock", threading.Lock)
# id(storage) -> (storage, nbytes when made), least recently used first.
_kept = collections.OrderedDict()
_kept_bytes = 0


def _is_free(storage, nbytes):
    """True when only this module refers to ``storage`` and it is as it was made."""
    return (_use_count(storage._cdata) == 1 and storage.nbytes() == nbytes
            and storage.resizable())


def _take(nbytes):
    """A kept free storage of ``nbytes``, or None; drops kept storages that changed."""
    global _kept_bytes
    for key, (storage, size) in list(_kept.items()):
        if storage.nbytes() != size or not storage.resizable():
            # Resized or made unresizable by its user: never reused, and
            # its bytes are no longer this module's to count.
            del _kept[key]
            _kept_bytes -= size
        elif size == nbytes and _use_count(storage._cdata) == 1:
            _kept.move_to_end(key)
            return storage
    return None


def _keep(storage, nbytes):
    """Keep a new storage if the limit allows, after dropping free ones least recent first."""
    global _kept_bytes
    limit = _pool.limit()
    if nbytes > limit:
        return
    for key, (old, size) in list(_kept.items()):
        if _kept_bytes + nbytes <= limit:
            break
        if _is_free(old, size):
            del _kept[key]
            _kept_bytes -= size
    if _kept_bytes + nbytes <= limit:
        _kept[id(storage)] = (storage, nbytes)
        _kept_bytes += nbytes


def empty_strided(shape, strides, dtype):
    """An uninitialised CPU tensor from PyTorch's allocator, its storage reused when one is free.

    Parameters
    ----------
    shape, strides : tuple of 5 int
        Already within the contract's limits; the strides of a dense tensor
        (those ``torch.empty`` gives a memory format).
    dtype : torch.dtype

    Returns
    -------
    torch.Tensor
        Resizable, like every tensor ``torch.empty_strided`` returns.

    Raises
    ------
    RuntimeError
        PyTorch's own, when the memory cannot be had.
    """
    nbytes = math.prod(shape) * dtype.itemsize
    if _use_count is None or nbytes < _pool.MIN_BYTES or _pool.limit() == 0:
        return torch.empty_strided(shape, strides, dtype=dtype)
    with _lock:
        storage = _take(nbytes)
    if storage is None:
        fresh = torch.empty_strided(shape, strides, dtype=dtype)
        storage = fresh.untyped_storage()
        with _lock:
            _keep(storage, nbytes)
        return fresh
    return torch.empty(0, dtype=dtype).set_(storage, 0, shape, strides)


def empty(shape, dtype, memory_format):
    """:func:`empty_strided` with the strides ``torch.empty`` gives ``memory_format``.

    Parameters
    ----------
    shape : tuple of 5 int
    dtype : torch.dtype
    memory_format : torch.memory_format
        ``torch.contiguous_format`` or ``torch.channels_last_3d``.

    Returns
    -------
    torch.Tensor
    """
    n, c, d, h, w = shape
    if memory_format == torch.channels_last_3d:
        strides = (d * h * w * c, 1, h * w * c, w * c, c)
    else:
        strides = (c * d * h * w, d * h * w, h * w, w, 1)
    return empty_strided(tuple(shape), strides, dtype)


def held():
    """Return the bytes of the storages kept now (in use or free)."""
    with _lock:
        return _kept_bytes


def clear():
    """Forget every kept storage (those still in use stay with their tensors)."""
    global _kept_bytes
    with _lock:
        _kept.clear()
        _kept_bytes = 0


_pool._on_clear.append(clear)

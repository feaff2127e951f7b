"""Keeping remembered addresses true: memory an executor or a run holds an address of.

A repeatable executor remembers the addresses of its bound arrays and of the
workspace it last checked, so that a repeated run costs no more than the
kernel.  An address stays true only while its owner cannot move the memory
behind it.  Each kind of owner is handled here (``docs/reliability.md``,
"Remembered addresses"):

* a NumPy array that owns its memory can move it only through
  ``ndarray.resize``, which NumPy refuses while a weak reference to the
  array exists, ``refcheck=False`` or not.  :func:`pin` takes one on the
  array that owns the memory, for as long as the address is remembered;
* memory exported through the buffer protocol (``bytearray``, ``mmap``,
  ``array.array``, a ``memoryview``) cannot be resized while NumPy's view of
  it lives;
* an array of a registered kind (``_arrays.register_kind``: a torch tensor,
  which can replace or resize its storage at any time with ``resize_``,
  ``set_`` or ``untyped_storage().resize_``) is checked before each run by
  its kind's ``memory`` check: that it still starts at the remembered
  address and its storage still covers the bytes the kernel touches, else
  361001 (``torch._arrays.TorchMemory``);
* the package's own pooled results (``_pool``) keep their block until the
  last view dies;
* anything else (another DLPack producer, an ``__array_interface__``
  object) is not remembered at all: its address is taken afresh, with every
  check, on each run (:func:`stable`).
"""

import weakref

import numpy as np


def _owner(arr):
    """The object that owns ``arr``'s memory: an ndarray owning it, another object, or None."""
    owner = arr
    while isinstance(owner, np.ndarray) and not owner.flags.owndata:
        owner = owner.base
    return owner


def pin(arr):
    """Keep NumPy from moving ``arr``'s memory while the returned object lives.

    Parameters
    ----------
    arr : ndarray

    Returns
    -------
    weakref.ref or None
        A weak reference to the array that owns the memory (NumPy refuses to
        resize an array that has one); None when no NumPy array owns it.
    """
    owner = _owner(arr)
    return weakref.ref(owner) if isinstance(owner, np.ndarray) else None


def stable(arr):
    """True if ``arr``'s memory cannot move while ``arr`` and :func:`pin` of it live.

    The package's own pooled results count: their owner never hands the
    block back while a view of it lives (``_pool._Owner``).
    """
    from ._pool import _Owner

    owner = _owner(arr)
    return owner is None or isinstance(owner, (np.ndarray, memoryview, bytes, _Owner))


def extent(arr):
    """Bytes from element [0, ..., 0] of ``arr`` to the end of its last element (strides >= 0)."""
    if arr.size == 0:
        return 0
    return sum((n - 1) * abs(s) for n, s in zip(arr.shape, arr.strides)) + arr.itemsize


def bound(call):
    """What keeps an executor's bound arrays where their remembered addresses say.

    Parameters
    ----------
    call : trilinear_bwd._core._operator.Call

    Returns
    -------
    pins : tuple
        :func:`pin` of each array NumPy owns: to be kept while the
        addresses are remembered.
    checks : tuple
        One memory check (``holds()``, ``check()``) per bound array of a
        registered kind, to run before each run.
    """
    pins = tuple(p for p in (pin(call.source), pin(call.target)) if p is not None)
    arrays = dict(zip(call.names, (call.source, call.target)))
    checks = tuple(b.memory(extent(arrays[b.name])) for b in call.bindings
                   if b.name in arrays)
    return pins, checks

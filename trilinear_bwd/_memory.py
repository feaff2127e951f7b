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
* a torch tensor can replace or resize its storage at any time
  (``resize_``, ``set_``, ``untyped_storage().resize_``); a
  :class:`TorchMemory` checks before each run that the tensor still starts
  at the remembered address and that its storage still covers the bytes the
  kernel touches, and raises 361001 otherwise;
* the package's own pooled results (``_pool``) keep their block until the
  last view dies;
* anything else (another DLPack producer, an ``__array_interface__``
  object) is not remembered at all: its address is taken afresh, with every
  check, on each run (:func:`stable`).
"""

import sys
import weakref

import numpy as np

from ._status import ExecutionError


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


def is_tensor(obj):
    """True if ``obj`` is a torch tensor (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


class TorchMemory:
    """A torch tensor whose memory a run uses: the address and the bytes it must still own.

    Parameters
    ----------
    name : str
        The operator's name for it (``"workspace"``, ``"gradInput"``...).
    tensor : torch.Tensor
    address : int
        Its data pointer when it was checked.
    nbytes : int
        Bytes from ``address`` the kernel may touch.
    """

    __slots__ = ("name", "tensor", "address", "nbytes", "_storage", "_base", "_need")

    def __init__(self, name, tensor, address, nbytes):
        self.name, self.tensor, self.address, self.nbytes = name, tensor, address, nbytes
        # The storage is looked up once (a lookup costs more than the checks).
        # While the tensor starts at ``address`` and this storage still starts
        # at ``_base`` with ``_need`` bytes, ``address`` lies in live memory
        # of that storage: no other storage can hold it at the same time.
        storage = tensor.untyped_storage()
        self._storage, self._base = storage, storage.data_ptr()
        self._need = address - self._base + nbytes

    def holds(self):
        """True if the tensor still starts at ``address`` and its storage covers ``nbytes``."""
        try:
            storage = self._storage
            return (self.tensor.data_ptr() == self.address and storage.data_ptr() == self._base
                    and storage.nbytes() >= self._need)
        except Exception:  # noqa: BLE001 - a tensor that cannot say counts as moved
            return False

    def check(self):
        """Raise 361001 unless :meth:`holds`."""
        if not self.holds():
            raise ExecutionError(
                f"{self.name}'s torch tensor no longer owns the memory it had when it was "
                "checked (resize_, set_ or a storage resize since); nothing was written. "
                + ("Pass it again to execute" if self.name == "workspace" else
                   "Bind it again with update_arrays")
            )


def bound(args):
    """What keeps an executor's bound arrays where their remembered addresses say.

    Parameters
    ----------
    args : trilinear_bwd._arguments.Arguments

    Returns
    -------
    pins : tuple
        :func:`pin` of each array NumPy owns: to be kept while the
        addresses are remembered.
    checks : tuple of TorchMemory
        One per bound torch tensor, to check before each run.
    """
    pins = tuple(p for p in (pin(args.grad_out), pin(args.grad_input)) if p is not None)
    arrays = dict(zip(args.names, (args.grad_out, args.grad_input)))
    checks = tuple(TorchMemory(b.name, b.tensor, b.address, extent(arrays[b.name]))
                   for b in args.tensors if b.name in arrays)
    return pins, checks

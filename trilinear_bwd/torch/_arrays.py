"""PyTorch's tensors as arrays of the core: what DLPack cannot carry, and results of their kind.

The core (``_arrays``) views NumPy arrays, DLPack producers and buffers; a
tensor needs more, and all of it is here, registered as the tensor *kind*
(``_arrays.register_kind``).  The core loads this module at the first
tensor it is given, so ``import trilinear_bwd`` never imports torch.

* :meth:`TensorKind.view`: a tensor's memory as a NumPy array, without
  copying, with every tensor state that DLPack cannot carry resolved or
  refused (``docs/reliability.md``);
* :meth:`TensorKind.binding`: what an executor keeps of a bound tensor, to
  check before each run that its memory did not move and to bump its
  version counter after writing it, as PyTorch's ``out=`` ops do;
* :meth:`TensorKind.memory`: the check of a tensor's memory that a
  remembered address relies on (``_memory``);
* :meth:`TensorKind.new_like`: a fresh result from PyTorch's allocator, so
  that a tensor in gives a tensor out.
"""

import ctypes
import platform
import sys
import warnings

import numpy as np
import torch
from torch.autograd.graph import increment_version

from .._core import _arrays, _fork
from . import _private
from .._core._status import AllocationError, ExecutionError, InvalidArgumentError

_TORCH_TO_NUMPY = {"float32": np.float32, "float64": np.float64, "float16": np.float16}


def _bfloat16():
    return _fork.import_module("ml_dtypes").bfloat16


def tensor_view(tensor):
    """A NumPy view of a tensor this library just allocated (no checks: it is plain memory)."""
    if tensor.dtype == torch.bfloat16:
        return np.from_dlpack(tensor.view(torch.int16)).view(_bfloat16())
    return np.from_dlpack(tensor)


# A large result is first touched by the kernel, a page fault per 4 KiB page
# of fresh memory; transparent huge pages make that one per 2 MiB
# (``docs/performance.md``, "Large results and the memory pool").  PyTorch's
# allocator asks for them itself only with THP_MEM_ALLOC_ENABLE=1, NumPy for
# every large array.  madvise's advice number on the architectures this
# package builds for.
HUGE_PAGE = 2**21
_MADV_HUGEPAGE = 14


def _load_madvise():
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "aarch64"):
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    return madvise


_madvise = _load_madvise()


def huge_pages(tensor):
    """Ask for transparent huge pages under ``tensor``'s whole 2 MiB pages; return ``tensor``.

    A hint to the operating system about memory the tensor owns, before it
    is written: the values, the strides and the storage are unchanged
    (still PyTorch's, resizable).  Without the hint (another system, THP
    off, a tensor smaller than two huge pages) nothing happens.
    """
    storage = tensor.untyped_storage()
    nbytes = storage.nbytes()
    if _madvise is None or nbytes < 2 * HUGE_PAGE:
        return tensor
    address = storage.data_ptr()
    start = -(-address // HUGE_PAGE) * HUGE_PAGE
    stop = (address + nbytes) // HUGE_PAGE * HUGE_PAGE
    _madvise(start, stop - start, _MADV_HUGEPAGE)      # advice: its failure is no error
    return tensor


def new_strided(shape, strides, dtype):
    """``torch.empty_strided`` on the CPU, large results in huge pages (:func:`huge_pages`)."""
    return huge_pages(torch.empty_strided(shape, strides, dtype=dtype, device="cpu"))


def new_tensor(shape, dtype, memory_format, name):
    """An uninitialised CPU tensor from PyTorch's allocator; 561000 if it cannot be had.

    ``torch.empty``'s own: resizable, on the CPU whatever device the caller
    made the default, and the library keeps nothing of it (``docs/torch.md``,
    "Results are PyTorch's"); a large one in huge pages (:func:`huge_pages`).

    Parameters
    ----------
    shape : tuple of 5 int
        Already within the contract's limits.
    dtype : torch.dtype
    memory_format : bool or torch.memory_format
        True (or ``torch.channels_last_3d``): NDHWC in memory.
    name : str
        The operator's name of the array, for the message.
    """
    if memory_format is True:
        memory_format = torch.channels_last_3d
    elif memory_format is False:
        memory_format = torch.contiguous_format
    try:
        result = torch.empty(shape, dtype=dtype, device="cpu", memory_format=memory_format)
    except RuntimeError as exc:   # PyTorch's out-of-memory on CPU
        raise AllocationError(f"could not allocate {name} of shape {shape}: {exc}") from None
    return huge_pages(result)


def _address(tensor, name):
    """The tensor's data pointer, or 161002 if it has no real memory."""
    if type(tensor) in (torch.Tensor, torch.nn.Parameter):
        address = tensor.data_ptr()
    else:
        # Subclasses (fake, functional, user-defined) may warn or raise here.
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                address = tensor.data_ptr()
        except Exception as exc:  # noqa: BLE001
            raise InvalidArgumentError(
                f"{name} ({type(tensor).__name__}) has no memory that can be read: {exc}"
            ) from None
    if address == 0 and tensor.numel():
        raise InvalidArgumentError(
            f"{name} ({type(tensor).__name__}) has no memory (its data pointer is null): "
            "a fake, meta or zero tensor cannot be read or written in place"
        )
    return address


class TensorBinding:
    """A PyTorch tensor that a checked array views.

    Attributes
    ----------
    name : str
        The operator's name of the array (``"gradOut"``, ``"out"``...).
    tensor : torch.Tensor
        The caller's tensor.
    address : int
        Its data pointer when it was bound.
    """

    __slots__ = ("name", "tensor", "address")

    def __init__(self, name, tensor, address):
        self.name, self.tensor, self.address = name, tensor, address

    def check(self):
        """Raise 361001 if the tensor's memory moved since it was bound (``resize_``, ``set_``)."""
        try:
            moved = self.tensor.data_ptr() != self.address
        except Exception:  # noqa: BLE001 - treat an unreadable pointer as moved
            moved = True
        if moved:
            raise ExecutionError(
                f"{self.name}'s torch tensor no longer uses the memory it had when it was "
                "bound (resize_, set_ or a storage swap since); bind it again with "
                "update_arrays"
            )

    def mark_written(self):
        """Bump the tensor's version counter, as PyTorch's in-place and ``out=`` ops do."""
        increment_version(self.tensor)

    def memory(self, nbytes):
        """The :class:`TorchMemory` check of the ``nbytes`` the kernel touches from ``address``."""
        return TorchMemory(self.name, self.tensor, self.address, nbytes)


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


class TensorKind:
    """The tensor kind registered with ``_arrays`` (see :func:`_arrays.register_kind`)."""

    @staticmethod
    def view(tensor, name, written):
        """View a tensor's memory as a NumPy array, without copying, or raise 161002.

        Not plain DLPack because a tensor that requires grad refuses to
        export itself (its memory is still readable: ``detach`` shares it),
        NumPy cannot import bfloat16 through DLPack (the bits are imported
        as int16 and viewed as ``ml_dtypes.bfloat16``), and DLPack carries
        only memory: whatever else a tensor says about its values is lost
        on the way.  So lazy negation and conjugation bits are refused, an
        efficient zero tensor reads as zeros (and is refused as a written
        array), an inference tensor is written only in inference mode, a
        tensor that requires grad is written only outside grad mode, and
        the imported memory must be the tensor's own (a fake or functional
        tensor has none).
        """
        if tensor.device.type != "cpu":
            raise InvalidArgumentError(f"{name} must live in CPU memory, got a torch tensor on "
                          f"{tensor.device}")
        if tensor.is_nested:
            raise InvalidArgumentError(f"{name} must be a dense (strided) tensor, got a nested tensor")
        if tensor.layout != torch.strided:
            raise InvalidArgumentError(f"{name} must be a dense (strided) tensor, got layout {tensor.layout}")
        if tensor.requires_grad:
            if written and torch.is_grad_enabled():
                # PyTorch's own rule for out= tensors: writing into a tensor that
                # autograd tracks would silently corrupt its graph.
                raise InvalidArgumentError(
                    f"{name} is written in place and must not require grad while grad mode "
                    "is enabled; pass tensor.detach() or call under torch.no_grad()"
                )
            tensor = tensor.detach()
        if tensor.is_neg() or tensor.is_conj():
            bit = "negative" if tensor.is_neg() else "conjugate"
            raise InvalidArgumentError(
                f"{name} is a torch tensor with the {bit} bit set (a lazy view whose values "
                f"differ from its memory, which DLPack cannot carry); pass "
                f"tensor.resolve_{'neg' if bit == 'negative' else 'conj'}() instead"
            )
        if written and tensor.is_inference() and not torch.is_inference_mode_enabled():
            # PyTorch refuses in-place updates of inference tensors outside it.
            raise InvalidArgumentError(
                f"{name} is an inference tensor, which may be written only inside "
                "torch.inference_mode(); pass a normal tensor (tensor.clone())"
            )
        dtype_name = str(tensor.dtype).rpartition(".")[2]
        if _private.is_zerotensor(tensor):
            if written:
                raise InvalidArgumentError(f"{name} is a torch zero tensor, which has no memory to write into")
            if dtype_name == "bfloat16":
                dtype = _bfloat16()
            elif dtype_name in _TORCH_TO_NUMPY:
                dtype = _TORCH_TO_NUMPY[dtype_name]
            else:
                raise InvalidArgumentError(f"{name} dtype must be {_arrays.DTYPE_NAMES}, got {tensor.dtype}")
            return np.broadcast_to(np.zeros((), dtype), tuple(tensor.shape))
        address = _address(tensor, name)
        what = f" (a torch.{dtype_name} tensor)"
        # DLPack rather than tensor.numpy(): numpy() would mark the caller's
        # storage as not resizable from then on (tested: resize_ raises).
        if tensor.dtype == torch.bfloat16:
            arr = _arrays.from_dlpack(tensor.view(torch.int16), name, what).view(_bfloat16())
        else:
            arr = _arrays.from_dlpack(tensor, name, what)
        if arr.size and arr.ctypes.data != address:
            raise InvalidArgumentError(
                f"{name}{what} could not be imported in place: DLPack handed over other "
                "memory than the tensor's (a tensor subclass without real storage?)"
            )
        return arr

    @staticmethod
    def binding(tensor, name):
        """The :class:`TensorBinding` of a tensor with memory, else None (``view`` says why)."""
        try:
            if _private.is_zerotensor(tensor):
                return None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return TensorBinding(name, tensor, tensor.data_ptr())
        except Exception:  # noqa: BLE001 - view refuses such a tensor with the reason
            return None

    @staticmethod
    def memory(tensor, name, address, nbytes):
        """A :class:`TorchMemory` check of ``nbytes`` from ``address`` in ``tensor``."""
        return TorchMemory(name, tensor, address, nbytes)

    @staticmethod
    def new_like(tensor, shape, channels_last, name):
        """``(result, view)``: a tensor from PyTorch's allocator, of ``tensor``'s dtype, and its NumPy view.

        The caller's kind of array back, resizable like every tensor
        PyTorch returns.
        """
        result = new_tensor(shape, tensor.dtype, channels_last, name)
        return result, tensor_view(result)


_arrays.register_kind(torch.Tensor, TensorKind)

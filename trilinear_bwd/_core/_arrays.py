"""The caller's arrays viewed as NumPy arrays in place: NumPy, DLPack, buffers, and foreign kinds.

The kernel reads and writes the caller's memory through NumPy views made
here, never through copies: an array that is written (``written=True``:
gradInput, out, the workspace) and could only be converted by copying is
refused.  Everything a view cannot show about the memory (its dtype's
support, alignment, self-overlap) is asked here too, once.

Array types that need more than DLPack (PyTorch's tensors: grad state, lazy
views, version counters, results from their own allocator) are handled by
the front end that knows them, which registers a *kind* for its type
(:func:`register_kind`).  The core never imports such a package: the front
end is loaded when the first of its arrays arrives, which can only happen
once the caller imported the package (``FOREIGN``).
"""

import functools
import numbers
import sys

import numpy as np

from . import _fork
from ._coerce import invalid
# The address of element [0, ..., 0] of an ndarray (0 if empty), compiled.
from .._kernels._native import data_address  # noqa: F401 - part of this module's interface

# Storage dtype -> (kernel dtype code, accumulation dtype).  bfloat16 comes
# from ml_dtypes and is recognised by name so that importing this package does
# not import ml_dtypes.  The codes are the kernel's (``_constants``).
from ._constants import DT_BFLOAT16, DT_FLOAT16, DT_FLOAT32, DT_FLOAT64

# dtype name: (kernel dtype code, PyTorch's opmath type).  The opmath type is
# the one PyTorch computes coordinates and weights in, so it decides which
# weights are exactly zero (docs/numerics.md); the kernel itself sums every
# dtype in float64 (``Call.acc_dtype``).
_FLOAT_DTYPES = {
    "float32": (DT_FLOAT32, np.float32),
    "float64": (DT_FLOAT64, np.float64),
    "float16": (DT_FLOAT16, np.float32),
    "bfloat16": (DT_BFLOAT16, np.float32),
}
DTYPE_NAMES = "float32, float64, float16 or bfloat16"


def numpy_dtype(name):
    """The NumPy dtype of one of the four dtype names (bfloat16 from ml_dtypes).

    ml_dtypes is imported only when bfloat16 is asked for, so that importing
    this package does not import it (through the fork guard, as every
    first-use import is).

    Parameters
    ----------
    name : {"float32", "float64", "float16", "bfloat16"}

    Returns
    -------
    numpy.dtype
    """
    if name == "bfloat16":
        return np.dtype(_fork.import_module("ml_dtypes").bfloat16)
    return np.dtype(name)


_DLPACK_CPU = 1  # kDLCPU

# Packages whose arrays need a front end of their own, and the module that
# registers it: imported at the first such array, which exists only once
# the caller imported the package.
FOREIGN = {"torch": "trilinear_bwd.torch._arrays"}
_kinds = []          # (base type, kind), registered by the FOREIGN modules
_loaded = set()


def register_kind(base, kind):
    """Handle instances of ``base`` (and its subclasses) with ``kind``.

    Parameters
    ----------
    base : type
    kind : object
        With ``view(obj, name, written)`` (an ndarray of the object's
        memory, or 161002), ``binding(obj, name)`` (what the executor keeps
        to check the memory before each run and mark it written after, or
        None), ``memory(obj, name, address, nbytes)`` (a check of memory
        that must stay where it is, with ``holds()`` and ``check()``) and
        ``new_like(obj, shape, channels_last, name)`` (a fresh result of the
        object's kind and a NumPy view of it).
    """
    _kinds.append((base, kind))


def kind_of(obj):
    """The registered kind that handles ``obj``, or None for NumPy, DLPack and buffers."""
    for package, module in FOREIGN.items():
        if package not in _loaded and package in sys.modules:
            # Marked loaded only once its kind is registered: a thread that
            # comes here meanwhile imports it too (importlib makes it wait).
            _fork.import_module(module)
            _loaded.add(package)
    for base, kind in _kinds:
        if isinstance(obj, base):
            return kind
    return None


def imported(obj, name, written=False):
    """``(view, binding)``: :func:`as_array` of ``obj`` and its kind's binding (None if none)."""
    if isinstance(obj, np.ndarray):
        return obj, None
    kind = kind_of(obj)
    if kind is None:
        return _as_plain_array(obj, name, written), None
    binding = kind.binding(obj, name)
    return kind.view(obj, name, written), binding


def as_array(obj, name, written=False):
    """View ``obj`` as a NumPy array without copying, or raise 161002.

    Accepts NumPy arrays, arrays of a registered kind (PyTorch CPU tensors,
    any strides, any of the four float dtypes including bfloat16), other
    objects with ``__dlpack__`` on a CPU device, and anything exposing the
    buffer or array interface (memoryviews, ``__array_interface__``).
    These are all viewed in place: the result shares the caller's memory and
    is writable when the caller's memory is.

    Parameters
    ----------
    obj : object
        The caller's array.
    name : str
        The operator's name for it, used in messages.
    written : bool
        The library writes it: an object that could only be converted by
        copying (a list, say) is refused instead of copied.

    Returns
    -------
    ndarray
        A view of ``obj``'s memory; ``obj`` itself if it is an ndarray.

    Raises
    ------
    InvalidArgumentError
        (161002) ``obj`` lives on a non-CPU device, is a scalar or string,
        cannot be imported, or needs a copy but is written; or its kind
        refuses it.
    """
    if isinstance(obj, np.ndarray):
        return obj
    kind = kind_of(obj)
    if kind is not None:
        return kind.view(obj, name, written)
    return _as_plain_array(obj, name, written)


def _as_plain_array(obj, name, written):
    """:func:`as_array` of an object of no registered kind: DLPack, buffers, array-likes."""
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        try:
            device_type = int(obj.__dlpack_device__()[0])
        except Exception as exc:  # noqa: BLE001 - a foreign object misbehaving
            raise invalid(f"{name}: __dlpack_device__() failed: {exc}") from None
        if device_type != _DLPACK_CPU:
            raise invalid(
                f"{name} must live in CPU memory (DLPack device type {_DLPACK_CPU}), "
                f"got a DLPack device of type {device_type}"
            )
        return from_dlpack(obj, name)
    if isinstance(obj, (bool, numbers.Number, str, bytes)):
        raise invalid(f"{name} must be an array, got {type(obj).__name__}")
    try:
        if written:
            # NumPy >= 2.0 (the declared floor): copy=False raises rather than copy.
            return np.asarray(obj, copy=False)
        return np.asarray(obj)
    except ValueError as exc:
        if written and "copy" in str(exc):
            raise invalid(
                f"{name} is written in place, so it must be an array whose memory can be "
                f"shared (NumPy array, DLPack tensor or buffer), got {type(obj).__name__}"
            ) from None
        raise invalid(f"{name} must be an array, got {type(obj).__name__}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - whatever np.asarray objects to
        raise invalid(f"{name} must be an array, got {type(obj).__name__}: {exc}") from None


def from_dlpack(obj, name, what=None):
    """Import a CPU DLPack producer, asking it not to copy."""
    try:
        try:
            return np.from_dlpack(obj, copy=False)
        except TypeError:  # NumPy < 2.1, or a producer without the copy keyword
            return np.from_dlpack(obj)
    except Exception as exc:  # noqa: BLE001 - the producer's own error
        raise invalid(
            f"{name}{what or ''} could not be imported through DLPack: {exc}"
        ) from None


@functools.lru_cache(maxsize=64)
def dtype_info(dtype):
    """``(kernel dtype code, PyTorch's opmath dtype)`` of a supported dtype, None otherwise.

    Cached per dtype object: ``dtype.name`` is slow next to a dict lookup, and
    this is asked on every call.
    """
    supported = dtype.name in _FLOAT_DTYPES and (
        dtype.kind == "f" or dtype.type.__module__.startswith("ml_dtypes")
    )
    if not supported:
        return None
    code, acc = _FLOAT_DTYPES[dtype.name]
    return code, np.dtype(acc)


def check_dtype(arr, name):
    """161002 unless ``arr`` holds one of the four float dtypes in native byte order."""
    dtype = arr.dtype
    if dtype_info(dtype) is None:
        raise invalid(f"{name} dtype must be {DTYPE_NAMES}, got {dtype}")
    if not dtype.isnative:
        raise invalid(f"{name} must be in native byte order, got {dtype.str}")


def same_strides(shape, strides, other):
    """True if ``strides`` and ``other`` address the same elements of an array of ``shape``.

    The stride of an axis of size 1 is never multiplied by anything but 0, and
    an array with an axis of size 0 has no elements: those strides say nothing
    about the layout (PyTorch, NumPy and DLPack exporters each report them in
    their own way), so only the strides of axes longer than 1 are compared.
    Every check that compares strides goes through here.
    """
    if len(strides) != len(shape) or len(other) != len(shape):
        return False
    if 0 in shape:
        return True
    return all(a == b for n, a, b in zip(shape, strides, other) if n > 1)


def is_misaligned(arr):
    """True if an element of ``arr`` is not aligned to its size (the kernel needs aligned ones)."""
    if not arr.flags.aligned:
        return True
    # NumPy's flag checks the address and the strides against the dtype's
    # alignment, which is its size for the four float types on every 64-bit
    # platform; the loop below only runs where it is not.  Axes of size 1
    # (or an empty array) are never stepped along: their strides do not count.
    if arr.dtype.alignment >= arr.itemsize or arr.size == 0:
        return False
    return any(st % arr.itemsize for st, n in zip(arr.strides, arr.shape) if n > 1)


def check_aligned(arr, name):
    """161002 if :func:`is_misaligned`."""
    if is_misaligned(arr):
        raise invalid(f"{name} must be aligned to its element size ({arr.itemsize} bytes)")


def has_internal_overlap(arr):
    """Return True unless ``arr``'s elements are provably at distinct addresses.

    The test is the sufficient one: sorted by stride, each axis must step over
    the whole extent of the axes inside it.  Layouts it cannot prove (exotic
    interleavings) count as overlapping.
    """
    axes = sorted(
        (abs(s), n) for s, n in zip(arr.strides, arr.shape) if n > 1
    )
    extent = arr.itemsize
    for stride, n in axes:
        if stride < extent:
            return True
        extent = stride * (n - 1) + extent
    return False


def is_channels_last(arr):
    """Return True if C is the innermost non-trivial axis of a 5-D array."""
    n, c = arr.shape[:2]
    if c <= 1:
        return False
    sc = abs(arr.strides[1])
    spatial = [abs(s) for s, k in zip(arr.strides[2:], arr.shape[2:]) if k > 1]
    return all(sc < s for s in spatial)

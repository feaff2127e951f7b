"""Validation of phase one: every rule of the operator contract, checked in Python.

The kernels trust what they are given, so everything that can be wrong with a
call is found here, before any memory is written.  Messages use the operator's
(CANN) parameter names, name the rule broken and show the offending value.
"""

import math
import numbers
import sys
from dataclasses import dataclass

import numpy as np

from ._status import InvalidArgumentError, NullArgumentError

MAX_DIM = 2**20
MAX_BYTES = 60 * 2**30
MAX_PRODUCT = 2**31

# Storage dtype -> (kernel dtype code, accumulation dtype).  bfloat16 comes
# from ml_dtypes and is recognised by name so that importing this package does
# not import ml_dtypes.
_FLOAT_DTYPES = {
    "float32": (0, np.float32),
    "float64": (1, np.float64),
    "float16": (2, np.float32),
    "bfloat16": (3, np.float32),
}


@dataclass(frozen=True)
class Arguments:
    """A call of phase one that passed every check.

    Attributes
    ----------
    grad_out, grad_input : ndarray
        The arrays, as NumPy views of the caller's memory.
    output_size : tuple of int
        ``(oD, oH, oW)``.
    input_size : tuple of int
        ``(N, C, iD, iH, iW)``.
    align_corners : bool
    scales : tuple of float
        ``(scales_d, scales_h, scales_w)``; 0.0 where not given.
    """

    grad_out: np.ndarray
    grad_input: np.ndarray
    output_size: tuple
    input_size: tuple
    align_corners: bool
    scales: tuple

    @property
    def dtype_code(self):
        """The kernel's code for the storage dtype."""
        return _FLOAT_DTYPES[self.grad_out.dtype.name][0]

    @property
    def acc_dtype(self):
        """The accumulation dtype: float64 for float64 data, else float32."""
        return np.dtype(_FLOAT_DTYPES[self.grad_out.dtype.name][1])


def invalid(message):
    """Return a 161002 error with ``message``."""
    return InvalidArgumentError(message)


# Arrays the library writes: importing them must never copy, or the result
# would land in a temporary and be lost.
_WRITTEN = frozenset({"gradInput", "workspace"})
_DLPACK_CPU = 1  # kDLCPU


def as_array(obj, name):
    """View ``obj`` as a NumPy array without copying, or raise 161002.

    Accepts NumPy arrays, PyTorch CPU tensors (any strides, any of the four
    float dtypes including bfloat16, with or without ``requires_grad``),
    other objects with ``__dlpack__`` on a CPU device, and anything exposing
    the buffer or array interface (memoryviews, ``__array_interface__``).
    These are all viewed in place: the result shares the caller's memory and
    is writable when the caller's memory is.

    Parameters
    ----------
    obj : object
        The caller's array.
    name : str
        The operator's name for it, used in messages.  ``"gradInput"`` and
        ``"workspace"`` are written: for them an object that could only be
        converted by copying (a list, say) is refused instead of copied.

    Returns
    -------
    ndarray
        A view of ``obj``'s memory; ``obj`` itself if it is an ndarray.

    Raises
    ------
    InvalidArgumentError
        (161002) ``obj`` lives on a non-CPU device, is a scalar or string,
        cannot be imported, needs a copy but is written, or is a tensor that
        requires grad passed as ``gradInput`` while grad mode is on.
    """
    if isinstance(obj, np.ndarray):
        return obj
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, getattr(torch, "Tensor", ())):
        return _from_torch(torch, obj, name)
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
        return _from_dlpack(obj, name)
    if isinstance(obj, (bool, numbers.Number, str, bytes)):
        raise invalid(f"{name} must be an array, got {type(obj).__name__}")
    try:
        if name in _WRITTEN:
            try:
                return np.asarray(obj, copy=False)
            except TypeError:  # NumPy 1.x: no copy keyword; it copies only if needed
                return np.asarray(obj)
        return np.asarray(obj)
    except ValueError as exc:
        if name in _WRITTEN and "copy" in str(exc):
            raise invalid(
                f"{name} is written in place, so it must be an array whose memory can be "
                f"shared (NumPy array, DLPack tensor or buffer), got {type(obj).__name__}"
            ) from None
        raise invalid(f"{name} must be an array, got {type(obj).__name__}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - whatever np.asarray objects to
        raise invalid(f"{name} must be an array, got {type(obj).__name__}: {exc}") from None


def _from_dlpack(obj, name, what=None):
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


def _from_torch(torch, tensor, name):
    """View a PyTorch tensor's memory as a NumPy array, without copying.

    Handled here rather than by plain DLPack because a tensor that requires
    grad refuses to export itself (its memory is still readable: ``detach``
    shares it), and NumPy cannot import bfloat16 through DLPack: the bits are
    imported as int16 and viewed as ``ml_dtypes.bfloat16``.
    """
    if tensor.device.type != "cpu":
        raise invalid(f"{name} must live in CPU memory, got a torch tensor on {tensor.device}")
    if tensor.layout != torch.strided:
        raise invalid(f"{name} must be a dense (strided) tensor, got layout {tensor.layout}")
    if tensor.requires_grad:
        if name in _WRITTEN and torch.is_grad_enabled():
            # PyTorch's own rule for out= tensors: writing into a tensor that
            # autograd tracks would silently corrupt its graph.
            raise invalid(
                f"{name} is written in place and must not require grad while grad mode "
                "is enabled; pass tensor.detach() or call under torch.no_grad()"
            )
        tensor = tensor.detach()
    what = f" (a torch.{str(tensor.dtype).rpartition('.')[2]} tensor)"
    if tensor.dtype == torch.bfloat16:
        import ml_dtypes

        return _from_dlpack(tensor.view(torch.int16), name, what).view(ml_dtypes.bfloat16)
    return _from_dlpack(tensor, name, what)


def _int_list(value, name, length):
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise invalid(f"{name} must be a sequence of {length} integers, got {value!r}")
    # A 0-d array has __len__ but is not iterable, and a foreign
    # object's __len__ / __iter__ may raise anything; all of these are a bad
    # argument (161002), never a TypeError escaping to the caller.
    try:
        items = list(value.tolist() if isinstance(value, np.ndarray) else value)
    except Exception:  # noqa: BLE001 - whatever the object's iteration raises
        raise invalid(
            f"{name} must be a sequence of {length} integers, got {type(value).__name__}"
        ) from None
    if len(items) != length:
        raise invalid(f"{name} must have exactly {length} elements, got {len(items)}")
    out = []
    for k, item in enumerate(items):
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, numbers.Integral):
            raise invalid(f"{name}[{k}] must be an integer, got {item!r}")
        out.append(int(item))
    return tuple(out)


def _scale(value, name):
    if value is None:
        return 0.0
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise invalid(f"{name} must be a real number, got {value!r}")
    # float() of a huge integer (10**400) raises OverflowError.
    try:
        value = float(value)
    except (OverflowError, ValueError, TypeError):
        raise invalid(f"{name} must be finite, got {value!r}") from None
    if not math.isfinite(value):
        raise invalid(f"{name} must be finite, got {value}")
    return value


def _check_dtype(arr, name):
    dtype = arr.dtype
    supported = dtype.name in _FLOAT_DTYPES and (
        dtype.kind == "f" or dtype.type.__module__.startswith("ml_dtypes")
    )
    if not supported:
        raise invalid(
            f"{name} dtype must be float32, float64, float16 or bfloat16, got {dtype}"
        )
    if not dtype.isnative:
        raise invalid(f"{name} must be in native byte order, got {dtype.str}")


def _check_strides(arr, name):
    if not arr.flags.aligned or any(s % arr.itemsize for s in arr.strides):
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


def _check_limits(go_shape, gi_shape):
    for name, shape in (("gradOut", go_shape), ("gradInput", gi_shape)):
        for k, n in enumerate(shape):
            if n > MAX_DIM:
                raise invalid(
                    f"{name} dimension {k} must be at most 2**20 = {MAX_DIM}, got {n}"
                )
    n, c, od, oh, ow = go_shape
    _, _, id_, ih, iw = gi_shape
    need = n * c * (od * oh * ow + id_ * ih * iw + od * oh * iw + od * ih * iw) * 4
    if need >= MAX_BYTES:
        raise invalid(
            "N*C*(oD*oH*oW + iD*iH*iW + oD*oH*iW + oD*iH*iW)*4 must be below "
            f"60 GiB = {MAX_BYTES} bytes, got {need}"
        )
    if n * c * od * oh >= MAX_PRODUCT:
        raise invalid(f"N*C*oD*oH must be below 2**31, got {n * c * od * oh}")
    if iw * ih >= MAX_PRODUCT:
        raise invalid(f"iW*iH must be below 2**31, got {iw * ih}")


def _check_overlap(grad_out, grad_input):
    if not grad_input.flags.writeable:
        raise invalid("gradInput must be writable, got a read-only array")
    if grad_input.size > 1 and has_internal_overlap(grad_input):
        raise invalid("gradInput must not overlap itself (zero or interleaved strides)")
    if grad_out.size and grad_input.size:
        try:
            shared = np.shares_memory(grad_out, grad_input, max_work=1_000_000)
        except np.exceptions.TooHardError:
            shared = True
        if shared:
            raise invalid("gradInput must not overlap gradOut")


def validate(grad_out, output_size, input_size, align_corners, scales_d, scales_h,
             scales_w, grad_input, *, allocate=False):
    """Check a phase-one call against the operator contract.

    Parameters are those of ``aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize``;
    with ``allocate=True`` the call has no ``grad_input`` yet (the caller will
    allocate a fresh one), so the checks of ``grad_input`` are skipped and the
    result's ``grad_input`` is None.

    Returns
    -------
    Arguments
        The checked, normalised call.

    Raises
    ------
    NullArgumentError
        (161001) ``grad_out``, ``output_size``, ``input_size`` or ``grad_input`` is None.
    InvalidArgumentError
        (161002) any other rule of the contract is broken.
    """
    for value, name in (
        (grad_out, "gradOut"),
        (output_size, "outputSize"),
        (input_size, "inputSize"),
        (grad_input, "gradInput"),
    ):
        if value is None and not (allocate and name == "gradInput"):
            raise NullArgumentError(f"{name} must not be None")

    grad_out = as_array(grad_out, "gradOut")
    grad_input = None if allocate else as_array(grad_input, "gradInput")
    _check_dtype(grad_out, "gradOut")
    if not allocate and grad_input.dtype != grad_out.dtype:
        raise invalid(
            f"gradInput dtype must equal gradOut dtype {grad_out.dtype}, got {grad_input.dtype}"
        )
    if grad_out.ndim != 5:
        raise invalid(f"gradOut must be 5-D (N, C, D, H, W), got {grad_out.ndim}-D")

    output_size = _int_list(output_size, "outputSize", 3)
    for k, n in enumerate(output_size):
        if n <= 0:
            raise invalid(f"outputSize[{k}] must be > 0, got {n}")
    input_size = _int_list(input_size, "inputSize", 5)
    for k in (0, 1):
        if input_size[k] < 0:
            raise invalid(f"inputSize[{k}] must be >= 0, got {input_size[k]}")
    for k in (2, 3, 4):
        if input_size[k] <= 0:
            raise invalid(f"inputSize[{k}] must be > 0, got {input_size[k]}")

    for k, axis in enumerate("NC"):
        if grad_out.shape[k] != input_size[k]:
            raise invalid(
                f"gradOut {axis} must equal inputSize[{k}] = {input_size[k]}, "
                f"got {grad_out.shape[k]}"
            )
    for k, axis in enumerate("DHW"):
        if grad_out.shape[k + 2] != output_size[k]:
            raise invalid(
                f"gradOut {axis} must equal outputSize[{k}] = {output_size[k]}, "
                f"got {grad_out.shape[k + 2]}"
            )
    if not allocate and grad_input.shape != input_size:
        raise invalid(
            f"gradInput shape must equal inputSize {input_size}, got {tuple(grad_input.shape)}"
        )
    _check_limits(grad_out.shape, input_size)

    if not isinstance(align_corners, (bool, np.bool_)):
        raise invalid(f"alignCorners must be a bool, got {align_corners!r}")
    align_corners = bool(align_corners)
    scales = []
    for k, (value, name) in enumerate(
        ((scales_d, "scalesD"), (scales_h, "scalesH"), (scales_w, "scalesW"))
    ):
        s = _scale(value, name)
        n_in, n_out = input_size[k + 2], output_size[k]
        # A finite scale can still overflow in n_in * s (1e308 * 2
        # is inf, and math.floor(inf) raises OverflowError): that is simply
        # inconsistent with any output size.
        product = n_in * s
        floored = math.floor(product) if math.isfinite(product) else product
        if not align_corners and s > 0 and floored != n_out:
            raise invalid(
                f"{name} = {s!r} is inconsistent with outputSize[{k}] = {n_out}: "
                f"floor(inputSize[{k + 2}] * {name}) = floor({n_in} * {s!r}) = {floored}"
            )
        scales.append(s)

    _check_strides(grad_out, "gradOut")
    if not allocate:
        _check_strides(grad_input, "gradInput")
        _check_overlap(grad_out, grad_input)
    return Arguments(grad_out, grad_input, output_size, input_size, align_corners, tuple(scales))

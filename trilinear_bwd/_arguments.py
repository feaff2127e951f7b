"""Every argument of every front end, turned into checked arguments here and only here.

The one call, the two phases, ``trilinear_bwd.aclnn``, ``trilinear_bwd.torch``
and ``trilinear_bwd.dask`` all hand what they received to this module (as
pyFFTW's ``builders/_utils.py`` normalises every argument once before the
planned object sees it); what comes out is an :class:`Arguments` that
``_plan`` turns into the kernel's typed plan.  The kernels trust what they
are given, so everything that can be wrong with a call is found here, before
any memory is written.  Messages use the operator's (CANN) parameter names,
name the element the caller passed and the rule broken, and show the
offending value.
"""

import functools
import math
import numbers
import operator
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import _fork, _openmp_helpers
from ._plan import data_address
from ._status import ExecutionError, InvalidArgumentError, NullArgumentError

MAX_THREADS = 1024
MAX_DIM = 2**20
MAX_BYTES = 60 * 2**30
MAX_PRODUCT = 2**31

# Which operator's rules a front end follows where PyTorch's and CANN's
# implementations differ (the scales; docs/operator.md, "Which layer follows
# which rule").  Every other rule is the same in both.
PYTORCH_RULES = "pytorch"
CANN_RULES = "cann"

# The two operators.  Both run the same kernel: it computes a *target*
# array from a *source* array through per-axis tables; the backward's
# source is gradOut and its target gradInput, the forward's are self and out.
BACKWARD = "backward"
FORWARD = "forward"
# What each operator calls its (source, target) arrays, in messages and in
# the tensor bindings.
ARRAY_NAMES = {BACKWARD: ("gradOut", "gradInput"), FORWARD: ("self", "out")}

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
        The arrays the kernel reads and writes, as NumPy views of the
        caller's memory: for the backward ``gradOut`` and ``gradInput``, for
        the forward (``op == "forward"``) ``self`` and ``out``.
    output_size : tuple of int
        ``(oD, oH, oW)``: the upsampled volume's size (gradOut's for the
        backward, out's for the forward).
    input_size : tuple of int
        ``(N, C, iD, iH, iW)``: the volume before upsampling (gradInput's
        shape for the backward, self's for the forward).
    align_corners : bool
    scales : tuple of float
        ``(scales_d, scales_h, scales_w)`` as the tables use them: <= 0.0
        where not given.  Under CANN's rules these are the scales passed
        when all three are > 0 (and ``align_corners`` is False), else
        ``(0.0, 0.0, 0.0)``.
    tensors : tuple of TensorBinding
        The PyTorch tensors behind ``grad_out`` / ``grad_input``, if any:
        checked before every run (their memory must not have moved) and,
        for the written one, marked as written after it.
    rules : {"pytorch", "cann"}
        The rules the call was checked under (see :func:`validate`); a
        repeatable executor checks its new arrays under the same ones.
    op : {"backward", "forward"}
        The operator.
    window : tuple or None
        For a block of a larger call (:func:`window_arguments`): per spatial
        axis ``(t0, t1, s0)``, the block's targets ``t0:t1`` of the whole
        axis and the first source point its source block holds; the sizes
        above are then the whole call's.
    """

    grad_out: np.ndarray
    grad_input: np.ndarray
    output_size: tuple
    input_size: tuple
    align_corners: bool
    scales: tuple
    tensors: tuple = ()
    rules: str = PYTORCH_RULES
    # Class attributes, not dataclass fields: each field costs a frozen
    # setattr in __init__ on every call, and these differ from their
    # defaults only for the forward and for Dask's blocks, which set them
    # with _with_op.
    op = BACKWARD
    window = None

    @property
    def names(self):
        """``(read, written)``: the operator's names of the two arrays."""
        return ARRAY_NAMES[self.op]

    def addresses(self):
        """``(gradOut, gradInput)``: the addresses of their element [0, 0, 0, 0, 0], found once."""
        cached = self.__dict__.get("_addresses")
        if cached is None:
            cached = (data_address(self.grad_out), data_address(self.grad_input))
            object.__setattr__(self, "_addresses", cached)
        return cached

    @property
    def dtype_code(self):
        """The kernel's code for the storage dtype."""
        return dtype_info(self.grad_out.dtype)[0]

    @property
    def acc_dtype(self):
        """The accumulation dtype: float64 for float64 data, else float32."""
        return dtype_info(self.grad_out.dtype)[1]


@functools.lru_cache(maxsize=64)
def dtype_info(dtype):
    """``(kernel dtype code, accumulation dtype)`` of a supported dtype, None otherwise.

    Cached per dtype object: ``dtype.name`` costs microseconds, and this is
    asked on every call.
    """
    supported = dtype.name in _FLOAT_DTYPES and (
        dtype.kind == "f" or dtype.type.__module__.startswith("ml_dtypes")
    )
    if not supported:
        return None
    code, acc = _FLOAT_DTYPES[dtype.name]
    return code, np.dtype(acc)


def _with_op(arguments, op, window=None):
    """``arguments`` for operator ``op`` (and a Dask block's ``window``): see :class:`Arguments`."""
    object.__setattr__(arguments, "op", op)
    if window is not None:
        object.__setattr__(arguments, "window", window)
    return arguments


def invalid(message):
    """Return a 161002 error with ``message``."""
    return InvalidArgumentError(message)


def describe(value):
    """``repr(value)`` for a message, or its type name if ``repr`` itself fails."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__ must not escape either
        return f"a {type(value).__name__}"
    return text if len(text) <= 80 else text[:77] + "..."


def as_int(value, name):
    """Return ``value`` as a Python int, or raise 161002.

    Booleans and non-integral numbers (3.0 included) are refused; so is an
    ``Integral`` whose conversion raises: every failure is a 161002, never a
    stray ``TypeError`` or ``ValueError``.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise invalid(f"{name} must be an integer, got {describe(value)}")
    try:
        return operator.index(value)
    except Exception:  # noqa: BLE001 - whatever the object's __index__ raises
        try:
            return int(value)
        except Exception:  # noqa: BLE001
            raise invalid(
                f"{name} must be an integer, got a {type(value).__name__} that cannot be "
                "converted to int"
            ) from None


def as_real(value, name):
    """Return ``value`` as a finite Python float, or raise 161002 (bools refused)."""
    if type(value) is float and math.isfinite(value):
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise invalid(f"{name} must be a real number, got {describe(value)}")
    # float() of a huge integer (10**400) raises OverflowError; a foreign
    # Real's __float__ may raise anything.
    try:
        value = float(value)
    except Exception:  # noqa: BLE001
        raise invalid(f"{name} must be a finite real number, got {describe(value)}") from None
    if not math.isfinite(value):
        raise invalid(f"{name} must be finite, got {value}")
    return value


def as_sequence(value, name, what):
    """Return the items of an ordered sequence as a list, or raise 161002.

    Sets, dicts, strings, iterators and other unordered or non-sequence
    containers are refused (PyTorch refuses them too); NumPy arrays of one
    axis are accepted.
    """
    if type(value) in (tuple, list):
        return list(value)
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise invalid(f"{name} must be a sequence of {what}, got a {value.ndim}-D array")
        return value.tolist()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise invalid(
            f"{name} must be a sequence of {what} (a list or tuple), got {type(value).__name__}"
        )
    try:
        return list(value)
    except Exception:  # noqa: BLE001 - whatever the object's iteration raises
        raise invalid(f"{name} must be a sequence of {what}, got {type(value).__name__}") from None


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
            # NumPy >= 2.0 (the declared floor): copy=False raises rather than copy.
            return np.asarray(obj, copy=False)
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


_TORCH_TO_NUMPY = {"float32": np.float32, "float64": np.float64, "float16": np.float16}


def _from_torch(torch, tensor, name):
    """View a PyTorch tensor's memory as a NumPy array, without copying.

    Handled here rather than by plain DLPack because a tensor that requires
    grad refuses to export itself (its memory is still readable: ``detach``
    shares it), NumPy cannot import bfloat16 through DLPack (the bits are
    imported as int16 and viewed as ``ml_dtypes.bfloat16``), and DLPack
    carries only memory: whatever else a tensor says about its values is lost
    on the way.  So every tensor state that DLPack cannot carry is resolved
    or refused here (``docs/reliability.md``): lazy negation and conjugation
    bits are refused, an efficient zero tensor reads as zeros (and is refused
    as an output), an inference tensor is written only in inference mode, and
    the imported memory must be the tensor's own (a fake or functional
    tensor has none).
    """
    if tensor.device.type != "cpu":
        raise invalid(f"{name} must live in CPU memory, got a torch tensor on {tensor.device}")
    if tensor.layout != torch.strided:
        raise invalid(f"{name} must be a dense (strided) tensor, got layout {tensor.layout}")
    written = name in _WRITTEN
    if tensor.requires_grad:
        if written and torch.is_grad_enabled():
            # PyTorch's own rule for out= tensors: writing into a tensor that
            # autograd tracks would silently corrupt its graph.
            raise invalid(
                f"{name} is written in place and must not require grad while grad mode "
                "is enabled; pass tensor.detach() or call under torch.no_grad()"
            )
        tensor = tensor.detach()
    if tensor.is_neg() or tensor.is_conj():
        bit = "negative" if tensor.is_neg() else "conjugate"
        raise invalid(
            f"{name} is a torch tensor with the {bit} bit set (a lazy view whose values "
            f"differ from its memory, which DLPack cannot carry); pass "
            f"tensor.resolve_{'neg' if bit == 'negative' else 'conj'}() instead"
        )
    if written and tensor.is_inference() and not torch.is_inference_mode_enabled():
        # PyTorch refuses in-place updates of inference tensors outside it.
        raise invalid(
            f"{name} is an inference tensor, which may be written only inside "
            "torch.inference_mode(); pass a normal tensor (tensor.clone())"
        )
    dtype_name = str(tensor.dtype).rpartition(".")[2]
    if tensor._is_zerotensor():
        if written:
            raise invalid(f"{name} is a torch zero tensor, which has no memory to write into")
        if dtype_name == "bfloat16":
            dtype = _fork.import_module("ml_dtypes").bfloat16
        elif dtype_name in _TORCH_TO_NUMPY:
            dtype = _TORCH_TO_NUMPY[dtype_name]
        else:
            raise invalid(
                f"{name} dtype must be float32, float64, float16 or bfloat16, got {tensor.dtype}"
            )
        return np.broadcast_to(np.zeros((), dtype), tuple(tensor.shape))
    address = _tensor_address(torch, tensor, name)
    what = f" (a torch.{dtype_name} tensor)"
    # DLPack rather than tensor.numpy(): numpy() would mark the caller's
    # storage as not resizable from then on (tested: resize_ raises).
    if tensor.dtype == torch.bfloat16:
        bfloat16 = _fork.import_module("ml_dtypes").bfloat16
        arr = _from_dlpack(tensor.view(torch.int16), name, what).view(bfloat16)
    else:
        arr = _from_dlpack(tensor, name, what)
    if arr.size and arr.ctypes.data != address:
        raise invalid(
            f"{name}{what} could not be imported in place: DLPack handed over other memory "
            "than the tensor's (a tensor subclass without real storage?)"
        )
    return arr


def _tensor_address(torch, tensor, name):
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
            raise invalid(
                f"{name} ({type(tensor).__name__}) has no memory that can be read: {exc}"
            ) from None
    if address == 0 and tensor.numel():
        raise invalid(
            f"{name} ({type(tensor).__name__}) has no memory (its data pointer is null): "
            "a fake, meta or zero tensor cannot be read or written in place"
        )
    return address


@dataclass(frozen=True)
class TensorBinding:
    """A PyTorch tensor that a checked array views.

    Attributes
    ----------
    name : str
        ``"gradOut"`` or ``"gradInput"``.
    tensor : torch.Tensor
        The caller's tensor.
    address : int
        Its data pointer when it was bound.
    """

    name: str
    tensor: object
    address: int

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
        from torch.autograd.graph import increment_version

        increment_version(self.tensor)


def tensor_binding(obj, name):
    """Return the :class:`TensorBinding` of ``obj`` if it is a torch tensor with memory, else None."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, getattr(torch, "Tensor", ())):
        return None
    try:
        if obj._is_zerotensor():
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return TensorBinding(name, obj, obj.data_ptr())
    except Exception:  # noqa: BLE001 - as_array refuses such a tensor with the reason
        return None


def _int_list(value, name, length, first=0):
    """The integers of a size argument; element ``k`` is named ``name[k - first] (axis)``."""
    items = as_sequence(value, name, f"{length - first} integers" if first else
                        f"{length} integers")
    if len(items) != length:
        raise invalid(f"{name} must have exactly {length} elements, got {len(items)}")
    if all(type(item) is int for item in items):   # the common spelling, checked at once
        return tuple(items)
    axes = "NCDHW"[5 - length:]
    return tuple(as_int(item, element_name(name, k, first, axes))
                 for k, item in enumerate(items))


def element_name(name, k, first=0, axes="NCDHW"):
    """``inputSize[0] (D)``: element ``k`` of ``name`` as the caller numbered it, and its axis.

    ``first`` is how many leading elements the caller did not pass (the one
    call's ``input_size=(D, H, W)`` is ``(N, C, D, H, W)`` with ``first=2``).
    """
    index = k - first
    return f"{name}[{index}] ({axes[k]})" if index >= 0 else f"{name} {axes[k]}"


def _scale(value, name):
    return 0.0 if value is None else as_real(value, name)


def _check_dtype(arr, name):
    dtype = arr.dtype
    if dtype_info(dtype) is None:
        raise invalid(
            f"{name} dtype must be float32, float64, float16 or bfloat16, got {dtype}"
        )
    if not dtype.isnative:
        raise invalid(f"{name} must be in native byte order, got {dtype.str}")


def _check_strides(arr, name):
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


def _check_limits(go_shape, gi_shape, op=BACKWARD):
    """The documented limits; for the forward, ``go_shape`` is self's and ``gi_shape`` out's.

    Both operators' documents state them in terms of the arrays the
    separable passes run between, so one check serves both: the source's
    D and H and the target's H and W.
    """
    read, written = ARRAY_NAMES[op]
    for name, shape in ((read, go_shape), (written, gi_shape)):
        for k, n in enumerate(shape):
            if n > MAX_DIM:
                raise invalid(
                    f"{name} dimension {k} must be at most 2**20 = {MAX_DIM}, got {n}"
                )
    n, c, od, oh, ow = go_shape
    _, _, id_, ih, iw = gi_shape
    need = n * c * (od * oh * ow + id_ * ih * iw + od * oh * iw + od * ih * iw) * 4
    if op == FORWARD:
        formula = ("N*C*(self_D*self_H*self_W + out_D*out_H*out_W + self_D*self_H*out_W "
                   "+ self_D*out_H*out_W)*4")
        products = ("N*C*self_D*self_H", "out_W*out_H")
    else:
        formula = "N*C*(oD*oH*oW + iD*iH*iW + oD*oH*iW + oD*iH*iW)*4"
        products = ("N*C*oD*oH", "iW*iH")
    if need >= MAX_BYTES:
        raise invalid(f"{formula} must be below 60 GiB = {MAX_BYTES} bytes, got {need}")
    if n * c * od * oh >= MAX_PRODUCT:
        raise invalid(f"{products[0]} must be below 2**31, got {n * c * od * oh}")
    if iw * ih >= MAX_PRODUCT:
        raise invalid(f"{products[1]} must be below 2**31, got {iw * ih}")


def _check_overlap(grad_out, grad_input, names=ARRAY_NAMES[BACKWARD]):
    read, written = names
    if not grad_input.flags.writeable:
        raise invalid(f"{written} must be writable, got a read-only array")
    if grad_input.size > 1 and has_internal_overlap(grad_input):
        raise invalid(f"{written} must not overlap itself (zero or interleaved strides)")
    if grad_out.size and grad_input.size:
        try:
            shared = np.shares_memory(grad_out, grad_input, max_work=1_000_000)
        except np.exceptions.TooHardError:
            shared = True
        if shared:
            raise invalid(f"{written} must not overlap {read}")


def validate(grad_out, output_size, input_size, align_corners, scales_d, scales_h,
             scales_w, grad_input, *, allocate=False, misaligned_ok=False, input_first=0,
             rules=PYTORCH_RULES):
    """Check a phase-one call against the operator contract.

    Parameters are those of ``aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize``;
    ``rules`` says whose rule the scales follow (``docs/operator.md``, "Which
    layer follows which rule"):

    * ``"pytorch"`` (every front end but ``trilinear_bwd.aclnn``): each axis
      uses its own scale when it is > 0, and a scale so used must satisfy
      ``outputSize[k] == floor(inputSize[k+2] * scale)``;
    * ``"cann"`` (``trilinear_bwd.aclnn``, as CANN's
      ``aclnn_upsample_trilinear_3d_backward.cpp`` does): the three scales
      are used only when all three are > 0, otherwise none is (the size
      ratio on every axis), and nothing checks them against ``outputSize``.

    Either way a scale must be a finite real number, and ``align_corners``
    makes the scales unused.  With ``allocate=True`` the call has no ``grad_input`` yet (the caller will
    allocate a fresh one), so the checks of ``grad_input`` are skipped and the
    result's ``grad_input`` is None.  With ``misaligned_ok=True`` a
    ``grad_out`` not aligned to its element size passes (the one call copies
    it afterwards); every other rule, overlap with ``grad_input`` included,
    is checked on the caller's own array.  ``input_first=2`` says that the
    caller passed only ``(D, H, W)`` of ``input_size``: messages number its
    elements as the caller did.

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

    bindings = (tensor_binding(grad_out, "gradOut"),
                None if allocate else tensor_binding(grad_input, "gradInput"))
    grad_out = as_array(grad_out, "gradOut")
    grad_input = None if allocate else as_array(grad_input, "gradInput")
    tensors = tuple(b for b in bindings if b is not None)
    _check_dtype(grad_out, "gradOut")
    if not allocate and grad_input.dtype != grad_out.dtype:
        raise invalid(
            f"gradInput dtype must equal gradOut dtype {grad_out.dtype}, got {grad_input.dtype}"
        )
    if grad_out.ndim != 5:
        raise invalid(f"gradOut must be 5-D (N, C, D, H, W), got {grad_out.ndim}-D")

    out_name = functools.partial(element_name, "outputSize", axes="DHW")
    in_name = functools.partial(element_name, "inputSize", first=input_first)
    output_size = _int_list(output_size, "outputSize", 3)
    for k, n in enumerate(output_size):
        if n <= 0:
            raise invalid(f"{out_name(k)} must be > 0, got {n}")
    input_size = _int_list(input_size, "inputSize", 5, input_first)
    for k in (0, 1):
        if input_size[k] < 0:
            raise invalid(f"{in_name(k)} must be >= 0, got {input_size[k]}")
    for k in (2, 3, 4):
        if input_size[k] <= 0:
            raise invalid(f"{in_name(k)} must be > 0, got {input_size[k]}")

    shape = grad_out.shape
    if shape[:2] != input_size[:2] or shape[2:] != output_size:
        for k, axis in enumerate("NC"):
            if shape[k] != input_size[k]:
                raise invalid(f"gradOut {axis} must equal {in_name(k)} = {input_size[k]}, "
                              f"got {shape[k]}")
        for k, axis in enumerate("DHW"):
            if shape[k + 2] != output_size[k]:
                raise invalid(f"gradOut {axis} must equal {out_name(k)} = {output_size[k]}, "
                              f"got {shape[k + 2]}")
    if not allocate and grad_input.shape != input_size:
        raise invalid(
            f"gradInput shape must equal inputSize {input_size}, got {tuple(grad_input.shape)}"
        )
    _check_limits(grad_out.shape, input_size)

    align_corners, scales = _checked_scales(align_corners, (scales_d, scales_h, scales_w),
                                            rules, input_size, output_size, out_name, in_name)

    if not misaligned_ok:
        _check_strides(grad_out, "gradOut")
    if not allocate:
        _check_strides(grad_input, "gradInput")
        _check_overlap(grad_out, grad_input)
    return Arguments(grad_out, grad_input, output_size, input_size, align_corners,
                     scales, tensors, rules)


def _checked_scales(align_corners, values, rules, input_size, output_size, out_name, in_name):
    """``(align_corners, scales)`` as the tables use them, under ``rules`` (see :func:`validate`)."""
    if not isinstance(align_corners, (bool, np.bool_)):
        raise invalid(f"alignCorners must be a bool, got {align_corners!r}")
    align_corners = bool(align_corners)
    names = ("scalesD", "scalesH", "scalesW")
    if all(type(v) is float and math.isfinite(v) for v in values):   # the common spelling
        scales = list(values)
    else:
        scales = [_scale(value, name) for value, name in zip(values, names)]
    if rules == CANN_RULES:
        scales = cann_scales(scales, align_corners)
    elif rules != PYTORCH_RULES:
        raise ValueError(f"rules must be {PYTORCH_RULES!r} or {CANN_RULES!r}, got {rules!r}")
    else:
        _check_scales_consistent(scales, names, input_size, output_size, align_corners,
                                 out_name, in_name)
    return align_corners, tuple(scales)


def validate_forward(x, output_size, align_corners, scales_d, scales_h, scales_w, out, *,
                     allocate=False, misaligned_ok=False, rules=PYTORCH_RULES):
    """Check a forward phase-one call (``aclnnUpsampleTrilinear3dGetWorkspaceSize``).

    Parameters are CANN's (``self`` is ``x``); ``allocate``,
    ``misaligned_ok`` and ``rules`` as for :func:`validate`.  The rules are
    those of the backward with the arrays' roles exchanged, plus two of
    CANN's and PyTorch's forward: self's D, H and W must be > 0, and so
    must its C (N may be 0: an empty result).

    Returns
    -------
    Arguments
        With ``op == "forward"``: ``grad_out`` is self, ``grad_input`` out.

    Raises
    ------
    NullArgumentError
        (161001) ``x``, ``output_size`` or ``out`` is None.
    InvalidArgumentError
        (161002) any other rule is broken.
    """
    for value, name in ((x, "self"), (output_size, "outputSize"), (out, "out")):
        if value is None and not (allocate and name == "out"):
            raise NullArgumentError(f"{name} must not be None")
    bindings = (tensor_binding(x, "self"), None if allocate else tensor_binding(out, "out"))
    x = as_array(x, "self")
    out = None if allocate else as_array(out, "out")
    tensors = tuple(b for b in bindings if b is not None)
    _check_dtype(x, "self")
    if not allocate and out.dtype != x.dtype:
        raise invalid(f"out dtype must equal self dtype {x.dtype}, got {out.dtype}")
    if x.ndim != 5:
        raise invalid(f"self must be 5-D (N, C, D, H, W), got {x.ndim}-D")
    out_name = functools.partial(element_name, "outputSize", axes="DHW")
    output_size = _int_list(output_size, "outputSize", 3)
    for k, n in enumerate(output_size):
        if n <= 0:
            raise invalid(f"{out_name(k)} must be > 0, got {n}")
    input_size = tuple(x.shape)
    for k in (2, 3, 4):
        if input_size[k] <= 0:
            raise invalid(f"self {'NCDHW'[k]} must be > 0, got {input_size[k]}")
    if input_size[1] == 0:
        raise invalid(f"self C must be > 0 (a non-empty 5-D volume; PyTorch's and CANN's "
                      f"rule), got shape {input_size}")
    expected = input_size[:2] + output_size
    if not allocate and tuple(out.shape) != expected:
        raise invalid(f"out shape must equal (N, C) of self + outputSize = {expected}, "
                      f"got {tuple(out.shape)}")
    _check_limits(input_size, expected, FORWARD)
    align_corners, scales = _checked_scales(
        align_corners, (scales_d, scales_h, scales_w), rules, input_size, output_size,
        out_name, lambda k: f"self {'NCDHW'[k]}")
    if not misaligned_ok:
        _check_strides(x, "self")
    if not allocate:
        _check_strides(out, "out")
        _check_overlap(x, out, ARRAY_NAMES[FORWARD])
    return _with_op(Arguments(x, out, output_size, input_size, align_corners, scales, tensors,
                              rules), FORWARD)


def window_arguments(whole, source, window, target=None):
    """The arguments of one block of the call ``whole``, for the kernel's windowed entry.

    ``trilinear_bwd.dask`` validates the whole call once, at graph
    construction; each task then computes one block of the result, the
    targets ``t0:t1`` on each spatial axis, from the block of the source that
    they read, starting at source point ``s0`` (``_tables.source_range``).

    Parameters
    ----------
    whole : Arguments
        The whole call, validated (its arrays may be stand-ins).
    source : ndarray
        The source block: ``(n, c)`` plus, per axis, the extent of
        ``_tables.source_range`` for its targets.
    window : sequence of 3 tuple
        ``(t0, t1, s0)`` per spatial axis.
    target : ndarray, optional
        The block of the result (shape ``(n, c)`` plus ``t1 - t0`` per axis);
        None leaves it to the caller to allocate.

    Returns
    -------
    Arguments
    """
    window = tuple(tuple(int(v) for v in w) for w in window)
    read, written = whole.names
    source = as_array(source, read)
    n, c = source.shape[:2]
    shape = (n, c) + tuple(t1 - t0 for t0, t1, _ in window)
    if source.dtype != whole.grad_out.dtype or (target is not None and (
            target.shape != shape or target.dtype != source.dtype)):
        raise invalid(f"a block of {read} or {written} does not match its window {window}")
    _check_limits(source.shape, shape, whole.op)
    _check_strides(source, read)
    if target is not None:
        _check_strides(target, written)
        _check_overlap(source, target, whole.names)
    return _with_op(Arguments(source, target, whole.output_size, (n, c) + whole.input_size[2:],
                              whole.align_corners, whole.scales, (), whole.rules),
                    whole.op, window)


def cann_scales(scales, align_corners):
    """The scales CANN's implementation uses: all three when all are > 0, else none.

    ``aclnn_upsample_trilinear_3d_backward.cpp`` (hicann/ops-cv) sends the
    three scales on only when ``scalesD > 0 && scalesH > 0 && scalesW > 0``;
    otherwise its tiling uses the size ratio on every axis.  With
    ``align_corners`` they are unused either way.

    Parameters
    ----------
    scales : sequence of 3 float
        Finite scales as passed (0.0 for None).
    align_corners : bool

    Returns
    -------
    list of 3 float
        ``scales``, or ``[0.0, 0.0, 0.0]`` (the size ratio on every axis).
    """
    if not align_corners and all(s > 0 for s in scales):
        return list(scales)
    return [0.0, 0.0, 0.0]


def _check_scales_consistent(scales, names, input_size, output_size, align_corners,
                             out_name, in_name):
    """PyTorch-named API: a scale used on its axis must give that axis's output size."""
    if align_corners or not any(s > 0 for s in scales):
        return
    for k, (s, name) in enumerate(zip(scales, names)):
        n_in, n_out = input_size[k + 2], output_size[k]
        # A finite scale can still overflow in n_in * s (1e308 * 2
        # is inf, and math.floor(inf) raises OverflowError): that is simply
        # inconsistent with any output size.
        product = n_in * s
        floored = math.floor(product) if math.isfinite(product) else product
        if not align_corners and s > 0 and floored != n_out:
            raise invalid(
                f"{name} = {s!r} is inconsistent with {out_name(k)} = {n_out}: "
                f"floor({in_name(k + 2)} * {name}) = floor({n_in} * {s!r}) = {floored}"
            )


def rebind(old, grad_out=None, grad_input=None):
    """Check new arrays for an executor planned with ``old``; return the new :class:`Arguments`.

    The new arrays (None keeps the bound one; for a forward executor
    ``grad_out`` is the new self and ``grad_input`` the new out) must have
    the shape, dtype and strides of the ones they replace, and pass every
    rule of phase one again (writability, overlap).
    """
    read, written = old.names
    keep = {b.name: b.tensor for b in old.tensors}
    new_out = keep.get(read, old.grad_out) if grad_out is None else grad_out
    new_in = keep.get(written, old.grad_input) if grad_input is None else grad_input
    for name, new, ref in ((read, new_out, old.grad_out), (written, new_in, old.grad_input)):
        arr = as_array(new, name)
        if (arr.shape, arr.dtype, arr.strides) != (ref.shape, ref.dtype, ref.strides):
            raise invalid(
                f"{name} must keep shape {tuple(ref.shape)}, dtype {ref.dtype} and "
                f"strides {ref.strides}, got {tuple(arr.shape)}, {arr.dtype}, {arr.strides}"
            )
        if not arr.flags.aligned:
            raise invalid(f"{name} must be aligned to its element size")
    if old.op == FORWARD:
        return validate_forward(new_out, old.output_size, old.align_corners, *old.scales,
                                new_in, rules=old.rules)
    return validate(new_out, old.output_size, old.input_size, old.align_corners,
                    *old.scales, new_in, rules=old.rules)


# -- phase two and the thread count -------------------------------------------

def workspace_size_argument(workspace_size):
    """Return ``workspace_size`` as a non-negative int, or raise 161002."""
    workspace_size = as_int(workspace_size, "workspaceSize")
    if workspace_size < 0:
        raise invalid(f"workspaceSize must be >= 0, got {workspace_size}")
    return workspace_size


def resolve_num_threads(num_threads):
    """Check ``num_threads`` and return the team size it asks for (>= 1).

    Parameters
    ----------
    num_threads : int or None
        None follows OpenMP's default; a positive integer is a team size; a
        negative integer counts back from the processor count (-1: all).
    """
    if num_threads is None:
        return _openmp_helpers.effective_n_threads(None)
    num_threads = as_int(num_threads, "num_threads")
    if num_threads == 0 or abs(num_threads) > MAX_THREADS:
        raise invalid(
            f"num_threads must be non-zero and at most {MAX_THREADS} in magnitude, "
            f"got {num_threads}"
        )
    return _openmp_helpers.effective_n_threads(num_threads)


def checked_workspace(workspace, workspace_size, required, args):
    """Check phase two's workspace arguments; return the buffer as an array, or None."""
    workspace_size = as_int(workspace_size, "workspaceSize")
    if workspace_size < required:
        raise ExecutionError(
            f"workspaceSize must be at least {required} (what phase one returned), got {workspace_size}"
        )
    if workspace is None:
        if required == 0:
            return None
        raise NullArgumentError(f"workspace must not be None (it needs {required} bytes)")
    if isinstance(workspace, (bytes, bytearray, memoryview)):
        buf = np.frombuffer(workspace, dtype=np.uint8)
    else:
        buf = as_array(workspace, "workspace")
    # An object array is a block of PyObject pointers; letting the
    # kernel write floats over them would crash the interpreter later.
    if buf.dtype.hasobject:
        raise InvalidArgumentError(
            f"workspace must be a buffer of plain memory, got an array of dtype {buf.dtype}"
        )
    if not (buf.flags.c_contiguous or buf.flags.f_contiguous):
        raise ExecutionError("workspace must be one contiguous block of memory")
    if not buf.flags.writeable:
        raise ExecutionError("workspace must be writable, got a read-only buffer")
    if buf.nbytes < workspace_size:
        raise ExecutionError(
            f"workspace must hold workspaceSize = {workspace_size} bytes, got {buf.nbytes}"
        )
    if required == 0:
        return None
    if buf.size > 1 and has_internal_overlap(buf):
        raise ExecutionError("workspace must not overlap itself")
    for name, arr in zip(args.names, (args.grad_out, args.grad_input)):
        if arr.size and np.may_share_memory(buf, arr):
            raise ExecutionError(f"workspace must not overlap {name}")
    return buf




# -- the one call's spelling ---------------------------------------------------

def one_call_sizes(grad_out_shape, input_size, output_size, scales):
    """Normalise the one call's ``input_size`` / ``output_size`` / ``scales`` spelling.

    Parameters
    ----------
    grad_out_shape : tuple of int
        The shape of ``grad_out`` (5-D, or not: validation says so later).
    input_size : sequence of 3 or 5 int
        ``(N, C, iD, iH, iW)``, or ``(iD, iH, iW)`` with N and C from ``grad_out``.
    output_size : sequence of 3 int or None
        None: ``grad_out``'s spatial shape.
    scales : sequence of 3 float or None

    Returns
    -------
    input_size, output_size, scales, input_first
        What :func:`validate` takes; ``input_first`` is 2 when the caller
        passed three elements of ``input_size``.
    """
    if input_size is None:
        raise NullArgumentError("inputSize must not be None")
    input_size = as_sequence(input_size, "inputSize", "3 or 5 integers")
    if len(input_size) not in (3, 5):
        raise invalid(
            f"inputSize must have 3 (D, H, W) or 5 (N, C, D, H, W) elements, "
            f"got {len(input_size)}")
    input_first = 0
    if len(input_size) == 3 and len(grad_out_shape) == 5:
        input_size = list(grad_out_shape[:2]) + input_size
        input_first = 2
    if output_size is None:
        output_size = tuple(grad_out_shape[2:])
    scales = as_sequence((0.0, 0.0, 0.0) if scales is None else scales, "scales", "3 floats")
    if len(scales) != 3:
        raise invalid(f"scales must have exactly 3 elements (D, H, W), got {len(scales)}")
    return input_size, output_size, scales, input_first


def is_misaligned(arr):
    """True if an element of ``arr`` is not aligned to its size (the kernel needs aligned ones)."""
    if not arr.flags.aligned:
        return True
    # NumPy's flag checks the address and the strides against the dtype's
    # alignment, which is its size for the four float types on every 64-bit
    # platform; the loop below only runs where it is not.
    return arr.dtype.alignment < arr.itemsize and any(st % arr.itemsize for st in arr.strides)

"""The torch wing's calls: the careful way, the geometries it remembers, the fast paths.

A training loop calls one geometry over and over.  The first call of a
geometry goes the careful way (:func:`run`: every rule of the contract,
then the core's runner); what it established is remembered here, keyed on
the tensor's metadata only (``_fast.key``), never on an address, and the
calls after it take the compiled fast path (``_fast.FastPath``) straight to
the kernel (``docs/design.md``, "Per-call cost").  A geometry the contract
refuses is remembered too, so that its later calls go to PyTorch's kernel
(:func:`cold`) without being checked again.
"""

import functools

import torch

from .._core import _threads
from .._core._arrays import as_array, is_misaligned, same_strides
from .._core._operator import BACKWARD, FORWARD, check
from .._core._runner import run_once, variant
from .._core._status import InvalidArgumentError, LimitError, NullArgumentError
from . import _fast, _pytorch
from ._arrays import new_strided, new_tensor, tensor_view

# Calls on CPU, for tests and the curious (``call_counts``): how many
# backward ("kernel") and forward ("forward") calls ran this library's kernel
# and how many were handed to PyTorch's ("fallback", "forward_fallback");
# how many calls torch.compile traced as PyTorch's code while enabled
# ("traced_to_pytorch", ``_compile.tiny``).
calls = {"kernel": 0, "fallback": 0, "forward": 0, "forward_fallback": 0,
         "traced_to_pytorch": 0}
# The counts of each operator's runs and hand-offs, by whether it is the forward.
_COUNTS = {True: ("forward", "forward_fallback"), False: ("kernel", "fallback")}

GEOMETRY_CACHE_SIZE = 512
# key -> _fast.Geometry, or REFUSED for a geometry this library's contract refuses.
geometries = {}
REFUSED = "refused"
# The bytes of the one storage every template lies in (_template): the
# results a template serves are at most this large.
TEMPLATE_BYTES = 2**20
_template_storage = None


def run(tensor, output_size, input_size, align_corners, scales, layout, num_threads,
        key=None):
    """Either operator on a CPU tensor into a new tensor of ``layout``: the careful way.

    Every rule of the contract is checked before anything is allocated,
    copied or planned: a size past the limits is a 161002 here, never a
    ``MemoryError`` from allocating it (``docs/reliability.md``).  With a
    geometry ``key``, what the checks established is remembered for the
    fast path (a refusal too).

    Parameters
    ----------
    tensor : torch.Tensor
        The forward's ``x`` or the backward's ``grad_output``.
    output_size : sequence of 3 int
    input_size : sequence of 5 int or None
        The backward's; None for the forward.
    align_corners : bool
    scales : tuple of 3 (float or None)
    layout : torch.memory_format
    num_threads : int or None
    key : tuple, optional

    Returns
    -------
    torch.Tensor
    """
    op = FORWARD if input_size is None else BACKWARD
    source = as_array(tensor, op.source)
    misaligned = is_misaligned(source)
    key = _faithful(key, source, tensor, misaligned)
    try:
        call = check(op, source, None, output_size, input_size, align_corners, scales,
                     allocate=True, misaligned_ok=misaligned)
    except (InvalidArgumentError, NullArgumentError):
        if key is not None:
            remember(key, REFUSED)
        raise
    # PyTorch's allocator, not the library's pool: a tensor handed to PyTorch
    # code must be resizable like any it allocated (resize_, out= of
    # another shape), which memory from torch.from_numpy is not, and memory
    # PyTorch allocated cannot come back to a pool once PyTorch frees it.
    shape = op.shapes(call.input_size, call.output_size)[1]
    result = new_tensor(shape, tensor.dtype, layout, op.target)
    runner = run_once(call.replace(target=tensor_view(result)), num_threads, misaligned)
    if key is not None:
        remember(key, _geometry(runner, result))
    return result


def _faithful(key, source, tensor, misaligned):
    """``key``, or None when ``source`` is not ``tensor``'s own memory as it lies.

    A geometry is remembered only from a call whose NumPy view is the
    tensor's memory, byte strides and address: a zero tensor (read as a
    broadcast zero), a misaligned tensor (copied) or any other resolved
    state would otherwise leave a plan for memory laid out differently from
    the next tensor of the same metadata.
    """
    if key is None or misaligned or source.size == 0:
        return None
    item = tensor.element_size()
    # Only the strides of axes longer than 1 say where elements lie: DLPack
    # exporters report the others each their own way (PyTorch 2.8's NumPy
    # view of a size-1 axis differs from tensor.stride()).
    if (not same_strides(source.shape, source.strides,
                         tuple(item * n for n in tensor.stride()))
            or source.ctypes.data != tensor.data_ptr()):
        return None
    return key


def _geometry(runner, result):
    """A :class:`_fast.Geometry`: what the first call of a geometry established.

    The call's runner (plan, kernel, workspace) and team -- its key holds the
    team asked for (OpenMP's default at the time for the calls under
    enable(), which pass no thread count), so the team is fixed with it --
    and how to allocate each result: a fresh tensor from PyTorch's
    allocator, on the CPU, by ``torch.empty_like`` of a template with the
    result's metadata where the template's storage holds it (``empty_like``
    parses one argument where ``empty_strided`` parses two sequences),
    ``torch.empty_strided`` above that (``_arrays.new_strided``: in huge
    pages).
    """
    shape = tuple(result.shape)
    strides = result.stride()
    itemsize = result.element_size()
    if result.numel() * itemsize <= TEMPLATE_BYTES:
        allocate, args = torch.empty_like, (_template(shape, strides, result.dtype),)
    else:
        allocate, args = new_strided, (shape, strides, result.dtype)
    return _fast.Geometry(runner, shape, strides, itemsize, runner.team(), allocate, args)


def _template(shape, strides, dtype):
    """A tensor of this metadata for ``torch.empty_like`` to copy; its memory is never used.

    Every template lies in one storage of ``TEMPLATE_BYTES``, allocated at
    the first template and never written (its pages are never touched).
    """
    global _template_storage
    # On the CPU, whatever device a caller's code makes the default.
    if _template_storage is None:
        _template_storage = torch.UntypedStorage(TEMPLATE_BYTES, device="cpu")
    return torch.empty(0, dtype=dtype, device="cpu").set_(_template_storage, 0, shape, strides)


def remember(key, value):
    """Remember a geometry (or ``REFUSED``) under ``key``."""
    if len(geometries) >= GEOMETRY_CACHE_SIZE:
        geometries.clear()       # a new working set: rebuilt call by call
    geometries[key] = value
    # The fast paths' last hits hold only what geometries holds.
    for_enable.forget()
    for_drop_in.forget()


def forget():
    """Forget every remembered geometry: the next call of each goes the careful way."""
    geometries.clear()
    for_enable.forget()
    for_drop_in.forget()


def cold(limits_to_pytorch, code, key, found, tensor, output_size, input_size, align_corners,
         scales_d, scales_h, scales_w):
    """Either operator's kernel where the fast path cannot finish a call.

    ``found`` is what the look-up of ``key`` found.  A first call (or one
    whose addresses its geometry cannot take) goes the careful way, which
    remembers the geometry.  A geometry the contract refuses goes to
    PyTorch's kernel, which computes it or raises its own error; only a
    size past the contract's limits is refused with its 161002 instead
    unless ``limits_to_pytorch`` (``enable()``'s kernels, which must take
    every call PyTorch takes; the drop-in's allocate nothing PyTorch would
    try to).
    """
    done, handed = _COUNTS[input_size is None]
    if found is REFUSED and limits_to_pytorch:
        calls[handed] += 1
        return _pytorch.kernel(tensor, output_size, input_size, align_corners, scales_d,
                               scales_h, scales_w)
    try:
        result = run(tensor, output_size, input_size, align_corners,
                     (scales_d, scales_h, scales_w), _pytorch.memory_format(tensor), None, key)
    except (InvalidArgumentError, NullArgumentError) as refusal:
        if isinstance(refusal, LimitError) and not limits_to_pytorch:
            raise
        # Calls PyTorch accepts but this library's contract does not (explicit
        # scales inconsistent with the sizes, sizes past the contract's
        # limits) get PyTorch's own kernel, through the out= overload, which
        # enable() leaves alone; calls PyTorch refuses get PyTorch's error.
        calls[handed] += 1
        return _pytorch.kernel(tensor, output_size, input_size, align_corners, scales_d,
                               scales_h, scales_w)
    calls[done] += 1
    return result


# The CPU kernels as the operators' schemas take them: this library's kernel
# (a remembered geometry, or the cold path).  enable()'s hand every call the
# contract refuses to PyTorch's kernel; the drop-in's refuse sizes past the
# contract's limits with 161002.
_DONE = (_COUNTS[True][0], _COUNTS[False][0])
for_enable = _fast.FastPath(geometries, calls, _DONE, _threads.effective, variant,
                            functools.partial(cold, True))
for_drop_in = _fast.FastPath(geometries, calls, _DONE, _threads.effective, variant,
                             functools.partial(cold, False))

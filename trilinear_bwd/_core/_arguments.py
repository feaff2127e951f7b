"""Phase two's arguments and the one call's spelling, checked.

The operator's own contract (arrays, sizes, scales, limits) is
``_operator.check``; scalar coercion is ``_coerce``, array import
``_arrays``, the thread count ``_threads``.  What remains here are the
arguments around a call: phase two's workspace, and the one call's
``input_size`` / ``output_size`` / ``scales`` spellings, each turned into
what the check takes.
"""

import math

import numpy as np

from ._arrays import as_array, has_internal_overlap
from ._coerce import as_int, as_real, as_scales, as_sequence, invalid
from ._operator import check_5d
from ._status import ExecutionError, InvalidArgumentError, NullArgumentError


# -- phase two -------------------------------------------------------------------

def workspace_size_argument(workspace_size):
    """Return ``workspace_size`` as a non-negative int, or raise 161002."""
    workspace_size = as_int(workspace_size, "workspaceSize")
    if workspace_size < 0:
        raise invalid(f"workspaceSize must be >= 0, got {workspace_size}")
    return workspace_size


def checked_workspace(workspace, workspace_size, required, call):
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
        buf = as_array(workspace, "workspace", written=True)
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
    for name, arr in zip(call.names, (call.source, call.target)):
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
        What ``_operator.check`` takes; ``input_first`` is 2 when the caller
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
    return input_size, output_size, as_scales(scales), input_first


def forward_sizes(shape, output_size, scales):
    """The forward one call's ``(output_size, scales)``: ``scale_factor``'s size when none is given.

    Parameters
    ----------
    shape : tuple of int
        The shape of ``x``.
    output_size : sequence of 3 int or None
        None: ``floor(in * scale)`` per axis, as ``F.interpolate`` computes
        it for ``scale_factor``; then all three scales must be > 0.
    scales : sequence of 3 float or None
    """
    scales = as_scales(scales)
    if output_size is not None:
        return output_size, scales
    check_5d(len(shape), "self")
    size = []
    for k, value in enumerate(scales):
        s = as_real(value, f"scales[{k}]")
        if not s > 0:
            raise invalid(f"scales[{k}] must be > 0 when output_size is None, got {s!r}")
        product = shape[k + 2] * s
        if not math.isfinite(product):
            raise invalid(f"scales[{k}] = {s!r} gives an infinite output size")
        size.append(math.floor(product))
    return tuple(size), scales

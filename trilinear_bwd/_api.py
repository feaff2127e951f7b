"""The one-call entry point."""

import dataclasses
import sys

import numpy as np

from . import _pool
from ._executor import Executor, alloc_workspace
from ._plan import is_channels_last
from ._arguments import as_array, is_misaligned, one_call_sizes, validate
from ._status import InternalError, NullArgumentError


def upsample_trilinear3d_backward(grad_out, input_size, *, output_size=None,
                                  align_corners=False, scales=(0.0, 0.0, 0.0), out=None,
                                  num_threads=None):
    """Gradient of trilinear 3-D upsampling with respect to its input.

    Computes what ``torch.ops.aten.upsample_trilinear3d_backward`` and
    ``aclnnUpsampleTrilinear3dBackward`` compute, in one call: it validates,
    allocates what it needs and runs on the calling thread's OpenMP team.

    Parameters
    ----------
    grad_out : array_like, shape (N, C, oD, oH, oW)
        Gradient of the upsampled volume: float32, float64, float16 or
        bfloat16 (``ml_dtypes.bfloat16``); any layout or strides.  Read in
        place, except that an array not aligned to its element size is copied
        first (the two-phase API rejects those).
    input_size : sequence of int
        The shape of the volume that was upsampled: ``(N, C, iD, iH, iW)``, or
        just ``(iD, iH, iW)`` with N and C taken from ``grad_out``.  (This is
        PyTorch's name and place; the two-phase call takes CANN's order,
        ``output_size`` first, so everything after ``input_size`` is
        keyword-only here: swapping the two is an error, not a wrong answer.)
    output_size : sequence of 3 int, optional
        ``(oD, oH, oW)``; defaults to ``grad_out.shape[2:]``.
    align_corners : bool, default False
        Corner-aligned (True) or half-pixel (False) coordinates.
    scales : sequence of 3 float, default (0.0, 0.0, 0.0)
        The forward's multipliers per axis (D, H, W); <= 0 means "not given".
        With ``align_corners=False`` a given scale sets the coordinate step
        to ``1/scale`` and must satisfy ``floor(in * scale) == out``.
    out : ndarray or torch.Tensor, optional
        Where to write the result (shape ``(N, C, iD, iH, iW)``, the dtype of
        ``grad_out``, any layout).  By default a new array is allocated, in
        channels-last layout if ``grad_out`` is channels-last, from a pool of
        memory that earlier results gave back (``docs/performance.md``).
    num_threads : int, optional
        OpenMP threads; None follows ``OMP_NUM_THREADS`` / ``threadpoolctl``.

    Returns
    -------
    ndarray or torch.Tensor, shape (N, C, iD, iH, iW)
        ``out`` if given; else a new array of the caller's kind: a torch
        tensor when ``grad_out`` is one (sharing memory, no copy), a NumPy
        array otherwise.

    Raises
    ------
    AclnnError
        With ``.status`` 161001 or 161002, for any argument that breaks the
        operator contract (see :func:`get_workspace_size`).

    Examples
    --------
    >>> import numpy as np, trilinear_bwd as tb
    >>> g = np.arange(1, 33, dtype=np.float32).reshape(2, 2, 2, 2, 2)
    >>> tb.upsample_trilinear3d_backward(g, (2, 2, 1, 1, 1)).ravel()
    array([ 36., 100., 164., 228.], dtype=float32)
    """
    if grad_out is None:
        raise NullArgumentError("gradOut must not be None")
    grad_out_given = grad_out
    grad_out = as_array(grad_out, "gradOut")
    input_size, output_size, scales, first = one_call_sizes(grad_out.shape, input_size,
                                                             output_size, scales)
    # Arrays that come back from pickling (dask.distributed, multiprocessing)
    # are often misaligned; the kernel needs aligned elements, so copy.
    misaligned = is_misaligned(grad_out)
    # Every rule, overlap with ``out`` included, is checked on the caller's
    # own array; only then is a misaligned one copied, so that a call that
    # breaks a rule (a limit above all: a zero-stride view can describe
    # 60 GiB) allocates nothing.
    args = validate(grad_out, output_size, input_size, align_corners, *scales, out,
                    allocate=out is None, misaligned_ok=misaligned, input_first=first)
    if misaligned:
        try:
            args = dataclasses.replace(args, grad_out=grad_out.copy())
        except MemoryError as exc:
            raise InternalError(f"could not copy the misaligned gradOut: {exc}") from None
    result = out
    if out is None:
        out = _new_output(args.grad_out, args.input_size)
        args = dataclasses.replace(args, grad_input=out)
        # The caller's kind of array back: a torch tensor in, a torch tensor
        # out, sharing the new array's memory.
        torch = sys.modules.get("torch")
        is_tensor = torch is not None and isinstance(grad_out_given, torch.Tensor)
        result = _pool.as_tensor(out) if is_tensor else out
    executor = Executor(args, num_threads)
    executor._execute_now(alloc_workspace(executor.workspace_size), executor.workspace_size)
    return result


def _new_output(grad_out, shape):
    # Running out of memory is an AclnnError (561000), not a
    # MemoryError escaping from the middle of the call.
    try:
        return _pool.empty(shape, grad_out.dtype, is_channels_last(grad_out))
    except (MemoryError, ValueError) as exc:
        raise InternalError(f"could not allocate gradInput of shape {shape}: {exc}") from None

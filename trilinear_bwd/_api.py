"""The one-call entry points: the backward and the forward."""

import numpy as np

from ._core import _pool
from ._core._arguments import forward_sizes, one_call_sizes
from ._core._arrays import as_array, is_channels_last, is_misaligned, kind_of
from ._core._operator import BACKWARD, FORWARD, check
from ._core._runner import run_once
from ._core._status import AllocationError, NullArgumentError


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
        channels-last layout if ``grad_out`` is channels-last: a NumPy array
        from a pool of memory that earlier results gave back
        (``docs/performance.md``), a tensor from ``torch.empty``.
    num_threads : int, optional
        OpenMP threads; None follows ``OMP_NUM_THREADS`` / ``threadpoolctl``.

    Returns
    -------
    ndarray or torch.Tensor, shape (N, C, iD, iH, iW)
        ``out`` if given; else a new array of the caller's kind: a torch
        tensor from PyTorch's allocator when ``grad_out`` is one, a NumPy
        array otherwise; channels-last when ``grad_out`` is (the caller's
        array decides, also when a misaligned one is copied).

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
    call = check(BACKWARD, grad_out, out, output_size, input_size, align_corners, scales,
                 allocate=out is None, misaligned_ok=misaligned, input_first=first)
    return _run(call, grad_out_given, misaligned, out, num_threads)


def upsample_trilinear3d(x, output_size=None, align_corners=False, scales=(0.0, 0.0, 0.0),
                         out=None, num_threads=None):
    """Trilinear 3-D upsampling (or downsampling) of a 5-D volume: the forward operator.

    Computes what ``torch.ops.aten.upsample_trilinear3d`` (and so
    ``F.interpolate(x, size, mode="trilinear")``) and
    ``aclnnUpsampleTrilinear3d`` compute, in one call, with the numerics of
    the backward (float64 tables, float32 sums for the half types, one
    rounding): each output voxel is ``sum of wD * wH * wW * x`` over its
    (up to) 8 neighbours.

    Parameters
    ----------
    x : array_like, shape (N, C, iD, iH, iW)
        The volume: float32, float64, float16 or bfloat16 (``ml_dtypes``);
        any layout or strides; C, iD, iH and iW > 0 (N may be 0).  Read in
        place, except that an array not aligned to its element size is
        copied first.
    output_size : sequence of 3 int, optional
        ``(oD, oH, oW)``.  None: ``floor(x.shape[k + 2] * scales[k])``,
        which needs all three scales > 0 (``F.interpolate``'s
        ``scale_factor``).
    align_corners : bool, default False
        Corner-aligned (True) or half-pixel (False) coordinates.
    scales : sequence of 3 float, default (0.0, 0.0, 0.0)
        The multipliers per axis (D, H, W); <= 0 means "not given".  With
        ``align_corners=False`` a given scale sets the coordinate step to
        ``1/scale`` and must satisfy ``floor(in * scale) == out``.
    out : ndarray or torch.Tensor, optional
        Where to write the result (shape ``(N, C, oD, oH, oW)``, the dtype of
        ``x``, any layout).  By default a new array is allocated, in
        channels-last layout if ``x`` is channels-last, from the pool that
        the backward's results use.
    num_threads : int, optional
        OpenMP threads; None follows ``OMP_NUM_THREADS`` / ``threadpoolctl``.

    Returns
    -------
    ndarray or torch.Tensor, shape (N, C, oD, oH, oW)
        ``out`` if given; else a new array of the caller's kind (a torch
        tensor from PyTorch's allocator for a torch tensor); channels-last
        when ``x`` is.

    Raises
    ------
    AclnnError
        For any argument that breaks the operator contract, as for the
        backward (:func:`upsample_trilinear3d_backward`): ``.status`` 161001
        or 161002 (see :func:`get_forward_workspace_size`).

    Examples
    --------
    >>> import numpy as np, trilinear_bwd as tb
    >>> x = np.arange(8, dtype=np.float64).reshape(1, 1, 2, 2, 2)
    >>> y = tb.upsample_trilinear3d(x, (3, 3, 3), align_corners=True)
    >>> y[0, 0, 1]
    array([[2. , 2.5, 3. ],
           [3. , 3.5, 4. ],
           [4. , 4.5, 5. ]])
    """
    if x is None:
        raise NullArgumentError("self must not be None")
    x_given = x
    x = as_array(x, "self")
    output_size, scales = forward_sizes(x.shape, output_size, scales)
    misaligned = is_misaligned(x)
    call = check(FORWARD, x, out, output_size, None, align_corners, scales,
                 allocate=out is None, misaligned_ok=misaligned)
    return _run(call, x_given, misaligned, out, num_threads)


def _run(call, given, misaligned, out, num_threads):
    """Allocate the result if needed, copy a misaligned source, run; return the result.

    ``call`` passed every check before this is called: nothing is allocated,
    copied or planned for a call the contract refuses.
    """
    if out is not None:
        run_once(call, num_threads, misaligned)
        return out
    target_shape = call.op.shapes(call.input_size, call.output_size)[1]
    # The layout is decided from the caller's array, never from the aligned
    # copy below (which would be C order for any source).
    channels_last = is_channels_last(call.source)
    kind = None if isinstance(given, np.ndarray) else kind_of(given)
    if kind is not None:
        # The caller's kind of array back (a torch tensor from PyTorch's
        # own allocator: resizable, like every tensor PyTorch returns).
        result, target = kind.new_like(given, target_shape, channels_last, call.op.target)
    else:
        result = target = _new_output(call.source, target_shape, call.op.target, channels_last)
    run_once(call.replace(target=target), num_threads, misaligned)
    return result


def _new_output(source, shape, name, channels_last):
    # Running out of memory is an AclnnError (561000), not a
    # MemoryError escaping from the middle of the call.
    try:
        return _pool.empty(shape, source.dtype, channels_last)
    except (MemoryError, ValueError) as exc:
        raise AllocationError(f"could not allocate {name} of shape {shape}: {exc}") from None

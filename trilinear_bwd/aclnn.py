"""The operator under Ascend CANN's names, returning status codes instead of raising.

For people porting or testing NPU code: each function has the name and the
argument order of its CANN counterpart and returns an ``aclnnStatus``
(``ACLNN_SUCCESS`` == 0 or an error code); on error, ``aclGetRecentErrMsg()``
returns the message.  Errors that are not the caller's fault are reported as
``ACLNN_ERR_INNER`` (561000).

Examples
--------
>>> import numpy as np
>>> from trilinear_bwd import aclnn
>>> g = np.arange(1, 33, dtype=np.float32).reshape(2, 2, 2, 2, 2)
>>> gi = np.zeros((2, 2, 1, 1, 1), dtype=np.float32)
>>> status, size, executor = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
...     g, [2, 2, 2], [2, 2, 1, 1, 1], False, 0.0, 0.0, 0.0, gi)
>>> status
0
>>> workspace = aclnn.aclrtMalloc(size)
>>> aclnn.aclnnUpsampleTrilinear3dBackward(workspace, size, executor, None)
0
>>> gi.ravel()
array([ 36., 100., 164., 228.], dtype=float32)
"""

import threading

from . import _executor
from ._status import (
    ACLNN_ERR_INNER,
    ACLNN_ERR_PARAM_INVALID,
    ACLNN_ERR_PARAM_NULLPTR,
    ACLNN_ERR_RUNTIME_ERROR,
    ACLNN_SUCCESS,
    AclnnError,
    InvalidArgumentError,
    NullArgumentError,
)
from ._stream import Stream
from ._arguments import as_int

__all__ = [
    "ACLNN_ERR_INNER",
    "ACLNN_ERR_PARAM_INVALID",
    "ACLNN_ERR_PARAM_NULLPTR",
    "ACLNN_ERR_RUNTIME_ERROR",
    "ACLNN_SUCCESS",
    "aclDestroyAclOpExecutor",
    "aclGetRecentErrMsg",
    "aclSetAclOpExecutorRepeatable",
    "aclSetInputTensorAddr",
    "aclSetOutputTensorAddr",
    "aclnnUpsampleTrilinear3dBackward",
    "aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize",
    "aclrtCreateStream",
    "aclrtDestroyStream",
    "aclrtFree",
    "aclrtMalloc",
    "aclrtSynchronizeStream",
]

_recent = threading.local()


def aclGetRecentErrMsg():
    """Return the message of this thread's most recent failed call ("" if none)."""
    return getattr(_recent, "message", "")


def _call(fn, *args):
    """Run ``fn``; return (status, result) and record the error message."""
    try:
        result = fn(*args)
    except AclnnError as exc:
        _recent.message = str(exc)
        return exc.status, None
    except Exception as exc:  # noqa: BLE001 - anything else is an inner error
        _recent.message = f"internal error: {type(exc).__name__}: {exc}"
        return ACLNN_ERR_INNER, None
    return ACLNN_SUCCESS, result


def aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(gradOut, outputSize, inputSize,
                                                     alignCorners, scalesD, scalesH,
                                                     scalesW, gradInput):
    """Phase one: validate and plan (CANN's ``...GetWorkspaceSize``).

    Parameters
    ----------
    gradOut, outputSize, inputSize, alignCorners, scalesD, scalesH, scalesW, gradInput
        As in CANN; see :func:`trilinear_bwd.get_workspace_size`.

    Returns
    -------
    status : int
        ``ACLNN_SUCCESS``, ``ACLNN_ERR_PARAM_NULLPTR`` or ``ACLNN_ERR_PARAM_INVALID``.
    workspaceSize : int
        Bytes of workspace (0 on error).
    executor : Executor or None
        None on error.
    """
    status, result = _call(
        _executor.get_workspace_size, gradOut, outputSize, inputSize, alignCorners,
        scalesD, scalesH, scalesW, gradInput,
    )
    if status != ACLNN_SUCCESS:
        return status, 0, None
    return status, result[0], result[1]


def aclnnUpsampleTrilinear3dBackward(workspace, workspaceSize, executor, stream):
    """Phase two: run the executor (CANN's ``aclnnUpsampleTrilinear3dBackward``).

    Parameters
    ----------
    workspace : buffer or None
        At least ``workspaceSize`` writable bytes (see :func:`aclrtMalloc`).
    workspaceSize : int
    executor : Executor
    stream : Stream or None
        None runs synchronously; a stream enqueues (see :func:`aclrtSynchronizeStream`).

    Returns
    -------
    int
        ``ACLNN_SUCCESS``, or ``ACLNN_ERR_RUNTIME_ERROR`` for a misused
        workspace or executor, ``ACLNN_ERR_PARAM_NULLPTR`` for a missing one.
    """
    return _call(_executor.execute, workspace, workspaceSize, executor, stream)[0]


def aclSetAclOpExecutorRepeatable(executor):
    """Make ``executor`` reusable (CANN's ``aclSetAclOpExecutorRepeatable``); returns a status."""
    return _call(_executor_method, executor, "set_repeatable")[0]


def aclDestroyAclOpExecutor(executor):
    """Destroy ``executor`` (CANN's ``aclDestroyAclOpExecutor``); returns a status."""
    return _call(_executor_method, executor, "destroy")[0]


def aclSetInputTensorAddr(executor, index, tensor):
    """Rebind input ``index`` (0: gradOut) of a repeatable executor; returns a status."""
    return _call(_rebind, executor, index, tensor, "grad_out")[0]


def aclSetOutputTensorAddr(executor, index, tensor):
    """Rebind output ``index`` (0: gradInput) of a repeatable executor; returns a status."""
    return _call(_rebind, executor, index, tensor, "grad_input")[0]


def aclrtCreateStream():
    """Return ``(status, stream)``: a new :class:`trilinear_bwd.Stream`."""
    return ACLNN_SUCCESS, Stream()


def aclrtSynchronizeStream(stream):
    """Wait for ``stream``'s work; return the status of its first failed run (or 0)."""
    return _call(_stream_method, stream, "synchronize")[0]


def aclrtDestroyStream(stream):
    """Synchronize and close ``stream``; returns a status."""
    return _call(_stream_method, stream, "close")[0]


def aclrtMalloc(size):
    """Allocate a workspace of ``size`` bytes (64-byte aligned ``uint8`` array).

    Like every function here it never raises: for a size that is not a
    non-negative integer, or memory that cannot be allocated, it returns None
    (CANN's null pointer) and ``aclGetRecentErrMsg()`` says why.  Passing that
    None on as the workspace of a run that needs one gives 161001.
    """
    return _call(_executor.alloc_workspace, size)[1]


def aclrtFree(buffer):
    """Release a workspace: a no-op kept for symmetry (NumPy frees it)."""
    return ACLNN_SUCCESS


def _check_executor(executor):
    if executor is None:
        raise NullArgumentError("executor must not be None")
    if not isinstance(executor, _executor.Executor):
        raise InvalidArgumentError(
            f"executor must be an Executor, got {type(executor).__name__}"
        )


def _executor_method(executor, name):
    _check_executor(executor)
    getattr(executor, name)()


def _rebind(executor, index, tensor, which):
    _check_executor(executor)
    if tensor is None:
        raise NullArgumentError("tensor must not be None")
    # Only the integer 0 names the one tensor (not 0.0, False or an array).
    if as_int(index, "index") != 0:
        raise InvalidArgumentError(f"index must be 0 (the operator has one {which}), got {index!r}")
    executor.update_arrays(**{which: tensor})


def _stream_method(stream, name):
    if stream is None:
        raise NullArgumentError("stream must not be None")
    if not isinstance(stream, Stream):
        raise InvalidArgumentError(f"stream must be a Stream, got {type(stream).__name__}")
    getattr(stream, name)()

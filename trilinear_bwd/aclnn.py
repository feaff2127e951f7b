"""The operator under Ascend CANN's names, returning status codes instead of raising.

For people porting or testing NPU code: each function has the name and the
argument order of its CANN counterpart and returns an ``aclnnStatus``
(``ACLNN_SUCCESS`` == 0 or an error code); on error, ``aclGetRecentErrMsg()``
returns the message.  Errors that are not the caller's fault are reported as
``ACLNN_ERR_INNER`` (561000).

This layer is CANN's twin: where CANN's implementation and PyTorch differ it
follows CANN's implementation (``docs/operator.md``, "Which layer follows
which rule").  The scales are used only when ``scalesD``, ``scalesH`` and
``scalesW`` are all > 0, and then without checking them against
``outputSize``; otherwise the size ratio is used on every axis.  The rest of
the package follows PyTorch (each axis its own scale).  The same holds for
the forward operator, ``aclnnUpsampleTrilinear3dGetWorkspaceSize`` and
``aclnnUpsampleTrilinear3d``.

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
from ._core import _fork, _status
from ._core._status import *  # noqa: F403 -- the status codes (_status.__all__)
from ._core._status import (
    ACLNN_ERR_INNER,
    ACLNN_SUCCESS,
    AclnnError,
    ExecutionError,
    InvalidArgumentError,
    NullArgumentError,
)
from ._core._coerce import as_int
from ._core._operator import BACKWARD, CANN_RULES, FORWARD, check
from ._stream import Stream

__all__ = [
    *_status.__all__,
    "aclDestroyAclOpExecutor",
    "aclGetRecentErrMsg",
    "aclSetAclOpExecutorRepeatable",
    "aclSetInputTensorAddr",
    "aclSetOutputTensorAddr",
    "aclnnUpsampleTrilinear3d",
    "aclnnUpsampleTrilinear3dBackward",
    "aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize",
    "aclnnUpsampleTrilinear3dGetWorkspaceSize",
    "aclrtCreateStream",
    "aclrtDestroyStream",
    "aclrtFree",
    "aclrtMalloc",
    "aclrtSynchronizeStream",
]

_recent = threading.local()
_fork.renew(globals(), "_recent", threading.local)


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
    gradOut, outputSize, inputSize, alignCorners, gradInput
        As in CANN; see :func:`trilinear_bwd.get_workspace_size`.
    scalesD, scalesH, scalesW : float
        CANN's rule, not PyTorch's: used only when all three are > 0 (and
        ``alignCorners`` is false), then with step ``1 / scale`` on each axis
        and no check against ``outputSize``; otherwise ignored, and every
        axis uses the size ratio.  They must be finite either way (161002).

    Returns
    -------
    status : int
        ``ACLNN_SUCCESS``, ``ACLNN_ERR_PARAM_NULLPTR`` or ``ACLNN_ERR_PARAM_INVALID``.
    workspaceSize : int
        Bytes of workspace (0 on error).
    executor : Executor or None
        None on error.
    """
    return _phase_one(BACKWARD, gradOut, gradInput, outputSize, inputSize, alignCorners,
                      (scalesD, scalesH, scalesW))


def _phase_one(op, *arguments):
    """Phase one of ``op`` under CANN's rules (``_operator.check``'s arguments).

    Returns ``(status, workspace size, executor)``: ``(status, 0, None)`` on error.
    """
    status, executor = _call(
        lambda: _executor.Executor(check(op, *arguments, rules=CANN_RULES), None))
    if status != ACLNN_SUCCESS:
        return status, 0, None
    return status, executor.workspace_size, executor


def aclnnUpsampleTrilinear3dGetWorkspaceSize(self, outputSize, alignCorners, scalesD, scalesH,
                                             scalesW, out):
    """Phase one of the forward: validate and plan (CANN's ``aclnnUpsampleTrilinear3dGetWorkspaceSize``).

    Parameters
    ----------
    self : array_like, shape (N, C, iD, iH, iW)
        The volume (CANN's parameter name; any layout, read as NCDHW).
        C, iD, iH and iW must be > 0; N = 0 is an empty call (status 0,
        workspace 0), as in CANN's implementation.
    outputSize : sequence of 3 int
        ``(oD, oH, oW)``, each > 0.
    alignCorners : bool
    scalesD, scalesH, scalesW : float
        CANN's rule, as for the backward: used only when all three are > 0
        (and ``alignCorners`` is false), then without a check against
        ``outputSize``; otherwise every axis uses the size ratio.  Finite.
    out : ndarray, shape (N, C, oD, oH, oW)
        Same dtype as ``self``; writable; overwritten.

    Returns
    -------
    status : int
    workspaceSize : int
    executor : Executor or None
    """
    return _phase_one(FORWARD, self, out, outputSize, None, alignCorners,
                      (scalesD, scalesH, scalesW))


def aclnnUpsampleTrilinear3d(workspace, workspaceSize, executor, stream):
    """Phase two of the forward: run the executor (CANN's ``aclnnUpsampleTrilinear3d``).

    Parameters and status codes are those of
    :func:`aclnnUpsampleTrilinear3dBackward`; an executor planned for the
    backward is refused (``ACLNN_ERR_RUNTIME_ERROR``), as the backward's
    phase two refuses a forward one.
    """
    return _call(_execute_op, FORWARD, workspace, workspaceSize, executor, stream)[0]


def _execute_op(op, workspace, workspace_size, executor, stream):
    """Phase two of ``op``: an executor of the other operator is a misuse (361001)."""
    if isinstance(executor, _executor.Executor) and executor.op != op.name:
        other = "aclnnUpsampleTrilinear3d" if op is BACKWARD else \
            "aclnnUpsampleTrilinear3dBackward"
        raise ExecutionError(f"executor was planned for the {executor.op} operator: "
                             f"run it with {other}")
    _executor.execute(workspace, workspace_size, executor, stream)


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
    return _call(_execute_op, BACKWARD, workspace, workspaceSize, executor, stream)[0]


def aclSetAclOpExecutorRepeatable(executor):
    """Make ``executor`` reusable (CANN's ``aclSetAclOpExecutorRepeatable``); returns a status."""
    return _call(_executor_method, executor, "set_repeatable")[0]


def aclDestroyAclOpExecutor(executor):
    """Destroy ``executor`` (CANN's ``aclDestroyAclOpExecutor``); returns a status."""
    return _call(_executor_method, executor, "destroy")[0]


def aclSetInputTensorAddr(executor, index, tensor):
    """Rebind input ``index`` (0: gradOut; the forward's self) of a repeatable executor; returns a status."""
    return _call(_rebind, executor, index, tensor, "grad_out")[0]


def aclSetOutputTensorAddr(executor, index, tensor):
    """Rebind output ``index`` (0: gradInput; the forward's out) of a repeatable executor; returns a status."""
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

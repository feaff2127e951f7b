"""Status codes of the CANN operator and the exceptions that carry them."""

ACLNN_SUCCESS = 0
ACLNN_ERR_PARAM_NULLPTR = 161001
ACLNN_ERR_PARAM_INVALID = 161002
ACLNN_ERR_RUNTIME_ERROR = 361001
ACLNN_ERR_INNER = 561000

STATUS_NAMES = {
    ACLNN_SUCCESS: "ACLNN_SUCCESS",
    ACLNN_ERR_PARAM_NULLPTR: "ACLNN_ERR_PARAM_NULLPTR",
    ACLNN_ERR_PARAM_INVALID: "ACLNN_ERR_PARAM_INVALID",
    ACLNN_ERR_RUNTIME_ERROR: "ACLNN_ERR_RUNTIME_ERROR",
    ACLNN_ERR_INNER: "ACLNN_ERR_INNER",
}

# What ``from ._core._status import *`` gives: the status codes by name, which
# both public faces (``trilinear_bwd`` and ``trilinear_bwd.aclnn``) re-export
# so (the errors each imports by name: the two export different ones).
__all__ = sorted(STATUS_NAMES.values())


class AclnnError(Exception):
    """Base of every error this library raises for a bad call.

    Attributes
    ----------
    status : int
        The CANN status code (``ACLNN_ERR_*``) that ``trilinear_bwd.aclnn``
        would return for the same call.
    """

    status = ACLNN_ERR_INNER

    def __init__(self, message):
        super().__init__(message)
        self.message = message

    def __str__(self):
        return f"{self.message} [{STATUS_NAMES[self.status]} {self.status}]"


class NullArgumentError(AclnnError, ValueError):
    """A required argument is None (161001, ``ACLNN_ERR_PARAM_NULLPTR``)."""

    status = ACLNN_ERR_PARAM_NULLPTR


class InvalidArgumentError(AclnnError, ValueError):
    """An argument breaks a rule of the operator (161002, ``ACLNN_ERR_PARAM_INVALID``)."""

    status = ACLNN_ERR_PARAM_INVALID


class LimitError(InvalidArgumentError):
    """A size breaks one of the contract's limits (161002, ``ACLNN_ERR_PARAM_INVALID``).

    A dimension above 2**20, the 60 GiB working set or a 2**31 product: the
    calls that PyTorch would try to allocate, so that the PyTorch front ends
    refuse them before anything is allocated (``docs/torch.md``).
    """


class ExecutionError(AclnnError, RuntimeError):
    """Phase two was misused (361001, ``ACLNN_ERR_RUNTIME_ERROR``).

    Raised for a workspace that is too small or read-only, and for an executor
    that was already consumed, destroyed, or is running right now.
    """

    status = ACLNN_ERR_RUNTIME_ERROR


class InternalError(AclnnError, RuntimeError):
    """A failure that is not the caller's fault (561000, ``ACLNN_ERR_INNER``)."""

    status = ACLNN_ERR_INNER


class AllocationError(InternalError, MemoryError):
    """Memory that could not be allocated (561000, ``ACLNN_ERR_INNER``); also a ``MemoryError``.

    An ``InternalError`` like any failure that is not the caller's fault, so
    that the status is CANN's; and a ``MemoryError``, so that ``except
    MemoryError`` -- what a user writes around a call that may not fit --
    catches it too.  Raised for the result, a workspace, or a copy the call
    needs.
    """

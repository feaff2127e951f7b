"""The thread policy, in one place: what ``num_threads`` asks for and the team a run uses.

Every front end takes ``num_threads`` the same way (None follows OpenMP's
default; a positive integer is a team size; a negative one counts back from
the processor count) and every run's team is chosen here, including the
fork guard: GNU libgomp cannot start a thread team in a child forked after
the parent ran one, so such a child runs single-threaded.  Results never
depend on the team (``docs/threads.md``).
"""

import warnings

from . import _fork
from .._kernels import _native
from ._coerce import as_int, invalid

MAX_THREADS = 1024
# With the default thread count, small problems use fewer threads: a thread
# per this many bytes moved at most.  Waking a team costs more than the work,
# and under load a descheduled team member stalls everyone at the barrier.
BYTES_PER_THREAD = 256 * 2**10

_team_started = False
_forked_after_team = False


@_fork.at_child
def _after_fork_in_child():
    global _forked_after_team
    _forked_after_team = _forked_after_team or _team_started


# The team size ``num_threads`` asks for now, unchecked (call :func:`resolve`
# or :func:`is_plain` first): OpenMP's default for None, at least 1, 1 when
# the package was built without OpenMP.  The compiled function itself, not a
# wrapper: the torch fast path asks on every call.
effective = _native.effective_n_threads


def is_plain(num_threads):
    """True for None and for an ``int`` (not a bool) that :func:`resolve` accepts."""
    return num_threads is None or (type(num_threads) is int and num_threads != 0
                                   and abs(num_threads) <= MAX_THREADS)


def resolve(num_threads):
    """Check ``num_threads`` and return the team size it asks for (>= 1).

    Parameters
    ----------
    num_threads : int or None
        None follows OpenMP's default; a positive integer is a team size; a
        negative integer counts back from the processor count (-1: all).

    Raises
    ------
    InvalidArgumentError
        (161002) not an integer, 0, or above ``MAX_THREADS`` in magnitude.
    """
    if num_threads is None:
        return effective(None)
    num_threads = as_int(num_threads, "num_threads")
    if num_threads == 0 or abs(num_threads) > MAX_THREADS:
        raise invalid(
            f"num_threads must be non-zero and at most {MAX_THREADS} in magnitude, "
            f"got {num_threads}"
        )
    return effective(num_threads)


def team_size(n_slots, nbytes, requested, follow_default):
    """The team a run uses.

    Parameters
    ----------
    n_slots : int
        The plan's thread slots (``Plan.n_slots``).
    nbytes : int
        The bytes a run reads and writes.
    requested : int
        :func:`resolve` of what the caller passed.
    follow_default : bool
        The caller passed None: OpenMP's default team now, but no more
        threads than the plan has slots or than the bytes moved are worth
        waking (``BYTES_PER_THREAD``).  Otherwise what was asked for,
        within the plan's slots.
    """
    if not follow_default:
        return min(requested, n_slots)
    cap = max(1, nbytes // BYTES_PER_THREAD)
    return max(1, min(effective(None), n_slots, cap))


def fork_safe(threads):
    """The team a run may start now (1 in a child forked after a team ran); notes a team.

    Called right before every run of several threads, so that a child
    forked after it knows a team ran in its parent.
    """
    global _team_started
    if threads <= 1:
        return threads
    if _forked_after_team:
        warnings.warn(
            "trilinear_bwd: this process was forked after running an OpenMP team, which "
            "GNU libgomp cannot restart; running on one thread. Start workers with "
            "'spawn' or 'forkserver' to use several (see docs/threads.md).",
            RuntimeWarning, stacklevel=4,
        )
        return 1
    _team_started = True
    return threads

"""The one seam from a checked call to its kernel: plan, kernel, team, workspace.

:func:`prepare` plans a checked call once (``_plan``'s cached plan for the
kernel variant ``_dispatch`` picks) and fixes its thread policy
(``_threads``).  The :class:`Runner` it returns is what every front end
runs:

* the one call and Dask's blocks: :func:`run_once` (:meth:`Runner.run_scratch`,
  with this thread's scratch workspace);
* an executor: :meth:`Runner.run`, with the caller's workspace;
* the torch wing: the first call of a geometry runs :func:`run_once`, and
  the compiled fast path keeps its runner for the geometry's later calls
  and calls :meth:`Runner.run_raw` on raw addresses, without a Python call
  between it and the kernel.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport uintptr_t

from trilinear_bwd._kernels._kernel_plan cimport RunTeam

import threading

import numpy as np

from trilinear_bwd._core import _dispatch, _fork, _threads
from trilinear_bwd._core._arrays import data_address
from trilinear_bwd._core._constants import LINE
from trilinear_bwd._core._plan import planned
from trilinear_bwd._core._status import AllocationError

# A runner whose workspace is at most this many bytes keeps one of its own
# (a few rows of a tiny call), used by one raw run at a time, which saves a
# look-up of this thread's scratch workspace on every call of the torch
# fast path (``docs/design.md``, "Per-call cost").  32 KiB of float64 sums:
# the geometries that 16 KiB covered when small calls summed in float32.
OWN_WORKSPACE_BYTES = 32 * 2**10
# Each thread's scratch workspace is kept between runs when it is at most
# this large (a workspace is a few rows per thread, not a volume).
SCRATCH_KEEP_BYTES = 16 * 2**20

_scratch = threading.local()
_fork.renew(globals(), "_scratch", threading.local)


def aligned_bytes(Py_ssize_t nbytes):
    """An uninitialised, writable ``uint8`` array of ``nbytes`` starting on a 64-byte line.

    Raises
    ------
    AllocationError
        (561000, an ``InternalError`` and a ``MemoryError``) the memory
        could not be allocated.
    """
    # A size no allocator can satisfy is an AclnnError, not a MemoryError
    # escaping from the middle of a call.
    try:
        raw = np.empty(nbytes + LINE, dtype=np.uint8)
    except (MemoryError, ValueError) as exc:
        raise AllocationError(f"could not allocate a workspace of {nbytes} bytes: {exc}") from None
    start = -raw.ctypes.data % LINE
    return raw[start:start + nbytes]


def scratch_workspace(Py_ssize_t size):
    """``(buffer, address)``: this thread's scratch workspace of at least ``size`` bytes.

    ``(None, 0)`` for none.  The caller holds ``buffer`` for the length of
    its run.
    """
    if size <= 0:
        return None, 0
    kept = getattr(_scratch, "kept", None)
    if kept is not None and kept[0].nbytes >= size:
        return kept
    buf = aligned_bytes(size)
    kept = (buf, data_address(buf))
    if size <= SCRATCH_KEEP_BYTES:
        _scratch.kept = kept
    return kept


def moved_bytes(call):
    """Bytes a run of ``call`` reads and writes: the source's and the target's."""
    return call.source.nbytes + call.target.nbytes


# The kernel variant in use now (``_dispatch``): what a runner prepared now
# is planned for, and part of the torch fast path's key.
variant = _dispatch.kernel_module


def run_once(call, num_threads, misaligned=False):
    """Run a checked call with this thread's scratch workspace; return its :class:`Runner`.

    The run of the one call, Dask's blocks and the torch wing's first call
    of a geometry (which keeps the runner for the calls after it).

    Parameters
    ----------
    call : trilinear_bwd._core._operator.Call
        Checked (with ``misaligned_ok=misaligned``), its target set.
    num_threads : int or None
    misaligned : bool
        The source is not aligned to its element size: it is copied first,
        in its own layout, so the kernel sees the strides the caller's
        array has.

    Raises
    ------
    AllocationError
        (561000, an ``InternalError`` and a ``MemoryError``) a misaligned
        source could not be copied.
    """
    if misaligned:
        try:
            call = call.replace(source=call.source.copy(order="K"))
        except MemoryError as exc:
            raise AllocationError(
                f"could not copy the misaligned {call.op.source}: {exc}") from None
    runner = prepare(call, num_threads)
    runner.run_scratch(call)
    return runner


def prepare(call, num_threads):
    """The :class:`Runner` of a checked call whose target is set.

    Parameters
    ----------
    call : trilinear_bwd._core._operator.Call
        From ``_operator.check``.
    num_threads : int or None
        As the caller passed it (checked here, ``_threads.resolve``).

    Returns
    -------
    Runner
    """
    return Runner(call, num_threads)


cdef class Runner:
    """A checked call made runnable: its plan, its kernel and its team.

    Made by :func:`prepare`.  It holds no address: it runs any call of the
    geometry it was planned for (an executor's updated arrays, the torch
    fast path's later tensors).

    Attributes
    ----------
    plan : trilinear_bwd._core._plan.Plan
    variant : module
        The kernel variant the plan was made for.
    workspace_size : int
        Bytes of workspace a run needs.
    requested : int
        The team size asked for (``_threads.resolve``).
    follow_default : bool
        The caller passed no thread count: the team follows OpenMP's
        default at each run (:meth:`team`).
    nbytes : int
        Bytes a run reads and writes.
    """

    # Filled once, in __cinit__: a second __init__ cannot swap the plan or
    # free the workspace under another thread's run.
    def __cinit__(self, call, num_threads):
        self.requested = _threads.resolve(num_threads)
        self.follow_default = num_threads is None
        self.variant = variant()
        self.plan, self._kernel = planned(call, self.requested, self.variant)
        self._kernel_plan = self.plan.kernel
        self._run_team = <RunTeam> <uintptr_t> self.variant.RUN_TEAM
        self.workspace_size = self.plan.workspace_size
        self.nbytes = moved_bytes(call)

    def __dealloc__(self):
        PyMem_Free(self._own)

    def team(self):
        """The team a run uses now (``_threads.team_size``)."""
        return _threads.team_size(self.plan.n_slots, self.nbytes, self.requested,
                                  self.follow_default)

    def run(self, call, uintptr_t workspace, checks=(), addresses=None, threads=None):
        """Run the kernel on ``call``'s arrays with ``workspace`` (an address).

        Checks first that the bound arrays of a registered kind (torch
        tensors) still use the memory they were bound with, and each of
        ``checks`` (``_memory.bound``); marks the target written afterwards.

        Parameters
        ----------
        call : trilinear_bwd._core._operator.Call
            A call of the geometry this runner was planned for.
        workspace : int
            At least ``workspace_size`` bytes.
        checks : sequence
            Memory checks (``check()`` raises 361001 if memory moved).
        addresses : tuple of int, optional
            ``call.addresses()`` when the caller keeps them (an executor).
        threads : int, optional
            The team, if the caller fixed it before (an executor's launch);
            else :meth:`team`.

        Returns
        -------
        int
            The threads that computed part of the result.
        """
        for binding in call.bindings:
            binding.check()
        for memory in checks:
            memory.check()
        source, target = call.addresses() if addresses is None else addresses
        team = self._kernel(source, target, workspace,
                            _threads.fork_safe(self.team() if threads is None else threads))
        if call.bindings:
            written = call.op.target
            for binding in call.bindings:
                if binding.name == written:
                    binding.mark_written()
        return team

    def run_scratch(self, call):
        """:meth:`run` with this thread's scratch workspace; returns the team."""
        buf, address = scratch_workspace(self.workspace_size)
        team = self.run(call, address)
        del buf   # held until the kernel returned
        return team

    cdef int run_raw(self, uintptr_t source, uintptr_t target, int threads) except -1:
        """The kernel on raw addresses of arrays laid out as planned, ``threads`` strong.

        For compiled callers that checked the addresses themselves (the
        torch fast path): no bindings, no team count.  The runner's own
        workspace serves one run at a time; a run that finds it in use
        (another thread's run of the same geometry) takes the thread's
        scratch workspace.
        """
        cdef uintptr_t workspace
        if threads > 1:
            threads = _threads.fork_safe(threads)
        if self._own == NULL and 0 < self.workspace_size <= OWN_WORKSPACE_BYTES:
            # Made at the first raw run: the other runs take a workspace given.
            self._own = <char*> PyMem_Malloc(self.workspace_size)
            if self._own == NULL:
                raise AllocationError(f"could not allocate a workspace of "
                                      f"{self.workspace_size} bytes")
        if self._own != NULL and not self._own_busy:
            self._own_busy = True
            with nogil:
                self._run_team(&self._kernel_plan.p, <const char*> source, <char*> target,
                               self._own, threads)
            self._own_busy = False
            return 0
        buf, workspace = scratch_workspace(self.workspace_size)
        with nogil:
            self._run_team(&self._kernel_plan.p, <const char*> source, <char*> target,
                           <char*> workspace, threads)
        del buf   # held until the kernel returned
        return 0

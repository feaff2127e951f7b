"""The two-phase lifecycle: ``get_workspace_size`` -> ``alloc_workspace`` -> ``execute``.

This mirrors ``aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize`` and
``aclnnUpsampleTrilinear3dBackward``: phase one validates everything and
returns an :class:`Executor` bound to its arrays plus the workspace size;
phase two only checks the workspace and the executor's state, then runs the
kernel with the GIL released.
"""

import threading
import weakref

from ._core import _fork, _memory
from ._core._arguments import checked_workspace, workspace_size_argument
from ._core._arrays import data_address, kind_of
from ._core._operator import BACKWARD, FORWARD, check, rebind
from ._core._runner import aligned_bytes, prepare
from ._core._status import ExecutionError, InvalidArgumentError, NullArgumentError

_READY, _CONSUMED, _DESTROYED = "ready", "consumed", "destroyed"

# Executors alive in this process: a child forked while another thread held
# one of an executor's locks would find it held forever, so the child gets
# fresh locks (the run that held it belongs to the parent).
_live = weakref.WeakSet()


@_fork.at_child
def _after_fork_in_child():
    for executor in list(_live):
        executor._lock = threading.Lock()
        executor._busy = threading.Lock()


class Executor:
    """A validated call, ready to run: what phase one returns.

    Do not construct it directly; call :func:`get_workspace_size` (the
    backward) or :func:`get_forward_workspace_size` (the forward).  An
    executor is bound to the array it reads and the one it writes
    (``grad_out`` and ``grad_input``; the forward's ``x`` and ``out``) and
    runs once, unless :meth:`set_repeatable` was called.  It is a context manager
    that destroys itself on exit.

    Attributes
    ----------
    workspace_size : int
        Bytes of workspace that :func:`execute` needs (0 for an empty batch).
    """

    def __init__(self, call, num_threads):
        self._call = call
        self._op = call.op
        # Planned once; the same runner serves the arrays of update_arrays
        # (same shapes, dtypes and strides).
        self._runner = prepare(call, num_threads)
        self._workspace_size = self._runner.workspace_size
        self._destroyed_team = None
        self._addresses = call.addresses()
        # Two locks, so that nothing waits on a run but another run:
        # ``_lock`` guards the state and is held only for a moment (claim,
        # update, destroy), never across a kernel; ``_busy`` is held for the
        # length of each run.  A run uses what it captured when it was
        # claimed, so update_arrays and destroy need not wait for it.
        self._lock = threading.Lock()
        self._busy = threading.Lock()
        self._state = _READY
        self._repeatable = False
        self._last_team = None
        # What keeps the bound arrays' remembered addresses true (_memory):
        # NumPy owners pinned, torch tensors checked before each run.
        self._held = _memory.bound(call)
        self._workspace_memo = None
        _live.add(self)

    # -- introspection -------------------------------------------------------

    @property
    def workspace_size(self):
        """Bytes of workspace a run needs."""
        return self._workspace_size

    @property
    def repeatable(self):
        """True once :meth:`set_repeatable` was called."""
        return self._repeatable

    @property
    def state(self):
        """``"ready"``, ``"consumed"`` (a single-use executor that ran) or ``"destroyed"``."""
        return self._state

    @property
    def op(self):
        """``"backward"`` or ``"forward"``: the operator this executor computes."""
        return self._op.name

    @property
    def grad_out(self):
        """The array phase two reads (None once destroyed); the forward's ``x``."""
        call = self._call
        return None if call is None else call.source

    @property
    def grad_input(self):
        """The array phase two overwrites (None once destroyed); the forward's ``out``."""
        call = self._call
        return None if call is None else call.target

    x = grad_out
    out = grad_input

    @property
    def num_threads(self):
        """The team size a run will use now."""
        runner = self._runner
        return self._destroyed_team if runner is None else runner.team()

    @property
    def last_num_threads(self):
        """Threads that took part in the most recent run (None before the first).

        Counted by the kernel itself, so it shows what OpenMP actually
        granted, for example under ``threadpoolctl.threadpool_limits``.
        """
        return self._last_team

    def __repr__(self):
        a = self._call
        if a is None:
            return f"<trilinear_bwd.Executor {self._state}>"
        layout = "NDHWC" if self._runner.plan.channels_last else "NCDHW"
        read, written = a.names
        return (
            f"<trilinear_bwd.Executor {self._op.name} {self._state}"
            f"{' repeatable' if self._repeatable else ''}: "
            f"{read} {a.source.dtype}{tuple(a.source.shape)} -> {written} "
            f"{tuple(a.target.shape)}, {layout} mode, alignCorners={a.align_corners}, "
            f"scales={a.scales}, workspace {self.workspace_size} bytes, "
            f"{self.num_threads} thread(s)>"
        )

    # -- lifecycle -------------------------------------------------------------

    def set_repeatable(self):
        """Allow this executor to run any number of times (``aclSetAclOpExecutorRepeatable``).

        Raises
        ------
        ExecutionError
            (361001) the executor was destroyed or already consumed.
        """
        with self._lock:
            self._check_usable()
            self._repeatable = True

    def update_arrays(self, grad_out=None, grad_input=None):
        """Point a repeatable executor at new arrays.

        The counterpart of ``aclSetInputTensorAddr`` / ``aclSetOutputTensorAddr``.
        The new arrays must have the same shape, dtype and strides as the ones
        they replace; they are validated again (writability, overlap).  On
        error nothing changes.  Runs already launched (on a stream, or running
        in another thread) keep the arrays they were launched with; the next
        launch uses the new ones.

        Parameters
        ----------
        grad_out, grad_input : array_like, optional
            Replacements of the array the executor reads and the one it
            writes (a forward executor's ``x`` and ``out``: pass them in this
            order); None keeps the current one.

        Raises
        ------
        ExecutionError
            (361001) the executor is not repeatable, or was destroyed.
        InvalidArgumentError
            (161002) a new array differs in shape, dtype or strides, is
            read-only, or overlaps the other.
        """
        with self._lock:
            self._check_usable()
            if not self._repeatable:
                raise ExecutionError(
                    "update_arrays needs a repeatable executor; call set_repeatable() first"
                )
            call = rebind(self._call, grad_out, grad_input)
            self._call, self._held = call, _memory.bound(call)
            self._addresses = call.addresses()

    def destroy(self):
        """Release the executor (``aclDestroyAclOpExecutor``); later runs get 361001.

        Drops every reference the executor holds (arrays, plan, kernel), so
        their memory is freed as soon as the caller lets go of them too.  A
        run already launched (on a stream, or in another thread) completes
        with what it captured.  Destroying twice is harmless.
        """
        with self._lock:
            self._state = _DESTROYED
            if self._runner is not None:
                self._destroyed_team = self._runner.team()
            self._call = self._runner = self._workspace_memo = None
            self._held = ((), ())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._state != _DESTROYED:
            self.destroy()
        return False

    def __reduce_ex__(self, protocol):
        # copy.copy, copy.deepcopy and pickle all come here.  A copy would
        # share the original's memory bindings but not its state (a consumed
        # single-use executor would run again), so there is none.
        raise ExecutionError(
            "an Executor cannot be copied or pickled: it is bound to its arrays' memory; "
            "call get_workspace_size again (in the other process, for pickling)"
        )

    # -- phase two -------------------------------------------------------------

    def _check_usable(self):
        if self._state == _DESTROYED:
            raise ExecutionError("executor was destroyed")
        if self._state == _CONSUMED:
            raise ExecutionError(
                "executor was already executed; a single-use executor runs once "
                "(call set_repeatable() before the first run to reuse it)"
            )

    def _claim(self, workspace, workspace_size, queued=False):
        """Check phase two and, for a single-use executor, consume it.

        The caller holds ``_lock``.  The returned job captures the bound
        arrays, kernel and workspace now, so a stream runs exactly what was
        launched even if the executor is updated or destroyed meanwhile.
        """
        self._check_usable()
        memo = self._workspace_memo
        if (memo is not None and memo[0] is workspace and type(workspace_size) is int
                and workspace_size == memo[1] and memo[2] is self._call
                and (memo[3] is None or memo[3].flags.writeable)
                and (memo[5] is None or memo[5].holds())):
            # The same workspace as the last run, already checked against
            # these arrays, and its memory where it was (memo[5] checks a
            # torch tensor; NumPy memory is pinned by memo[6]): a repeated
            # run costs no more than the kernel.
            buf, address, keep = memo[3], memo[4], memo[5:]
        else:
            buf = checked_workspace(workspace, workspace_size, self.workspace_size, self._call)
            address = 0 if buf is None else data_address(buf)
            keep = _workspace_keep(workspace, buf, workspace_size)
            # An owner that could move the memory unseen is checked afresh every run.
            self._workspace_memo = None if keep is None else (
                workspace, workspace_size, self._call, buf, address) + keep
        if not self._repeatable:
            self._state = _CONSUMED
        return _Job(self, buf, address, self.num_threads, keep, queued)

    def _execute_now(self, workspace, workspace_size):
        if not self._busy.acquire(blocking=False):
            raise ExecutionError(
                "executor is running in another thread; execute must wait until it finishes"
            )
        try:
            with self._lock:
                job = self._claim(workspace, workspace_size)
            job.run()
        finally:
            self._busy.release()

    def _enqueue(self, workspace, workspace_size, submit):
        """Claim a run and hand it to ``submit`` (a stream's queue), atomically.

        Failure atomicity: if ``submit`` fails, for example on a
        closed stream, the claim is undone, so a single-use executor is not
        consumed by a launch that never ran.
        """
        with self._lock:
            state = self._state
            job = self._claim(workspace, workspace_size, queued=True)
            try:
                submit(job)
            except BaseException:
                self._state = state
                raise


def _workspace_keep(workspace, buf, workspace_size):
    """``(memory check or None, NumPy pin or None)`` keeping a checked workspace's address true.

    The check is that of the workspace's kind (a torch tensor's); None if
    its owner could move it unseen (see ``_memory``): such a workspace is
    not remembered.
    """
    if buf is None:
        return (None, None)
    kind = kind_of(workspace)
    if kind is not None:
        return (kind.memory(workspace, "workspace", data_address(buf), workspace_size), None)
    if not _memory.stable(buf):
        return None
    return (None, _memory.pin(buf))


class _Job:
    """One claimed run of an executor: its arrays, kernel and workspace, fixed at launch."""

    __slots__ = ("_executor", "_runner", "_call", "_addresses", "_workspace", "_address",
                 "_threads", "_held", "_checks")

    def __init__(self, executor, workspace, address, threads, keep, queued):
        self._executor = executor
        self._runner = executor._runner
        self._call = executor._call
        self._addresses = executor._addresses
        self._workspace = workspace      # kept alive until the run
        self._address = address
        self._threads = threads
        # Pins and checks of the arrays' and the workspace's memory, kept
        # until the run: a stream runs it after launch returns (a run now
        # follows the claim's own check of the workspace).
        pins, checks = executor._held
        ws_check = keep[0] if keep and queued else None
        self._held = (pins, keep)
        self._checks = checks if ws_check is None else checks + (ws_check,)

    def run(self):
        """Check the memory is still there, run the kernel, then mark a torch ``gradInput`` as written."""
        self._executor._last_team = self._runner.run(self._call, self._address, self._checks,
                                                     self._addresses, self._threads)

    def __call__(self):
        # On a stream's worker: wait for a run of the same executor in
        # another thread to finish (queued runs are never dropped).
        with self._executor._busy:
            self.run()


def get_workspace_size(grad_out, output_size, input_size, align_corners, scales_d,
                       scales_h, scales_w, grad_input, num_threads=None):
    """Phase one: validate a backward call and plan it.

    The counterpart of ``aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize``.

    Parameters
    ----------
    grad_out : array_like, shape (N, C, oD, oH, oW)
        Gradient of the upsampled volume: float32, float64, float16 or
        bfloat16 (``ml_dtypes``), any layout or strides.  Read, never written.
    output_size : sequence of 3 int
        ``(oD, oH, oW)``; must equal ``grad_out.shape[2:]``.
    input_size : sequence of 5 int
        ``(N, C, iD, iH, iW)``, the shape of ``grad_input``.
    align_corners : bool
        Corner-aligned (True) or half-pixel (False) coordinates.
    scales_d, scales_h, scales_w : float
        The forward's multipliers (output / input) per axis; <= 0 (or None)
        means "not given".  Used, and checked against ``output_size``, only
        when ``align_corners`` is False; each axis uses its own (PyTorch's
        rule; ``trilinear_bwd.aclnn`` follows CANN's instead, see
        ``docs/operator.md``).
    grad_input : ndarray, shape (N, C, iD, iH, iW)
        Where the result goes: same dtype as ``grad_out``, writable, any
        layout, not overlapping ``grad_out``.  Overwritten.
    num_threads : int, optional
        Threads for phase two; None follows OpenMP's default
        (``OMP_NUM_THREADS``, ``threadpoolctl``) at the time of each run.

    Returns
    -------
    workspace_size : int
        Bytes of workspace phase two needs.
    executor : Executor

    Raises
    ------
    NullArgumentError
        (161001) a required argument is None.
    InvalidArgumentError
        (161002) any rule of the contract is broken; nothing is written.

    Notes
    -----
    The workspace holds one slot per thread that can have work
    (``min(threads, items)`` slots; the items are ``N*C*iD`` input planes,
    or, when ``grad_out`` is channels-last, ``N*ceil(iD/2)`` pairs of planes,
    ``N*iD`` single planes where pairs would leave fewer than 4 per
    thread), plus 64 bytes to align an unaligned buffer.  A slot holds, in float32 (float64
    for float64 data), with L = oW (or oW * C channels-last):

    * the D-reduced plane in progress, oH * L elements;
    * the H-reduced plane, iH rows of L + 33 elements (rounded to 64 bytes),
      or one such row channels-last, where each row is reduced over W at once;
    * two converted grad_out rows (2 * L), only when ``grad_out``'s rows are
      not unit-stride (strided, reversed or transposed views);
    * output rows (iW * C channels-last, else up to 8 rows of iW) unless the
      W pass writes ``grad_input``'s rows in place: unit-stride rows of
      float32/float64 (streamed channels-last rows only with a multiple of
      8 channels), and of float16/bfloat16 when ``grad_out`` is
      channels-first.

    No case copies a whole array: float16/bfloat16 rows are widened as they
    are read.  The size is 0 for an empty batch.
    """
    call = check(BACKWARD, grad_out, grad_input, output_size, input_size, align_corners,
                 (scales_d, scales_h, scales_w))
    executor = Executor(call, num_threads)
    return executor.workspace_size, executor


def get_forward_workspace_size(x, output_size, align_corners, scales_d, scales_h, scales_w,
                               out, num_threads=None):
    """Phase one of the forward: validate an upsampling call and plan it.

    The counterpart of ``aclnnUpsampleTrilinear3dGetWorkspaceSize``; phase
    two is :func:`execute`, as for the backward, and the returned
    :class:`Executor` has the same lifecycle (single-use or repeatable,
    ``update_arrays(x, out)``, streams).

    Parameters
    ----------
    x : array_like, shape (N, C, iD, iH, iW)
        The volume to upsample: float32, float64, float16 or bfloat16, any
        layout or strides.  Read, never written.  C and iD, iH, iW > 0.
    output_size : sequence of 3 int
        ``(oD, oH, oW)``, each > 0.
    align_corners : bool
        Corner-aligned (True) or half-pixel (False) coordinates.
    scales_d, scales_h, scales_w : float
        The multipliers (output / input) per axis; <= 0 (or None) means "not
        given".  With ``align_corners`` False each given scale sets its
        axis's coordinate step to ``1/scale`` and must satisfy
        ``output_size[k] == floor(x.shape[k+2] * scale)`` (PyTorch's rule;
        ``trilinear_bwd.aclnn`` follows CANN's, see ``docs/operator.md``).
    out : ndarray, shape (N, C, oD, oH, oW)
        Where the result goes: same dtype as ``x``, writable, any layout,
        not overlapping ``x``.  Overwritten.
    num_threads : int, optional
        As for :func:`get_workspace_size`.

    Returns
    -------
    workspace_size : int
    executor : Executor

    Raises
    ------
    NullArgumentError
        (161001) ``x``, ``output_size`` or ``out`` is None.
    InvalidArgumentError
        (161002) any rule of the contract is broken; nothing is written.

    Notes
    -----
    The forward runs the backward's kernel with the per-axis tables read the
    other way (``docs/design.md``): the workspace is laid out as described
    for :func:`get_workspace_size`, with ``x`` in the role of ``grad_out``.
    """
    call = check(FORWARD, x, out, output_size, None, align_corners,
                 (scales_d, scales_h, scales_w))
    executor = Executor(call, num_threads)
    return executor.workspace_size, executor


def alloc_workspace(workspace_size):
    """Allocate a workspace: a cache-line (64-byte) aligned, writable ``uint8`` array.

    Parameters
    ----------
    workspace_size : int
        Bytes, as returned by :func:`get_workspace_size`.

    Returns
    -------
    ndarray of uint8, shape (workspace_size,)
        Uninitialised: the kernels never read what they did not write.

    Raises
    ------
    InvalidArgumentError
        (161002) ``workspace_size`` is not an integer, or is negative.
    InternalError
        (561000) the memory could not be allocated.
    """
    return aligned_bytes(workspace_size_argument(workspace_size))


def execute(workspace, workspace_size, executor, stream=None):
    """Phase two: run an executor (``aclnnUpsampleTrilinear3dBackward``).

    Parameters
    ----------
    workspace : buffer or None
        At least ``workspace_size`` writable bytes, for example from
        :func:`alloc_workspace`; None only when the size is 0.
    workspace_size : int
        The size phase one returned (or more).
    executor : Executor
        From :func:`get_workspace_size`.
    stream : Stream, optional
        None runs now and returns when ``grad_input`` is written.  A
        :class:`Stream` enqueues the run and returns at once; call
        ``stream.synchronize()`` before reading ``grad_input``.

    Raises
    ------
    NullArgumentError
        (161001) ``executor`` is None, or ``workspace`` is None but needed.
    InvalidArgumentError
        (161002) ``executor`` is not an Executor, ``stream`` not a Stream,
        ``workspace_size`` not an integer, or ``workspace`` not a buffer of
        plain memory (an object array, for instance).
    ExecutionError
        (361001) the workspace is too small, read-only or overlaps an array;
        the executor was consumed or destroyed, or is running right now; the
        stream is closed.  A launch that fails consumes nothing.
    """
    if executor is None:
        raise NullArgumentError("executor must not be None")
    if not isinstance(executor, Executor):
        raise InvalidArgumentError(
            f"executor must be an Executor from get_workspace_size, got {type(executor).__name__}"
        )
    from ._stream import Stream

    if stream is not None and not isinstance(stream, Stream):
        raise InvalidArgumentError(f"stream must be a Stream or None, got {type(stream).__name__}")
    if stream is None:
        executor._execute_now(workspace, workspace_size)
    else:
        executor._enqueue(workspace, workspace_size, stream._submit)

"""A CPU stand-in for ``aclrtStream``: an in-order queue run by one worker thread."""

import collections
import threading
import weakref

from ._core import _fork
from ._core._status import ExecutionError

# Streams alive in this process.  A forked child has none of the parent's
# threads, so each stream there starts afresh: a new worker on the next
# launch, and the runs that were still queued in the parent (they run there,
# not here) reported once by the child's next synchronize().
_live = weakref.WeakSet()


@_fork.at_child
def _after_fork_in_child():
    for stream in list(_live):
        old = stream._q
        stream._q = _Queue()
        stream._q.lost_at_fork = len(old.jobs) + old.busy
        stream._q.closed = old.closed
        stream._worker = None


class _Queue:
    """The state a stream's worker thread shares with it.

    Kept apart from :class:`Stream` so that the worker holds no reference to
    the stream: an abandoned stream is collected and its worker exits.
    """

    def __init__(self):
        self.cond = threading.Condition()
        self.jobs = collections.deque()
        self.busy = False
        self.errors = []
        self.closed = False
        self.lost_at_fork = 0

    def work(self):
        while True:
            with self.cond:
                while not self.jobs and not self.closed:
                    self.cond.wait()
                if not self.jobs:
                    return
                job = self.jobs.popleft()
                self.busy = True
            try:
                job()
            except BaseException as exc:  # noqa: BLE001 - reported by synchronize()
                with self.cond:
                    self.errors.append(exc)
            finally:
                with self.cond:
                    self.busy = False
                    self.cond.notify_all()


class Stream:
    """An in-order work queue, the CPU counterpart of an ``aclrtStream``.

    ``execute(..., stream=s)`` enqueues a run and returns at once; runs happen
    one after another, in launch order, on the stream's worker thread (each
    kernel still uses its OpenMP team).  An error raised by a run is kept
    until :meth:`synchronize`, which waits for all work and raises the first
    one.  A stream is a context manager: leaving the block synchronizes and
    closes it.

    Examples
    --------
    >>> import trilinear_bwd as tb
    >>> with tb.Stream() as s:                              # doctest: +SKIP
    ...     tb.execute(workspace, size, executor, stream=s)
    ...     s.synchronize()          # grad_input is ready from here on
    """

    def __init__(self):
        self._q = _Queue()
        self._worker = None
        _live.add(self)

    def __reduce_ex__(self, protocol):
        # A copy would share the queue and its worker, and close them when
        # either copy is collected.
        raise ExecutionError("a Stream cannot be copied or pickled; create a new one")

    def __repr__(self):
        q = self._q
        with q.cond:
            state = "closed" if q.closed else f"{len(q.jobs) + q.busy} pending"
        return f"<trilinear_bwd.Stream {state}>"

    def _submit(self, job):
        q = self._q
        with q.cond:
            if q.closed:
                raise ExecutionError("stream is closed")
            q.jobs.append(job)
            if self._worker is None:
                self._worker = threading.Thread(
                    target=q.work, name="trilinear_bwd-stream", daemon=True
                )
                self._worker.start()
            q.cond.notify_all()

    def synchronize(self):
        """Wait until every enqueued run has finished (``aclrtSynchronizeStream``).

        Raises
        ------
        AclnnError
            The first error a run raised since the previous synchronize; later
            ones from the same interval are dropped.
        """
        q = self._q
        with q.cond:
            while q.jobs or q.busy:
                q.cond.wait()
            errors, q.errors = q.errors, []
            lost, q.lost_at_fork = q.lost_at_fork, 0
        if lost:
            raise ExecutionError(
                f"{lost} run(s) launched on this stream before fork() were still pending; "
                "they run in the parent process, not in this child"
            )
        if errors:
            raise errors[0]

    def close(self):
        """Synchronize, then stop the worker; later launches raise 361001."""
        try:
            self.synchronize()
        finally:
            with self._q.cond:
                self._q.closed = True
                self._q.cond.notify_all()
            if self._worker is not None:
                self._worker.join()

    def __del__(self):
        q = getattr(self, "_q", None)
        if q is not None:
            with q.cond:
                q.closed = True
                q.cond.notify_all()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            try:
                self.close()
            except Exception:  # noqa: BLE001 - do not mask the error in flight
                pass
        return False

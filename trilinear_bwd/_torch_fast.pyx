"""The per-geometry fast path of ``trilinear_bwd.torch``, compiled.

A training loop calls one geometry over and over.  The first call of a
geometry goes the careful way (every rule of the contract, a plan) in
``trilinear_bwd.torch``; a :class:`Geometry` keeps what it established.  A
later call with the same metadata -- the key :class:`FastPath` builds from the
tensor's shape, strides and dtype, the sizes, ``align_corners``, the scales,
the team size asked for and the kernel variant, never an address -- finds
it, checks what may differ between tensors of the same metadata (the
addresses), and runs the kernel's C entry point on the tensor's raw data
pointer into a fresh tensor.  Between the dispatcher's call and the kernel
there are then only PyTorch's own calls (the metadata, ``data_ptr``, the
allocation): a tiny call's kernel takes about as long as the Python that
used to surround it (``docs/performance.md``, "The tiny forward's call").

PyTorch is not a build dependency: the tensor functions used here are
handed over by ``trilinear_bwd.torch``.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport uintptr_t

from trilinear_bwd._kernel_plan cimport KernelPlan, RunTeam

# A geometry whose workspace is at most this many bytes keeps one of its own
# (a few rows of a tiny call), which saves the call of ``scratch`` on every
# run; with at most ``trilinear_bwd.torch.GEOMETRY_CACHE_SIZE`` geometries
# kept, a bounded amount in all.
OWN_WORKSPACE_BYTES = 16 * 2**10


cdef class Geometry:
    """What the first call of a geometry established, for the calls after it.

    Parameters
    ----------
    kernel_plan : trilinear_bwd._kernel_plan.KernelPlan
        The geometry's plan (``plan.kernel`` of ``_plan.planned``).
    run_team : int
        The address of the kernel variant's C entry point (its ``RUN_TEAM``).
    shape, strides : tuple of int
        The result's, in elements.
    itemsize : int
        Bytes per element of the source and the result (both operators keep
        the dtype).
    threads : int
        The team size, fixed with the geometry.
    workspace_size : int
        Bytes of scratch workspace the kernel needs.
    allocate : callable
        ``allocate(*allocate_args)`` returns a fresh, uninitialised CPU
        tensor of the result's shape, strides and dtype.
    allocate_args : tuple
    scratch : callable
        ``scratch(size)`` returns ``(buffer, address)``: this thread's
        workspace (``_executor.scratch_workspace``).
    safe_threads : callable
        ``safe_threads(threads)``: the team a run may start now
        (``_executor._fork_safe_threads``; one after a fork that GNU
        libgomp cannot survive).

    Notes
    -----
    A geometry whose workspace is at most ``OWN_WORKSPACE_BYTES`` keeps a
    workspace of its own, used by one run at a time: a run that finds it in
    use (another thread's run of the same geometry) takes ``scratch``'s.  A
    child forked while another thread ran the geometry finds it in use for
    good and always takes ``scratch``'s: slower, never wrong.

    Attributes
    ----------
    shape, strides, itemsize, threads, workspace_size
        As given.
    """

    cdef readonly tuple shape
    cdef readonly tuple strides
    cdef readonly Py_ssize_t itemsize
    cdef readonly int threads
    cdef readonly Py_ssize_t workspace_size
    cdef KernelPlan _plan
    cdef RunTeam _run
    cdef object _allocate
    cdef tuple _allocate_args
    cdef object _scratch
    cdef object _safe_threads
    cdef char* _own             # the geometry's own workspace, or NULL
    cdef bint _own_busy         # a run is using _own (read and set with the GIL held)

    # Filled once, in __cinit__: calling __init__ again (a no-op) cannot swap
    # the plan or free the workspace under a run in another thread.
    def __cinit__(self, KernelPlan kernel_plan not None, uintptr_t run_team, tuple shape,
                 tuple strides, Py_ssize_t itemsize, int threads, Py_ssize_t workspace_size,
                 allocate, tuple allocate_args, scratch, safe_threads):
        if run_team == 0 or itemsize <= 0 or threads < 1 or workspace_size < 0:
            raise ValueError("Geometry: a null entry point, an item size, team or "
                             "workspace size out of range")
        self._plan = kernel_plan
        self._run = <RunTeam> run_team
        self.shape = shape
        self.strides = strides
        self.itemsize = itemsize
        self.threads = threads
        self.workspace_size = workspace_size
        self._allocate = allocate
        self._allocate_args = allocate_args
        self._scratch = scratch
        self._safe_threads = safe_threads
        if 0 < workspace_size <= OWN_WORKSPACE_BYTES:
            self._own = <char*> PyMem_Malloc(workspace_size)
            if self._own == NULL:
                raise MemoryError()

    def __dealloc__(self):
        PyMem_Free(self._own)

    def fresh(self, source):
        """The kernel on ``source``'s data into a fresh result; None if a fact does not hold.

        ``FastPath`` calls it without a Python call (``_fresh``).

        Parameters
        ----------
        source : torch.Tensor
            A tensor of the geometry's metadata, not lazy (a negation,
            conjugation or zero tensor is resolved by the caller).

        Returns
        -------
        torch.Tensor or None
            The result; None when ``source`` has no storage (fake,
            functional) or either address is misaligned, for the careful
            path to take.
        """
        return self._fresh(source)

    cdef object _fresh(self, source):
        cdef uintptr_t address, target, workspace
        cdef int n_threads = self.threads
        try:
            address = source.data_ptr()
        except RuntimeError:
            return None
        if address == 0 or address % <uintptr_t> self.itemsize:
            return None
        result = self._allocate(*self._allocate_args)
        target = result.data_ptr()
        if target % <uintptr_t> self.itemsize:
            return None
        if n_threads > 1:
            n_threads = self._safe_threads(n_threads)
        if self._own != NULL and not self._own_busy:
            self._own_busy = True
            with nogil:
                self._run(&self._plan.p, <const char*> address, <char*> target, self._own,
                          n_threads)
            self._own_busy = False
            return result
        buf, workspace = self._scratch(self.workspace_size)
        with nogil:
            self._run(&self._plan.p, <const char*> address, <char*> target, <char*> workspace,
                      n_threads)
        del buf   # held until the kernel returned
        return result


cdef class FastPath:
    """The CPU kernels' hot path: key, look-up, and the remembered geometry's run.

    Parameters
    ----------
    geometries : dict
        Key -> :class:`Geometry` (or the cold paths' marker of a geometry
        the contract refuses); filled by the cold paths, which call
        :meth:`forget` whenever they change it.
    counts : dict
        ``trilinear_bwd.torch``'s call counts (``"forward"``, ``"kernel"``).
    threads : callable
        ``threads(None)``: the team size asked for now
        (``_native.effective_n_threads``).
    variant : callable
        ``variant()``: the kernel module in use (``_dispatch.kernel_module``).
    forward_cold, backward_cold : callable
        Called with the key, what the look-up found and the operator's
        arguments when the hot path cannot finish a call (a first call, a
        refused geometry, an address the geometry cannot take).

    Notes
    -----
    Its tensors are never lazy: the CPU kernels get them from the
    dispatcher, whose Negative, Conjugate and ZeroTensor fallbacks (and the
    custom operators' Autograd kernel, which calls the kernel straight only
    when CPU is the next key) resolve those states first.
    """

    cdef dict _geometries
    cdef dict _counts
    cdef object _threads
    cdef object _variant
    cdef object _forward_cold
    cdef object _backward_cold
    # The last geometry each operator found, as (key, geometry): a loop
    # calling one geometry compares its key with the last one's instead of
    # hashing it (the hash of a key of tensor metadata costs more than the
    # comparison).  One tuple, so a thread never sees one key's geometry
    # under another key.  Only a geometry ``geometries`` holds under that
    # key: whoever changes ``geometries`` calls :meth:`forget`.
    cdef tuple _last_forward
    cdef tuple _last_backward

    def __init__(self, dict geometries not None, dict counts not None, threads, variant,
                 forward_cold, backward_cold):
        self._geometries = geometries
        self._counts = counts
        self._threads = threads
        self._variant = variant
        self._forward_cold = forward_cold
        self._backward_cold = backward_cold
        self._last_forward = self._last_backward = (None, None)

    def forget(self):
        """Drop the last hits; call whenever ``geometries`` loses or changes an entry."""
        self._last_forward = self._last_backward = (None, None)

    cdef object _look_up(self, tuple key, bint forward):
        # What the cache holds under key: the last hit's geometry if key is its key.
        last = self._last_forward if forward else self._last_backward
        if key == last[0]:
            return last[1]
        found = self._geometries.get(key)
        if type(found) is Geometry:
            if forward:
                self._last_forward = (key, found)
            else:
                self._last_backward = (key, found)
        return found

    def forward(self, x, output_size, align_corners, scales_d, scales_h, scales_w):
        """``aten::upsample_trilinear3d``'s arguments in, a fresh result out.

        Parameters
        ----------
        x : torch.Tensor
        output_size : sequence of 3 int
        align_corners : bool
        scales_d, scales_h, scales_w : float or None

        Returns
        -------
        torch.Tensor
        """
        key = ("f", x.shape, x.stride(), x.dtype, tuple(output_size), align_corners, scales_d,
               scales_h, scales_w, self._threads(None), self._variant())
        found = self._look_up(key, True)
        if type(found) is Geometry:
            out = (<Geometry> found)._fresh(x)
            if out is not None:
                self._counts["forward"] += 1
                return out
        return self._forward_cold(key, found, x, output_size, align_corners, scales_d,
                                  scales_h, scales_w)

    def backward(self, grad_output, output_size, input_size, align_corners, scales_d,
                 scales_h, scales_w):
        """``aten::upsample_trilinear3d_backward``'s arguments in, a fresh result out.

        Parameters
        ----------
        grad_output : torch.Tensor
        output_size : sequence of 3 int
        input_size : sequence of 5 int
        align_corners : bool
        scales_d, scales_h, scales_w : float or None

        Returns
        -------
        torch.Tensor
        """
        key = ("b", grad_output.shape, grad_output.stride(), grad_output.dtype,
               tuple(output_size), tuple(input_size), align_corners, scales_d, scales_h,
               scales_w, self._threads(None), self._variant())
        found = self._look_up(key, False)
        if type(found) is Geometry:
            out = (<Geometry> found)._fresh(grad_output)
            if out is not None:
                self._counts["kernel"] += 1
                return out
        return self._backward_cold(key, found, grad_output, output_size, input_size,
                                   align_corners, scales_d, scales_h, scales_w)

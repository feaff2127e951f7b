"""The per-geometry fast path of ``trilinear_bwd.torch``, compiled.

A training loop calls one geometry over and over.  The first call of a
geometry goes the careful way (every rule of the contract, a plan: the
cold path of ``_cache``), which keeps a :class:`Geometry`: the core's
runner for the call (``trilinear_bwd._core._runner``, the one seam every front
end runs the kernel through) and the result's metadata.  A later call with
the same :func:`key` -- the tensor's shape, strides and dtype, the sizes,
``align_corners``, the scales, the team size asked for and the kernel
variant, never an address -- finds it, checks what may differ between
tensors of the same metadata (the addresses), and runs the kernel on the
tensor's raw data pointer into a fresh tensor.  Between the dispatcher's call
and the kernel there are then only PyTorch's own calls (the metadata,
``data_ptr``, the allocation) (``docs/design.md``, "Per-call cost").

PyTorch is not a build dependency: the tensor functions used here are
handed over by the Python side.
"""

from libc.stdint cimport uintptr_t

from trilinear_bwd._core._runner cimport Runner


cpdef tuple key(str code, tensor, output_size, input_size, align_corners, scales_d, scales_h,
                scales_w, layout, num_threads, threads, variant):
    """The key a call's geometry is remembered under: the one place a key is made.

    Parameters
    ----------
    code : str
        Who remembers it: ``"f"`` and ``"b"`` the operators' kernels (aten's
        arguments), ``"B"`` the public backward (which has ``layout`` and
        ``num_threads`` too).
    tensor : torch.Tensor
        The source: its shape, strides and dtype.
    output_size : sequence of int
    input_size : tuple of int or None
        The backward's; None for the forward.
    align_corners : bool
    scales_d, scales_h, scales_w : float or None
    layout : torch.memory_format or None
        The result's, where the caller chose it.
    num_threads : int or None
        As the caller passed it.
    threads : int
        The team size it asks for now (``_threads.effective``).
    variant : module
        The kernel variant in use (``_runner.variant``).

    Returns
    -------
    tuple
        Metadata only: never an address.
    """
    return (code, tensor.shape, tensor.stride(), tensor.dtype, tuple(output_size), input_size,
            align_corners, scales_d, scales_h, scales_w, layout, num_threads, threads, variant)


cdef class Geometry:
    """What the first call of a geometry established, for the calls after it.

    Parameters
    ----------
    runner : trilinear_bwd._core._runner.Runner
        The call's runner: its plan, kernel and workspace.
    shape, strides : tuple of int
        The result's, in elements.
    itemsize : int
        Bytes per element of the source and the result (both operators keep
        the dtype).
    threads : int
        The team size, fixed with the geometry (its key holds the team
        asked for).
    allocate : callable
        ``allocate(*allocate_args)`` returns a fresh, uninitialised CPU
        tensor of the result's shape, strides and dtype.
    allocate_args : tuple

    Attributes
    ----------
    shape, strides, itemsize, threads
        As given.
    workspace_size : int
        The runner's.
    """

    cdef readonly tuple shape
    cdef readonly tuple strides
    cdef readonly Py_ssize_t itemsize
    cdef readonly int threads
    cdef Runner _runner
    cdef object _allocate
    cdef tuple _allocate_args

    # Filled once, in __cinit__: calling __init__ again (a no-op) cannot swap
    # the runner under a run in another thread.
    def __cinit__(self, Runner runner not None, tuple shape, tuple strides, Py_ssize_t itemsize,
                  int threads, allocate, tuple allocate_args):
        if itemsize <= 0 or threads < 1:
            raise ValueError("Geometry: an item size or team out of range")
        self._runner = runner
        self.shape = shape
        self.strides = strides
        self.itemsize = itemsize
        self.threads = threads
        self._allocate = allocate
        self._allocate_args = allocate_args

    @property
    def workspace_size(self):
        return self._runner.workspace_size

    def fresh(self, source):
        """The kernel on ``source``'s data into a fresh result; None if a fact does not hold.

        :class:`FastPath` calls it without a Python call (``_fresh``).

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
        cdef uintptr_t address, target
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
        self._runner.run_raw(address, target, self.threads)
        return result


cdef class FastPath:
    """The CPU kernels' hot path: key, look-up, and the remembered geometry's run.

    Parameters
    ----------
    geometries : dict
        Key -> :class:`Geometry` (or the cold path's marker of a geometry
        the contract refuses); filled by the cold path, which calls
        :meth:`forget` whenever it changes it.
    counts : dict
        ``trilinear_bwd.torch``'s call counts.
    done : tuple of 2 str
        The counts a hot run of the forward and of the backward adds one to.
    threads : callable
        ``threads(None)``: the team size asked for now (``_threads.effective``).
    variant : callable
        ``variant()``: the kernel module in use (``_runner.variant``).
    cold : callable
        ``cold(code, key, found, tensor, output_size, input_size,
        align_corners, scales_d, scales_h, scales_w)``, called when the hot
        path cannot finish a call (a first call, a refused geometry, an
        address the geometry cannot take).

    Notes
    -----
    Its tensors are never lazy: the CPU kernels get them from the
    dispatcher, whose Negative, Conjugate and ZeroTensor fallbacks (and the
    custom operators' Autograd kernel, which calls the kernel straight only
    when CPU is the next key) resolve those states first.
    """

    cdef dict _geometries
    cdef dict _counts
    cdef str _forward_done
    cdef str _backward_done
    cdef object _threads
    cdef object _variant
    cdef object _cold
    # The last geometry each operator found, as (key, geometry): a loop
    # calling one geometry compares its key with the last one's instead of
    # hashing it (the hash of a key of tensor metadata costs more than the
    # comparison).  One tuple, so a thread never sees one key's geometry
    # under another key.  Only a geometry ``geometries`` holds under that
    # key: whoever changes ``geometries`` calls :meth:`forget`.
    cdef tuple _last_forward
    cdef tuple _last_backward

    def __init__(self, dict geometries not None, dict counts not None, tuple done, threads,
                 variant, cold):
        self._geometries = geometries
        self._counts = counts
        self._forward_done, self._backward_done = done
        self._threads = threads
        self._variant = variant
        self._cold = cold
        self._last_forward = self._last_backward = (None, None)

    def forget(self):
        """Drop the last hits; call whenever ``geometries`` loses or changes an entry."""
        self._last_forward = self._last_backward = (None, None)

    cdef object _call(self, str code, tensor, output_size, input_size, align_corners,
                      scales_d, scales_h, scales_w):
        # Both operators' hot path: the forward's input_size is None.
        cdef bint forward = input_size is None
        key_ = key(code, tensor, output_size, input_size, align_corners, scales_d, scales_h,
                   scales_w, None, None, self._threads(None), self._variant())
        last = self._last_forward if forward else self._last_backward
        if key_ == last[0]:
            found = last[1]
        else:
            found = self._geometries.get(key_)
            if type(found) is Geometry:
                if forward:
                    self._last_forward = (key_, found)
                else:
                    self._last_backward = (key_, found)
        if type(found) is Geometry:
            out = (<Geometry> found)._fresh(tensor)
            if out is not None:
                self._counts[self._forward_done if forward else self._backward_done] += 1
                return out
        return self._cold(code, key_, found, tensor, output_size, input_size, align_corners,
                          scales_d, scales_h, scales_w)

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
        return self._call("f", x, output_size, None, align_corners, scales_d, scales_h,
                          scales_w)

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
        return self._call("b", grad_output, output_size, tuple(input_size), align_corners,
                          scales_d, scales_h, scales_w)

"""The seam's runner, for compiled callers (``_runner.pyx``)."""

from libc.stdint cimport uintptr_t

from trilinear_bwd._kernels._kernel_plan cimport KernelPlan, RunTeam


cdef class Runner:
    cdef readonly object plan
    cdef readonly object variant
    cdef readonly Py_ssize_t workspace_size
    cdef readonly int requested
    cdef readonly bint follow_default
    cdef readonly Py_ssize_t nbytes
    # The variant's run with the plan bound (counts the team); public so that
    # a test can stand in for it and see the addresses each run gets.
    cdef public object _kernel
    cdef KernelPlan _kernel_plan
    cdef RunTeam _run_team       # the variant's C entry point (RUN_TEAM)
    cdef char* _own              # a workspace of the runner's own, or NULL
    cdef bint _own_busy          # a raw run is using _own (read and set with the GIL held)

    cdef int run_raw(self, uintptr_t source, uintptr_t target, int threads) except -1

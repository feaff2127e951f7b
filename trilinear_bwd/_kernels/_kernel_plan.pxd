# The kernel's plan: the C structs of _kernel_plan.h for Cython, and the one
# typed object that holds them.
#
# ``_plan.make_plan`` decides every value of a geometry and builds one
# ``KernelPlan`` (``_kernel_plan.pyx``), which fills ``Problem`` once; each
# kernel variant's ``run`` reads ``plan.p`` and nothing else of Python's.
# Built with the baseline flags and shared by every variant: a struct's
# layout does not depend on the instruction set.

from libc.stdint cimport int8_t, int32_t, int64_t


cdef extern from "_kernel_plan.h" nogil:
    # The structs as _kernel_plan.h declares them (what each field holds is
    # said there): Axis, Row, Volume, Problem are tb_axis, tb_row, tb_volume,
    # tb_problem in C.
    ctypedef struct Axis "tb_axis":
        int64_t n_target
        int64_t terms
        const int64_t* ptr
        const int64_t* src
        const void* weight
        int64_t width
        const int32_t* padded_src
        const void* padded_weight
        const int32_t* padded_rel
        const int32_t* window
        const int8_t* mode
        const int32_t* block_window

    ctypedef struct Row "tb_row":
        int64_t n_outer
        int64_t s_outer
        int64_t n_inner
        int64_t s_inner

    ctypedef struct Volume "tb_volume":
        int64_t s_b1
        int64_t s_b2
        int64_t s_d
        int64_t s_h
        Row row

    ctypedef struct Problem "tb_problem":
        int dtype
        int read_mode
        bint plane_run
        bint stream
        bint out_direct
        int64_t nb2
        int64_t n_items
        int64_t planes_per_item
        bint whole_planes
        int64_t source_h
        int64_t ring
        int64_t target_d
        int64_t target_h
        int64_t v
        int64_t L
        Volume source
        Volume target
        Axis ax_d
        Axis ax_h
        Axis ax_h_ring
        Axis ax_w
        int64_t h_stride
        int64_t off_acch
        int64_t off_conv
        int64_t off_out
        int64_t off_narrow
        int64_t slot_bytes
        int64_t w_rows


# Every variant's kernel as a C function (_kernels.pxi, ``_run_team``): the
# plan's items computed by a team of n_threads, the calling thread alone for
# one; its address is the variant's ``RUN_TEAM``.
ctypedef void (*RunTeam)(const Problem* p, const char* source, char* target,
                         char* workspace, int n_threads) noexcept nogil


cdef class KernelPlan:
    cdef Problem p
    cdef readonly tuple tables     # the three AxisTable objects (D, H, W)
    cdef list _keep                # arrays the struct points into that the tables do not hold

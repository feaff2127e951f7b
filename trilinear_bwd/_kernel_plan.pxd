# The kernel's plan, as C structs and the one typed object that holds them.
#
# ``_plan.make_plan`` decides every value of a geometry and builds one
# ``KernelPlan`` (``_kernel_plan.pyx``), which fills ``Problem`` once; each
# kernel variant's ``run`` reads ``plan.p`` and nothing else of Python's.
# Built with the baseline flags and shared by every variant: a struct's
# layout does not depend on the instruction set.

from libc.stdint cimport int8_t, int32_t, int64_t


ctypedef struct Axis:
    # One axis in gather form: target point i receives the terms
    # ptr[i] <= t < ptr[i+1], each ``weight[t] * source[src[t]]``, with src
    # increasing (the backward's tables: at an index where x0 == x1, the l0
    # term before l1; the forward's: l0 then l1 of each output point).
    int64_t n_in
    int64_t terms          # terms per point where every point has as many, else 0
    const int64_t* ptr
    const int64_t* src
    const void* weight
    # The same terms padded to ``width`` per input point and blocked by 8
    # points, for the channels-first W pass (see _w_gather.h).
    int64_t width
    const int32_t* padded_src
    const void* padded_weight
    const int32_t* padded_rel
    const int32_t* window
    const int8_t* mode
    const int32_t* block_window


ctypedef struct Row:
    # One row of a (D, H) plane: n_outer groups of n_inner elements, with
    # element strides s_outer and s_inner.  Rows that are one contiguous run
    # are described with n_outer == 1.
    int64_t n_outer
    int64_t s_outer
    int64_t n_inner
    int64_t s_inner


ctypedef struct Volume:
    # Element strides of an array: slice b = (b1, b2), then D and H; ``row``
    # covers W and, in channels-last mode, C.
    int64_t s_b1
    int64_t s_b2
    int64_t s_d
    int64_t s_h
    Row row


ctypedef struct Problem:
    int dtype              # DT_* of both arrays
    int read_mode          # READ_*: how the D pass reads source rows
    bint plane_run         # rows are read in place and each source plane is one run
    bint stream            # target rows are unit-stride and written with streaming stores
    bint out_direct        # the W pass writes target rows in place (accumulation type,
                           # unit stride), with streaming stores if ``stream``
    int64_t nb2            # slice b is (b // nb2, b % nb2)
    int64_t n_items        # slices * items per slice: the units of parallel work
    int64_t planes_per_item  # input planes an item computes: 1, or 2 in channels-last mode
    bint whole_planes      # channels-last planes small enough to sum over D, then H,
                           # then W whole, as channels-first ones are (see _plan.py)
    int64_t oh
    int64_t ring           # rows of acc_d: oh, or the channels-last ring (see _plan.py)
    const int64_t* ring_src  # the H table's src, modulo ring: the acc_d row of each term
    int64_t id
    int64_t ih
    int64_t v              # elements per W position: C in channels-last mode, else 1
    int64_t L              # elements in one source row: oW * v
    Volume source
    Volume target
    Axis ax_d
    Axis ax_h
    Axis ax_w
    int64_t h_stride       # elements between rows of acc_h: L, a sentinel, 32 spare
    int64_t off_acch       # element offsets of the scratch buffers in a thread's slot
    int64_t off_conv
    int64_t off_out
    int64_t off_narrow     # byte offset: a target row in its 16-bit storage type
    int64_t slot_bytes     # bytes per thread slot, a multiple of 64
    int64_t w_rows         # channels-first rows per W pass call (see _plan.py)


# Every variant's kernel as a C function (_kernels.pxi, ``_run_team``): the
# plan's items computed by a team of n_threads, the calling thread alone for
# one; its address is the variant's ``RUN_TEAM``.
ctypedef void (*RunTeam)(const Problem* p, const char* source, char* target,
                         char* workspace, int n_threads) noexcept nogil


cdef class KernelPlan:
    cdef Problem p
    cdef readonly tuple tables     # the three AxisTable objects (D, H, W)
    cdef list _keep                # arrays the struct points into that the tables do not hold

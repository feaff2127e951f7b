"""The kernel's plan as one typed object: the C ``Problem`` filled once, read by every variant."""

from libc.stdint cimport int64_t, uintptr_t

from trilinear_bwd._kernels._constants_h cimport TB_MAX_PLANES_PER_ITEM

import numpy as np


cdef object _address(object arr, object dtype, list keep):
    # The array as the struct's field type needs it: the table's own array
    # (AxisTable holds C-contiguous arrays of these dtypes), or a copy kept.
    a = np.ascontiguousarray(arr, dtype=dtype)
    if a is not arr:
        keep.append(a)
    return <uintptr_t> a.ctypes.data


cdef void _fill_axis(Axis* ax, object t, list keep) except *:
    ax.n_target = t.ptr.shape[0] - 1
    counts = np.diff(t.ptr)
    ax.terms = counts[0] if counts.size and (counts == counts[0]).all() else 0
    ax.ptr = <const int64_t*> <uintptr_t> _address(t.ptr, np.int64, keep)
    ax.src = <const int64_t*> <uintptr_t> _address(t.src, np.int64, keep)
    ax.weight = <const void*> <uintptr_t> _address(t.weight, t.weight.dtype, keep)
    ax.width = t.width
    ax.padded_src = <const int32_t*> <uintptr_t> _address(t.padded_src, np.int32, keep)
    ax.padded_weight = <const void*> <uintptr_t> _address(t.padded_weight,
                                                          t.padded_weight.dtype, keep)
    ax.padded_rel = <const int32_t*> <uintptr_t> _address(t.padded_rel, np.int32, keep)
    ax.window = <const int32_t*> <uintptr_t> _address(t.window, np.int32, keep)
    ax.mode = <const int8_t*> <uintptr_t> _address(t.mode, np.int8, keep)
    ax.block_window = <const int32_t*> <uintptr_t> _address(t.block_window, np.int32, keep)


cdef void _fill_volume(Volume* vol, tuple s) except *:
    vol.s_b1, vol.s_b2, vol.s_d, vol.s_h = s[0], s[1], s[2], s[3]
    vol.row.n_outer, vol.row.s_outer, vol.row.n_inner, vol.row.s_inner = s[4]


cdef class KernelPlan:
    """A geometry's plan, frozen into the C struct the kernel reads.

    Built once per geometry by ``trilinear_bwd._core._plan.make_plan`` from values
    it has already decided; every keyword is the ``Problem`` field of the
    same name (``_kernel_plan.pxd`` says what each holds), except
    ``source``/``target`` (each array's strides, ``_plan._volume``) and
    ``tables`` (the D, H and W tables the core's ``_axis_table`` builds).
    It checks only what would be a plan/kernel mismatch.  It holds no address of any array but
    its tables', so one plan serves any number of calls, at once too, under
    any kernel variant (``trilinear_bwd._kernels.<variant>.run``).

    Attributes
    ----------
    tables : tuple of AxisTable
        The tables the struct points into, kept alive with it.
    """

    def __cinit__(self, *, int dtype, int read_mode, bint plane_run, bint stream,
                  bint out_direct, int64_t nb2, int64_t n_items, int64_t planes_per_item,
                  bint whole_planes, int64_t source_h, int64_t ring, int64_t target_d,
                  int64_t target_h, int64_t v, int64_t L,
                  tuple source, tuple target, tuple tables, int64_t h_stride,
                  int64_t off_acch, int64_t off_conv, int64_t off_out, int64_t off_narrow,
                  int64_t slot_bytes, int64_t w_rows):
        if not 1 <= planes_per_item <= TB_MAX_PLANES_PER_ITEM:
            raise ValueError(f"planes_per_item must be 1..{<int> TB_MAX_PLANES_PER_ITEM}, "
                             f"got {planes_per_item}")
        keep = []
        self.tables = tables
        self.p.dtype = dtype
        self.p.read_mode = read_mode
        self.p.plane_run = plane_run
        self.p.stream = stream
        self.p.out_direct = out_direct
        self.p.nb2 = nb2
        self.p.n_items = n_items
        self.p.planes_per_item = planes_per_item
        self.p.whole_planes = whole_planes
        self.p.source_h = source_h
        self.p.ring = ring
        self.p.target_d = target_d
        self.p.target_h = target_h
        self.p.v = v
        self.p.L = L
        _fill_volume(&self.p.source, source)
        _fill_volume(&self.p.target, target)
        _fill_axis(&self.p.ax_d, tables[0], keep)
        _fill_axis(&self.p.ax_h, tables[1], keep)
        _fill_axis(&self.p.ax_w, tables[2], keep)
        # The H table read from the channels-last ring: the same terms, each
        # src the row of acc_d that holds it.
        self.p.ax_h_ring = self.p.ax_h
        ring_src = np.ascontiguousarray(tables[1].src % ring, dtype=np.int64)
        self.p.ax_h_ring.src = <const int64_t*> <uintptr_t> ring_src.ctypes.data
        keep.append(ring_src)
        self._keep = keep
        # The slot's layout (_plan.py; what each field holds: _kernel_plan.h).
        (self.p.h_stride, self.p.off_acch, self.p.off_conv, self.p.off_out,
         self.p.off_narrow) = (h_stride, off_acch, off_conv, off_out, off_narrow)
        self.p.slot_bytes = slot_bytes
        self.p.w_rows = w_rows

    @property
    def stream(self):
        """bool: whether the target is written with streaming stores."""
        return bool(self.p.stream)

    @property
    def planes_per_item(self):
        """int: input planes per work item (2 in channels-last mode where it balances)."""
        return self.p.planes_per_item

    @property
    def whole_planes(self):
        """bool: channels-last planes summed over each axis whole (small planes)."""
        return bool(self.p.whole_planes)

    @property
    def target_row(self):
        """``(n_outer, s_outer, n_inner, s_inner)``: one target row, in elements."""
        r = self.p.target.row
        return (r.n_outer, r.s_outer, r.n_inner, r.s_inner)

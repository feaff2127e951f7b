"""From a validated call to the kernel's plan: layout mode, strides, tables, workspace.

Layout modes
------------
The kernel sees each array as slices of ``(D, H, row)`` where a row is what
one (D, H) position holds:

* channels-first (NCDHW and most strided views): a slice per (n, c) and a row
  of W elements;
* channels-last (NDHWC, chosen when C is the innermost non-trivial axis of
  the source): a slice per n and a row of W x C elements, C innermost.

Either way the D and H passes run along contiguous rows and vectorise; only
the layout of the source decides the mode, and the target is written
through its own strides, whatever they are.

Workspace
---------
One slot per thread, each region starting on a 64-byte line, in the
accumulation type (float64, for every dtype: each result is rounded once):

* ``acc_d``: rows of source summed over D for the plane in progress: all
  of a source plane's rows in channels-first mode and for small channels-last planes
  (``WHOLE_PLANE_BYTES``); in channels-last mode otherwise, for each plane
  of the item, a ring of the few rows the H pass still needs (``ring``
  rows, see :func:`ring_rows`);
* ``acc_h``: the plane summed over H (a target plane's rows, each with room for the zero
  sentinel and 32 spare elements that the W gather reads past its end; one
  row in channels-last mode, where each row is reduced over W at once,
  unless the plane is small);
* ``conv``: two source rows converted to the accumulation type (only for
  rows that are not unit-stride; unit-stride float32/float16/bfloat16 rows
  are widened inside the D pass's axpy);
* ``out``: finished target rows before they are rounded and stored
  (absent when the W pass writes rows in place: unit-stride rows of
  float64, and channels-first rows of every dtype with a padded W table);
* ``narrow``: that row rounded to its dtype, when rows of a dtype other than
  float64 are streamed from ``out`` (channels-last float32 rows of large
  results; 16-bit rows never by default, see :func:`streamed`, but the
  kernel keeps the path, and the tests force it).

plus 64 bytes so that an unaligned workspace can be aligned inside.
"""

import collections
import functools
import threading
from dataclasses import dataclass

import numpy as np

from . import _fork
from ._arrays import is_channels_last
from ._constants import (
    DT_BFLOAT16,
    DT_FLOAT16,
    DT_FLOAT32,
    DT_FLOAT64,
    LINE,
    MAX_PLANES_PER_ITEM,
    READ_BFLOAT16,
    READ_CONVERT,
    READ_FLOAT16,
    READ_FLOAT32,
    READ_IN_PLACE,
    W_SPARE,
)
from .._kernels._kernel_plan import KernelPlan
from ._axis_table import axis_table

# A target of this many bytes or more is written with streaming stores
# (see _store.h and docs/design.md for the measurement behind the number).
STREAM_BYTES = 16 * 2**20
# ... but only float32/float64 rows of a multiple of this many bytes: the
# vector paths write such rows with streaming stores alone, where other
# rows end in ordinary stores to lines that streaming stores also write,
# which cost a multiple of the whole call (docs/design.md, "Streaming stores").
STREAM_ROW_BYTES = 32
# Input planes per channels-last work item (the most the kernel handles): a
# pair shares most of its source reads; four balance worse (docs/design.md,
# Decisions: channels-last-planes-per-item).
CHANNELS_LAST_PLANES_PER_ITEM = MAX_PLANES_PER_ITEM
# Channels-first rows per W pass call (each call sets the W table up once):
# all of the plane where the target is written in place; where it is
# streamed, few, since rows written block by block leave one line per row
# partly written, and more of those than the processor can combine at once
# cost more than the set-ups saved; where rows go through a buffer (strided
# rows, or no padded table for 16-bit storage), the buffer's rows.
W_ROWS_STREAMED = 4
W_ROWS_BUFFERED = 8
# A channels-last plane whose scratch (its D sums, H sums and a buffered
# target row) takes at most this many bytes, and whose source plane is one
# run, is summed over D, then H, then W whole, a call per pass, as a
# channels-first plane is: for small planes the calls per row cost more than
# the ring's locality saves (docs/design.md, Decisions: whole-channels-last-planes).
WHOLE_PLANE_BYTES = 128 * 2**10


def _round_up(nbytes):
    return -(-nbytes // LINE) * LINE


def _row(n_outer, s_outer, n_inner, s_inner):
    """Describe a row; fold it into one run where the strides allow."""
    if n_inner == 1:
        n_inner, s_inner, n_outer, s_outer = n_outer, s_outer, 1, 0
    if n_inner == 1:
        s_inner = 1
    if n_outer == 1:
        s_outer = 0
    elif s_outer == n_inner * s_inner:
        n_inner, n_outer, s_outer = n_inner * n_outer, 1, 0
    return (n_outer, s_outer, n_inner, s_inner)


def streamed(nbytes, row_bytes, itemsize):
    """Whether a target of unit-stride rows is written with streaming stores.

    Parameters
    ----------
    nbytes : int
        The target array's size.
    row_bytes : int
        Bytes per row (W, or W x C channels-last).
    itemsize : int
        Bytes per element: the 16-bit types are never streamed, since their
        rows would go through a rounding buffer and a streaming copy, which
        measured no faster than ordinary stores (docs/design.md,
        Decisions: no-streaming-16-bit).

    Returns
    -------
    bool
    """
    return nbytes >= STREAM_BYTES and itemsize >= 4 and row_bytes % STREAM_ROW_BYTES == 0


def ring_rows(ptr, src):
    """Rows of the D-summed ring that a channels-last plane needs.

    The channels-last kernel sums a source row over D only when the first
    H row that uses it comes up, and keeps it in slot ``y % ring`` of a ring.
    H row ``r`` uses rows ``src[ptr[r]]`` to ``src[ptr[r+1] - 1]``, and by
    then every row up to the highest any H row so far has used is summed;
    the ring must span from the lowest row ``r`` uses to that highest one,
    for every ``r``.  ``tests/test_kernel.py`` replays the schedule.

    Parameters
    ----------
    ptr, src : ndarray of int64
        The H axis table (see :func:`trilinear_bwd._core._axis_table.axis_table`).

    Returns
    -------
    int
        At least 1.
    """
    used = ptr[1:] > ptr[:-1]
    if not used.any():
        return 1
    low = src[ptr[:-1][used]]
    done = np.maximum.accumulate(src[ptr[1:][used] - 1])  # rows summed so far
    return max(1, int((done - low).max()) + 1)


def _volume(arr, channels_last):
    s = [st // arr.itemsize for st in arr.strides]
    n, c, d, h, w = arr.shape
    if channels_last:
        return (s[0], 0, s[2], s[3], _row(w, s[4], c, s[1]))
    return (s[0], s[1], s[2], s[3], _row(1, 0, w, s[4]))


@dataclass(frozen=True)
class Plan:
    """Everything phase two needs, decided at phase one.

    Attributes
    ----------
    kernel : trilinear_bwd._kernels._kernel_plan.KernelPlan
        The typed plan every kernel variant's ``run`` reads: the C struct,
        filled once.
    n_slots : int
        Thread slots in the workspace: the most threads a run may use.
    workspace_size : int
        Bytes of workspace a run needs.
    channels_last : bool
        The layout mode chosen from the source.
    """

    kernel: KernelPlan
    n_slots: int
    workspace_size: int
    channels_last: bool


def make_plan(call, n_threads):
    """Build the plan of a checked call for up to ``n_threads`` threads.

    Parameters
    ----------
    call : trilinear_bwd._core._operator.Call
    n_threads : int
        The team size the caller asked for (>= 1).

    Returns
    -------
    Plan
    """
    source, target = call.source, call.target
    n, c, _, source_h, source_w = source.shape
    _, _, target_d, target_h, target_w = target.shape
    acc = call.acc_dtype
    channels_last = is_channels_last(source)
    v = c if channels_last else 1
    length = source_w * v
    source_volume = _volume(source, channels_last)
    target_volume = _volume(target, channels_last)
    row = source_volume[4]
    if row[0] != 1 or row[3] != 1:
        read_mode = READ_CONVERT
    else:
        read_mode = {DT_FLOAT32: READ_FLOAT32, DT_FLOAT64: READ_IN_PLACE,
                     DT_FLOAT16: READ_FLOAT16, DT_BFLOAT16: READ_BFLOAT16}[call.dtype_code]
    plane_run = read_mode != READ_CONVERT and (source_volume[3] == length or source_h == 1)
    unit_rows = target_volume[4][0] == 1 and target_volume[4][3] == 1
    stream = unit_rows and streamed(target.nbytes, target_volume[4][2] * target.itemsize,
                                    target.itemsize)
    # Rows of the accumulation type (float64) are written in place by the W
    # pass; when streamed, only where it can issue the streaming stores
    # itself: the channels-first gather, and channels-last rows of a multiple
    # of 8 channels (_w_channels.h).  Other dtypes' rows are rounded once, from
    # a row buffer.
    wide = call.dtype_code == DT_FLOAT64
    out_direct = unit_rows and wide and (not stream or v == 1 or v % 8 == 0)

    # The kernel computes the target array (the backward's gradInput, the
    # forward's out) from the source (gradOut; self): only the tables say
    # which operator, and, for a block of a larger call, which window of the
    # whole axis.
    windows = call.window or (None, None, None)
    tables = [
        axis_table(n_in, n_out, call.align_corners, s, call.opmath_dtype, sentinel=sentinel,
                   forward=call.op.forward, window=window, storage=source.dtype)
        for n_in, n_out, s, sentinel, window in zip(
            call.input_size[2:], call.output_size, call.scales,
            (None, None, None if v > 1 else length), windows)
    ]
    # Channels-first rows of every dtype are rounded and written in place by
    # the padded gather too (_w_gather.h); the unpadded W pass needs the buffer.
    out_direct = out_direct or (unit_rows and v == 1 and tables[2].width > 0)
    # Each acc_h row keeps the zero sentinel of the padded W table and 32
    # spare elements for the windowed reads of _w_gather.h; rows start on a line.
    h_stride = _round_up((length + 1 + W_SPARE) * acc.itemsize) // acc.itemsize
    conv = 2 * length if read_mode == READ_CONVERT else 0
    # Channels-last reduces each H row over W at once: one acc_h row and a
    # ring of D sums suffice, except for planes small enough to take whole.
    row_out = 0 if out_direct else target_w * v
    whole = (v > 1 and plane_run
             and (source_h * length + target_h * h_stride + row_out) * acc.itemsize
             <= WHOLE_PLANE_BYTES)
    ring = ring_rows(tables[1].ptr, tables[1].src) if v > 1 and not whole else source_h
    # Channels-last items take two target planes row by row (see _kernels.pxi),
    # unless that would leave fewer than 4 items per thread to balance.
    slices = n if channels_last else n * c
    per_item = 1
    if v > 1 and slices * -(-target_d // CHANNELS_LAST_PLANES_PER_ITEM) >= 4 * n_threads:
        per_item = CHANNELS_LAST_PLANES_PER_ITEM
    if whole and out_direct:
        w_rows = target_h
    elif v > 1:
        w_rows = 1
    elif not out_direct:
        w_rows = min(target_h, W_ROWS_BUFFERED)
    else:
        w_rows = min(target_h, W_ROWS_STREAMED) if stream else target_h
    # A whole channels-last plane is done before the item's next one starts.
    sizes = [(1 if whole else per_item) * ring * length,
             (target_h if v == 1 or whole else 1) * h_stride, conv,
             0 if out_direct else w_rows * target_w * v]
    narrow_bytes = (target_w * v * target.itemsize
                    if stream and target.itemsize != acc.itemsize else 0)
    offsets, slot = [], 0
    for count in sizes:
        offsets.append(slot // acc.itemsize)
        slot += _round_up(count * acc.itemsize)
    offsets.append(slot)  # in bytes: the narrow row is not in the accumulation type
    slot += _round_up(narrow_bytes)

    n_items = slices * -(-target_d // per_item)
    n_slots = max(1, min(n_threads, n_items))
    workspace = n_slots * slot + LINE if n_items else 0
    kernel = KernelPlan(
        dtype=call.dtype_code, read_mode=read_mode, plane_run=plane_run, stream=stream,
        out_direct=out_direct, nb2=1 if channels_last else c, n_items=n_items,
        planes_per_item=per_item, whole_planes=whole, source_h=source_h, ring=ring,
        target_d=target_d, target_h=target_h, v=v, L=length,
        source=source_volume, target=target_volume, tables=tuple(tables),
        h_stride=h_stride, off_acch=offsets[1], off_conv=offsets[2], off_out=offsets[3],
        off_narrow=offsets[4], slot_bytes=slot, w_rows=w_rows,
    )
    return Plan(kernel, n_slots, workspace, channels_last)


# Plans of recent geometries, each with a variant's ``run`` bound to it: the
# second call with the same shapes, strides, dtype, sizes, flags, thread
# count and variant skips straight to the kernel.  A plan holds no addresses
# and a run only reads it, so one may serve any number of calls at once.
PLAN_CACHE_SIZE = 64
_plans = collections.OrderedDict()
_plans_lock = threading.Lock()
_fork.renew(globals(), "_plans_lock", threading.Lock)


def planned(call, n_threads, kernel_module):
    """Return ``(plan, kernel)`` for a checked call, from the cache when it can.

    A block of a larger call (``call.window``) is planned each time.

    Parameters
    ----------
    call : trilinear_bwd._core._operator.Call
    n_threads : int
        The team size the caller asked for (>= 1).
    kernel_module : module
        The kernel variant (``trilinear_bwd._core._dispatch.kernel_module()``).

    Returns
    -------
    plan : Plan
    kernel : callable
        ``kernel(source, target, workspace, n_threads)``: the variant's
        ``run`` with ``plan.kernel`` bound (addresses in, team size out).
    """
    if call.window:
        # A block of a larger call (trilinear_bwd.dask) is planned afresh:
        # its window is its own, so its plan and tables, kept, would pile up
        # on a Dask worker past the task that made them.
        plan = make_plan(call, n_threads)
        return plan, functools.partial(kernel_module.run, plan.kernel)
    source, target = call.source, call.target
    key = (call.op.name, source.shape, source.strides, source.dtype, target.shape,
           target.strides, call.output_size, call.align_corners, call.scales,
           n_threads, kernel_module)
    with _plans_lock:
        hit = _plans.get(key)
        if hit is not None:
            _plans.move_to_end(key)
            return hit
    plan = make_plan(call, n_threads)
    hit = (plan, functools.partial(kernel_module.run, plan.kernel))
    with _plans_lock:
        _plans[key] = hit
        if len(_plans) > PLAN_CACHE_SIZE:
            _plans.popitem(last=False)
    return hit


def clear_plans():
    """Forget every cached plan (tests that change a planning constant call it)."""
    with _plans_lock:
        _plans.clear()

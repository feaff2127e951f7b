"""The two operators, described once, and the one check of a call against their contract.

Both operators run the same kernel, which computes a *target* array from a
*source* array through per-axis tables: the backward's source is gradOut and
its target gradInput, the forward's are self and out.  What differs between
them is data, held by an :class:`Operator`: the names of the two arrays,
which sizes the caller gives (the backward's ``inputSize``; the forward's
input is its source's shape), the direction the tables are read, the
forward's rule that C > 0, and the words of the limits.

:func:`check` is the contract, for every front end (the one call, both
phases, ``aclnn``, ``torch``, the Dask graph) and both operators; what comes
out is a :class:`Call`, an immutable record of the checked call that
``_plan`` turns into the kernel's plan.  The kernels trust what they are
given, so everything that can be wrong with a call is found here, before any
memory is written.  Messages use the operator's (CANN) parameter names, name
the element the caller passed and the rule broken, and show the offending
value.
"""

import collections
import functools
import math
from dataclasses import dataclass

import numpy as np

from ._arrays import (
    as_array,
    check_aligned,
    check_dtype,
    data_address,
    dtype_info,
    has_internal_overlap,
    same_strides,
    imported,
)
from ._coerce import as_scale, element_name, int_tuple, invalid
from ._status import LimitError, NullArgumentError

# The kernel sums every dtype in float64, so that each result is its exact
# value rounded once to its dtype (docs/numerics.md, "One rounding").
_FLOAT64 = np.dtype(np.float64)

MAX_DIM = 2**20
MAX_BYTES = 60 * 2**30
MAX_PRODUCT = 2**31

# Which operator's rules a front end follows where PyTorch's and CANN's
# implementations differ (the scales; docs/operator.md, "Which layer follows
# which rule").  Every other rule is the same in both.
PYTORCH_RULES = "pytorch"
CANN_RULES = "cann"


@dataclass(frozen=True)
class Operator:
    """What one of the two operators is, as data.

    Attributes
    ----------
    name : str
        ``"backward"`` or ``"forward"`` (``Executor.op``).
    source, target : str
        CANN's names of the array read and the array written, as every
        message spells them.  (PyTorch's spellings never reach a message:
        ``trilinear_bwd.torch`` reports with CANN's names too, and refusals
        of ``F.interpolate`` are PyTorch's own.)
    forward : bool
        The direction the per-axis tables are read (``_axis_table.axis_table``):
        the forward's source points are the backward's targets.
    min_channels : int
        The smallest C: 1 for the forward (PyTorch's and CANN's rule: a
        non-empty volume), 0 for the backward.
    target_rule : str
        How the target's shape is stated in its message.
    limit_formula, limit_products : str, tuple of 2 str
        The documented limits in the operator's own words (the same
        numbers: both are stated on the arrays the passes run between).
    """

    name: str
    source: str
    target: str
    forward: bool
    min_channels: int
    target_rule: str
    limit_formula: str
    limit_products: tuple

    @property
    def names(self):
        """``(source, target)``: CANN's names of the two arrays."""
        return self.source, self.target

    def __reduce__(self):
        # Pickled by name (Dask ships checked calls to its workers): the two
        # operators stay the two objects, in every process.
        return _operator_named, (self.name,)

    def shapes(self, input_size, output_size):
        """``(source shape, target shape)`` of a call with these sizes."""
        upsampled = tuple(input_size[:2]) + tuple(output_size)
        if self.forward:
            return tuple(input_size), upsampled
        return upsampled, tuple(input_size)


BACKWARD = Operator(
    "backward", "gradOut", "gradInput", forward=False, min_channels=0,
    target_rule="inputSize ",
    limit_formula="N*C*(oD*oH*oW + iD*iH*iW + oD*oH*iW + oD*iH*iW)*4",
    limit_products=("N*C*oD*oH", "iW*iH"),
)
FORWARD = Operator(
    "forward", "self", "out", forward=True, min_channels=1,
    target_rule="(N, C) of self + outputSize = ",
    limit_formula=("N*C*(self_D*self_H*self_W + out_D*out_H*out_W + self_D*self_H*out_W "
                   "+ self_D*out_H*out_W)*4"),
    limit_products=("N*C*self_D*self_H", "out_W*out_H"),
)
OPERATORS = {BACKWARD.name: BACKWARD, FORWARD.name: FORWARD}


def _operator_named(name):
    """The operator called ``name`` (how an :class:`Operator` is unpickled)."""
    return OPERATORS[name]


_CallFields = collections.namedtuple(
    "_CallFields", ["op", "source", "target", "output_size", "input_size", "align_corners",
                    "scales", "bindings", "rules", "window"])


class Call(_CallFields):
    """A call that passed every check of :func:`check`: an immutable record.

    A tuple underneath (so nothing can be set on it, and it costs a tuple to
    make), with equality by identity: two calls never compare their arrays.
    A front end that allocates the target after the check, or copies a
    misaligned source, makes a new record with :meth:`replace`.

    Attributes
    ----------
    op : Operator
    source, target : ndarray
        NumPy views of the caller's memory: the array the kernel reads and
        the one it writes (target None until the front end allocated it).
    output_size : tuple of int
        ``(oD, oH, oW)``: the upsampled volume's spatial size.
    input_size : tuple of int
        ``(N, C, iD, iH, iW)``: the volume before upsampling.
    align_corners : bool
    scales : tuple of float
        ``(scales_d, scales_h, scales_w)`` as the tables use them: <= 0.0
        where not given.  Under CANN's rules these are the scales passed
        when all three are > 0 (and ``align_corners`` is False), else
        ``(0.0, 0.0, 0.0)``.
    bindings : tuple
        What the arrays' kind (``_arrays.register_kind``: PyTorch's tensors)
        keeps to check their memory before each run and to mark the target
        written after it; empty for NumPy memory.
    rules : {"pytorch", "cann"}
        The rules the call was checked under; a repeatable executor checks
        its new arrays under the same ones.
    window : tuple or None
        For a block of a larger call (:func:`check_window`): per spatial
        axis ``(t0, t1, s0)``, the block's targets ``t0:t1`` of the whole
        axis and the first source point its source block holds; the sizes
        above are then the whole call's.
    """

    __slots__ = ()
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__

    def __new__(cls, op, source, target, output_size, input_size, align_corners, scales,
                bindings=(), rules=PYTORCH_RULES, window=None):
        return tuple.__new__(cls, (op, source, target, output_size, input_size, align_corners,
                                   scales, bindings, rules, window))

    def replace(self, source=None, target=None):
        """A copy with a new ``source`` and/or ``target`` (None keeps the current one)."""
        fields = list(self)
        if source is not None:
            fields[1] = source
        if target is not None:
            fields[2] = target
        return tuple.__new__(Call, fields)

    @property
    def names(self):
        """``(source, target)``: the operator's names of the two arrays."""
        return self.op.source, self.op.target

    def addresses(self):
        """``(source, target)``: the addresses of their element [0, 0, 0, 0, 0]."""
        return data_address(self.source), data_address(self.target)

    @property
    def dtype_code(self):
        """The kernel's code for the storage dtype (``_constants.DT_*``)."""
        return dtype_info(self.source.dtype)[0]

    @property
    def acc_dtype(self):
        """The accumulation dtype: float64, for every dtype (one rounding, docs/numerics.md)."""
        return _FLOAT64

    @property
    def opmath_dtype(self):
        """PyTorch's opmath type: float64 for float64 data, else float32 (the tables' zero pattern)."""
        return dtype_info(self.source.dtype)[1]


def check(op, source, target, output_size, input_size, align_corners, scales, *,
          rules=PYTORCH_RULES, allocate=False, misaligned_ok=False, input_first=0,
          batch_limits=True):
    """Check a call of ``op`` against the operator contract; return its :class:`Call`.

    Parameters
    ----------
    op : Operator
        :data:`BACKWARD` or :data:`FORWARD`.
    source, target : array_like
        The array read and the array written (gradOut and gradInput; self
        and out).  ``target`` is ignored with ``allocate=True``.
    output_size : sequence of 3 int
        ``(oD, oH, oW)``.
    input_size : sequence of 5 int, or None
        ``(N, C, iD, iH, iW)``, the backward's ``inputSize``; the forward
        takes its input's size from ``source`` (None).
    align_corners : bool
    scales : sequence of 3
        ``(scalesD, scalesH, scalesW)``: real numbers, None for "not given".
    rules : {"pytorch", "cann"}
        Whose rule the scales follow (``docs/operator.md``, "Which layer
        follows which rule"):

        * ``"pytorch"`` (every front end but ``trilinear_bwd.aclnn``): each
          axis uses its own scale when it is > 0, and a scale so used must
          satisfy ``outputSize[k] == floor(inputSize[k+2] * scale)``;
        * ``"cann"`` (``trilinear_bwd.aclnn``, as CANN's
          ``aclnn_upsample_trilinear_3d_backward.cpp`` does): the three
          scales are used only when all three are > 0, otherwise none is
          (the size ratio on every axis), and nothing checks them against
          ``outputSize``.

        Either way a scale must be a finite real number, and
        ``align_corners`` makes the scales unused.
    allocate : bool
        The call has no target yet (the front end allocates it after the
        check): its checks are skipped and the record's ``target`` is None.
    misaligned_ok : bool
        A source not aligned to its element size passes (the one call
        copies it afterwards); every other rule, overlap with the target
        included, is checked on the caller's own array.
    input_first : int
        2 when the caller passed only ``(D, H, W)`` of ``input_size``:
        messages number its elements as the caller did.
    batch_limits : bool
        False leaves N and C out of the size limits: a Dask graph's batch
        is spread over many kernel calls, whose own limits are checked per
        block (:func:`check_limits`).

    Returns
    -------
    Call

    Raises
    ------
    NullArgumentError
        (161001) the source, ``output_size``, the backward's ``input_size``
        or (unless ``allocate``) the target is None.
    InvalidArgumentError
        (161002) any other rule of the contract is broken.
    """
    read, written = op.names
    required = [(source, read), (output_size, "outputSize")]
    if not op.forward:
        required.append((input_size, "inputSize"))
    if not allocate:
        required.append((target, written))
    for value, name in required:
        if value is None:
            raise NullArgumentError(f"{name} must not be None")

    source, source_binding = imported(source, read)
    target, target_binding = (None, None) if allocate else imported(target, written, True)
    bindings = tuple(b for b in (source_binding, target_binding) if b is not None)
    check_dtype(source, read)
    if not allocate and target.dtype != source.dtype:
        raise invalid(f"{written} dtype must equal {read} dtype {source.dtype}, "
                      f"got {target.dtype}")
    check_5d(source.ndim, read)

    out_name = functools.partial(element_name, "outputSize", axes="DHW")
    output_size = int_tuple(output_size, "outputSize", 3)
    for k, n in enumerate(output_size):
        if n <= 0:
            raise invalid(f"{out_name(k)} must be > 0, got {n}")
    if op.forward:
        input_size = tuple(source.shape)
        in_name = functools.partial(_array_axis, read)
    else:
        input_size = int_tuple(input_size, "inputSize", 5, input_first)
        in_name = functools.partial(element_name, "inputSize", first=input_first)
    _check_input_size(op, input_size, in_name)
    source_shape, target_shape = op.shapes(input_size, output_size)
    if source.shape != source_shape:
        for k, axis in enumerate("NCDHW"):
            if source.shape[k] != source_shape[k]:
                given = in_name(k) if k < 2 else out_name(k - 2)
                raise invalid(f"{read} {axis} must equal {given} = {source_shape[k]}, "
                              f"got {source.shape[k]}")
    if not allocate and tuple(target.shape) != target_shape:
        raise invalid(f"{written} shape must equal {op.target_rule}{target_shape}, "
                      f"got {tuple(target.shape)}")
    batch = source_shape[:2] if batch_limits else (0, 0)
    check_limits(op, batch + source_shape[2:], batch + target_shape[2:])

    align_corners, scales = _checked_scales(align_corners, scales, rules, input_size,
                                            output_size, out_name, in_name)
    if not misaligned_ok:
        check_aligned(source, read)
    if not allocate:
        check_aligned(target, written)
        _check_overlap(source, target, op.names)
    return Call(op, source, target, output_size, input_size, align_corners, scales,
                bindings, rules)


def check_5d(ndim, name):
    """161002 unless an array of ``ndim`` axes is 5-D, as both operators' arrays are."""
    if ndim != 5:
        raise invalid(f"{name} must be 5-D (N, C, D, H, W), got {ndim}-D")


def _array_axis(name, k):
    """``self D``: axis ``k`` of the array ``name`` (the forward's sizes are its source's)."""
    return f"{name} {'NCDHW'[k]}"


def _check_input_size(op, input_size, in_name):
    """N and C >= 0 (C >= ``op.min_channels``), and D, H and W > 0."""
    for k in (0, 1):
        if input_size[k] < 0:
            raise invalid(f"{in_name(k)} must be >= 0, got {input_size[k]}")
    for k in (2, 3, 4):
        if input_size[k] <= 0:
            raise invalid(f"{in_name(k)} must be > 0, got {input_size[k]}")
    if input_size[1] < op.min_channels:
        raise invalid(f"{in_name(1)} must be > 0 (a non-empty 5-D volume; PyTorch's and "
                      f"CANN's rule), got shape {input_size}")


def check_limits(op, source_shape, target_shape):
    """The documented limits of one kernel call, in ``op``'s words.

    Both operators' documents state them in terms of the arrays the
    separable passes run between, so one check serves both: the source's
    D and H and the target's H and W.
    """
    for name, shape in zip(op.names, (source_shape, target_shape)):
        for k, n in enumerate(shape):
            if n > MAX_DIM:
                raise LimitError(
                    f"{name} dimension {k} must be at most 2**20 = {MAX_DIM}, got {n}"
                )
    n, c, sd, sh, sw = source_shape
    _, _, td, th, tw = target_shape
    need = n * c * (sd * sh * sw + td * th * tw + sd * sh * tw + sd * th * tw) * 4
    if need >= MAX_BYTES:
        raise LimitError(f"{op.limit_formula} must be below 60 GiB = {MAX_BYTES} bytes, "
                         f"got {need}")
    if n * c * sd * sh >= MAX_PRODUCT:
        raise LimitError(f"{op.limit_products[0]} must be below 2**31, got {n * c * sd * sh}")
    if tw * th >= MAX_PRODUCT:
        raise LimitError(f"{op.limit_products[1]} must be below 2**31, got {tw * th}")


def _check_overlap(source, target, names):
    read, written = names
    if not target.flags.writeable:
        raise invalid(f"{written} must be writable, got a read-only array")
    if target.size > 1 and has_internal_overlap(target):
        raise invalid(f"{written} must not overlap itself (zero or interleaved strides)")
    if source.size and target.size:
        try:
            shared = np.shares_memory(source, target, max_work=1_000_000)
        except np.exceptions.TooHardError:
            shared = True
        if shared:
            raise invalid(f"{written} must not overlap {read}")


def _checked_scales(align_corners, values, rules, input_size, output_size, out_name, in_name):
    """``(align_corners, scales)`` as the tables use them, under ``rules`` (see :func:`check`)."""
    if not isinstance(align_corners, (bool, np.bool_)):
        raise invalid(f"alignCorners must be a bool, got {align_corners!r}")
    align_corners = bool(align_corners)
    names = ("scalesD", "scalesH", "scalesW")
    if all(type(v) is float and math.isfinite(v) for v in values):   # the common spelling
        scales = list(values)
    else:
        scales = [as_scale(value, name) for value, name in zip(values, names)]
    if rules == CANN_RULES:
        scales = cann_scales(scales, align_corners)
    elif rules != PYTORCH_RULES:
        raise ValueError(f"rules must be {PYTORCH_RULES!r} or {CANN_RULES!r}, got {rules!r}")
    else:
        _check_scales_consistent(scales, names, input_size, output_size, align_corners,
                                 out_name, in_name)
    return align_corners, tuple(scales)


def cann_scales(scales, align_corners):
    """The scales CANN's implementation uses: all three when all are > 0, else none.

    ``aclnn_upsample_trilinear_3d_backward.cpp`` (hicann/ops-cv) sends the
    three scales on only when ``scalesD > 0 && scalesH > 0 && scalesW > 0``;
    otherwise its tiling uses the size ratio on every axis.  With
    ``align_corners`` they are unused either way.

    Parameters
    ----------
    scales : sequence of 3 float
        Finite scales as passed (0.0 for None).
    align_corners : bool

    Returns
    -------
    list of 3 float
        ``scales``, or ``[0.0, 0.0, 0.0]`` (the size ratio on every axis).
    """
    if not align_corners and all(s > 0 for s in scales):
        return list(scales)
    return [0.0, 0.0, 0.0]


def _check_scales_consistent(scales, names, input_size, output_size, align_corners,
                             out_name, in_name):
    """PyTorch's rule: a scale used on its axis must give that axis's output size."""
    if align_corners or not any(s > 0 for s in scales):
        return
    for k, (s, name) in enumerate(zip(scales, names)):
        n_in, n_out = input_size[k + 2], output_size[k]
        # A finite scale can still overflow in n_in * s (1e308 * 2
        # is inf, and math.floor(inf) raises OverflowError): that is simply
        # inconsistent with any output size.
        product = n_in * s
        floored = math.floor(product) if math.isfinite(product) else product
        if s > 0 and floored != n_out:
            raise invalid(
                f"{name} = {s!r} is inconsistent with {out_name(k)} = {n_out}: "
                f"floor({in_name(k + 2)} * {name}) = floor({n_in} * {s!r}) = {floored}"
            )


def check_window(whole, source, window, target=None):
    """The :class:`Call` of one block of the call ``whole``, for the kernel's windowed entry.

    ``trilinear_bwd.dask`` checks the whole call once, at graph
    construction; each task then computes one block of the result, the
    targets ``t0:t1`` on each spatial axis, from the block of the source that
    they read, starting at source point ``s0`` (``_axis_terms.source_range``).

    Parameters
    ----------
    whole : Call
        The whole call, checked (its arrays may be stand-ins).
    source : ndarray
        The source block: ``(n, c)`` plus, per axis, the extent of
        ``_axis_terms.source_range`` for its targets.
    window : sequence of 3 tuple
        ``(t0, t1, s0)`` per spatial axis.
    target : ndarray, optional
        The block of the result (shape ``(n, c)`` plus ``t1 - t0`` per axis);
        None leaves it to the caller to allocate.

    Returns
    -------
    Call
    """
    window = tuple(tuple(int(v) for v in w) for w in window)
    op = whole.op
    read, written = op.names
    source = as_array(source, read)
    n, c = source.shape[:2]
    shape = (n, c) + tuple(t1 - t0 for t0, t1, _ in window)
    if source.dtype != whole.source.dtype or (target is not None and (
            target.shape != shape or target.dtype != source.dtype)):
        raise invalid(f"a block of {read} or {written} does not match its window {window}")
    check_limits(op, source.shape, shape)
    check_aligned(source, read)
    if target is not None:
        check_aligned(target, written)
        _check_overlap(source, target, op.names)
    return Call(op, source, target, whole.output_size, (n, c) + whole.input_size[2:],
                whole.align_corners, whole.scales, (), whole.rules, window)


def rebind(old, source=None, target=None):
    """Check new arrays for an executor planned with ``old``; return the new :class:`Call`.

    The new arrays (None keeps the bound one) must have the shape, dtype and
    strides of the ones they replace, and pass every rule of the contract
    again (writability, overlap).
    """
    op = old.op
    keep = {b.name: b.tensor for b in old.bindings}
    new_source = keep.get(op.source, old.source) if source is None else source
    new_target = keep.get(op.target, old.target) if target is None else target
    for name, new, ref, written in ((op.source, new_source, old.source, False),
                                    (op.target, new_target, old.target, True)):
        arr = as_array(new, name, written)
        # The strides of axes of size 1 (or of an empty array) address nothing:
        # an exporter may report any value there (same_strides).
        if ((arr.shape, arr.dtype) != (ref.shape, ref.dtype)
                or not same_strides(ref.shape, arr.strides, ref.strides)):
            raise invalid(
                f"{name} must keep shape {tuple(ref.shape)}, dtype {ref.dtype} and "
                f"strides {ref.strides}, got {tuple(arr.shape)}, {arr.dtype}, {arr.strides}"
            )
        if not arr.flags.aligned:
            raise invalid(f"{name} must be aligned to its element size")
    return check(op, new_source, new_target, old.output_size,
                 None if op.forward else old.input_size, old.align_corners, old.scales,
                 rules=old.rules)

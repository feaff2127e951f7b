"""Property-based fuzzing of the public API and ``trilinear_bwd.aclnn``.

Two kinds of test:

* **Fault injection**: a valid call (random small shape, dtype, layout of
  both arrays, argument spellings) with zero, one or two faults injected,
  each fault tagged with the status the contract requires.  The oracle:
  with no fault, the call succeeds and ``gradInput`` equals the float64
  reference within ``reference.error_bound``; with faults, it raises an
  ``AclnnError`` whose status is one of the injected faults' statuses (with
  one fault: exactly that status, and the message names the parameter).
  ``trilinear_bwd.aclnn`` returns the same status and never raises, except
  where it follows CANN's rule for the scales (docs/operator.md, "Which
  layer follows which rule"): a scale inconsistent with ``outputSize`` is
  no fault there, and its results are checked against the scales CANN's
  rule uses (all three when all are > 0, else the size ratio everywhere).
* **Anything goes**: every argument drawn from a wide pool of junk and
  valid values.  The oracle: success (and then the call was valid by the
  contract and the result is right) or an ``AclnnError`` of the phase's
  family; the ``aclnn`` layer returns the same status (or accepts a call
  refused only for an inconsistent scale).

Every call also checks that nothing was written where it must not be:
``gradOut`` and every byte around ``gradInput`` and the workspace keep
their sentinel values, and a failed call leaves ``gradInput`` untouched.

``TRILINEAR_BWD_FUZZ_SCALE`` multiplies the example counts (default 1).
"""

import dataclasses
import math
import os
import sys
from dataclasses import dataclass, field

import numpy as np
import pytest
from _hardening import Guarded, guarded_bytes, layouts, torch_or_none
from conftest import DTYPES, assert_matches_reference, examples, np_dtype
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import trilinear_bwd as tb
from trilinear_bwd import aclnn

OK = 0
NULL = tb.ACLNN_ERR_PARAM_NULLPTR
INVALID = tb.ACLNN_ERR_PARAM_INVALID
RUNTIME = tb.ACLNN_ERR_RUNTIME_ERROR
INNER = tb.ACLNN_ERR_INNER
KNOWN = {OK, NULL, INVALID, RUNTIME, INNER}

SCALE = float(os.environ.get("TRILINEAR_BWD_FUZZ_SCALE", "1"))
TORCH = torch_or_none()


def fuzz(count):
    """Hypothesis settings for a fuzz test: ``count`` examples (a quarter by
    default, conftest.examples) times the scale."""
    return settings(
        max_examples=max(1, int(examples(count) * SCALE)),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )


# -- a valid problem ----------------------------------------------------------


@dataclass
class Problem:
    """The logical content of a valid call."""

    values: np.ndarray          # grad_out's values, (N, C, oD, oH, oW)
    input_size: tuple           # (N, C, iD, iH, iW)
    align: bool
    scales: tuple               # as passed (objects)
    scales_value: tuple         # as floats the reference uses (0.0 when not given)
    dtype: str

    @property
    def output_size(self):
        return tuple(self.values.shape[2:])

    @property
    def cann_scales_value(self):
        """The scales ``trilinear_bwd.aclnn`` uses: all three if all are > 0, else none."""
        return cann_rule(self.scales_value, self.align)


def cann_rule(values, align):
    """CANN's scales rule, written out: the three scales, or the size ratio everywhere."""
    if not align and all(v > 0 for v in values):
        return tuple(values)
    return (0.0, 0.0, 0.0)


def cann_scales_of(args, align):
    """The scales the CANN layer uses for phase-one arguments it accepted."""
    return cann_rule([0.0 if s is None else float(s) for s in args[4:7]], align)


@st.composite
def scale_for(draw, n_in, align):
    """(object passed, its value, output size) for one axis."""
    kind = draw(st.sampled_from(["zero", "none", "negative", "given"]))
    n_out = draw(st.integers(1, 6))
    if kind == "zero":
        return draw(st.sampled_from([0.0, 0, np.float64(0.0)])), 0.0, n_out
    if kind == "none":
        return None, 0.0, n_out
    if kind == "negative":
        s = draw(st.sampled_from([-1.0, -2, np.float32(-0.5), -1e300]))
        return s, 0.0, n_out
    if align:
        # Any finite scale is ignored with align_corners.
        s = draw(st.sampled_from([0.37, 2.0, 1e308, np.float32(3.5), 7]))
        return s, 0.0, n_out
    s = draw(st.sampled_from([float, np.float64, np.float32]))(draw(st.floats(0.4, 3.4)))
    n_out = math.floor(n_in * float(s))
    if n_out < 1:
        return 0.0, 0.0, draw(st.integers(1, 6))
    return s, float(s), n_out


@st.composite
def problems(draw, dtypes=DTYPES):
    n = draw(st.sampled_from([1, 1, 2, 0]))
    c = draw(st.sampled_from([1, 2, 3, 0]))
    align = draw(st.booleans())
    ins, outs, scales, values = [], [], [], []
    for _ in range(3):
        n_in = draw(st.integers(1, 4))
        s, v, n_out = draw(scale_for(n_in, align))
        ins.append(n_in)
        outs.append(n_out)
        scales.append(s)
        values.append(v)
    dtype = draw(st.sampled_from(dtypes))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    g = rng.standard_normal((n, c, *outs)).astype(np_dtype(dtype))
    return Problem(g, (n, c, *ins), align, tuple(scales), tuple(values), dtype)


# -- building the arguments ----------------------------------------------------


def _wrap(draw, view, allow_list=False):
    """The array as the caller passes it: ndarray, memoryview, torch tensor, list."""
    kinds = ["array", "array"]
    if view.dtype.name != "bfloat16":
        kinds.append("memoryview")
        if TORCH is not None and view.flags.writeable and min(view.strides, default=0) >= 0:
            kinds.append("torch")
    if allow_list and view.dtype == np.float64 and view.size:
        kinds.append("list")
    kind = draw(st.sampled_from(kinds))
    if kind == "memoryview":
        return memoryview(view)
    if kind == "torch":
        return TORCH.from_numpy(view)
    if kind == "list":
        return view.tolist()
    return view


def _sizes(draw, values):
    kind = draw(st.sampled_from(["list", "tuple", "int64", "int32", "npints"]))
    if kind == "list":
        return list(values)
    if kind == "tuple":
        return tuple(values)
    if kind == "npints":
        return tuple(np.int16(v) if abs(v) < 2**15 else np.int64(v) for v in values)
    return np.array(values, dtype=kind)


@dataclass
class Case:
    """A call: the problem, the arrays in their buffers, and the arguments."""

    problem: Problem
    one_call: bool
    go: Guarded
    gi: Guarded
    args: dict = field(default_factory=dict)
    faults: list = field(default_factory=list)   # (status, parameter name, fault)

    @property
    def expected(self):
        return {status for status, _, _ in self.faults if status != OK}

    def outcome_text(self):
        return ", ".join(f"{name}:{fault}->{status}" for status, name, fault in self.faults)


@st.composite
def valid_cases(draw, one_call=False, dtypes=DTYPES):
    p = draw(problems(dtypes))
    go_shape = p.values.shape
    # grad_out: any layout, sometimes broadcast along axes (zero strides,
    # read-only), sometimes read-only.
    bcast = [k for k in range(5) if go_shape[k] > 0 and draw(st.integers(0, 5)) == 0]
    values = p.values
    if bcast:
        small_shape = tuple(1 if k in bcast else n for k, n in enumerate(go_shape))
        values = np.broadcast_to(p.values[tuple(slice(0, 1) if k in bcast else slice(None)
                                                for k in range(5))], go_shape)
        go = Guarded(small_shape, p.values.dtype, draw(layouts()), values=values[
            tuple(slice(0, 1) if k in bcast else slice(None) for k in range(5))])
        go_arg = np.broadcast_to(go.view, go_shape)
    else:
        go = Guarded(go_shape, p.values.dtype, draw(layouts()), values=values)
        go_arg = go.view
        if draw(st.integers(0, 4)) == 0:
            go_arg = go.view.view()
            go_arg.flags.writeable = False
    p.values = np.array(values)
    gi = Guarded(p.input_size, p.values.dtype, draw(layouts()), fill=np.nan)
    case = Case(p, one_call, go, gi)
    a = case.args
    a["gradOut"] = _wrap(draw, go_arg, allow_list=True)
    a["outputSize"] = _sizes(draw, p.output_size)
    if one_call and draw(st.booleans()):
        a["inputSize"] = _sizes(draw, p.input_size[2:])
    else:
        a["inputSize"] = _sizes(draw, p.input_size)
    a["alignCorners"] = draw(st.sampled_from([bool, np.bool_]))(p.align)
    a["scalesD"], a["scalesH"], a["scalesW"] = p.scales
    a["gradInput"] = _wrap(draw, gi.view)
    a["num_threads"] = draw(st.sampled_from([None, 1, 1, 1, 2, 3, -1, np.int64(1)]))
    return case


# -- faults --------------------------------------------------------------------
# Each takes (draw, case) and returns (status, parameter, description), with
# status OK for a variation that keeps the call valid, or None when it does
# not apply to this case.

JUNK_SCALAR = st.one_of(
    st.integers(-2**70, 2**70), st.floats(), st.booleans(), st.text(max_size=3),
    st.binary(max_size=3), st.complex_numbers(), st.builds(object), st.builds(dict),
    st.just(Ellipsis),
)


def f_go_none(draw, case):
    case.args["gradOut"] = None
    return NULL, "gradOut", "None"


def f_go_junk(draw, case):
    case.args["gradOut"] = draw(JUNK_SCALAR)
    return INVALID, "gradOut", "not an array"


BAD_DTYPES = ["int8", "int32", "int64", "uint16", "bool", "complex64", "complex128", "object",
              "U2", "S3", "longdouble", "datetime64[s]", "V4", "f4,f4"]


def f_go_dtype(draw, case):
    dtype = draw(st.sampled_from(BAD_DTYPES))
    case.args["gradOut"] = np.zeros(case.problem.values.shape, dtype=dtype)
    return INVALID, "gradOut", f"dtype {dtype}"


def f_go_byteorder(draw, case):
    dtype = case.problem.values.dtype
    swapped = (np.dtype(np.float32) if dtype.name == "bfloat16" else dtype).newbyteorder()
    case.args["gradOut"] = case.problem.values.astype(swapped)
    return INVALID, "gradOut", f"byte order {swapped.str}"


def f_go_ndim(draw, case):
    ndim = draw(st.sampled_from([0, 1, 4, 6]))
    shape = case.problem.values.shape
    new_shape = {0: (), 1: (3,), 4: shape[1:], 6: shape + (1,)}[ndim]
    case.args["gradOut"] = np.ones(new_shape, dtype=case.problem.values.dtype)
    return INVALID, "gradOut", f"{ndim}-D"


def _misaligned(draw, values):
    """``values`` in memory that is not aligned to the element size, or None."""
    if values.size == 0:
        return None
    itemsize = values.dtype.itemsize
    if draw(st.booleans()):
        raw = np.zeros(values.nbytes + itemsize + 1, np.uint8)
        out = raw[1:1 + values.nbytes].view(values.dtype).reshape(values.shape)
        out[...] = values
        return out
    # Aligned start, but one stride one byte longer than a multiple of the
    # element size (and the outer strides grown to match: no element overlaps).
    axes = [k for k, n in enumerate(values.shape) if n > 1]
    if not axes:
        return None
    k = draw(st.sampled_from(axes))
    strides, extent = [0] * 5, itemsize
    for j in reversed(range(5)):
        strides[j] = extent + (1 if j == k else 0)
        extent = strides[j] * values.shape[j]
    raw = np.zeros(extent // itemsize + 2, values.dtype)
    out = np.lib.stride_tricks.as_strided(raw, values.shape, strides)
    out[...] = values
    return out


def f_go_misaligned(draw, case):
    arr = _misaligned(draw, case.problem.values)
    if arr is None:
        return None
    case.args["gradOut"] = arr
    if case.one_call:
        return OK, "gradOut", "misaligned (the one-call function copies it)"
    return INVALID, "gradOut", "misaligned"


def _bad_size_element(draw, good):
    return draw(st.sampled_from([0, -1, -2**63, 2**64, 2**20 + 1, good + 1, float(good), True,
                                 False, None, "4", np.float64(good), 1.5]))


def f_os_none(draw, case):
    case.args["outputSize"] = None
    if case.one_call:
        return OK, "outputSize", "None (defaults to gradOut's shape)"
    return NULL, "outputSize", "None"


def f_os_len(draw, case):
    length = draw(st.sampled_from([0, 1, 2, 4, 5]))
    case.args["outputSize"] = list(case.problem.output_size) * 2
    case.args["outputSize"] = case.args["outputSize"][:length]
    return INVALID, "outputSize", f"{length} elements"


def f_os_element(draw, case):
    k = draw(st.integers(0, 2))
    sizes = list(case.problem.output_size)
    sizes[k] = _bad_size_element(draw, sizes[k])
    case.args["outputSize"] = sizes
    return INVALID, "outputSize", f"element {k} = {sizes[k]!r}"


def f_os_type(draw, case):
    case.args["outputSize"] = draw(st.sampled_from([7, 7.0, "468", b"468", object(),
                                                    np.array(4), Ellipsis]))
    return INVALID, "outputSize", "not a sequence"


def f_is_none(draw, case):
    case.args["inputSize"] = None
    return NULL, "inputSize", "None"


def f_is_len(draw, case):
    lengths = [0, 1, 2, 4, 6] if case.one_call else [0, 1, 2, 3, 4, 6]
    length = draw(st.sampled_from(lengths))
    case.args["inputSize"] = (list(case.problem.input_size) * 2)[:length]
    return INVALID, "inputSize", f"{length} elements"


def f_is_element(draw, case):
    k = draw(st.integers(0, 4))
    sizes = list(case.problem.input_size)
    sizes[k] = _bad_size_element(draw, sizes[k])
    if k < 2 and sizes[k] == 0 and case.problem.input_size[k] == 0:
        return None
    case.args["inputSize"] = sizes
    return INVALID, "inputSize", f"element {k} = {sizes[k]!r}"


def f_is_type(draw, case):
    case.args["inputSize"] = draw(st.sampled_from([7, 7.5, object(), np.array(4), Ellipsis]))
    return INVALID, "inputSize", "not a sequence"


def f_align(draw, case):
    case.args["alignCorners"] = draw(st.sampled_from(
        [0, 1, None, 1.0, "True", np.array(True), np.array([True]), np.int64(1)]))
    return INVALID, "alignCorners", f"{case.args['alignCorners']!r}"


# A fault of PyTorch's rules only: the CANN layer does not check scales against
# outputSize (CANN's implementation does not), so for it such a call is valid.
INCONSISTENT = "inconsistent"


def aclnn_statuses(case):
    """The statuses the CANN layer may answer: those of the faults it sees."""
    return {status for status, name, what in case.faults
            if status and name != "num_threads" and not what.startswith(INCONSISTENT)}


def f_scale(draw, case):
    k = draw(st.integers(0, 2))
    name = ("scalesD", "scalesH", "scalesW")[k]
    n_in, n_out = case.problem.input_size[k + 2], case.problem.output_size[k]
    kind = draw(st.sampled_from(["nonfinite", "type", "huge int", "huge", "inconsistent"]))
    if kind == "nonfinite":
        value = draw(st.sampled_from([math.nan, math.inf, -math.inf, np.float32("nan"),
                                      np.float64("-inf")]))
    elif kind == "type":
        value = draw(st.sampled_from(["2", [2.0], 1j, True, np.bool_(False), object(), b"1"]))
    elif kind == "huge int":
        value = 10**400
    elif kind == "huge":
        # Finite, but n_in * value overflows: inconsistent unless ignored.
        value = 1e308
        case.args[name] = value
        return (OK if case.problem.align else INVALID), name, f"{INCONSISTENT} 1e308"
    else:
        value = (n_out + 1.5) / n_in
        assert math.floor(n_in * value) != n_out
        case.args[name] = value
        return (OK if case.problem.align else INVALID), name, f"{INCONSISTENT} {value!r}"
    case.args[name] = value
    return INVALID, name, f"{kind} {value!r}"


def f_gi_none(draw, case):
    case.args["gradInput"] = None
    if case.one_call:
        return OK, "gradInput", "None (allocated)"
    return NULL, "gradInput", "None"


def f_gi_junk(draw, case):
    kind = draw(st.sampled_from(["scalar", "list", "tuple"]))
    if kind == "scalar":
        case.args["gradInput"] = draw(JUNK_SCALAR)
    else:
        # Nested sequences NumPy would copy: the result would be lost.
        nested = np.full(case.problem.input_size, 0.0).tolist()
        case.args["gradInput"] = nested if kind == "list" else tuple(nested)
    return INVALID, "gradInput", f"{kind}, not a writable array"


def f_gi_dtype(draw, case):
    own = case.problem.values.dtype
    others = [np_dtype(d) for d in DTYPES if np_dtype(d) != own]
    dtype = draw(st.sampled_from(others + [np.dtype(d) for d in ("int32", "int16", "object")]))
    case.args["gradInput"] = np.zeros(case.problem.input_size, dtype=dtype)
    return INVALID, "gradInput", f"dtype {dtype}"


def f_gi_byteorder(draw, case):
    dtype = case.problem.values.dtype
    if dtype.name == "bfloat16":
        return None
    case.args["gradInput"] = np.zeros(case.problem.input_size, dtype=dtype.newbyteorder())
    return INVALID, "gradInput", "byte order"


def f_gi_shape(draw, case):
    shape = list(case.problem.input_size)
    kind = draw(st.sampled_from(["bigger", "ndim"]))
    if kind == "bigger":
        shape[draw(st.integers(0, 4))] += 1
    else:
        shape = shape[:4] if draw(st.booleans()) else shape + [1]
    case.args["gradInput"] = np.zeros(shape, dtype=case.problem.values.dtype)
    return INVALID, "gradInput", f"shape {shape}"


def f_gi_readonly(draw, case):
    view = case.gi.view.view()
    view.flags.writeable = False
    case.args["gradInput"] = view
    return INVALID, "gradInput", "read-only"


def f_gi_self_overlap(draw, case):
    shape = case.problem.input_size
    axes = [k for k, n in enumerate(shape) if n > 1]
    if not axes or math.prod(shape) < 2:
        return None
    itemsize = case.problem.values.dtype.itemsize
    k = draw(st.sampled_from(axes))
    strides = [itemsize * math.prod(shape[j + 1:]) for j in range(5)]
    if draw(st.booleans()) or len(axes) < 2:
        strides[k] = 0
    else:
        # Two axes stepping by one element each: elements collide.
        j = draw(st.sampled_from([a for a in axes if a != k]))
        strides[k] = strides[j] = itemsize
    extent = sum((n - 1) * s for n, s in zip(shape, strides)) + itemsize
    raw = np.zeros(extent // itemsize + 1, dtype=case.problem.values.dtype)
    case.args["gradInput"] = np.lib.stride_tricks.as_strided(raw, shape, strides)
    return INVALID, "gradInput", f"overlaps itself, strides {strides}"


def f_gi_misaligned(draw, case):
    arr = _misaligned(draw, np.zeros(case.problem.input_size, case.problem.values.dtype))
    if arr is None:
        return None
    case.args["gradInput"] = arr
    return INVALID, "gradInput", "misaligned"


def _shared_buffer(draw, case, interleaved):
    """gradOut and gradInput as views of one buffer: overlapping, or interleaved."""
    go_shape, gi_shape = case.problem.values.shape, case.problem.input_size
    go_n, gi_n = math.prod(go_shape), math.prod(gi_shape)
    dtype = case.problem.values.dtype
    if interleaved:
        buf = np.full(2 * max(go_n, gi_n) + 2, np.nan, dtype=dtype)
        first = draw(st.booleans())
        go = buf[int(not first)::2][:go_n].reshape(go_shape)
        gi = buf[int(first)::2][:gi_n].reshape(gi_shape)
    else:
        start = draw(st.integers(0, go_n - 1))
        buf = np.full(go_n + gi_n + start, np.nan, dtype=dtype)
        go = buf[:go_n].reshape(go_shape)
        gi = buf[start:start + gi_n].reshape(gi_shape)
        if draw(st.booleans()):
            # A different view of the same bytes.
            go = buf.view(np.uint8)[:go_n * dtype.itemsize].view(dtype).reshape(go_shape)
    # Views, not copies (reshape could silently copy a strided array).
    assert go.base is not None and gi.base is not None
    go[...] = case.problem.values
    return buf, go, gi


def f_gi_overlaps_go(draw, case):
    if case.problem.values.size == 0 or math.prod(case.problem.input_size) == 0:
        return None
    _, go, gi = _shared_buffer(draw, case, interleaved=False)
    case.args["gradOut"] = go
    case.args["gradInput"] = gi
    if TORCH is not None and go.dtype.name != "bfloat16" and draw(st.booleans()):
        case.args["gradInput"] = TORCH.from_numpy(gi)   # a tensor sharing the storage
    return INVALID, "gradInput", "overlaps gradOut"


def f_gi_interleaved(draw, case):
    """Views of one buffer that share no element: valid, and must be computed right."""
    buf, go, gi = _shared_buffer(draw, case, interleaved=True)
    case.go = _Shared(buf, go)
    case.gi = _Shared(buf, gi)
    case.args["gradOut"] = go
    case.args["gradInput"] = gi
    return OK, "gradInput", "interleaved with gradOut"


class _Shared:
    """Stands in for Guarded when both arrays are views of one buffer."""

    def __init__(self, buf, view):
        self.buffer, self.view = buf, view
        self._snapshot = view.copy()

    def check_outside(self):
        pass

    def check_untouched(self):
        # Bytes, so that NaN compares equal to itself.
        assert self.view.tobytes() == self._snapshot.tobytes(), "the array was written"

    def reset(self):
        self.view[...] = self._snapshot


def f_threads(draw, case):
    case.args["num_threads"] = draw(st.sampled_from(
        [0, 1025, -1025, 2**70, 2.0, True, "2", np.float64(2)]))
    return INVALID, "num_threads", f"{case.args['num_threads']!r}"


def f_scales_seq(draw, case):
    """One call only: the scales argument itself."""
    value = draw(st.sampled_from([(1.0, 2.0), (0.0,) * 4, 3.0, object(), "abc"]))
    case.args["scales"] = value
    return INVALID, "scales", f"{value!r}"


FAULTS = {  # target argument -> faults
    "gradOut": [f_go_none, f_go_junk, f_go_dtype, f_go_byteorder, f_go_ndim, f_go_misaligned],
    "outputSize": [f_os_none, f_os_len, f_os_element, f_os_type],
    "inputSize": [f_is_none, f_is_len, f_is_element, f_is_type],
    "alignCorners": [f_align],
    "scales": [f_scale],
    "gradInput": [f_gi_none, f_gi_junk, f_gi_dtype, f_gi_byteorder, f_gi_shape, f_gi_readonly,
                  f_gi_self_overlap, f_gi_misaligned],
    "aliasing": [f_gi_overlaps_go, f_gi_interleaved],
    "num_threads": [f_threads],
}


@st.composite
def faulty_cases(draw, one_call=False):
    case = draw(valid_cases(one_call))
    targets = draw(st.one_of(
        st.just([]),
        st.lists(st.sampled_from(sorted(FAULTS)), min_size=1, max_size=2, unique=True)))
    if "aliasing" in targets:
        # Aliasing replaces both arrays; keep it alone with the other argument faults.
        targets = [t for t in targets if t not in ("gradOut", "gradInput")]
    for target in targets:
        fault = draw(st.sampled_from(FAULTS[target]))
        result = fault(draw, case)
        if result is not None:
            case.faults.append(result)
    if one_call and draw(st.integers(0, 9)) == 0:
        case.faults.append(f_scales_seq(draw, case))
    return case


# -- running a call and checking it ------------------------------------------


def _check_result(p, result, scales=None):
    """``result`` against the reference, with ``scales`` (by default PyTorch's: as passed)."""
    scales = p.scales_value if scales is None else scales
    assert_matches_reference(result, p.values, p.input_size, p.align, scales)


def _phase_one_args(case):
    a = case.args
    return (a["gradOut"], a["outputSize"], a["inputSize"], a["alignCorners"], a["scalesD"],
            a["scalesH"], a["scalesW"], a["gradInput"])


def _expect_failure(case, call):
    with pytest.raises(tb.AclnnError) as info:
        call()
    status = info.value.status
    assert status in case.expected, (
        f"status {status} ({info.value}) not among {case.expected} for {case.outcome_text()}")
    if len(case.faults) == 1:
        name = case.faults[0][1]
        assert name.lower() in str(info.value).lower(), (
            f"message does not name {name}: {info.value}")
    case.gi.check_untouched()
    case.go.check_untouched()
    return status


def check_two_phase(case):
    """get_workspace_size + execute, and the aclnn names, against the oracle."""
    args = _phase_one_args(case)
    threads = case.args["num_threads"]
    scales = None                         # the executor below follows PyTorch's rules
    if case.expected:
        status = _expect_failure(
            case, lambda: tb.get_workspace_size(*args, num_threads=threads))
        # aclnn takes no num_threads: a fault there is invisible to it; so is a scale
        # inconsistent with outputSize (CANN's rules).
        aclnn_expected = aclnn_statuses(case)
        got = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(*args)
        if aclnn_expected:
            assert got[0] in aclnn_expected and got[1:] == (0, None), got
            if aclnn_expected == case.expected:
                assert got[0] == status
            assert aclnn.aclGetRecentErrMsg()
            case.gi.check_untouched()
            return
        size, ex = got[1], got[2]
        assert got[0] == OK, aclnn.aclGetRecentErrMsg()
        scales = cann_scales_of(args, case.problem.align)
    else:
        size, ex = tb.get_workspace_size(*args, num_threads=threads)
    assert isinstance(size, int) and size == ex.workspace_size >= 0
    ws, check_ws = guarded_bytes(size, shift=size % 61)
    tb.execute(ws, size, ex)
    check_ws()
    assert ex.state == "consumed"
    _check_result(case.problem, case.gi.view, scales)
    case.gi.check_outside()
    case.go.check_untouched()

    # The same through the CANN names, into a fresh gradInput.
    case.gi.reset()
    status, size2, ex2 = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(*args)
    assert (status, size2 > 0) == (OK, size > 0)
    workspace = aclnn.aclrtMalloc(size2)
    assert aclnn.aclnnUpsampleTrilinear3dBackward(workspace, size2, ex2, None) == OK
    _check_result(case.problem, case.gi.view, cann_scales_of(args, case.problem.align))
    case.gi.check_outside()
    case.go.check_untouched()


def check_one_call(case):
    """upsample_trilinear3d_backward against the oracle."""
    a = case.args
    scales = a.get("scales", (a["scalesD"], a["scalesH"], a["scalesW"]))

    def call():
        return tb.upsample_trilinear3d_backward(
            a["gradOut"], a["inputSize"], output_size=a["outputSize"],
            align_corners=a["alignCorners"], scales=scales, out=a["gradInput"],
            num_threads=a["num_threads"])

    if case.expected:
        _expect_failure(case, call)
        return
    result = call()
    if a["gradInput"] is None:
        # The caller's kind of array back: a torch tensor for a torch tensor.
        torch = sys.modules.get("torch")
        given_tensor = torch is not None and isinstance(a["gradOut"], torch.Tensor)
        kind = torch.Tensor if given_tensor else np.ndarray
        assert isinstance(result, kind) and tuple(result.shape) == case.problem.input_size
        if given_tensor:
            result = result.numpy()
    else:
        assert result is a["gradInput"]
        result = case.gi.view
        case.gi.check_outside()
    _check_result(case.problem, result)
    case.go.check_untouched()


def _record(case):
    """Hypothesis statistics: which faults ran (``--hypothesis-show-statistics``)."""
    event("valid" if not case.expected else "invalid")
    for status, name, _ in case.faults:
        event(f"{name} -> {status}")


ALL_FAULTS = [f for target in sorted(FAULTS) for f in FAULTS[target]] + [f_scales_seq]


@pytest.mark.parametrize("fault", ALL_FAULTS, ids=lambda f: f.__name__[2:])
@fuzz(30)
@given(data=st.data())
def test_fuzz_each_fault(fault, data):
    """Every fault alone, many times, through both entry points and the aclnn names."""
    for one_call in (False, True):
        if fault is f_scales_seq and not one_call:
            continue
        case = data.draw(valid_cases(one_call), label="one call" if one_call else "two phases")
        result = fault(data.draw, case)
        if result is None:
            continue
        case.faults.append(result)
        _record(case)
        (check_one_call if one_call else check_two_phase)(case)


@fuzz(400)
@given(faulty_cases())
def test_fuzz_two_phase(case):
    """get_workspace_size + execute, and the aclnn names: no fault, or one or two."""
    _record(case)
    check_two_phase(case)


@fuzz(300)
@given(faulty_cases(one_call=True))
def test_fuzz_one_call(case):
    """upsample_trilinear3d_backward: no fault, or one or two."""
    _record(case)
    check_one_call(case)


# -- phase two -----------------------------------------------------------------

WS_KINDS = ["alloc", "shifted", "bigger", "bytearray", "memoryview", "float64", "2d", "torch",
            "none", "small", "readonly", "bytes", "noncontig", "object", "junk", "overlap_gi",
            "overlap_go"]
SIZE_KINDS = ["exact", "exact", "npint", "beyond", "smaller", "negative", "junk"]
EX_KINDS = ["ready", "ready", "repeatable", "none", "junk", "consumed", "destroyed"]
STREAM_KINDS = ["none", "none", "stream", "closed", "junk"]


@dataclass
class PhaseTwo:
    ws: str
    shift: int
    size: str
    size_junk: object
    ex: str
    ex_junk: object
    stream: str
    ws_junk: object


@st.composite
def phase_two_specs(draw):
    return PhaseTwo(
        ws=draw(st.sampled_from(WS_KINDS)), shift=draw(st.integers(0, 63)),
        size=draw(st.sampled_from(SIZE_KINDS)),
        size_junk=draw(st.sampled_from([1.0, "64", None, True, np.float64(64), 2**70 + 0.5])),
        ex=draw(st.sampled_from(EX_KINDS)),
        ex_junk=draw(st.sampled_from([object(), "executor", 0, tb.Stream, np.zeros(3)])),
        stream=draw(st.sampled_from(STREAM_KINDS)),
        ws_junk=draw(st.sampled_from(["abc", 7, 7.5, {}, object(), Ellipsis])),
    )


def expected_phase_two(spec, required, go_nonempty, gi_nonempty):
    """The statuses the broken rules of a phase-two call map to (empty: valid)."""
    out = set()
    if spec.ex == "none":
        out.add(NULL)
    elif spec.ex == "junk":
        out.add(INVALID)
    elif spec.ex in ("consumed", "destroyed"):
        out.add(RUNTIME)
    if spec.stream == "junk":
        out.add(INVALID)
    elif spec.stream == "closed":
        out.add(RUNTIME)
    if spec.size == "junk":
        out.add(INVALID)
    elif spec.size in ("smaller", "negative"):
        out.add(RUNTIME)
    elif spec.size == "beyond" and spec.ws != "none":
        out.add(RUNTIME)
    if spec.ws == "none" and required > 0:
        out.add(NULL)
    elif spec.ws in ("object", "junk"):
        out.add(INVALID)
    elif spec.ws == "small" and required > 0:
        out.add(RUNTIME)
    elif spec.ws in ("readonly", "bytes", "noncontig"):
        out.add(RUNTIME)
    elif spec.ws == "overlap_gi" and required > 0 and gi_nonempty:
        out.add(RUNTIME)
    elif spec.ws == "overlap_go" and required > 0 and go_nonempty:
        out.add(RUNTIME)
    return out


def _workspace(spec, size, go_buffer, gi_buffer):
    """(workspace object, guard check or None) for a workspace kind.

    The overlapping kinds are the first ``size`` bytes of an array's own
    buffer, which the caller made long enough.
    """
    n = max(size, 2)
    kind = spec.ws
    if kind == "alloc":
        return tb.alloc_workspace(size), None
    if kind == "shifted":
        return guarded_bytes(size, shift=spec.shift)
    if kind == "bigger":
        return guarded_bytes(size + 100, shift=spec.shift)
    if kind == "bytearray":
        return bytearray(size), None
    if kind == "memoryview":
        return memoryview(bytearray(size)), None
    if kind == "float64":
        return np.empty(-(-size // 8) + 1), None
    if kind == "2d":
        return np.empty((2, -(-size // 2))), None
    if kind == "torch":
        if TORCH is None:
            return tb.alloc_workspace(size), None
        return TORCH.empty(size, dtype=TORCH.uint8), None
    if kind == "none":
        return None, None
    if kind == "small":
        return np.empty(max(size - 1, 0), np.uint8), None
    if kind == "readonly":
        ws = np.zeros(size, np.uint8)
        ws.flags.writeable = False
        return ws, None
    if kind == "bytes":
        return bytes(size), None
    if kind == "noncontig":
        return np.empty(2 * n, np.uint8)[::2], None
    if kind == "object":
        return np.empty(n, dtype=object), None
    if kind == "junk":
        return spec.ws_junk, None
    if kind == "overlap_gi":
        return gi_buffer.view(np.uint8)[:size], None
    if kind == "overlap_go":
        return go_buffer.view(np.uint8)[:size], None
    raise AssertionError(kind)


def _phase_two_case(draw):
    """A valid problem and its two arrays, each in a random layout inside a guarded buffer."""
    p = draw(problems())
    go = Guarded(p.values.shape, p.values.dtype, draw(layouts()), values=p.values)
    gi = Guarded(p.input_size, p.values.dtype, draw(layouts()), fill=np.nan)
    return p, go, gi


def _run_phase_two(api, spec, p, go, gi):
    """Phase one (valid), then phase two as ``spec`` says.

    Returns (status of the launch, workspace size, the executor, a good workspace).
    """
    gi.reset()
    args = (go.view, p.output_size, p.input_size, p.align, *p.scales, gi.view)
    if api == "python":
        size, ex = tb.get_workspace_size(*args)
    else:
        status, size, ex = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(*args)
        assert status == OK
    good_ws = tb.alloc_workspace(size)
    if spec.ex == "repeatable":
        ex.set_repeatable()
    elif spec.ex == "consumed":
        tb.execute(good_ws, size, ex)
        gi.reset()
    elif spec.ex == "destroyed":
        ex.destroy()
    executor = {"none": None, "junk": spec.ex_junk}.get(spec.ex, ex)

    ws, check_ws = _workspace(spec, size, go.buffer, gi.buffer)
    size_arg = {"exact": size, "npint": np.int64(size), "smaller": size - 1,
                "negative": -1 - size, "junk": spec.size_junk}.get(spec.size)
    if spec.size == "beyond":
        nbytes = 0 if ws is None else np.asarray(
            np.frombuffer(ws, np.uint8) if isinstance(ws, (bytes, bytearray, memoryview))
            else ws).nbytes
        size_arg = max(size, nbytes) + 1
    stream = None
    if spec.stream == "stream":
        stream = tb.Stream()
    elif spec.stream == "closed":
        stream = tb.Stream()
        stream.close()
    elif spec.stream == "junk":
        stream = "default"

    if api == "python":
        try:
            tb.execute(ws, size_arg, executor, stream=stream)
            status = OK
        except tb.AclnnError as exc:
            status = exc.status
    else:
        status = aclnn.aclnnUpsampleTrilinear3dBackward(ws, size_arg, executor, stream)
        assert isinstance(status, int)
    if isinstance(stream, tb.Stream):
        stream.synchronize()
        stream.close()
    if check_ws is not None:
        check_ws()
    return status, size, ex, good_ws


@fuzz(500)
@given(st.data(), phase_two_specs())
def test_fuzz_phase_two(data, spec):
    """execute and its aclnn name with random workspaces, sizes, executors and streams."""
    p, go, gi = _phase_two_case(data.draw)
    if spec.ws in ("overlap_gi", "overlap_go"):
        # Give the array's buffer room for a whole workspace after it.
        size, _ = tb.get_workspace_size(go.view, p.output_size, p.input_size, p.align, *p.scales,
                                        gi.view)
        target = gi if spec.ws == "overlap_gi" else go
        layout = dataclasses.replace(target.layout, tail=size // target.buffer.itemsize + 2)
        if target is gi:
            gi = Guarded(p.input_size, p.values.dtype, layout, fill=np.nan)
        else:
            go = Guarded(p.values.shape, p.values.dtype, layout, values=p.values)
    for part in ("ws", "size", "ex", "stream"):
        event(f"{part} {getattr(spec, part)}")
    statuses = {}
    for api in ("python", "aclnn"):
        status, size, ex, good_ws = _run_phase_two(api, spec, p, go, gi)
        expected = expected_phase_two(spec, size, p.values.size > 0, math.prod(p.input_size) > 0)
        statuses[api] = status
        go.check_untouched()
        gi.check_outside()
        # The CANN layer uses CANN's scales rule.
        scales = p.cann_scales_value if api == "aclnn" else p.scales_value
        if not expected:
            assert status == OK, f"{api}: status {status} for a valid call {spec}"
            _check_result(p, gi.view, scales)
            assert ex.state == ("ready" if spec.ex == "repeatable" else "consumed")
            if spec.ex == "repeatable":
                first = gi.view.copy()
                gi.reset()
                tb.execute(good_ws, size, ex)
                assert first.tobytes() == gi.view.tobytes()   # the same bits again
            continue
        assert status in expected, f"{api}: status {status} not among {expected} for {spec}"
        # Failure atomicity: nothing written, and the executor as it was.
        gi.check_untouched()
        if spec.ex in ("ready", "repeatable"):
            assert ex.state == "ready"
            tb.execute(good_ws, size, ex)   # still usable
            _check_result(p, gi.view, scales)
        elif spec.ex in ("consumed", "destroyed"):
            assert ex.state == spec.ex
    assert statuses["python"] == statuses["aclnn"], statuses


# -- anything goes ---------------------------------------------------------------

ANY_ARRAY = hnp.arrays(
    dtype=st.sampled_from([np.float32, np.float64, np.float16, np.int32, np.bool_, np.complex64,
                           np.dtype(">f4"), np.uint8]),
    shape=hnp.array_shapes(min_dims=0, max_dims=6, min_side=0, max_side=3),
)
ANYTHING = st.one_of(
    JUNK_SCALAR, ANY_ARRAY,
    st.lists(st.integers(-3, 8), max_size=6),
    st.tuples(st.integers(-3, 8), st.integers(-3, 8), st.integers(-3, 8)),
    st.lists(st.one_of(st.integers(-3, 8), st.floats(), st.none(), st.booleans()), max_size=6),
)


def _float_dtype_ok(arr):
    return arr.dtype.name in ("float32", "float64", "float16", "bfloat16") and arr.dtype.isnative


def assert_valid_by_contract(go, output_size, input_size, align, scales, gi):
    """An accepted phase-one call must satisfy every rule of the contract."""
    assert go is not None and output_size is not None and input_size is not None
    go = np.asarray(go)
    assert _float_dtype_ok(go) and go.ndim == 5
    assert isinstance(align, (bool, np.bool_))
    out = [int(v) for v in output_size]
    ins = [int(v) for v in input_size]
    assert len(out) == 3 and len(ins) == 5 and tuple(out) == go.shape[2:]
    assert tuple(ins[:2]) == go.shape[:2] and min(ins[2:]) > 0
    for k, s in enumerate(scales):
        assert s is None or (not isinstance(s, (bool, np.bool_)) and math.isfinite(float(s)))
        if s is not None and not align and float(s) > 0:
            assert math.floor(ins[k + 2] * float(s)) == out[k]
    if gi is not None:
        gi = np.asarray(gi)
        assert gi.dtype == go.dtype and gi.shape == tuple(ins) and gi.flags.writeable
        assert not (gi.size and go.size and np.shares_memory(gi, go))


@fuzz(500)
@given(st.data())
def test_fuzz_anything_phase_one(data):
    """Every argument from a wide pool of junk or valid values: success or an AclnnError."""
    case = data.draw(valid_cases())
    names = ["gradOut", "outputSize", "inputSize", "alignCorners", "scalesD", "scalesH",
             "scalesW", "gradInput"]
    for name in names:
        if data.draw(st.integers(0, 3), label=f"replace {name}?") == 0:
            case.args[name] = data.draw(ANYTHING, label=name)
    args = _phase_one_args(case)
    try:
        size, ex = tb.get_workspace_size(*args)
        status = OK
    except tb.AclnnError as exc:
        status = exc.status
        assert status in (NULL, INVALID), exc
        case.gi.check_untouched()
        message = str(exc)
    got = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(*args)
    if got[0] == OK and status != OK:
        # The one rule the layers do not share: CANN's does not check the scales
        # against outputSize.  Accepted there, the run uses CANN's scales rule.
        assert status == INVALID and "is inconsistent with outputSize" in message, message
        size, ex = got[1], got[2]
        tb.execute(tb.alloc_workspace(size), size, ex)
        g = np.asarray(ex.grad_out)
        assert_matches_reference(ex.grad_input, g, ex.grad_input.shape, bool(args[3]),
                                 cann_scales_of(args, bool(args[3])))
        case.go.check_untouched()
        return
    assert got[0] == status
    if status != OK:
        assert got[1:] == (0, None)
        return
    assert_valid_by_contract(*args[:4], args[4:7], args[7])
    # Accepted: the run must give the reference result for what was passed.
    tb.execute(tb.alloc_workspace(size), size, ex)
    g = np.asarray(ex.grad_out)
    scales = [0.0 if s is None else float(s) for s in args[4:7]]
    assert_matches_reference(ex.grad_input, g, ex.grad_input.shape, bool(args[3]), scales)
    case.go.check_untouched()


@fuzz(300)
@given(st.data())
def test_fuzz_anything_aclnn_never_raises(data):
    """Every aclnn function with junk or misplaced real objects: a status, never a raise."""
    g = np.ones((1, 2, 3, 3, 3), np.float32)
    gi = np.zeros((1, 2, 2, 2, 2), np.float32)
    status, size, ex = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
        g, [3, 3, 3], [1, 2, 2, 2, 2], False, 0.0, 0.0, 0.0, gi)
    assert status == OK
    _, stream = aclnn.aclrtCreateStream()
    real = [ex, stream, g, gi, aclnn.aclrtMalloc(size), size, 0, None]
    pool = st.one_of(ANYTHING, st.sampled_from(real))
    calls = {
        "aclnnUpsampleTrilinear3dBackward": 4,
        "aclSetAclOpExecutorRepeatable": 1,
        "aclDestroyAclOpExecutor": 1,
        "aclSetInputTensorAddr": 3,
        "aclSetOutputTensorAddr": 3,
        "aclrtSynchronizeStream": 1,
        "aclrtDestroyStream": 1,
        "aclrtFree": 1,
    }
    for _ in range(data.draw(st.integers(1, 6), label="calls")):
        name = data.draw(st.sampled_from(sorted(calls)), label="function")
        args = [data.draw(pool, label=f"{name} arg {k}") for k in range(calls[name])]
        result = getattr(aclnn, name)(*args)
        assert isinstance(result, int) and result in KNOWN, (name, result)
        assert isinstance(aclnn.aclGetRecentErrMsg(), str)
    size_arg = data.draw(st.one_of(ANYTHING, st.integers(-10, 10**4)), label="aclrtMalloc size")
    buf = aclnn.aclrtMalloc(size_arg)
    assert buf is None or (isinstance(buf, np.ndarray) and buf.nbytes == int(size_arg))
    assert aclnn.aclrtSynchronizeStream(stream) in KNOWN
    aclnn.aclrtDestroyStream(stream)
    # gradOut, read by every run, is never written.
    np.testing.assert_array_equal(g, 1.0)


@fuzz(300)
@given(st.data())
def test_fuzz_executor_methods(data):
    """update_arrays / set_repeatable / destroy / execute in random order with random arguments."""
    g = np.random.default_rng(0).standard_normal((1, 2, 4, 3, 5)).astype(np.float32)
    g_before = g.copy()
    gi = np.full((1, 2, 2, 3, 2), np.nan, np.float32)
    size, ex = tb.get_workspace_size(g, (4, 3, 5), gi.shape, False, 0.0, 0.0, 0.0, gi)
    ws = tb.alloc_workspace(size)
    bound = {"grad_out": g, "grad_input": gi}
    pool = st.one_of(ANYTHING, st.sampled_from(
        [None, g, gi, np.zeros_like(gi), np.zeros_like(g), gi.T, g[..., ::-1]]))
    for _ in range(data.draw(st.integers(1, 8))):
        op = data.draw(st.sampled_from(["update", "repeat", "destroy", "execute", "state"]))
        try:
            if op == "update":
                kw = {k: data.draw(pool, label=k) for k in ("grad_out", "grad_input")
                      if data.draw(st.booleans())}
                ex.update_arrays(**kw)
                for k, v in kw.items():
                    if v is not None:
                        bound[k] = v
            elif op == "repeat":
                ex.set_repeatable()
            elif op == "destroy":
                ex.destroy()
            elif op == "execute":
                tb.execute(ws, size, ex)
                assert_matches_reference(bound["grad_input"], bound["grad_out"], gi.shape)
            else:
                assert ex.state in ("ready", "consumed", "destroyed") and repr(ex)
        except tb.AclnnError as exc:
            assert exc.status in (NULL, INVALID, RUNTIME), exc
    np.testing.assert_array_equal(g, g_before)

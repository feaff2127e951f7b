"""Ascend's precision standards: the per-dtype thresholds, the metrics, the verdicts.

Transcribed from hicann/opbase ``docs/zh/ops_precision_standard/``:
``commercial_standard.md`` (the dual benchmark, section 4.5),
``experimental_standard.md`` and ``mixed_tolerance_standard.md``.  Every
number below is the standard's own; ``docs/golden.md`` says where this
module reads a sentence of the standard one way rather than another.
"""

import math

import numpy as np

from .._core._arrays import numpy_dtype
from ..reference import ulp
from ._dtypes import DTYPES

STANDARDS = ("commercial", "experimental", "mixed")
# The commercial standard's levels: its generation rules (section 2) and its
# bounds (4.5.1) both go by them; the other two standards have none.
LEVELS = ("L0", "L1", "L2")

# Added to |golden| (relative errors) and to the third party's metric (ratios).
EPSILON = 1e-7

# Commercial standard 4.5.1: bounds on MARE, MERE and RMSE ratios (NPU / third party).
RATIO_BOUNDS = {
    "L0": {"mare": 10.0, "mere": 2.0, "rmse": 2.0},
    "L1": {"mare": 5.0, "mere": 1.5, "rmse": 1.5},
    "L2": {"mare": 2.0, "mere": 1.2, "rmse": 1.2},
}
# Commercial standard 4.5.3: ErrorCount_npu / max(ErrorCount_third, 1) <= 2.
SMALL_COUNT_RATIO = 2.0
# Commercial standard 4.5.3: |golden| below the threshold is a small value;
# it is an error when |actual - golden| exceeds the error limit.
SMALL_VALUE = {"float16": (2.0 ** -11, 2.0 ** -16), "bfloat16": (2.0 ** -8, 2.0 ** -16),
               "float32": (2.0 ** -14, 2.0 ** -30)}
# Experimental standard: MERE < T and MARE < 10 T.  Mixed tolerance: rtol = atol = T.
THRESHOLD = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -13}
MARE_FACTOR = 10.0
REQUIRED_MATCHED_RATIO = 0.99
# Mixed tolerance 2.2: max_abs_error_limit, "1e-1 or 32 * ULP" (1e-2 for float32).
ABS_ERROR_LIMIT = {"float16": 1e-1, "bfloat16": 1e-1, "float32": 1e-2}
ULP_LIMIT = 32


def _check_dtype(dtype):
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)} (the standards' types), "
                         f"got {name!r}")
    return name


def _same_special(x, y):
    """Elementwise: both NaN, or equal (so an infinity of the same sign)."""
    return (np.isnan(x) & np.isnan(y)) | (x == y)


def metrics(actual, golden, dtype, reference=None):
    """Every figure the three standards judge, for one result against its golden.

    Parameters
    ----------
    actual : array_like
        The result under test (any float dtype; compared in float64).
    golden : array_like
        The high-precision truth, same number of elements.
    dtype : {"float16", "bfloat16", "float32"}
        The result's storage type: it picks the thresholds.
    reference : array_like, optional
        The third party's result.  Only for the special values: an element
        whose golden (rounded to ``dtype``: beyond its range, an infinity)
        or actual value is NaN or an infinity counts as right when
        ``actual`` equals that golden there, or (given ``reference``) equals
        ``reference`` (commercial standard, 5.3.3).

    Returns
    -------
    dict
        ``elements``; ``special`` (elements where the golden rounded to
        ``dtype`` or actual is not finite) and ``special_mismatches``; over the finite elements with
        ``|golden|`` at or above the dtype's small-value threshold (the
        commercial standard's normal range): ``mare``, ``mere``, ``rmse``;
        over all finite elements (the experimental standard): ``mare_all``,
        ``mere_all``; ``small`` and ``small_errors`` (the small-value
        ErrorCount); ``matched_ratio`` (mixed tolerance, special mismatches
        counted as unmatched), ``max_abs_error`` and ``max_abs_excess`` (the
        largest ``|actual - golden| / max(limit, 32 ulp(golden))``; at most 1
        passes).  Figures over no elements are 0.
    """
    name = _check_dtype(dtype)
    e = _Elements(actual, golden, name, reference)
    finite, right = e.finite, e.right[~e.finite]
    err, rel, gf = e.err[finite], e.rel[finite], e.g[finite]
    normal = e.normal[finite]
    t = THRESHOLD[name]
    matched = int(np.count_nonzero(err <= t + t * np.abs(gf))) + int(np.count_nonzero(right))

    def top(x):
        return float(x.max()) if x.size else 0.0

    def mean(x):
        return float(x.mean()) if x.size else 0.0

    return {
        "elements": int(e.g.size),
        "special": int(right.size),
        "special_mismatches": int(right.size - np.count_nonzero(right)),
        "mare": top(rel[normal]),
        "mere": mean(rel[normal]),
        "rmse": math.sqrt(mean(err[normal] ** 2)),
        "mare_all": top(rel),
        "mere_all": mean(rel),
        "small": int(np.count_nonzero(~normal)),
        "small_errors": int(np.count_nonzero(err[~normal] > SMALL_VALUE[name][1])),
        "matched_ratio": matched / e.g.size if e.g.size else 1.0,
        "max_abs_error": top(err),
        "max_abs_excess": top(e.excess[finite]),
    }


class _Elements:
    """The per-element figures of one result, flat, in float64 (what :func:`metrics` and :func:`worst` read).

    ``finite``: the result and the golden rounded to the dtype are both
    finite; ``right``: where not, the special value is right (5.3.3);
    ``err``, ``rel``, ``excess`` (``|error| / max(limit, 32 ulp)``) and
    ``normal`` (``|golden|`` at or above the small-value threshold) are
    meaningful where ``finite``.
    """

    def __init__(self, actual, golden, name, reference):
        a = np.asarray(actual, dtype=np.float64).ravel()
        g = np.asarray(golden, dtype=np.float64).ravel()
        if a.shape != g.shape:
            raise ValueError(f"actual has {a.size} elements, golden {g.size}")
        # The truth as the result's type can hold it: a golden beyond the type's
        # range is an infinity there, and an NPU that returns it is right.
        with np.errstate(over="ignore"):
            held = g.astype(numpy_dtype(name)).astype(np.float64)
        self.a, self.g = a, g
        self.finite = np.isfinite(a) & np.isfinite(held)
        self.right = _same_special(a, held)
        self.r = None
        if reference is not None:
            self.r = np.asarray(reference, dtype=np.float64).ravel()
            if self.r.shape != g.shape:
                raise ValueError(f"reference has {self.r.size} elements, golden {g.size}")
            self.right |= _same_special(a, self.r)
        with np.errstate(invalid="ignore", over="ignore"):
            self.err = np.abs(a - g)
            self.rel = self.err / (np.abs(g) + EPSILON)
            limit = np.maximum(ABS_ERROR_LIMIT[name],
                               ULP_LIMIT * ulp(np.where(np.isfinite(g), g, 0.0),
                                               numpy_dtype(name)))
            self.excess = self.err / limit
        self.normal = np.abs(g) >= SMALL_VALUE[name][0]


def worst(actual, golden, dtype, standard, count=5, reference=None, small=False):
    """The elements of one result furthest from the golden by the figure ``standard`` judges.

    Elements whose special value (NaN, an infinity) is wrong come first;
    then, by decreasing relative error ``|actual - golden| / (|golden| +
    1e-7)``, the finite elements at or above the small-value threshold
    (``commercial``: the range its MARE, MERE and RMSE cover) or every
    finite element (``experimental``); for ``mixed``, by decreasing
    ``|actual - golden| / max(limit, 32 ulp(golden))``.  Elements without
    error are not listed.

    Parameters
    ----------
    actual, golden : array_like
        Same shape (the logical NCDHW shape of the case).
    dtype : {"float16", "bfloat16", "float32"}
    standard : {"commercial", "experimental", "mixed"}
    count : int
        At most this many elements.
    reference : array_like, optional
        The third party's result: its value at each element is listed, and a
        special value equal to it is right (5.3.3).
    small : bool
        Instead, the small-value errors the commercial standard counts
        (finite elements below the threshold whose ``|actual - golden|``
        exceeds its limit), by decreasing ``|actual - golden|``.

    Returns
    -------
    list of dict
        ``index`` (a tuple into ``golden``'s shape), ``actual``, ``golden``,
        ``abs_error``, ``relative_error`` and, given ``reference``,
        ``third_party``; worst first.
    """
    name = _check_dtype(dtype)
    if standard not in STANDARDS:
        raise ValueError(f"standard must be one of {', '.join(STANDARDS)}, got {standard!r}")
    shape = np.shape(golden)
    e = _Elements(actual, golden, name, reference)
    if small:
        score = np.where(e.finite & ~e.normal & (e.err > SMALL_VALUE[name][1]), e.err, -1.0)
    else:
        score = e.excess if standard == "mixed" else e.rel
        eligible = e.finite & (e.normal if standard == "commercial" else True)
        score = np.where(eligible & (score > 0), score, -1.0)
        score[~e.finite & ~e.right] = np.inf
    count = min(int(count), int(np.count_nonzero(score >= 0)))
    if count <= 0:
        return []
    picked = np.argpartition(-score, count - 1)[:count]
    picked = picked[np.argsort(-score[picked], kind="stable")]
    out = []
    for k in picked.tolist():
        item = {"index": tuple(int(i) for i in np.unravel_index(k, shape)),
                "actual": float(e.a[k]), "golden": float(e.g[k]),
                "abs_error": float(e.err[k]), "relative_error": float(e.rel[k])}
        if e.r is not None:
            item["third_party"] = float(e.r[k])
        out.append(item)
    return out


def ratios(npu, third):
    """The commercial standard's ratios of two :func:`metrics` results (NPU / third party)."""
    out = {k: npu[k] / (third[k] + EPSILON) for k in ("mare", "mere", "rmse")}
    out["small_errors"] = npu["small_errors"] / max(third["small_errors"], 1)
    return out


def verdict(standard, dtype, npu, third=None, level="L0"):
    """Judge one case: ``(passed, reasons)``, each reason naming the figure and its bound.

    Parameters
    ----------
    standard : {"commercial", "experimental", "mixed"}
    dtype : {"float16", "bfloat16", "float32"}
    npu : dict
        :func:`metrics` of the result under test.
    third : dict, optional
        :func:`metrics` of the third party's result (commercial only; required there).
    level : {"L0", "L1", "L2"}
        The commercial standard's level.
    """
    name = _check_dtype(dtype)
    reasons = []
    if npu["special_mismatches"]:
        reasons.append(f"{npu['special_mismatches']} NaN/Inf element(s) differ from the golden"
                       + (" and the third party" if standard == "commercial" else ""))
    if standard == "commercial":
        if third is None:
            raise ValueError("the commercial standard needs the third party's metrics")
        if level not in RATIO_BOUNDS:
            raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
        r = ratios(npu, third)
        for key, bound in RATIO_BOUNDS[level].items():
            if not r[key] <= bound:
                reasons.append(f"{key.upper()} ratio {r[key]:.4g} > {bound:g} ({level})")
        if not r["small_errors"] <= SMALL_COUNT_RATIO:
            reasons.append(f"small-value errors {npu['small_errors']} > {SMALL_COUNT_RATIO:g} x "
                           f"max(third party's {third['small_errors']}, 1)")
    elif standard == "experimental":
        t = THRESHOLD[name]
        if not npu["mere_all"] < t:
            reasons.append(f"MERE {npu['mere_all']:.4g} >= T = 2^{int(math.log2(t))}")
        if not npu["mare_all"] < MARE_FACTOR * t:
            reasons.append(f"MARE {npu['mare_all']:.4g} >= 10 T = {MARE_FACTOR * t:.4g}")
    elif standard == "mixed":
        if not npu["matched_ratio"] >= REQUIRED_MATCHED_RATIO:
            reasons.append(f"matched ratio {npu['matched_ratio']:.6f} < {REQUIRED_MATCHED_RATIO}")
        if not npu["max_abs_excess"] <= 1.0:
            reasons.append(f"max |error| {npu['max_abs_error']:.4g} over the limit "
                           f"max({ABS_ERROR_LIMIT[name]:g}, 32 ulp) by x{npu['max_abs_excess']:.4g}")
    else:
        raise ValueError(f"standard must be one of {', '.join(STANDARDS)}, got {standard!r}")
    return not reasons, reasons


def bounds(standard, dtype, level="L0"):
    """The bounds :func:`verdict` applies, as ``{figure: bound}`` (for reports and plots)."""
    name = _check_dtype(dtype)
    if standard == "commercial":
        return dict(RATIO_BOUNDS[level], small_errors=SMALL_COUNT_RATIO)
    if standard == "experimental":
        return {"mere_all": THRESHOLD[name], "mare_all": MARE_FACTOR * THRESHOLD[name]}
    return {"matched_ratio": REQUIRED_MATCHED_RATIO, "max_abs_excess": 1.0}

"""The outcome of a comparison: :class:`Report`, its console lines, its JSON and its plot."""

import math
import os

import numpy as np

from ._standards import (
    ABS_ERROR_LIMIT,
    SMALL_VALUE,
    THRESHOLD,
    bounds,
)

# Per standard, the figures its verdict bounds: (key, where the case keeps
# it, how the console names it).
FIGURES = {
    "commercial": [("mare", "ratios", "MARE ratio"), ("mere", "ratios", "MERE ratio"),
                   ("rmse", "ratios", "RMSE ratio"),
                   ("small_errors", "ratios", "small-value errors ratio")],
    "experimental": [("mere_all", "metrics", "MERE"), ("mare_all", "metrics", "MARE")],
    "mixed": [("matched_ratio", "metrics", "matched ratio"),
              ("max_abs_excess", "metrics", "max |error| / limit")],
}
# Failing cases shown with their figures and worst elements; the others get one line.
DETAILS = 10


def share(key, value, bound):
    """How much of its bound a figure uses (1 is the bound; the matched ratio counts its misses)."""
    if key == "matched_ratio":
        return (1.0 - value) / (1.0 - bound)
    return value / bound


def _g(x, digits=4):
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def _table(rows, indent):
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) if k == 0 else c.rjust(w)
                               for k, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]


class Report:
    """The outcome of :func:`compare`.

    Attributes
    ----------
    passed : bool
        Every case passed.
    standard, third_party : str
    level : str or None
        The commercial standard's level (None for the other two, which have none).
    cases : list of dict
        Per case: ``id``, ``dtype``, ``format``, ``result_shape``, ``passed``,
        ``reasons`` (each failed bound, named), ``metrics`` and, for the
        commercial standard, ``third_party_metrics`` and ``ratios``; a failing
        case also has ``worst``, its elements furthest from the golden
        (``index`` (N, C, D, H, W), ``element`` (the position in the
        ``.bin`` file), ``actual``, ``golden``, ``abs_error``,
        ``relative_error``, and ``third_party`` for the commercial standard)
        and, when it broke the commercial standard's small-value bound,
        ``worst_small``: the small-value errors, largest first.
    in_set : int
        How many cases the set holds (``len(cases)`` when every one was judged).
    missing : list of str
        With ``compare(..., present=True)``: the ids of the cases not judged
        because their result is missing (``passed`` covers the cases judged).
    listed : int or None
        With ``compare(..., cases=[...])``: how many cases were listed.
    actual : str or None
        The result folder (named where results are missing).
    """

    def __init__(self, standard, level, third_party, cases, in_set=None, missing=(),
                 listed=None, actual=None):
        self.standard, self.level, self.third_party, self.cases = \
            standard, level, third_party, cases
        self.in_set = len(cases) if in_set is None else in_set
        self.missing, self.listed = list(missing), listed
        self.actual = None if actual is None else os.fspath(actual)
        self.passed = all(c["passed"] for c in cases)

    @property
    def failed(self):
        """The cases that failed."""
        return [c for c in self.cases if not c["passed"]]

    def to_dict(self):
        """Every number, JSON-ready (non-finite floats as the strings "inf", "-inf", "nan")."""
        return _jsonable({"standard": self.standard, "level": self.level,
                          "third_party": self.third_party, "passed": self.passed,
                          "cases_total": len(self.cases), "cases_failed": len(self.failed),
                          "cases_in_set": self.in_set, "cases_missing": self.missing,
                          "cases": self.cases})

    def summary(self, details=DETAILS):
        """The console's lines: the verdict, the figures closest to their bounds, each failed case.

        Parameters
        ----------
        details : int
            The first ``details`` failing cases are shown with their figures
            (the result's, the third party's, the ratios and the bounds) and
            their worst elements; each further one by its line of reasons.
        """
        what = {"commercial": f"commercial standard {self.level} (dual benchmark; third party: "
                              f"{self.third_party})",
                "experimental": "experimental standard (single benchmark)",
                "mixed": "mixed tolerance standard (single benchmark)"}[self.standard]
        lines = [f"{what}: {len(self.cases)} cases, {len(self.cases) - len(self.failed)} passed, "
                 f"{len(self.failed)} failed -> {'PASS' if self.passed else 'FAIL'}"]
        lines += self._coverage()
        if self.cases:
            lines.append(self._closest())
        for k, c in enumerate(self.failed):
            lines.append(f"  FAIL {c['id']} {c['dtype']} {c['format']} "
                         f"{tuple(c['result_shape'])}: {'; '.join(c['reasons'])}")
            if k < details:
                lines += self._figures(c) + self._worst(c)
        if len(self.failed) > details:
            lines.append(f"  (figures and worst elements shown for the first {details} failing "
                         f"cases; every case's are in the JSON report)")
        return "\n".join(lines)

    def _coverage(self):
        """A line when the verdict covers fewer cases than the set holds (and why)."""
        if self.missing:
            where = ("the " + str(self.listed) + " cases listed" if self.listed is not None
                     else "the set's " + str(self.in_set) + " cases")
            n = len(self.missing)
            shown = ", ".join(self.missing[:10]) + (f", ... ({n - 10} more)" if n > 10 else "")
            return [f"  not judged: {n} of {where} {'has' if n == 1 else 'have'} no result in "
                    f"{self.actual} ({shown}); this verdict covers the {len(self.cases)} "
                    f"judged"]
        if len(self.cases) < self.in_set:
            ids = ", ".join(c["id"] for c in self.cases[:10]) + (
                f", ... ({len(self.cases) - 10} more)" if len(self.cases) > 10 else "")
            return [f"  judged {len(self.cases)} of the set's {self.in_set} cases (--case): "
                    f"{ids}"]
        return []

    def _bound(self, case, key):
        return bounds(self.standard, case["dtype"], self.level or "L0")[key]

    def _closest(self):
        """One line: per judged figure, the case that comes closest to (or furthest past) its bound."""
        parts = []
        for key, group, name in FIGURES[self.standard]:
            worst = max(self.cases, key=lambda c: share(key, c[group][key], self._bound(c, key)))
            value, bound = worst[group][key], self._bound(worst, key)
            where = worst["id"] if self.standard == "commercial" else \
                f"{worst['id']} {worst['dtype']}"
            parts.append(f"{name} {_g(value)} ({where}; bound {_g(bound)})")
        return "  closest to the bounds: " + ", ".join(parts)

    def _figures(self, c):
        m, name = c["metrics"], c["dtype"]
        if self.standard == "commercial":
            t, r = c["third_party_metrics"], c["ratios"]
            b = self._bound(c, "mare"), self._bound(c, "mere"), self._bound(c, "rmse")
            rows = [("", "result", "third party", "ratio", "bound")]
            for key, label, bound in zip(("mare", "mere", "rmse"), ("MARE", "MERE", "RMSE"), b):
                rows.append((label, f"{m[key]:.4e}", f"{t[key]:.4e}", _g(r[key]), _g(bound)))
            rows.append(("small-value errors", str(m["small_errors"]), str(t["small_errors"]),
                         _g(r["small_errors"]), _g(self._bound(c, "small_errors"))))
        elif self.standard == "experimental":
            rows = [("", "result", "bound"),
                    ("MERE (every finite element)", f"{m['mere_all']:.4e}",
                     f"< {THRESHOLD[name]:.4e}"),
                    ("MARE (every finite element)", f"{m['mare_all']:.4e}",
                     f"< {10 * THRESHOLD[name]:.4e}")]
        else:
            rows = [("", "result", "bound"),
                    ("matched ratio", f"{m['matched_ratio']:.6f}", ">= 0.99"),
                    ("max |error| / max(limit, 32 ulp)", _g(m["max_abs_excess"]), "<= 1"),
                    ("max |error|", _g(m["max_abs_error"]),
                     f"limit {ABS_ERROR_LIMIT[name]:g} or 32 ulp")]
        lines = _table(rows, "      ")
        if m["special"]:
            lines.append(f"      NaN/Inf elements: {m['special']}, {m['special_mismatches']} "
                         f"not as the golden"
                         + (" nor the third party" if self.standard == "commercial" else ""))
        return lines

    def _worst(self, c):
        name = c["dtype"]
        threshold, limit = (int(math.log2(v)) for v in SMALL_VALUE[name])
        by = {"commercial": f"by relative error where |golden| >= 2^{threshold}, the range "
                            f"MARE, MERE and RMSE cover",
              "experimental": "by relative error",
              "mixed": f"by |error| / max({ABS_ERROR_LIMIT[name]:g}, 32 ulp)"}[self.standard]
        lines = _elements(c.get("worst"), f"worst elements (a wrong NaN/Inf first, then {by})")
        return lines + _elements(c.get("worst_small"),
                                 f"small-value errors (|golden| < 2^{threshold}, |error| > "
                                 f"2^{limit}), largest |error| first")


def _elements(worst, heading):
    """A heading and a table of elements (:func:`worst`'s), or nothing for none."""
    if not worst:
        return []
    rows = [("(N, C, D, H, W)", "file element", "actual", "golden", "rel. error")
            + (("third party",) if "third_party" in worst[0] else ())]
    for w in worst:
        rows.append((str(tuple(w["index"])), str(w["element"]), _g(w["actual"], 7),
                     _g(w["golden"], 9), f"{w['relative_error']:.3e}")
                    + ((_g(w["third_party"], 7),) if "third_party" in w else ()))
    return [f"      {heading}:"] + _table(rows, "        ")


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    return value


def plot(report, path):
    """Draw each judged figure's distribution over the cases against its bound (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = FIGURES[report.standard]
    fig, axes = plt.subplots(1, len(figures), figsize=(4 * len(figures), 3.2), squeeze=False)
    for ax, (key, group, _) in zip(axes[0], figures):
        # Figure / bound per case, so every dtype shares one axis and the bound is 1.
        rel = np.array([share(key, c[group][key], report._bound(c, key)) for c in report.cases],
                       dtype=np.float64)
        rel = rel[np.isfinite(rel)]
        ax.hist(np.log10(np.maximum(rel, 1e-12)), bins=40, color="tab:blue")
        ax.axvline(0.0, color="tab:red", label="bound")
        name = "1 - matched ratio" if key == "matched_ratio" else key
        ax.set_xlabel(f"log10({name} / bound)")
        ax.set_ylabel("cases")
        ax.legend()
    fig.suptitle(f"{report.standard} {report.level or ''}: {len(report.cases)} cases")
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)

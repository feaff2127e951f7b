"""Judging results against a set's goldens by one of the three standards."""

import importlib.util
import os

import numpy as np

from ._dtypes import GOLDEN_DTYPE
from ._errors import GoldenError, GoldenFileError, shown
from ._files import actual_name, check_files, file_element, read_array
from ._manifest import read_manifest
from ._paths import input_dir
from ._progress import progress as _progress
from ._report import Report
from ._run import torch_result
from ._standards import (
    LEVELS,
    SMALL_COUNT_RATIO,
    STANDARDS,
    metrics,
    ratios,
    verdict,
    worst,
)

TORCH_THIRD_PARTY = "PyTorch {version} CPU kernel (aten.upsample_trilinear3d{suffix}) in the case's dtype"
# Elements listed per failing case (the worst by the standard's figure).
WORST = 5


def compare(directory, actual, reference=None, standard="commercial", level="L0",
            progress=None, worst=WORST, cases=None, present=False):
    """Judge ``actual/<id>.actual.bin`` against the goldens of ``directory`` by a standard.

    Parameters
    ----------
    directory : str or os.PathLike
        Written by :func:`generate`.
    actual : str or os.PathLike
        One ``<id>.actual.bin`` per case: the result in the case's dtype and
        format, raw little-endian (:func:`write_result` writes it).
    reference : str or os.PathLike, optional
        The commercial standard's third party, ``reference/<id>.actual.bin``
        per case.  By default PyTorch's CPU kernel in the case's dtype
        (PyTorch must be installed).  The other standards have no third party.
    standard : {"commercial", "experimental", "mixed"}
    level : {"L0", "L1", "L2"}
        The commercial standard's bounds (the other standards have no levels).
    progress : bool or file, optional
    worst : int
        Per failing case, list this many of its elements furthest from the
        golden (``Report.cases[k]["worst"]``).
    cases : sequence of str, optional
        Judge only the cases of these ids (default: every case of the set).
    present : bool
        Judge only the cases (of ``cases``, or of the set) whose result
        ``actual`` holds, as an interrupted NPU run leaves them; the others
        are listed in ``Report.missing`` and the verdict covers the cases
        judged.  Default False: a missing result is a problem, named.

    Returns
    -------
    Report

    Raises
    ------
    GoldenFileError
        The manifest breaks its format, or the files do not match it: every
        problem, named (all are checked before any case is judged); with
        ``present``, no case has its result.
    GoldenError
        ``cases`` names an id the set does not hold.
    GoldenError
        The commercial standard without ``reference`` and without PyTorch.
    """
    if standard not in STANDARDS:
        raise ValueError(f"standard must be one of {', '.join(STANDARDS)}, got {standard!r}")
    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    manifest = read_manifest(directory)
    input_dir(actual, "actual", " (the results, <id>.actual.bin)")
    if standard != "commercial":
        reference, level = None, None
    if reference is not None:
        input_dir(reference, "reference", " (the third party's results, <id>.actual.bin)")
    chosen = _chosen(manifest["cases"], cases, directory)
    missing = []
    if present:
        # An interrupted NPU run: judge what it wrote, and say what it did not.
        have = [c for c in chosen if os.path.lexists(os.path.join(actual, actual_name(c)))]
        missing = [c["id"] for c in chosen if c not in have]
        if not have:
            raise GoldenFileError(
                f"--present: none of the {_which(manifest, cases)} has a result in "
                f"{os.fspath(actual)} (<id>.actual.bin)")
        chosen = have
    problems = check_files(directory, chosen, actual, reference)
    if problems:  # every file first: each mismatch is named before any verdict
        absent = [c for c in chosen
                  if not os.path.lexists(os.path.join(actual, actual_name(c)))]
        hint = None
        if absent and len(absent) < len(chosen):
            hint = (f"{len(absent)} results missing from {os.fspath(actual)}: --present "
                    f"judges the {len(chosen) - len(absent)} cases whose result is there "
                    f"(in Python: present=True)")
        raise GoldenFileError(problems, hint)
    third_party = None
    if standard == "commercial":
        if reference is not None:
            third_party = f"results in {os.fspath(reference)}"
        else:
            if importlib.util.find_spec("torch") is None:
                raise GoldenError("the commercial standard's third party: pass --reference "
                                  "RDIR, or install PyTorch for its CPU kernel")
            import torch

            suffix = "_backward" if manifest["op"] == "backward" else ""
            third_party = TORCH_THIRD_PARTY.format(version=torch.__version__, suffix=suffix)
    bar = _progress("compare", len(chosen), progress)
    judged = []
    for k, case in enumerate(chosen):
        judged.append(_judge(directory, actual, reference, standard, level, case, worst))
        bar(k + 1)
    listed = None if cases is None else len(_chosen(manifest["cases"], cases, directory))
    return Report(standard, level, third_party, judged, in_set=len(manifest["cases"]),
                  missing=missing, listed=listed, actual=actual)


def _chosen(entries, ids, directory):
    """The entries of ``ids`` (all when None), in the set's order; an unknown id is named."""
    if ids is None:
        return list(entries)
    if isinstance(ids, str):
        ids = [ids]
    known = {c["id"] for c in entries}
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise GoldenError([f"--case: no case {shown(i)} in "
                           f"{os.path.join(os.fspath(directory), 'manifest.json')}"
                           for i in unknown])
    wanted = set(ids)
    return [c for c in entries if c["id"] in wanted]


def _which(manifest, ids):
    """How a message names the cases considered: the set's, or those listed."""
    n = len(manifest["cases"]) if ids is None else len(set(ids))
    return f"set's {n} cases" if ids is None else f"{n} cases listed"


def _judge(directory, actual, reference, standard, level, case, count):
    shape, fmt, dtype = case["result_shape"], case["format"], case["dtype"]
    what = f"case {case['id']}"
    g = read_array(os.path.join(directory, case["golden"]), GOLDEN_DTYPE, shape, fmt, what)
    a = read_array(os.path.join(actual, actual_name(case)), dtype, shape, fmt, what)
    out = {"id": case["id"], "dtype": dtype, "format": fmt, "result_shape": shape}
    r = None
    if standard == "commercial":
        if reference is not None:
            r = read_array(os.path.join(reference, actual_name(case)), dtype, shape, fmt, what)
        else:
            x = read_array(os.path.join(directory, case["input"]), dtype, case["input_shape"],
                           fmt, what)
            try:
                r = torch_result(case, np.ascontiguousarray(x))
            except RuntimeError as exc:   # PyTorch's refusal: no third party, no verdict
                message = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                raise GoldenError(f"{what}: the third party (PyTorch's CPU kernel) refuses "
                                  f"the case: {message}; pass --reference RDIR") from None
        npu, third = metrics(a, g, dtype, reference=r), metrics(r, g, dtype)
        passed, reasons = verdict(standard, dtype, npu, third, level)
        out.update(metrics=npu, third_party_metrics=third, ratios=ratios(npu, third))
    else:
        npu = metrics(a, g, dtype)
        passed, reasons = verdict(standard, dtype, npu)
        out.update(metrics=npu)
    out.update(passed=passed, reasons=reasons)
    if not passed and count:
        def located(elements):
            return [dict(index=w["index"], element=file_element(w["index"], shape, fmt),
                         **{k: v for k, v in w.items() if k != "index"}) for w in elements]

        out["worst"] = located(worst(a, g, dtype, standard, count, reference=r))
        if standard == "commercial" and out["ratios"]["small_errors"] > SMALL_COUNT_RATIO:
            out["worst_small"] = located(worst(a, g, dtype, standard, count, reference=r,
                                               small=True))
    return out

"""Golden data and Ascend's precision standards: the NPU developer's workbench.

:func:`generate` writes cases and their float64 golden results (the
commercial standard's generation rules per level, or an ATK case file);
:func:`compare` judges results from an NPU (or anything else) against them by
one of the three published standards; :func:`metrics` computes the figures
of one result.  ``python -m trilinear_bwd golden generate|compare`` is the
same from the shell.  ``docs/golden.md`` walks through it.

Examples
--------
>>> import tempfile, trilinear_bwd.golden as golden
>>> d, a = tempfile.mkdtemp(), tempfile.mkdtemp()
>>> manifest = golden.generate(d, cases=4, special=False, actual=a)
>>> golden.compare(d, a, standard="experimental").passed
True
"""

import os
import sys
import time

import numpy as np

from . import _cases, _files, _run, _standards
from ._cases import atk_cases, level_cases
from ._files import GoldenFileError, read_manifest
from ._standards import STANDARDS, bounds, metrics, ratios, verdict

__all__ = ["GoldenFileError", "Report", "atk_cases", "bounds", "compare", "generate",
           "level_cases", "metrics", "ratios", "read_manifest", "verdict"]

TORCH_THIRD_PARTY = "PyTorch {version} CPU kernel (aten.upsample_trilinear3d{suffix}) in the case's dtype"


class _Progress:
    """A one-line progress bar on ``stream`` (stderr), redrawn at most every half second."""

    def __init__(self, what, total, stream):
        self.what, self.total, self.stream = what, total, stream
        self.last = 0.0

    def __call__(self, done):
        if self.stream is None:
            return
        now = time.monotonic()
        if done < self.total and now - self.last < 0.5:
            return
        self.last = now
        width = 30
        filled = width * done // max(self.total, 1)
        self.stream.write(f"\r{self.what} [{'#' * filled}{'.' * (width - filled)}] "
                          f"{done}/{self.total}")
        if done >= self.total:
            self.stream.write("\n")
        self.stream.flush()


def _progress(what, total, progress):
    stream = None
    if progress is True or (progress is None and total >= 200 and sys.stderr.isatty()):
        stream = sys.stderr
    elif progress not in (None, False, True):
        stream = progress
    return _Progress(what, total, stream)


def generate(directory, op="backward", level="L0", dtypes=None, cases=None, seed=0, atk=None,
             special=True, actual=None, progress=None, max_elements=None):
    """Write cases, their inputs and float64 goldens, and ``manifest.json`` into ``directory``.

    Parameters
    ----------
    directory : str or os.PathLike
        Created if absent; ``manifest.json`` is written last, atomically.
    op : {"backward", "forward"}
    level : {"L0", "L1", "L2"}
        The commercial standard's level whose generation rules apply
        (5,000 / 10,000 / 30,000 cases).
    dtypes : sequence of str, optional
        Default: float16, bfloat16, float32.
    cases : int, optional
        Cap on the count of cases (the level's regular cases; with ``atk``,
        the file's first ``cases``).
    seed : int
    atk : str or os.PathLike, optional
        Take the cases of this ATK case file instead of the level's rules.
    special : bool
        Add the special cases (empty tensors, all sizes 1, NaN/Inf inputs).
    actual : str or os.PathLike, optional
        Also write this library's own result of each case as
        ``actual/<id>.actual.bin`` (the format an NPU run writes).
    progress : bool or file, optional
        A progress bar (default: on stderr for 200 cases or more when it is a terminal).
    max_elements : int, optional
        Leave out the cases whose input or result has more elements (ops-cv's
        public ATK file has gradOuts of 2^30 elements: 8 GiB of float64
        golden each); the manifest lists them under ``skipped``.

    Returns
    -------
    dict
        The manifest.  Each case's ``checks`` records this library's run:
        ``deterministic`` (two runs, identical bits) and ``unwritten``
        (output elements still holding the NaN they were pre-filled with).
    """
    from .. import __version__

    if atk is not None:
        chosen = atk_cases(atk, op)
        if dtypes is not None:
            chosen = [c for c in chosen if c["dtype"] in dtypes]
        chosen = chosen if cases is None else chosen[:int(cases)]
        source = {"atk": os.path.basename(os.fspath(atk))}
    else:
        chosen = level_cases(op, level, _standards.DTYPES if dtypes is None else tuple(dtypes),
                             cases, seed, special)
        source = {"rules": "commercial_standard.md section 2", "level": level, "seed": seed,
                  "special_cases": bool(special)}
    skipped = []
    if max_elements is not None:
        def size(c):
            return max(int(np.prod(c["input_shape"])), int(np.prod(c["result_shape"])))

        skipped = [dict(c, elements=size(c)) for c in chosen if size(c) > max_elements]
        chosen = [c for c in chosen if size(c) <= max_elements]
    os.makedirs(directory, exist_ok=True)
    if actual is not None:
        os.makedirs(actual, exist_ok=True)
    bar = _progress("generate", len(chosen), progress)
    entries = []
    for k, case in enumerate(chosen):
        case = dict({"id": f"c{k:05d}"}, **case)
        x = _cases.values(case)
        truth = _run.golden(case, x)
        own, checks = _run.library_result(case, x)
        case.update(input=f"{case['id']}.input.bin", golden=f"{case['id']}.golden.bin",
                    checks=checks)
        _files.write_array(os.path.join(directory, case["input"]), x, case["format"])
        _files.write_array(os.path.join(directory, case["golden"]), truth, case["format"])
        if actual is not None:
            _files.write_array(os.path.join(actual, f"{case['id']}.actual.bin"), own,
                               case["format"])
        entries.append(case)
        bar(k + 1)
    manifest = {"manifest_version": _files.MANIFEST_VERSION, "tool": "trilinear_bwd.golden",
                "version": __version__, "op": op, "source": source,
                "golden_dtype": _files.GOLDEN_DTYPE, "byte_order": "little",
                "result_elements": int(sum(np.prod(c["result_shape"]) for c in entries)),
                "cases": entries, "skipped": skipped}
    _files.write_manifest(directory, manifest)
    return manifest


class Report:
    """The outcome of :func:`compare`.

    Attributes
    ----------
    passed : bool
        Every case passed.
    standard, level, third_party : str
    cases : list of dict
        Per case: ``id``, ``dtype``, ``format``, ``result_shape``, ``passed``,
        ``reasons`` (each failed bound, named), ``metrics`` and, for the
        commercial standard, ``third_party_metrics`` and ``ratios``.
    """

    def __init__(self, standard, level, third_party, cases):
        self.standard, self.level, self.third_party, self.cases = \
            standard, level, third_party, cases
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
                          "cases": self.cases})

    def summary(self):
        """A few lines for a terminal: the standard, the counts, each failed case."""
        what = {"commercial": f"commercial standard {self.level} (dual benchmark; third party: "
                              f"{self.third_party})",
                "experimental": "experimental standard (single benchmark)",
                "mixed": "mixed tolerance standard (single benchmark)"}[self.standard]
        lines = [f"{what}: {len(self.cases)} cases, {len(self.cases) - len(self.failed)} passed, "
                 f"{len(self.failed)} failed -> {'PASS' if self.passed else 'FAIL'}"]
        for c in self.failed:
            lines.append(f"  FAIL {c['id']} {c['dtype']} {c['format']} "
                         f"{tuple(c['result_shape'])}: {'; '.join(c['reasons'])}")
        return "\n".join(lines)


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    return value


def compare(directory, actual, reference=None, standard="commercial", level="L0",
            progress=None):
    """Judge ``actual/<id>.actual.bin`` against the goldens of ``directory`` by a standard.

    Parameters
    ----------
    directory : str or os.PathLike
        Written by :func:`generate`.
    actual : str or os.PathLike
        One ``<id>.actual.bin`` per case: the result in the case's dtype and
        format, raw little-endian.
    reference : str or os.PathLike, optional
        The commercial standard's third party, ``reference/<id>.actual.bin``
        per case.  By default PyTorch's CPU kernel in the case's dtype
        (PyTorch must be installed).
    standard : {"commercial", "experimental", "mixed"}
    level : {"L0", "L1", "L2"}
        The commercial standard's bounds.
    progress : bool or file, optional

    Returns
    -------
    Report

    Raises
    ------
    GoldenFileError
        The files do not match the manifest: a missing file or a wrong size,
        named (every case is checked before any is judged).
    """
    if standard not in STANDARDS:
        raise ValueError(f"standard must be one of {', '.join(STANDARDS)}, got {standard!r}")
    if level not in _standards.LEVELS:
        raise ValueError(f"level must be one of {', '.join(_standards.LEVELS)}, got {level!r}")
    manifest = read_manifest(directory)
    if not os.path.isdir(actual):
        raise GoldenFileError(f"{actual}: not a directory (the results, <id>.actual.bin)")
    if reference is not None and not os.path.isdir(reference):
        raise GoldenFileError(f"{reference}: not a directory (the third party, <id>.actual.bin)")
    cases = manifest["cases"]
    for case in cases:  # the files first: a mismatch is named before any verdict
        for folder, name in ((directory, case["golden"]), (directory, case["input"]),
                             (actual, f"{case['id']}.actual.bin")) + (
                ((reference, f"{case['id']}.actual.bin"),) if reference is not None else ()):
            dtype = _files.GOLDEN_DTYPE if name == case["golden"] else case["dtype"]
            shape = case["input_shape"] if name == case["input"] else case["result_shape"]
            expected = int(np.prod(shape)) * _cases.numpy_dtype(dtype).itemsize
            path = os.path.join(folder, name)
            if not os.path.isfile(path):
                raise GoldenFileError(f"case {case['id']}: missing {path}")
            if os.path.getsize(path) != expected:
                raise GoldenFileError(f"case {case['id']}: {path} has {os.path.getsize(path)} "
                                      f"bytes, expected {expected} ({dtype} x "
                                      f"{int(np.prod(shape))}, shape {tuple(shape)})")
    third_party = None
    if standard == "commercial":
        if reference is not None:
            third_party = f"results in {reference}"
        else:
            import importlib.util

            if importlib.util.find_spec("torch") is None:
                raise GoldenFileError("the commercial standard's third party: pass --reference "
                                      "RDIR, or install PyTorch for its CPU kernel")
            import torch

            suffix = "_backward" if manifest["op"] == "backward" else ""
            third_party = TORCH_THIRD_PARTY.format(version=torch.__version__, suffix=suffix)
    bar = _progress("compare", len(cases), progress)
    judged = []
    for k, case in enumerate(cases):
        judged.append(_judge(directory, actual, reference, standard, level, case))
        bar(k + 1)
    return Report(standard, level, third_party, judged)


def _judge(directory, actual, reference, standard, level, case):
    shape, fmt, dtype = case["result_shape"], case["format"], case["dtype"]
    read = _files.read_array
    g = read(os.path.join(directory, case["golden"]), _files.GOLDEN_DTYPE, shape, fmt,
             f"case {case['id']}")
    a = read(os.path.join(actual, f"{case['id']}.actual.bin"), dtype, shape, fmt,
             f"case {case['id']}")
    out = {"id": case["id"], "dtype": dtype, "format": fmt, "result_shape": shape}
    if standard == "commercial":
        if reference is not None:
            r = read(os.path.join(reference, f"{case['id']}.actual.bin"), dtype, shape, fmt,
                     f"case {case['id']}")
        else:
            x = read(os.path.join(directory, case["input"]), dtype, case["input_shape"], fmt,
                     f"case {case['id']}")
            r = _run.torch_result(case, np.ascontiguousarray(x))
        npu, third = metrics(a, g, dtype, reference=r), metrics(r, g, dtype)
        passed, reasons = verdict(standard, dtype, npu, third, level)
        out.update(metrics=npu, third_party_metrics=third, ratios=ratios(npu, third))
    else:
        npu = metrics(a, g, dtype)
        passed, reasons = verdict(standard, dtype, npu, level=level)
        out.update(metrics=npu)
    out.update(passed=passed, reasons=reasons)
    return out


def plot(report, path):
    """Draw each judged figure's distribution over the cases against its bound (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if report.standard == "commercial":
        figures = [(k, "ratios") for k in ("mare", "mere", "rmse", "small_errors")]
    elif report.standard == "experimental":
        figures = [("mere_all", "metrics"), ("mare_all", "metrics")]
    else:
        figures = [("matched_ratio", "metrics"), ("max_abs_excess", "metrics")]
    fig, axes = plt.subplots(1, len(figures), figsize=(4 * len(figures), 3.2), squeeze=False)
    for ax, (key, group) in zip(axes[0], figures):
        # Figure / bound per case, so every dtype shares one axis and the bound is 1.
        rel = []
        for c in report.cases:
            b = bounds(report.standard, c["dtype"], report.level)[key]
            v = c[group][key]
            rel.append(v / b if key != "matched_ratio" else (1 - v) / (1 - b))
        rel = np.array(rel, dtype=np.float64)
        rel = rel[np.isfinite(rel)]
        ax.hist(np.log10(np.maximum(rel, 1e-12)), bins=40, color="tab:blue")
        ax.axvline(0.0, color="tab:red", label="bound")
        name = "1 - matched ratio" if key == "matched_ratio" else key
        ax.set_xlabel(f"log10({name} / bound)")
        ax.set_ylabel("cases")
        ax.legend()
    fig.suptitle(f"{report.standard} {report.level if report.standard == 'commercial' else ''}"
                 f": {len(report.cases)} cases")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

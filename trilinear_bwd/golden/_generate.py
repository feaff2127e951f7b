"""Writing a golden set: its cases vetted, the folder made ready, the files, the manifest last."""

import math
import os
import stat

import numpy as np

from .._core._arrays import numpy_dtype
from ._cases import OPS, atk_cases, given_cases, level_cases
from ._cases import values as draw_values
from ._dtypes import DTYPES, GOLDEN_DTYPE
from ._errors import GoldenError, GoldenFileError
from ._files import actual_name, write_array
from ._manifest import BYTE_ORDER, FILE_FIELDS, MANIFEST, MANIFEST_VERSION, check_case
from ._manifest import read_manifest
from ._manifest import write_manifest
from ._paths import new_dir
from ._progress import progress as _progress
from ._run import golden, library_result


def generate(directory, op="backward", level="L0", dtypes=None, cases=None, seed=0, atk=None,
             special=True, actual=None, progress=None, max_elements=None, input_size=None,
             output_size=None, formats=None, align_corners=False, scales=None, values=None,
             replace=False):
    """Write cases, their inputs and goldens, and ``manifest.json`` into ``directory``.

    The cases come from one of three sources: the commercial standard's
    generation rules for ``level`` (the default), an ATK case file
    (``atk``), or sizes given here (``input_size`` and ``output_size``, one
    case per dtype and format: ops-cv's ``gen_data.py``).  Each case gets
    ``<id>.input.bin``, ``<id>.golden.bin`` (float64: what the standards
    judge by) and ``<id>.golden.<dtype>.bin`` (the same rounded to the
    case's dtype, for harnesses that read one).

    Parameters
    ----------
    directory : str or os.PathLike
        Created if absent.  A folder that holds anything is refused unless
        ``replace``; ``manifest.json`` is written last, atomically.
    op : {"backward", "forward"}
    level : {"L0", "L1", "L2"}
        The commercial standard's level whose generation rules apply
        (5,000 / 10,000 / 30,000 regular cases).
    dtypes : sequence of str, optional
        Default: float16, bfloat16, float32.
    cases : int, optional
        The first ``cases`` regular cases of the level (the special cases
        come on top unless ``special`` is false), or of the ATK file.
    seed : int
    atk : str or os.PathLike, optional
        Take the cases of this ATK case file instead of the level's rules.
    special : bool
        Add the level's special cases (empty, all sizes 1, NaN/Inf inputs).
    actual : str or os.PathLike, optional
        Also write this library's own result of each case as
        ``actual/<id>.actual.bin`` (the format an NPU run writes); the same
        rule as ``directory`` for a folder that holds anything.
    progress : bool or file, optional
        A progress bar (default: on stderr for 200 cases or more when it is a terminal).
    max_elements : int, optional
        Leave out the cases whose input or result has more elements (ops-cv's
        public ATK file has gradOuts of 2^30 elements: 8 GiB of float64
        golden each); the manifest lists them under ``skipped``.
    input_size : sequence of 5 int, optional
        ``(N, C, D, H, W)`` before upsampling (the backward's ``inputSize``,
        the forward's self): the cases are the sizes given.
    output_size : sequence of 3 int, optional
        ``(D, H, W)`` after upsampling (``outputSize``); with ``input_size``.
    formats : sequence of {"NCDHW", "NDHWC"}, optional
        With ``input_size``: one case per format (default NCDHW).
    align_corners : bool
        With ``input_size``.
    scales : sequence of 3 float, optional
        With ``input_size``: ``scalesD, scalesH, scalesW`` as the CANN call
        takes them (default 0, not given).
    values : str, optional
        With ``input_size``: the input's law (``_cases.VALUE_LAWS``; default
        ``"uniform"``, [-5, 5]).
    replace : bool
        Write into a folder that holds an earlier set: the files its
        manifest lists (and, in ``actual``, those cases' results) are
        removed first, regular files only.  Files no manifest lists stay.
        A path the new set writes that holds anything else (a file no
        manifest lists, a folder, a link) is refused before anything is
        removed: the workbench never writes through a link nor over, or
        removes, a file it did not write.

    Returns
    -------
    dict
        The manifest.  Each case's ``checks`` records this library's run:
        ``deterministic`` (two runs, identical bits) and ``unwritten``
        (output elements still holding the NaN they were pre-filled with).

    Raises
    ------
    GoldenError
        (a ``ValueError``) Arguments that do not go together, cases the CANN
        call refuses (every one named), no case left to write, a folder
        that is not empty without ``replace``, or, with it, a path the new
        set writes that holds what no earlier manifest lists.  Nothing is
        removed or written then.
    """
    return write_set(directory, op=op, level=level, dtypes=dtypes, cases=cases, seed=seed,
                     atk=atk, special=special, actual=actual, progress=progress,
                     max_elements=max_elements, input_size=input_size,
                     output_size=output_size, formats=formats, align_corners=align_corners,
                     scales=scales, values=values, replace=replace)[0]


def choose(op="backward", level="L0", dtypes=None, cases=None, seed=0, atk=None, special=True,
           input_size=None, output_size=None, formats=None, align_corners=False, scales=None,
           values=None, atk_label="atk"):
    """The cases :func:`generate` would write, and the manifest's ``source`` describing them."""
    if op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)}, got {op!r}")
    given = {"output_size": output_size, "formats": formats, "scales": scales, "values": values}
    if input_size is None:
        stray = [k for k, v in given.items() if v is not None] + (
            ["align_corners"] if align_corners else [])
        if stray:
            raise GoldenError(f"{', '.join(stray)}: describe the cases of input_size, "
                              f"which is not given")
    elif atk is not None:
        raise GoldenError("atk, input_size: two sources of cases; give one")
    elif output_size is None:
        raise GoldenError("output_size: missing (input_size's cases need it)")
    if atk is not None:
        try:
            chosen = atk_cases(atk, op, seed)
        except GoldenFileError as exc:
            raise GoldenFileError([f"{atk_label} {p}" for p in exc.problems]) from None
        if dtypes is not None:
            chosen = [c for c in chosen if c["dtype"] in dtypes]
        chosen = chosen if cases is None else chosen[:int(cases)]
        source = {"atk": os.path.basename(os.fspath(atk)), "seed": seed}
    elif input_size is not None:
        chosen = given_cases(op, input_size, output_size, DTYPES if dtypes is None else dtypes,
                             ("NCDHW",) if formats is None else formats, align_corners,
                             (0.0, 0.0, 0.0) if scales is None else scales,
                             "uniform" if values is None else values, seed)
        first = chosen[0]
        source = {"given": {"input_size": list(input_size), "output_size": list(output_size),
                            "align_corners": first["align_corners"], "scales": first["scales"],
                            "values": "uniform" if values is None else values},
                  "seed": seed}
    else:
        chosen = level_cases(op, level, DTYPES if dtypes is None else tuple(dtypes), cases, seed,
                             special)
        source = {"rules": "commercial_standard.md section 2", "level": level, "seed": seed,
                  "special_cases": bool(special)}
    return chosen, source


def _elements(case):
    return max(math.prod(case["input_shape"]), math.prod(case["result_shape"]))


def _new_names(k, case):
    """The names case ``k`` of a new set gets: ``(id, {field: name in the set's folder}, result)``."""
    ident = f"c{k:05d}"
    return ident, {"input": f"{ident}.input.bin", "golden": f"{ident}.golden.bin",
                   "golden_in_dtype": f"{ident}.golden.{case['dtype']}.bin"}, \
        actual_name({"id": ident})


def _is_regular_file(path):
    """True for a regular file that is not a link (``os.path.isfile`` follows links)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _replace_plan(directory, actual, chosen):
    """What replacing the earlier set removes, and every problem that forbids writing the new one.

    Returns ``(plan, problems)``.  ``plan`` is None without an earlier
    manifest, else a dict: ``cases`` (how many it lists), ``files`` and
    ``results`` (the regular files it lists in ``directory``, and those
    cases' results in ``actual``, to remove), ``listed`` (how many case
    files it lists).  A problem is a path the new set would write that
    holds anything else -- a file no manifest lists, a link, a folder --
    since the workbench neither writes through a link nor overwrites (nor,
    on failure, removes) what it did not write: nothing is removed or
    written when there is one.
    """
    manifest_path = os.path.join(directory, MANIFEST)
    plan = None
    if os.path.lexists(manifest_path):
        if not _is_regular_file(manifest_path):
            return None, [f"{manifest_path}: not a regular file (a link or a folder) where "
                          f"the new set's manifest goes; the workbench neither follows links "
                          f"nor removes what it did not write: move it, then run again"]
        try:
            old = read_manifest(directory)
        except GoldenFileError as exc:
            return None, [f"{manifest_path}: the earlier set's manifest cannot be read, so "
                          f"what it lists is unknown; remove its files by hand"] + exc.problems
        files = [os.path.join(directory, c[f]) for c in old["cases"]
                 for f in FILE_FIELDS if f in c]
        results = [os.path.join(actual, actual_name(c)) for c in old["cases"]] \
            if actual is not None else []
        # Only regular files: a link or a folder under a listed name is not
        # the earlier set's file, so it stays (refused below if in the way).
        plan = {"cases": len(old["cases"]), "listed": len(files),
                "files": [p for p in files if _is_regular_file(p)],
                "results": [p for p in results if _is_regular_file(p)]}
    free = {os.path.abspath(p) for p in ([manifest_path] + plan["files"] + plan["results"]
                                         if plan else [])}
    problems = []
    for k, case in enumerate(chosen):
        ident, files, result = _new_names(k, case)
        paths = [os.path.join(directory, name) for name in files.values()]
        paths += [os.path.join(actual, result)] if actual is not None else []
        for path in paths:
            if os.path.lexists(path) and os.path.abspath(path) not in free:
                what = ("a link" if os.path.islink(path) else "a folder" if os.path.isdir(path)
                        else "a file no earlier manifest lists")
                problems.append(f"{path}: {what}, where the new set's case {ident} writes; "
                                f"the workbench writes neither through a link nor over what it "
                                f"did not write: move it, then run again")
    return plan, problems


def _clear(directory, actual, plan):
    """Remove the earlier set's files (``plan``); the lines that say what was removed and kept."""
    notes = []
    if plan is not None:
        for path in [os.path.join(directory, MANIFEST)] + plan["files"] + plan["results"]:
            os.remove(path)
        removed, listed = len(plan["files"]), plan["listed"]
        gone = listed - removed
        kept = f"{removed} of its {listed} case files" if gone else f"its {listed} case files"
        if gone:
            kept += f" ({gone} listed {'was' if gone == 1 else 'were'} not there or not a file)"
        notes.append(f"replaced the earlier set ({plan['cases']} cases): removed {MANIFEST}, "
                     f"{kept} and {len(plan['results'])} results")
    for folder in (directory, actual):
        if folder is None or not os.path.isdir(folder):
            continue
        left = sorted(os.listdir(folder))
        if left:
            named = ", ".join(left[:5]) + (f", ... ({len(left) - 5} more)" if len(left) > 5
                                            else "")
            notes.append(f"{os.fspath(folder)}: {len(left)} file{'s' if len(left) != 1 else ''} "
                         f"no manifest lists {'were' if len(left) != 1 else 'was'} left in "
                         f"place: {named}")
    return notes


def write_set(directory, op="backward", level="L0", dtypes=None, cases=None, seed=0, atk=None,
              special=True, actual=None, progress=None, max_elements=None, input_size=None,
              output_size=None, formats=None, align_corners=False, scales=None, values=None,
              replace=False, labels=("directory", "actual", "atk"), hint="replace=True"):
    """:func:`generate`, also returning the lines that say what was replaced: ``(manifest, notes)``.

    ``labels`` and ``hint`` word the messages (the command line names its options).
    """
    from .. import __version__

    held = new_dir(directory, labels[0], replace, hint)
    held_actual = new_dir(actual, labels[1], replace, hint) if actual is not None else []
    chosen, source = choose(op, level, dtypes, cases, seed, atk, special, input_size,
                            output_size, formats, align_corners, scales, values, labels[2])
    skipped = []
    if max_elements is not None:
        skipped = [dict(c, elements=_elements(c)) for c in chosen if _elements(c) > max_elements]
        chosen = [c for c in chosen if _elements(c) <= max_elements]
    if not chosen:
        raise GoldenError("no case to write" + (f": all {len(skipped)} are over max_elements "
                                                f"{max_elements}" if skipped else ""))
    problems = []
    for k, case in enumerate(chosen):
        label = f"case c{k:05d}" + (f" (ATK case {case['rule']['atk_id']})"
                                    if "atk_id" in case["rule"] else "")
        problems += check_case(case, label, entry=False)
    if problems:
        raise GoldenError(problems)
    plan, problems = _replace_plan(directory, actual, chosen) if held or held_actual \
        else (None, [])
    if problems:
        raise GoldenFileError(problems)
    notes = _clear(directory, actual, plan) if held or held_actual else []
    manifest = {"manifest_version": MANIFEST_VERSION, "tool": "trilinear_bwd.golden",
                "version": __version__, "op": op, "source": source,
                "golden_dtype": GOLDEN_DTYPE, "byte_order": BYTE_ORDER, "result_elements": 0,
                "cases": [], "skipped": skipped}
    written = []
    try:
        _write(directory, actual, chosen, manifest, written,
               _progress("generate", len(chosen), progress))
    except BaseException as exc:
        # Nothing half-written: what this run wrote goes, and so do the folders it made.
        for path in reversed(written):
            try:
                os.rmdir(path) if os.path.isdir(path) else os.remove(path)
            except OSError:
                pass
        if isinstance(exc, OSError):
            raise GoldenFileError(f"{exc.filename or directory}: cannot be written "
                                  f"({exc.strerror or exc}); nothing of the new set was kept") \
                from None
        raise
    return manifest, notes


def _write(directory, actual, chosen, manifest, written, bar):
    """Write every case's files, then the manifest; record each path made in ``written``."""
    for folder in (directory, actual):
        if folder is None:
            continue
        made, path = [], os.path.abspath(folder)
        while not os.path.exists(path):
            made.append(path)
            path = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        written.extend(reversed(made))          # removed leaf first

    def put(folder, name, array, fmt):
        path = os.path.join(folder, name)
        # Created here or not at all ("x": fails on any existing entry,
        # a link included): never written through a link nor over a file
        # this run did not write, and only what it created is removed if
        # it fails (_replace_plan refused such paths already; this holds
        # against anything that appears meanwhile).
        with open(path, "xb") as f:
            written.append(path)
            write_array(f, array, fmt)

    entries = manifest["cases"]
    for k, case in enumerate(chosen):
        ident, files, _ = _new_names(k, case)
        case = dict({"id": ident}, **case)
        x = draw_values(case)
        truth = golden(case, x)
        own, checks = library_result(case, x)
        dtype, fmt = case["dtype"], case["format"]
        case.update(files, checks=checks)
        put(directory, case["input"], x, fmt)
        put(directory, case["golden"], truth, fmt)
        with np.errstate(over="ignore"):  # beyond the dtype's range: its infinity
            put(directory, case["golden_in_dtype"], truth.astype(numpy_dtype(dtype)), fmt)
        if actual is not None:
            put(actual, actual_name(case), own, fmt)
        entries.append(case)
        bar(k + 1)
    manifest["result_elements"] = int(sum(math.prod(c["result_shape"]) for c in entries))
    write_manifest(directory, manifest)

"""``manifest.json``: its fields, the one check of every field, reading and writing it.

A set's manifest is the only description of its files, so :func:`check`
holds it to its format field by field (type, range, known values, presence)
and then as a whole (each case's op is the set's, N and C agree, the CANN
call takes the case, no two cases share an id or a file).  Every problem is
a line naming the case and the field; all are reported, and nothing is
judged, when there is one.  The same check vets cases before ``generate``
writes them.
"""

import json
import os

from .._core._operator import MAX_DIM
from ._cases import DISTRIBUTIONS, FORMATS, OPS, SPECIAL_VALUES, is_finite
from ._dtypes import DTYPES, GOLDEN_DTYPE
from ._errors import GoldenFileError, shown as _shown
from ._paths import input_dir, load_json, write_atomically
from ._paths import plain_name_problem as _plain_name
from ._run import refusal

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
BYTE_ORDER = "little"
# The largest size a shape's element may hold: the operator's per-dimension
# limit (the CANN call refuses more, by name).
MAX_SIZE = MAX_DIM


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _one_of(allowed):
    def check(v):
        if not isinstance(v, str):
            return f"must be a string, one of {', '.join(allowed)}; got {_shown(v)}"
        if v not in allowed:
            return f"must be one of {', '.join(allowed)}, got {_shown(v)}"
        return None
    return check


def _exactly(expected):
    def check(v):
        if type(v) is not type(expected):
            return f"must be {_shown(expected)}, got {_shown(v)} ({type(v).__name__})"
        if v != expected:
            return f"must be {_shown(expected)}, got {_shown(v)}"
        return None
    return check


def _of_type(kind, words):
    def check(v):
        return None if isinstance(v, kind) else f"must be {words}, got {_shown(v)}"
    return check


def _count(v):
    if not _is_int(v):
        return f"must be an integer, got {_shown(v)}"
    return None if v >= 0 else f"must be >= 0, got {v}"


def _flag(v):
    return None if isinstance(v, bool) else f"must be true or false, got {_shown(v)}"


def _sequence(axes, integer):
    """A check of a list of ``len(axes)`` integers >= 0 (shapes) or finite numbers (scales)."""
    kind, one = ("integers", "an integer") if integer else ("numbers", "a number")

    def check(v):
        if not isinstance(v, (list, tuple)):
            return f"must be a list of {len(axes)} {kind} ({', '.join(axes)}), got {_shown(v)}"
        if len(v) != len(axes):
            return (f"must have {len(axes)} elements ({', '.join(axes)}), got {len(v)}: "
                    f"{_shown(v)}")
        for k, x in enumerate(v):
            if not (_is_int(x) if integer else _is_real(x)):
                return f"element {k} ({axes[k]}) must be {one}, got {_shown(x)}"
            if integer and x < 0:
                return f"element {k} ({axes[k]}) must be >= 0, got {x}"
            if integer and x > MAX_SIZE:
                # Beyond the operator's limits (2**20 a dimension), and
                # beyond what NumPy can shape: refused here by name.
                return (f"element {k} ({axes[k]}) must be at most 2**{MAX_SIZE.bit_length() - 1}"
                        f", got {_shown(x)}")
            if not integer and not is_finite(x):
                return f"element {k} ({axes[k]}) must be finite, got {_shown(x)}"
        return None
    return check


_shape = _sequence("NCDHW", integer=True)
_scales = _sequence(("scalesD", "scalesH", "scalesW"), integer=False)


# The rule's optional keys beside its law's parameters.
_RULE_EXTRAS = {"seed": lambda v: _count(v) or (None if v < 2 ** 64 else f"must be < 2^64, got {v}"),
                "outliers": _flag,
                "special": _of_type(str, "a string"),
                "atk_id": lambda v: None if _is_int(v) or isinstance(v, str)
                else f"must be an integer or a string, got {_shown(v)}"}


def _rule(v):
    if not isinstance(v, dict):
        return f"must be an object with a 'distribution', got {_shown(v)}"
    law = v.get("distribution")
    if not isinstance(law, str) or law not in DISTRIBUTIONS:
        return f"distribution must be one of {', '.join(DISTRIBUTIONS)}, got {_shown(law)}"
    for key in DISTRIBUTIONS[law]:
        if key not in v:
            return f"{key}: missing (a {law} law's parameter)"
    for key, value in v.items():
        if key == "distribution":
            continue
        if key in DISTRIBUTIONS[law] and key != "special":
            if not is_finite(value):
                return f"{key} must be a finite number, got {_shown(value)}"
        elif key in _RULE_EXTRAS:
            problem = _RULE_EXTRAS[key](value)
            if problem:
                return f"{key} {problem}"
        else:
            return f"{key}: not a key of a {law} rule"
    if law == "uniform" and v["low"] > v["high"]:
        return f"low must be <= high, got {_shown(v['low'])} > {_shown(v['high'])}"
    if law == "normal" and v["sigma"] < 0:
        return f"sigma must be >= 0, got {_shown(v['sigma'])}"
    if law == "constant" and (not isinstance(v["special"], str) or not all(
            s in SPECIAL_VALUES[:3] for s in v["special"].split(","))):
        return (f"special must be {', '.join(SPECIAL_VALUES[:3])} or several joined by ',', "
                f"got {_shown(v['special'])}")
    return None


def _checks(v):
    if not isinstance(v, dict):
        return f"must be an object {{'deterministic': bool, 'unwritten': int}}, got {_shown(v)}"
    for key, check in (("deterministic", _flag), ("unwritten", _count)):
        if key not in v:
            return f"{key}: missing"
        problem = check(v[key])
        if problem:
            return f"{key} {problem}"
    extra = sorted(set(v) - {"deterministic", "unwritten"})
    return f"{extra[0]}: not a key of checks" if extra else None


def _list_of_objects(v):
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        return f"must be a list of objects, got {_shown(v)}"
    return None


# The set's fields (all required; "cases" is checked case by case).
TOP_FIELDS = {
    "manifest_version": _exactly(MANIFEST_VERSION),
    "tool": _of_type(str, "a string"),
    "version": _of_type(str, "a string"),
    "op": _one_of(OPS),
    "source": _of_type(dict, "an object"),
    "golden_dtype": _exactly(GOLDEN_DTYPE),
    "byte_order": _exactly(BYTE_ORDER),
    "result_elements": _count,
    "cases": None,
    "skipped": _list_of_objects,
}
# A case's call: what generate vets before writing anything.
CALL_FIELDS = {
    "op": _one_of(OPS),
    "dtype": _one_of(DTYPES),
    "format": _one_of(FORMATS),
    "input_shape": _shape,
    "result_shape": _shape,
    "align_corners": _flag,
    "scales": _scales,
    "rule": _rule,
}
# A written case's entry adds its id, its files and this library's checks;
# golden_in_dtype is optional (sets written before it existed lack it).
ENTRY_FIELDS = {"id": _plain_name, "input": _plain_name, "golden": _plain_name,
                "golden_in_dtype": _plain_name, "checks": _checks}
OPTIONAL = ("golden_in_dtype",)
FILE_FIELDS = ("input", "golden", "golden_in_dtype")


def _label(case, k):
    ident = case.get("id") if isinstance(case, dict) else None
    return f"case {ident}" if _plain_name(ident) is None else f"case #{k}"


def check_case(case, label, op=None, entry=True):
    """Every problem with one case, each a line ``"<label>: <field>: <rule>"``.

    Parameters
    ----------
    case : dict
    label : str
        How the lines name the case (``"case c00004"``).
    op : str, optional
        The set's op, which the case's must equal.
    entry : bool
        Check the manifest entry's fields too (id, files, checks), not only
        the call's.
    """
    if not isinstance(case, dict):
        return [f"{label}: must be an object with the fields "
                f"{', '.join(list(CALL_FIELDS) + list(ENTRY_FIELDS))}, got {_shown(case)}"]
    fields = dict(CALL_FIELDS, **ENTRY_FIELDS) if entry else CALL_FIELDS
    problems, good = [], set()
    for field, check in fields.items():
        if field not in case:
            if field not in OPTIONAL:
                problems.append(f"{label}: {field}: missing")
            continue
        problem = check(case[field])
        if problem:
            problems.append(f"{label}: {field}: {problem}")
        else:
            good.add(field)
    if entry:
        problems += [f"{label}: {key}: not a field of a case" for key in case if key not in fields]
    if op is not None and "op" in good and case["op"] != op:
        problems.append(f"{label}: op: must be the set's op {_shown(op)}, "
                        f"got {_shown(case['op'])}")
    shapes = {"input_shape", "result_shape"}
    if shapes <= good and case["input_shape"][:2] != case["result_shape"][:2]:
        problems.append(f"{label}: input_shape, result_shape: N and C must be the same in both, "
                        f"got {tuple(case['input_shape'][:2])} and "
                        f"{tuple(case['result_shape'][:2])}")
    elif set(CALL_FIELDS) <= good:
        refused = refusal(case)
        if refused:
            problems.append(f"{label}: input_shape, result_shape: the CANN call refuses the "
                            f"case: {refused}")
    return problems


def check(manifest, where):
    """Every problem with a manifest, each a line naming ``where``, the case and the field."""
    if not isinstance(manifest, dict):
        return [f"{where}: must be a JSON object, got {type(manifest).__name__}"]
    if "manifest_version" not in manifest:
        return [f"{where}: manifest_version: missing (not a golden manifest)"]
    problem = TOP_FIELDS["manifest_version"](manifest["manifest_version"])
    if problem:  # another version's fields are not these
        return [f"{where}: manifest_version: {problem}"]
    problems = []
    for field, check_field in TOP_FIELDS.items():
        if field not in manifest:
            problems.append(f"{where}: {field}: missing")
        elif check_field is not None:
            problem = check_field(manifest[field])
            if problem:
                problems.append(f"{where}: {field}: {problem}")
    problems += [f"{where}: {key}: not a field of a manifest" for key in manifest
                 if key not in TOP_FIELDS]
    cases = manifest.get("cases")
    if "cases" in manifest and not isinstance(cases, list):
        problems.append(f"{where}: cases: must be a list of cases, got {_shown(cases)}")
        return problems
    if "cases" in manifest and not cases:
        problems.append(f"{where}: cases: empty (no case to judge)")
    op = manifest.get("op") if TOP_FIELDS["op"](manifest.get("op")) is None else None
    ids, files = {}, {}
    for k, case in enumerate(cases or ()):
        label = f"{where}: {_label(case, k)}"
        problems += check_case(case, label, op)
        if not isinstance(case, dict):
            continue
        if _plain_name(case.get("id")) is None:
            if case["id"] in ids:
                problems.append(f"{label}: id: also the id of case #{ids[case['id']]}")
            ids.setdefault(case["id"], k)
        for field in FILE_FIELDS:
            name = case.get(field)
            if _plain_name(name) is None:
                if name in files:
                    problems.append(f"{label}: {field}: {_shown(name)} is also {files[name]}")
                files.setdefault(name, f"{_label(case, k)}'s {field}")
    return problems


def read_manifest(directory):
    """Read ``DIR/manifest.json`` and check every field.

    Parameters
    ----------
    directory : str or os.PathLike

    Returns
    -------
    dict

    Raises
    ------
    GoldenFileError
        The folder or its manifest is missing or unreadable, or the manifest
        breaks its format: every problem, one line each naming the case and
        the field.
    """
    input_dir(directory)
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            manifest = load_json(f)
    except FileNotFoundError:
        raise GoldenFileError(f"{path}: not found (run `golden generate` first)") from None
    except (OSError, ValueError) as exc:
        raise GoldenFileError(f"{path}: unreadable ({exc})") from None
    problems = check(manifest, path)
    if problems:
        raise GoldenFileError(problems)
    return manifest


def write_manifest(directory, manifest):
    """Write ``manifest.json`` last and atomically: a directory never holds half a manifest."""
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")

    write_atomically(os.path.join(directory, MANIFEST), write)

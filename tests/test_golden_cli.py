"""The golden CLI's exit codes, by class: every malformed manifest field and every bad path is exit 2.

A malformed set (any field of the manifest: wrong type, out of range, an
unknown value, missing) and a path option that cannot serve (a directory
where a file is wanted and the reverse, a missing place, an unwritable one)
give exit status 2 and one line on stderr naming the case and the field, or
the option and the path, with no traceback; only a judged result is 0 or 1,
and a bug of the workbench is 3.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from trilinear_bwd import golden
from trilinear_bwd.__main__ import main
from trilinear_bwd.golden import _cli, _manifest

PROG = "python -m trilinear_bwd golden"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A two-case backward set and this library's results: it passes."""
    root = tmp_path_factory.mktemp("golden_cli")
    d, a = root / "set", root / "actual"
    manifest = golden.generate(d, cases=2, dtypes=["float32"], special=False, actual=a)
    # The malformations below name these two cases and their files.
    assert [c["id"] for c in manifest["cases"]] == ["c00000", "c00001"]
    return d, a, manifest


def _run(argv, capsys):
    status = main(["golden"] + [str(v) for v in argv])
    out, err = capsys.readouterr()
    return status, out, err


def _one_error_line(err, verb, *names):
    """Exactly one stderr line, the CLI's error line, naming each of ``names``; no traceback."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{PROG} {verb}: error: "), err
    assert "Traceback" not in err and "161002" not in err, err
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


# ------------------------------------------------------------ every field of a manifest

NAN = float("nan")
# (field, way, value): each way a field can be malformed.  "missing" is
# added for every required field below.
CASE_FIELDS = [
    ("id", "type", 7), ("id", "value", ""), ("id", "value", "../c00000"),
    ("id", "value", ".hidden"), ("id", "range", "c00001"),        # the other case's id
    ("op", "type", 1), ("op", "value", "sideways"), ("op", "range", "forward"),  # not the set's
    ("dtype", "type", 16), ("dtype", "value", "float64"), ("dtype", "value", "fp16"),
    ("format", "type", None), ("format", "value", "NHWDC"), ("format", "value", "ncdhw"),
    ("input_shape", "type", "1,1,4,4,4"), ("input_shape", "type", [1, 1, 2.5, 4, 4]),
    ("input_shape", "type", [1, 1, "4", 4, 4]), ("input_shape", "type", [True, 1, 4, 4, 4]),
    ("input_shape", "range", [1, 1, -4, 4, 4]), ("input_shape", "range", [1, 1, 4, 4]),
    ("input_shape", "range", [1, 1, 4, 4, 4, 4]), ("input_shape", "range", lambda c: c["input_shape"][:2] + [0, 4, 4]),
    ("input_shape", "range", [7, 1, 4, 4, 4]),                    # N not the result's
    ("result_shape", "type", {"N": 1}), ("result_shape", "type", [1, 1, 2, 2, 2.0]),
    ("result_shape", "type", [1, "1", 2, 2, 2]), ("result_shape", "range", [1, 1, 2, -2, 2]),
    ("result_shape", "range", lambda c: c["input_shape"][:2] + [2, 0, 2]),
    ("result_shape", "range", [1, 3, 2, 2, 2]),
    ("result_shape", "range", lambda c: c["input_shape"][:2] + [2 ** 21, 2, 2]),  # CANN's limits
    ("align_corners", "type", "yes"), ("align_corners", "type", 1), ("align_corners", "type", None),
    ("scales", "type", "2,2,2"), ("scales", "type", [2, "2", 2]), ("scales", "type", [2, True, 2]),
    ("scales", "range", [2, 2]), ("scales", "range", [NAN, 2, 2]),
    ("scales", "range", [2, float("inf"), 2]),
    ("input", "type", 3), ("input", "value", "sub/x.bin"), ("input", "value", "../x.bin"),
    ("input", "value", ".x.bin"), ("input", "range", "c00001.input.bin"),  # another case's file
    ("golden", "type", ["c.bin"]), ("golden", "value", "/tmp/x.bin"),
    ("golden", "range", "c00000.input.bin"),                      # its own input's name
    ("golden_in_dtype", "type", 1), ("golden_in_dtype", "value", "a\\b.bin"),
    ("golden_in_dtype", "range", "c00000.golden.bin"),
    ("rule", "type", "uniform"), ("rule", "value", {"distribution": "zipf"}),
    ("rule", "type", {"distribution": "uniform", "low": "a", "high": 1.0}),
    ("rule", "range", {"distribution": "uniform", "low": 5.0, "high": -5.0}),
    ("rule", "range", {"distribution": "normal", "mu": 0.0, "sigma": -1.0}),
    ("rule", "range", {"distribution": "normal", "mu": NAN, "sigma": 1.0}),
    ("rule", "value", {"distribution": "constant", "special": "zero"}),
    ("rule", "missing", {"distribution": "normal", "mu": 0.0}),
    ("rule", "value", {"distribution": "uniform", "low": 0.0, "high": 1.0, "colour": 1}),
    ("rule", "range", {"distribution": "uniform", "low": 0.0, "high": 1.0, "seed": -1}),
    ("rule", "type", {"distribution": "uniform", "low": 0.0, "high": 1.0, "outliers": "yes"}),
    ("checks", "type", "yes"), ("checks", "type", {"deterministic": 1, "unwritten": 0}),
    ("checks", "range", {"deterministic": True, "unwritten": -1}),
    ("checks", "value", {"deterministic": True, "unwritten": 0, "seen": 1}),
    ("checks", "missing", {"deterministic": True}),
    ("colour", "value", "red"),                                   # a field cases do not have
]
CASE_FIELDS += [(f, "missing", None) for f in list(_manifest.CALL_FIELDS)
                + list(_manifest.ENTRY_FIELDS) if f not in _manifest.OPTIONAL]
TOP_FIELDS = [
    ("manifest_version", "type", "1"), ("manifest_version", "type", True),
    ("manifest_version", "value", 2), ("tool", "type", 1), ("version", "type", 1.0),
    ("op", "type", 0), ("op", "value", "sideways"), ("source", "type", "L0"),
    ("golden_dtype", "type", 64), ("golden_dtype", "value", "float32"),
    ("byte_order", "type", 0), ("byte_order", "value", "big"),
    ("result_elements", "type", "5"), ("result_elements", "range", -1),
    ("cases", "type", {}), ("cases", "range", []), ("cases", "type", ["c00000"]),
    ("skipped", "type", {}), ("skipped", "type", [1]), ("extra", "value", 1),
]
TOP_FIELDS += [(f, "missing", None) for f in _manifest.TOP_FIELDS]


def _compare_malformed(good, tmp_path, capsys, mutate):
    d, a, manifest = good
    broken = json.loads(json.dumps(manifest))
    mutate(broken)
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps(broken))   # NaN written as NaN
    return _run(["compare", folder, "--actual", a, "--standard", "mixed", "--no-progress"],
                capsys)


@pytest.mark.parametrize("field, way, value", CASE_FIELDS,
                         ids=[f"{f}-{w}-{k}" for k, (f, w, _) in enumerate(CASE_FIELDS)])
def test_every_case_field_malformed_is_exit_2_naming_case_and_field(good, tmp_path, capsys,
                                                                    field, way, value):
    def mutate(m):
        case = m["cases"][0]
        if way == "missing" and value is None:
            del case[field]
        else:
            case[field] = value(case) if callable(value) else value

    status, out, err = _compare_malformed(good, tmp_path, capsys, mutate)
    assert status == 2 and out == ""
    # A case whose id itself is unusable is named by its position.
    label = "case c00000" if field != "id" or value == "c00001" else "case #0"
    if field == "id" and value == "c00001":
        label = "case c00001"
    line = _one_error_line(err, "compare", "manifest.json", label, f"{field}")
    assert f": {field}" in line or f", {field}" in line


@pytest.mark.parametrize("field, way, value", TOP_FIELDS,
                         ids=[f"{f}-{w}-{k}" for k, (f, w, _) in enumerate(TOP_FIELDS)])
def test_every_set_field_malformed_is_exit_2_naming_the_field(good, tmp_path, capsys,
                                                             field, way, value):
    def mutate(m):
        if way == "missing" and value is None:
            del m[field]
        else:
            m[field] = value

    status, out, err = _compare_malformed(good, tmp_path, capsys, mutate)
    assert status == 2 and out == ""
    line = _one_error_line(err, "compare", "manifest.json")
    assert f"manifest.json: {field}:" in line or "manifest.json: case #0:" in line, line


def test_a_manifest_that_is_not_one(good, tmp_path, capsys):
    d, a, _ = good
    for text, words in (("[1, 2]", "must be a JSON object"), ("{", "unreadable"),
                        ("", "unreadable"), ('{"manifest_version": 1', "unreadable")):
        folder = tmp_path / f"m{len(text)}{text[:1] == '['}"
        folder.mkdir()
        (folder / "manifest.json").write_text(text)
        status, out, err = _run(["compare", folder, "--actual", a, "--no-progress"], capsys)
        assert status == 2
        _one_error_line(err, "compare", "manifest.json", words)


def test_every_problem_of_a_manifest_is_reported(good, tmp_path, capsys):
    def mutate(m):
        m["cases"][0]["format"] = "NHWDC"
        m["cases"][1]["op"] = "sideways"
        del m["cases"][1]["scales"]

    status, _, err = _compare_malformed(good, tmp_path, capsys, mutate)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 4 and "Traceback" not in err
    assert "case c00000: format:" in lines[0] and "case c00001: op:" in lines[1]
    assert "case c00001: scales: missing" in lines[2]
    assert lines[3] == f"{PROG} compare: 3 problems; nothing was judged"


def test_the_unmodified_set_passes_and_optional_fields_may_be_absent(good, tmp_path, capsys):
    d, a, manifest = good
    assert _run(["compare", d, "--actual", a, "--standard", "mixed", "--no-progress"],
                capsys)[0] == 0
    # A set written before the golden in the case's dtype existed is judged as before.
    old = tmp_path / "old"
    shutil.copytree(d, old)
    m = json.loads((old / "manifest.json").read_text())
    for c in m["cases"]:
        os.remove(old / c.pop("golden_in_dtype"))
    (old / "manifest.json").write_text(json.dumps(m))
    status, out, err = _run(["compare", old, "--actual", a, "--standard", "mixed",
                             "--no-progress"], capsys)
    assert (status, err) == (0, "") and "2 passed" in out


# ------------------------------------------------------------ every path option


def _place(tmp_path, place):
    """A path at ``place``: a bad place for one path option or another."""
    a_file = tmp_path / "plain.txt"
    a_file.write_text("x")
    if place == "missing":
        return tmp_path / "nowhere" / "x"
    if place == "under a file":
        return a_file / "x"
    if place == "a file":
        return a_file
    if place == "a directory":
        (tmp_path / "a_dir").mkdir()
        return tmp_path / "a_dir"
    if place == "not empty":
        (tmp_path / "full").mkdir()
        (tmp_path / "full" / "old.bin").write_bytes(b"\0")
        return tmp_path / "full"
    if place == "not JSON":
        (tmp_path / "atk.json").write_text("{")
        return tmp_path / "atk.json"
    assert place == "unwritable"
    folder = tmp_path / "readonly"
    folder.mkdir()
    folder.chmod(0o555)
    return folder / "x"


# Root writes wherever chmod forbids: "under a file" is its unwritable place.
UNWRITABLE = [] if IS_ROOT or not hasattr(os, "geteuid") else ["unwritable"]
# Per option, the places it cannot use: read folders, written files, written
# folders, a read file.
COMPARE_PATHS = [(o, p) for o in ("DIR", "--actual", "--reference")
                 for p in ("missing", "under a file", "a file")] + \
                [(o, p) for o in ("--json", "--plot")
                 for p in ["missing", "under a file", "a directory"] + UNWRITABLE]
GENERATE_PATHS = [(o, p) for o in ("DIR", "--write-actual")
                  for p in ["under a file", "a file", "not empty"] + UNWRITABLE] + \
                 [("--atk", p) for p in ("missing", "under a file", "a directory", "not JSON")]


@pytest.mark.parametrize("option, place", COMPARE_PATHS)
def test_every_compare_path_option_is_exit_2_naming_it(good, tmp_path, capsys, option, place):
    d, a, _ = good
    bad = _place(tmp_path, place)
    argv = {"DIR": [bad, "--actual", a], "--actual": [d, "--actual", bad],
            "--reference": [d, "--actual", a, "--reference", bad],
            "--json": [d, "--actual", a, "--json", bad],
            "--plot": [d, "--actual", a, "--plot", bad]}[option]
    if option != "--reference":
        argv += ["--reference", a]      # no PyTorch needed for the judged path
    status, out, err = _run(["compare"] + argv + ["--no-progress"], capsys)
    assert status == 2 and out == ""
    _one_error_line(err, "compare", str(bad), *([option] if option != "DIR" else []))


@pytest.mark.parametrize("option, place", GENERATE_PATHS)
def test_every_generate_path_option_is_exit_2_naming_it(tmp_path, capsys, option, place):
    bad = _place(tmp_path, place)
    target = tmp_path / "new"
    argv = {"DIR": ["generate", bad, "--cases", "1", "--no-special"],
            "--write-actual": ["generate", target, "--cases", "1", "--no-special",
                               "--write-actual", bad],
            "--atk": ["generate", target, "--atk", bad]}[option]
    before = sorted(os.listdir(tmp_path))
    status, out, err = _run(argv + ["--no-progress"], capsys)
    assert status == 2 and out == ""
    _one_error_line(err, "generate", str(bad), *([option] if option != "DIR" else []))
    assert sorted(os.listdir(tmp_path)) == before        # nothing made or written


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_report_that_cannot_be_written_after_judging_is_exit_2(good, capsys):
    """A place the checks cannot foresee (root may write anywhere but /proc): still 2, not 1."""
    d, a, _ = good
    status, out, err = _run(["compare", d, "--actual", a, "--reference", a, "--json",
                             "/proc/golden-report.json", "--no-progress"], capsys)
    assert status == 2 and "-> PASS" in out
    _one_error_line(err, "compare", "--json /proc/golden-report.json", "cannot be written")
    assert not any(n.startswith(".golden-report") for n in os.listdir("/proc"))


def test_json_naming_a_directory_leaves_a_passing_set_unjudged(good, tmp_path, capsys):
    d, a, _ = good
    status, out, err = _run(["compare", d, "--actual", a, "--reference", a, "--json", tmp_path,
                             "--no-progress"], capsys)
    assert status == 2 and out == ""
    _one_error_line(err, "compare", f"--json {tmp_path}: a directory")


def test_every_bad_path_is_reported_at_once(good, tmp_path, capsys):
    d, a, _ = good
    status, out, err = _run(["compare", d, "--actual", tmp_path / "no", "--reference",
                             tmp_path / "none", "--json", tmp_path, "--no-progress"], capsys)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 4 and "Traceback" not in err
    assert [k for k, w in enumerate(("--actual", "--reference", "--json")) if w in lines[k]] == \
        [0, 1, 2]


# ------------------------------------------------------------ only a verdict is 0 or 1


def test_a_bug_is_exit_3_with_its_traceback(good, capsys, monkeypatch):
    d, a, _ = good

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(_cli, "compare", broken)
    status, _, err = _run(["compare", d, "--actual", a, "--no-progress"], capsys)
    assert status == 3 and "Traceback" in err and "RuntimeError: a bug" in err
    assert err.strip().splitlines()[-1].endswith("is a bug of trilinear_bwd.golden")


def test_in_a_process_of_its_own(good, tmp_path):
    """The real exit statuses and stderr of ``python -m trilinear_bwd golden``."""
    d, a, manifest = good
    broken = json.loads(json.dumps(manifest))
    broken["cases"][0]["input_shape"][2] = 2.5
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps(broken))
    for argv, status in (([folder, "--actual", a], 2), ([d, "--actual", a, "--json", tmp_path], 2),
                         ([d, "--actual", a], 0)):
        result = subprocess.run([sys.executable, "-m", "trilinear_bwd", "golden", "compare"]
                                + [str(v) for v in argv] + ["--standard", "mixed"],
                                capture_output=True, text=True)
        assert result.returncode == status, result.stderr
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == (1 if status else 0)



@pytest.mark.parametrize("flag", ["--json", "--plot"])
@pytest.mark.parametrize("where", ["manifest", "golden", "actual"])
def test_a_report_never_overwrites_the_set_or_its_results(good, tmp_path, capsys, flag, where):
    d, a, manifest = good
    copy, results = tmp_path / "set", tmp_path / "actual"
    shutil.copytree(d, copy)
    shutil.copytree(a, results)
    target = {"manifest": copy / "manifest.json", "golden": copy / "c00000.golden.bin",
              "actual": results / "c00000.actual.bin"}[where]
    before = target.read_bytes()
    status, out, err = _run(["compare", copy, "--actual", results, "--reference", results,
                             flag, target, "--no-progress"], capsys)
    assert status == 2 and out == ""
    _one_error_line(err, "compare", f"{flag} {target}: a file of the set or of its results")
    assert target.read_bytes() == before


def test_json_and_plot_on_one_file(good, tmp_path, capsys):
    d, a, _ = good
    path = tmp_path / "r"
    status, _, err = _run(["compare", d, "--actual", a, "--reference", a, "--json", path,
                           "--plot", path, "--no-progress"], capsys)
    assert status == 2
    _one_error_line(err, "compare", f"--json, --plot {path}: the same file for both")


def test_a_case_the_third_party_refuses_is_exit_2(good, capsys, monkeypatch):
    from trilinear_bwd.golden import _compare

    def refuses(case, x):
        raise RuntimeError("Input and output sizes should be greater than 0\nmore")

    monkeypatch.setattr(_compare, "torch_result", refuses)
    monkeypatch.setattr(_compare.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setitem(sys.modules, "torch", type(sys)("torch"))
    sys.modules["torch"].__version__ = "0"
    d, a, _ = good
    status, out, err = _run(["compare", d, "--actual", a, "--no-progress"], capsys)
    assert status == 2 and out == ""
    _one_error_line(err, "compare", "case c00000: the third party (PyTorch's CPU kernel) "
                    "refuses the case: Input and output sizes should be greater than 0; pass "
                    "--reference RDIR")


# ------------------------------------------------------------ file content beyond Python's limits

# Values a file can hold that Python's numbers, recursion or the operator's
# sizes cannot take as they are, and ordinary wrong ones.
DEEP = 100_000
_DEEP_MARK = "@@deep@@"
HOSTILE = [2 ** 70, -2 ** 70, 2 ** 63, 2 ** 64 + 1, 10 ** 400, -10 ** 400, 1e308, -1e308,
           float("inf"), float("nan"), 5e-324, -1, 0, 1.5, True, None, "", "../escape",
           "x" * 5000, [], {}, [2 ** 70] * 5, [10 ** 400] * 3, _DEEP_MARK]


def _hostile_json(document):
    """``document`` as JSON text, with every ``_DEEP_MARK`` a list nested ``DEEP`` levels."""
    return json.dumps(document).replace(json.dumps(_DEEP_MARK), "[" * DEEP + "]" * DEEP)


def _places(node, path=()):
    """Every place in a JSON document: ``path`` (keys and indices) to each node but the root."""
    items = node.items() if isinstance(node, dict) else \
        enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        yield path + (key,)
        yield from _places(child, path + (key,))


def _mutated(document, path, value):
    copy = json.loads(json.dumps(document))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return copy


def _only_workbench_errors(call):
    """Run ``call``; an exception other than the workbench's own fails the test."""
    try:
        call()
    except golden.GoldenError as exc:
        assert exc.problems and all(isinstance(p, str) and p for p in exc.problems)
        return exc
    return None


# The default run's values: those first reported and a container where a
# value is wanted (every hostile value in the full run).
HOSTILE_DEFAULT = [2 ** 70, 10 ** 400, -10 ** 400, None, "x" * 5000, [], {}, _DEEP_MARK]


def _mutations(document, every):
    """``(path, value)``: every place of ``document`` with each hostile value."""
    return [(p, v) for p in _places(document) for v in (HOSTILE if every else HOSTILE_DEFAULT)]


def test_no_manifest_content_reaches_a_python_exception(good, tmp_path, capsys):
    """The class: whatever a manifest holds, read_manifest and read_case
    raise the workbench's own error, and compare ends in 0, 1 or 2, never 3."""
    d, a, manifest = good
    folder = tmp_path / "hostile"
    shutil.copytree(d, folder)
    from conftest import FULL

    for path, value in _mutations(manifest, FULL):
        broken = _mutated(manifest, path, value)
        (folder / "manifest.json").write_text(_hostile_json(broken))
        where = f"{'.'.join(map(str, path))} = {str(value)[:20]}"
        refused = _only_workbench_errors(lambda: golden.read_manifest(folder))
        for k, entry in enumerate(broken["cases"] if isinstance(broken.get("cases"), list)
                                  else ()):
            if isinstance(entry, dict) and _DEEP_MARK in json.dumps(entry):
                # As deep as Python's JSON reader reads, then deeper than repr goes.
                for depth in (900, 5000):
                    deep = []
                    for _ in range(depth):
                        deep = [deep]
                    _only_workbench_errors(lambda: golden.read_case(folder, json.loads(
                        json.dumps(entry).replace(json.dumps(_DEEP_MARK), "null")) | {
                        "scales": deep}))
            _only_workbench_errors(lambda: golden.read_case(folder, entry))
            for ident in ("c00000", "c00001"):
                _only_workbench_errors(lambda: golden.read_case(folder, ident))
        if refused is not None:
            status, out, err = _run(["compare", folder, "--actual", a, "--standard", "mixed",
                                     "--no-progress"], capsys)
            assert status == 2 and "Traceback" not in err, (where, err)


@pytest.mark.parametrize("text, field", [
    ('"input_shape": [1, 1, 4, 4, %d]' % 2 ** 70, "input_shape"),
    ('"scales": [1%s, 0, 0]' % ("0" * 400), "scales"),
    ('"mu": -1%s' % ("0" * 400), "rule"),
])
def test_the_issue_s_manifests_are_exit_2_naming_the_field(good, tmp_path, capsys, text, field):
    d, a, manifest = good
    folder = tmp_path / "hostile"
    shutil.copytree(d, folder)
    broken = json.loads(json.dumps(manifest))
    case = broken["cases"][0]
    case["rule"] = {"distribution": "normal", "mu": 0.0, "sigma": 1.0, "seed": 1}
    key = text.split(":")[0].strip('"')
    placeholder = "@@here@@"
    if key == "mu":
        case["rule"]["mu"] = placeholder
    else:
        case[key] = placeholder
    (folder / "manifest.json").write_text(
        json.dumps(broken).replace(f'"{key}": "{placeholder}"', text))
    status, out, err = _run(["compare", folder, "--actual", a, "--no-progress"], capsys)
    assert status == 2, err
    _one_error_line(err, "compare", "case c00000", field)


def test_a_manifest_nested_too_deep_is_exit_2(good, tmp_path, capsys):
    d, a, _ = good
    folder = tmp_path / "deep"
    folder.mkdir()
    (folder / "manifest.json").write_text("[" * DEEP + "]" * DEEP)
    status, out, err = _run(["compare", folder, "--actual", a, "--no-progress"], capsys)
    assert status == 2
    line = _one_error_line(err, "compare", "manifest.json", "nested")
    assert line.count("unreadable") == 1, line
    with pytest.raises(golden.GoldenFileError, match="nested"):
        golden.read_manifest(folder)


def test_no_atk_file_content_reaches_a_python_exception(tmp_path):
    """The same class for an ATK case file: reading it and vetting its cases (what
    ``generate --atk`` does before writing) raise only the workbench's own errors."""
    from conftest import FULL
    from test_golden import ND, _atk_case

    from trilinear_bwd.golden import _generate

    document = [_atk_case(0, "fp16", [1, 2, 3, 4, 2], ND, [5, 5, 5], False),
                {**_atk_case(1, "bf16", [2, 1, 2, 2, 2], [-2, 2], [3, 4, 5], True),
                 "inputs": _atk_case(1, "bf16", [2, 1, 2, 2, 2], [-2, 2], [3, 4, 5], True)[
                     "inputs"][:4] + [{"name": "scale_factor", "range_values": 1.5}]}]
    path = tmp_path / "atk.json"
    for place, value in _mutations(document, FULL):
        path.write_text(_hostile_json(_mutated(document, place, value)))
        _only_workbench_errors(lambda: _generate.choose(atk=path))
        for op in ("backward", "forward"):
            try:
                chosen = golden.atk_cases(path, op)
            except golden.GoldenError:
                continue
            for case in chosen:
                _manifest.check_case(case, "case", entry=False)

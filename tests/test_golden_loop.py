"""The NPU developer's daily loop: one case from the command line, goldens in the
case's dtype, failures shown element by element, every bad file reported, options that do
nothing saying so, regeneration without stale files, the NPU side's reader and writer; and
the workbench's modules importing each other in one direction only."""

import ast
import doctest
import importlib
import importlib.util
import json
import math
import os
import pathlib
import re
import shutil

import numpy as np
import pytest

import trilinear_bwd as tb
from trilinear_bwd import aclnn, golden
from trilinear_bwd.__main__ import main
from trilinear_bwd._core._status import InvalidArgumentError
from trilinear_bwd.golden import _cases, _files, _report, _standards

# Every dtype and format with the special cases (empty, sizes 1, NaN/Inf): 36 + 57 cases.
from test_golden import generated  # noqa: F401  (a fixture)

HAS_TORCH = importlib.util.find_spec("torch") is not None
PROG = "python -m trilinear_bwd golden"
GOLDEN_DIR = pathlib.Path(golden.__file__).parent


def _run(argv, capsys):
    status = main(["golden"] + [str(v) for v in argv])
    out, err = capsys.readouterr()
    return status, out, err


def _bits(array):
    return np.ascontiguousarray(array).view(f"u{array.dtype.itemsize}")


# ------------------------------------------------------------ 1. one case from the command line


@pytest.mark.parametrize("op", ["backward", "forward"])
def test_one_case_from_the_command_line(tmp_path, capsys, op):
    d = tmp_path / "one"
    status, out, err = _run(["generate", d, "--op", op, "--input-size", "(1,2,3,4,5)",
                             "--output-size", "(6,8,10)", "--dtype", "float32",
                             "--no-progress"], capsys)
    assert (status, err) == (0, "")
    names = ("gradOut", "gradInput") if op == "backward" else ("self", "out")
    small, large = (1, 2, 3, 4, 5), (1, 2, 6, 8, 10)
    shapes = (large, small) if op == "backward" else (small, large)
    lines = out.splitlines()
    assert lines[0] == f"1 {op} case ({math.prod(shapes[1])} result elements) in {d}: the sizes given"
    assert lines[1] == (f"  c00000 float32 NCDHW: {names[0]} {shapes[0]} -> {names[1]} "
                        f"{shapes[1]}, align_corners false, scales (0.0, 0.0, 0.0)")
    manifest = golden.read_manifest(d)
    (case,) = manifest["cases"]
    assert (tuple(case["input_shape"]), tuple(case["result_shape"])) == shapes
    assert manifest["source"]["given"] == {"input_size": list(small), "output_size": [6, 8, 10],
                                           "align_corners": False, "scales": [0.0, 0.0, 0.0],
                                           "values": "uniform"}
    x = _files.read_array(d / case["input"], "float32", case["input_shape"], "NCDHW", "")
    g = _files.read_array(d / case["golden"], "float64", case["result_shape"], "NCDHW", "")
    wide = x.astype(np.float64)
    expect = (tb.upsample_trilinear3d_backward(wide, list(small)) if op == "backward"
              else tb.upsample_trilinear3d(wide, [6, 8, 10]))
    assert np.array_equal(g, expect)
    assert -5 <= x.min() and x.max() <= 5


def test_a_few_cases_from_the_command_line(tmp_path, capsys):
    d = tmp_path / "few"
    status, out, err = _run(["generate", d, "--input-size", "1,1,4,4,4", "--output-size",
                             "[8, 8, 8]", "--dtype", "float16", "--dtype", "bfloat16",
                             "--format", "NCDHW", "--format", "NDHWC", "--align-corners",
                             "--scales", "(2,2,2)", "--values=-inf", "--seed", "3",
                             "--write-actual", tmp_path / "a", "--no-progress"], capsys)
    assert (status, err) == (0, "")
    cases = golden.read_manifest(d)["cases"]
    assert [(c["dtype"], c["format"]) for c in cases] == [
        ("float16", "NCDHW"), ("float16", "NDHWC"), ("bfloat16", "NCDHW"), ("bfloat16", "NDHWC")]
    assert all(c["align_corners"] and c["scales"] == [2.0, 2.0, 2.0] for c in cases)
    assert all(c["rule"]["distribution"] == "constant" and c["rule"]["special"] == "-inf"
               for c in cases)
    assert len({c["rule"]["seed"] for c in cases}) == 4
    assert np.all(_cases.values(cases[0]).astype(np.float64) == -np.inf)
    assert sum(line.startswith("  c0000") for line in out.splitlines()) == 4
    assert golden.compare(d, tmp_path / "a", standard="mixed").passed


@pytest.mark.parametrize("argv, words", [
    (["--input-size", "(1,1,4,4)", "--output-size", "8,8,8"],
     "argument --input-size: must be 5 integers (N, C, D, H, W), got [1, 1, 4, 4]"),
    (["--input-size", "1,1,0,4,4", "--output-size", "8,8,8"],
     "argument --input-size: D must be >= 1, got 0"),
    (["--input-size", "1,1,4,4,4", "--output-size", "8,8,x"],
     "argument --output-size: W must be an integer, got 'x'"),
    (["--input-size", "1,1,4,4,4", "--output-size", "8,8,2.5"],
     "argument --output-size: W must be an integer, got '2.5'"),
    (["--input-size", "1,1,4,4,4", "--output-size", "8,8,8", "--scales", "1,nan,1"],
     "argument --scales: scalesH must be a finite number, got nan"),
    (["--input-size", "1,1,4,4,4", "--output-size", "8,8,8", "--scales", "1,1"],
     "argument --scales: must be 3 numbers"),
    (["--output-size", "8,8,8"],
     "--output-size: describe the cases of --input-size, which is not given"),
    (["--format", "NDHWC", "--align-corners", "--values", "normal"],
     "--format, --align-corners, --values: describe the cases of --input-size"),
    (["--input-size", "1,1,4,4,4"], "--output-size: missing"),
    (["--input-size", "1,1,4,4,4", "--output-size", "8,8,8", "--atk", "x.json"],
     "--atk, --input-size: two sources of cases; give one"),
    (["--op", "forward", "--input-size", "1,0,4,4,4", "--output-size", "8,8,8"],
     "case c00000: input_shape, result_shape: the CANN call refuses the case: self C must be > 0"),
])
def test_bad_command_line_cases_are_exit_2_named(tmp_path, capsys, argv, words):
    d = tmp_path / "bad"
    with pytest.raises(SystemExit) if words.startswith("argument") else _no_raise() as exc:
        status, out, err = _run(["generate", d, "--dtype", "float32", "--no-progress"] + argv,
                                capsys)
    if words.startswith("argument"):
        assert exc.value.code == 2
        err = capsys.readouterr().err
    else:
        assert status == 2
    assert words in err and "Traceback" not in err, err
    assert not d.exists()


class _no_raise:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_given_cases_api_names_its_arguments():
    with pytest.raises(golden.GoldenError, match=r"input_size: D must be >= 1, got 0"):
        golden.given_cases("backward", (1, 1, 0, 2, 2), (4, 4, 4))
    with pytest.raises(golden.GoldenError, match=r"output_size: must be 3 integers"):
        golden.given_cases("backward", (1, 1, 2, 2, 2), (4, 4))
    with pytest.raises(golden.GoldenError, match=r"formats: must be a non-empty list"):
        golden.given_cases("backward", (1, 1, 2, 2, 2), (4, 4, 4), formats=["NHWDC"])
    with pytest.raises(golden.GoldenError, match=r"values: must be one of"):
        golden.given_cases("backward", (1, 1, 2, 2, 2), (4, 4, 4), values="zipf")
    with pytest.raises(golden.GoldenError, match=r"scales: scalesW must be a finite number"):
        golden.given_cases("backward", (1, 1, 2, 2, 2), (4, 4, 4), scales=(1, 1, float("inf")))
    cases = golden.given_cases("forward", (2, 3, 2, 2, 2), (4, 4, 4), dtypes=["float32"],
                               formats=["NCDHW", "NDHWC"])
    assert [(c["input_shape"], c["result_shape"], c["format"]) for c in cases] == [
        ([2, 3, 2, 2, 2], [2, 3, 4, 4, 4], "NCDHW"), ([2, 3, 2, 2, 2], [2, 3, 4, 4, 4], "NDHWC")]


# ------------------------------------------------------------ 2. goldens in the case's dtype


def test_golden_in_the_case_dtype_beside_the_float64_one(generated):
    d, _, manifest = generated
    for c in manifest["cases"]:
        assert c["golden_in_dtype"] == f"{c['id']}.golden.{c['dtype']}.bin"
        dtype = _cases.numpy_dtype(c["dtype"])
        rounded = _files.read_array(d / c["golden_in_dtype"], dtype, c["result_shape"],
                                    c["format"], "")
        g = _files.read_array(d / c["golden"], "float64", c["result_shape"], c["format"], "")
        with np.errstate(over="ignore"):
            assert np.array_equal(_bits(rounded), _bits(g.astype(dtype))), c["id"]
        # A harness reading the file alone gets the same elements in the file's order.
        flat = np.fromfile(d / c["golden_in_dtype"], dtype=dtype.newbyteorder("<"))
        assert np.array_equal(_bits(flat), _bits(_files.to_file_order(rounded, c["format"])).ravel())


def test_a_short_golden_in_dtype_is_a_named_file_error(generated, tmp_path, capsys):
    d, a, manifest = generated
    copy = tmp_path / "set"
    shutil.copytree(d, copy)
    case = manifest["cases"][5]
    path = copy / case["golden_in_dtype"]
    path.write_bytes(path.read_bytes()[:-2])
    status, _, err = _run(["compare", copy, "--actual", a, "--standard", "mixed",
                           "--no-progress"], capsys)
    assert status == 2
    assert f"case {case['id']}: {path} (the golden in the case's dtype) has" in err


# ------------------------------------------------------------ 3. the failure shown


@pytest.fixture(scope="module")
def two_cases(tmp_path_factory):
    """A float32 NCDHW and a float16 NDHWC case, with this library's results."""
    root = tmp_path_factory.mktemp("fail")
    d, a = root / "set", root / "actual"
    golden.generate(d, input_size=(1, 3, 4, 5, 6), output_size=(8, 10, 12),
                    dtypes=["float32", "float16"], formats=["NCDHW", "NDHWC"], actual=a)
    return d, a, golden.read_manifest(d)


def _perturbed(two_cases, tmp_path, index=(0, 1, 2, 3, 4), case_id="c00003"):
    """The results with one element of ``case_id`` (float16 NDHWC) moved to 1.5 x its golden."""
    d, a, manifest = two_cases
    copy = tmp_path / "a"
    shutil.copytree(a, copy)
    case = next(c for c in manifest["cases"] if c["id"] == case_id)
    g = _files.read_array(d / case["golden"], "float64", case["result_shape"], case["format"], "")
    r = _files.read_array(copy / f"{case_id}.actual.bin", case["dtype"], case["result_shape"],
                          case["format"], "").copy()
    r[index] = g[index] * 1.5
    _files.write_array(copy / f"{case_id}.actual.bin", r, case["format"])
    return copy, case, g[index], r[index]


@pytest.mark.parametrize("standard", ["commercial", "experimental", "mixed"])
def test_a_failing_case_shows_its_figures_and_worst_elements(two_cases, tmp_path, capsys,
                                                             standard):
    d, a, manifest = two_cases
    copy, case, g, r = _perturbed(two_cases, tmp_path)
    status, out, err = _run(["compare", d, "--actual", copy, "--standard", standard, "--json",
                             tmp_path / "r.json", "--no-progress"]
                            + (["--reference", a] if standard == "commercial" else []), capsys)
    assert (status, err) == (1, "")
    lines = out.splitlines()
    assert lines[0].endswith("4 cases, 3 passed, 1 failed -> FAIL")
    assert lines[1].startswith("  closest to the bounds: ")
    fail = lines.index(next(x for x in lines if x.startswith("  FAIL c00003 float16 NDHWC "
                                                              "(1, 3, 4, 5, 6): ")))
    table = lines[fail + 1:]
    heads = {"commercial": ["result", "third party", "ratio", "bound"],
             "experimental": ["result", "bound"], "mixed": ["result", "bound"]}[standard]
    assert re.split(r"\s{2,}", table[0].strip()) == heads
    if standard == "commercial":
        for k, name in enumerate(("MARE", "MERE", "RMSE", "small-value errors")):
            assert table[1 + k].startswith(f"      {name} ")
            assert len(table[1 + k].split()) == 4 + len(name.split())
    worst_at = next(k for k, x in enumerate(table) if x.startswith("      worst elements (a "))
    header, first = table[worst_at + 1].strip(), table[worst_at + 2].strip()
    assert header.startswith("(N, C, D, H, W)  file element") and "rel. error" in header
    assert first.startswith("(0, 1, 2, 3, 4) ")
    element = _files.file_element((0, 1, 2, 3, 4), case["result_shape"], "NDHWC")
    assert element == ((2 * 5 + 3) * 6 + 4) * 3 + 1
    words = first.split(") ")[1].split()
    assert int(words[0]) == element
    assert float(words[1]) == pytest.approx(float(r), rel=1e-6)
    assert float(words[2]) == pytest.approx(float(g), rel=1e-8)
    assert float(words[3]) == pytest.approx(abs(float(r) - g) / (abs(g) + 1e-7), rel=1e-3)
    report = json.loads((tmp_path / "r.json").read_text())
    (failed,) = [c for c in report["cases"] if not c["passed"]]
    assert failed["worst"][0]["index"] == [0, 1, 2, 3, 4]
    assert failed["worst"][0]["element"] == element
    assert all("worst" not in c for c in report["cases"] if c["passed"])
    assert report["level"] == ("L0" if standard == "commercial" else None)


@pytest.mark.parametrize("standard", ["commercial", "experimental", "mixed"])
def test_a_passing_run_prints_its_closest_figures(two_cases, capsys, standard):
    d, a, manifest = two_cases
    status, out, err = _run(["compare", d, "--actual", a, "--standard", standard,
                             "--no-progress"] + (["--reference", a] if standard == "commercial"
                                                 else []), capsys)
    lines = out.splitlines()
    assert status == 0 and len(lines) == 2 and lines[0].endswith("-> PASS")
    names = [n for _, _, n in _report.FIGURES[standard]]
    closest = lines[1]
    assert closest.startswith("  closest to the bounds: ")
    assert [p.split(" (")[0].rsplit(" ", 1)[0] for p in
            closest[len("  closest to the bounds: "):].split("), ")] == names
    ids = {c["id"] for c in manifest["cases"]}
    assert all(p.split("(")[1].split()[0].rstrip(";") in ids
               for p in closest.split(": ", 1)[1].split("), "))


def test_more_failing_cases_than_details_get_one_line_each(two_cases, tmp_path):
    d, a, manifest = two_cases
    copy, *_ = _perturbed(two_cases, tmp_path)
    for c in manifest["cases"][:2]:
        path = copy / f"{c['id']}.actual.bin"
        data = np.fromfile(path, dtype=_cases.numpy_dtype(c["dtype"]))
        data[0] = data[0] * 3 + 7
        data.tofile(path)
    report = golden.compare(d, copy, standard="mixed")
    assert len(report.failed) == 3
    lines = report.summary(details=1).splitlines()
    fails = [x for x in lines if x.startswith("  FAIL ")]
    assert len(fails) == 3
    assert lines[-1].startswith("  (figures and worst elements shown for the first 1 failing")
    assert sum(x.startswith("      worst elements (") for x in lines) == 1


def test_worst_elements_by_the_standard_figure():
    g = np.full((1, 1, 2, 2, 4), 2.0)
    g[0, 0, 0, 0, 0] = 1e-5                 # a small value (float16: below 2^-11)
    a = g.copy()
    a[0, 0, 0, 0, 0] = 2e-5                 # relative error 1, absolute 1e-5
    a[0, 0, 1, 1, 3] = 2.5                  # relative error 0.25
    a[0, 0, 1, 0, 1] = 2.01                 # relative error 0.005
    a[0, 0, 0, 1, 2] = np.nan               # a special mismatch
    w = _standards.worst(a, g, "float16", "commercial", 10)
    assert [x["index"] for x in w] == [(0, 0, 0, 1, 2), (0, 0, 1, 1, 3), (0, 0, 1, 0, 1)]
    w = _standards.worst(a, g, "float16", "experimental", 2)
    assert [x["index"] for x in w] == [(0, 0, 0, 1, 2), (0, 0, 0, 0, 0)]
    w = _standards.worst(a, g, "float16", "mixed", 3, reference=g)
    assert [x["index"] for x in w] == [(0, 0, 0, 1, 2), (0, 0, 1, 1, 3), (0, 0, 1, 0, 1)]
    assert w[1] == {"index": (0, 0, 1, 1, 3), "actual": 2.5, "golden": 2.0, "abs_error": 0.5,
                    "relative_error": 0.5 / (2.0 + 1e-7), "third_party": 2.0}
    assert _standards.worst(g, g, "float32", "mixed") == []
    # The small-value errors the commercial standard counts: |golden| < 2^-11, |error| > 2^-16.
    c = a.copy()
    c[0, 0, 0, 0, 0] = 1e-5 + 2e-5            # |error| 2e-5 > 2^-16: counted (1e-5 is not)
    assert _standards.worst(a, g, "float16", "commercial", small=True) == []
    assert [x["index"] for x in _standards.worst(c, g, "float16", "commercial", small=True)] == \
        [(0, 0, 0, 0, 0)]
    # A special value that matches the golden, or the third party, is right.
    b = g.copy()
    b[0, 0, 1, 1, 1] = np.inf
    ref = g.copy()
    ref[0, 0, 1, 1, 1] = np.inf
    assert _standards.worst(b, g, "float32", "commercial", reference=ref) == []
    assert [x["index"] for x in _standards.worst(b, g, "float32", "commercial")] == \
        [(0, 0, 1, 1, 1)]


# ------------------------------------------------------------ 4. every bad file, then stop


def test_every_bad_file_is_reported_then_nothing_judged(generated, tmp_path, capsys):
    d, a, manifest = generated
    copy = tmp_path / "a"
    shutil.copytree(a, copy)
    ids = [c["id"] for c in manifest["cases"][:3]]
    os.remove(copy / f"{ids[0]}.actual.bin")
    os.remove(copy / f"{ids[1]}.actual.bin")
    (copy / f"{ids[2]}.actual.bin").write_bytes(b"\0" * 3)
    status, out, err = _run(["compare", d, "--actual", copy, "--standard", "mixed",
                             "--no-progress"], capsys)
    lines = err.strip().splitlines()
    assert status == 2 and out == "" and len(lines) == 5
    # After the problems, a note on the way out for missing results.
    assert lines[4] == (f"{PROG} compare: note: 2 results missing from {copy}: --present "
                        f"judges the {len(manifest['cases']) - 2} cases whose result is there "
                        f"(in Python: present=True)")
    assert lines[0] == (f"{PROG} compare: error: case {ids[0]}: missing "
                        f"{copy / ids[0]}.actual.bin (the result)")
    assert lines[1].endswith(f"case {ids[1]}: missing {copy / ids[1]}.actual.bin (the result)")
    assert f"case {ids[2]}: {copy / ids[2]}.actual.bin (the result) has 3 bytes, expected" \
        in lines[2]
    assert lines[3] == f"{PROG} compare: 3 problems; nothing was judged"
    assert "161002" not in err and "ACLNN" not in err
    with pytest.raises(golden.GoldenFileError) as exc:
        golden.compare(d, copy, standard="mixed")
    assert len(exc.value.problems) == 3 and exc.value.exit_status == 2
    assert not isinstance(exc.value, InvalidArgumentError) and isinstance(exc.value, ValueError)
    assert str(exc.value) == "\n".join(exc.value.problems + [exc.value.hint])


# ------------------------------------------------------------ 5. options that do nothing


def test_compare_options_that_do_nothing_say_so(two_cases, tmp_path, capsys):
    d, a, _ = two_cases
    for standard in ("experimental", "mixed"):
        status, out, err = _run(["compare", d, "--actual", a, "--standard", standard,
                                 "--level", "L2", "--reference", a, "--json",
                                 tmp_path / "r.json", "--no-progress"], capsys)
        assert status == 0 and "-> PASS" in out
        assert err.splitlines() == [
            f"{PROG} compare: note: --level L2 does nothing with --standard {standard} "
            f"(only the commercial standard has levels)",
            f"{PROG} compare: note: --reference does nothing with --standard {standard} "
            f"(a single benchmark: no third party)"]
        assert json.loads((tmp_path / "r.json").read_text())["level"] is None
    status, out, err = _run(["compare", d, "--actual", a, "--level", "L2", "--reference", a,
                             "--no-progress"], capsys)
    assert (status, err) == (0, "") and out.startswith("commercial standard L2 ")


def test_generate_options_that_do_nothing_say_so(tmp_path, capsys):
    status, out, err = _run(["generate", tmp_path / "g", "--input-size", "1,1,2,2,2",
                             "--output-size", "3,3,3", "--dtype", "float32", "--level", "L1",
                             "--cases", "5", "--no-special", "--no-progress"], capsys)
    assert status == 0 and len(golden.read_manifest(tmp_path / "g")["cases"]) == 1
    assert err.splitlines() == [
        f"{PROG} generate: note: --level L1 does nothing with --input-size (the level's rules "
        f"make the cases only without --atk and --input-size)",
        f"{PROG} generate: note: --no-special does nothing with --input-size (only the level's "
        f"rules add special cases)",
        f"{PROG} generate: note: --cases 5 does nothing with --input-size (one case per --dtype "
        f"and --format)"]


def test_cases_n_says_what_was_added_and_why(tmp_path, capsys):
    status, out, err = _run(["generate", tmp_path / "g", "--cases", "12", "--no-progress"],
                            capsys)
    cases = golden.read_manifest(tmp_path / "g")["cases"]
    special = sum("special" in c["rule"] for c in cases)
    assert (status, err, special) == (0, "", 57) and len(cases) == 69
    assert out.splitlines()[0] == (
        f"69 backward cases ({sum(math.prod(c['result_shape']) for c in cases)} result "
        f"elements) in {tmp_path / 'g'}: 12 regular (commercial standard L0 rules, seed 0, "
        f"--cases 12 of its 5000) + 57 special (section 2.1: empty, sizes 1, NaN/Inf inputs; "
        f"--no-special leaves them out)")
    status, out, _ = _run(["generate", tmp_path / "h", "--cases", "12", "--no-special",
                           "--no-progress"], capsys)
    assert out.startswith("12 backward cases (") and out.splitlines()[0].endswith(
        "12 regular (commercial standard L0 rules, seed 0, --cases 12 of its 5000)")


def test_seed_reaches_the_atk_cases(tmp_path):
    atk = tmp_path / "atk.json"
    atk.write_text(json.dumps([{
        "id": 3, "inputs": [{"name": "input", "dtype": "fp32", "shape": [1, 1, 2, 2, 2],
                             "range_values": {"name": "nd", "mean": [-1, 1], "std": [1, 2]}},
                            [{"name": "size", "range_values": v} for v in (4, 4, 4)]]}]))
    a, b = golden.atk_cases(atk, seed=0), golden.atk_cases(atk, seed=1)
    assert a[0]["rule"]["mu"] != b[0]["rule"]["mu"] and a == golden.atk_cases(atk)


# ------------------------------------------------------------ 6. regenerating


def test_regenerating_is_refused_then_replaces_what_the_old_manifest_listed(tmp_path, capsys):
    d, a = tmp_path / "g", tmp_path / "a"
    assert _run(["generate", d, "--cases", "12", "--write-actual", a, "--no-progress"],
                capsys)[0] == 0
    before = (sorted(os.listdir(d)), sorted(os.listdir(a)))
    assert len(before[0]) == 1 + 3 * 69 and len(before[1]) == 69
    status, out, err = _run(["generate", d, "--cases", "2", "--no-special", "--write-actual", a,
                             "--no-progress"], capsys)
    assert status == 2 and out == ""
    assert err.strip() == (f"{PROG} generate: error: {d}: not empty ({len(before[0])} files: an "
                           f"earlier set?); --replace replaces it, removing what its manifest "
                           f"lists")
    assert (sorted(os.listdir(d)), sorted(os.listdir(a))) == before
    (d / "notes.txt").write_text("mine")
    status, out, err = _run(["generate", d, "--cases", "2", "--no-special", "--write-actual", a,
                             "--replace", "--no-progress"], capsys)
    assert (status, err) == (0, "")
    assert out.splitlines()[:2] == [
        f"replaced the earlier set (69 cases): removed manifest.json, its {3 * 69} case files "
        f"and 69 results",
        f"{d}: 1 file no manifest lists was left in place: notes.txt"]
    new = golden.read_manifest(d)
    assert sorted(os.listdir(d)) == sorted(
        ["manifest.json", "notes.txt"] + [c[f] for c in new["cases"]
                                          for f in ("input", "golden", "golden_in_dtype")])
    assert sorted(os.listdir(a)) == ["c00000.actual.bin", "c00001.actual.bin"]
    assert golden.compare(d, a, standard="mixed").passed


def test_replace_needs_a_readable_old_manifest_and_keeps_unlisted_files(tmp_path, capsys):
    d = tmp_path / "g"
    d.mkdir()
    (d / "manifest.json").write_text('{"manifest_version": 1}')
    status, _, err = _run(["generate", d, "--cases", "1", "--no-special", "--replace",
                           "--no-progress"], capsys)
    assert status == 2 and "the earlier set's manifest cannot be read" in err
    assert os.listdir(d) == ["manifest.json"]
    # A killed generation's files, no manifest: nothing lists them, so none is
    # overwritten: refused, naming the one in the way, nothing removed.
    os.remove(d / "manifest.json")
    (d / "c00000.input.bin").write_bytes(b"\0" * 4)
    (d / "c00007.input.bin").write_bytes(b"\0" * 4)
    status, out, err = _run(["generate", d, "--cases", "1", "--no-special", "--replace",
                             "--no-progress"], capsys)
    assert status == 2 and out == ""
    assert f"{d / 'c00000.input.bin'}: a file no earlier manifest lists" in err
    assert (d / "c00000.input.bin").read_bytes() == b"\0" * 4
    os.remove(d / "c00000.input.bin")
    status, out, err = _run(["generate", d, "--cases", "1", "--no-special", "--replace",
                             "--no-progress"], capsys)
    assert (status, err) == (0, "")
    assert out.splitlines()[0] == f"{d}: 1 file no manifest lists was left in place: " \
                                  f"c00007.input.bin"
    assert (d / "c00007.input.bin").exists()


def test_generate_api_refuses_a_non_empty_folder(generated):
    d, _, _ = generated
    with pytest.raises(golden.GoldenFileError, match="not empty .*replace=True replaces it"):
        golden.generate(d, cases=1)


# ------------------------------------------------------------ 7. the NPU side's reader and writer


@pytest.mark.parametrize("op", ["backward", "forward"])
def test_read_case_and_write_result_close_the_loop(tmp_path, op):
    d, npu = tmp_path / "g", tmp_path / "npu"
    golden.generate(d, op=op, input_size=(2, 3, 3, 4, 5), output_size=(5, 7, 9),
                    dtypes=["bfloat16", "float32"], formats=["NCDHW", "NDHWC"],
                    scales=(1.5, 2.0, 1.75), values="normal")
    for entry in golden.read_manifest(d)["cases"]:
        case = golden.read_case(d, entry)
        by_id = golden.read_case(d, entry["id"])
        assert np.array_equal(_bits(by_id.input), _bits(case.input))
        assert case.input.dtype == _cases.numpy_dtype(entry["dtype"])
        assert case.input.shape == tuple(entry["input_shape"])
        if entry["format"] == "NDHWC":      # channels last: C is the unit-stride axis
            assert case.input.strides[1] == case.input.itemsize
        else:
            assert case.input.flags.c_contiguous
        assert case.scales == (1.5, 2.0, 1.75)
        out = case.empty_result()
        assert out.shape == case.result_shape and np.isnan(out.astype(np.float64)).all()
        if entry["format"] == "NDHWC":
            assert out.strides[1] == out.itemsize
        else:
            assert out.flags.c_contiguous
        if op == "backward":
            assert (case.output_size, case.input_size) == ((5, 7, 9), (2, 3, 3, 4, 5))
            status, size, ex = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
                case.input, case.output_size, case.input_size, case.align_corners, *case.scales,
                out)
            run = aclnn.aclnnUpsampleTrilinear3dBackward
        else:
            assert case.output_size == (5, 7, 9)
            status, size, ex = aclnn.aclnnUpsampleTrilinear3dGetWorkspaceSize(
                case.input, case.output_size, case.align_corners, *case.scales, out)
            run = aclnn.aclnnUpsampleTrilinear3d
        assert status == 0
        assert run(aclnn.aclrtMalloc(size), size, ex, None) == 0
        path = golden.write_result(npu, case, out)
        assert path == os.path.join(npu, f"{entry['id']}.actual.bin")
        back = golden.read_result(npu, case)
        assert back.shape == case.result_shape and np.array_equal(_bits(back), _bits(out))
        assert back.strides == out.strides      # the case's layout, as written
    report = golden.compare(d, npu, standard="mixed")
    assert report.passed and len(report.cases) == 4
    assert not [n for n in os.listdir(npu) if n.startswith(".")]


@pytest.mark.parametrize("scales, align, used", [
    ([2.0, 0.0, 2.0], False, (0.0, 0.0, 0.0)),       # one not given: CANN uses none
    ([2.0, -1.0, 2.0], False, (0.0, 0.0, 0.0)),
    ([2.0, 2.0, 2.0], True, (0.0, 0.0, 0.0)),        # align_corners: unused
    ([2.0, 2.0, 2.0], False, (2.0, 2.0, 2.0)),
])
def test_read_case_applies_canns_scale_rule(tmp_path, scales, align, used):
    d = tmp_path / "g"
    golden.generate(d, input_size=(1, 1, 2, 2, 2), output_size=(4, 4, 4), dtypes=["float32"],
                    scales=scales, align_corners=align)
    (entry,) = golden.read_manifest(d)["cases"]
    assert entry["scales"] == scales
    assert golden.read_case(d, entry).scales == used


def test_read_case_and_write_result_refuse_by_name(generated, tmp_path):
    d, _, manifest = generated
    entry = dict(manifest["cases"][0])
    with pytest.raises(golden.GoldenFileError, match="no case 'c99999'"):
        golden.read_case(d, "c99999")
    with pytest.raises(golden.GoldenFileError, match=r"case c00000: format: must be one of"):
        golden.read_case(d, dict(entry, format="NHWDC"))
    copy = tmp_path / "g"
    shutil.copytree(d, copy)
    os.remove(copy / entry["input"])
    with pytest.raises(golden.GoldenFileError, match=r"case c00000: missing .*c00000.input.bin"):
        golden.read_case(copy, entry)
    case = golden.read_case(d, entry)
    out = case.empty_result()
    npu = tmp_path / "npu"
    with pytest.raises(golden.GoldenError, match=r"the result's shape must be"):
        golden.write_result(npu, case, out[None])
    with pytest.raises(golden.GoldenError, match=r"the result's dtype must be"):
        golden.write_result(npu, case, out.astype(np.float64))
    assert not npu.exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(golden.GoldenFileError, match="cannot be made a directory"):
        golden.write_result(tmp_path / "file", case, out)
    golden.write_result(npu, entry, out)        # a manifest entry serves too
    assert (npu / f"{entry['id']}.actual.bin").stat().st_size == out.nbytes


@pytest.mark.skipif(not HAS_TORCH, reason="PyTorch tensors")
def test_torch_tensors_in_and_out(tmp_path):
    import torch

    d, npu = tmp_path / "g", tmp_path / "npu"
    golden.generate(d, input_size=(1, 2, 2, 3, 4), output_size=(4, 6, 8),
                    dtypes=["bfloat16", "float16"], formats=["NDHWC", "NCDHW"])
    for entry in golden.read_manifest(d)["cases"]:
        case = golden.read_case(d, entry)
        x = case.torch_input()
        assert x.dtype == getattr(torch, case.dtype) and tuple(x.shape) == case.input_shape
        assert x.is_contiguous(memory_format=torch.channels_last_3d) == (case.format == "NDHWC")
        out = torch.full(case.result_shape, float("nan"), dtype=x.dtype)
        if case.format == "NDHWC":
            out = out.contiguous(memory_format=torch.channels_last_3d)
        torch.ops.aten.upsample_trilinear3d_backward.grad_input(
            x, case.output_size, case.input_size, case.align_corners,
            *[s or None for s in case.scales], grad_input=out)
        golden.write_result(npu, case, out)
    report = golden.compare(d, npu, reference=npu)
    assert report.passed


# ------------------------------------------------------------ the modules: no import cycle


def _imports(path):
    """The golden modules ``path`` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:                   # from . import x, y
                found.update(a.name for a in node.names)
                found.add("__init__")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "trilinear_bwd.golden"):
            rest = node.module[len("trilinear_bwd.golden"):].lstrip(".")
            found.add(rest.split(".")[0] if rest else "__init__")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("trilinear_bwd.golden"):
                    rest = a.name[len("trilinear_bwd.golden"):].lstrip(".")
                    found.add(rest.split(".")[0] if rest else "__init__")
    return found


def test_no_import_cycle_in_the_workbench():
    modules = {p.stem: p for p in GOLDEN_DIR.glob("*.py")}
    graph = {name: (_imports(path) & set(modules)) - {name} for name, path in modules.items()}
    assert graph["_standards"] and "_cases" not in graph["_standards"]
    # No submodule imports the package (which imports them all).
    assert [m for m, deps in graph.items() if m != "__init__" and "__init__" in deps] == []
    done, active = set(), []

    def visit(m):
        if m in active:
            raise AssertionError(f"import cycle: {' -> '.join(active[active.index(m):] + [m])}")
        if m in done:
            return
        active.append(m)
        for dep in sorted(graph[m]):
            visit(dep)
        active.pop()
        done.add(m)

    for m in sorted(graph):
        visit(m)


@pytest.mark.parametrize("name", sorted(p.stem for p in GOLDEN_DIR.glob("*.py")))
def test_doctests_of_the_workbench(name):
    module = importlib.import_module(f"trilinear_bwd.golden{'' if name == '__init__' else '.' + name}")
    result = doctest.testmod(module)
    assert result.failed == 0


# ------------------------------------------------------------ nothing half-written


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device", "x.bin"),
                                     KeyboardInterrupt()])
def test_a_generation_that_fails_midway_leaves_nothing(tmp_path, capsys, monkeypatch, failure):
    from trilinear_bwd.golden import _generate

    real, calls = _generate.write_array, []

    def fails_on_the_fifth(path, array, fmt):
        calls.append(path)
        if len(calls) == 5:
            raise failure
        real(path, array, fmt)

    monkeypatch.setattr(_generate, "write_array", fails_on_the_fifth)
    d, a = tmp_path / "deep" / "g", tmp_path / "a"
    argv = ["generate", d, "--cases", "3", "--no-special", "--write-actual", a, "--no-progress"]
    if isinstance(failure, KeyboardInterrupt):
        with pytest.raises(KeyboardInterrupt):
            _run(argv, capsys)
    else:
        status, out, err = _run(argv, capsys)
        assert status == 2 and out == ""
        assert err.strip() == (f"{PROG} generate: error: x.bin: cannot be written (No space left "
                               f"on device); nothing of the new set was kept")
    assert len(calls) == 5 and os.listdir(tmp_path) == []


def test_a_case_failing_by_small_value_errors_shows_them(tmp_path, capsys):
    d, a = tmp_path / "g", tmp_path / "a"
    golden.generate(d, input_size=(1, 2, 4, 4, 4), output_size=(8, 8, 8), dtypes=["float16"],
                    values="small", actual=a)
    (case,) = golden.read_manifest(d)["cases"]
    g = _files.read_array(d / case["golden"], "float64", case["result_shape"], "NCDHW", "")
    small = np.argwhere(np.abs(g) < 2.0 ** -11)[:3]
    assert len(small) == 3
    wrong = tmp_path / "wrong"
    shutil.copytree(a, wrong)
    r = golden.read_result(wrong, case)
    for k, index in enumerate(small):
        r[tuple(index)] = g[tuple(index)] + 0.01 * (k + 1)
    golden.write_result(wrong, case, r)
    status, out, _ = _run(["compare", d, "--actual", wrong, "--reference", a, "--no-progress"],
                          capsys)
    lines = out.splitlines()
    assert status == 1 and lines[2].endswith(": small-value errors 3 > 2 x max(third party's 0, 1)")
    at = lines.index("      small-value errors (|golden| < 2^-11, |error| > 2^-16), largest "
                     "|error| first:")
    shown = [tuple(int(v) for v in x.strip().split(")")[0].strip("(").split(", "))
             for x in lines[at + 2:at + 5]]
    assert shown == [tuple(int(v) for v in small[k]) for k in (2, 1, 0)]
    report = golden.compare(d, wrong, reference=a)
    assert [w["index"] for w in report.failed[0]["worst_small"]] == shown


# ------------------------------------------------------------ regenerating stays in its folders


def _tree(*roots):
    """Every entry under ``roots``: (path, kind, bytes or link target), links not followed."""
    seen = []
    for root in roots:
        for folder, dirs, files in os.walk(root):
            for name in sorted(dirs + files):
                path = os.path.join(folder, name)
                if os.path.islink(path):
                    seen.append((path, "link", os.readlink(path)))
                elif os.path.isfile(path):
                    seen.append((path, "file", pathlib.Path(path).read_bytes()))
                else:
                    seen.append((path, "dir", None))
    return sorted(seen)


# Where an unlisted thing sits: the set's folder or the results', and its name.
UNLISTED_PLACES = [("set", "c00001.input.bin"), ("set", "c00001.golden.float16.bin"),
                   ("set", "c00000.golden.bin"), ("results", "c00001.actual.bin"),
                   ("set", "manifest.json")]
UNLISTED_KINDS = ["link outside", "dangling link", "file", "folder"]


@pytest.mark.parametrize("where, name, kind", [
    (w, n, k) for (w, n) in UNLISTED_PLACES for k in UNLISTED_KINDS
    # A regular file under a name the earlier manifest lists is that set's
    # file as far as anyone can tell: --replace removes it, as documented.
    if (n, k) != ("c00000.golden.bin", "file")])
def test_replace_never_writes_through_a_link_nor_over_a_file_it_did_not_write(
        tmp_path, capsys, where, name, kind):
    """The class: generate writes and removes only inside its folders,
    never through a link, never a file it did not write, and says what it did."""
    d, a, outside = tmp_path / "set", tmp_path / "results", tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.bin").write_bytes(b"precious")
    one = ["--input-size", "1,1,2,2,2", "--output-size", "4,4,4", "--no-progress",
           "--write-actual", a]
    assert _run(["generate", d, "--dtype", "float32"] + one, capsys)[0] == 0
    place = (d if where == "set" else a) / name
    if name == "manifest.json" or (name == "c00000.golden.bin"):
        # A name the earlier manifest lists, replaced by something it did not write.
        os.remove(place)
    if kind == "link outside":
        os.symlink(os.path.join("..", "outside", "victim.bin"), place)
    elif kind == "dangling link":
        os.symlink(os.path.join("..", "outside", "nothing.bin"), place)
    elif kind == "file":
        place.write_bytes(b"mine")
    else:
        place.mkdir()
    before = _tree(tmp_path)
    status, out, err = _run(["generate", d, "--dtype", "float32", "--dtype", "float16",
                             "--replace"] + one, capsys)
    assert status == 2 and out == "", (out, err)
    assert name in err and "Traceback" not in err, err
    # Refused before anything was removed or written: every entry as it was.
    assert _tree(tmp_path) == before


def test_replace_says_exactly_what_it_removed_and_kept(tmp_path, capsys):
    d, a = tmp_path / "set", tmp_path / "results"
    one = ["--input-size", "1,1,2,2,2", "--output-size", "4,4,4", "--no-progress",
           "--write-actual", a]
    assert _run(["generate", d, "--dtype", "float32", "--dtype", "float16"] + one,
                capsys)[0] == 0
    (d / "notes.txt").write_text("mine")
    (a / "c00007.actual.bin").write_bytes(b"mine")
    os.remove(d / "c00001.golden.bin")           # listed, already gone
    status, out, err = _run(["generate", d, "--dtype", "float32", "--replace"] + one, capsys)
    assert (status, err) == (0, "")
    assert out.splitlines()[:3] == [
        "replaced the earlier set (2 cases): removed manifest.json, 5 of its 6 case files "
        "(1 listed was not there or not a file) and 2 results",
        f"{d}: 1 file no manifest lists was left in place: notes.txt",
        f"{a}: 1 file no manifest lists was left in place: c00007.actual.bin"]
    assert (d / "notes.txt").read_text() == "mine"
    assert (a / "c00007.actual.bin").read_bytes() == b"mine"


def test_a_failed_generation_removes_only_what_it_wrote(tmp_path, monkeypatch):
    from trilinear_bwd.golden import _generate

    d = tmp_path / "set"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    real, calls = _generate.golden, []

    def failing(case, x):
        calls.append(case["id"])
        if len(calls) == 2:
            raise MemoryError("out of memory in the second case")
        return real(case, x)

    monkeypatch.setattr(_generate, "golden", failing)
    with pytest.raises(MemoryError):
        golden.generate(d, input_size=(1, 1, 2, 2, 2), output_size=(4, 4, 4),
                        dtypes=["float32", "float16"], replace=True)
    assert os.listdir(d) == ["notes.txt"] and (d / "notes.txt").read_text() == "mine"


# ------------------------------------------------------------ ids that leave the folder

BAD_IDS = ["../escape", "/tmp/abs", "a/b", "..", ".hidden", "", "x\0y", "a\\b", None, 5,
           ["c00000"]]


@pytest.mark.parametrize("ident", BAD_IDS, ids=[repr(i) for i in BAD_IDS])
def test_every_entry_point_turning_an_id_into_a_path_checks_it_as_read_case_does(
        generated, tmp_path, ident):
    """The class: read_case, write_result and read_result, given a case
    dict or an NpuCase, refuse an id that is not a plain name, with the same words."""
    import dataclasses

    d, _, manifest = generated
    entry = dict(manifest["cases"][0], id=ident)
    case = dataclasses.replace(golden.read_case(d, manifest["cases"][0]), id=ident)
    npu = tmp_path / "npu" / "deeper"
    out = case.empty_result()
    before = _tree(tmp_path)
    words = []
    for call in (lambda: golden.read_case(d, entry),
                 lambda: golden.write_result(npu, entry, out),
                 lambda: golden.write_result(npu, case, out),
                 lambda: golden.read_result(npu, entry),
                 lambda: golden.read_result(npu, case)):
        with pytest.raises(golden.GoldenFileError) as info:
            call()
        line = [p for p in info.value.problems if ": id: " in p]
        assert line, info.value.problems
        words.append(line[0].split(": id: ", 1)[1])
    assert len(set(words)) == 1, words             # one check, one wording
    assert _tree(tmp_path) == before               # nothing made, nothing written


# ------------------------------------------------------------ an interrupted NPU run


@pytest.fixture
def interrupted(tmp_path, capsys):
    """A 6-case set whose results stop after c00002 (an NPU run cut short)."""
    d, a = tmp_path / "set", tmp_path / "npu"
    assert _run(["generate", d, "--input-size", "1,1,2,2,2", "--output-size", "4,4,4",
                 "--dtype", "float32", "--dtype", "float16", "--format", "NCDHW", "--format",
                 "NDHWC", "--write-actual", a, "--no-progress"], capsys)[0] == 0
    ids = [c["id"] for c in golden.read_manifest(d)["cases"]]
    assert len(ids) == 4
    for ident in ids[2:]:
        os.remove(a / f"{ident}.actual.bin")
    return d, a, ids


def test_compare_without_options_names_the_missing_results_and_the_way_out(interrupted, capsys):
    d, a, ids = interrupted
    status, out, err = _run(["compare", d, "--actual", a, "--standard", "mixed",
                             "--no-progress"], capsys)
    assert status == 2 and out == ""
    assert all(f"case {i}: missing" in err for i in ids[2:]), err
    assert "--present judges the 2 cases whose result is there" in err, err


def test_present_judges_the_cases_an_interrupted_run_wrote_and_says_what_is_missing(
        interrupted, tmp_path, capsys):
    d, a, ids = interrupted
    report = tmp_path / "report.json"
    status, out, err = _run(["compare", d, "--actual", a, "--standard", "mixed", "--present",
                             "--json", report, "--no-progress"], capsys)
    assert (status, err) == (0, ""), err
    lines = out.splitlines()
    assert lines[0].startswith("mixed tolerance standard (single benchmark): 2 cases, "
                               "2 passed, 0 failed -> PASS")
    assert lines[1] == (f"  not judged: 2 of the set's 4 cases have no result in {a} "
                        f"({ids[2]}, {ids[3]}); this verdict covers the 2 judged")
    saved = json.loads(report.read_text())
    assert saved["cases_total"] == 2 and saved["cases_in_set"] == 4
    assert saved["cases_missing"] == ids[2:]
    assert [c["id"] for c in saved["cases"]] == ids[:2]
    r = golden.compare(d, a, standard="mixed", present=True)
    assert r.passed and r.missing == ids[2:] and len(r.cases) == 2


def test_a_list_of_case_ids_judges_those(interrupted, capsys):
    d, a, ids = interrupted
    status, out, err = _run(["compare", d, "--actual", a, "--standard", "mixed", "--case",
                             ids[1], "--no-progress"], capsys)
    assert (status, err) == (0, "")
    assert out.splitlines()[1] == f"  judged 1 of the set's 4 cases (--case): {ids[1]}"
    assert [c["id"] for c in golden.compare(d, a, standard="mixed",
                                            cases=[ids[0], ids[1]]).cases] == ids[:2]
    # A listed case without its result is a missing file, named, unless --present.
    status, _, err = _run(["compare", d, "--actual", a, "--standard", "mixed", "--case",
                           f"{ids[0]},{ids[3]}", "--no-progress"], capsys)
    assert status == 2 and f"case {ids[3]}: missing" in err
    status, out, _ = _run(["compare", d, "--actual", a, "--standard", "mixed", "--case",
                           f"{ids[0]},{ids[3]}", "--present", "--no-progress"], capsys)
    assert status == 0 and "1 of the 2 cases listed" in out


@pytest.mark.parametrize("argv, words", [
    (["--case", "c00099"], "--case: no case 'c00099' in"),
    (["--case", "../x"], "--case: no case '../x' in"),
    (["--case", ""], "--case: no case '' in"),
])
def test_a_case_list_naming_no_case_of_the_set_is_exit_2(interrupted, capsys, argv, words):
    d, a, _ = interrupted
    status, out, err = _run(["compare", d, "--actual", a, "--standard", "mixed",
                             "--no-progress"] + argv, capsys)
    assert status == 2 and out == "" and words in err, err


def test_present_with_no_result_at_all_is_exit_2(interrupted, tmp_path, capsys):
    d, _, _ = interrupted
    empty = tmp_path / "empty"
    empty.mkdir()
    status, out, err = _run(["compare", d, "--actual", empty, "--standard", "mixed",
                             "--present", "--no-progress"], capsys)
    assert status == 2 and out == ""
    assert f"--present: none of the set's 4 cases has a result in {empty}" in err, err


def test_compare_help_describes_every_argument_and_default():
    from trilinear_bwd.golden import _cli

    sub = _cli.parser()._subparsers._group_actions[0].choices
    for verb in ("compare", "generate"):
        for action in sub[verb]._actions:
            if action.dest not in ("help",):
                assert action.help, (verb, action.dest)
    text = " ".join(sub["compare"].format_help().split())
    assert "default commercial" in text and "<id>.actual.bin" in text
    assert "manifest.json" in text
    generate = " ".join(sub["generate"].format_help().split())
    # No choices that print ambiguously ("-inf,inf" is one value, not two).
    assert "{uniform" not in generate and "'-inf,inf'" in generate

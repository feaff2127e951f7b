"""trilinear_bwd.golden: metrics, the standards' verdicts, files, ATK cases, the CLI."""

import importlib.util
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import trilinear_bwd as tb
from trilinear_bwd import golden
from trilinear_bwd.__main__ import main
from trilinear_bwd._core._operator import cann_scales
from trilinear_bwd.golden import _cases, _files, _run, _standards

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_MPL = importlib.util.find_spec("matplotlib") is not None
DTYPES = ("float16", "bfloat16", "float32")
# The standards' numbers, read off the tables of hicann/opbase docs/zh/ops_precision_standard.
T = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -13}
SMALL = {"float16": (2.0 ** -11, 2.0 ** -16), "bfloat16": (2.0 ** -8, 2.0 ** -16),
         "float32": (2.0 ** -14, 2.0 ** -30)}
BOUNDS = {"L0": (10, 2, 2), "L1": (5, 1.5, 1.5), "L2": (2, 1.2, 1.2)}
JUST = 1e-6  # relative distance of "just inside" / "just outside" a bound


# ---------------------------------------------------------------- metrics


def test_metrics_hand_computed_float16():
    g = np.array([1.0, -2.0, 1e-4, 4.0])
    a = np.array([1.5, -2.0, 2e-4, 4.0])
    m = golden.metrics(a, g, "float16")
    r0 = 0.5 / (1 + 1e-7)                 # the only error in the normal range
    assert m["elements"] == 4 and m["small"] == 1          # 1e-4 < 2^-11
    assert m["mare"] == pytest.approx(r0, rel=1e-12)
    assert m["mere"] == pytest.approx(r0 / 3, rel=1e-12)
    assert m["rmse"] == pytest.approx(math.sqrt(0.25 / 3), rel=1e-12)
    r_small = 1e-4 / (1e-4 + 1e-7)        # 0.999: the small value's relative error is larger
    assert m["mare_all"] == pytest.approx(r_small, rel=1e-12)
    assert m["mere_all"] == pytest.approx((r0 + r_small) / 4, rel=1e-12)
    assert m["small_errors"] == 1                           # 1e-4 > 2^-16
    assert m["matched_ratio"] == 0.75                       # 0.5 > 2^-10 (1 + 1)
    assert m["max_abs_error"] == 0.5
    assert m["max_abs_excess"] == pytest.approx(0.5 / 0.1)  # max(0.1, 32 * 2^-10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_small_value_threshold_and_error_limit(dtype):
    threshold, error = SMALL[dtype]
    g = np.array([threshold, threshold * (1 - JUST), threshold * (1 - JUST)])
    a = g + np.array([0.0, error * (1 - JUST), error * (1 + JUST)])
    m = golden.metrics(a, g, dtype)
    assert m["small"] == 2 and m["small_errors"] == 1


def test_metrics_special_values_follow_the_third_party():
    g = np.array([np.nan, np.inf, -np.inf, 1.0])
    a = np.array([np.nan, -np.inf, -np.inf, 1.0])
    assert golden.metrics(a, g, "float32")["special_mismatches"] == 1
    assert golden.metrics(a, g, "float32", reference=a)["special_mismatches"] == 0
    m = golden.metrics(a, g, "float32", reference=g)
    assert m["special"] == 3 and m["special_mismatches"] == 1 and m["mare"] == 0.0
    # A golden beyond the type's range is its infinity there (float16: 65520 rounds up).
    assert golden.metrics([np.inf], [65520.0], "float16")["special_mismatches"] == 0
    assert golden.metrics([65504.0], [65520.0], "float16")["special_mismatches"] == 1
    assert golden.metrics([65504.0], [65519.0], "float16")["special_mismatches"] == 0
    assert golden.metrics([np.inf], [65520.0], "float32")["special_mismatches"] == 1
    # A finite golden with a NaN result (an element never written) is a mismatch.
    assert golden.metrics([np.nan], [2.0], "float16")["special_mismatches"] == 1


def test_metrics_of_nothing_and_bad_arguments():
    m = golden.metrics(np.zeros(0), np.zeros(0), "bfloat16")
    assert m["elements"] == 0 and m["mare"] == 0.0 and m["matched_ratio"] == 1.0
    with pytest.raises(ValueError, match="dtype must be one of"):
        golden.metrics([1.0], [1.0], "float64")
    with pytest.raises(ValueError, match="actual has 2 elements, golden 1"):
        golden.metrics([1.0, 2.0], [1.0], "float32")


# ---------------------------------------------------------------- verdicts


def _uniform_error(dtype, rel, n=1000):
    g = np.ones(n)
    return g + rel * (1 + 1e-7), g          # relative error exactly ``rel``


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inside", [True, False])
def test_experimental_mere_bound(dtype, inside):
    a, g = _uniform_error(dtype, T[dtype] * (1 - JUST if inside else 1 + JUST))
    ok, reasons = golden.verdict("experimental", dtype, golden.metrics(a, g, dtype))
    assert ok == inside
    assert inside or "MERE" in reasons[0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inside", [True, False])
def test_experimental_mare_bound(dtype, inside):
    g = np.ones(1000)
    a = g.copy()
    a[7] += 10 * T[dtype] * (1 - JUST if inside else 1 + JUST) * (1 + 1e-7)
    ok, reasons = golden.verdict("experimental", dtype, golden.metrics(a, g, dtype))
    assert ok == inside
    assert inside or reasons == [reasons[0]] and "MARE" in reasons[0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("unmatched, inside", [(10, True), (11, False)])
def test_mixed_matched_ratio_bound(dtype, unmatched, inside):
    g = np.ones(1000)
    a = g.copy()
    a[:unmatched] += 2 * T[dtype] * (1 + JUST)   # just past atol + rtol |g|
    a[unmatched:] += 2 * T[dtype] * (1 - JUST)   # just within it
    m = golden.metrics(a, g, dtype)
    assert m["matched_ratio"] == (1000 - unmatched) / 1000
    ok, reasons = golden.verdict("mixed", dtype, m)
    assert ok == inside
    assert inside or "matched ratio" in reasons[0]


# max_abs_error_limit, "1e-1 or 32 * ULP" (float32: 1e-2), worked by hand:
# float16 ulp(1) = 2^-10, ulp(1024) = 1; bfloat16 ulp(1) = 2^-7, ulp(1024) = 8;
# float32 ulp(1) = 2^-23, ulp(1024) = 2^-13.
LIMITS = {("float16", 1.0): 0.1, ("float16", 1024.0): 32.0,
          ("bfloat16", 1.0): 0.25, ("bfloat16", 1024.0): 256.0,
          ("float32", 1.0): 0.01, ("float32", 1024.0): 0.01}


@pytest.mark.parametrize("dtype, value", sorted(LIMITS))
@pytest.mark.parametrize("inside", [True, False])
def test_mixed_max_abs_error_bound(dtype, value, inside):
    g = np.full(1000, value)
    a = g.copy()
    a[3] += LIMITS[dtype, value] * (1 - JUST if inside else 1 + JUST)
    ok, reasons = golden.verdict("mixed", dtype, golden.metrics(a, g, dtype))
    assert ok == inside
    assert inside or reasons == [reasons[0]] and "max |error|" in reasons[0]


def _third():
    return {"mare": 1e-3, "mere": 1e-4, "rmse": 2e-4, "small_errors": 3,
            "special_mismatches": 0}


@pytest.mark.parametrize("level", sorted(BOUNDS))
@pytest.mark.parametrize("key", ["mare", "mere", "rmse"])
@pytest.mark.parametrize("inside", [True, False])
def test_commercial_ratio_bounds(level, key, inside):
    third = _third()
    bound = BOUNDS[level][("mare", "mere", "rmse").index(key)]
    npu = dict(third, **{key: bound * (third[key] + 1e-7) * (1 - JUST if inside else 1 + JUST)})
    ok, reasons = golden.verdict("commercial", "float16", npu, third, level)
    assert ok == inside
    assert inside or reasons == [reasons[0]] and reasons[0].startswith(f"{key.upper()} ratio")


@pytest.mark.parametrize("third_errors, npu_errors, inside",
                         [(3, 6, True), (3, 7, False), (0, 2, True), (0, 3, False)])
def test_commercial_small_value_count_bound(third_errors, npu_errors, inside):
    third = dict(_third(), small_errors=third_errors)
    npu = dict(third, small_errors=npu_errors)
    ok, reasons = golden.verdict("commercial", "bfloat16", npu, third, "L2")
    assert ok == inside
    assert inside or "small-value errors" in reasons[0]


def test_commercial_ratio_adds_the_epsilon_to_the_third_party():
    zero = dict(_third(), mare=0.0, mere=0.0, rmse=0.0)
    assert golden.verdict("commercial", "float32", dict(zero, mare=1e-6 * (1 - JUST)), zero)[0]
    assert not golden.verdict("commercial", "float32", dict(zero, mare=1e-6 * (1 + JUST)),
                              zero)[0]


def test_verdict_refuses_unknown_standard_and_missing_third_party():
    m = golden.metrics([1.0], [1.0], "float32")
    with pytest.raises(ValueError, match="standard must be one of"):
        golden.verdict("strict", "float32", m)
    with pytest.raises(ValueError, match="third party"):
        golden.verdict("commercial", "float32", m)


# ---------------------------------------------------------------- cases


@pytest.mark.parametrize("level", ["L0", "L1", pytest.param("L2", marks=pytest.mark.slow)])
def test_level_rules_counts_coverage_and_distributions(level):
    cases = _cases.level_cases("backward", level, special=False)
    assert len(cases) == {"L0": 5000, "L1": 10000, "L2": 30000}[level]
    combos = {(c["dtype"], c["format"], c["align_corners"],
               "none" if not any(c["scales"]) else "given" if all(c["scales"]) else "partial")
              for c in cases}
    assert len(combos) == 3 * 2 * 2 * 3
    for dtype in DTYPES:
        assert sum(c["dtype"] == dtype for c in cases) >= (200 if level == "L0" else 700)
    kinds = [("outliers" if c["rule"].get("outliers") else
              "small" if c["rule"].get("high") == 0.001 else c["rule"]["distribution"])
             for c in cases]
    share = {k: kinds.count(k) / len(kinds) for k in set(kinds)}
    expect = ({"uniform": 0.5, "normal": 0.5} if level == "L0" else
              {"small": 0.1, "uniform": 0.3, "normal": 0.4, "outliers": 0.2})
    assert share == pytest.approx(expect, abs=0.02)
    for c in cases:
        if c["rule"]["distribution"] == "normal":
            assert -100 <= c["rule"]["mu"] <= 100 and 1 <= c["rule"]["sigma"] <= 25
    assert sum(math.prod(c["result_shape"]) for c in cases) >= 1_000_000


@pytest.mark.parametrize("op", ["backward", "forward"])
def test_special_cases_and_shapes(op):
    cases = _cases.level_cases(op, "L0", count=0, dtypes=("float16",))
    specials = [c["rule"]["special"] for c in cases]
    assert specials.count("empty") == 2 and specials.count("sizes 1") == 1
    for value in ("nan", "inf", "-inf", "-inf,inf"):
        assert specials.count(value) == 4
    for c in cases:
        gi = c["result_shape"] if op == "backward" else c["input_shape"]
        go = c["input_shape"] if op == "backward" else c["result_shape"]
        assert gi[:2] == go[:2]
    x = _cases.values(next(c for c in cases if c["rule"]["special"] == "-inf,inf"))
    assert set(np.unique(x.astype(np.float64))) == {-np.inf, np.inf}


def test_outliers_follow_the_rule():
    case = {"input_shape": [1, 2, 10, 10, 25], "dtype": "float32",
            "rule": {"distribution": "uniform", "low": -5.0, "high": 5.0, "outliers": True,
                     "seed": 3}}
    x = _cases.values(case)
    assert np.count_nonzero(np.abs(x) > 5) == 5000 // 1000
    assert np.array_equal(x, _cases.values(case))          # the rule alone redraws it


# ---------------------------------------------------------------- ATK files

# Cases in the format of hicann/ops-cv's atk_aclnnUpsampleTrilinear3dBackward.json.
def _attr(name, value, kind="attr", dtype="int"):
    return {"name": name, "type": kind, "required": True, "dtype": dtype, "shape": None,
            "range_values": value, "backward": False, "align_32B": None, "outlier_values": None}


def _atk_case(ident, dtype, shape, values, size, align, fmt="NCDHW", outlier=None):
    tensor = {"name": "input", "type": "tensor", "required": True, "dtype": dtype,
              "shape": shape, "range_values": values, "backward": True, "align_32B": None,
              "outlier_values": outlier}
    return {"id": ident, "name": "torch.nn.functional.interpolate",
            "aclnn_name": "UpsampleTrilinear3dBackward",
            "api_type": "upsample_trilinear3dBackward",
            "standard": {"acc": "double_benchmark", "perf": "not_key"},
            "inputs": [tensor,
                       [_attr("outputSize_int", v, "attrs") for v in (10, 2, 1)],
                       [_attr("intputSize_int", v, "attrs") for v in (2, 1, 7, 1, 10)],
                       _attr("align_corners", align, dtype="bool"),
                       [_attr("size", v, "attr_tuple") for v in size],
                       _attr("mode", "trilinear", dtype="string"),
                       _attr("scalesD_double", 2, dtype="double"),
                       _attr("scalesH_double", [1, 10], dtype="double"),
                       _attr("scalesW_double", 6, dtype="double"),
                       _attr("antialias", False, dtype="bool"),
                       _attr("recompute_scale_factor", False, dtype="bool"),
                       _attr("format", fmt, dtype="non_param")]}


ND = {"name": "nd", "mean": [-100, 100], "std": [1, 25]}


@pytest.fixture
def atk_file(tmp_path):
    path = tmp_path / "atk_aclnnUpsampleTrilinear3dBackward.json"
    path.write_text(json.dumps([
        _atk_case(0, "bf16", [1, 3, 16, 8, 1], ND, [47, 60, 7], False),
        _atk_case(1, "fp16", [8, 3, 5, 1, 5], ND, [7, 4, 8], True),
        _atk_case(2, "fp16", [1, 2, 3, 4, 2], ["-inf"], [5, 5, 5], False),
        _atk_case(3, "bf16", [2, 1, 2, 2, 2], ["-inf", "inf"], [3, 4, 5], True),
        _atk_case(4, "fp16", [1, 2, 8, 16, 8], [-2, 2], [4, 4, 4], False, outlier=True),
    ]))
    return path


@pytest.mark.parametrize("op", ["backward", "forward"])
def test_atk_cases_parse(atk_file, op):
    cases = golden.atk_cases(atk_file, op)
    assert [c["rule"]["atk_id"] for c in cases] == [0, 1, 2, 3, 4]
    c = cases[0]
    assert (c["dtype"], c["format"], c["align_corners"], c["scales"]) == \
        ("bfloat16", "NCDHW", False, [0.0, 0.0, 0.0])
    grad_input, grad_out = [1, 3, 16, 8, 1], [1, 3, 47, 60, 7]
    assert (c["result_shape"], c["input_shape"]) == ((grad_input, grad_out) if op == "backward"
                                                     else (grad_out, grad_input))
    assert c["rule"]["distribution"] == "normal" and -100 <= c["rule"]["mu"] <= 100
    assert cases[1]["align_corners"] and cases[1]["dtype"] == "float16"
    assert cases[2]["rule"]["special"] == "-inf" and cases[3]["rule"]["special"] == "-inf,inf"
    assert cases[4]["rule"] == dict(cases[4]["rule"], distribution="uniform", low=-2.0,
                                    high=2.0, outliers=True)
    assert np.all(_cases.values(cases[2]).astype(np.float64) == -np.inf)


def test_atk_cases_refused_by_name(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([_atk_case(7, "int8", [1, 1, 2, 2, 2], ND, [4, 4, 4], False)]))
    with pytest.raises(ValueError, match="ATK case 7: input dtype 'int8'"):
        golden.atk_cases(path)
    path.write_text(json.dumps([_atk_case(8, "fp16", [1, 1, 2, 2, 2], {"name": "zipf"},
                                          [4, 4, 4], False)]))
    with pytest.raises(ValueError, match="ATK case 8: input range_values"):
        golden.atk_cases(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        golden.atk_cases(path)


def test_generate_from_atk_and_compare(atk_file, tmp_path):
    d, a = tmp_path / "g", tmp_path / "a"
    manifest = golden.generate(d, atk=atk_file, actual=a)
    assert manifest["source"] == {"atk": atk_file.name, "seed": 0} and len(manifest["cases"]) == 5
    assert golden.compare(d, a, reference=a).passed
    kept = golden.generate(tmp_path / "k", atk=atk_file, max_elements=4000)
    assert [c["rule"]["atk_id"] for c in kept["cases"]] == [2, 3, 4]
    assert [(c["rule"]["atk_id"], c["elements"]) for c in kept["skipped"]] == \
        [(0, 3 * 47 * 60 * 7), (1, 8 * 3 * 7 * 4 * 8)]


# ---------------------------------------------------------------- files and the round trip


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """A capped L0 run: 36 regular cases (every combination once) and the special cases."""
    root = tmp_path_factory.mktemp("golden")
    d, a = root / "golden", root / "actual"
    manifest = golden.generate(d, cases=36, seed=5, actual=a)
    return d, a, manifest


def test_manifest_fields_and_files(generated):
    d, a, manifest = generated
    assert golden.read_manifest(d) == json.loads(json.dumps(manifest))
    assert manifest["golden_dtype"] == "float64" and manifest["byte_order"] == "little"
    for c in manifest["cases"]:
        assert set(c) >= {"id", "op", "dtype", "format", "input_shape", "result_shape",
                          "align_corners", "scales", "input", "golden", "rule", "checks"}
        size = lambda name: os.path.getsize(os.path.join(d, name))  # noqa: E731
        item = _cases.numpy_dtype(c["dtype"]).itemsize
        assert size(c["input"]) == math.prod(c["input_shape"]) * item
        assert size(c["golden"]) == math.prod(c["result_shape"]) * 8
        assert c["checks"] == {"deterministic": True, "unwritten": 0}
        x = _files.read_array(os.path.join(d, c["input"]), c["dtype"], c["input_shape"],
                              c["format"], c["id"])
        assert np.array_equal(x, _cases.values(c), equal_nan=True)


def test_ndhwc_files_are_in_channels_last_order(tmp_path):
    x = np.arange(2 * 3 * 1 * 2 * 2, dtype=np.float32).reshape(2, 3, 1, 2, 2)
    _files.write_array(tmp_path / "x.bin", x, "NDHWC")
    flat = np.fromfile(tmp_path / "x.bin", dtype="<f4")
    assert np.array_equal(flat, x.transpose(0, 2, 3, 4, 1).ravel())
    assert np.array_equal(_files.read_array(tmp_path / "x.bin", "float32", x.shape, "NDHWC", "x"), x)


@pytest.mark.parametrize("op", ["backward", "forward"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_goldens_bit_exact_against_the_float64_path(tmp_path, op, dtype):
    manifest = golden.generate(tmp_path, op=op, dtypes=[dtype], cases=24, seed=11)
    compared = 0
    for c in manifest["cases"]:
        x = _files.read_array(tmp_path / c["input"], dtype, c["input_shape"], c["format"], "")
        g = _files.read_array(tmp_path / c["golden"], "float64", c["result_shape"],
                              c["format"], "")
        wide = x.astype(np.float64)
        scales = cann_scales(c["scales"], c["align_corners"])   # the scales CANN uses
        try:
            if op == "backward":
                expect = tb.upsample_trilinear3d_backward(
                    wide, c["result_shape"], align_corners=c["align_corners"], scales=scales)
            else:
                expect = tb.upsample_trilinear3d(wide, c["result_shape"][2:],
                                                 c["align_corners"], scales)
        except tb.InvalidArgumentError:
            continue        # a scale the one call's (PyTorch's) consistency rule refuses
        assert expect.dtype == np.float64
        assert np.array_equal(g, expect, equal_nan=True), c["id"]
        compared += 1
    assert compared >= len(manifest["cases"]) * 3 // 4


def _perturb(d, a, case):
    """Move the result's element of largest |golden| past every bound (32 ulp is < |g| / 4)."""
    g = np.fromfile(os.path.join(d, case["golden"]), dtype="<f8")
    path = os.path.join(a, f"{case['id']}.actual.bin")
    data = np.fromfile(path, dtype=_cases.numpy_dtype(case["dtype"]))
    original = data.copy()
    k = int(np.argmax(np.abs(g)))
    data[k] = g[k] + 100 * (1 + abs(g[k]))
    data.tofile(path)
    return path, original


def _regular(manifest):
    return next(c for c in manifest["cases"] if math.prod(c["result_shape"]) > 8
                and "special" not in c["rule"])


@pytest.mark.parametrize("standard", ["mixed", "commercial"])
def test_round_trip_passes_and_a_perturbed_element_fails_naming_the_case(generated, tmp_path,
                                                                         standard, capsys):
    d, a, manifest = generated
    # The commercial standard's third party: this library's own results, unperturbed.
    ref = str(_copy(a, tmp_path)) if standard == "commercial" else None
    assert golden.compare(d, a, reference=ref, standard=standard).passed
    case = _regular(manifest)
    path, original = _perturb(d, a, case)
    try:
        report = golden.compare(d, a, reference=ref, standard=standard, level="L0")
        assert not report.passed
        assert [c["id"] for c in report.failed] == [case["id"]]
        assert main(["golden", "compare", str(d), "--actual", str(a), "--standard", standard,
                     "--no-progress"] + (["--reference", ref] if ref else [])) == 1
        out = capsys.readouterr().out
        assert f"FAIL {case['id']}" in out and "1 failed -> FAIL" in out
    finally:
        original.tofile(path)


def test_one_wrong_small_value_passes_the_dual_benchmark():
    """The commercial standard's letter: ErrorCount_npu <= 2 max(ErrorCount_third, 1)."""
    g = np.zeros(100)
    g[0] = 1.0
    a = g.copy()
    a[50] = 100.0                     # golden 0: a small value, wrong by 100
    npu, third = golden.metrics(a, g, "float16"), golden.metrics(g, g, "float16")
    assert golden.verdict("commercial", "float16", npu, third)[0]
    assert not golden.verdict("mixed", "float16", npu)[0]


@pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is the default third party")
def test_round_trip_against_pytorch_third_party(generated, tmp_path, capsys):
    d, a, _ = generated
    report = golden.compare(d, a, standard="commercial", level="L0")
    assert report.passed, report.summary()
    assert report.third_party.startswith("PyTorch ")
    assert main(["golden", "compare", str(d), "--actual", str(a), "--json",
                 str(tmp_path / "r.json"), "--no-progress"]) == 0
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["passed"] and saved["cases_total"] == len(report.cases)
    assert set(saved["cases"][0]) >= {"metrics", "third_party_metrics", "ratios", "reasons"}
    assert "third party: PyTorch" in capsys.readouterr().out


@pytest.mark.skipif(not HAS_MPL, reason="--plot needs matplotlib")
def test_plot_is_written(generated, tmp_path):
    d, a, _ = generated
    assert main(["golden", "compare", str(d), "--actual", str(a), "--standard", "mixed",
                 "--plot", str(tmp_path / "p.png"), "--no-progress"]) == 0
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------- determinism and coverage checks


def test_checks_catch_unwritten_elements_and_nondeterminism(monkeypatch):
    case = _cases.level_cases("backward", "L0", dtypes=("float32",), count=1,
                              special=False)[0]
    x = _cases.values(case)
    assert _run.library_result(case, x)[1] == {"deterministic": True, "unwritten": 0}
    real = _run.run_cann

    def skips_one(case, source, out):       # writes every element but the first
        full = real(case, source, np.empty_like(out))
        first = out.reshape(-1)[0].copy() if out.flags.c_contiguous else out.flat[0]
        out[...] = full
        out.flat[0] = first
        return out

    monkeypatch.setattr(_run, "run_cann", skips_one)
    assert _run.library_result(case, x)[1] == {"deterministic": False, "unwritten": 1}
    calls = []

    def drifts(case, source, out):          # the second run differs in one element
        real(case, source, out)
        calls.append(1)
        if len(calls) == 2:
            out.flat[0] = np.nextafter(out.flat[0], np.inf)
        return out

    monkeypatch.setattr(_run, "run_cann", drifts)
    assert _run.library_result(case, x)[1] == {"deterministic": False, "unwritten": 0}


# ---------------------------------------------------------------- the CLI


def _copy(d, tmp_path):
    import shutil

    return shutil.copytree(d, tmp_path / os.path.basename(d))


def test_cli_generate(tmp_path, capsys):
    assert main(["golden", "generate", str(tmp_path / "g"), "--op", "forward", "--cases", "3",
                 "--dtype", "float32", "--no-special", "--write-actual", str(tmp_path / "a"),
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "3 forward cases" in out and "every element written (NaN-prefilled): yes" in out
    assert sorted(os.listdir(tmp_path / "a")) == [f"c0000{k}.actual.bin" for k in range(3)]


@pytest.mark.parametrize("problem", ["no directory", "no manifest", "bad manifest",
                                     "no actual dir", "missing actual", "truncated actual",
                                     "truncated golden", "long reference"])
def test_cli_exit_2_names_the_file(generated, tmp_path, capsys, problem):
    d, a, manifest = generated
    d, a = _copy(d, tmp_path), _copy(a, tmp_path)
    case = manifest["cases"][3]
    name = f"{case['id']}.actual.bin"
    extra = []
    if problem == "no directory":
        d, expect = tmp_path / "nowhere", "nowhere: not a directory"
    elif problem == "no manifest":
        os.remove(d / "manifest.json")
        expect = "manifest.json: not found"
    elif problem == "bad manifest":
        (d / "manifest.json").write_text('{"cases": ')
        expect = "manifest.json: unreadable"
    elif problem == "no actual dir":
        a, expect = tmp_path / "none", "none: not a directory"
    elif problem == "missing actual":
        os.remove(a / name)
        expect = f"case {case['id']}: missing {a / name}"
    elif problem == "truncated actual":
        (a / name).write_bytes((a / name).read_bytes()[:-1])
        expect = f"case {case['id']}: {a / name} (the result) has"
    elif problem == "truncated golden":
        g = d / case["golden"]
        g.write_bytes(g.read_bytes()[:-8])
        expect = f"case {case['id']}: {g} (the golden) has"
    else:
        r = _copy(a, tmp_path / "r")
        (r / name).write_bytes((r / name).read_bytes() + b"\0\0")
        extra = ["--reference", str(r)]
        expect = f"case {case['id']}: {r / name} (the third party's result) has"
    assert main(["golden", "compare", str(d), "--actual", str(a), "--no-progress"] + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m trilinear_bwd golden compare: error: ") and expect in err
    # One error line; a missing result adds the note on --present.
    assert len([x for x in err.strip().splitlines() if ": note: " not in x]) == 1


def test_cli_bad_options_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["golden", "compare", "d", "--actual", "a", "--standard", "strict"])
    assert exc.value.code == 2
    assert "invalid choice: 'strict'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["golden", "generate", "d", "--cases", "-1"])
    assert exc.value.code == 2


def test_progress_bar_on_a_stream(tmp_path):
    import io

    stream = io.StringIO()
    golden.generate(tmp_path, cases=2, dtypes=["float32"], special=False, progress=stream)
    assert stream.getvalue().endswith("] 2/2\n") and stream.getvalue().startswith("\rgenerate [")


def test_package_import_leaves_golden_torch_and_matplotlib_unloaded():
    code = ("import sys, trilinear_bwd, trilinear_bwd.__main__\n"
            "a = [m for m in ('trilinear_bwd.golden', 'torch', 'matplotlib') if m in sys.modules]\n"
            "import trilinear_bwd.golden\n"
            "b = [m for m in ('torch', 'matplotlib') if m in sys.modules]\n"
            "print(a, b)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[] []"

"""The declared dependency floors are the ones ci/test_floors.sh installs and tests."""

import re
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _floors():
    text = (ROOT / "pyproject.toml").read_text()
    deps = re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.M | re.S).group(1)
    return re.findall(r'"([^"]+)"', deps)


def _release(text):
    return tuple(int(p) for p in re.match(r"[0-9.]+", text).group(0).rstrip(".").split("."))


@pytest.mark.parametrize("spec", _floors())
def test_each_dependency_has_a_plain_floor_that_is_installed_or_newer(spec):
    # ci/test_floors.sh turns each `name>=X` into `name==X`: anything else
    # (an upper bound, a marker) would not be tested there.
    m = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", spec)
    assert m, spec
    if (ROOT / "trilinear_bwd").is_dir():
        assert _release(version(m.group(1))) >= _release(m.group(2))


def test_the_floors_step_is_part_of_ci():
    if not (ROOT / ".ci" / "run").exists():
        pytest.skip("no CI runner in this tree")
    assert "test_floors.sh" in (ROOT / ".ci" / "run").read_text()
    assert (ROOT / "ci" / "test_floors.sh").exists()


def _extra_floors():
    """``{extra: {package: floor}}`` of pyproject's optional dependencies' ``name>=X``."""
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^\[project\.optional-dependencies\]\n(.*?)(?=^\[)", text,
                      re.M | re.S).group(1)
    floors = {}
    for extra, body in re.findall(r"^(\w+)\s*=\s*\[(.*?)\]", block, re.M | re.S):
        for spec in re.findall(r'"([^"]+)"', body):
            m = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?>=([0-9.]+)", spec)
            if m:
                floors.setdefault(extra, {})[m.group(1)] = m.group(2)
    return floors


def test_the_torch_floor_is_what_ci_tests():
    # ci/test_torch_range.sh installs torch==X for the [torch] extra's
    # torch>=X (and the newest release); [golden] promises the same floor.
    floors = _extra_floors()
    floor = floors["torch"]["torch"]
    assert floors["golden"]["torch"] == floor
    assert len(floor.split(".")) == 3, "a floor CI installs exactly: X.Y.Z"
    script = ROOT / "ci" / "test_torch_range.sh"
    if not script.exists():
        pytest.skip("no CI scripts in this tree")
    text = script.read_text()
    assert 'torch\\s*=\\s*\\["torch>=([0-9.]+)"\\]' in text   # reads the extra, not a copy
    assert '"torch==$release"' in text and 'for release in "$floor" "$newest"' in text
    run = ROOT / ".ci" / "run"
    if run.exists():
        assert "test_torch_range.sh" in run.read_text()
    # The floor the torch wing's private names were checked on.
    private = (ROOT / "trilinear_bwd" / "torch" / "_private.py").read_text()
    assert all(_release(s) >= _release(floor)[:2] for s in
               re.findall(r'^\s+"(\d+\.\d+)", "', private, re.M))

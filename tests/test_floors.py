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

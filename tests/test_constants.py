"""The constants shared by Python and C: defined once in _constants.h, read by Python."""

import re
from pathlib import Path

import trilinear_bwd
from trilinear_bwd._core import _constants

HEADER = Path(trilinear_bwd.__file__).parent / "_kernels" / "_constants.h"


def _header_values():
    text = HEADER.read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return {name: int(value) for name, value in re.findall(r"#define\s+TB_(\w+)\s+\(?(-?\d+)\)?", text)}


def test_every_constant_of_the_header_reaches_python_with_its_value():
    values = _header_values()
    assert len(values) >= 10, "the header parse found too few constants"
    for name, value in values.items():
        assert getattr(_constants, name) == value, name


def test_python_defines_none_of_the_shared_constants_itself():
    """No module of the package assigns one of the header's names a literal."""
    names = set(_header_values())
    package = Path(trilinear_bwd.__file__).parent
    offenders = []
    for path in package.rglob("*.py"):
        for line in path.read_text().splitlines():
            m = re.match(r"\s*([A-Z_0-9, ]+)\s*=\s*[\d(]", line)
            if m and names & {n.strip() for n in m.group(1).split(",")}:
                offenders.append(f"{path.name}: {line.strip()}")
    assert not offenders, offenders

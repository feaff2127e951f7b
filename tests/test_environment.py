"""No environment variable can break the package.

The class: every environment variable the package reads.  The variables
are found by scanning the package's source for their names, so a new one
is tested as soon as it appears (and fails the first test until
``trilinear_bwd._core._environ`` parses it).  Each is set to bad values in a
subprocess that imports the package and makes a call: the import and the
call must work, and a variable the package parses must give a warning that
names it, the value and the default used.
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest
from conftest import sample

import trilinear_bwd
from trilinear_bwd._core import _environ

PACKAGE = pathlib.Path(trilinear_bwd.__file__).parent
_NAME = re.compile(r"""["'](TRILINEAR_BWD_[A-Z0-9_]+|OMP_[A-Z0-9_]+)["']""")
# Modules that may look at os.environ directly: the parser, and show_config,
# which only displays the OpenMP variables (the OpenMP runtime parses them).
_READERS = {"_environ.py", "_info.py"}


def _sources():
    return sorted(p for p in PACKAGE.rglob("*") if p.suffix in (".py", ".pyx", ".pxi", ".pxd"))


def _variables():
    names = set()
    for path in _sources():
        names.update(_NAME.findall(path.read_text()))
    return sorted(names)


VARIABLES = _variables()
OWN = [name for name in VARIABLES if name.startswith("TRILINEAR_BWD_")]
OPENMP = [name for name in VARIABLES if name.startswith("OMP_")]


def test_every_variable_is_parsed_in_one_place():
    assert {"TRILINEAR_BWD_POOL_BYTES", "TRILINEAR_BWD_KERNEL"} <= set(OWN)
    assert set(OWN) == set(_environ.VARIABLES), "parse every TRILINEAR_BWD_* in _environ"
    for path in _sources():
        if path.name not in _READERS:
            assert not re.search(r"os\.environ|getenv", path.read_text()), path.name


BAD = {
    "TRILINEAR_BWD_POOL_BYTES": ["", " ", "512X", "1e9", "-1", "1.5G", "0x10", "12iB", "abc",
                                 "9" * 5000],
    "TRILINEAR_BWD_KERNEL": ["sse9", "-1", "512M", "\u00e9", "x" * 300],
}
OPENMP_BAD = ["", "abc", "-1", "1e9", "0"]

_CALL = """
import numpy as np, trilinear_bwd as tb
from trilinear_bwd._core import _dispatch
g = np.ones((1, 2, 8, 8, 8), np.float32)
r = tb.upsample_trilinear3d_backward(g, (4, 4, 4))
y = tb.upsample_trilinear3d(np.ones((1, 2, 16, 32, 32), np.float32), (32, 64, 64))
assert float(r.sum()) == 1024.0 and float(y.min()) == 1.0 == float(y.max())
print(tb.pool.limit(), _dispatch.active_variant())
"""


def _run(name, value):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRILINEAR_BWD_", "OMP_"))}
    env[name] = value
    return subprocess.run([sys.executable, "-c", _CALL], capture_output=True, text=True,
                          env=env, timeout=120, cwd=PACKAGE.parent)


def _cases():
    for name in OWN:
        for value in BAD.get(name, ["", "-1", "junk"]):
            yield name, value
    for name in OPENMP:
        for value in OPENMP_BAD:
            yield name, value


@pytest.mark.parametrize("name,value", sample(_cases(), 10),
                         ids=[f"{n}={v[:12]!r}" for n, v in sample(_cases(), 10)])
def test_a_bad_value_never_breaks_import_or_a_call(name, value):
    result = _run(name, value)
    assert result.returncode == 0, result.stderr
    limit, variant = result.stdout.split()
    assert "Traceback" not in result.stderr
    if name == "TRILINEAR_BWD_POOL_BYTES":
        assert int(limit) == trilinear_bwd.pool.POOL_BYTES
    if name == "TRILINEAR_BWD_KERNEL":
        from trilinear_bwd._core import _dispatch

        assert variant == _dispatch.available_variants()[0]
    if name in _environ.VARIABLES:
        assert f"{name}={value!r}" in result.stderr, result.stderr
        assert "using the default" in result.stderr
        assert result.stderr.count("RuntimeWarning") == 1


@pytest.mark.parametrize("text,expected", [
    ("0", 0), ("536870912", 2**29), ("512M", 2**29), ("512m", 2**29), ("512MiB", 2**29),
    (" 1 GiB ", 2**30), ("1g", 2**30), ("64K", 2**16), ("64kib", 2**16), ("2T", 2**41),
    ("12B", 12), ("", None), ("-1", None), ("+1", None), ("1e9", None), ("1.5G", None),
    ("0x10", None), ("12iB", None), ("1 G B", None), ("1PB", None), ("\u0661", None),
    (str(2**63 - 1), 2**63 - 1), (str(2**63), None), ("8388608T", None), ("0" * 40 + "1", 1),
])
def test_byte_counts_accepted_forms(text, expected):
    assert _environ.parse_bytes(text) == expected


@pytest.mark.parametrize("value,expected", [("0", 0), ("256M", 256 * 2**20), ("1GiB", 2**30)])
def test_a_good_pool_size_is_used_silently(value, expected):
    result = _run("TRILINEAR_BWD_POOL_BYTES", value)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[0]) == expected
    assert "RuntimeWarning" not in result.stderr

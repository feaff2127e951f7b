#!/usr/bin/env bash
# The oldest versions the package declares, tested for real: the oldest
# Python of ci/_pythons.sh (3.9 here; requires-python says >=3.9) in a fresh
# virtual environment, with every runtime dependency of pyproject.toml at
# exactly its floor (`numpy>=2.0` -> numpy==2.0.0, `ml_dtypes>=0.4` ->
# ml_dtypes==0.4.0: the floors are read from pyproject.toml, so whatever is
# declared is what is tested), the package built from this checkout against
# them, and the test suite (without its slow tests, PyTorch or Dask, which
# skip: they test the front ends, not the floors) run from an empty directory.
#
# Runnable from any directory, and again.  Environment: PYTHON picks the
# interpreter (else the oldest of ci/_pythons.sh).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=ci/_pythons.sh
. "$repo/ci/_pythons.sh"
# The first line without a pipe into `head`: under pipefail, a writer still
# writing when `head` has left dies of SIGPIPE and fails the step (exit 141).
pythons="$(ci_pythons)"
py="${pythons%%$'\n'*}"

work="$(mktemp -d "${TMPDIR:-/tmp}/trilinear_bwd-floors.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir "$work/empty"

# Each `name>=X` of [project] dependencies as `name==X` (X padded to three
# parts: pip's == compares release segments, so 2.0 and 2.0.0 are the same).
mapfile -t floors < <("$py" - "$repo/pyproject.toml" <<'PY'
import re, sys

text = open(sys.argv[1]).read()
deps = re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.M | re.S).group(1)
for spec in re.findall(r'"([^"]+)"', deps):
    m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([0-9.]+)\s*", spec)
    if not m:
        sys.exit(f"a dependency without a plain floor: {spec!r}")
    print(f"{m.group(1)}=={m.group(2)}")
PY
)
echo "== floors: Python $("$py" -c 'import platform; print(platform.python_version())')," \
     "${floors[*]}"

venv="$work/venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "${floors[@]}" "setuptools>=77" wheel "Cython>=3.0.10" \
    "pytest>=7" "hypothesis>=6" "threadpoolctl>=3"
# Built against the floor NumPy itself (no build isolation, which would
# build against the newest), then installed without touching the floors;
# from a copy of the checkout's files, so that the build leaves nothing in it.
mkdir "$work/src"
if git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$repo" && git ls-files -z -co --exclude-standard | tar --null -T - -cf -) \
        | tar -x -C "$work/src"
else
    cp -r "$repo"/. "$work/src"
fi
rm -f "$work"/src/trilinear_bwd/*.so "$work"/src/trilinear_bwd/*/*.so
"$venv/bin/python" -m pip install --quiet --no-build-isolation --no-deps "$work/src"
"$venv/bin/python" - "${floors[@]}" <<'PY'
import sys
from importlib.metadata import version

for spec in sys.argv[1:]:
    name, want = spec.split("==")
    got = version(name)
    if tuple(int(p) for p in got.split(".")[:3]) != tuple(int(p) for p in (want + ".0.0").split(".")[:3]):
        sys.exit(f"{name} {got} is installed, not the floor {want}")
    print(f"installed: {name} {got}")
PY
cd "$work/empty"
TRILINEAR_BWD_EXPECT_INSTALLED_IN="$venv" \
    "$venv/bin/python" -m pytest "$repo/tests" -p no:cacheprovider -q -m "not slow"
echo "== the floors pass"

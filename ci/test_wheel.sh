#!/usr/bin/env bash
# Test what users install: the wheel (and the sdist) that ci/build_wheels.sh
# left in wheelhouse/, each in a fresh virtual environment, run from an empty
# directory so that the source tree cannot be imported by accident.
#
#  1. wheel: pip install "<wheel>[test]"; check the package is the installed
#     one; --version --info; the whole test suite (the repository's tests/
#     against the installed package); the main job `python -m trilinear_bwd`;
#     the import time beyond NumPy (printed, not judged).
#  2. sdist: pip install <sdist> (compiles it on its own); --info; a small
#     case of the main job.
#
# Runnable from any directory, and again.  Environment: PYTHON (default
# python3); TRILINEAR_BWD_SKIP_SDIST=1 skips step 2.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"

shopt -s nullglob
wheels=("$repo"/wheelhouse/trilinear_bwd-*.whl)
sdists=("$repo"/wheelhouse/trilinear_bwd-*.tar.gz)
shopt -u nullglob
if [ ${#wheels[@]} -ne 1 ] || [ ${#sdists[@]} -ne 1 ]; then
    echo "expected one wheel and one sdist in $repo/wheelhouse (run ci/build_wheels.sh)," \
         "found: ${wheels[*]:-no wheel} ${sdists[*]:-no sdist}" >&2
    exit 1
fi
wheel="${wheels[0]}"
sdist="${sdists[0]}"

work="$(mktemp -d "${TMPDIR:-/tmp}/trilinear_bwd-wheeltest.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir "$work/empty"
cd "$work/empty"

# Fails unless trilinear_bwd is imported from the venv's site-packages, with
# its compiled extensions, and nothing on sys.path points into the repository.
check_installed() {
    "$1/bin/python" - "$1" "$repo" <<'PY'
import os, sys

venv, repo = (os.path.realpath(p) for p in sys.argv[1:])
import trilinear_bwd
from trilinear_bwd import _openmp_helpers

for name, path in (("trilinear_bwd", trilinear_bwd.__file__),
                   ("its extension", _openmp_helpers.__file__)):
    path = os.path.realpath(path)
    if not path.startswith(venv + os.sep):
        sys.exit(f"{name} was imported from {path}, not from the venv {venv}")
leaks = [p for p in sys.path if p and os.path.realpath(p).startswith(repo)]
if leaks:
    sys.exit(f"the repository is on sys.path: {leaks}")
print(f"installed: trilinear_bwd {trilinear_bwd.__version__} from {os.path.dirname(trilinear_bwd.__file__)}")
PY
}

echo "== wheel: $(basename "$wheel")"
venv="$work/wheel-venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "$wheel[test]"
check_installed "$venv"
"$venv/bin/python" -m trilinear_bwd --version --info

echo "-- tests against the installed wheel"
# pytest puts tests/ (for `from conftest import ...`) on sys.path, not the
# repository root, and the current directory is empty: the package under test
# is the installed one.  test_tests_run_against_installed_package checks that
# from inside the run.
TRILINEAR_BWD_EXPECT_INSTALLED_IN="$venv" \
    "$venv/bin/python" -m pytest "$repo/tests" -p no:cacheprovider -q

echo "-- the main job: python -m trilinear_bwd"
"$venv/bin/python" -m trilinear_bwd
"$venv/bin/trilinear-bwd" --version

echo "-- import time beyond NumPy (informational; budget 30 ms)"
# `import numpy; import trilinear_bwd` in one process: the package's own
# cumulative -X importtime entry is what it adds once NumPy is loaded.  The
# best of 7 runs, since other work on the machine only ever adds time.
"$venv/bin/python" - "$venv/bin/python" <<'PY'
import subprocess, sys

def added_ms():
    err = subprocess.run([sys.argv[1], "-X", "importtime", "-c", "import numpy; import trilinear_bwd"],
                         capture_output=True, text=True, check=True).stderr
    rows = [line.split("|") for line in err.splitlines() if line.startswith("import time:")]
    cumulative = {row[2].rstrip(): int(row[1]) for row in rows[1:]}
    return cumulative[" trilinear_bwd"] / 1e3, cumulative[" numpy"] / 1e3

runs = [added_ms() for _ in range(7)]
print(f"import trilinear_bwd after numpy: {min(r[0] for r in runs):.1f} ms "
      f"(numpy itself: {min(r[1] for r in runs):.1f} ms); best of {len(runs)}")
PY

if [ "${TRILINEAR_BWD_SKIP_SDIST:-0}" != 1 ]; then
    echo "== sdist: $(basename "$sdist")"
    venv="$work/sdist-venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet "$sdist"
    check_installed "$venv"
    "$venv/bin/python" -m trilinear_bwd --info
    "$venv/bin/python" -m trilinear_bwd -n 1 -c 4 -i 5,6,7 -o 9,12,13 --dtype bfloat16 -r 1
fi
echo "== wheel and sdist OK"

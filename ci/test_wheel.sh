#!/usr/bin/env bash
# Test what users install: the wheels (and the sdist) that ci/build_wheels.sh
# left in wheelhouse/, each in a fresh virtual environment, run from an empty
# directory so that the source tree cannot be imported by accident.
#
#  1. for every interpreter of ci/_pythons.sh (pyenv's CPython 3.9-3.13 here)
#     its wheel for this machine: pip install the wheel and the test extra's
#     requirements (PyTorch only where the pinned release is a local file,
#     Python 3.11 here: the tests that need it skip elsewhere); check the
#     package is the installed one; --version --info; the tests (the
#     repository's tests/ against the installed package:
#     the wheel's own checks (WHEEL_TESTS below) on every interpreter, with
#     the Dask front end's tests on the newest;
#     TRILINEAR_BWD_WHEEL_FULL=1 runs the whole suite on every one); the main job
#     `python -m trilinear_bwd`; the import time beyond NumPy (printed, not
#     judged).  A table of the results closes the step.
#  2. sdist (with $PYTHON, else python3): pip install <sdist> (compiles it on
#     its own); --info; a small case of the main job.
#
# Runnable from any directory, and again.  Environment: PYTHON tests that one
# interpreter's wheel, PYTHONS (words) those; TRILINEAR_BWD_SKIP_SDIST=1
# skips step 2.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=ci/_pythons.sh
. "$repo/ci/_pythons.sh"
mapfile -t pythons < <(ci_pythons)
machine="$(uname -m)"

shopt -s nullglob
sdists=("$repo"/wheelhouse/trilinear_bwd-*.tar.gz)
shopt -u nullglob
if [ ${#sdists[@]} -ne 1 ]; then
    echo "expected one sdist in $repo/wheelhouse (run ci/build_wheels.sh)," \
         "found: ${sdists[*]:-none}" >&2
    exit 1
fi
sdist="${sdists[0]}"

# Each interpreter's wheel for this machine (others, the aarch64 one of
# ci/cross_aarch64.sh say, are not this step's).
wheels=()
for py in "${pythons[@]}"; do
    tag="$(py_tag "$py")"
    shopt -s nullglob
    found=("$repo"/wheelhouse/trilinear_bwd-*-"$tag"-"$tag"-*"$machine".whl)
    shopt -u nullglob
    if [ ${#found[@]} -ne 1 ]; then
        echo "expected one $tag $machine wheel in $repo/wheelhouse (run ci/build_wheels.sh)," \
             "found: ${found[*]:-none}" >&2
        exit 1
    fi
    wheels+=("${found[0]}")
done

# What a wheel can get wrong that the source tree cannot: a compiled kernel
# giving other bits (the digests of every dtype, layout, operator and
# variant), a module or file missing from it, an interpreter's differences
# in the front ends.  The whole suite runs from source too (`pytest`, at
# full depth in .ci/run), on
# the oldest interpreter against the dependency floors (test_floors.sh) and
# under the sanitizers (sanitize.sh): running it on all five wheels as well
# would spend a third of CI's time on the same tests.
WHEEL_TESTS=(test_digests.py test_kernel.py test_forward.py test_validation.py
             test_lifecycle.py test_cli_and_import.py test_operator.py test_constants.py
             test_interop.py test_torch_fast.py test_torch_import.py)
# The newest interpreter adds the Dask front end's tests (Dask is installed
# there alone).  It used to run the whole suite at the default depth: a
# fourth run of the same tests (full depth from source, the floors on the
# oldest interpreter, the sanitizers), which CI's 40 minutes on 2 cores no
# longer hold beside ci/test_torch_range.sh; TRILINEAR_BWD_WHEEL_FULL=1 runs
# the whole suite on every wheel.
NEWEST_TESTS=("${WHEEL_TESTS[@]}" test_dask.py)

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
from trilinear_bwd._kernels import _native

for name, path in (("trilinear_bwd", trilinear_bwd.__file__),
                   ("its extension", _native.__file__)):
    path = os.path.realpath(path)
    if not path.startswith(venv + os.sep):
        sys.exit(f"{name} was imported from {path}, not from the venv {venv}")
leaks = [p for p in sys.path if p and os.path.realpath(p).startswith(repo)]
if leaks:
    sys.exit(f"the repository is on sys.path: {leaks}")
print(f"installed: trilinear_bwd {trilinear_bwd.__version__} from {os.path.dirname(trilinear_bwd.__file__)}")
PY
}

# The test extra's requirements of the installed package, one a line,
# without PyTorch (torch_spec prints its requirement alone).
test_requirements() {
    "$1/bin/python" - "$2" <<'PY'
import re, sys
from importlib.metadata import requires

want_torch = sys.argv[1] == "torch"
for req in requires("trilinear_bwd") or []:
    spec, _, marker = req.partition(";")
    if not re.search(r"""extra\s*==\s*["']test["']""", marker):
        continue
    name = re.match(r"[A-Za-z0-9_.-]+", spec.strip()).group(0).lower()
    if (name == "torch") == want_torch:
        print(spec.strip())
PY
}

# One interpreter's wheel: install, check, test, run.  Prints its pytest
# summary line last, on a line of its own starting "SUMMARY".
test_one() {
    local py="$1" wheel="$2" full="$3" tag venv log torch_spec reqs tests
    tag="$(py_tag "$py")"
    venv="$work/venv-$tag"
    log="$work/pytest-$tag.log"
    echo "== wheel: $(basename "$wheel") ($py)"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet "$wheel"
    mapfile -t reqs < <(test_requirements "$venv" other)
    if [ "$full" != 1 ]; then
        # The wheel's own checks use no Dask: leave it (and the two dozen
        # packages it brings) out of the older interpreters' environments.
        mapfile -t reqs < <(printf '%s\n' "${reqs[@]}" | grep -viE '^(dask|distributed)\b' || true)
    fi
    torch_spec="$(test_requirements "$venv" torch)"
    # PyTorch only from a local file (pip's find-links): never a download, so
    # never the multi-gigabyte CUDA build; its own requirements come from the
    # index afterwards.  Without it the tests that need it skip.
    if [ -n "$torch_spec" ] && "$venv/bin/python" -m pip install --quiet --no-index --no-deps \
            "$torch_spec" >/dev/null 2>&1; then
        reqs+=("$torch_spec")
        echo "-- test requirements: ${reqs[*]} (PyTorch from a local file)"
    else
        echo "-- test requirements: ${reqs[*]} (no local $torch_spec for $tag: its tests skip)"
    fi
    "$venv/bin/python" -m pip install --quiet "${reqs[@]}"
    check_installed "$venv"
    "$venv/bin/python" -m trilinear_bwd --version --info

    if [ "$full" = 1 ]; then
        tests=("$repo/tests")
        echo "-- tests against the installed wheel: the whole suite (default depth)"
    elif [ "$full" = newest ]; then
        tests=("${NEWEST_TESTS[@]/#/$repo/tests/}")
        echo "-- tests against the installed wheel: the wheel's checks and Dask's (${NEWEST_TESTS[*]})"
    else
        tests=("${WHEEL_TESTS[@]/#/$repo/tests/}")
        echo "-- tests against the installed wheel: the wheel's checks (${WHEEL_TESTS[*]})"
    fi
    # pytest puts tests/ (for `from conftest import ...`) on sys.path, not the
    # repository root, and the current directory is empty: the package under
    # test is the installed one.  test_tests_run_against_installed_package
    # checks that from inside the run.
    TRILINEAR_BWD_EXPECT_INSTALLED_IN="$venv" \
        "$venv/bin/python" -m pytest "${tests[@]}" -p no:cacheprovider -q 2>&1 | tee "$log"

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
    rm -rf "$venv"
}

matrix=()
failed=0
for i in "${!pythons[@]}"; do
    py="${pythons[$i]}"
    wheel="${wheels[$i]}"
    start=$SECONDS
    # A subshell with errexit of its own (errexit does not reach into an
    # `if` condition), so that one interpreter's failure still lets the
    # others run and the table show it.
    full="${TRILINEAR_BWD_WHEEL_FULL:-0}"
    if [ "$i" -eq $((${#pythons[@]} - 1)) ] && [ "$full" != 1 ]; then
        full=newest                                      # the newest interpreter
    fi
    set +e
    (set -e; test_one "$py" "$wheel" "$full")
    rc=$?
    set -e
    if [ "$rc" -eq 0 ]; then
        result="ok"
    else
        result="FAILED"
        failed=1
    fi
    tag="$(py_tag "$py")"
    summary="$(grep -E '^[0-9]+ (passed|failed)|^=* ?[0-9]+ (passed|failed)' "$work/pytest-$tag.log" 2>/dev/null \
               | tail -n 1 | sed 's/=//g; s/^ *//; s/ *$//')"
    matrix+=("$(printf '%-7s %-58s %-6s %4d s  %s' "$tag" "$(basename "$wheel")" "$result" \
                "$((SECONDS - start))" "${summary:-no pytest summary}")")
done
echo "== wheels tested"
printf '%s\n' "${matrix[@]}"
if [ "$failed" -ne 0 ]; then
    echo "some wheels failed (see above)" >&2
    exit 1
fi

if [ "${TRILINEAR_BWD_SKIP_SDIST:-0}" != 1 ]; then
    echo "== sdist: $(basename "$sdist")"
    venv="$work/sdist-venv"
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet "$sdist"
    check_installed "$venv"
    "$venv/bin/python" -m trilinear_bwd --info
    "$venv/bin/python" -m trilinear_bwd -n 1 -c 4 -i 5,6,7 -o 9,12,13 --dtype bfloat16 -r 1
fi
echo "== wheel and sdist OK"

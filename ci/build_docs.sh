#!/usr/bin/env bash
# Build the documentation site (Sphinx + MyST) with warnings as errors.
#
# The package and its `docs` extra go into a throw-away virtual environment,
# so the API reference is generated from the installed package, exactly as a
# user gets it (the wheel of wheelhouse/ when ci/build_wheels.sh left one for
# this interpreter), and the build needs only python3, a C compiler and PyPI.
# Runnable from any directory, and again.
#
# Output: docs/_build/html (index.html is the start page).
# Environment: PYTHON (default python3); TRILINEAR_BWD_DOCS_VENV overrides
# where the venv goes.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
venv="${TRILINEAR_BWD_DOCS_VENV:-${TMPDIR:-/tmp}/trilinear_bwd-docs-venv}"

echo "-- venv with trilinear_bwd[docs] in $venv"
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
# The wheel ci/build_wheels.sh made for this interpreter when there is one
# (what users install, and no second compile), else the checkout.
tag="$("$venv/bin/python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
shopt -s nullglob
wheels=("$repo"/wheelhouse/trilinear_bwd-*-"$tag"-"$tag"-*"$(uname -m)".whl)
shopt -u nullglob
if [ ${#wheels[@]} -eq 1 ]; then
    echo "-- from the wheel $(basename "${wheels[0]}")"
    "$venv/bin/python" -m pip install --quiet "${wheels[0]}[docs]"
else
    "$venv/bin/python" -m pip install --quiet "$repo[docs]"
fi

# Run from the docs folder with the sphinx-build script, whose sys.path does
# not hold the current directory: the package comes from the venv, never from
# the source tree (which has no compiled extensions unless built in place).
cd "$repo/docs"
"$venv/bin/python" -c "import trilinear_bwd, sys; print('documenting', trilinear_bwd.__version__, 'from', trilinear_bwd.__file__)"
rm -rf _build
echo "-- sphinx-build -n -W (nitpicky, warnings are errors)"
"$venv/bin/sphinx-build" -n -W --keep-going -b html . _build/html
echo "-- docs built: $repo/docs/_build/html/index.html"

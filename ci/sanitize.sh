#!/usr/bin/env bash
# Memory safety: build the extensions with AddressSanitizer and
# UndefinedBehaviorSanitizer and run the test suite under them.
#
#  1. Copy the sources to a temporary directory (the checkout never sees an
#     instrumented .so) and make a virtual environment there with the build
#     and test requirements read from pyproject.toml.
#  2. Build in place with TRILINEAR_BWD_SANITIZE=address,undefined (setup.py
#     adds -fsanitize=... -fno-omit-frame-pointer -g to the optimised build)
#     and -fno-sanitize-recover=all, so that any UB report is fatal; check
#     that every extension really is instrumented.
#  3. Check the wiring: a deliberate heap overflow under the same settings
#     must be reported and must fail, or a clean run below would prove nothing.
#  4. Run pytest (the suite at its default depth, tests/conftest.py: every
#     class of test, property tests with fewer examples, the largest
#     parametrisations sampled, and nothing marked slow -- the leak tests
#     measure RSS, which ASan's shadow memory and quarantine make
#     meaningless) with
#     libasan preloaded into the uninstrumented Python, leak detection off
#     (CPython keeps its objects until exit) and every report written to a
#     log file; then the kernel-heavy tests again with the baseline kernel
#     variant.  The run fails if pytest fails, or if any report was written.
#  5. Valgrind memcheck (when installed) on a subset, with an uninstrumented
#     build: results must not depend on memory the kernel never wrote.
#
# Environment: PYTHON (default python3), CC (default gcc; must provide
# libasan, as Debian's gcc does), SANITIZE_PYTEST_ARGS (more pytest
# arguments), SANITIZE_TORCH=0 (no PyTorch in the environment),
# SANITIZE_VALGRIND=0 (skip step 5), SANITIZE_KEEP=1 (keep the work
# directory), TRILINEAR_BWD_FUZZ_SCALE (multiplies the fuzz example counts).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
cc="${CC:-gcc}"
work="$(mktemp -d "${TMPDIR:-/tmp}/trilinear_bwd-sanitize.XXXXXX")"
cleanup() {
    if [ "${SANITIZE_KEEP:-0}" = 1 ]; then
        echo "work directory kept: $work"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
start=$SECONDS

libasan="$("$cc" -print-file-name=libasan.so)"
if [ ! -e "$libasan" ]; then
    echo "sanitize: $cc has no libasan.so (on Debian: apt-get install gcc)" >&2
    exit 1
fi
libasan="$(readlink -f "$libasan")"

echo "-- sources -> $work/src"
mkdir "$work/src" "$work/logs"
tar -C "$repo" \
    --exclude=.git --exclude=build --exclude=dist --exclude=wheelhouse \
    --exclude='*.so' --exclude='*.egg-info' --exclude=__pycache__ \
    --exclude=.hypothesis --exclude=.pytest_cache --exclude='.venv*' \
    --exclude=docs/_build --exclude='trilinear_bwd/*.c' --exclude='trilinear_bwd/*/*.c' \
    -cf - . | tar -C "$work/src" -xf -

echo "-- virtual environment"
"$python" -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
python -m pip install --quiet --upgrade pip
# Build requirements, dependencies and the test extra, as pyproject.toml lists
# them (SANITIZE_TORCH=0 leaves PyTorch out: its tests then skip).
mapfile -t requirements < <(python - "$work/src/pyproject.toml" "${SANITIZE_TORCH:-1}" <<'PY'
import sys
try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None
if tomllib is None:
    reqs = ["setuptools>=77", "Cython>=3.0.10", "numpy>=2.0", "ml_dtypes>=0.3", "pytest>=7",
            "hypothesis>=6", "threadpoolctl>=3", "torch==2.13.0"]
else:
    with open(sys.argv[1], "rb") as f:
        meta = tomllib.load(f)
    project = meta["project"]
    reqs = (meta["build-system"]["requires"] + project["dependencies"]
            + project["optional-dependencies"]["test"])
for req in reqs:
    if sys.argv[2] == "0" and req.startswith("torch"):
        continue
    print(req)
PY
)
python -m pip install --quiet "${requirements[@]}"

echo "-- instrumented build (address, undefined)"
cd "$work/src"
CC="$cc" CFLAGS="-fno-sanitize-recover=all" TRILINEAR_BWD_SANITIZE=address,undefined \
    python setup.py build_ext --inplace > "$work/build.log" 2>&1 \
    || { tail -n 40 "$work/build.log"; exit 1; }
shopt -s nullglob
extensions=(trilinear_bwd/*/*.so)
shopt -u nullglob
if [ ${#extensions[@]} -eq 0 ]; then
    echo "sanitize: no extension was built" >&2
    exit 1
fi
for so in "${extensions[@]}"; do
    symbols="$(nm -D "$so")"   # not piped into grep -q: SIGPIPE would fail the pipeline
    for symbol in __asan_init __ubsan_handle_; do
        if ! grep -q "$symbol" <<< "$symbols"; then
            echo "sanitize: $so is not instrumented ($symbol missing)" >&2
            exit 1
        fi
    done
    echo "   $so: ASan + UBSan"
done

# libstdc++ right after the runtime: ASan looks up the real __cxa_throw when
# it starts, and Python itself does not link libstdc++, so without it the
# first C++ exception thrown by a library loaded later (libtorch's pybind11
# iterators end with one: torch.jit graphs' nodes()) aborts the process in
# ASan's interceptor ("CHECK failed ... real___cxa_throw").
libstdcxx="$(readlink -f "$("$cc" -print-file-name=libstdc++.so.6)")"
export LD_PRELOAD="$libasan:$libstdcxx"
# allocator_may_return_null: the fuzz tests ask for absurd workspace sizes on
# purpose, and must see malloc fail (-> 561000) rather than ASan abort.
# PYTHONMALLOC=malloc: Python's own small blocks (a bytearray workspace, for
# instance) get red zones too.
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:allocator_may_return_null=1"
ASAN_OPTIONS+=":log_path=$work/logs/asan"
export PYTHONMALLOC=malloc
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$work/logs/ubsan"
export TRILINEAR_BWD_SANITIZER=address,undefined   # tests skip RSS assertions

echo "-- wiring check: a deliberate heap overflow must be caught"
if python -c "
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
p = libc.malloc(16)
ctypes.string_at(p, 32)
" 2>/dev/null; then
    echo "sanitize: the deliberate overflow went unnoticed; ASan is not active" >&2
    exit 1
fi
if ! grep -qs "heap-buffer-overflow" "$work"/logs/asan.*; then
    echo "sanitize: the deliberate overflow left no report in $work/logs" >&2
    exit 1
fi
rm -f "$work"/logs/*
echo "   caught, as it must be"

echo "-- tests under the sanitizers"
python -c "import trilinear_bwd as tb; print('  ', tb.__file__); tb.show_config()"
failed=0
summaries=()
run_pytest() {   # label, pytest arguments...
    local label="$1" log="$work/pytest-$1.log" status
    shift
    echo "-- pytest ($label): kernel variant" \
        "$(python -c 'from trilinear_bwd._core import _dispatch; print(_dispatch.kernel_module().__name__)')"
    set +e
    # shellcheck disable=SC2086
    python -m pytest -p no:cacheprovider -q -m "not slow" --hypothesis-show-statistics \
        ${SANITIZE_PYTEST_ARGS:-} "$@" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    set -e
    summaries+=("$label: exit $status, $( (grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed)' \
        "$log" || echo "no pytest summary: the process died") | tail -n 1 | tr -d '=')")
    [ "$status" -eq 0 ] || failed=1
}
# The whole suite (default depth) with the variant this processor picks (the first listed) ...
run_pytest default tests
# ... and the kernel-heavy tests again with each of the others.
for variant in $(python -c "from trilinear_bwd._core import _dispatch; \
print(' '.join(_dispatch.available_variants()[1:]))"); do
    TRILINEAR_BWD_KERNEL=$variant run_pytest "$variant" tests/test_fuzz.py tests/test_kernel.py tests/test_forward.py \
        tests/test_properties.py tests/test_aliasing.py tests/test_limits.py \
        tests/test_concurrency.py tests/test_atomicity.py
done

shopt -s nullglob
reports=()
for r in "$work"/logs/*; do
    # With allocator_may_return_null, ASan logs a warning when an absurd
    # allocation fails (the fuzz tests ask for some on purpose; the caller
    # sees MemoryError -> 561000).  A file holding only such warnings is not
    # a memory error; anything else in it is.
    if grep -qv "WARNING: AddressSanitizer failed to allocate" "$r"; then
        reports+=("$r")
    else
        echo "-- $(grep -c . "$r") expected allocation-failure warning(s) in $r (not errors)"
    fi
done
shopt -u nullglob
if [ ${#reports[@]} -gt 0 ]; then
    echo "== sanitizer reports (${#reports[@]} file(s)):"
    for r in "${reports[@]}"; do
        echo "---- $r"
        cat "$r"
    done
    failed=1
fi
unset LD_PRELOAD ASAN_OPTIONS UBSAN_OPTIONS PYTHONMALLOC

# Valgrind memcheck on a subset, with an uninstrumented build: it sees what
# ASan does not, reads of memory never written.  Workspaces and outputs are
# left uninitialised (np.empty); if any result depended on bytes the kernel
# did not write first, comparing it with the reference would branch on
# uninitialised data inside NumPy and memcheck would report it.  Only reports
# whose stack passes through the extension, libgomp or NumPy count: CPython
# itself has a few known, harmless ones.
valgrind_result="skipped (no valgrind)"
if [ "${SANITIZE_VALGRIND:-1}" = 1 ] && command -v valgrind > /dev/null; then
    echo "-- valgrind memcheck (uninstrumented build)"
    mkdir "$work/plain"
    tar -C "$work/src" --exclude='*.so' --exclude=build --exclude=.hypothesis -cf - \
        setup.py pyproject.toml README.md trilinear_bwd | tar -C "$work/plain" -xf -
    (cd "$work/plain" && CFLAGS="-g" python setup.py build_ext --inplace \
        > "$work/build-plain.log" 2>&1) || { tail -n 40 "$work/build-plain.log"; exit 1; }
    cat > "$work/plain/memcheck.py" <<'PY'
import sys
import numpy as np
import trilinear_bwd as tb
from trilinear_bwd._core import _dispatch
from trilinear_bwd import reference

if sys.argv[1:] == ["canary"]:
    # Must be reported: a branch on never-written memory inside NumPy.
    print(bool((np.empty(1000) > 0).any()))
    sys.exit(0)
runs = 0
for variant in _dispatch.available_variants():
    _dispatch._chosen = _dispatch.kernel_module(variant)
    for dtype in ("float32", "float64", "float16", "bfloat16"):
        dt = np.dtype(dtype) if dtype != "bfloat16" else np.dtype(__import__("ml_dtypes").bfloat16)
        for layout in ("ncdhw", "ndhwc", "strided"):
            align = layout != "ncdhw"
            g = np.random.default_rng(runs).standard_normal((2, 3, 5, 6, 7)).astype(dt)
            if layout == "ndhwc":
                g = np.ascontiguousarray(g.transpose(0, 2, 3, 4, 1)).transpose(0, 4, 1, 2, 3)
            elif layout == "strided":
                g = np.repeat(g, 2, axis=4)[..., ::2]
            gi = np.empty((2, 3, 3, 4, 5), dt)
            size, ex = tb.get_workspace_size(g, (5, 6, 7), gi.shape, align, 0.0, 0.0, 0.0, gi,
                                             num_threads=2)
            tb.execute(np.empty(size, np.uint8), size, ex)
            err = np.abs(gi.astype(np.float64) - reference.backward(g, gi.shape, align))
            assert (err <= reference.error_bound(g, gi.shape, align, dtype=dt)).all()
            runs += 1
print(f"memcheck: {runs} runs checked")
PY
    memcheck() {   # log, arguments of memcheck.py; prints the script's output, then a count
        local log="$1"
        shift
        if ! (cd "$work/plain" && PYTHONMALLOC=malloc valgrind --tool=memcheck \
                --track-origins=yes --log-file="$log" \
                "$(python -c 'import sys; print(sys.executable)')" memcheck.py "$@"); then
            echo "the checked script failed"   # not a number: counts as failure
            return
        fi
        python - "$log" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
blocks = re.split(r"\n==\d+== \n", text)
ours = [b for b in blocks if re.search(r"Invalid|uninitialised|Uninitialised|overlap", b)
        and re.search(r"trilinear_bwd|_kernels|_native|libgomp|_multiarray_umath", b)]
print(len(ours))
for b in ours[:5]:
    print(b, file=sys.stderr)
PY
    }
    canary="$(memcheck "$work/memcheck-canary.log" canary 2>/dev/null | tail -n 1)"
    if [ "$canary" = 0 ]; then
        echo "sanitize: valgrind missed the deliberate uninitialised read" >&2
        exit 1
    fi
    output="$(memcheck "$work/memcheck.log")"
    echo "$output" | sed 's/^/   /'
    found="$(echo "$output" | tail -n 1)"
    valgrind_result="$found report(s) in the extension or NumPy over the runs above"
    valgrind_result+=" (the deliberate canary gave $canary, as it must)"
    echo "   $valgrind_result"
    [ "$found" = 0 ] || failed=1
fi

echo "== sanitize summary ($((SECONDS - start)) s)"
for s in "${summaries[@]}"; do
    echo "   pytest $s"
done
echo "   AddressSanitizer + UndefinedBehaviorSanitizer reports: ${#reports[@]}"
echo "   valgrind memcheck: $valgrind_result"
if [ "$failed" -ne 0 ]; then
    echo "sanitize: FAILED" >&2
    exit 1
fi
echo "sanitize: passed, no sanitizer error"

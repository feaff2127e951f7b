#!/bin/sh
# Scratch builds of one kernel variant (AVX2, or VARIANT=avx512) for the pass-by-pass breakdown
# (docs/performance.md): copies of this checkout's package in DEST/full,
# DEST/d (the items stop after the D pass) and DEST/dh (after H), each with
# only _kernels/$VARIANT recompiled, with -DTB_STOP_AFTER, from a copy of
# the driver into which benchmarks/stop_after.py writes the stops (the
# production driver has none), for
#     python benchmarks/avx2_table.py --build d=DEST/d --build dh=DEST/dh \
#         --build full=DEST/full
# Run from the repository root after `python setup.py build_ext --inplace`.
# EXTRA_CFLAGS are added to every build (e.g. -mfma -ffp-contract=fast for
# the FMA measurement: not bitwise equal to the other variants).
# VARIANT=avx512 builds the AVX-512 variant's copies instead (setup.py's
# AVX-512 flags), VARIANT=baseline the x86-64 baseline's (SSE2), for the same
# breakdown of that variant (time them with --build NAME=DEST/d:avx512 and so
# on).
set -e
VARIANT=${VARIANT:-avx2}
case $VARIANT in
    avx2) VFLAGS="-mavx2 -mf16c" ;;
    avx512) VFLAGS="-mavx512f -mavx512bw -mavx512vl -mavx2 -mf16c" ;;  # setup.py AVX512_FLAGS
    baseline) VFLAGS="" ;;
    *) echo "VARIANT must be avx2, avx512 or baseline" >&2; exit 2 ;;
esac
DEST=${1:?usage: avx2_passes.sh DEST [stops...]}
shift
STOPS=${*:-"0 1 2"}
PY=${PYTHON:-python}
INC=$($PY -c "import sysconfig; print(sysconfig.get_paths()['include'])")
NPINC=$($PY -c "import numpy; print(numpy.get_include())")
SUFFIX=$($PY -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
mkdir -p "$DEST"
rm -rf "$DEST/src"
mkdir -p "$DEST/src"
cp -r trilinear_bwd "$DEST/src/"
$PY benchmarks/stop_after.py "$DEST/src/trilinear_bwd/_kernels/_driver.pxi"
cython -3 --directive boundscheck=False,wraparound=False,cdivision=True,initializedcheck=False,embedsignature=True \
    -I "$DEST/src" "$DEST/src/trilinear_bwd/_kernels/$VARIANT.pyx" -o "$DEST/$VARIANT.c"
for stop in $STOPS; do
    case $stop in 0) name=full ;; 1) name=d ;; 2) name=dh ;; esac
    rm -rf "$DEST/$name"
    mkdir -p "$DEST/$name"
    cp -r trilinear_bwd "$DEST/$name/"
    gcc -shared -fPIC -O3 -g -fwrapv -ffp-contract=off -fno-math-errno -std=c11 -fopenmp \
        $VFLAGS $EXTRA_CFLAGS -DTB_STOP_AFTER=$stop -DNDEBUG \
        -DNPY_NO_DEPRECATED_API=NPY_1_9_API_VERSION -DTRILINEAR_BWD_HAVE_OPENMP=1 \
        -Itrilinear_bwd/_kernels -I"$NPINC" -I"$INC" "$DEST/$VARIANT.c" \
        -o "$DEST/$name/trilinear_bwd/_kernels/$VARIANT$SUFFIX" &
done
wait

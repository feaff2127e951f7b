#!/bin/sh
# Scratch builds of the AVX2 variant for the pass-by-pass breakdown
# (docs/performance.md): copies of this checkout's package in DEST/full,
# DEST/d (the items stop after the D pass) and DEST/dh (after H), each with
# only _kernels_avx2 recompiled (-DTB_STOP_AFTER, see _kernels.pxi), for
#     python benchmarks/avx2_table.py --build d=DEST/d --build dh=DEST/dh \
#         --build full=DEST/full
# Run from the repository root after `python setup.py build_ext --inplace`.
# EXTRA_CFLAGS are added to every build (e.g. -mfma -ffp-contract=fast for
# the FMA measurement: not bitwise equal to the other variants).
set -e
DEST=${1:?usage: avx2_passes.sh DEST [stops...]}
shift
STOPS=${*:-"0 1 2"}
PY=${PYTHON:-python}
INC=$($PY -c "import sysconfig; print(sysconfig.get_paths()['include'])")
NPINC=$($PY -c "import numpy; print(numpy.get_include())")
SUFFIX=$($PY -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
mkdir -p "$DEST"
cython -3 --directive boundscheck=False,wraparound=False,cdivision=True,initializedcheck=False,embedsignature=True \
    -I . trilinear_bwd/_kernels_avx2.pyx -o "$DEST/_kernels_avx2.c"
for stop in $STOPS; do
    case $stop in 0) name=full ;; 1) name=d ;; 2) name=dh ;; esac
    rm -rf "$DEST/$name"
    mkdir -p "$DEST/$name"
    cp -r trilinear_bwd "$DEST/$name/"
    gcc -shared -fPIC -O3 -g -fwrapv -ffp-contract=off -fno-math-errno -std=c11 -fopenmp \
        -mavx2 -mf16c $EXTRA_CFLAGS -DTB_STOP_AFTER=$stop -DNDEBUG \
        -DNPY_NO_DEPRECATED_API=NPY_1_9_API_VERSION -DTRILINEAR_BWD_HAVE_OPENMP=1 \
        -Itrilinear_bwd -I"$NPINC" -I"$INC" "$DEST/_kernels_avx2.c" \
        -o "$DEST/$name/trilinear_bwd/_kernels_avx2$SUFFIX" &
done
wait

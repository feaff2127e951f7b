"""Build the Cython + OpenMP extensions of trilinear_bwd.

Everything declarative lives in ``pyproject.toml``; this file only describes the
compiled extensions, because their flags depend on the compiler:

* OpenMP is probed by compiling a tiny program.  A compiler without OpenMP
  (Apple clang without libomp, for instance) still builds a working, serial
  package, with a warning.
* The kernels (``trilinear_bwd/_kernels/``) are compiled several times from one
  driver: ``baseline`` for any x86-64 (or other) processor and, on x86-64,
  ``avx2`` with AVX2 and F16C and ``avx512`` with AVX-512 F/BW/VL (and F16C);
  ``trilinear_bwd._core._dispatch`` picks one at run time.  The AVX-512 variant is
  built only where the compiler accepts its flags (probed like OpenMP);
  elsewhere it is simply absent.  All are built with ``-ffp-contract=off`` so
  that none fuses a multiply-add another does not: the variants give bitwise
  identical results.
* ``TRILINEAR_BWD_DEBUG=1`` turns Cython's bounds and wrap-around checks back on
  and compiles without optimisation, for debugging.
* ``TRILINEAR_BWD_SANITIZE=address,undefined`` adds ``-fsanitize=...``.
"""

import glob
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import textwrap
import warnings

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

DEBUG = os.environ.get("TRILINEAR_BWD_DEBUG", "") not in ("", "0")
SANITIZE = os.environ.get("TRILINEAR_BWD_SANITIZE", "")
IS_X86_64 = platform.machine().lower() in ("x86_64", "amd64")


def _compiles(compiler, code, cflags, lflags=()):
    """Return True if ``code`` compiles and links with these flags."""
    tmp = tempfile.mkdtemp()
    try:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w") as f:
            f.write(code)
        try:
            objs = compiler.compile([src], output_dir=tmp, extra_postargs=list(cflags))
            compiler.link_executable(objs, "probe", output_dir=tmp,
                                     extra_postargs=list(lflags))
        except Exception:  # noqa: BLE001 - any failure means "not with these flags"
            return False
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _openmp_flags(compiler):
    """Return (compile_args, link_args) that enable OpenMP, or None if unavailable."""
    if compiler.compiler_type == "msvc":
        return ["/openmp"], []
    candidates = [(["-fopenmp"], ["-fopenmp"])]
    if sys.platform == "darwin":
        # Apple clang needs the preprocessor flag and Homebrew's libomp.
        prefix = os.environ.get("LIBOMP_PREFIX", "/opt/homebrew/opt/libomp")
        candidates.insert(
            0,
            (
                ["-Xpreprocessor", "-fopenmp", f"-I{prefix}/include"],
                [f"-L{prefix}/lib", "-lomp"],
            ),
        )
    code = textwrap.dedent(
        """\
        #include <omp.h>
        int main(void) {
            int n = 0;
            #pragma omp parallel reduction(+:n)
            n += 1;
            return n > 0 ? 0 : 1;
        }
        """
    )
    for cflags, lflags in candidates:
        if _compiles(compiler, code, cflags, lflags):
            return cflags, lflags
    return None


# The instructions the AVX-512 variant's headers use, one of each kind: if
# this compiles, so do they.
_AVX512_PROBE = textwrap.dedent(
    """\
    #include <immintrin.h>
    int main(void) {
        float f[16] = {0};
        unsigned short h[16] = {0};
        __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h));
        __m512i b = _mm512_slli_epi32(_mm512_cvtepu16_epi32(
            _mm256_loadu_si256((const __m256i *)h)), 16);
        __mmask16 m = _mm512_cmpgt_epi32_mask(b, _mm512_setzero_si512());
        a = _mm512_add_ps(a, _mm512_maskz_permutex2var_ps(m, a, b, a));
        _mm512_mask_storeu_ps(f, m, _mm512_mul_ps(a, _mm512_castsi512_ps(b)));
        __m256i n = _mm256_maskz_loadu_epi16((__mmask16)0xff, h);   /* BW + VL */
        _mm256_storeu_si256((__m256i *)h, n);
        return (int)f[0];
    }
    """
)
AVX512_FLAGS = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx2", "-mf16c"]
AVX512_FLAGS_MSVC = ["/arch:AVX512"]


class BuildExt(build_ext):
    """Add OpenMP, optimisation and ISA flags once the compiler is known."""

    def finalize_options(self):
        # The extensions (three kernel variants and the helpers) compile
        # independently: one per core unless ``-j`` says otherwise.
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1

    def build_extensions(self):
        msvc = self.compiler.compiler_type == "msvc"
        omp = _openmp_flags(self.compiler)
        if omp is None:
            warnings.warn(
                "trilinear_bwd: this compiler has no OpenMP support; building a "
                "serial (single-threaded) package. Results are identical, only "
                "slower. Install an OpenMP runtime (libgomp / libomp) to enable "
                "threads.",
                stacklevel=1,
            )
            omp = ([], [])
        if msvc:
            base = ["/O2", "/fp:precise"]
        else:
            base = ["-O0", "-g"] if DEBUG else ["-O3"]
            # Bitwise reproducibility between the kernel variants: no fused
            # multiply-add contraction, no math-errno side effects.
            base += ["-ffp-contract=off", "-fno-math-errno", "-std=c11"]
            if SANITIZE:
                base += [f"-fsanitize={SANITIZE}", "-fno-omit-frame-pointer", "-g"]
        avx512 = AVX512_FLAGS_MSVC if msvc else AVX512_FLAGS
        if not _compiles(self.compiler, _AVX512_PROBE, avx512):
            self.extensions = [e for e in self.extensions
                               if e.name != "trilinear_bwd._kernels.avx512"]
            if IS_X86_64:
                warnings.warn(
                    "trilinear_bwd: this compiler does not accept "
                    f"{' '.join(avx512)}; building without the AVX-512 kernel "
                    "variant (the AVX2 and baseline variants give the same results).",
                    stacklevel=1,
                )
        for ext in self.extensions:
            if ext.name == "trilinear_bwd._kernels.avx512":
                ext.extra_compile_args = avx512[:]
            isa = ext.extra_compile_args[:]  # set per extension below
            ext.extra_compile_args = base + omp[0] + isa
            ext.extra_link_args = omp[1] + (
                [f"-fsanitize={SANITIZE}"] if SANITIZE and not msvc else []
            )
            ext.define_macros.append(
                ("TRILINEAR_BWD_HAVE_OPENMP", "1" if omp[0] else "0")
            )
        super().build_extensions()


def _extensions():
    include_dirs = [numpy.get_include(), "trilinear_bwd/_kernels"]
    macros = [("NPY_NO_DEPRECATED_API", "NPY_1_9_API_VERSION")]
    # Every header, so that a change to one rebuilds the extensions: Cython
    # tracks only the headers a .pyx/.pxd names, not those they include.
    headers = sorted(glob.glob("trilinear_bwd/_kernels/*.h"))

    def ext(name, isa=()):
        return Extension(
            f"trilinear_bwd.{name}",
            [f"trilinear_bwd/{name.replace('.', '/')}.pyx"],
            include_dirs=include_dirs,
            define_macros=list(macros),
            extra_compile_args=list(isa),
            depends=headers,
        )

    # The core's compiled modules, the kernels' (always built, any processor),
    # the torch wing's fast path, then the per-ISA variants of the kernel.
    exts = [ext("_core._runner"), ext("_core._table_loops"),
            ext("_kernels._native"), ext("_kernels._kernel_plan"),
            ext("torch._fast"), ext("_kernels.baseline")]
    msvc_like = sys.platform == "win32" and "GCC" not in sys.version
    if IS_X86_64:
        exts.append(ext("_kernels.avx2", ["/arch:AVX2"] if msvc_like else ["-mavx2", "-mf16c"]))
        # Its flags are set (or the extension dropped) once the compiler is
        # known, in BuildExt.
        exts.append(ext("_kernels.avx512"))
    return exts


directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "cdivision": not DEBUG,
    "initializedcheck": DEBUG,
    "embedsignature": True,
}

setup(
    ext_modules=cythonize(
        _extensions(),
        compiler_directives=directives,
        # Parallel cythonizing forks worker processes: only where fork is
        # the start method (under spawn, each would run this script again).
        nthreads=(os.cpu_count() or 1) if sys.platform.startswith("linux") else 0,
    ),
    cmdclass={"build_ext": BuildExt},
)

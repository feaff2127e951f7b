"""Build the Cython + OpenMP extensions of trilinear_bwd.

Everything declarative lives in ``pyproject.toml``; this file only describes the
compiled extensions, because their flags depend on the compiler:

* OpenMP is probed by compiling a tiny program.  A compiler without OpenMP
  (Apple clang without libomp, for instance) still builds a working, serial
  package, with a warning.
* The kernels are compiled twice from one source, ``_kernels_baseline`` for any
  x86-64 (or other) processor and, on x86-64, ``_kernels_avx2`` with AVX2 and
  F16C; ``trilinear_bwd._dispatch`` picks one at run time.  Both are built with
  ``-ffp-contract=off`` so that neither fuses a multiply-add the other does not:
  the two variants give bitwise identical results.
* ``TRILINEAR_BWD_DEBUG=1`` turns Cython's bounds and wrap-around checks back on
  and compiles without optimisation, for debugging.
* ``TRILINEAR_BWD_SANITIZE=address,undefined`` adds ``-fsanitize=...``.
"""

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
    tmp = tempfile.mkdtemp()
    try:
        src = os.path.join(tmp, "check_openmp.c")
        with open(src, "w") as f:
            f.write(code)
        for cflags, lflags in candidates:
            try:
                objs = compiler.compile([src], output_dir=tmp, extra_postargs=cflags)
                compiler.link_executable(
                    objs, "check_openmp", output_dir=tmp, extra_postargs=lflags
                )
            except Exception:  # noqa: BLE001 - any failure means "not this flag set"
                continue
            return cflags, lflags
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class BuildExt(build_ext):
    """Add OpenMP, optimisation and ISA flags once the compiler is known."""

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
        for ext in self.extensions:
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
    include_dirs = [numpy.get_include(), "trilinear_bwd"]
    macros = [("NPY_NO_DEPRECATED_API", "NPY_1_9_API_VERSION")]

    def ext(name, isa=()):
        return Extension(
            f"trilinear_bwd.{name}",
            [f"trilinear_bwd/{name}.pyx"],
            include_dirs=include_dirs,
            define_macros=list(macros),
            extra_compile_args=list(isa),
        )

    exts = [ext("_openmp_helpers"), ext("_kernels_baseline")]
    msvc_like = sys.platform == "win32" and "GCC" not in sys.version
    if IS_X86_64:
        exts.append(ext("_kernels_avx2", ["/arch:AVX2"] if msvc_like else ["-mavx2", "-mf16c"]))
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
    ),
    cmdclass={"build_ext": BuildExt},
)

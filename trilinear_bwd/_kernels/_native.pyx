"""The always-built native helpers: what only compiled code can answer.

OpenMP (whether it is there, its team sizes, the one resolution of a
``num_threads``), the processor's and OS's vector support, the constants
of ``_constants.h``, and the address of an array's first element.
"""

cimport numpy as cnp

cimport trilinear_bwd._kernels._constants_h as h

from trilinear_bwd._kernels._openmp cimport (
    TB_OPENMP_ENABLED,
    omp_get_max_threads,
    omp_get_num_procs,
    tb_openmp_version,
)

cdef extern from *:
    """
    /* What the processor offers (CPUID) and what the operating system saves
     * on a context switch (XCR0, read with xgetbv): a vector instruction set
     * is usable only if both say so.  XCR0 bits: 1 XMM, 2 YMM (upper halves),
     * 5 opmask registers, 6 upper halves of ZMM0-15, 7 ZMM16-31. */
    #define TB_XCR0_AVX 0x06u
    #define TB_XCR0_AVX512 0xe6u
    #if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
    #include <cpuid.h>
    static int tb_cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
        return __get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3]);
    }
    static unsigned long long tb_xcr0(void) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        return ((unsigned long long)hi << 32) | lo;
    }
    #define TB_HAVE_CPUID 1
    #elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
    #include <intrin.h>
    #include <immintrin.h>
    static int tb_cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
        int regs[4];
        __cpuid(regs, 0);
        if ((unsigned)regs[0] < leaf) return 0;
        __cpuidex(regs, (int)leaf, (int)sub);
        for (int i = 0; i < 4; ++i) r[i] = (unsigned)regs[i];
        return 1;
    }
    static unsigned long long tb_xcr0(void) { return _xgetbv(0); }
    #define TB_HAVE_CPUID 1
    #else
    #define TB_HAVE_CPUID 0
    #endif

    /* 1 if the CPU has AVX (and, with avx512, AVX-512 F/BW/VL), AVX2 and F16C,
     * and the OS enables the matching register state. */
    static int tb_cpu_vector_support(int avx512) {
    #if TB_HAVE_CPUID
        unsigned l1[4], l7[4];
        if (!tb_cpuid(1, 0, l1) || !tb_cpuid(7, 0, l7))
            return 0;
        const int osxsave = (l1[2] >> 27) & 1, avx = (l1[2] >> 28) & 1, f16c = (l1[2] >> 29) & 1;
        const int avx2 = (l7[1] >> 5) & 1;
        if (!(osxsave && avx && f16c && avx2))
            return 0;   /* without OSXSAVE, xgetbv itself is not allowed */
        const unsigned long long need = avx512 ? TB_XCR0_AVX512 : TB_XCR0_AVX;
        if ((tb_xcr0() & need) != need)
            return 0;
        if (!avx512)
            return 1;
        const int f = (l7[1] >> 16) & 1, bw = (l7[1] >> 30) & 1, vl = (l7[1] >> 31) & 1;
        return f && bw && vl;
    #else
        (void)avx512;
        return 0;
    #endif
    }
    static int tb_cpu_has_avx2_f16c(void) { return tb_cpu_vector_support(0); }
    static int tb_cpu_has_avx512(void) { return tb_cpu_vector_support(1); }
    """
    int tb_cpu_has_avx2_f16c() noexcept nogil
    int tb_cpu_has_avx512() noexcept nogil


def openmp_enabled():
    """Return True if the extension was compiled with OpenMP.

    Returns
    -------
    bool
        False means every call runs on one thread.
    """
    return bool(TB_OPENMP_ENABLED)


def openmp_version():
    """Return the ``_OPENMP`` date macro the extension was built with (0 if none)."""
    return tb_openmp_version()


def max_threads():
    """Return OpenMP's current default team size (``omp_get_max_threads()``).

    This follows ``OMP_NUM_THREADS`` and any ``omp_set_num_threads`` call made
    by this process, for example through ``threadpoolctl``.
    """
    return omp_get_max_threads()


def num_procs():
    """Return the number of processors OpenMP sees."""
    return omp_get_num_procs()


def effective_n_threads(n_threads=None):
    """Resolve a user's ``num_threads`` to the team size a kernel will use.

    Parameters
    ----------
    n_threads : int or None
        None follows OpenMP's default (``OMP_NUM_THREADS``, ``threadpoolctl``).
        A positive integer asks for exactly that many threads.  A negative
        integer counts back from the number of processors, as in scikit-learn:
        -1 means all of them, -2 all but one.

    Returns
    -------
    int
        At least 1; always 1 when the extension was built without OpenMP.
    """
    if not TB_OPENMP_ENABLED:
        return 1
    if n_threads is None:
        return max(1, omp_get_max_threads())
    if n_threads < 0:
        return max(1, omp_get_num_procs() + 1 + n_threads)
    return n_threads


def cpu_has_avx2_f16c():
    """Return True if this processor and OS can run the AVX2 + F16C kernel variant."""
    return bool(tb_cpu_has_avx2_f16c())


def cpu_has_avx512():
    """Return True if this processor and OS can run the AVX-512 kernel variant.

    The processor must report AVX-512 F, BW and VL, AVX2 and F16C (CPUID), and
    the operating system must save the opmask and ZMM registers on a context
    switch (XCR0 bits 5-7, with the XMM and YMM bits 1-2).
    """
    return bool(tb_cpu_has_avx512())


def constants():
    """Return the values of ``_constants.h`` that Python's planner shares with the kernels.

    Returns
    -------
    dict
        ``{"DT_FLOAT32": 0, ...}``: each ``TB_`` name of the header without
        its prefix (``trilinear_bwd._core._constants`` holds them as module names).
    """
    return {
        "DT_FLOAT32": h.TB_DT_FLOAT32, "DT_FLOAT64": h.TB_DT_FLOAT64,
        "DT_FLOAT16": h.TB_DT_FLOAT16, "DT_BFLOAT16": h.TB_DT_BFLOAT16,
        "READ_IN_PLACE": h.TB_READ_IN_PLACE, "READ_FLOAT16": h.TB_READ_FLOAT16,
        "READ_BFLOAT16": h.TB_READ_BFLOAT16, "READ_CONVERT": h.TB_READ_CONVERT,
        "READ_FLOAT32": h.TB_READ_FLOAT32,
        "GATHER": h.TB_GATHER, "WINDOW8": h.TB_WINDOW8, "WINDOW16": h.TB_WINDOW16,
        "WINDOW32": h.TB_WINDOW32, "W_BLOCK": h.TB_W_BLOCK, "W_SPARE": h.TB_W_SPARE,
        "W_STRIDE3": h.TB_W_STRIDE3, "W_STRIDE3_WIDTH": h.TB_W_STRIDE3_WIDTH,
        "LINE": h.TB_LINE, "MAX_PLANES_PER_ITEM": h.TB_MAX_PLANES_PER_ITEM,
    }


cnp.import_array()


def data_address(cnp.ndarray arr):
    """Return the address of element [0, ..., 0] of ``arr`` (0 for an empty array).

    Valid for any strides (negative ones included: NumPy's data pointer is
    that element).  Read from the array struct; ``arr.ctypes.data`` builds a
    ctypes object for the same number, many times slower, and every call
    asks twice.
    """
    if cnp.PyArray_SIZE(arr) == 0:
        return 0
    return <size_t> cnp.PyArray_DATA(arr)

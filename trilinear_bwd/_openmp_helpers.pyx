"""Thread-count resolution and build facts, shared by every kernel variant."""

from trilinear_bwd._openmp cimport (
    TB_OPENMP_ENABLED,
    omp_get_max_threads,
    omp_get_num_procs,
    tb_openmp_version,
)

cdef extern from *:
    """
    #if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    static int tb_cpu_has_avx2_f16c(void) {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    }
    #else
    static int tb_cpu_has_avx2_f16c(void) { return 0; }
    #endif
    """
    int tb_cpu_has_avx2_f16c() noexcept nogil


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
    """Return True if this processor can run the AVX2 + F16C kernel variant."""
    return bool(tb_cpu_has_avx2_f16c())

# The one place that touches OpenMP's C API.  Without OpenMP the same names
# exist and describe a team of one thread, so the kernels compile and run
# serially, unchanged.
cdef extern from *:
    """
    #ifdef _OPENMP
    #include <omp.h>
    #define TB_OPENMP_ENABLED 1
    static inline int tb_openmp_version(void) { return _OPENMP; }
    #else
    #define TB_OPENMP_ENABLED 0
    #define omp_get_max_threads() 1
    #define omp_get_thread_num() 0
    #define omp_get_num_procs() 1
    static inline int tb_openmp_version(void) { return 0; }
    #endif
    """
    bint TB_OPENMP_ENABLED
    int omp_get_max_threads() noexcept nogil
    int omp_get_thread_num() noexcept nogil
    int omp_get_num_procs() noexcept nogil
    int tb_openmp_version() noexcept nogil

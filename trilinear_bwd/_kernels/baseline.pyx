# The kernels for any processor of the target architecture.
include "_driver.pxi"

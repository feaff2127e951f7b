# The kernels compiled with AVX2 and F16C (x86-64 only); chosen at run time
# by trilinear_bwd._core._dispatch when the processor supports both.
include "_driver.pxi"

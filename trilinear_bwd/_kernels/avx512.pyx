# The kernels compiled with AVX-512 F/BW/VL and F16C (x86-64, where the
# compiler accepts the flags); chosen at run time by trilinear_bwd._core._dispatch
# when the processor and the operating system support them.
include "_driver.pxi"

# The constants of _constants.h for Cython: declared once, here, and cimported
# by the kernels (_kernel_helpers.pxd, _kernels.pxi) and by _native.pyx,
# which hands their values to Python (trilinear_bwd._core._constants).

cdef extern from "_constants.h":
    enum:
        TB_DT_FLOAT32
        TB_DT_FLOAT64
        TB_DT_FLOAT16
        TB_DT_BFLOAT16
        TB_READ_IN_PLACE
        TB_READ_FLOAT16
        TB_READ_BFLOAT16
        TB_READ_CONVERT
        TB_READ_FLOAT32
        TB_GATHER
        TB_WINDOW8
        TB_WINDOW16
        TB_WINDOW32
        TB_W_STRIDE3
        TB_W_STRIDE3_WIDTH
        TB_W_BLOCK
        TB_W_SPARE
        TB_LINE
        TB_MAX_PLANES_PER_ITEM

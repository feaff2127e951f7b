"""The constants the planner shares with the kernels, read from the kernels' own header.

Each is defined once, in ``_constants.h``; the always-built
``_openmp_helpers`` extension compiles the header and hands the values over
as this module's names (``DT_FLOAT32``, ``READ_CONVERT``, ``GATHER``,
``W_BLOCK``, ``LINE``...); ``tests/test_constants.py`` checks that every
name of the header arrives with its value.
"""

from ._openmp_helpers import constants as _constants

globals().update(_constants())
del _constants

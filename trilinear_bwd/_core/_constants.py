"""The constants the planner shares with the kernels, read from the kernels' own header.

Each is defined once, in ``_constants.h``; the always-built
``_native`` extension compiles the header and hands the values over
as this module's names (``DT_FLOAT32``, ``READ_CONVERT``, ``GATHER``,
``W_BLOCK``, ``LINE``...); ``tests/test_constants.py`` checks that every
name of the header arrives with its value.
"""

from .._kernels._native import constants as _constants

globals().update(_constants())
del _constants

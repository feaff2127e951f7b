"""The standards' dtypes, by name, and their NumPy types."""

import numpy as np

# The three types Ascend's precision standards have columns for (and the operator's
# half and single types); the golden itself is float64.
DTYPES = ("float16", "bfloat16", "float32")
GOLDEN_DTYPE = "float64"


def numpy_dtype(name):
    """The NumPy dtype of a dtype name (bfloat16 from ml_dtypes).

    Parameters
    ----------
    name : str
        ``"float16"``, ``"bfloat16"``, ``"float32"`` or ``"float64"``.

    Returns
    -------
    numpy.dtype
    """
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)

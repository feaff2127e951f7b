"""The standards' dtypes, by name (their NumPy types: ``_arrays.numpy_dtype``)."""

# The three types Ascend's precision standards have columns for (and the operator's
# half and single types); the golden itself is float64.
DTYPES = ("float16", "bfloat16", "float32")
GOLDEN_DTYPE = "float64"

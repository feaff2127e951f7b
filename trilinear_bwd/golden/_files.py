"""A set's ``.bin`` files: raw little-endian arrays, their layouts, and the check of every file a run reads.

A ``.bin`` file holds a case's elements in the order of its format, as
CANN's ``tofile`` data: NCDHW is the C order of the logical (N, C, D, H, W)
shape, NDHWC the C order of (N, D, H, W, C).  The golden is float64; the
input, the golden in the case's dtype and the results are in the case's
dtype.
"""

import math
import os

import numpy as np

from .._core._arrays import numpy_dtype
from ._dtypes import GOLDEN_DTYPE
from ._errors import GoldenFileError
from ._paths import plain_name

ACTUAL_SUFFIX = ".actual.bin"


def actual_name(case):
    """The file name of a case's result in a result folder: ``<id>.actual.bin``.

    Raises
    ------
    GoldenFileError
        The id is not a plain name (``_paths.plain_name``: the manifest's
        rule), so that no id leads outside the folder.
    """
    return f"{plain_name(case['id'])}{ACTUAL_SUFFIX}"


def to_file_order(array, fmt):
    """The elements of a logical NCDHW array in the order of ``fmt``, as a C-contiguous array."""
    if fmt == "NDHWC":
        return np.ascontiguousarray(np.transpose(array, (0, 2, 3, 4, 1)))
    return np.ascontiguousarray(array)


def from_file_order(flat, shape, fmt):
    """A logical NCDHW view of ``flat`` elements stored in the order of ``fmt``."""
    n, c, d, h, w = shape
    if fmt == "NDHWC":
        return flat.reshape(n, d, h, w, c).transpose(0, 4, 1, 2, 3)
    return flat.reshape(shape)


def file_element(index, shape, fmt):
    """The position in a ``fmt`` file of the element at logical ``index`` (N, C, D, H, W)."""
    n, c, d, h, w = shape
    if fmt == "NDHWC":
        i = index
        return int(np.ravel_multi_index((i[0], i[2], i[3], i[4], i[1]), (n, d, h, w, c)))
    return int(np.ravel_multi_index(tuple(index), tuple(shape)))


def write_array(path, array, fmt):
    """Write a logical NCDHW array as raw little-endian elements in ``fmt``'s order."""
    data = to_file_order(array, fmt)
    data = data.astype(data.dtype.newbyteorder("<"), copy=False)
    data.tofile(path)


def read_array(path, dtype, shape, fmt, what):
    """Read a ``.bin`` file back as a logical NCDHW array; a missing or wrong-sized file is a :class:`GoldenFileError`."""
    dtype = numpy_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    problem = _problem(path, dtype, shape)
    if problem:
        raise GoldenFileError(f"{what}: {problem}")
    flat = np.fromfile(path, dtype=dtype.newbyteorder("<")).astype(dtype, copy=False)
    return from_file_order(flat, tuple(shape), fmt)


def _problem(path, dtype, shape, role=""):
    """What is wrong with the file at ``path`` as ``shape`` elements of ``dtype``, or None."""
    count = math.prod(shape)
    expected = count * dtype.itemsize
    try:
        size = os.path.getsize(path)
    except OSError:
        return f"missing {path}{role}"
    if not os.path.isfile(path):
        return f"{path}{role} is not a file"
    if size != expected:
        return (f"{path}{role} has {size} bytes, expected {expected} ({dtype.name} x {count} "
                f"elements of shape {tuple(shape)})")
    return None


def listed_files(directory, case, actual=None, reference=None):
    """Every file a comparison reads for ``case``: ``(path, dtype name, shape, role)``."""
    result = tuple(case["result_shape"])
    files = [(os.path.join(directory, case["input"]), case["dtype"], tuple(case["input_shape"]),
              "the input"),
             (os.path.join(directory, case["golden"]), GOLDEN_DTYPE, result, "the golden")]
    if "golden_in_dtype" in case:
        files.append((os.path.join(directory, case["golden_in_dtype"]), case["dtype"], result,
                      "the golden in the case's dtype"))
    if actual is not None:
        files.append((os.path.join(actual, actual_name(case)), case["dtype"], result,
                      "the result"))
    if reference is not None:
        files.append((os.path.join(reference, actual_name(case)), case["dtype"], result,
                      "the third party's result"))
    return files


def check_files(directory, cases, actual=None, reference=None):
    """Every problem with the files of ``cases``, one line each naming the case and the file."""
    problems = []
    for case in cases:
        for path, dtype, shape, role in listed_files(directory, case, actual, reference):
            problem = _problem(path, numpy_dtype(dtype), shape, f" ({role})")
            if problem:
                problems.append(f"case {case['id']}: {problem}")
    return problems

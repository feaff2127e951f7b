"""The golden directory: ``manifest.json`` and raw little-endian ``.bin`` arrays.

A ``.bin`` file holds a case's elements in the order of its format, as
CANN's ``tofile`` data: NCDHW is the C order of the logical (N, C, D, H, W)
shape, NDHWC the C order of (N, D, H, W, C).  Golden files are float64;
inputs and results are in the case's dtype.
"""

import json
import os
import tempfile

import numpy as np

from .._status import InvalidArgumentError
from ._cases import numpy_dtype

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
GOLDEN_DTYPE = "float64"
_CASE_KEYS = ("id", "op", "dtype", "format", "input_shape", "result_shape", "align_corners",
              "scales", "input", "golden", "rule")


class GoldenFileError(InvalidArgumentError):
    """A golden or result directory that does not match its manifest (161002); the message names the file."""


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


def write_array(path, array, fmt):
    """Write a logical NCDHW array as raw little-endian elements in ``fmt``'s order."""
    data = to_file_order(array, fmt)
    data = data.astype(data.dtype.newbyteorder("<"), copy=False)
    data.tofile(path)


def read_array(path, dtype, shape, fmt, what):
    """Read a ``.bin`` file back as a logical NCDHW array; a missing or wrong-sized file is a :class:`GoldenFileError`."""
    dtype = numpy_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    count = int(np.prod(shape))
    expected = count * dtype.itemsize
    try:
        size = os.path.getsize(path)
    except OSError:
        raise GoldenFileError(f"{what}: missing {path}") from None
    if size != expected:
        raise GoldenFileError(
            f"{what}: {path} has {size} bytes, expected {expected} "
            f"({dtype.name} x {count} elements of shape {tuple(shape)})")
    flat = np.fromfile(path, dtype=dtype.newbyteorder("<")).astype(dtype, copy=False)
    return from_file_order(flat, tuple(shape), fmt)


def write_manifest(directory, manifest):
    """Write ``manifest.json`` last and atomically: a directory never holds half a manifest."""
    fd, tmp = tempfile.mkstemp(prefix=".manifest.", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(directory, MANIFEST))


def read_manifest(directory):
    """Read and check ``DIR/manifest.json``; any problem is a :class:`GoldenFileError` naming it."""
    path = os.path.join(directory, MANIFEST)
    if not os.path.isdir(directory):
        raise GoldenFileError(f"{directory}: not a directory")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise GoldenFileError(f"{path}: not found (run `golden generate` first)") from None
    except (OSError, ValueError) as exc:
        raise GoldenFileError(f"{path}: unreadable ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("manifest_version") != MANIFEST_VERSION:
        raise GoldenFileError(f"{path}: not a golden manifest of version {MANIFEST_VERSION}")
    cases = manifest.get("cases")
    if not isinstance(cases, list):
        raise GoldenFileError(f"{path}: 'cases' must be a list")
    for k, case in enumerate(cases):
        missing = [key for key in _CASE_KEYS if not isinstance(case, dict) or key not in case]
        if missing:
            raise GoldenFileError(f"{path}: case {k} lacks {', '.join(missing)}")
    return manifest

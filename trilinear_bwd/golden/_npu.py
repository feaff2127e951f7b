"""The NPU side's two ends of the loop: a case read as the CANN call takes it, a result written where ``compare`` looks.

Examples
--------
>>> import tempfile
>>> from trilinear_bwd import aclnn, golden
>>> d, a = tempfile.mkdtemp(), tempfile.mkdtemp()
>>> _ = golden.generate(d, input_size=(1, 1, 2, 2, 2), output_size=(4, 4, 4), dtypes=["float32"])
>>> for entry in golden.read_manifest(d)["cases"]:
...     case = golden.read_case(d, entry)
...     out = case.empty_result()
...     status, size, ex = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
...         case.input, case.output_size, case.input_size, case.align_corners, *case.scales, out)
...     status = aclnn.aclnnUpsampleTrilinear3dBackward(aclnn.aclrtMalloc(size), size, ex, None)
...     path = golden.write_result(a, case, out)
>>> golden.compare(d, a, standard="mixed").passed
True
"""

import os
from dataclasses import dataclass

import numpy as np

from .._core._arrays import numpy_dtype
from ._errors import GoldenError, GoldenFileError
from ._files import actual_name, read_array, write_array
from ._manifest import MANIFEST, check_case, read_manifest
from ._paths import write_atomically
from ._run import cann_scales


@dataclass(frozen=True)
class NpuCase:
    """One case as the CANN call takes it (:func:`read_case`).

    Attributes
    ----------
    id, op, dtype, format : str
        As in the manifest (``format``: ``"NCDHW"`` or ``"NDHWC"``).
    input : numpy.ndarray
        The operator's input (gradOut for the backward, self for the
        forward): logical shape (N, C, D, H, W), the case's dtype (bfloat16
        from ml_dtypes), its memory in the case's layout (NDHWC: channels
        last, as the file holds it).
    input_shape, result_shape : tuple of int
        Logical NCDHW shapes of the input and of the result.
    output_size : tuple of 3 int
        ``outputSize`` of both CANN calls (D, H, W after upsampling).
    input_size : tuple of 5 int
        ``inputSize`` of the backward's call (gradInput's shape); for the
        forward, self's shape (its call takes none).
    align_corners : bool
    scales : tuple of 3 float
        ``scalesD, scalesH, scalesW`` to pass: the manifest's three when all
        are > 0 and ``align_corners`` is false, else 0.0 each, which is what
        CANN uses either way.  A PyTorch-style call (``torch_npu``, each axis
        using its own scale) computes the same with ``s or None`` for each.
    """

    id: str
    op: str
    dtype: str
    format: str
    input: np.ndarray
    input_shape: tuple
    result_shape: tuple
    output_size: tuple
    input_size: tuple
    align_corners: bool
    scales: tuple

    def empty_result(self):
        """An output for the call: ``result_shape``, the case's dtype and layout, filled with NaN.

        The commercial standard (section 3, note 2) fills outputs with NaN so
        that an element the kernel never writes shows as a special mismatch.
        """
        n, c, d, h, w = self.result_shape
        dtype = numpy_dtype(self.dtype)
        if self.format == "NDHWC":
            out = np.full((n, d, h, w, c), np.nan, dtype=dtype).transpose(0, 4, 1, 2, 3)
        else:
            out = np.full(self.result_shape, np.nan, dtype=dtype)
        return out

    def torch_input(self):
        """:attr:`input` as a CPU ``torch.Tensor`` sharing its memory (channels-last 3-D for NDHWC)."""
        import torch

        if self.dtype == "bfloat16":
            return torch.from_numpy(self.input.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(self.input)


def _entry(directory, case):
    if isinstance(case, str):
        manifest = read_manifest(directory)
        found = [c for c in manifest["cases"] if c["id"] == case]
        if not found:
            raise GoldenFileError(f"{os.path.join(directory, MANIFEST)}: no case {case!r}")
        return found[0]
    label = f"case {case.get('id', '?')}" if isinstance(case, dict) else "case"
    problems = check_case(case, label)
    if problems:
        raise GoldenFileError(problems)
    return case


def read_case(directory, case):
    """Read one case of a set as the CANN call takes it.

    Parameters
    ----------
    directory : str or os.PathLike
        The set's folder.
    case : dict or str
        An entry of ``read_manifest(directory)["cases"]``, or a case's id.

    Returns
    -------
    NpuCase

    Raises
    ------
    GoldenFileError
        An entry that breaks the manifest's format (every field named), an
        unknown id, or an input file that is missing or of the wrong size.
    """
    entry = _entry(directory, case)
    shape, result = tuple(entry["input_shape"]), tuple(entry["result_shape"])
    x = read_array(os.path.join(directory, entry["input"]), entry["dtype"], shape,
                   entry["format"], f"case {entry['id']}")
    output_size = shape[2:] if entry["op"] == "backward" else result[2:]
    input_size = result if entry["op"] == "backward" else shape
    return NpuCase(entry["id"], entry["op"], entry["dtype"], entry["format"], x, shape, result,
                   output_size, input_size, entry["align_corners"], tuple(cann_scales(entry)))


def _as_numpy(result):
    """A NumPy view of ``result`` (a NumPy array, or a ``torch.Tensor`` on any device)."""
    if type(result).__module__.split(".")[0] == "torch":
        t = result.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            import torch

            return t.view(torch.int16).numpy().view(numpy_dtype("bfloat16"))
        return t.numpy()
    return np.asarray(result)


def _fields(case):
    """``case``'s id, dtype, format and result shape (an :class:`NpuCase` or a manifest entry)."""
    get = case.__getitem__ if isinstance(case, dict) else lambda k: getattr(case, k)
    return get("id"), get("dtype"), get("format"), tuple(get("result_shape"))


def read_result(actual, case):
    """Read a case's result back from ``actual/<id>.actual.bin`` (logical NCDHW, the case's dtype and layout).

    Parameters
    ----------
    actual : str or os.PathLike
    case : NpuCase or dict

    Returns
    -------
    numpy.ndarray

    Raises
    ------
    GoldenFileError
        The case's id is not a plain name (the manifest's rule, as
        :func:`read_case` checks it), or the file is missing or of the
        wrong size.
    """
    ident, dtype, fmt, shape = _fields(case)
    return read_array(os.path.join(actual, actual_name({"id": ident})), dtype, shape, fmt,
                      f"case {ident}")


def write_result(actual, case, result):
    """Write a case's result as ``actual/<id>.actual.bin``, where :func:`compare` reads it.

    Parameters
    ----------
    actual : str or os.PathLike
        The result folder (created if absent).
    case : NpuCase or dict
        The case (:func:`read_case`) or its manifest entry.
    result : numpy.ndarray or torch.Tensor
        Logical shape ``result_shape`` (N, C, D, H, W), the case's dtype,
        any layout and device: written raw, little-endian, in the case's
        format's order.

    Returns
    -------
    str
        The file's path.

    Raises
    ------
    GoldenError
        ``result`` has another shape or dtype (nothing is written).
    GoldenFileError
        The case's id is not a plain name (the manifest's rule, as
        :func:`read_case` checks it: no id leads outside ``actual``), or
        the file cannot be written (nothing half-written is left).
    """
    ident, dtype, fmt, shape = _fields(case)
    name = actual_name({"id": ident})   # the id checked before anything is made
    data = _as_numpy(result)
    if tuple(data.shape) != shape:
        raise GoldenError(f"case {ident}: the result's shape must be {shape} (N, C, D, H, W), "
                          f"got {tuple(data.shape)}")
    if data.dtype != numpy_dtype(dtype):
        raise GoldenError(f"case {ident}: the result's dtype must be {dtype}, got {data.dtype}")
    try:
        os.makedirs(actual, exist_ok=True)
    except OSError as exc:
        raise GoldenFileError(f"{os.fspath(actual)}: cannot be made a directory "
                              f"({exc.strerror or exc})") from None
    path = os.path.join(actual, name)
    write_atomically(path, lambda tmp: write_array(tmp, data, fmt))
    return path

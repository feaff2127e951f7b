"""Running a case: the float64 golden, this library's own result, PyTorch's.

The golden and this library's result go through ``trilinear_bwd.aclnn``
(CANN's parameter and scale rules); PyTorch is imported only by
:func:`torch_result`, the default third party of the dual benchmark.
"""

import numpy as np

from .._core import _operator
from .._core._arrays import numpy_dtype
from .._core._status import AclnnError, InvalidArgumentError

# Two different NaNs per storage type, as bit patterns: an output element the
# kernel never writes keeps the pre-filled NaN, and so differs between two
# runs pre-filled differently (the standard asks outputs to start as NaN).
# Payloads no arithmetic produces (not the default quiet NaN, which a NaN
# input propagates), so an element can hold both only if never written.
_NAN_FILLS = {2: (np.uint16, 0x7D5A, 0xFD5B), 4: (np.uint32, 0x7FA5A5A5, 0xFFA5A5A4),
              8: (np.uint64, 0x7FF5A5A5A5A5A5A5, 0xFFF5A5A5A5A5A5A4)}


def _empty(shape, dtype, fmt):
    n, c, d, h, w = shape
    if fmt == "NDHWC":
        return np.empty((n, d, h, w, c), dtype=dtype).transpose(0, 4, 1, 2, 3)
    return np.empty(shape, dtype=dtype)


def _in_format(x, fmt):
    if fmt == "NDHWC":
        return np.ascontiguousarray(x.transpose(0, 2, 3, 4, 1)).transpose(0, 4, 1, 2, 3)
    return np.ascontiguousarray(x)


def refusal(case):
    """What the CANN call says of the case's shapes and scales: None when it takes them, else its message.

    The operator's own check (``trilinear_bwd._core._operator.check`` under CANN's
    rules), on an input of the case's shape that holds no memory: no file is
    read and nothing is allocated.
    """
    op = _operator.OPERATORS[case["op"]]
    shape = tuple(case["input_shape"])
    result_shape = tuple(case["result_shape"])
    output_size = shape[2:] if case["op"] == "backward" else result_shape[2:]
    input_size = None if op.forward else result_shape
    try:
        # The size limits first, on the shapes alone: NumPy cannot shape a
        # stand-in of more than 2**63 elements, which sizes that each pass
        # the manifest's check (at most 2**20) can reach together.
        _operator.check_limits(op, shape, result_shape)
        source = np.broadcast_to(np.zeros((), numpy_dtype(case["dtype"])), shape)
        _operator.check(op, source, None, output_size, input_size, case["align_corners"],
                        case["scales"], rules=_operator.CANN_RULES, allocate=True)
    except AclnnError as exc:
        return exc.message
    return None


def cann_scales(case):
    """The scales CANN uses for the case (``_operator.cann_scales``), as a list of 3 floats.

    All three when all are > 0 and ``align_corners`` is false; else 0.0
    each (the size ratio on every axis).
    """
    return [float(s) for s in _operator.cann_scales([float(s) for s in case["scales"]],
                                                    bool(case["align_corners"]))]


def run_cann(case, x, out):
    """Run the case's operator through ``trilinear_bwd.aclnn`` into ``out``; raise on a status."""
    from .. import aclnn

    result_shape = tuple(case["result_shape"])
    sd, sh, sw = (float(s) for s in case["scales"])
    align = bool(case["align_corners"])
    if case["op"] == "backward":
        status, size, executor = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
            x, list(x.shape[2:]), list(result_shape), align, sd, sh, sw, out)
        run = aclnn.aclnnUpsampleTrilinear3dBackward
    else:
        status, size, executor = aclnn.aclnnUpsampleTrilinear3dGetWorkspaceSize(
            x, list(result_shape[2:]), align, sd, sh, sw, out)
        run = aclnn.aclnnUpsampleTrilinear3d
    if status == 0:
        status = run(aclnn.aclrtMalloc(size), size, executor, None)
        aclnn.aclDestroyAclOpExecutor(executor)
    if status != 0:
        raise InvalidArgumentError(f"case {case.get('id', '?')}: the operator refused it "
                                   f"(status {status}): {aclnn.aclGetRecentErrMsg()}")
    return out


def golden(case, x):
    """The truth: the case's operator computed in float64 on the input as stored (NCDHW result)."""
    wide = np.ascontiguousarray(np.asarray(x).astype(np.float64))
    return run_cann(case, wide, np.empty(tuple(case["result_shape"]), np.float64))


def library_result(case, x):
    """This library's result in the case's dtype and format, run twice on NaN-filled outputs.

    Returns
    -------
    result : ndarray
        Logical NCDHW view of the first run's output.
    checks : dict
        ``deterministic``: the two runs' bits are identical;
        ``unwritten``: elements that hold, after each run, the NaN that
        run's output was pre-filled with (0 for a kernel that writes every
        element).
    """
    dtype = numpy_dtype(case["dtype"])
    fmt = case["format"]
    shape = tuple(case["result_shape"])
    source = _in_format(x, fmt)
    uint, *fills = _NAN_FILLS[dtype.itemsize]
    outs = []
    for fill in fills:
        out = _empty(shape, dtype, fmt)
        out.view(uint)[...] = fill
        outs.append((run_cann(case, source, out), fill))
    (first, fill1), (second, fill2) = outs
    bits1, bits2 = first.view(uint), second.view(uint)
    unwritten = (bits1 == fill1) & (bits2 == fill2)
    return first, {"deterministic": bool(np.array_equal(bits1, bits2)),
                   "unwritten": int(np.count_nonzero(unwritten))}


def torch_result(case, x):
    """PyTorch's CPU kernel in the case's dtype and format (the default third party).

    The scales go to PyTorch as CANN's rule uses them: all three when all
    are > 0 and ``align_corners`` is false, otherwise none (the size ratio).
    """
    import torch

    dtype = numpy_dtype(case["dtype"])
    src = np.ascontiguousarray(x)
    if dtype.name == "bfloat16":
        t = torch.from_numpy(src.view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(src)
    if case["format"] == "NDHWC":
        t = t.contiguous(memory_format=torch.channels_last_3d)
    align = bool(case["align_corners"])
    used = [s if s > 0 else None for s in cann_scales(case)]
    result_shape = list(case["result_shape"])
    if case["op"] == "backward":
        r = torch.ops.aten.upsample_trilinear3d_backward(t, list(x.shape[2:]), result_shape,
                                                         align, *used)
    else:
        r = torch.ops.aten.upsample_trilinear3d(t, result_shape[2:], align, *used)
    r = r.contiguous()
    if dtype.name == "bfloat16":
        return r.view(torch.int16).numpy().view(dtype)
    return r.numpy()

"""What PyTorch itself does: the layout its kernels give a result, and the kernels themselves.

The torch front ends lay their results out as PyTorch's kernels would
(:func:`memory_format`), and hand PyTorch's kernel the calls they do not run
themselves (:func:`kernel`): every call after ``disable()``, and the calls
this library's contract refuses, so that those compute what PyTorch computes
or raise what it raises.
"""

import torch

from . import _private

_suggest_memory_format = _private.suggest_memory_format

# The most entries each memo below keeps before it starts again (a new
# working set is rebuilt call by call).
MEMO_SIZE = 512
# memory_format's memo: a layout per shape and strides, a pure function of them.
_memory_formats = {}
# The strides of PyTorch's result for the calls handed to it, by the
# source's shape and strides and the result's shape.
_result_strides = {}


def _remember(memo, key, value):
    if len(memo) >= MEMO_SIZE:
        memo.clear()
    memo[key] = value


def memory_format(source):
    """The layout of the result PyTorch's kernel would allocate for ``source``.

    Remembered by shape and strides (PyTorch's rule, in Python, costs a few
    microseconds, and the front ends ask on every call); tensors whose
    shape or strides cannot be keyed (symbolic sizes, no strides) are asked
    every time.
    """
    try:
        key = (source.shape, source.stride())
        layout = _memory_formats.get(key)
    except (TypeError, RuntimeError):
        return suggested_memory_format(source)
    if layout is None:
        layout = suggested_memory_format(source)
        _remember(_memory_formats, key, layout)
    return layout


def suggested_memory_format(source):
    """PyTorch's rule for the layout of its result (``suggest_memory_format``), uncached."""
    if source.dim() == 5 and source.size(1) > 1:
        if _suggest_memory_format is not None:
            return _suggest_memory_format(source)
        if source.is_contiguous(memory_format=torch.channels_last_3d) and not (
            source.is_contiguous()
        ):
            return torch.channels_last_3d
    return torch.contiguous_format


def _result(source, shape):
    """A fresh tensor of ``shape`` laid out as PyTorch's kernel lays out its result for ``source``.

    The result's strides are remembered by the source's shape and strides,
    so a geometry handed to PyTorch again -- every call after ``disable()``,
    a refused geometry -- allocates by ``new_empty_strided``, which costs
    less than ``torch.empty`` with a memory format.
    """
    key = (source.shape, source.stride(), shape)
    strides = _result_strides.get(key)
    if strides is not None:
        return source.new_empty_strided(shape, strides)
    result = torch.empty(shape, dtype=source.dtype, device=source.device,
                         memory_format=memory_format(source))
    _remember(_result_strides, key, result.stride())
    return result


# PyTorch's kernels through their out= overloads, which enable()'s override
# leaves alone, by the cheapest calls there are: the forward's Python
# binding (what F.interpolate calls), the backward's operator without
# OpOverload's frame.
_forward_out = _private.forward_out
_backward_out = _private.raw_op(torch.ops.aten.upsample_trilinear3d_backward.grad_input)


def kernel(tensor, output_size, input_size, align_corners, scales_d, scales_h, scales_w):
    """PyTorch's own CPU kernel of either operator, through its ``out=`` overload.

    The arguments are aten's (``tensor`` the forward's ``x`` or the
    backward's ``grad_output``), with ``input_size`` None for the forward;
    returns PyTorch's result, or raises PyTorch's error.
    """
    if input_size is not None:
        grad_input = _result(tensor, tuple(input_size))
        return _backward_out(tensor, output_size, input_size, align_corners, scales_d,
                             scales_h, scales_w, grad_input=grad_input)
    if tensor.dim() == 5:
        out = _result(tensor, (tensor.shape[0], tensor.shape[1], *output_size))
    else:
        # Not 5-D: PyTorch's kernel raises its own error before it looks at out.
        out = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
    return _forward_out(tensor, output_size, align_corners, scales_d, scales_h, scales_w,
                        out=out)

"""``aten::upsample_trilinear3d_backward``'s signature on CPU tensors, computed by this library.

The public backward of the torch wing: every argument checked as the
contract says (CANN's status codes, not PyTorch's errors) before anything is
allocated, and a remembered geometry's calls on the compiled fast path.
"""

import torch

from .._core import _threads
from .._core._runner import variant
from .._core._status import InvalidArgumentError, NullArgumentError
from . import _cache, _private, _pytorch
from ._fast import Geometry, key


def upsample_trilinear3d_backward(grad_output, output_size, input_size, align_corners,
                                  scales_d=None, scales_h=None, scales_w=None, *,
                                  memory_format=None, num_threads=None):
    """``aten::upsample_trilinear3d_backward`` on CPU tensors, computed by this library.

    Parameters
    ----------
    grad_output : torch.Tensor, shape (N, C, oD, oH, oW)
        A CPU tensor of float32, float64, float16 or bfloat16, any strides.
        Read in place (DLPack), never copied.
    output_size : sequence of 3 int
        ``(oD, oH, oW)``.
    input_size : sequence of 5 int
        ``(N, C, iD, iH, iW)``.
    align_corners : bool
    scales_d, scales_h, scales_w : float or None
        The forward's scale factors, as ``F.interpolate`` passes them (None
        when the forward was given a size).
    memory_format : torch.memory_format, optional
        Layout of the result: ``torch.contiguous_format`` or
        ``torch.channels_last_3d``; None or ``torch.preserve_format`` (the
        default) the one PyTorch's kernel picks (channels-last-3d when
        ``grad_output`` is channels-last-3d).
    num_threads : int, optional
        OpenMP threads; None follows ``torch.set_num_threads`` /
        ``OMP_NUM_THREADS`` / ``threadpoolctl`` (see the threads guide).

    Returns
    -------
    torch.Tensor, shape (N, C, iD, iH, iW)
        A new tensor of ``grad_output``'s dtype, from PyTorch's allocator
        (resizable like any tensor PyTorch returns).

    Raises
    ------
    AclnnError
        (161001 / 161002) for arguments that break the operator contract,
        including a ``grad_output`` on a non-CPU device, a sparse, mkldnn
        or nested one, a dimension above 2**20 and a ``memory_format`` other
        than those above; checked before anything is allocated.

    Examples
    --------
    >>> import torch, trilinear_bwd.torch as tbt
    >>> g = torch.ones(1, 1, 4, 4, 4)
    >>> tbt.upsample_trilinear3d_backward(g, (4, 4, 4), (1, 1, 2, 2, 2), False).sum().item()
    64.0
    """
    if grad_output is None:
        raise NullArgumentError("gradOut must not be None")
    if not isinstance(grad_output, torch.Tensor):
        raise InvalidArgumentError(
            f"gradOut must be a torch.Tensor, got {type(grad_output).__name__}; "
            "use trilinear_bwd.upsample_trilinear3d_backward for other arrays"
        )
    if grad_output.device.type != "cpu":
        raise InvalidArgumentError(
            f"gradOut must live in CPU memory, got a torch tensor on {grad_output.device}"
        )
    if grad_output.is_nested or grad_output.layout != torch.strided:
        # Before anything asks a nested tensor for its sizes (PyTorch raises
        # an internal error there).
        raise InvalidArgumentError(
            "gradOut must be a dense (strided) tensor, got "
            + ("a nested tensor" if grad_output.is_nested else f"layout {grad_output.layout}"))
    if memory_format is None or memory_format is torch.preserve_format:
        memory_format = _pytorch.memory_format(grad_output)
    elif memory_format is not torch.contiguous_format and memory_format is not (
            torch.channels_last_3d):
        raise InvalidArgumentError(
            "memory_format must be None, torch.preserve_format, torch.contiguous_format or "
            f"torch.channels_last_3d, got {memory_format!r}")
    scales = (scales_d, scales_h, scales_w)
    key = _plain_key(grad_output, output_size, input_size, align_corners, scales,
                     memory_format, num_threads)
    geometry = _cache.geometries.get(key) if key is not None else None
    if type(geometry) is Geometry and not _is_lazy(grad_output):
        grad_input = geometry.fresh(grad_output)
        if grad_input is not None:
            return grad_input
    # A refused geometry goes the careful way again, which raises its error.
    return _cache.run(grad_output, output_size, input_size, align_corners, scales,
                      memory_format, num_threads, key)


_PLAIN_SIZES = (tuple, list, torch.Size)


def _plain_key(grad_output, output_size, input_size, align_corners, scales, memory_format,
               num_threads):
    """The geometry key of a public backward call, or None unless its arguments are plain.

    Plain: sizes as tuples, lists or ``torch.Size`` of ints (``g.shape[2:]``),
    a bool, float or None scales, an int or None thread count within the
    contract.  Only those are remembered: ``6.0 == 6`` and ``True == 1`` in
    a dict key, so a call spelled otherwise (which the careful path may
    refuse) must never find a plain call's geometry, nor leave one.
    """
    if not (type(output_size) in _PLAIN_SIZES and type(input_size) in _PLAIN_SIZES
            and type(align_corners) is bool
            and all(type(n) is int for n in output_size)
            and all(type(n) is int for n in input_size)
            and all(s is None or type(s) is float for s in scales)):
        return None
    if num_threads is not None and not _threads.is_plain(num_threads):
        return None
    return key("B", grad_output, output_size, tuple(input_size), align_corners, *scales,
               memory_format, num_threads, _threads.effective(num_threads), variant())


def _is_lazy(tensor):
    """True if ``tensor``'s values are not its memory (a lazy negation or conjugation, zeros)."""
    return tensor.is_neg() or tensor.is_conj() or _private.is_zerotensor(tensor)

"""The differentiable drop-in for ``F.interpolate(x, ..., mode="trilinear")``.

:func:`upsample_trilinear3d` reads ``F.interpolate``'s arguments (the plain
spellings at once, the others through ``F.interpolate``'s own handling,
``_override.captured_arguments``) and runs this library's forward, with an
autograd Function whose backward is this library's backward kernel.  On
plain CPU tensors with nothing to record it calls the kernels straight
(:func:`_straight`); under a tracer, a compiler or a transform it goes
through the custom operators (``_operators``), which those record.
"""

import math
from typing import List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch.overrides import handle_torch_function
from torch.overrides import has_torch_function_unary as _has_torch_function_unary

from .._core._operator import MAX_DIM
from . import _cache, _private, _pytorch
from ._private import DispatchKey
from ._operators import backward_op, forward_op, is_dual
from ._override import captured_arguments

_forward_kernel = _cache.for_drop_in.forward
_backward_kernel = _cache.for_drop_in.backward


# A call may skip the dispatcher to the CPU kernel -- the drop-in's autograd
# Functions call it straight, which costs a few microseconds less than the
# operator -- only where the dispatcher would have handed it the tensor as
# it is: an exact torch.Tensor (no __torch_function__ or __torch_dispatch__
# subclass) whose dispatch keys are those of a plain dense CPU tensor (not a
# lazy negation or conjugation, a zero tensor, a sparse, quantized, nested,
# inference or functorch-wrapped tensor), with no Python dispatch mode
# (user or infra: fake, proxy, functional), torch function mode (which sees
# the operator's call), functorch transform or tracer in effect.
# Without the private calls these facts need (_private.PLAIN_KEYS None), no
# tensor is plain and every call goes through the operator.
_PLAIN_KEYS = _private.PLAIN_KEYS
_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)
_dispatch_keys = _private.dispatch_keys
_key_included = _private.key_included
_function_mode_on = _private.function_mode_on
_functorch_active = _private.functorch_transforms_active
_is_tracing = _private.is_tracing


def _recording():
    """True while ``torch.compile`` or ``torch.jit.trace`` records the calls made."""
    return torch.compiler.is_compiling() or _is_tracing()


def _plain(tensor):
    """True if ``tensor`` and the modes in effect leave the dispatcher nothing to do.

    The caller has ruled out a tracer, a compiler and a functorch transform.
    """
    return (type(tensor) in _PLAIN_TYPES and _PLAIN_KEYS is not None
            and _dispatch_keys(tensor) == _PLAIN_KEYS
            and not _key_included(DispatchKey.Python) and not _function_mode_on())


def _straight(tensor):
    """True if the dispatcher would hand ``tensor`` to the CPU kernel unchanged."""
    # The compiler's test first: dynamo reads it as True and traces none of the
    # rest.  (Written out, not through _recording: it runs on every call.)
    return (not torch.compiler.is_compiling() and not _is_tracing()
            and not _functorch_active() and _plain(tensor))


def _scripted_arguments(x: torch.Tensor, size: Optional[Union[int, List[int]]],
                        scale_factor: Optional[Union[float, List[float]]],
                        recompute_scale_factor: Optional[bool]
                        ) -> Tuple[List[int], Optional[float], Optional[float], Optional[float]]:
    """F.interpolate's output size and scales, in TorchScript (``upsample_trilinear3d`` scripted)."""
    if x.dim() != 5:
        raise ValueError("upsample_trilinear3d: x must be 5-D (N, C, D, H, W)")
    if (size is None) == (scale_factor is None):
        raise ValueError("upsample_trilinear3d: give exactly one of size and scale_factor")
    if size is not None:
        if isinstance(size, int):
            return [size, size, size], None, None, None
        return size, None, None, None
    factors: List[float] = []
    if isinstance(scale_factor, float):
        factors = [scale_factor, scale_factor, scale_factor]
    elif scale_factor is not None:
        factors = scale_factor
    if len(factors) != 3:
        raise ValueError("upsample_trilinear3d: scale_factor must be a float or 3 floats")
    output_size = [int(math.floor(float(x.size(i + 2)) * factors[i])) for i in range(3)]
    if recompute_scale_factor is not None and recompute_scale_factor:
        return output_size, None, None, None
    return output_size, factors[0], factors[1], factors[2]


def upsample_trilinear3d(x: torch.Tensor, size: Optional[Union[int, List[int]]] = None,
                         scale_factor: Optional[Union[float, List[float]]] = None,
                         align_corners: Optional[bool] = False,
                         recompute_scale_factor: Optional[bool] = None) -> torch.Tensor:
    """Differentiable trilinear upsampling, forward and backward by this library.

    Computes ``F.interpolate(x, size, scale_factor, mode="trilinear",
    align_corners=align_corners, recompute_scale_factor=...)``: on CPU
    tensors with this library's forward kernel (float64 tables, so within
    float rounding of PyTorch's result, not always bitwise equal; see
    ``docs/numerics.md``) and its backward, which returns the gradient in
    ``x``'s memory format; on other devices with PyTorch's.  Double backward
    works (the backward's adjoint is the forward), and so do forward-mode AD
    and ``torch.func`` (``grad``, ``vmap``, ``jacrev``, ``jacfwd``), under
    every tracer and compiler ``F.interpolate`` runs under
    (``docs/torch.md``).  Every call ``F.interpolate`` refuses is refused
    with the same exception type.

    Parameters
    ----------
    x : torch.Tensor, shape (N, C, D, H, W)
        float32, float64, float16 or bfloat16; NCDHW or channels-last-3d.
    size : int or sequence of 3 int, optional
        Output size; exactly one of ``size`` and ``scale_factor``.
    scale_factor : float or sequence of 3 float, optional
        Multiplier per spatial axis.
    align_corners : bool, default False
    recompute_scale_factor : bool, optional
        As in ``F.interpolate``.

    Returns
    -------
    torch.Tensor
        The upsampled tensor, in ``x``'s memory format, from PyTorch's
        allocator.

    Raises
    ------
    TypeError, ValueError, RuntimeError, NotImplementedError
        What ``F.interpolate`` raises for the same arguments.
    InvalidArgumentError
        (161002) sizes past the contract's limits (a dimension above 2**20,
        the 60 GiB working set, a 2**31 product), before anything is
        allocated.

    Examples
    --------
    >>> import torch, trilinear_bwd.torch as tbt
    >>> x = torch.randn(2, 4, 8, 8, 8, requires_grad=True)
    >>> y = tbt.upsample_trilinear3d(x, scale_factor=2)
    >>> y.shape
    torch.Size([2, 4, 16, 16, 16])
    >>> y.square().mean().backward()
    """
    if torch.jit.is_scripting():
        # All TorchScript compiles of this function (it skips the rest):
        # F.interpolate's sizes and scales, then the operator.
        output_size, scales_d, scales_h, scales_w = _scripted_arguments(
            x, size, scale_factor, recompute_scale_factor)
        return torch.ops.trilinear_bwd.upsample_trilinear3d(
            x, output_size, align_corners is not None and align_corners, scales_d, scales_h,
            scales_w)
    if _has_torch_function_unary(x):
        # As F.interpolate: a __torch_function__ subclass or mode, or
        # torch.fx's Proxy (which records this function as one call).
        return handle_torch_function(upsample_trilinear3d, (x,), x, size=size,
                                     scale_factor=scale_factor, align_corners=align_corners,
                                     recompute_scale_factor=recompute_scale_factor)
    if not isinstance(x, torch.Tensor) or x.device.type != "cpu":
        # Other devices (and whatever is not a tensor): PyTorch's own.
        return F.interpolate(x, size=size, scale_factor=scale_factor, mode="trilinear",
                             align_corners=align_corners,
                             recompute_scale_factor=recompute_scale_factor)
    output_size, align_corners, scales = _interpolate_arguments(
        x, size, scale_factor, align_corners, recompute_scale_factor)
    if _recording():
        # A compiler or the JIT tracer records the call: the operator, one
        # node with its own autograd and vmap rules (dynamo cannot trace the
        # autograd Function's custom jvp).
        return forward_op(x, output_size, align_corners, *scales)
    if not ((x.requires_grad and torch.is_grad_enabled()) or is_dual(x)
            or _functorch_active()):
        # Nothing to differentiate: the kernel alone, or the operator (the
        # autograd Function would cost more than a small call's kernel).  No
        # tracer, compiler or transform: _straight's first tests were made.
        if _plain(x):
            return _forward_kernel(x, output_size, align_corners, *scales)
        return forward_op(x, output_size, align_corners, *scales)
    return _apply(UpsampleTrilinear3d, x, output_size, align_corners, scales)


def _plain_size(size, recompute_scale_factor):
    """``size`` as 3 positive ints, or None unless it is one of the plain spellings."""
    if recompute_scale_factor or not (recompute_scale_factor is None or
                                      type(recompute_scale_factor) is bool):
        return None
    if type(size) is int:
        size = (size, size, size)
    elif type(size) not in (tuple, list) or len(size) != 3:
        return None
    if all(type(n) is int and 0 < n <= MAX_DIM for n in size):
        return tuple(size)
    return None


def _plain_scales(shape, scale_factor):
    """``(output_size, factors)`` for the plain spellings of ``scale_factor``, else None."""
    if type(scale_factor) in (float, int):
        fd = fh = fw = scale_factor
    elif type(scale_factor) in (tuple, list) and len(scale_factor) == 3:
        fd, fh, fw = scale_factor
    else:
        return None
    # Written out rather than looped: this runs on every call of the drop-in.
    if not (type(fd) in (float, int) and type(fh) in (float, int) and type(fw) in (float, int)
            and 0 < fd < math.inf and 0 < fh < math.inf and 0 < fw < math.inf):
        return None
    fd, fh, fw = float(fd), float(fh), float(fw)
    # PyTorch's rule (upsample::compute_output_size): the double product,
    # truncated; a product past the limits goes the careful way.
    d, h, w = shape
    size = (int(d * fd), int(h * fh), int(w * fw))
    if not (0 < min(size) and max(size) <= MAX_DIM):
        return None
    return size, (fd, fh, fw)


def _interpolate_arguments(x, size, scale_factor, align_corners, recompute_scale_factor):
    """``(output_size, align_corners, scales)`` as ``F.interpolate`` passes them on.

    The plain spellings (ints, floats, tuples of them, a non-empty 5-D
    tensor) are read here at once; anything else goes through
    ``F.interpolate`` itself, whose call of ``aten::upsample_trilinear3d``
    is caught by ``_override``'s CPU kernel before anything runs: every call
    it refuses is refused with its own exception (a ``TypeError`` for
    ``size=(5.0, 6, 7)``, a ``RuntimeError`` for a NaN factor, ...), and
    every call it accepts gets the sizes and scales it computed (the
    aten-level checks, sizes > 0 say, follow in the operator, through
    PyTorch's kernel when this library's contract refuses the call).
    """
    if (x.dim() == 5 and all(x.shape[1:]) and (size is None) != (scale_factor is None)
            and (align_corners is None or type(align_corners) is bool)):
        if size is not None:
            output_size = _plain_size(size, recompute_scale_factor)
            if output_size is not None:
                return output_size, bool(align_corners), (None, None, None)
        elif recompute_scale_factor is None or type(recompute_scale_factor) is bool:
            plain = _plain_scales(x.shape[2:], scale_factor)
            if plain is not None:
                scales = (None, None, None) if recompute_scale_factor else plain[1]
                return plain[0], bool(align_corners), scales
    return captured_arguments(x, size, scale_factor, align_corners, recompute_scale_factor)


# -- the autograd Functions ----------------------------------------------------

class UpsampleTrilinear3d(torch.autograd.Function):
    """Trilinear upsampling, forward and backward by this library's kernels.

    Use it through :func:`upsample_trilinear3d`, which turns
    ``F.interpolate``'s arguments into ``apply(x, output_size,
    align_corners, scales)``: the output size and the three scales (None
    where not given) that ``F.interpolate`` hands ``aten::upsample_trilinear3d``.
    Supports reverse mode (double backward included), forward mode
    (``torch.autograd.forward_ad``; the operator is linear, so its JVP is the
    forward of the tangent) and ``torch.func`` (``grad``, ``vmap``,
    ``jacrev``, ``jacfwd``).
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x, output_size, align_corners, scales):
        if _straight(x):
            return _forward_kernel(x, output_size, align_corners, *scales)
        return forward_op(x, output_size, align_corners, *scales)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, ctx.output_size, ctx.align_corners, ctx.scales = inputs
        ctx.input_size = tuple(x.shape)
        ctx.memory_format = _pytorch.memory_format(x)

    @staticmethod
    def backward(ctx, grad_output):
        if not torch.is_grad_enabled() and not is_dual(grad_output) and _straight(grad_output):
            # No graph to record (no create_graph, no tangent): the kernel alone.
            grad_input = _backward_kernel(grad_output, ctx.output_size, ctx.input_size,
                                          ctx.align_corners, *ctx.scales)
        else:
            grad_input = _apply(_UpsampleTrilinear3dBackward, grad_output, ctx.output_size,
                                ctx.input_size, ctx.align_corners, ctx.scales)
        # Keep the input's layout (channels-last-3d in, channels-last-3d out)
        # even when grad_output arrived in another one; under vmap, which
        # cannot be asked about layouts (PyTorch raises NYI), the layout is
        # the batching rule's.
        try:
            relayout = not grad_input.is_contiguous(memory_format=ctx.memory_format)
        except RuntimeError:
            relayout = False
        if relayout:
            grad_input = grad_input.contiguous(memory_format=ctx.memory_format)
        return grad_input, None, None, None

    @staticmethod
    def jvp(ctx, x_tangent, *_):
        return torch.ops.trilinear_bwd.upsample_trilinear3d(
            x_tangent, ctx.output_size, ctx.align_corners, *ctx.scales)


_unwrap_if_dead = _private.unwrap_if_dead

# autograd.Function's C entry point.  Function.apply binds the arguments to
# forward's signature with inspect.signature on every call when
# setup_context is defined (to fill in defaults; these forwards have none
# and always get every argument), and only then calls this;
# _apply does what it does without the binding (docs/performance.md).
_function_apply = _private.function_apply


def _apply(cls, tensor, *args):
    """``cls.apply(tensor, *args)``, without ``Function.apply``'s per-call signature binding.

    ``tensor`` is the Function's only tensor argument: the one a dead
    functorch wrapper may need unwrapping from, as ``Function.apply`` does.
    """
    if (_function_apply is None or _functorch_active()
            or torch.compiler.is_compiling()):
        return cls.apply(tensor, *args)
    return _function_apply.__get__(None, cls)(_unwrap_if_dead(tensor), *args)


class _UpsampleTrilinear3dBackward(torch.autograd.Function):
    """The backward as a function of ``grad_output``, for :class:`UpsampleTrilinear3d`.

    Its own Function rather than the custom operator's registered autograd,
    which ``torch.func`` transforms refuse (that Function has no
    ``setup_context`` in PyTorch 2.13); linear, so its adjoint is the
    forward and its JVP the backward of the tangent.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(grad_output, output_size, input_size, align_corners, scales):
        if _straight(grad_output):
            return _backward_kernel(grad_output, output_size, input_size, align_corners,
                                    *scales)
        return backward_op(grad_output, output_size, input_size, align_corners, *scales)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, ctx.output_size, ctx.input_size, ctx.align_corners, ctx.scales = inputs

    @staticmethod
    def backward(ctx, grad_grad_input):
        return (_apply(UpsampleTrilinear3d, grad_grad_input, ctx.output_size,
                       ctx.align_corners, ctx.scales), None, None, None, None)

    @staticmethod
    def jvp(ctx, grad_output_tangent, *_):
        return torch.ops.trilinear_bwd.upsample_trilinear3d_backward(
            grad_output_tangent, ctx.output_size, ctx.input_size, ctx.align_corners,
            *ctx.scales)

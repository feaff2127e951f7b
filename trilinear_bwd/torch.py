"""PyTorch integration: this library's kernels as trilinear upsampling and its backward.

Three ways in, from the least to the most invasive:

* :func:`upsample_trilinear3d_backward` -- ``aten::upsample_trilinear3d_backward``'s
  signature on torch tensors, computed by this library (also registered as the
  custom operator ``torch.ops.trilinear_bwd.upsample_trilinear3d_backward``,
  which ``torch.compile`` treats as an opaque call); likewise the forward,
  ``torch.ops.trilinear_bwd.upsample_trilinear3d``;
* :func:`upsample_trilinear3d` -- a differentiable drop-in for
  ``F.interpolate(x, ..., mode="trilinear")`` whose forward and backward are
  this library's on CPU tensors;
* :func:`enable` / :func:`disable` / :func:`enabled` -- make the kernels the
  CPU implementations of ``aten::upsample_trilinear3d`` and
  ``aten::upsample_trilinear3d_backward`` themselves, so unchanged code that
  calls ``F.interpolate(..., mode="trilinear")`` and ``.backward()`` uses them.

PyTorch is an optional dependency: ``import trilinear_bwd`` never imports it;
this module does, on first use.  Tensors are passed to the kernel without a
copy (DLPack), and gradients are written straight into a new tensor.

Examples
--------
>>> import torch, trilinear_bwd.torch as tbt
>>> x = torch.randn(1, 2, 4, 4, 4, requires_grad=True)
>>> tbt.upsample_trilinear3d(x, scale_factor=2).sum().backward()
>>> x.grad.shape
torch.Size([1, 2, 4, 4, 4])
>>> with tbt.enabled():                  # or tbt.enable() ... tbt.disable()
...     y = torch.nn.functional.interpolate(x, scale_factor=2, mode="trilinear")
...     y.sum().backward()               # runs this library's kernel
"""

import contextlib
import math
import threading
import warnings
from collections.abc import Sequence
from typing import Optional

import torch
import torch.nn.functional as F

from . import _fork, _pool
from ._api import upsample_trilinear3d as _tb_forward
from ._api import upsample_trilinear3d_backward as _tb_backward
from ._status import InvalidArgumentError, NullArgumentError
from ._arguments import _TORCH_TO_NUMPY, as_int, as_real, as_sequence

__all__ = [
    "call_counts",
    "disable",
    "enable",
    "enabled",
    "is_enabled",
    "upsample_trilinear3d",
    "upsample_trilinear3d_backward",
]

# Calls on CPU, for tests and the curious: how many backward ("kernel") and
# forward ("forward") calls ran this library's kernel and how many fell back
# to PyTorch's (_kernel_or_fallback, _forward_or_fallback).
_calls = {"kernel": 0, "fallback": 0, "forward": 0, "forward_fallback": 0}


try:
    from torch._prims_common import suggest_memory_format as _suggest_memory_format
except ImportError:  # pragma: no cover - a private helper that could move
    _suggest_memory_format = None


def _memory_format(grad_output):
    """The layout of the gradient PyTorch's own kernel would allocate."""
    if grad_output.dim() == 5 and grad_output.size(1) > 1:
        if _suggest_memory_format is not None:
            return _suggest_memory_format(grad_output)
        if grad_output.is_contiguous(memory_format=torch.channels_last_3d) and not (
            grad_output.is_contiguous()
        ):
            return torch.channels_last_3d
    return torch.contiguous_format


def _scales(scales_d, scales_h, scales_w):
    # aten's None ("not given") is this library's 0.0.
    return tuple(0.0 if s is None else as_real(s, name)
                 for s, name in ((scales_d, "scalesD"), (scales_h, "scalesH"),
                                 (scales_w, "scalesW")))


def _run(grad_output, output_size, input_size, align_corners, scales, memory_format,
         num_threads):
    # Sizes are checked before anything is allocated (161002, never a stray
    # TypeError from int() of a foreign object).
    input_size = tuple(as_int(n, f"inputSize[{k}]")
                       for k, n in enumerate(as_sequence(input_size, "inputSize", "5 integers")))
    output_size = tuple(as_int(n, f"outputSize[{k}]") for k, n in
                        enumerate(as_sequence(output_size, "outputSize", "3 integers")))
    if len(input_size) != 5 or min(input_size, default=0) < 0:
        raise InvalidArgumentError(
            f"inputSize must be 5 non-negative integers (N, C, D, H, W), got {input_size}")
    grad_input = _new_tensor(input_size, grad_output.dtype, memory_format)
    _tb_backward(grad_output, input_size, output_size=output_size,
                 align_corners=bool(align_corners), scales=scales, out=grad_input,
                 num_threads=num_threads)
    return grad_input


def _new_tensor(shape, dtype, memory_format):
    """An uninitialised CPU tensor from the library's pool of faulted memory (``_pool``)."""
    name = str(dtype).rpartition(".")[2]
    if name not in ("float32", "float64", "float16", "bfloat16"):
        # Not a dtype of the contract: the call will be refused (161002).
        return torch.empty(shape, dtype=dtype, memory_format=memory_format)
    np_dtype = _TORCH_TO_NUMPY.get(name) or _bfloat16()
    return _pool.as_tensor(_pool.empty(shape, np_dtype, memory_format == torch.channels_last_3d))


def _bfloat16():
    import ml_dtypes

    return ml_dtypes.bfloat16


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
        Layout of the result; by default the one PyTorch's kernel picks
        (channels-last-3d when ``grad_output`` is channels-last-3d).
    num_threads : int, optional
        OpenMP threads; None follows ``torch.set_num_threads`` /
        ``OMP_NUM_THREADS`` / ``threadpoolctl`` (see the threads guide).

    Returns
    -------
    torch.Tensor, shape (N, C, iD, iH, iW)
        A new tensor of ``grad_output``'s dtype.

    Raises
    ------
    AclnnError
        (161001 / 161002) for arguments that break the operator contract,
        including a ``grad_output`` on a non-CPU device.

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
    if memory_format is None:
        memory_format = _memory_format(grad_output)
    return _run(grad_output, output_size, input_size, align_corners,
                _scales(scales_d, scales_h, scales_w), memory_format, num_threads)


# -- the custom operator ------------------------------------------------------
#
# The autograd Function's backward goes through a registered operator rather
# than a plain Python call, so that torch.compile (dynamo, AOTAutograd,
# inductor) records it as one opaque node instead of trying to trace the
# kernel; its fake implementation gives shapes and strides to the tracer.

@torch.library.custom_op("trilinear_bwd::upsample_trilinear3d_backward", mutates_args=())
def _backward_op(grad_output: torch.Tensor, output_size: Sequence[int],
                 input_size: Sequence[int], align_corners: bool,
                 scales_d: Optional[float], scales_h: Optional[float],
                 scales_w: Optional[float]) -> torch.Tensor:
    if grad_output.device.type != "cpu":
        return torch.ops.aten.upsample_trilinear3d_backward(
            grad_output, output_size, input_size, align_corners, scales_d, scales_h, scales_w)
    return _kernel_or_fallback(grad_output, output_size, input_size, align_corners,
                               scales_d, scales_h, scales_w)


@_backward_op.register_fake
def _(grad_output, output_size, input_size, align_corners, scales_d, scales_h, scales_w):
    return torch.empty(tuple(input_size), dtype=grad_output.dtype, device=grad_output.device,
                       memory_format=_memory_format(grad_output))


def _backward_op_setup(ctx, inputs, output):
    _, ctx.output_size, _, ctx.align_corners, *ctx.scales = inputs


def _backward_op_backward(ctx, grad_grad_input):
    # The backward is linear in grad_output; its adjoint is the forward.
    grad_grad_output = torch.ops.aten.upsample_trilinear3d(
        grad_grad_input, ctx.output_size, ctx.align_corners, *ctx.scales)
    return grad_grad_output, None, None, None, None, None, None


torch.library.register_autograd(
    "trilinear_bwd::upsample_trilinear3d_backward", _backward_op_backward,
    setup_context=_backward_op_setup,
)


def _run_forward(x, output_size, align_corners, scales, num_threads=None):
    """The forward on a CPU tensor into a new tensor of PyTorch's layout for it."""
    output_size = tuple(as_int(n, f"outputSize[{k}]") for k, n in
                        enumerate(as_sequence(output_size, "outputSize", "3 integers")))
    if x.dim() != 5 or len(output_size) != 3 or min(output_size) < 0:
        raise InvalidArgumentError(
            f"self must be 5-D and outputSize 3 non-negative integers, got {x.dim()}-D "
            f"and {output_size}")
    out = _new_tensor(tuple(x.shape[:2]) + output_size, x.dtype, _memory_format(x))
    _tb_forward(x, output_size, bool(align_corners), scales, out=out, num_threads=num_threads)
    return out


@torch.library.custom_op("trilinear_bwd::upsample_trilinear3d", mutates_args=())
def _forward_op(x: torch.Tensor, output_size: Sequence[int], align_corners: bool,
                scales_d: Optional[float], scales_h: Optional[float],
                scales_w: Optional[float]) -> torch.Tensor:
    if x.device.type != "cpu":
        return torch.ops.aten.upsample_trilinear3d(x, output_size, align_corners, scales_d,
                                                   scales_h, scales_w)
    return _forward_or_fallback(x, output_size, align_corners, scales_d, scales_h, scales_w)


@_forward_op.register_fake
def _(x, output_size, align_corners, scales_d, scales_h, scales_w):
    return torch.empty(tuple(x.shape[:2]) + tuple(output_size), dtype=x.dtype,
                       device=x.device, memory_format=_memory_format(x))


def _forward_op_setup(ctx, inputs, output):
    x, ctx.output_size, ctx.align_corners, *ctx.scales = inputs
    ctx.input_size = tuple(x.shape)


def _forward_op_backward(ctx, grad_output):
    grad_input = torch.ops.trilinear_bwd.upsample_trilinear3d_backward(
        grad_output, ctx.output_size, ctx.input_size, ctx.align_corners, *ctx.scales)
    return grad_input, None, None, None, None, None


torch.library.register_autograd(
    "trilinear_bwd::upsample_trilinear3d", _forward_op_backward,
    setup_context=_forward_op_setup,
)


# -- the differentiable upsampling ---------------------------------------------

def _expand(value, what):
    if isinstance(value, (list, tuple)):
        if len(value) != 3:
            raise ValueError(f"{what} must have 3 elements (D, H, W), got {len(value)}")
        return list(value)
    return [value] * 3


class UpsampleTrilinear3d(torch.autograd.Function):
    """Trilinear upsampling: PyTorch's forward, this library's backward.

    Use it through :func:`upsample_trilinear3d`.  ``apply(x, size,
    scale_factor, align_corners, recompute_scale_factor)`` takes
    ``F.interpolate``'s arguments.
    """

    @staticmethod
    def forward(ctx, x, size, scale_factor, align_corners, recompute_scale_factor):
        # What F.interpolate hands aten::upsample_trilinear3d, and so what its
        # own backward receives: the scale factors as given, unless a size
        # was given or the factors were folded into a recomputed size.
        if scale_factor is None or recompute_scale_factor:
            scales = (None, None, None)
        else:
            scales = tuple(float(s) for s in _expand(scale_factor, "scale_factor"))
        if x.device.type != "cpu" or (size is None) == (scale_factor is None):
            # Other devices, and the calls F.interpolate refuses (its error).
            y = F.interpolate(x, size=size, scale_factor=scale_factor, mode="trilinear",
                              align_corners=align_corners,
                              recompute_scale_factor=recompute_scale_factor)
        else:
            if size is not None:
                output_size = [int(n) for n in _expand(size, "size")]
            else:
                # F.interpolate's own rule for the output size.
                output_size = [math.floor(float(n) * float(f)) for n, f in
                               zip(x.shape[2:], _expand(scale_factor, "scale_factor"))]
            y = torch.ops.trilinear_bwd.upsample_trilinear3d(
                x, output_size, bool(align_corners), *scales)
        ctx.input_size = tuple(x.shape)
        ctx.output_size = tuple(y.shape[2:])
        ctx.align_corners = bool(align_corners)
        ctx.scales = scales
        ctx.memory_format = _memory_format(x)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        args = (ctx.output_size, ctx.input_size, ctx.align_corners, *ctx.scales)
        if grad_output.device.type != "cpu":
            grad_input = torch.ops.aten.upsample_trilinear3d_backward(grad_output, *args)
        else:
            grad_input = torch.ops.trilinear_bwd.upsample_trilinear3d_backward(
                grad_output, *args)
        # Keep the input's layout (channels-last-3d in, channels-last-3d out)
        # even when grad_output arrived in another one.
        if not grad_input.is_contiguous(memory_format=ctx.memory_format):
            grad_input = grad_input.contiguous(memory_format=ctx.memory_format)
        return grad_input, None, None, None, None


def upsample_trilinear3d(x, size=None, scale_factor=None, align_corners=False,
                         recompute_scale_factor=None):
    """Differentiable trilinear upsampling, forward and backward by this library.

    Computes ``F.interpolate(x, size, scale_factor, mode="trilinear",
    align_corners=align_corners, recompute_scale_factor=...)``: on CPU
    tensors with this library's forward kernel (float64 tables, so within
    float rounding of PyTorch's result, not always bitwise equal; see
    ``docs/numerics.md``) and its backward, which returns the gradient in
    ``x``'s memory format; on other devices with PyTorch's.  Double backward
    works (the backward's adjoint is the forward).

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
        The upsampled tensor, in ``x``'s memory format.

    Examples
    --------
    >>> import torch, trilinear_bwd.torch as tbt
    >>> x = torch.randn(2, 4, 8, 8, 8, requires_grad=True)
    >>> y = tbt.upsample_trilinear3d(x, scale_factor=2)
    >>> y.shape
    torch.Size([2, 4, 16, 16, 16])
    >>> y.square().mean().backward()
    """
    if x.dim() != 5:
        raise ValueError(f"x must be 5-D (N, C, D, H, W), got {x.dim()}-D")
    return UpsampleTrilinear3d.apply(x, size, scale_factor, align_corners,
                                     recompute_scale_factor)


# -- overriding aten's CPU kernel ----------------------------------------------
#
# Registering or destroying a torch.library kernel while another thread is
# inside the dispatcher is not safe in PyTorch (a crash, or an internal
# assertion, within seconds of toggling under load).  So the kernel is
# registered once, when this module is imported, for the life of the
# process, and enable() / disable() only flip the switch it reads: off, it
# hands every call to PyTorch's own kernel.

_lock = threading.Lock()
_fork.renew(globals(), "_lock", threading.Lock)
_active = False


def call_counts():
    """Count the CPU calls this module has handled so far.

    Returns
    -------
    dict
        ``{"kernel": k, "fallback": f, "forward": k2, "forward_fallback": f2}``:
        ``k`` backward calls ran this library's kernel, ``f`` were handed to
        PyTorch's (calls outside this library's contract); ``k2`` and ``f2``
        the same for the forward.  Covers :func:`upsample_trilinear3d` and,
        while :func:`enable` is in effect, ``aten::upsample_trilinear3d`` and
        ``aten::upsample_trilinear3d_backward``; handy to check that the
        override is really used, for example under ``torch.compile``.

    Examples
    --------
    >>> import torch, trilinear_bwd.torch as tbt
    >>> before = tbt.call_counts()["kernel"]
    >>> x = torch.ones(1, 1, 2, 2, 2, requires_grad=True)
    >>> tbt.upsample_trilinear3d(x, scale_factor=2).sum().backward()
    >>> tbt.call_counts()["kernel"] - before
    1
    """
    return dict(_calls)


def _kernel_or_fallback(grad_output, output_size, input_size, align_corners, scales_d,
                        scales_h, scales_w):
    """This library's kernel; PyTorch's for the calls its contract refuses."""
    try:
        grad_input = _run(grad_output, output_size, input_size, align_corners,
                          _scales(scales_d, scales_h, scales_w),
                          _memory_format(grad_output), None)
    except (InvalidArgumentError, NullArgumentError):
        # Calls PyTorch accepts but this library's contract does not (explicit
        # scales inconsistent with the sizes, sizes past the contract's
        # limits) get PyTorch's own kernel, through the out= overload, which
        # enable() leaves alone; calls PyTorch refuses get PyTorch's error.
        _calls["fallback"] += 1
        return _pytorch_kernel(grad_output, output_size, input_size, align_corners,
                               scales_d, scales_h, scales_w)
    _calls["kernel"] += 1
    return grad_input


def _pytorch_kernel(grad_output, output_size, input_size, align_corners, scales_d, scales_h,
                    scales_w):
    """PyTorch's own CPU kernel, through the ``out=`` overload that the override leaves alone."""
    grad_input = torch.empty(tuple(input_size), dtype=grad_output.dtype,
                             device=grad_output.device,
                             memory_format=_memory_format(grad_output))
    return torch.ops.aten.upsample_trilinear3d_backward.grad_input(
        grad_output, output_size, input_size, align_corners, scales_d, scales_h, scales_w,
        grad_input=grad_input)


def _forward_or_fallback(x, output_size, align_corners, scales_d, scales_h, scales_w):
    """This library's forward; PyTorch's for the calls its contract refuses."""
    try:
        out = _run_forward(x, output_size, align_corners, _scales(scales_d, scales_h, scales_w))
    except (InvalidArgumentError, NullArgumentError):
        _calls["forward_fallback"] += 1
        return _pytorch_forward(x, output_size, align_corners, scales_d, scales_h, scales_w)
    _calls["forward"] += 1
    return out


def _pytorch_forward(x, output_size, align_corners, scales_d, scales_h, scales_w):
    """PyTorch's own CPU forward, through the ``out=`` overload that the override leaves alone."""
    if x.dim() == 5:
        out = torch.empty(tuple(x.shape[:2]) + tuple(output_size), dtype=x.dtype,
                          device=x.device, memory_format=_memory_format(x))
    else:
        # Not 5-D: PyTorch's kernel raises its own error before it looks at out.
        out = torch.empty(0, dtype=x.dtype, device=x.device)
    return torch.ops.aten.upsample_trilinear3d.out(
        x, output_size, align_corners, scales_d, scales_h, scales_w, out=out)


def _aten_forward(x, output_size, align_corners, scales_d=None, scales_h=None, scales_w=None):
    # The CPU kernel of aten::upsample_trilinear3d from import on.
    if not _active:
        return _pytorch_forward(x, output_size, align_corners, scales_d, scales_h, scales_w)
    return _forward_or_fallback(x, output_size, align_corners, scales_d, scales_h, scales_w)


def _aten_kernel(grad_output, output_size, input_size, align_corners, scales_d=None,
                 scales_h=None, scales_w=None):
    # The CPU kernel of aten::upsample_trilinear3d_backward from import on.
    if not _active:
        return _pytorch_kernel(grad_output, output_size, input_size, align_corners,
                               scales_d, scales_h, scales_w)
    return _kernel_or_fallback(grad_output, output_size, input_size, align_corners,
                               scales_d, scales_h, scales_w)


def _register():
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        # Overriding an aten kernel is what we mean to do.
        warnings.filterwarnings(
            "ignore", message=r"(?s).*Overriding a previously registered kernel")
        lib.impl("upsample_trilinear3d_backward", _aten_kernel, "CPU")
        lib.impl("upsample_trilinear3d", _aten_forward, "CPU")
    return lib


# Kept for the life of the process: destroying it would unregister the kernel.
_library = _register()


def enable():
    """Make this library's kernels PyTorch's CPU ``upsample_trilinear3d`` and its backward.

    From then on, in every thread, ``F.interpolate(..., mode="trilinear")``
    and its ``.backward()`` run them, in unchanged code.  Calls they cannot
    take (see the operator contract) fall back to PyTorch's kernels.  The
    ``out=`` overloads (``upsample_trilinear3d.out``,
    ``upsample_trilinear3d_backward.grad_input``) and other devices are left
    alone.  Calling it again does nothing.

    Notes
    -----
    The kernel is registered with PyTorch's dispatcher once, when
    ``trilinear_bwd.torch`` is imported, and never unregistered (PyTorch
    cannot change registrations safely while other threads use the
    dispatcher); :func:`enable` and :func:`disable` flip a switch that it
    reads, so they are safe from any thread at any rate.  While disabled,
    each CPU call is handed to PyTorch's own kernel (a Python hop of a few
    microseconds; results identical).

    Works in eager mode and under ``torch.compile`` with the ``"eager"`` and
    ``"aot_eager"`` backends.  The default ``"inductor"`` backend decomposes
    trilinear upsampling into indexing and generates its own backward, which
    never calls the aten operator: there, use :func:`upsample_trilinear3d`,
    whose backward is an opaque custom operator that inductor keeps.

    Examples
    --------
    >>> import trilinear_bwd.torch as tbt
    >>> tbt.enable(); tbt.is_enabled()
    True
    >>> tbt.disable(); tbt.is_enabled()
    False
    """
    global _active
    with _lock:
        _active = True


def disable():
    """Hand ``aten::upsample_trilinear3d`` and its backward on CPU back to PyTorch's own kernels.

    Calling it when not enabled does nothing.
    """
    global _active
    with _lock:
        _active = False


def is_enabled():
    """Return True between :func:`enable` and :func:`disable`."""
    return _active


@contextlib.contextmanager
def enabled():
    """Context manager: :func:`enable` on entry, back to the previous state on exit.

    The switch is process-wide, not per thread: other threads running
    PyTorch meanwhile use this kernel too.

    Examples
    --------
    >>> import torch, trilinear_bwd.torch as tbt
    >>> x = torch.randn(1, 1, 4, 4, 4, requires_grad=True)
    >>> with tbt.enabled():
    ...     torch.nn.functional.interpolate(x, size=8, mode="trilinear").sum().backward()
    """
    was = is_enabled()
    enable()
    try:
        yield
    finally:
        if not was:
            disable()

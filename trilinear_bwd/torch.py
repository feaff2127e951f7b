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
this module does, on first use, and registers nothing with PyTorch's
dispatcher until the first :func:`enable`.  Tensors are passed to the
kernel without a copy (DLPack on a geometry's first call, raw data pointers
on the calls after it), and results are written straight into new tensors
from PyTorch's allocator.

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
import functools
import math
import threading
import warnings
from collections.abc import Sequence
from typing import List, Optional, Tuple, Union

import torch
import torch.autograd.forward_ad as _forward_ad
import torch.nn.functional as F
from torch._C import DispatchKey
from torch.overrides import handle_torch_function
from torch.overrides import has_torch_function_unary as _has_torch_function_unary

from . import _dispatch, _fork, _native, _torch_compile, _torch_fast
from ._api import run_checked
from ._arguments import MAX_THREADS
from ._arrays import as_array, is_misaligned
from ._coerce import as_scale
from ._executor import _fork_safe_threads, moved_bytes, scratch_workspace, team_size
from ._operator import BACKWARD, FORWARD, MAX_DIM, check
from ._plan import planned
from ._status import InvalidArgumentError, LimitError, NullArgumentError
from ._torch_arrays import new_tensor, tensor_view

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
# to PyTorch's (_kernel_or_fallback, _forward_or_fallback); how many calls
# torch.compile traced as PyTorch's code while enabled (_torch_compile.tiny).
_calls = {"kernel": 0, "fallback": 0, "forward": 0, "forward_fallback": 0,
          "traced_to_pytorch": 0}


def _traced_to_pytorch():
    _calls["traced_to_pytorch"] += 1


try:
    from torch._prims_common import suggest_memory_format as _suggest_memory_format
except ImportError:  # pragma: no cover - a private helper that could move
    _suggest_memory_format = None


def _memory_format(grad_output):
    """The layout of the gradient PyTorch's own kernel would allocate.

    Remembered by shape and strides (PyTorch's rule, in Python, costs a few
    microseconds, and the front ends ask on every call); tensors whose
    shape or strides cannot be keyed (symbolic sizes, no strides) are asked
    every time.
    """
    try:
        key = (grad_output.shape, grad_output.stride())
        memory_format = _memory_formats.get(key)
    except (TypeError, RuntimeError):
        return _suggested_memory_format(grad_output)
    if memory_format is None:
        memory_format = _suggested_memory_format(grad_output)
        if len(_memory_formats) >= MEMORY_FORMATS_SIZE:
            _memory_formats.clear()
        _memory_formats[key] = memory_format
    return memory_format


# _memory_format's memo: a layout per shape and strides, a pure function of them.
MEMORY_FORMATS_SIZE = 512
_memory_formats = {}


def _suggested_memory_format(grad_output):
    """PyTorch's rule for the layout of its result (``suggest_memory_format``), uncached."""
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
    return tuple(as_scale(s, name) for s, name in ((scales_d, "scalesD"), (scales_h, "scalesH"),
                                                   (scales_w, "scalesW")))


def _run(grad_output, output_size, input_size, align_corners, scales, memory_format,
         num_threads, key=None):
    """The backward on a CPU tensor into a new tensor of ``memory_format``.

    Every rule of the contract is checked before anything is allocated,
    copied or planned: a size past the limits is a 161002 here, never a
    ``MemoryError`` from allocating it (``docs/reliability.md``).  With a
    geometry ``key``, what the checks established is remembered for the
    fast path (a refusal too).
    """
    source = as_array(grad_output, "gradOut")
    misaligned = is_misaligned(source)
    key = _faithful(key, source, grad_output, misaligned)
    try:
        call = check(BACKWARD, source, None, output_size, input_size, align_corners, scales,
                     allocate=True, misaligned_ok=misaligned)
    except (InvalidArgumentError, NullArgumentError):
        if key is not None:
            _remember(key, _REFUSED)
        raise
    return _run_into(call, grad_output.dtype, memory_format, misaligned, num_threads, key)


def _faithful(key, source, tensor, misaligned):
    """``key``, or None when ``source`` is not ``tensor``'s own memory as it lies.

    A geometry is remembered only from a call whose NumPy view is the
    tensor's memory, byte strides and address: a zero tensor (read as a
    broadcast zero), a misaligned tensor (copied) or any other resolved
    state would otherwise leave a plan for memory laid out differently from
    the next tensor of the same metadata.
    """
    if key is None or misaligned or source.size == 0:
        return None
    item = tensor.element_size()
    if (source.strides != tuple(item * n for n in tensor.stride())
            or source.ctypes.data != tensor.data_ptr()):
        return None
    return key


def _run_into(call, dtype, memory_format, misaligned, num_threads, key=None):
    # PyTorch's allocator, not the library's pool: a tensor handed to PyTorch
    # code must be resizable like any it allocated (resize_, out= of
    # another shape), which memory from torch.from_numpy is not, and memory
    # PyTorch allocated cannot come back to a pool once PyTorch frees it.
    shape = call.op.shapes(call.input_size, call.output_size)[1]
    result = new_tensor(shape, dtype, memory_format, call.op.target)
    call = call.replace(target=tensor_view(result))
    run_checked(call, misaligned, num_threads)
    if key is not None:
        # key ends with the team size asked for and the kernel variant.
        _remember(key, _geometry(call, result, key[-2], num_threads is None, key[-1]))
    return result


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
        memory_format = _memory_format(grad_output)
    elif memory_format is not torch.contiguous_format and memory_format is not (
            torch.channels_last_3d):
        raise InvalidArgumentError(
            "memory_format must be None, torch.preserve_format, torch.contiguous_format or "
            f"torch.channels_last_3d, got {memory_format!r}")
    key = _plain_key(grad_output, output_size, input_size, align_corners,
                     (scales_d, scales_h, scales_w), memory_format, num_threads)
    geometry = _geometries.get(key) if key is not None else None
    if geometry is not None and geometry is not _REFUSED and not _is_lazy(grad_output):
        grad_input = geometry.fresh(grad_output)
        if grad_input is not None:
            return grad_input
    # A refused geometry goes the careful way again, which raises its error.
    return _run(grad_output, output_size, input_size, align_corners,
                _scales(scales_d, scales_h, scales_w), memory_format, num_threads, key)


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
    if num_threads is not None and not (type(num_threads) is int and num_threads != 0
                                        and abs(num_threads) <= MAX_THREADS):
        return None
    return ("B", grad_output.shape, grad_output.stride(), grad_output.dtype,
            tuple(output_size), tuple(input_size), align_corners, *scales, memory_format,
            num_threads, _native.effective_n_threads(num_threads), _dispatch.kernel_module())


# -- the custom operators --------------------------------------------------------
#
# The drop-in's autograd Function calls registered operators rather than
# plain Python, so that torch.compile (dynamo, AOTAutograd, inductor) records
# each as one opaque node instead of trying to trace the kernel; the fake
# implementations give shapes and strides to the tracer.  enable() has a pair
# of its own for compiled graphs (_torch_compile), which read the switch when
# they run.
#
# They are defined with torch.library.Library and an Autograd kernel of
# their own rather than torch.library.custom_op and register_autograd, whose
# Python wrappers cost more than the kernel of a small call
# (docs/performance.md, "Compiled models"): a call on plain CPU tensors that
# needs no gradient -- every call of compiled code, which runs its graphs
# with autograd off -- goes straight to the kernel; a call that needs one
# goes through a torch.autograd.Function, and a call under a tracer or a
# transform (Python, functorch or other keys below autograd) is
# redispatched, so the tracer records the operator.

_ops = torch.library.Library("trilinear_bwd", "FRAGMENT")
_FORWARD_SCHEMA = ("(Tensor x, SymInt[] output_size, bool align_corners, float? scales_d, "
                   "float? scales_h, float? scales_w) -> Tensor")
_BACKWARD_SCHEMA = ("(Tensor grad_output, SymInt[] output_size, SymInt[] input_size, "
                    "bool align_corners, float? scales_d, float? scales_h, float? scales_w) "
                    "-> Tensor")
_BELOW_AUTOGRAD = torch._C._after_autograd_keyset


def _is_dual(tensor):
    """True if ``tensor`` carries a forward-mode tangent (inside ``forward_ad.dual_level``)."""
    level = _forward_ad._current_level
    return level >= 0 and torch._unpack_dual(tensor, level).tangent is not None


# A call may skip the dispatcher to the CPU kernel -- the drop-in's autograd
# Functions call it straight, which costs a few microseconds less than the
# operator -- only where the dispatcher would have handed it the tensor as
# it is: an exact torch.Tensor (no __torch_function__ or __torch_dispatch__
# subclass) whose dispatch keys are those of a plain dense CPU tensor (not a
# lazy negation or conjugation, a zero tensor, a sparse, quantized, nested,
# inference or functorch-wrapped tensor), with no Python dispatch mode
# (user or infra: fake, proxy, functional), torch function mode (which sees
# the operator's call), functorch transform or tracer in effect.
with torch.inference_mode(False):
    _PLAIN_KEYS = torch._C._dispatch_keys(torch.empty(0, device="cpu"))
_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)
_dispatch_keys = torch._C._dispatch_keys
_key_included = torch._C._dispatch_tls_is_dispatch_key_included
_function_mode_on = torch._C._is_torch_function_mode_enabled


# torch.jit.is_tracing() without its Python frame (it calls this).
_is_tracing = getattr(torch._C, "_is_tracing", None) or torch.jit.is_tracing


def _recording():
    """True while ``torch.compile`` or ``torch.jit.trace`` records the calls made."""
    return torch.compiler.is_compiling() or _is_tracing()


def _straight(tensor):
    """True if the dispatcher would hand ``tensor`` to the CPU kernel unchanged."""
    # The compiler's test first: dynamo reads it as True and traces none of the rest.
    return (not torch.compiler.is_compiling() and not _is_tracing()
            and not torch._C._are_functorch_transforms_active()
            and type(tensor) in _PLAIN_TYPES and _dispatch_keys(tensor) == _PLAIN_KEYS
            and not _key_included(DispatchKey.Python)
            and not _function_mode_on())


def _define(name, schema, kernel, other_devices, fake, formula, setup_context):
    """Define ``trilinear_bwd::name``: its kernels, fake and autograd; returns its overload.

    ``kernel`` runs on CPU tensors, ``other_devices`` (PyTorch's operator)
    on the others.  ``formula(ctx, grad)`` returns the gradients of the
    operator's arguments, ``setup_context(ctx, inputs, output)`` keeps what
    it needs, as for ``torch.library.register_autograd``.
    """
    _ops.define(name + schema)
    _ops.impl(name, kernel, "CPU")
    _ops.impl(name, other_devices, "CompositeExplicitAutograd")
    torch.library.register_fake(f"trilinear_bwd::{name}", fake, lib=_ops)
    op = getattr(torch.ops.trilinear_bwd, name).default

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, below, tensor, *args):
            output = op.redispatch(below, tensor, *args)
            setup_context(ctx, (tensor,) + args, output)
            ctx.below, ctx.args = below, args
            return output

        @staticmethod
        def backward(ctx, grad):
            return (None,) + formula(ctx, grad)

        @staticmethod
        def jvp(ctx, _, tangent, *__):
            # The operator is linear in its tensor: its derivative is itself.
            return op.redispatch(ctx.below, tangent, *ctx.args)

    Function.__name__ = Function.__qualname__ = f"{name}_backward_node"

    def autograd_kernel(keyset, tensor, *args):
        below = keyset & _BELOW_AUTOGRAD
        if (tensor.requires_grad and torch.is_grad_enabled()) or _is_dual(tensor):
            return Function.apply(below, tensor, *args)
        if below.highestPriorityTypeId() == DispatchKey.CPU:
            return kernel(tensor, *args)           # a plain CPU tensor: nothing between
        return op.redispatch(below, tensor, *args)

    _ops.impl(name, autograd_kernel, "Autograd", with_keyset=True)
    return op


def _forward_op_fake(x, output_size, align_corners, scales_d, scales_h, scales_w):
    return torch.empty(tuple(x.shape[:2]) + tuple(output_size), dtype=x.dtype,
                       device=x.device, memory_format=_memory_format(x))


def _backward_op_fake(grad_output, output_size, input_size, align_corners, scales_d, scales_h,
                      scales_w):
    return torch.empty(tuple(input_size), dtype=grad_output.dtype, device=grad_output.device,
                       memory_format=_memory_format(grad_output))


def _forward_op_setup(ctx, inputs, output):
    x, ctx.output_size, ctx.align_corners, *ctx.scales = inputs
    ctx.input_size = tuple(x.shape)


def _backward_op_setup(ctx, inputs, output):
    _, ctx.output_size, _, ctx.align_corners, *ctx.scales = inputs


def _adjoints(forward_name, backward_name):
    """The autograd formulas of a forward / backward pair: each is the other's adjoint."""
    def forward_backward(ctx, grad_output):
        grad_input = getattr(torch.ops.trilinear_bwd, backward_name)(
            grad_output, ctx.output_size, ctx.input_size, ctx.align_corners, *ctx.scales)
        return grad_input, None, None, None, None, None

    def backward_backward(ctx, grad_grad_input):
        # The backward is linear in grad_output; its adjoint is the forward.
        grad_grad_output = getattr(torch.ops.trilinear_bwd, forward_name)(
            grad_grad_input, ctx.output_size, ctx.align_corners, *ctx.scales)
        return grad_grad_output, None, None, None, None, None, None

    return forward_backward, backward_backward


def _run_forward(x, output_size, align_corners, scales, num_threads=None, key=None):
    """The forward on a CPU tensor into a new tensor of PyTorch's layout for it.

    Checked before anything is allocated, like :func:`_run`, and remembered
    under ``key`` likewise.
    """
    source = as_array(x, "self")
    misaligned = is_misaligned(source)
    key = _faithful(key, source, x, misaligned)
    try:
        call = check(FORWARD, source, None, output_size, None, align_corners, scales,
                     allocate=True, misaligned_ok=misaligned)
    except (InvalidArgumentError, NullArgumentError):
        if key is not None:
            _remember(key, _REFUSED)
        raise
    return _run_into(call, x.dtype, _memory_format(x), misaligned, num_threads, key)


# -- torch.func: the custom operators under vmap ---------------------------------
#
# vmap (and so jacrev / jacfwd, and the drop-in's generated vmap rule) folds
# the batch dimension into N: each sample's volumes are independent rows of
# the same call.

def _fold(tensor, bdim):
    """``tensor`` with its vmap dimension moved first and merged into N."""
    tensor = tensor.movedim(bdim, 0)
    return tensor.reshape((-1,) + tuple(tensor.shape[2:])), tensor.shape[0]


def _unfold(tensor, batch):
    return tensor.reshape((batch, -1) + tuple(tensor.shape[1:]))


def _forward_op_vmap(info, in_dims, x, output_size, align_corners, scales_d, scales_h,
                     scales_w):
    if in_dims[0] is None:
        return _forward_op(x, output_size, align_corners, scales_d, scales_h, scales_w), None
    flat, batch = _fold(x, in_dims[0])
    y = _forward_op(flat, output_size, align_corners, scales_d, scales_h, scales_w)
    return _unfold(y, batch), 0


def _backward_op_vmap(info, in_dims, grad_output, output_size, input_size, align_corners,
                      scales_d, scales_h, scales_w):
    if in_dims[0] is None:
        return _backward_op(grad_output, output_size, input_size, align_corners, scales_d,
                            scales_h, scales_w), None
    flat, batch = _fold(grad_output, in_dims[0])
    input_size = [flat.shape[0]] + list(input_size)[1:]
    grad_input = _backward_op(flat, output_size, input_size, align_corners, scales_d,
                              scales_h, scales_w)
    return _unfold(grad_input, batch), 0




# -- the differentiable upsampling ---------------------------------------------

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
        return _forward_op(x, output_size, align_corners, *scales)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, ctx.output_size, ctx.align_corners, ctx.scales = inputs
        ctx.input_size = tuple(x.shape)
        ctx.memory_format = _memory_format(x)

    @staticmethod
    def backward(ctx, grad_output):
        if not torch.is_grad_enabled() and not _is_dual(grad_output) and _straight(grad_output):
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


try:
    from torch._C._functorch import unwrap_if_dead as _unwrap_if_dead
except ImportError:  # pragma: no cover - a private helper that could move
    def _unwrap_if_dead(tensor):
        return tensor

# autograd.Function's C entry point.  Function.apply binds the arguments to
# forward's signature with inspect.signature on every call when
# setup_context is defined (to fill in defaults; these forwards have none
# and always get every argument), and only then calls this;
# _apply does what it does without the binding (docs/performance.md).
_function_apply = torch._C._FunctionBase.__dict__["apply"]


def _apply(cls, tensor, *args):
    """``cls.apply(tensor, *args)``, without ``Function.apply``'s per-call signature binding.

    ``tensor`` is the Function's only tensor argument: the one a dead
    functorch wrapper may need unwrapping from, as ``Function.apply`` does.
    """
    if torch._C._are_functorch_transforms_active() or torch.compiler.is_compiling():
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
        return _backward_op(grad_output, output_size, input_size, align_corners, *scales)

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
    is caught by this module's CPU kernel before anything runs: every call
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
    _ensure_registered()
    _capturing_started(1)
    _capture.on = True
    try:
        F.interpolate(x, size=size, scale_factor=scale_factor, mode="trilinear",
                      align_corners=align_corners,
                      recompute_scale_factor=recompute_scale_factor)
    except _Captured as captured:
        return captured.output_size, captured.align_corners, captured.scales
    finally:
        _capture.on = False
        _capturing_started(-1)
    raise AssertionError("F.interpolate returned without calling aten::upsample_trilinear3d")


class _Captured(Exception):
    """What ``F.interpolate`` handed ``aten::upsample_trilinear3d``, raised by the CPU kernel."""

    def __init__(self, output_size, align_corners, scales):
        super().__init__("captured")
        self.output_size = tuple(output_size)
        self.align_corners = align_corners
        self.scales = scales


# While set in a thread, the CPU kernel of aten::upsample_trilinear3d runs
# nothing: it raises _Captured with its arguments (_interpolate_arguments).
class _CaptureFlag(threading.local):
    on = False    # the class attribute: every thread starts with it off


_capture = _CaptureFlag()
_fork.renew(globals(), "_capture", _CaptureFlag)
# How many threads capture now: the kernel reads the thread-local flag
# only while this is not 0 (a global costs less to read on every call).
_capturing = 0


def _capturing_started(step):
    global _capturing
    with _lock:
        _capturing += step


@_fork.at_child
def _no_capture_in_child():
    # A forked child has one thread, which is not capturing (and _capture,
    # renewed, is off in it).
    global _capturing
    _capturing = 0


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
    and ``torch.func`` (``grad``, ``vmap``, ``jacrev``, ``jacfwd``).  Every
    call ``F.interpolate`` refuses is refused with the same exception type.

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
        return _forward_op(x, output_size, align_corners, *scales)
    if not ((x.requires_grad and torch.is_grad_enabled()) or _is_dual(x)
            or torch._C._are_functorch_transforms_active()):
        # Nothing to differentiate: the kernel alone, or the operator (the
        # autograd Function would cost more than a small call's kernel).
        if _straight(x):
            return _forward_kernel(x, output_size, align_corners, *scales)
        return _forward_op(x, output_size, align_corners, *scales)
    return _apply(UpsampleTrilinear3d, x, output_size, align_corners, scales)


# -- overriding aten's CPU kernel ----------------------------------------------
#
# Registering or destroying a torch.library kernel while another thread is
# inside the dispatcher is not safe in PyTorch (a crash, or an internal
# assertion, within seconds of toggling under load).  So the kernels are
# registered once, at the first enable() (or the first drop-in call that
# needs F.interpolate's arguments captured), for the life of the process,
# and enable() / disable() only flip the switch they read: off, they hand
# every call to PyTorch's own kernel.  Before that first call nothing of
# this module stands in front of PyTorch's kernels.

_lock = threading.Lock()
_fork.renew(globals(), "_lock", threading.Lock)
_active = False


def call_counts():
    """Count the CPU calls this module has handled so far.

    Returns
    -------
    dict
        ``{"kernel": k, "fallback": f, "forward": k2, "forward_fallback": f2,
        "traced_to_pytorch": t}``: ``k`` backward calls ran this library's
        kernel, ``f`` were handed to PyTorch's (calls outside this library's
        contract); ``k2`` and ``f2`` the same for the forward.  Covers
        :func:`upsample_trilinear3d` and, while :func:`enable` is in
        effect, ``aten::upsample_trilinear3d`` and
        ``aten::upsample_trilinear3d_backward``; handy to check that the
        override is really used, for example under ``torch.compile``.
        ``t`` counts traces, not runs: the ``F.interpolate`` calls that
        ``torch.compile`` recorded as PyTorch's own code while enabled,
        because their static output has fewer than 4,096 elements
        (``docs/torch.md``, "torch.compile").

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


# -- the per-geometry fast path ------------------------------------------------
#
# A training loop calls one geometry over and over.  The first call of a
# geometry goes the careful way (every rule of the contract, a plan); what it
# establishes is kept here, keyed on the tensor's metadata only -- shape,
# strides, dtype, the sizes, align_corners, the scales, the team size asked
# for and the kernel variant -- never on an address.  A later call of the same
# geometry checks what can change from call to call with the same metadata
# (the source's alignment, the fresh result's strides), then runs the
# kernel on raw data pointers: no DLPack, no NumPy views, no validation
# repeated (docs/torch.md, "Per-call cost").

GEOMETRY_CACHE_SIZE = 512
_geometries = {}
# The strides of PyTorch's result for the calls handed to it, by the source's
# shape and strides and the result's shape (_pytorch_result).
_pytorch_layouts = {}
# A geometry this library's contract refuses (PyTorch's kernel takes it).
_REFUSED = "refused"


def _geometry(call, result, requested, follow_default, kernel_module):
    """What the first call of a geometry established, for the calls after it.

    A :class:`trilinear_bwd._torch_fast.Geometry`: the kernel's plan and
    C entry point, the result's metadata, the team.  Each result is a fresh
    tensor from PyTorch's allocator, on the CPU: ``torch.empty_like`` of a
    template with the result's metadata where the template's storage holds
    it (``empty_like`` parses one argument where ``empty_strided`` parses
    two sequences), ``torch.empty_strided`` above that.
    """
    shape = tuple(result.shape)
    strides = result.stride()
    itemsize = result.element_size()
    plan, _ = planned(call, requested, kernel_module)
    # The key holds the team asked for (OpenMP's default at the time for
    # the calls under enable(), which pass no thread count), so the team is
    # fixed with it.
    threads = team_size(plan.n_slots, moved_bytes(call), requested, follow_default)
    if result.numel() * itemsize <= TEMPLATE_BYTES:
        allocate, args = torch.empty_like, (_template(shape, strides, result.dtype),)
    else:
        allocate = functools.partial(torch.empty_strided, dtype=result.dtype, device="cpu")
        args = (shape, strides)
    return _torch_fast.Geometry(
        plan.kernel, kernel_module.RUN_TEAM, shape, strides, itemsize, threads,
        plan.workspace_size, allocate, args, scratch_workspace, _fork_safe_threads)


# The bytes of the one storage every template lies in: the results a
# template serves are at most this large.
TEMPLATE_BYTES = 2**20


def _template(shape, strides, dtype):
    """A tensor of this metadata for ``torch.empty_like`` to copy; its memory is never used.

    Every template lies in one storage of ``TEMPLATE_BYTES``, allocated at
    the first template and never written (its pages are never touched).
    """
    global _template_storage
    # On the CPU, whatever device a caller's code makes the default.
    if _template_storage is None:
        _template_storage = torch.UntypedStorage(TEMPLATE_BYTES, device="cpu")
    return torch.empty(0, dtype=dtype, device="cpu").set_(_template_storage, 0, shape, strides)


_template_storage = None


def _remember(key, value):
    if len(_geometries) >= GEOMETRY_CACHE_SIZE:
        _geometries.clear()       # a new working set: rebuilt call by call
    _geometries[key] = value
    # The fast paths' last hits hold only what _geometries holds.
    _fast.forget()
    _strict.forget()


def _forget_geometries():
    """Forget every remembered geometry: the next call of each goes the careful way."""
    _geometries.clear()
    _fast.forget()
    _strict.forget()


def _is_lazy(tensor):
    """True if ``tensor``'s values are not its memory (a lazy negation or conjugation, zeros)."""
    return tensor.is_neg() or tensor.is_conj() or tensor._is_zerotensor()


def _kernel_or_fallback_cold(fallback, key, found, grad_output, output_size, input_size,
                             align_corners, scales_d, scales_h, scales_w):
    """The backward where the fast path cannot finish a call.

    ``found`` is what the look-up of ``key`` found.  A first call (or one
    whose addresses its geometry cannot take) goes the careful way, which
    remembers the geometry.  A geometry the contract refuses goes to
    PyTorch's kernel, which computes it or raises its own error; only a
    size past the contract's limits is refused with its 161002 instead when
    ``fallback`` is False (the drop-in's kernels, which allocate nothing
    PyTorch would try to; ``enable()``'s take every call PyTorch takes).
    """
    if found is _REFUSED and fallback:
        _calls["fallback"] += 1
        return _pytorch_kernel(grad_output, output_size, input_size, align_corners,
                               scales_d, scales_h, scales_w)
    try:
        grad_input = _run(grad_output, output_size, input_size, align_corners,
                          _scales(scales_d, scales_h, scales_w),
                          _memory_format(grad_output), None, key)
    except (InvalidArgumentError, NullArgumentError) as refusal:
        if isinstance(refusal, LimitError) and not fallback:
            raise
        # Calls PyTorch accepts but this library's contract does not (explicit
        # scales inconsistent with the sizes, sizes past the contract's
        # limits) get PyTorch's own kernel, through the out= overload, which
        # enable() leaves alone; calls PyTorch refuses get PyTorch's error.
        _calls["fallback"] += 1
        return _pytorch_kernel(grad_output, output_size, input_size, align_corners,
                               scales_d, scales_h, scales_w)
    _calls["kernel"] += 1
    return grad_input


def _pytorch_result(source, shape):
    """A fresh tensor of ``shape`` laid out as PyTorch's kernel lays out its result for ``source``.

    The result's strides are remembered by the source's shape and strides,
    so a geometry handed to PyTorch again -- every call after
    :func:`disable`, a refused geometry -- allocates by
    ``new_empty_strided``, which costs less than ``torch.empty`` with a
    memory format.
    """
    key = (source.shape, source.stride(), shape)
    strides = _pytorch_layouts.get(key)
    if strides is not None:
        return source.new_empty_strided(shape, strides)
    result = torch.empty(shape, dtype=source.dtype, device=source.device,
                         memory_format=_memory_format(source))
    if len(_pytorch_layouts) >= GEOMETRY_CACHE_SIZE:
        _pytorch_layouts.clear()
    _pytorch_layouts[key] = result.stride()
    return result


# PyTorch's kernels through their out= overloads, which the override leaves
# alone, by the cheapest calls there are: the forward's Python binding (what
# F.interpolate calls), the backward's operator without OpOverload's frame.
_forward_out = torch._C._nn.upsample_trilinear3d
_backward_out = getattr(torch.ops.aten.upsample_trilinear3d_backward.grad_input, "_op",
                        torch.ops.aten.upsample_trilinear3d_backward.grad_input)


def _pytorch_kernel(grad_output, output_size, input_size, align_corners, scales_d, scales_h,
                    scales_w):
    """PyTorch's own CPU kernel, through the ``out=`` overload that the override leaves alone."""
    grad_input = _pytorch_result(grad_output, tuple(input_size))
    return _backward_out(grad_output, output_size, input_size, align_corners, scales_d,
                         scales_h, scales_w, grad_input=grad_input)


def _forward_cold(fallback, key, found, x, output_size, align_corners, scales_d, scales_h,
                  scales_w):
    """The forward where the fast path cannot finish a call.

    As :func:`_kernel_or_fallback_cold`, for ``aten::upsample_trilinear3d``.
    """
    if found is _REFUSED and fallback:
        _calls["forward_fallback"] += 1
        return _pytorch_forward(x, output_size, align_corners, scales_d, scales_h, scales_w)
    try:
        out = _run_forward(x, output_size, align_corners,
                           _scales(scales_d, scales_h, scales_w), None, key)
    except (InvalidArgumentError, NullArgumentError) as refusal:
        if isinstance(refusal, LimitError) and not fallback:
            raise
        _calls["forward_fallback"] += 1
        return _pytorch_forward(x, output_size, align_corners, scales_d, scales_h, scales_w)
    _calls["forward"] += 1
    return out


# The CPU kernels as the operators' arguments take them: this library's
# kernel (the remembered geometry, or the cold paths above).  enable()'s
# hand the calls this library's contract refuses to PyTorch's kernel; the
# drop-in's (``_strict``) refuse them.
_fast = _torch_fast.FastPath(_geometries, _calls, _native.effective_n_threads,
                             _dispatch.kernel_module, functools.partial(_forward_cold, True),
                             functools.partial(_kernel_or_fallback_cold, True))
_strict = _torch_fast.FastPath(_geometries, _calls, _native.effective_n_threads,
                               _dispatch.kernel_module, functools.partial(_forward_cold, False),
                               functools.partial(_kernel_or_fallback_cold, False))
_forward_or_fallback = _fast.forward
_kernel_or_fallback = _fast.backward
_forward_kernel = _strict.forward
_backward_kernel = _strict.backward


def _pytorch_forward(x, output_size, align_corners, scales_d, scales_h, scales_w):
    """PyTorch's own CPU forward, through the ``out=`` overload that the override leaves alone."""
    if x.dim() == 5:
        out = _pytorch_result(x, (x.shape[0], x.shape[1], *output_size))
    else:
        # Not 5-D: PyTorch's kernel raises its own error before it looks at out.
        out = torch.empty(0, dtype=x.dtype, device=x.device)
    return _forward_out(x, output_size, align_corners, scales_d, scales_h, scales_w, out=out)


def _aten_forward(x, output_size, align_corners, scales_d=None, scales_h=None, scales_w=None):
    # The CPU kernel of aten::upsample_trilinear3d from the first enable() on:
    # _switched_forward, one call frame fewer on the path of every call, and
    # the thread-local capture flag read only while some thread captures.
    if _capturing and _capture.on:
        raise _Captured(output_size, align_corners, (scales_d, scales_h, scales_w))
    if _active:
        return _forward_or_fallback(x, output_size, align_corners, scales_d, scales_h,
                                    scales_w)
    return _pytorch_forward(x, output_size, align_corners, scales_d, scales_h, scales_w)


def _switched_forward(x, output_size, align_corners, scales_d, scales_h, scales_w):
    """The forward as the switch says: this library's while enabled, else PyTorch's."""
    if not _active:
        return _pytorch_forward(x, output_size, align_corners, scales_d, scales_h, scales_w)
    return _forward_or_fallback(x, output_size, align_corners, scales_d, scales_h, scales_w)


def _aten_kernel(grad_output, output_size, input_size, align_corners, scales_d=None,
                 scales_h=None, scales_w=None):
    """The backward as the switch says; the CPU kernel of ``aten::upsample_trilinear3d_backward``."""
    if not _active:
        return _pytorch_kernel(grad_output, output_size, input_size, align_corners,
                               scales_d, scales_h, scales_w)
    return _kernel_or_fallback(grad_output, output_size, input_size, align_corners,
                               scales_d, scales_h, scales_w)


# -- the custom operators, defined -------------------------------------------------
#
# After the kernels they run: the CPU kernel of each, and PyTorch's operator
# for tensors on other devices.

# The drop-in's pair: this library's kernels whatever the switch says.
_forward_formula, _backward_formula = _adjoints("upsample_trilinear3d",
                                                "upsample_trilinear3d_backward")
_forward_op = _define("upsample_trilinear3d", _FORWARD_SCHEMA, _forward_kernel,
                      torch.ops.aten.upsample_trilinear3d, _forward_op_fake, _forward_formula,
                      _forward_op_setup)
_backward_op = _define("upsample_trilinear3d_backward", _BACKWARD_SCHEMA, _backward_kernel,
                       torch.ops.aten.upsample_trilinear3d_backward, _backward_op_fake,
                       _backward_formula, _backward_op_setup)
torch.library.register_vmap("trilinear_bwd::upsample_trilinear3d", _forward_op_vmap)
torch.library.register_vmap("trilinear_bwd::upsample_trilinear3d_backward", _backward_op_vmap)

# enable()'s pair in compiled graphs: as the switch says when the code runs,
# like the registered aten kernels -- this library's kernel while enabled,
# PyTorch's after disable().
_enabled_forward_formula, _enabled_backward_formula = _adjoints(
    "enabled_upsample_trilinear3d", "enabled_upsample_trilinear3d_backward")
_enabled_forward_op = _define("enabled_upsample_trilinear3d", _FORWARD_SCHEMA,
                              _switched_forward, torch.ops.aten.upsample_trilinear3d,
                              _forward_op_fake, _enabled_forward_formula, _forward_op_setup)
_enabled_backward_op = _define("enabled_upsample_trilinear3d_backward", _BACKWARD_SCHEMA,
                               _aten_kernel, torch.ops.aten.upsample_trilinear3d_backward,
                               _backward_op_fake, _enabled_backward_formula,
                               _backward_op_setup)


class _Registration:
    """The aten CPU kernels' registration, made at the first :func:`enable`, kept for good.

    One object from import on (``_library``), so that code holding it sees
    the registration whenever it is made; ``lib`` is the
    ``torch.library.Library`` once registered, None before.  Registering
    at import would put a Python hop in front of every CPU
    ``F.interpolate(mode="trilinear")`` of the process, used or not
    (``docs/torch.md``, "Importing costs nothing").
    """

    lib = None

    def ensure(self):
        """Register the kernels unless done; call with ``_lock`` held."""
        if self.lib is not None:
            return
        _torch_compile.install(is_enabled, _enabled_forward_op, _traced_to_pytorch)
        lib = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            # Overriding an aten kernel is what we mean to do.
            warnings.filterwarnings(
                "ignore", message=r"(?s).*Overriding a previously registered kernel")
            lib.impl("upsample_trilinear3d_backward", _aten_kernel, "CPU")
            lib.impl("upsample_trilinear3d", _aten_forward, "CPU")
        # Kept for the life of the process: destroying it would unregister
        # the kernels while other threads may be in the dispatcher.
        self.lib = lib

    @property
    def registered(self):
        """True once the kernels are registered (never False again)."""
        return self.lib is not None


_library = _Registration()


def _ensure_registered():
    if _library.lib is None:
        with _lock:
            _library.ensure()


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
    The kernels are registered with PyTorch's dispatcher once, at the
    first :func:`enable` (importing ``trilinear_bwd.torch`` registers
    nothing, so PyTorch's calls cost what they did until then), and never
    unregistered (PyTorch cannot change registrations safely while other
    threads use the dispatcher); later :func:`enable` and :func:`disable`
    calls flip a switch that the kernels read, so they are safe from any
    thread at any rate.  While disabled after that, each CPU call is handed
    to PyTorch's own kernel (a Python hop of a few microseconds; results
    identical).

    Under ``torch.compile`` it is served with the ``backend="eager"``,
    ``backend="aot_eager"`` and ``backend="inductor"`` (the default)
    backends, static shapes and ``dynamic=True``: while enabled, the trace
    of ``F.interpolate`` records this library's operators
    (``torch.ops.trilinear_bwd.enabled_upsample_trilinear3d`` and its
    backward) instead of PyTorch's decomposition, and they read the switch
    when the compiled code runs; a call of static shapes with fewer than
    4,096 output elements is traced as PyTorch's code, which is faster there
    (counted in ``call_counts()["traced_to_pytorch"]``).  Dynamo does not
    guard on the switch: a
    frame compiled while disabled keeps PyTorch's code until it is traced
    again (``torch._dynamo.reset()``); the first :func:`enable` of a process
    discards the frames compiled before it.  Enable before compiling
    (``docs/torch.md``, "torch.compile").

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
        _library.ensure()
        if not _active:
            _torch_compile.switched_on()
        _active = True


def disable():
    """Hand ``aten::upsample_trilinear3d`` and its backward on CPU back to PyTorch's own kernels.

    Calling it when not enabled does nothing.
    """
    global _active
    with _lock:
        if _active:
            _torch_compile.switched_off()
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

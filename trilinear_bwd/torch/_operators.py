"""The custom operators: ``torch.ops.trilinear_bwd.*``, each pair with its autograd and vmap rules.

The drop-in's autograd Functions call registered operators rather than
plain Python where a tracer or a transform must see the call, so that
``torch.compile`` (dynamo, AOTAutograd, inductor), ``torch.export`` and the
JIT tracer record each as one opaque node instead of trying to trace the
kernel; the fake implementations give shapes and strides to the tracer.
``enable()`` has a pair of its own for compiled graphs (``_override``),
which read the switch when they run.

They are defined with ``torch.library.Library`` and an Autograd kernel of
their own rather than ``torch.library.custom_op`` and ``register_autograd``,
whose Python wrappers cost more than the kernel of a small call
(``docs/performance.md``, "Compiled models"): a call on plain CPU tensors
that needs no gradient -- every call of compiled code, which runs its
graphs with autograd off -- goes straight to the kernel; a call that needs
one goes through a ``torch.autograd.Function``, and a call under a tracer or
a transform (Python, functorch or other keys below autograd) is
redispatched, so the tracer records the operator.
"""

import torch

from . import _cache, _private, _pytorch
from ._private import DispatchKey, is_dual

__all__ = ["backward_op", "define_pair", "forward_op", "is_dual", "VMAP_RULES"]

_ops = torch.library.Library("trilinear_bwd", "FRAGMENT")
_FORWARD_SCHEMA = ("(Tensor x, SymInt[] output_size, bool align_corners, float? scales_d, "
                   "float? scales_h, float? scales_w) -> Tensor")
_BACKWARD_SCHEMA = ("(Tensor grad_output, SymInt[] output_size, SymInt[] input_size, "
                    "bool align_corners, float? scales_d, float? scales_h, float? scales_w) "
                    "-> Tensor")
_BELOW_AUTOGRAD = _private.after_autograd_keyset


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
        if (tensor.requires_grad and torch.is_grad_enabled()) or is_dual(tensor):
            return Function.apply(below, tensor, *args)
        if below.highestPriorityTypeId() == DispatchKey.CPU:
            return kernel(tensor, *args)           # a plain CPU tensor: nothing between
        return op.redispatch(below, tensor, *args)

    _ops.impl(name, autograd_kernel, "Autograd", with_keyset=True)
    return op


def _fake(tensor, shape):
    """A result of ``shape`` as the operators' CPU kernels lay it out, for the tracer."""
    return torch.empty(shape, dtype=tensor.dtype, device=tensor.device,
                       memory_format=_pytorch.memory_format(tensor))


def _forward_fake(x, output_size, align_corners, scales_d, scales_h, scales_w):
    return _fake(x, tuple(x.shape[:2]) + tuple(output_size))


def _backward_fake(grad_output, output_size, input_size, align_corners, scales_d, scales_h,
                   scales_w):
    return _fake(grad_output, tuple(input_size))


def _forward_setup(ctx, inputs, output):
    x, ctx.output_size, ctx.align_corners, *ctx.scales = inputs
    ctx.input_size = tuple(x.shape)


def _backward_setup(ctx, inputs, output):
    _, ctx.output_size, _, ctx.align_corners, *ctx.scales = inputs


def define_pair(prefix, forward_kernel, backward_kernel):
    """Define ``trilinear_bwd::{prefix}upsample_trilinear3d`` and its backward.

    Each operator is the other's derivative: the backward is linear in
    ``grad_output`` and its adjoint is the forward (reverse mode, double
    reverse and forward mode: each is linear, so its forward-mode
    derivative is itself applied to the tangent).

    Parameters
    ----------
    prefix : str
        ``""`` for the drop-in's pair, ``"enabled_"`` for ``enable()``'s.
    forward_kernel, backward_kernel : callable
        The CPU kernels, taking the schemas' arguments.

    Returns
    -------
    forward, backward : torch._ops.OpOverload
    """
    forward_name = prefix + "upsample_trilinear3d"
    backward_name = forward_name + "_backward"

    def forward_formula(ctx, grad_output):
        grad_input = getattr(torch.ops.trilinear_bwd, backward_name)(
            grad_output, ctx.output_size, ctx.input_size, ctx.align_corners, *ctx.scales)
        return grad_input, None, None, None, None, None

    def backward_formula(ctx, grad_grad_input):
        grad_grad_output = getattr(torch.ops.trilinear_bwd, forward_name)(
            grad_grad_input, ctx.output_size, ctx.align_corners, *ctx.scales)
        return grad_grad_output, None, None, None, None, None, None

    forward = _define(forward_name, _FORWARD_SCHEMA, forward_kernel,
                      torch.ops.aten.upsample_trilinear3d, _forward_fake, forward_formula,
                      _forward_setup)
    backward = _define(backward_name, _BACKWARD_SCHEMA, backward_kernel,
                       torch.ops.aten.upsample_trilinear3d_backward, _backward_fake,
                       backward_formula, _backward_setup)
    return forward, backward


# -- torch.func: the drop-in's operators under vmap -------------------------------
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


def _forward_vmap(info, in_dims, x, output_size, align_corners, scales_d, scales_h, scales_w):
    if in_dims[0] is None:
        return forward_op(x, output_size, align_corners, scales_d, scales_h, scales_w), None
    flat, batch = _fold(x, in_dims[0])
    y = forward_op(flat, output_size, align_corners, scales_d, scales_h, scales_w)
    return _unfold(y, batch), 0


def _backward_vmap(info, in_dims, grad_output, output_size, input_size, align_corners,
                   scales_d, scales_h, scales_w):
    if in_dims[0] is None:
        return backward_op(grad_output, output_size, input_size, align_corners, scales_d,
                           scales_h, scales_w), None
    flat, batch = _fold(grad_output, in_dims[0])
    input_size = [flat.shape[0]] + list(input_size)[1:]
    grad_input = backward_op(flat, output_size, input_size, align_corners, scales_d,
                             scales_h, scales_w)
    return _unfold(grad_input, batch), 0


# torch.library.register_vmap is PyTorch 2.5's: without it, vmap runs the
# operators through functorch's generic fallback, one sample at a time
# (correct, slower: a call per sample instead of one call for the batch).
VMAP_RULES = hasattr(torch.library, "register_vmap")


def _register():
    """Define the drop-in's pair and its vmap rules; returns ``(forward_op, backward_op)``."""
    # The drop-in's pair: this library's kernels whatever enable()'s switch says.
    forward, backward = define_pair("", _cache.for_drop_in.forward,
                                    _cache.for_drop_in.backward)
    if VMAP_RULES:
        # On _ops, so that unregister() takes them back with the operators.
        torch.library.register_vmap("trilinear_bwd::upsample_trilinear3d", _forward_vmap,
                                    lib=_ops)
        torch.library.register_vmap("trilinear_bwd::upsample_trilinear3d_backward",
                                    _backward_vmap, lib=_ops)
    return forward, backward


def unregister():
    """Undo every registration of the ``trilinear_bwd`` operators (a failed import's cleanup)."""
    _private.destroy(_ops)


try:
    forward_op, backward_op = _register()
except BaseException:
    # This module leaves sys.modules with the exception: undo what it
    # registered now, or a later import would meet it ("... multiple times").
    unregister()
    raise

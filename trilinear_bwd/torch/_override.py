"""``enable()``: this library's kernels as aten's CPU kernels, behind a switch; the capture.

Registering or destroying a ``torch.library`` kernel while another thread
is inside the dispatcher is not safe in PyTorch (a crash, or an internal
assertion, within seconds of toggling under load).  So the kernels are
registered once, at the first :func:`enable` (or the first drop-in call that
needs ``F.interpolate``'s arguments captured), for the life of the process,
and :func:`enable` / :func:`disable` only flip the switch they read: off,
they hand every call to PyTorch's own kernel.  Before that first call
nothing of this package stands in front of PyTorch's kernels.

The same CPU kernel of ``aten::upsample_trilinear3d`` serves the drop-in's
argument handling (:func:`captured_arguments`): while a thread captures,
``F.interpolate``'s call of it computes nothing and hands back the sizes
and scales it was given.
"""

import contextlib
import threading
import warnings

import torch
import torch.nn.functional as F

from .._core import _fork
from . import _cache, _compile, _operators, _pytorch

_lock = threading.Lock()
_fork.renew(globals(), "_lock", threading.Lock)
_active = False


# -- the capture of F.interpolate's arguments ------------------------------------

class _Captured(Exception):
    """What ``F.interpolate`` handed ``aten::upsample_trilinear3d``, raised by the CPU kernel."""

    def __init__(self, output_size, align_corners, scales):
        super().__init__("captured")
        self.output_size = tuple(output_size)
        self.align_corners = align_corners
        self.scales = scales


# While set in a thread, the CPU kernel of aten::upsample_trilinear3d runs
# nothing: it raises _Captured with its arguments (captured_arguments).
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


def captured_arguments(x, size, scale_factor, align_corners, recompute_scale_factor):
    """``(output_size, align_corners, scales)`` as ``F.interpolate`` hands them to aten.

    ``F.interpolate`` runs its own argument handling, and its call of
    ``aten::upsample_trilinear3d`` is caught by this module's CPU kernel
    before anything is computed: every call it refuses is refused with its
    own exception.
    """
    ensure_registered()
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


# -- the kernels behind the switch ---------------------------------------------------

def _switched_forward(x, output_size, align_corners, scales_d=None, scales_h=None,
                      scales_w=None):
    """The forward as the switch says; the CPU kernel of ``aten::upsample_trilinear3d``.

    This library's while enabled, else PyTorch's; while the calling thread
    captures (:func:`captured_arguments`), nothing: it raises the arguments.
    """
    # The thread-local flag is read only while some thread captures (a
    # global costs less to read on every call).
    if _capturing and _capture.on:
        raise _Captured(output_size, align_corners, (scales_d, scales_h, scales_w))
    if not _active:
        return _pytorch.kernel(x, output_size, None, align_corners, scales_d, scales_h,
                               scales_w)
    return _forward(x, output_size, align_corners, scales_d, scales_h, scales_w)


def _switched_backward(grad_output, output_size, input_size, align_corners, scales_d=None,
                       scales_h=None, scales_w=None):
    """The backward as the switch says; the CPU kernel of ``aten::upsample_trilinear3d_backward``."""
    if not _active:
        return _pytorch.kernel(grad_output, output_size, input_size, align_corners, scales_d,
                               scales_h, scales_w)
    return _backward(grad_output, output_size, input_size, align_corners, scales_d, scales_h,
                     scales_w)


_forward = _cache.for_enable.forward
_backward = _cache.for_enable.backward
# enable()'s pair in compiled graphs: as the switch says when the code runs,
# like the registered aten kernels.
enabled_forward_op, enabled_backward_op = _operators.define_pair(
    "enabled_", _switched_forward, _switched_backward)


def _traced_to_pytorch():
    _cache.calls["traced_to_pytorch"] += 1


class _Registration:
    """The aten CPU kernels' registration, made at the first :func:`enable`, kept for good.

    One object from import on (``_library``), so that code holding it sees
    the registration whenever it is made; ``lib`` is the
    ``torch.library.Library`` once registered, None before.  Registering
    at import would put a Python hop in front of every CPU
    ``F.interpolate(mode="trilinear")`` of the process, used or not
    (``docs/design.md``, "Importing costs nothing").
    """

    lib = None

    def ensure(self):
        """Register the kernels unless done; call with ``_lock`` held."""
        if self.lib is not None:
            return
        _compile.install(is_enabled, enabled_forward_op, _traced_to_pytorch)
        lib = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            # Overriding an aten kernel is what we mean to do.
            warnings.filterwarnings(
                "ignore", message=r"(?s).*Overriding a previously registered kernel")
            lib.impl("upsample_trilinear3d_backward", _switched_backward, "CPU")
            lib.impl("upsample_trilinear3d", _switched_forward, "CPU")
        # Kept for the life of the process: destroying it would unregister
        # the kernels while other threads may be in the dispatcher.
        self.lib = lib

    @property
    def registered(self):
        """True once the kernels are registered (never False again)."""
        return self.lib is not None


_library = _Registration()


def ensure_registered():
    """Register the aten kernels unless done (the switch stays as it is)."""
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
            _compile.switched_on()
        _active = True


def disable():
    """Hand ``aten::upsample_trilinear3d`` and its backward on CPU back to PyTorch's own kernels.

    Calling it when not enabled does nothing.
    """
    global _active
    with _lock:
        if _active:
            _compile.switched_off()
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

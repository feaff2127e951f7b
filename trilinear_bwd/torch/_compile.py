"""``torch.compile`` under ``enable()``: the hook that keeps ``F.interpolate`` off PyTorch's decomposition.

``F.interpolate(mode="trilinear")`` calls ``aten.upsample_trilinear3d.vec``.
While dynamo and AOTAutograd trace (``aot_eager``, ``inductor`` and every
backend built on AOTAutograd), PyTorch's Python dispatcher is on, and the
Python implementations PyTorch gives ``.vec`` for the
``CompositeImplicitAutograd`` and ``Autograd`` keys
(``torch/_decomp/decompositions.py``) turn the call into index arithmetic
before autograd or the dispatcher's CPU kernel is reached: the compiled
backward is derived from that arithmetic and never calls
``upsample_trilinear3d_backward``.

:func:`install` puts a hook in both entries' place, once, at the first
``enable()``.  At trace time, with ``enable()`` in effect and a 5-D CPU
input, it computes the output size as PyTorch's decomposition does and
records this library's switched custom operator (``emit``); otherwise it
calls PyTorch's own entry, so graphs traced while disabled are PyTorch's.
The switched operators read the switch again when the compiled code runs,
exactly like the registered aten kernels: a graph traced while enabled runs
PyTorch's eager kernel after ``disable()``.

Dynamo does not guard compiled frames on the switch, so a frame keeps the
state it was traced in: one traced while disabled keeps PyTorch's
decomposition after ``enable()``, until ``torch._dynamo.reset()`` (or a
recompile for other reasons) traces it again.  Frames compiled before the
first ``enable()`` of the process cannot have met the hook, so the first
``enable()`` discards dynamo's compiled frames (if dynamo was ever
imported); later toggles discard nothing, so code that toggles the switch
around compiled calls does not recompile at each toggle.

The AOTAutograd cache keys on dynamo's graph, which is the same in both
states, so while enabled a marker is appended to
``torch.compiler.config.cache_key_tag`` (PyTorch's documented way to
separate cache entries) and removed again on ``disable()``: a graph cached
by a process that never enabled is not loaded by one that did.

``docs/torch.md``, "torch.compile", says which backends and PyTorch versions
are served; ``tests/test_torch_compile.py`` fails if a PyTorch upgrade routes
``F.interpolate`` around the hook.
"""

import math

import torch
from ._private import DispatchKey
from . import _private

# Appended to torch.compiler.config.cache_key_tag while enable() is in effect.
CACHE_TAG = "+trilinear_bwd.enable"

# A call of static shapes whose output has fewer elements than this is
# traced as PyTorch's decomposition even while enabled: inductor's fused loop
# for it costs less than the two operator calls (docs/performance.md,
# "Compiled models", the tiny layers' sweep; docs/torch.md says what it means
# for the numerics).  Symbolic shapes (dynamic=True) always get the operators:
# deciding on a symbolic size would add a guard to the graph.
PYTORCH_BELOW = 4096

_KEYS = (DispatchKey.CompositeImplicitAutograd, DispatchKey.Autograd)
_VEC = torch.ops.aten.upsample_trilinear3d.vec

# PyTorch's own entries, replaced by the hook; None until install().
_pytorch_entries = None
# True until the first switch-on: frames compiled before it never met the hook.
_never_on = True


def _output_size(input, output_size, scale_factors):
    return _private.upsample_compute_output_size()(input.size(), output_size, scale_factors)


def tiny(input_shape, output_size):
    """Whether a traced call is left to PyTorch's decomposition by :data:`PYTORCH_BELOW`.

    Parameters
    ----------
    input_shape : sequence of int or SymInt
        The 5-D input's shape.
    output_size : sequence of int or SymInt
        ``(oD, oH, oW)``.

    Returns
    -------
    bool
        True only for concrete sizes whose output has fewer than
        :data:`PYTORCH_BELOW` elements; never for a symbolic one.
    """
    dims = (*input_shape[:2], *output_size)
    if not all(type(d) is int for d in dims):
        return False
    return math.prod(dims) < PYTORCH_BELOW


def _hook(key, is_enabled, emit, handed):
    pytorch_entry = _pytorch_entries[key]

    def upsample_trilinear3d_vec(input, output_size, align_corners, scale_factors):
        if not is_enabled() or input.device.type != "cpu" or input.dim() != 5:
            return pytorch_entry(input, output_size, align_corners, scale_factors)
        size = _output_size(input, output_size, scale_factors)
        if tiny(input.shape, size):
            handed()
            return pytorch_entry(input, output_size, align_corners, scale_factors)
        scales = list(scale_factors) if scale_factors else [None] * 3
        return emit(input, size, align_corners, *scales)

    upsample_trilinear3d_vec.__qualname__ = f"upsample_trilinear3d_vec[{key.name}]"
    return upsample_trilinear3d_vec


def install(is_enabled, emit, handed):
    """Put the hook in place of PyTorch's Python entries of ``upsample_trilinear3d.vec``, once.

    Parameters
    ----------
    is_enabled : callable
        Returns the switch at trace time.
    emit : callable
        ``emit(input, output_size, align_corners, scales_d, scales_h,
        scales_w)``: the call recorded instead of PyTorch's decomposition.
    handed : callable
        Called (no arguments) each time an enabled trace leaves a call to
        PyTorch's decomposition because it is :func:`tiny`.

    Returns
    -------
    bool
        True if the hook is in place; False if this PyTorch has no such
        entries (then compiled code keeps PyTorch's path, and the tests
        that compile under ``enable()`` fail).
    """
    global _pytorch_entries
    if _pytorch_entries is not None:
        return True
    kernels = getattr(_VEC, "py_kernels", None)
    if (kernels is None or any(key not in kernels for key in _KEYS)
            or _private.upsample_compute_output_size() is None
            or not _private.clear_dispatch_cache(_VEC)):
        return False
    _pytorch_entries = {key: kernels[key] for key in _KEYS}
    for key in _KEYS:
        kernels[key] = _hook(key, is_enabled, emit, handed)
    _private.clear_dispatch_cache(_VEC)   # what OpOverload.py_impl does after a change
    return True


def switched_on():
    """Make compiled code follow the switch, just turned on."""
    global _never_on
    if _never_on and _private.dynamo_loaded():
        # Frames compiled before may hold PyTorch's decomposition and no
        # guard on the switch; a process that never compiled has none.
        torch.compiler.reset()
    _never_on = False
    config = _compiler_config()
    if config is not None and not config.cache_key_tag.endswith(CACHE_TAG):
        config.cache_key_tag += CACHE_TAG


def switched_off():
    """Give compiled code traced from now on PyTorch's cache entries again."""
    config = _compiler_config()
    if config is not None and config.cache_key_tag.endswith(CACHE_TAG):
        config.cache_key_tag = config.cache_key_tag[:-len(CACHE_TAG)]


def _compiler_config():
    # torch.compiler.config.cache_key_tag is newer than the oldest PyTorch
    # this package supports; without it there is no tag to separate by.
    config = getattr(torch.compiler, "config", None)
    return config if isinstance(getattr(config, "cache_key_tag", None), str) else None

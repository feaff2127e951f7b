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
this package does, on first use, and registers nothing in front of
PyTorch's kernels until the first :func:`enable`.  Tensors are passed to the
kernel without a copy (DLPack on a geometry's first call, raw data pointers
on the calls after it), and results are written straight into new tensors
from PyTorch's allocator.

The package, one job a module: ``_dropin`` (the drop-in and its autograd
Functions), ``_backward`` (aten's backward signature), ``_operators`` (the
custom operators with their autograd and vmap rules), ``_override`` (the
aten override, its switch and the capture of ``F.interpolate``'s
arguments), ``_cache`` (the careful way, the remembered geometries and the
fast paths), ``_fast`` (the fast path, compiled), ``_pytorch`` (PyTorch's
own layout rule and kernels), ``_arrays`` (tensors as arrays of the core)
and ``_compile`` (``torch.compile`` under :func:`enable`); every run goes
through the core's one seam, ``trilinear_bwd._core._runner`` (``docs/design.md``).

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

import sys as _sys

try:
    from . import _cache
    from ._backward import upsample_trilinear3d_backward
    from ._dropin import upsample_trilinear3d
    from ._override import disable, enable, enabled, is_enabled
except BaseException:
    # Leave nothing half registered: the operators registered so far go
    # (every import-time registration is on _operators' library), and so do
    # the submodules imported, so that a later import starts afresh instead
    # of failing on "Tried to register an operator ... multiple times".
    _operators = _sys.modules.get(__name__ + "._operators")
    if _operators is not None and hasattr(_operators, "unregister"):
        _operators.unregister()
    for _name in [m for m in _sys.modules if m.startswith(__name__ + ".")]:
        # The compiled _fast holds no registration and stays (an extension
        # module is not re-run by a second import anyway).
        if not _name.endswith("._fast"):
            del _sys.modules[_name]
    raise

__all__ = [
    "call_counts",
    "disable",
    "enable",
    "enabled",
    "is_enabled",
    "upsample_trilinear3d",
    "upsample_trilinear3d_backward",
]


def call_counts():
    """Count the CPU calls this package has handled so far.

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
    return dict(_cache.calls)

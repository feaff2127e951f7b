"""trilinear_bwd: 3-D trilinear upsampling's backward (and forward), fast and deterministic on CPUs.

Computes ``UpsampleTrilinear3dBackward`` -- given the gradient of a trilinearly
upsampled 5-D volume, the gradient of the volume -- as PyTorch's
``aten::upsample_trilinear3d_backward`` and Ascend CANN's
``aclnnUpsampleTrilinear3dBackward`` do, with Cython + OpenMP kernels; and the
forward, ``UpsampleTrilinear3d`` (:func:`upsample_trilinear3d`,
:func:`get_forward_workspace_size`), with the same kernel and numerics.

Two ways to call it:

>>> import numpy as np, trilinear_bwd as tb
>>> g = np.ones((1, 2, 8, 8, 8), dtype=np.float32)
>>> gi = tb.upsample_trilinear3d_backward(g, (1, 2, 4, 4, 4))          # one call
>>> ws_size, ex = tb.get_workspace_size(g, (8, 8, 8), (1, 2, 4, 4, 4),
...                                     False, 0.0, 0.0, 0.0, np.empty_like(gi))
>>> tb.execute(tb.alloc_workspace(ws_size), ws_size, ex)              # two phases

``trilinear_bwd.aclnn`` offers the same under CANN's names, returning status codes.
"""

try:
    from ._kernels import _native  # noqa: F401 - the first compiled module
except ImportError as exc:  # pragma: no cover - depends on how the package was installed
    import os as _os

    raise ImportError(
        f"trilinear_bwd's compiled extensions are missing from {_os.path.dirname(__file__)}. "
        "This is usually the source tree shadowing an installed package: build in place "
        "with `pip install -e .`, or run from another directory."
    ) from exc

from ._api import upsample_trilinear3d, upsample_trilinear3d_backward
from ._executor import (
    Executor,
    alloc_workspace,
    execute,
    get_forward_workspace_size,
    get_workspace_size,
)
from ._info import show_config
from . import pool
from ._core import _status
from ._core._status import *  # noqa: F403 -- the status codes (_status.__all__)
from ._core._status import (
    AclnnError,
    AllocationError,
    ExecutionError,
    InternalError,
    InvalidArgumentError,
    NullArgumentError,
)
from ._stream import Stream
from ._version import __version__

__all__ = [
    *_status.__all__,
    "AclnnError",
    "AllocationError",
    "ExecutionError",
    "Executor",
    "InternalError",
    "InvalidArgumentError",
    "NullArgumentError",
    "Stream",
    "__version__",
    "alloc_workspace",
    "execute",
    "get_forward_workspace_size",
    "get_workspace_size",
    "pool",
    "show_config",
    "upsample_trilinear3d",
    "upsample_trilinear3d_backward",
]


def __getattr__(name):
    # Submodules with optional or heavier dependencies load on first use.
    if name in ("aclnn", "reference", "torch", "dask", "bench"):
        from ._core import _fork

        return _fork.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

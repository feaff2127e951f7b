"""Pick the kernel variant for this processor, once, at first use.

``TRILINEAR_BWD_KERNEL=baseline`` (or ``avx2``, ``avx512``) overrides the
choice, for tests and for measuring one variant against another; a variant
not available here gives a ``RuntimeWarning`` and the fastest one runs.
"""

import contextlib

from . import _environ, _fork
from .._kernels import _native

# Fastest first; each but the baseline needs the processor (and OS) support
# its test reports.
VARIANTS = ("avx512", "avx2", "baseline")
_SUPPORTED = {
    "avx512": _native.cpu_has_avx512,
    "avx2": _native.cpu_has_avx2_f16c,
    "baseline": lambda: True,
}
_chosen = None


def available_variants():
    """Return the names of the variants built and runnable on this processor.

    Returns
    -------
    list of str
        Fastest first; ``"baseline"`` is always present.
    """
    names = []
    for name in VARIANTS:
        if not _SUPPORTED[name]():
            continue
        try:
            _fork.import_module(f"trilinear_bwd._kernels.{name}")
        except ImportError:
            continue
        names.append(name)
    return names


def kernel_module(name=None):
    """Return the kernel module ``name``, or the one chosen for this processor.

    Parameters
    ----------
    name : {"avx512", "avx2", "baseline"} or None
        None picks ``$TRILINEAR_BWD_KERNEL`` if set to an available
        variant, else (with a ``RuntimeWarning`` if it names another) the
        fastest variant this processor runs.
    """
    global _chosen
    if name is not None:
        return _fork.import_module(f"trilinear_bwd._kernels.{name}")
    if _chosen is None:
        available = available_variants()
        wanted = _environ.read_choice(_environ.KERNEL, available, available[0])
        _chosen = _fork.import_module(f"trilinear_bwd._kernels.{wanted}")
    return _chosen


def active_variant():
    """Return the name of the variant :func:`kernel_module` uses."""
    return kernel_module().__name__.rsplit(".", 1)[-1]


@contextlib.contextmanager
def forced(name):
    """Within the block, :func:`kernel_module` returns variant ``name``.

    For measuring variants side by side in one process (the benchmark):
    executors take their kernel when they are created, so an executor made
    inside the block keeps variant ``name`` after it.  Not thread-safe.
    """
    global _chosen
    saved = _chosen
    _chosen = kernel_module(name)
    try:
        yield
    finally:
        _chosen = saved

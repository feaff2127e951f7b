"""Build and runtime facts, for bug reports and ``python -m trilinear_bwd --info``."""

import platform
import sys


def config():
    """Return the facts :func:`show_config` prints, as a dict.

    Returns
    -------
    dict
        ``version``, ``python``, ``numpy``, ``platform``, ``openmp`` (compiled
        in or not, and the ``_OPENMP`` version), ``openmp_runtime`` (the
        library threadpoolctl finds, if it is installed), ``default_threads``,
        ``kernel_variants`` (built and runnable here) and ``active_variant``.
    """
    import numpy as np

    from . import _dispatch, _openmp_helpers
    from ._version import __version__

    info = {
        "version": __version__,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "platform": f"{platform.system()} {platform.machine()}",
        "openmp": _openmp_helpers.openmp_enabled(),
        "openmp_version": _openmp_helpers.openmp_version(),
        "openmp_runtime": _openmp_runtime(),
        "default_threads": _openmp_helpers.effective_n_threads(None),
        "processors": _openmp_helpers.num_procs(),
        "kernel_variants": _dispatch.available_variants(),
        "active_variant": _dispatch.active_variant(),
    }
    return info


def _openmp_runtime():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (install threadpoolctl to see it)"
    from . import _kernels_baseline  # noqa: F401 - make sure the runtime is loaded

    pools = [p for p in threadpool_info() if p.get("user_api") == "openmp"]
    if not pools:
        return "none found"
    return ", ".join(f"{p['internal_api']} {p.get('version') or ''} ({p['filepath']})".replace("  ", " ")
                     for p in pools)


def show_config(file=None):
    """Print the version, OpenMP support, thread count and active kernel variant.

    Parameters
    ----------
    file : file-like, optional
        Where to print; standard output by default.
    """
    for key, value in config().items():
        print(f"{key:>16}: {value}", file=file or sys.stdout)

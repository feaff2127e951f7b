"""Build and runtime facts, for bug reports and ``python -m trilinear_bwd --info``.

Everything here is computed on demand and imports nothing heavy: threadpoolctl
is used when it is installed, otherwise the OpenMP runtime is found by asking
the operating system which libraries the process has loaded.
"""

import os
import sys

# The OpenMP runtimes a build can link: GNU (libgomp), LLVM (libomp), Intel
# (libiomp5) and Microsoft's (vcomp).  A pattern, compiled when first needed.
_RUNTIME_PATTERN = r"(?:^|[/\\])(lib(?:g|i|)omp[^/\\]*|vcomp[^/\\]*\.dll)$"
_OPENMP_VERSIONS = {200505: "2.5", 200805: "3.0", 201107: "3.1", 201307: "4.0",
                    201511: "4.5", 201811: "5.0", 202011: "5.1", 202111: "5.2"}


def config():
    """Return the facts :func:`show_config` prints, as a dict.

    Returns
    -------
    dict
        ``version``, ``python``, ``numpy``, ``platform``; ``openmp`` (True if
        the extensions were compiled with OpenMP) and ``openmp_version`` (the
        ``_OPENMP`` macro and the specification it names); ``openmp_runtime``
        (the runtime libraries loaded in this process, the package's own
        first); ``default_threads`` (the team size ``num_threads=None`` gives
        now) and ``processors``; ``cpu_avx2_f16c`` and ``cpu_avx512``
        (whether this processor and its OS can run the AVX2 and the AVX-512
        variant); ``kernel_variants`` (the variants built and
        runnable here, fastest first) and ``active_variant`` (the one calls
        use); ``environment`` (the variables that change those choices).
    """
    import platform

    import numpy as np

    from ._core import _dispatch, _threads
    from ._kernels import _native
    from ._version import __version__

    omp_macro = _native.openmp_version()
    env = {name: os.environ[name]
           for name in ("OMP_NUM_THREADS", "OMP_THREAD_LIMIT", "OMP_DYNAMIC",
                        "TRILINEAR_BWD_KERNEL")
           if name in os.environ}
    return {
        "version": __version__,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "platform": f"{platform.system()} {platform.machine()}",
        "openmp": _native.openmp_enabled(),
        "openmp_version": (f"{omp_macro} (OpenMP {_OPENMP_VERSIONS.get(omp_macro, '?')})"
                           if omp_macro else "none (serial build)"),
        "openmp_runtime": openmp_runtimes(),
        "default_threads": _threads.effective(None),
        "processors": _native.num_procs(),
        "cpu_avx2_f16c": _native.cpu_has_avx2_f16c(),
        "cpu_avx512": _native.cpu_has_avx512(),
        "kernel_variants": _dispatch.available_variants(),
        "active_variant": _dispatch.active_variant(),
        "environment": env or "no OMP_* or TRILINEAR_BWD_KERNEL variables set",
    }


def openmp_runtimes():
    """Describe the OpenMP runtime libraries loaded in this process.

    The package's kernels are loaded first, so the runtime they link is among
    the libraries listed.  A runtime bundled in the wheel (under
    ``trilinear_bwd.libs`` or ``.dylibs``) is listed first and marked so.

    Returns
    -------
    str
        One ``"name version (path)"`` entry per runtime, comma-separated;
        ``"none loaded"`` for a serial build, ``"unknown ..."`` where the
        platform cannot be asked.
    """
    from ._kernels import baseline as _kernels_baseline  # noqa: F401 - make sure the runtime is loaded

    try:
        found = _runtimes_threadpoolctl()
    except ImportError:
        found = _runtimes_loaded_libraries()
        if found is None:
            return "unknown (install threadpoolctl to see it)"
    if not found:
        return "none loaded"
    found.sort(key=lambda entry: not _is_bundled(entry[2]))
    return ", ".join(f"{name}{' ' + version if version else ''}"
                     f"{' bundled' if _is_bundled(path) else ''} ({path})"
                     for name, version, path in found)


def _is_bundled(path):
    """True for a library a repaired wheel ships (auditwheel, delvewheel, delocate)."""
    folder = os.path.dirname(path)
    return (os.path.basename(folder) == "trilinear_bwd.libs"
            or folder.replace("\\", "/").endswith("trilinear_bwd/.dylibs"))


def _runtimes_threadpoolctl():
    """[(name, version, path)] of the OpenMP libraries threadpoolctl finds."""
    from threadpoolctl import threadpool_info

    return [(p.get("prefix") or p.get("internal_api", "openmp"), p.get("version") or "",
             p["filepath"])
            for p in threadpool_info() if p.get("user_api") == "openmp"]


def _runtimes_loaded_libraries():
    """[(name, "", path)] of the loaded OpenMP libraries, or None if unknown here."""
    import re

    paths = _loaded_libraries()
    if paths is None:
        return None
    runtime = re.compile(_RUNTIME_PATTERN, re.IGNORECASE)
    found, seen = [], set()
    for path in paths:
        real = os.path.realpath(path)
        if runtime.search(path) and real not in seen:
            seen.add(real)
            # libgomp-a34b3233.so.1.0.0 (a wheel's hashed copy) -> libgomp
            stem = os.path.basename(path).split(".")[0]
            found.append((re.sub(r"-[0-9a-f]{8}$", "", stem), "", path))
    return found


def _loaded_libraries():
    """The paths of the shared libraries this process has loaded, or None."""
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/self/maps") as maps:
                fields = (line.split(maxsplit=5) for line in maps)
                return list(dict.fromkeys(f[5].strip() for f in fields
                                          if len(f) == 6 and f[5].startswith("/")))
        except OSError:
            return None
    import ctypes

    if sys.platform == "darwin":
        libc = ctypes.CDLL(None)
        libc._dyld_image_count.restype = ctypes.c_uint32
        libc._dyld_get_image_name.restype = ctypes.c_char_p
        libc._dyld_get_image_name.argtypes = [ctypes.c_uint32]
        return [libc._dyld_get_image_name(i).decode(errors="replace")
                for i in range(libc._dyld_image_count())]
    if sys.platform == "win32":
        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        kernel32.GetModuleHandleW.restype = ctypes.c_void_p
        kernel32.GetModuleHandleW.argtypes = [ctypes.c_wchar_p]
        kernel32.GetModuleFileNameW.argtypes = [ctypes.c_void_p, ctypes.c_wchar_p,
                                                ctypes.c_uint32]
        paths = []
        for name in ("vcomp140.dll", "libiomp5md.dll", "libomp.dll", "libgomp-1.dll"):
            handle = kernel32.GetModuleHandleW(name)
            if handle:
                buf = ctypes.create_unicode_buffer(1024)
                kernel32.GetModuleFileNameW(handle, buf, 1024)
                paths.append(buf.value or name)
        return paths
    return None


def show_config(file=None):
    """Print the version, OpenMP support and runtime, threads and kernel variants.

    The same as ``python -m trilinear_bwd --version --info``; include it in
    bug reports.

    Parameters
    ----------
    file : file-like, optional
        Where to print; standard output by default.
    """
    out = file or sys.stdout
    for key, value in config().items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        elif isinstance(value, list):
            value = ", ".join(value)
        print(f"{key:>16}: {value}", file=out)

"""The main job from the command line, and a light import."""

import os
import pathlib
import platform
import subprocess
import sys

import pytest

from trilinear_bwd.__main__ import main


def test_main_job_small_case(capsys):
    assert main(["-n", "1", "-c", "2", "-i", "3,4,5", "-o", "6,8,10", "-r", "2"]) == 0
    out = capsys.readouterr().out
    assert "within bound: yes" in out and "(1, 2, 6, 8, 10)" in out


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_main_job_dtypes_and_layouts(capsys, dtype):
    assert main(["-n", "1", "-c", "3", "-i", "4", "-o", "7", "--dtype", dtype,
                 "--layout", "ndhwc", "--align-corners", "-t", "2", "-r", "1"]) == 0
    assert "within bound: yes" in capsys.readouterr().out


def test_main_job_default_runs_worked_example_first(capsys):
    assert main(["--no-check", "-r", "1"]) == 0
    out = capsys.readouterr().out
    assert out.index("CANN worked example") < out.index("Volume")
    assert "[36.0, 100.0, 164.0, 228.0]" in out


def test_help_and_info():
    for flag in ("--help", "--info", "--version"):
        result = subprocess.run([sys.executable, "-m", "trilinear_bwd", flag],
                                capture_output=True, text=True, check=True)
        assert result.stdout.strip()
    info = subprocess.run([sys.executable, "-m", "trilinear_bwd", "--info"],
                          capture_output=True, text=True, check=True).stdout
    assert "openmp" in info and "active_variant" in info


def test_import_is_light():
    """Importing the package loads NumPy and its own extensions, nothing heavy."""
    code = (
        "import sys, trilinear_bwd\n"
        "heavy = [m for m in ('torch', 'scipy', 'matplotlib', 'dask', 'ml_dtypes', 'pandas',"
        " 'threadpoolctl') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == ""


@pytest.mark.skipif(sys.version_info < (3, 10), reason="sys.stdlib_module_names is 3.10+")
def test_import_adds_only_the_standard_library_beyond_numpy():
    """Every module ``import trilinear_bwd`` loads after NumPy is its own or the stdlib's.

    The guard behind "import is fast": no third-party package, however small,
    is imported eagerly (optional integrations load on first attribute use).
    """
    code = (
        "import sys, numpy\n"
        "before = set(sys.modules)\n"
        "import trilinear_bwd\n"
        "print('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    new = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert "trilinear_bwd._kernels._native" in new  # the check can see the package
    foreign = [m for m in new
               if m.split(".")[0] not in sys.stdlib_module_names
               and m.split(".")[0] != "trilinear_bwd"
               and not m.startswith(("_cython_", "cython_runtime"))]
    assert foreign == []
    lazy = [m for m in new if m in ("trilinear_bwd.reference", "trilinear_bwd.aclnn",
                                    "trilinear_bwd.torch", "trilinear_bwd.dask",
                                    "trilinear_bwd.bench", "trilinear_bwd._bench",
                                    "trilinear_bwd.__main__")]
    assert lazy == []


def test_show_config_reports_build_and_runtime():
    import io
    import re

    import trilinear_bwd as tb
    from trilinear_bwd import _info

    facts = _info.config()
    assert facts["version"] == tb.__version__
    assert isinstance(facts["openmp"], bool)
    assert facts["default_threads"] >= 1 and facts["processors"] >= 1
    assert "baseline" in facts["kernel_variants"]
    assert facts["active_variant"] in facts["kernel_variants"]
    assert ("avx2" in facts["kernel_variants"]) <= facts["cpu_avx2_f16c"]
    assert ("avx512" in facts["kernel_variants"]) <= facts["cpu_avx512"]
    assert facts["cpu_avx512"] <= facts["cpu_avx2_f16c"]
    if facts["openmp"]:
        assert re.fullmatch(r"\d{6} \(OpenMP [\d.?]+\)", facts["openmp_version"])
        assert any(name in facts["openmp_runtime"] for name in ("gomp", "omp", "vcomp")), \
            facts["openmp_runtime"]
    else:
        assert facts["openmp_version"].startswith("none")
    printed = io.StringIO()
    tb.show_config(file=printed)
    for key in facts:
        assert f"{key}:" in printed.getvalue()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/cpuinfo")
@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="x86-64 checks; under QEMU /proc/cpuinfo is the host's")
def test_cpu_checks_agree_with_the_kernel():
    """The CPUID + XCR0 checks agree with Linux's flags, which the kernel clears
    for a vector extension whose register state it does not enable."""
    from trilinear_bwd._kernels import _native

    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags")).split()
    except (OSError, StopIteration):
        pytest.skip("no flags line in /proc/cpuinfo (not x86?)")
    avx2 = {"avx", "avx2", "f16c"} <= set(flags)
    avx512 = avx2 and {"avx512f", "avx512bw", "avx512vl"} <= set(flags)
    assert _native.cpu_has_avx2_f16c() == avx2
    assert _native.cpu_has_avx512() == avx512


def _variant_in_subprocess(kernel):
    env = dict(os.environ, TRILINEAR_BWD_KERNEL=kernel)
    code = ("from trilinear_bwd._core import _dispatch\n"
            "print(_dispatch.active_variant(), ','.join(_dispatch.available_variants()))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env)


def test_kernel_variant_is_forced_by_the_environment():
    """TRILINEAR_BWD_KERNEL picks any available variant; unset, the fastest runs;
    a variant that is not available here gives a warning naming it and the ones
    that are, and the fastest runs (never an error)."""
    from trilinear_bwd._core import _dispatch

    available = _dispatch.available_variants()
    assert available[-1] == "baseline"
    assert available == [v for v in _dispatch.VARIANTS if v in available]  # fastest first
    assert _variant_in_subprocess("").stdout.split()[0] == available[0]
    for name in available:
        result = _variant_in_subprocess(name.upper())
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == [name, ",".join(available)]
    for name in [v for v in _dispatch.VARIANTS if v not in available] + ["sse9"]:
        result = _variant_in_subprocess(name)
        assert result.returncode == 0, result.stderr
        assert result.stdout.split()[0] == available[0]
        assert f"TRILINEAR_BWD_KERNEL={name!r}: not available here" in result.stderr
        assert f"using the default, {available[0]!r}" in result.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_openmp_runtime_found_without_threadpoolctl():
    """Without threadpoolctl the runtime comes from the process's memory map."""
    from trilinear_bwd._kernels import _native

    if not _native.openmp_enabled():
        pytest.skip("serial build: no OpenMP runtime to find")
    # Both the report and the memory map are read in one fresh process: this
    # one may have loaded other runtimes too (PyTorch's own libgomp, say).
    code = (
        "import sys, json; sys.modules['threadpoolctl'] = None\n"
        "from trilinear_bwd import _info\n"
        "print(json.dumps([_info.openmp_runtimes(),\n"
        "                  [p for _, _, p in _info._runtimes_loaded_libraries()]]))"
    )
    import json

    text, paths = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                            text=True, check=True).stdout)
    assert "omp" in text and "/" in text, text
    assert paths and all(p in text for p in paths)
    pytest.importorskip("threadpoolctl")
    code = (
        "import json, os\n"
        "from trilinear_bwd import _info\n"
        "real = lambda found: sorted({os.path.realpath(p) for _, _, p in found})\n"
        "print(json.dumps([real(_info._runtimes_threadpoolctl()),\n"
        "                  real(_info._runtimes_loaded_libraries())]))"
    )
    listed, mapped = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                               text=True, check=True).stdout)
    # Both ways name the same libraries.
    assert listed == mapped


def test_version_has_one_source():
    """__version__ comes from _version.py, the installed metadata agrees, and the
    changelog has an entry for it."""
    import importlib.metadata
    import re

    import trilinear_bwd as tb
    from trilinear_bwd import _version

    assert tb.__version__ == _version.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+([.-]?(a|b|rc|dev|post)\d*)*", tb.__version__)
    try:
        assert importlib.metadata.version("trilinear_bwd") == tb.__version__
    except importlib.metadata.PackageNotFoundError:
        pass  # an in-place build that was never installed: no metadata to compare
    changelog = pathlib.Path(__file__).resolve().parent.parent / "CHANGELOG.md"
    if changelog.exists():
        assert f"## [{tb.__version__}]" in changelog.read_text(encoding="utf-8")


def test_tests_run_against_installed_package():
    """Under ci/test_wheel.sh: the package being tested is the installed one.

    ``TRILINEAR_BWD_EXPECT_INSTALLED_IN`` names the virtual environment the
    wheel was installed into; the package and its extensions must come from
    there, not from a source tree.  Elsewhere, the package imported must at
    least carry its compiled extensions next to its Python files.
    """
    import trilinear_bwd
    from trilinear_bwd._kernels import _native

    pkg = os.path.dirname(os.path.realpath(trilinear_bwd.__file__))
    assert os.path.dirname(os.path.realpath(_native.__file__)) == os.path.join(pkg, "_kernels")
    venv = os.environ.get("TRILINEAR_BWD_EXPECT_INSTALLED_IN")
    if venv:
        assert pkg.startswith(os.path.realpath(venv) + os.sep), pkg
        repo = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
        assert not pkg.startswith(repo + os.sep), pkg


# Every command-line entry point, with arguments that print at once: (argv,
# the status when the reader left).  argparse's --help swallows the write's
# error itself and exits 0.
ENTRY_POINTS = [
    (["-m", "trilinear_bwd", "--version", "--info"], 141),
    (["-m", "trilinear_bwd", "-n", "1", "-c", "1", "-i", "2", "-o", "3", "-r", "1"], 141),
    (["-m", "trilinear_bwd", "--help"], (0, 141)),
    (["-m", "trilinear_bwd", "golden", "generate", "{tmp}", "--input-size", "1,1,2,2,2",
      "--output-size", "3,3,3", "--dtype", "float32", "--no-progress"], 141),
    (["-m", "trilinear_bwd", "golden", "compare", "--help"], (0, 141)),
    (["-m", "trilinear_bwd.bench", "--help"], (0, 141)),
    (["-c", "import sys; from trilinear_bwd.__main__ import main; sys.argv[1:] = ['--info'];"
            " sys.exit(main())"], 141),     # what the trilinear-bwd script runs
]


@pytest.mark.parametrize("argv, expected", ENTRY_POINTS,
                         ids=[" ".join(a[1:4]) for a, _ in ENTRY_POINTS])
def test_a_reader_that_leaves_ends_the_command_quietly(tmp_path, argv, expected):
    """``... | head -1`` -- the reader gone before the command
    writes -- leaves no BrokenPipeError traceback, whichever entry point: exit
    status 141, as for a program SIGPIPE ends (128 + 13)."""
    import trilinear_bwd

    # The package this process imported (the source tree built in place, or an
    # installed wheel), first on the child's path, run from an empty folder so
    # that no source tree shadows it.
    where = os.path.dirname(os.path.dirname(os.path.abspath(trilinear_bwd.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([where] + sys.path))
    argv = [a.replace("{tmp}", str(tmp_path / "set")) for a in argv]
    (tmp_path / "cwd").mkdir()
    proc = subprocess.Popen([sys.executable] + argv, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=tmp_path / "cwd")
    proc.stdout.close()          # the reader leaves before the first line is written
    err = proc.stderr.read().decode()
    status = proc.wait(timeout=120)
    assert err == "", err
    assert status in (expected if isinstance(expected, tuple) else (expected,)), status


def test_an_allocation_that_fails_is_both_internal_error_and_memory_error(monkeypatch):
    """``except MemoryError`` catches a failed allocation, and it is 561000."""
    import numpy as np

    import trilinear_bwd as tb
    from trilinear_bwd._core import _pool

    def no_memory(*args, **kwargs):
        raise MemoryError("no memory left (simulated)")

    g = np.ones((1, 1, 2, 2, 2), np.float32)
    for call in (lambda: tb.alloc_workspace(2 ** 62),          # more than any machine holds
                 lambda: tb.upsample_trilinear3d_backward(g, (1, 1, 1))):
        with pytest.raises(MemoryError) as info:
            call()
        assert isinstance(info.value, tb.InternalError), type(info.value)
        assert isinstance(info.value, tb.AllocationError)
        assert info.value.status == tb.ACLNN_ERR_INNER == 561000
        assert "could not allocate" in str(info.value) and "561000" in str(info.value)
        monkeypatch.setattr(_pool, "empty", no_memory)    # the result's allocation fails

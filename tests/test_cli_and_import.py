"""The main job from the command line, and a light import."""

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

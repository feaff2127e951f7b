"""``python -m trilinear_bwd``'s forward and scales options, and the dtype helper it uses."""

import numpy as np
import pytest

from trilinear_bwd import reference
from trilinear_bwd.__main__ import main, parser
from trilinear_bwd._core._arrays import numpy_dtype

SMALL = ["-n", "1", "-c", "2", "-r", "1"]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["ncdhw", "ndhwc"])
def test_forward_is_checked_against_the_reference(capsys, dtype, layout):
    assert main(SMALL + ["--forward", "-i", "3,4,5", "-o", "6,9,10", "--dtype", dtype,
                         "--layout", layout]) == 0
    out = capsys.readouterr().out
    assert "Forward volume" in out and "CANN worked example" not in out
    assert f"self      {dtype} (1, 2, 3, 4, 5) -> out (1, 2, 6, 9, 10)" in out
    assert "within bound: yes" in out


def test_forward_alone_skips_the_worked_example(capsys):
    assert main(["--forward", "--no-check", "-r", "1", "-c", "2"]) == 0
    out = capsys.readouterr().out
    assert "CANN worked example" not in out and "(2, 2, 64, 64, 64)" in out


@pytest.mark.parametrize("forward", [False, True])
def test_scales_reach_the_operator(capsys, forward):
    """The scales change the coordinates: with them the result is the reference's
    with the same scales, and not the one without (the check would fail)."""
    args = SMALL + ["-i", "4,5,6", "-o", "6,7,9", "--scales", "1.7,1.5,1.6"]
    assert main(args + (["--forward"] if forward else [])) == 0
    out = capsys.readouterr().out
    assert "scales    (1.7, 1.5, 1.6)" in out and "within bound: yes" in out
    # The same sizes differ with and without the scales, so the check can fail.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 4, 5, 6))
    with_scales = reference.forward(x, (6, 7, 9), False, (1.7, 1.5, 1.6))
    assert not np.allclose(with_scales, reference.forward(x, (6, 7, 9)))


def test_one_scale_for_all_axes_and_zero_means_not_given(capsys):
    # A negative scale is refused: test_a_negative_scale_is_refused_not_ignored.
    assert parser().parse_args(["--scales", "2"]).scales == (2.0, 2.0, 2.0)
    assert main(SMALL + ["-i", "4", "-o", "8", "--scales", "0"]) == 0
    out = capsys.readouterr().out
    assert "within bound: yes" in out and "scales    " not in out


@pytest.mark.parametrize("forward", [[], ["--forward"]])
def test_scales_that_do_not_give_the_size_are_refused(capsys, forward):
    """PyTorch's rule: a given scale must give floor(input * scale) == output."""
    with pytest.raises(SystemExit) as exit_:
        main(SMALL + ["-i", "4", "-o", "8", "--scales", "3"] + forward)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "scales" in err and err.count("\n") == 1


@pytest.mark.parametrize("text", ["a,b,c", "1,2", "1,2,3,4", ""])
def test_malformed_scales_are_one_line(capsys, text):
    with pytest.raises(SystemExit) as exit_:
        main(["--scales", text])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--scales" in err and err.count("\n") == 1


@pytest.mark.parametrize("name", ["float32", "float64", "float16", "bfloat16"])
def test_numpy_dtype_names_the_four_dtypes(name):
    dtype = numpy_dtype(name)
    assert isinstance(dtype, np.dtype) and dtype.name == name
    assert np.zeros(2, dtype).dtype == dtype


def test_numpy_dtype_refuses_other_names():
    with pytest.raises(TypeError):
        numpy_dtype("float17")


# ------------------------------------------------------------ scales the command line cannot use


@pytest.mark.parametrize("argv, words", [
    (["--scales", "-2"], "--scales"),
    (["--scales", "2,-1,2"], "--scales"),
    (["--forward", "--scales", "-0.5"], "--scales"),
])
def test_a_negative_scale_is_refused_not_ignored(capsys, argv, words):
    with pytest.raises(SystemExit) as info:
        main(SMALL + ["--no-check"] + argv)
    out, err = capsys.readouterr()
    assert info.value.code == 2 and out == ""
    assert words in err and "> 0" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("forward", [False, True])
def test_scales_with_align_corners_say_they_did_nothing(capsys, forward):
    """Corner-aligned coordinates use no scale: a note says so, and the report
    prints no scales it did not use."""
    args = SMALL + ["--no-check", "-i", "4,5,6", "-o", "6,7,9", "--align-corners",
                    "--scales", "3"]
    assert main(args + (["--forward"] if forward else [])) == 0
    out, err = capsys.readouterr()
    assert "scales" not in out, out
    assert err.strip() == ("python -m trilinear_bwd: note: --scales does nothing with "
                           "--align-corners (corner-aligned coordinates use (in - 1) / "
                           "(out - 1) on every axis)"), err


def test_threads_help_says_small_calls_use_one_thread():
    text = " ".join(parser().format_help().split())
    assert "256 KiB" in text and "one thread" in text, text

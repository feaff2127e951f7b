"""The reference itself: hand-checked values, so that the kernels are not checked against a bug."""

import numpy as np
import pytest

from trilinear_bwd import reference


def test_coefficients_by_hand():
    # 2x upsampling, half-pixel: src(j) = max(0, (j + 0.5) / 2 - 0.5); past the
    # last input both weights go to it (x0 == x1), split as the formula says.
    c = reference.source_coefficients(2, 4, False)
    assert c == [(0, 1, 1.0, 0.0), (0, 1, 0.75, 0.25), (0, 1, 0.25, 0.75), (1, 1, 0.75, 0.25)]
    # align_corners: src(j) = j * (in - 1) / (out - 1)
    c = reference.source_coefficients(3, 5, True)
    assert c == [(0, 1, 1.0, 0.0), (0, 1, 0.5, 0.5), (1, 2, 1.0, 0.0), (1, 2, 0.5, 0.5),
                 (2, 2, 1.0, 0.0)]
    # An explicit scale replaces in/out: step = 1 / 2.5
    c = reference.source_coefficients(4, 10, False, 2.5)
    assert c[1][0] == 0 and c[1][3] == pytest.approx(0.1)
    # in == out is the identity, whatever the scale
    assert reference.source_coefficients(3, 3, False, 1.2) == [
        (0, 0, 1.0, 0.0), (1, 1, 1.0, 0.0), (2, 2, 1.0, 0.0)]
    # one output point, align_corners: scale 0, everything from index 0
    assert reference.source_coefficients(5, 1, True) == [(0, 1, 1.0, 0.0)]


def test_worked_example():
    g = np.arange(1, 33, dtype=np.float64).reshape(2, 2, 2, 2, 2)
    np.testing.assert_array_equal(reference.backward(g, (2, 2, 1, 1, 1)).ravel(),
                                  [36, 100, 164, 228])


def test_backward_conserves_mass_without_align_corners():
    """Every output point's weights sum to one, so the total gradient is preserved."""
    g = np.random.default_rng(0).standard_normal((1, 2, 5, 6, 7))
    gi = reference.backward(g, (1, 2, 3, 4, 9))
    np.testing.assert_allclose(gi.sum(axis=(2, 3, 4)), g.sum(axis=(2, 3, 4)), rtol=1e-12)


def test_forward_reproduces_linear_functions():
    """Trilinear interpolation of a linear function is exact with align_corners."""
    d, h, w = np.meshgrid(np.arange(3.0), np.arange(4.0), np.arange(5.0), indexing="ij")
    x = (2 * d - h + 0.5 * w)[None, None]
    y = reference.forward(x, (5, 7, 9), align_corners=True)
    dd, hh, ww = np.meshgrid(np.linspace(0, 2, 5), np.linspace(0, 3, 7), np.linspace(0, 4, 9),
                             indexing="ij")
    np.testing.assert_allclose(y[0, 0], 2 * dd - hh + 0.5 * ww, atol=1e-12)


def test_ulp():
    assert reference.ulp(1.0, "float16") == 2.0**-10
    assert reference.ulp(1.0, "bfloat16") == 2.0**-7
    assert reference.ulp(0.0, "float16") == 2.0**-24

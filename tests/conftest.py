"""Shared helpers: dtypes, layouts, the reference comparison; how much the run covers.

Two depths of the same classes of test:

* ``pytest`` (the default, a few minutes on 2 cores): property tests draw
  fewer examples (:func:`examples`, hypothesis profile ``dev``), the largest
  parametrisations run a fixed, spread sample of their cases (:func:`sample`),
  and tests marked ``slow`` are deselected;
* ``TRILINEAR_BWD_TESTS=full pytest`` (CI): every example count as written
  (profile ``ci``), every case, the slow tests.

``-m`` on the command line always wins over the default deselection
(``pytest -m slow`` runs the slow tests alone).
"""

import itertools
import os
import random

import numpy as np
import pytest

from trilinear_bwd import reference
from trilinear_bwd._core._arrays import numpy_dtype

# The one switch between the two depths.
FULL = os.environ.get("TRILINEAR_BWD_TESTS", "").strip().lower() == "full"
# The default run's share of a property test's examples.
DEV_EXAMPLE_SHARE = 4
DEV_MIN_EXAMPLES = 10

try:
    from hypothesis import settings as _settings
except ImportError:  # an installed test suite without hypothesis: its tests skip
    _settings = None
else:
    _settings.register_profile("ci", deadline=None, print_blob=True)
    _settings.register_profile("dev", deadline=None,
                               max_examples=max(DEV_MIN_EXAMPLES, 100 // DEV_EXAMPLE_SHARE))
    _settings.load_profile("ci" if FULL else "dev")


def examples(count):
    """A property test's ``max_examples``: ``count`` in the full run, a quarter by default."""
    if FULL:
        return count
    return max(min(count, DEV_MIN_EXAMPLES), count // DEV_EXAMPLE_SHARE)


def sample(cases, keep):
    """Every case of a parametrisation in the full run; ``keep`` of them, spread, by default.

    The sample is fixed (every ``len(cases) / keep``-th case, first and last
    included), so that a failure reproduces; the full run (CI) runs them all.
    """
    cases = list(cases)
    if FULL or keep >= len(cases):
        return cases
    if keep <= 1:
        return cases[:1]
    step = (len(cases) - 1) / (keep - 1)
    return [cases[round(k * step)] for k in range(keep)]


def sample_product(keep, *axes):
    """Every combination of ``axes`` in the full run; ``keep`` of them by default.

    The default's combinations are fixed (drawn by a seeded generator) and
    chosen so that every value of every axis appears in at least one of
    them; the full run (CI) runs the whole product.  Returns a list of
    tuples for ``pytest.mark.parametrize("a,b,...", ...)``.
    """
    axes = [list(axis) for axis in axes]
    full = list(itertools.product(*(range(len(axis)) for axis in axes)))
    if not FULL and keep < len(full):
        order = random.Random(len(full)).sample(full, len(full))
        unseen = [set(range(len(axis))) for axis in axes]
        chosen = []
        for case in order:  # first the cases that show an unseen value
            if any(i in unseen[a] for a, i in enumerate(case)):
                chosen.append(case)
                for a, i in enumerate(case):
                    unseen[a].discard(i)
        chosen += [case for case in order if case not in chosen][:max(0, keep - len(chosen))]
        full = sorted(chosen)
    return [tuple(axis[i] for axis, i in zip(axes, case)) for case in full]


def pytest_configure(config):
    # A test named by its node id (path::name) runs even if it is slow.
    named = any("::" in str(arg) for arg in config.args)
    if not FULL and not config.option.markexpr and not named:
        config.option.markexpr = "not slow"


def pytest_report_header(config):
    return (f"trilinear_bwd tests: {'full (TRILINEAR_BWD_TESTS=full)' if FULL else 'default'}"
            f" depth; hypothesis profile {'ci' if FULL else 'dev'}")

DTYPES = ["float32", "float64", "float16", "bfloat16"]
FULL_DTYPES = ["float32", "float64"]
HALF_DTYPES = ["float16", "bfloat16"]
# Layouts of grad_out: the two contiguous ones and views the kernel reads
# through general strides.
IN_LAYOUTS = ["ncdhw", "ndhwc", "strided", "reversed", "transposed"]
OUT_LAYOUTS = ["ncdhw", "ndhwc"]


def np_dtype(name):
    """The NumPy dtype for a dtype name (bfloat16 from ml_dtypes)."""
    return numpy_dtype(name)


def in_layout(values, layout):
    """Return an array equal to ``values`` (N, C, D, H, W) laid out as ``layout``."""
    n, c, d, h, w = values.shape
    if layout == "ncdhw":
        return np.ascontiguousarray(values)
    if layout == "ndhwc":
        return np.ascontiguousarray(values.transpose(0, 2, 3, 4, 1)).transpose(0, 4, 1, 2, 3)
    if layout == "strided":
        # Steps in D and W, an offset start, and a padded H: no axis is unit-stride.
        buf = np.zeros((n, c, 2 * d, h + 1, 2 * w + 1), dtype=values.dtype)
        view = buf[:, :, ::2, :h, 1::2]
    elif layout == "reversed":
        buf = np.zeros_like(values)
        view = buf[::-1, :, ::-1, :, ::-1]
    elif layout == "transposed":
        buf = np.zeros((c, n, d, w, h), dtype=values.dtype)
        view = buf.transpose(1, 0, 2, 4, 3)
    else:
        raise ValueError(layout)
    view[...] = values
    return view


def out_array(shape, dtype, layout):
    """A grad_input of ``shape`` in ``layout``, filled with NaN bytes (0xFF)."""
    n, c, d, h, w = shape
    if layout == "ncdhw":
        base = np.empty(shape, dtype=dtype)
        arr = base
    elif layout == "ndhwc":
        base = np.empty((n, d, h, w, c), dtype=dtype)
        arr = base.transpose(0, 4, 1, 2, 3)
    else:
        raise ValueError(layout)
    base.view(np.uint8)[...] = 0xFF
    return arr


def random_grad(shape, dtype, seed=0):
    """Standard-normal values, exactly representable in ``dtype``."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(np_dtype(dtype))


def assert_matches_reference(result, grad_out, input_size, align_corners=False,
                             scales=(0.0, 0.0, 0.0)):
    """Check ``result`` against the float64 reference within the spec's bound.

    float32/float64: the summation bound of ``reference.error_bound``.
    float16/bfloat16: one ulp of the storage type at the exact value, plus
    the float32 accumulation bound.
    """
    exact = reference.backward(grad_out.astype(np.float64), input_size, align_corners, scales,
                               reference.opmath_of(result.dtype))
    bound = reference.error_bound(grad_out, input_size, align_corners, scales, result.dtype)
    got = result.astype(np.float64)
    err = np.abs(got - exact)
    bad = ~(err <= bound)
    if bad.any():
        k = np.unravel_index(np.argmax(np.where(bad, err - bound, -np.inf)), err.shape)
        pytest.fail(
            f"{bad.sum()} of {err.size} elements outside the bound; worst at {k}: "
            f"got {got[k]!r}, exact {exact[k]!r}, bound {bound[k]!r}"
        )


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch")

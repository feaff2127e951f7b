"""The limits of the contract, at and just past each one, without allocating the memory.

Limits (docs/operator.md): every dimension at most 2**20;
``N*C*(oD*oH*oW + iD*iH*iW + oD*oH*iW + oD*iH*iW) * 4 < 60 GiB``;
``N*C*oD*oH < 2**31``; ``iW*iH < 2**31``.  At the limit a call succeeds, one
step past it the call is rejected with 161002 naming the limit.

Nothing here allocates what the shapes describe: ``gradOut`` is a zero-stride
view of one element wherever it would be large (read-only input is allowed),
and the one ``gradInput`` that must be large at the limit (``iW*iH``) is a
lazily mapped, never-touched region (``MAP_NORESERVE``).  Phase two runs only
where the arrays are small; the resident set size is checked to stay flat.
"""

import math
import mmap

import numpy as np
import pytest
from _hardening import UNDER_SANITIZER, rss_bytes
from conftest import sample

import trilinear_bwd as tb
from trilinear_bwd import aclnn

INVALID = tb.ACLNN_ERR_PARAM_INVALID
MAX_DIM = 2**20
# A rejected call plans nothing; an accepted one builds per-axis tables,
# O(oD + oH + oW) (tens of MiB at these sizes), never the arrays the shapes
# describe (GiB to tens of GiB).
RSS_SLACK_REJECTED = 32 * 2**20
RSS_SLACK_ACCEPTED = 512 * 2**20


def zero_stride(shape, dtype=np.float32, value=1.0):
    """A read-only array of ``shape`` backed by a single element."""
    return np.broadcast_to(np.array(value, dtype=dtype), shape)


def need_bytes(go_shape, gi_shape):
    """The 60 GiB formula of the contract, transcribed."""
    n, c, od, oh, ow = go_shape
    _, _, id_, ih, iw = gi_shape
    return n * c * (od * oh * ow + id_ * ih * iw + od * oh * iw + od * ih * iw) * 4


class _Growth:
    def __init__(self, limit):
        self.limit = limit

    def __enter__(self):
        self.before = rss_bytes()
        return self

    def __exit__(self, *exc):
        grown = rss_bytes() - self.before
        if not UNDER_SANITIZER:
            assert grown < self.limit, f"RSS grew by {grown / 2**20:.0f} MiB"
        return False


@pytest.fixture
def flat_rss():
    """Fail if a test that must be rejected before planning grew the resident set."""
    with _Growth(RSS_SLACK_REJECTED):
        yield


@pytest.fixture
def no_big_allocation():
    """Fail if an accepted phase one allocated anything like the arrays' size."""
    with _Growth(RSS_SLACK_ACCEPTED):
        yield


def phase_one(go, gi, align=False):
    args = (go, list(go.shape[2:]), list(gi.shape), align, 0.0, 0.0, 0.0, gi)
    size, ex = tb.get_workspace_size(*args)
    status, size2, ex2 = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(*args)
    assert (status, size2) == (0, size)
    return size, ex


def rejected(go, gi, match):
    args = (go, list(go.shape[2:]), list(gi.shape), False, 0.0, 0.0, 0.0, gi)
    with pytest.raises(tb.InvalidArgumentError, match=match) as info:
        tb.get_workspace_size(*args)
    assert info.value.status == INVALID
    status, size, ex = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(*args)
    assert (status, size, ex) == (INVALID, 0, None)


# -- 2**20 per dimension ----------------------------------------------------------


@pytest.mark.parametrize("axis", sample(range(5), 3))
def test_every_dimension_at_the_limit_runs(axis):
    """2**20 along one axis of both arrays (in == out, the identity): run and compare exactly."""
    shape = tuple(MAX_DIM if k == axis else 1 for k in range(5))
    go = np.random.default_rng(axis).standard_normal(shape).astype(np.float32)
    go[go == 0] = 1.0   # the identity maps -0 to +0; keep the comparison exact
    gi = np.full(shape, np.nan, np.float32)
    size, ex = phase_one(go, gi)
    tb.execute(tb.alloc_workspace(size), size, ex)
    assert np.array_equal(gi, go)


def _axis_backward(n_in, n_out, align):
    """The backward of one axis applied to ones, transcribed from the contract, vectorised."""
    j = np.arange(n_out, dtype=np.float64)
    if align:
        src = j * ((n_in - 1) / (n_out - 1))
    else:
        src = np.maximum((j + 0.5) * (n_in / n_out) - 0.5, 0.0)
    x0 = np.minimum(np.floor(src), n_in - 1).astype(np.int64)
    x1 = np.minimum(x0 + 1, n_in - 1)
    l1 = np.clip(src - x0, 0.0, 1.0)
    return (np.bincount(x0, weights=1.0 - l1, minlength=n_in)
            + np.bincount(x1, weights=l1, minlength=n_in))


@pytest.mark.parametrize("axis", [2, 3, 4])
def test_output_dimension_at_the_limit_with_real_interpolation(axis):
    """oD, oH or oW = 2**20 from half as many inputs, gradOut all ones through zero strides.

    Every weight is 0, 1/4, 3/4 or 1, so each sum is exact in float32 and the
    result must equal the contract's formula exactly.
    """
    go_shape = tuple(MAX_DIM if k == axis else 1 for k in range(5))
    gi_shape = tuple(MAX_DIM // 2 if k == axis else 1 for k in range(5))
    go = zero_stride(go_shape)
    gi = np.full(gi_shape, np.nan, np.float32)
    size, ex = phase_one(go, gi)
    tb.execute(tb.alloc_workspace(size), size, ex)
    expected = _axis_backward(MAX_DIM // 2, MAX_DIM, False)
    assert np.array_equal(gi.ravel(), expected.astype(np.float32))


PAST_DIM = [(axis, "gradOut") for axis in range(5)] + [(axis, "gradInput") for axis in (2, 3, 4)]


@pytest.mark.parametrize("axis, array", PAST_DIM)
def test_every_dimension_past_the_limit_is_rejected(axis, array, flat_rss):
    big = tuple(MAX_DIM + 1 if k == axis else 1 for k in range(5))
    ones = (1, 1, 1, 1, 1)
    if axis < 2:
        go_shape = gi_shape = big   # N and C are shared by both arrays
    else:
        go_shape, gi_shape = (big, ones) if array == "gradOut" else (ones, big)
    rejected(zero_stride(go_shape), zero_stride(gi_shape),
             rf"{array} dimension {axis} must be at most 2\*\*20 = {MAX_DIM}, got {MAX_DIM + 1}")


# -- N*C*oD*oH < 2**31 -------------------------------------------------------------

# 2**31 - 2 = 2387 * 899658 is the largest product below 2**31 that two
# factors <= 2**20 reach (2**31 - 1 is prime).
@pytest.mark.parametrize("n, c, od, oh", [(1, 1, 2387, 899658), (1, 3, 2387, 299886)])
def test_ncdh_product_at_the_limit_is_accepted(n, c, od, oh, no_big_allocation):
    assert n * c * od * oh == 2**31 - 2 and max(n, c, od, oh) <= MAX_DIM
    go = zero_stride((n, c, od, oh, 1))
    gi = np.empty((n, c, 1, 1, 1), np.float32)
    size, ex = phase_one(go, gi)
    assert isinstance(size, int) and size > 0 and ex.state == "ready"


@pytest.mark.parametrize("n, c, od, oh", [(1, 1, 2048, MAX_DIM), (2, 1, 1024, MAX_DIM),
                                          (1, 1, 2387, 899659)])
def test_ncdh_product_past_the_limit_is_rejected(n, c, od, oh, flat_rss):
    product = n * c * od * oh
    assert product >= 2**31
    go = zero_stride((n, c, od, oh, 1))
    gi = zero_stride((n, c, 1, 1, 1))
    assert need_bytes(go.shape, gi.shape) < 60 * 2**30   # only this limit is broken
    rejected(go, gi, rf"N\*C\*oD\*oH must be below 2\*\*31, got {product}")


# -- iW*iH < 2**31 -----------------------------------------------------------------


def lazy_array(shape, dtype):
    """A writable array over anonymous memory that is reserved but never touched.

    ``MAP_NORESERVE`` commits nothing: pages would only be allocated if
    written, and phase one writes nothing.
    """
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0)
    region = mmap.mmap(-1, nbytes, flags=flags)
    return np.frombuffer(region, dtype=dtype).reshape(shape)


def test_iw_ih_product_at_the_limit_is_accepted(no_big_allocation):
    ih, iw = 2387, 899658
    assert ih * iw == 2**31 - 2
    try:
        gi = lazy_array((1, 1, 1, ih, iw), np.float16)   # 4 GiB of address space
    except (OSError, ValueError, OverflowError) as exc:
        pytest.skip(f"cannot reserve 4 GiB of address space here: {exc}")
    go = zero_stride((1, 1, 1, 1, 1), np.float16)
    size, ex = phase_one(go, gi)
    assert isinstance(size, int) and size > 0 and ex.state == "ready"


@pytest.mark.parametrize("ih, iw", [(2**11, 2**20), (2387, 899659), (2**16, 2**16)])
def test_iw_ih_product_past_the_limit_is_rejected(ih, iw, flat_rss):
    go = zero_stride((1, 1, 1, 1, 1))
    gi = zero_stride((1, 1, 1, ih, iw))   # the limit fires before anything else
    rejected(go, gi, rf"iW\*iH must be below 2\*\*31, got {ih * iw}")


# -- the 60 GiB formula ------------------------------------------------------------

AT_60 = ((1, 1, 29, 2671, 207930), (1, 1, 1, 1, 1))       # need == 60 GiB - 4
EXACTLY_60 = ((1, 1, 29, 565, 982978), (1, 1, 1, 1, 2))   # need == 60 GiB


def test_sixty_gib_at_the_limit_is_accepted(no_big_allocation):
    go_shape, gi_shape = AT_60
    assert need_bytes(go_shape, gi_shape) == 60 * 2**30 - 4
    go = zero_stride(go_shape)
    gi = np.empty(gi_shape, np.float32)
    size, ex = phase_one(go, gi)
    assert isinstance(size, int) and size > 0


@pytest.mark.parametrize("go_shape, gi_shape", [
    EXACTLY_60,
    ((1, 1, 29, 2671, 207931), (1, 1, 1, 1, 1)),   # one more output column
    ((2**10, 2**10, 1, 1, 2**14), (2**10, 2**10, 1, 1, 2**14)),
])
def test_sixty_gib_past_the_limit_is_rejected(go_shape, gi_shape, flat_rss):
    need = need_bytes(go_shape, gi_shape)
    assert need >= 60 * 2**30
    n, c, od, oh, _ = go_shape
    assert n * c * od * oh < 2**31 and gi_shape[3] * gi_shape[4] < 2**31
    rejected(zero_stride(go_shape), zero_stride(gi_shape), rf"60 GiB.*got {need}")


def test_one_call_checks_limits_before_allocating(flat_rss):
    """The one-call function would allocate 64 GiB for this gradInput: it must refuse first."""
    go = zero_stride((2**10, 2**10, 1, 1, 2**14))
    with pytest.raises(tb.InvalidArgumentError, match="60 GiB") as info:
        tb.upsample_trilinear3d_backward(go, (1, 1, 2**14))
    assert info.value.status == INVALID
    with pytest.raises(tb.InvalidArgumentError, match=r"dimension 4 must be at most 2\*\*20"):
        tb.upsample_trilinear3d_backward(zero_stride((1, 1, 1, 1, 1)), (1, 1, MAX_DIM + 1))


def test_one_call_checks_limits_before_copying_a_misaligned_grad_out(flat_rss):
    """The one-call function copies a misaligned gradOut, but only once it passed every check.

    This 64 GiB zero-stride view used to be copied first (MemoryError, or an
    attempt to allocate and fill it).
    """
    raw = np.zeros(2 * 4 + 1, np.uint8)[1:].view(np.float32)   # misaligned by one byte
    go = np.lib.stride_tricks.as_strided(raw, (2**10, 2**10, 1, 1, 2**14), (0,) * 5)
    assert not go.flags.aligned
    with pytest.raises(tb.InvalidArgumentError, match="60 GiB") as info:
        tb.upsample_trilinear3d_backward(go, (1, 1, 2**14))
    assert info.value.status == INVALID



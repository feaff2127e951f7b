"""The pool of faulted memory behind fresh results (trilinear_bwd._core._pool)."""

import gc

import numpy as np
import pytest
from conftest import assert_matches_reference, np_dtype, random_grad
from conftest import sample, sample_product

import trilinear_bwd as tb
from trilinear_bwd._core import _pool

BIG = (1, 8, 48, 48, 48)          # 1.7 MiB as float16, over _pool.MIN_BYTES
G_SHAPE = (1, 8, 24, 24, 24)


@pytest.fixture(autouse=True)
def fresh_pool():
    _pool.clear()
    previous = _pool.set_limit(_pool.POOL_BYTES)
    yield
    _pool.set_limit(previous)
    _pool.clear()


def _call(dtype="float32", layout_cl=False):
    g = random_grad(G_SHAPE, dtype, seed=4)
    if layout_cl:
        g = np.ascontiguousarray(g.transpose(0, 2, 3, 4, 1)).transpose(0, 4, 1, 2, 3)
    return g, tb.upsample_trilinear3d_backward(g, BIG[2:])


@pytest.mark.parametrize("dtype,channels_last",
                         sample_product(4, ["float32", "float64", "float16", "bfloat16"],
                                        [False, True]))
def test_a_dead_result_is_reused_and_recomputed_right(dtype, channels_last):
    g, first = _call(dtype, channels_last)
    assert first.dtype == np_dtype(dtype)
    assert (first.strides[1] == first.itemsize) == channels_last
    assert_matches_reference(first, g, BIG)
    address = first.__array_interface__["data"][0]
    expected = first.copy()
    del first
    gc.collect()
    assert _pool.held() > 0
    g2, second = _call(dtype, channels_last)
    assert second.__array_interface__["data"][0] == address   # the same, faulted block
    np.testing.assert_array_equal(second, expected)


def test_a_view_keeps_the_block():
    g, first = _call()
    view = first[0, 3]
    kept = view.copy()
    del first
    gc.collect()
    _, second = _call()          # must not reuse the block the view still sees
    second[...] = -1
    np.testing.assert_array_equal(view, kept)


def test_a_torch_tensor_keeps_the_block(torch):
    # Torch results come from PyTorch's allocator (resizable, see
    # test_torch_front.py); a tensor made from a pooled array still keeps it.
    _, first = _call()
    if first.dtype.name == "bfloat16":
        t = torch.from_numpy(first.view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(first)
    del first
    kept = t.clone()
    address = t.data_ptr()
    _, other = _call()
    assert other.__array_interface__["data"][0] != address
    other[...] = -1
    assert torch.equal(t, kept)
    del t
    gc.collect()
    assert _pool.held() > 0


def test_limit_zero_is_no_pool_and_limits_are_kept():
    _pool.set_limit(0)
    _, first = _call()
    del first
    gc.collect()
    assert _pool.held() == 0
    _pool.set_limit(2**21)            # room for one block of 2 MiB + 64 bytes? no: less
    _, a = _call()
    _, b = _call()
    del a, b
    gc.collect()
    assert _pool.held() <= 2**21
    with pytest.raises(tb.InvalidArgumentError):
        _pool.set_limit(-1)


def test_small_results_are_not_pooled():
    g = random_grad((1, 1, 4, 4, 4), "float32")
    out = tb.upsample_trilinear3d_backward(g, (2, 2, 2))
    assert out.flags.owndata


# -- a bounded LRU pool ----------------------------------------------------

MIB = 2**20


def _block(mib):
    """A pooled float32 result of ``mib`` MiB (its block: that plus 64 bytes)."""
    return _pool.empty((1, 1, 1, mib * MIB // 4, 1), np.float32)


def _give_back(*temporaries):
    """Let the results made for this call die (the caller keeps no reference)."""
    del temporaries
    gc.collect()


@pytest.mark.parametrize("order", sample([(1, 2, 3), (3, 2, 1), (2, 3, 1)], 1))
def test_a_returned_block_evicts_the_least_recently_used(order):
    """Limit for three blocks; a fourth size evicts the size used least recently."""
    sizes = {m: m * MIB + 64 for m in (1, 2, 3, 4)}
    _pool.set_limit(sum(sizes[m] for m in order))
    for m in order:                      # returned in this order: order[0] least recent
        _give_back(_block(m))
    assert list(_pool.stats()["blocks"]) == [sizes[m] for m in order]
    _give_back(_block(4))                # needs room: out go the oldest until it fits
    blocks = _pool.stats()["blocks"]
    assert sizes[4] in blocks
    assert sum(s * n for s, n in blocks.items()) <= _pool.limit()
    kept = [m for m in order if sizes[m] in blocks]
    # Only a most-recent tail of the old ones survives.
    assert kept == list(order[len(order) - len(kept):])
    assert order[0] not in kept


def test_taking_a_block_makes_its_size_recent():
    sizes = {m: m * MIB + 64 for m in (1, 2, 3)}
    _pool.set_limit(sizes[1] * 2 + sizes[2])
    _give_back(_block(1), _block(1), _block(2))   # 1 MiB x2, then 2 MiB (most recent)
    kept = _block(1)                     # a hit: the 1 MiB size becomes most recent
    assert list(_pool.stats()["blocks"]) == [sizes[2], sizes[1]]
    del kept
    gc.collect()
    _give_back(_block(3))                # evicts the 2 MiB block first, then a 1 MiB one
    assert _pool.stats()["blocks"] == {sizes[1]: 1, sizes[3]: 1}


@pytest.mark.parametrize("limit_mib", sample([0, 3, 7], 1))
def test_the_pool_never_holds_more_than_its_limit(limit_mib):
    _pool.set_limit(limit_mib * MIB)
    rng = np.random.default_rng(limit_mib)
    live = []
    for _ in range(12):
        live.append(_block(int(rng.integers(1, 4))))
        if rng.random() < 0.5:
            live.pop(int(rng.integers(len(live))))
        gc.collect()
        stats = _pool.stats()
        assert stats["held"] <= stats["limit"] == limit_mib * MIB
        assert stats["held"] == sum(s * n for s, n in stats["blocks"].items())
    live.clear()
    gc.collect()
    assert _pool.held() <= limit_mib * MIB


def test_a_block_larger_than_the_limit_is_released_not_kept():
    _pool.set_limit(2 * MIB + 64)
    _give_back(_block(1))
    _give_back(_block(3))                # bigger than the whole limit: dropped
    assert _pool.stats()["blocks"] == {MIB + 64: 1}


def test_stats_count_hits_and_misses():
    _pool.clear()
    _give_back(_block(2))
    a = _block(2)
    b = _block(2)
    stats = _pool.stats()
    assert (stats["hits"], stats["misses"]) == (1, 2)
    del a, b
    gc.collect()
    assert _pool.stats()["blocks"] == {2 * MIB + 64: 2}
    _pool.clear()
    assert _pool.stats() == {"limit": _pool.limit(), "held": 0, "blocks": {}, "hits": 0,
                             "misses": 0}


def test_lowering_the_limit_evicts_least_recent_first():
    _pool.set_limit(64 * MIB)
    for m in (1, 2, 3):
        _give_back(_block(m))
    _pool.set_limit(3 * MIB + 64)
    assert _pool.stats()["blocks"] == {3 * MIB + 64: 1}


def test_the_public_names_are_the_pool():
    assert tb.pool.set_limit is _pool.set_limit and tb.pool.stats is _pool.stats
    previous = tb.pool.set_limit(5 * MIB)
    assert tb.pool.limit() == 5 * MIB
    tb.pool.set_limit(previous)

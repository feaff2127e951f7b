"""One argument path: the one call's spelling, messages, plan cache, repeated runs."""

import numpy as np
import pytest
from conftest import assert_matches_reference, random_grad

import trilinear_bwd as tb
from trilinear_bwd._core import _plan


def test_everything_after_input_size_is_keyword_only():
    g = random_grad((1, 1, 4, 4, 4), "float32")
    with pytest.raises(TypeError):
        tb.upsample_trilinear3d_backward(g, (2, 2, 2), (4, 4, 4))   # CANN's order by mistake
    out = tb.upsample_trilinear3d_backward(g, (2, 2, 2), output_size=(4, 4, 4))
    assert_matches_reference(out, g, (1, 1, 2, 2, 2))


@pytest.mark.parametrize("input_size, message", [
    ((0, 32, 32), r"inputSize\[0\] \(D\) must be > 0, got 0"),
    ((8, -1, 8), r"inputSize\[1\] \(H\) must be > 0, got -1"),
    ((1, 2, 8, 8, 0), r"inputSize\[4\] \(W\) must be > 0, got 0"),
    ((8, 8.5, 8), r"inputSize\[1\] \(H\) must be an integer, got 8.5"),
    ((8, 8), r"inputSize must have 3 \(D, H, W\) or 5 \(N, C, D, H, W\) elements, got 2"),
    ((3, 2, 8, 8, 8), r"gradOut N must equal inputSize\[0\] \(N\) = 3, got 1"),
])
def test_messages_name_the_element_the_caller_passed(input_size, message):
    g = random_grad((1, 2, 16, 16, 16), "float32")
    with pytest.raises(tb.InvalidArgumentError, match=message):
        tb.upsample_trilinear3d_backward(g, input_size)


def test_torch_in_torch_out(torch):
    g = torch.rand(1, 2, 8, 8, 8)
    out = tb.upsample_trilinear3d_backward(g, (4, 4, 4))
    assert isinstance(out, torch.Tensor) and out.shape == (1, 2, 4, 4, 4)
    assert_matches_reference(out.numpy(), g.numpy(), (1, 2, 4, 4, 4))
    cl = g.contiguous(memory_format=torch.channels_last_3d)
    out = tb.upsample_trilinear3d_backward(cl, (4, 4, 4))
    assert out.is_contiguous(memory_format=torch.channels_last_3d)
    b = tb.upsample_trilinear3d_backward(g.to(torch.bfloat16), (4, 4, 4))
    assert b.dtype == torch.bfloat16
    assert isinstance(tb.upsample_trilinear3d_backward(g.numpy(), (4, 4, 4)), np.ndarray)


def test_second_call_of_a_geometry_reuses_its_plan():
    _plan.clear_plans()
    g = random_grad((2, 3, 6, 7, 8), "float32", seed=2)
    first = tb.upsample_trilinear3d_backward(g, (3, 4, 5))
    assert len(_plan._plans) == 1
    (key, (plan, kernel)), = _plan._plans.items()
    second = tb.upsample_trilinear3d_backward(g * 2, (3, 4, 5))
    assert len(_plan._plans) == 1 and _plan._plans[key][1] is kernel
    np.testing.assert_array_equal(second, first * 2)
    size, ex = tb.get_workspace_size(g, (6, 7, 8), (2, 3, 3, 4, 5), False, 0.0, 0.0, 0.0,
                                     np.empty((2, 3, 3, 4, 5), np.float32), num_threads=None)
    tb.upsample_trilinear3d_backward(g, (3, 4, 5), align_corners=True)   # another geometry
    assert len(_plan._plans) >= 2


def test_plan_cache_is_bounded():
    _plan.clear_plans()
    for n in range(1, _plan.PLAN_CACHE_SIZE + 10):
        tb.upsample_trilinear3d_backward(np.ones((1, 1, 2, 2, n), np.float32), (1, 1, n))
    assert len(_plan._plans) == _plan.PLAN_CACHE_SIZE


def test_remembered_workspace_is_checked_again_when_anything_changes():
    g = random_grad((1, 2, 6, 6, 6), "float32")
    gi = np.full((1, 2, 3, 3, 3), np.nan, np.float32)
    size, ex = tb.get_workspace_size(g, (6, 6, 6), gi.shape, False, 0.0, 0.0, 0.0, gi)
    ex.set_repeatable()
    ws = tb.alloc_workspace(size)
    tb.execute(ws, size, ex)
    ws.flags.writeable = False                 # the same object, now read-only
    with pytest.raises(tb.ExecutionError, match="writable"):
        tb.execute(ws, size, ex)
    ws.flags.writeable = True
    with pytest.raises(tb.ExecutionError, match="at least"):
        tb.execute(ws, size - 1, ex)          # the same object, a smaller size
    big = np.zeros(gi.nbytes + size + 64, np.uint8)
    inside = big[64:64 + gi.nbytes].view(np.float32).reshape(gi.shape)
    ex.update_arrays(grad_input=inside)       # new arrays: the old check no longer holds
    with pytest.raises(tb.ExecutionError, match="overlap"):
        tb.execute(big[:size + 64], size, ex)
    tb.execute(ws, size, ex)
    assert_matches_reference(inside, g, gi.shape)

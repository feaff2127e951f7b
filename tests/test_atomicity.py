"""Failure atomicity: a call that fails writes nothing and leaves the executor as it was.

Phase one never writes; ``tests/test_validation.py`` checks ``gradInput`` after
every rule and the fuzz tests after every injected fault.  Here: each way
phase two can fail, through the Python API and the ``aclnn`` names, leaves
``gradInput`` (and the bytes around it) untouched, keeps a ready executor
ready and usable, and keeps a consumed or destroyed one so (as documented in
docs/reliability.md).
"""

import dataclasses
import threading

import numpy as np
import pytest
from _hardening import NDHWC, Guarded
from conftest import assert_matches_reference, random_grad

import trilinear_bwd as tb
from trilinear_bwd import aclnn

NULL, INVALID = tb.ACLNN_ERR_PARAM_NULLPTR, tb.ACLNN_ERR_PARAM_INVALID
RUNTIME = tb.ACLNN_ERR_RUNTIME_ERROR

SHAPE_IN, SHAPE_OUT = (2, 3, 3, 4, 5), (5, 7, 9)


@pytest.fixture(params=["float32", "bfloat16"])
def setup(request):
    g = random_grad(SHAPE_IN[:2] + SHAPE_OUT, request.param, seed=4)
    gi = Guarded(SHAPE_IN, g.dtype, NDHWC, fill=np.nan)
    size, ex = tb.get_workspace_size(g, SHAPE_OUT, SHAPE_IN, False, 0.0, 0.0, 0.0, gi.view)
    return g, gi, size, ex


def _closed_stream():
    s = tb.Stream()
    s.close()
    return s


def _readonly(n):
    ws = np.zeros(n, np.uint8)
    ws.flags.writeable = False
    return ws


# (name, workspace factory(size, gi), size factory(size), stream factory, status)
FAILURES = [
    ("workspace None", lambda n, gi: None, lambda n: n, lambda: None, NULL),
    ("workspace too small", lambda n, gi: np.zeros(n - 1, np.uint8), lambda n: n, lambda: None,
     RUNTIME),
    ("workspaceSize too small", lambda n, gi: np.zeros(n, np.uint8), lambda n: n - 1,
     lambda: None, RUNTIME),
    ("workspaceSize negative", lambda n, gi: np.zeros(n, np.uint8), lambda n: -1, lambda: None,
     RUNTIME),
    ("workspaceSize not an integer", lambda n, gi: np.zeros(n, np.uint8), lambda n: float(n),
     lambda: None, INVALID),
    ("workspace read-only", lambda n, gi: _readonly(n), lambda n: n, lambda: None, RUNTIME),
    ("workspace bytes", lambda n, gi: bytes(n), lambda n: n, lambda: None, RUNTIME),
    ("workspace not contiguous", lambda n, gi: np.zeros(2 * n, np.uint8)[::2], lambda n: n,
     lambda: None, RUNTIME),
    ("workspace of objects", lambda n, gi: np.empty(n, object), lambda n: n, lambda: None,
     INVALID),
    ("workspace not a buffer", lambda n, gi: "workspace", lambda n: n, lambda: None, INVALID),
    ("workspace overlaps gradInput", lambda n, gi: gi.buffer.view(np.uint8)[:n], lambda n: n,
     lambda: None, RUNTIME),
    ("stream closed", lambda n, gi: np.zeros(n, np.uint8), lambda n: n, _closed_stream, RUNTIME),
    ("stream not a Stream", lambda n, gi: np.zeros(n, np.uint8), lambda n: n, lambda: "s",
     INVALID),
]


@pytest.mark.parametrize("api", ["python", "aclnn"])
@pytest.mark.parametrize("repeatable", [False, True])
@pytest.mark.parametrize("failure", FAILURES, ids=[f[0] for f in FAILURES])
def test_failed_launch_writes_nothing_and_keeps_the_executor(setup, failure, repeatable, api):
    g, gi, size, ex = setup
    name, make_ws, make_size, make_stream, status = failure
    if name == "workspace overlaps gradInput" and gi.buffer.nbytes < size:
        # Room for a whole workspace in gradInput's own buffer.
        gi = Guarded(SHAPE_IN, g.dtype, dataclasses.replace(NDHWC, tail=size), fill=np.nan)
        size, ex = tb.get_workspace_size(g, SHAPE_OUT, SHAPE_IN, False, 0.0, 0.0, 0.0, gi.view)
    if repeatable:
        ex.set_repeatable()
    args = (make_ws(size, gi), make_size(size), ex, make_stream())
    if api == "python":
        with pytest.raises(tb.AclnnError) as info:
            tb.execute(*args[:3], stream=args[3])
        assert info.value.status == status
    else:
        assert aclnn.aclnnUpsampleTrilinear3dBackward(*args) == status
    gi.check_untouched()
    assert ex.state == "ready" and ex.repeatable == repeatable
    # Still usable: the next correct launch computes the right result.
    tb.execute(tb.alloc_workspace(size), size, ex)
    assert_matches_reference(gi.view, g, SHAPE_IN)
    gi.check_outside()


@pytest.mark.parametrize("state", ["consumed", "destroyed"])
def test_consumed_or_destroyed_executor_stays_so(setup, state):
    g, gi, size, ex = setup
    ws = tb.alloc_workspace(size)
    if state == "consumed":
        tb.execute(ws, size, ex)
        gi.reset()
    else:
        ex.destroy()
    for launch in (lambda: tb.execute(ws, size, ex), ex.set_repeatable,
                   lambda: ex.update_arrays(grad_input=np.empty_like(gi.view)),
                   lambda: tb.execute(ws, size, ex, stream=tb.Stream())):
        with pytest.raises(tb.ExecutionError) as info:
            launch()
        assert info.value.status == RUNTIME
        assert ex.state == state
    assert aclnn.aclnnUpsampleTrilinear3dBackward(ws, size, ex, None) == RUNTIME
    gi.check_untouched()


def test_failed_update_arrays_changes_nothing(setup):
    g, gi, size, ex = setup
    ex.set_repeatable()
    other = np.zeros(SHAPE_IN, g.dtype)
    bad = [
        dict(grad_input=np.zeros((2, 3, 3, 4, 6), g.dtype)),                  # shape
        dict(grad_input=other),                                                 # strides
        dict(grad_out=g.astype(np.float64)),                                    # dtype
        dict(grad_input=np.zeros(SHAPE_IN, g.dtype).tolist()),                  # a copy
        dict(grad_out=g, grad_input=g[:, :, :3, :4, :5]),                       # a view of gradOut
        dict(grad_out=object()),                                                # junk
    ]
    for kw in bad:
        with pytest.raises(tb.AclnnError) as info:
            ex.update_arrays(**kw)
        assert info.value.status in (INVALID, NULL)
        assert ex.grad_input is not None and np.shares_memory(ex.grad_input, gi.view)
    assert aclnn.aclSetOutputTensorAddr(ex, 0, other) == INVALID
    assert aclnn.aclSetOutputTensorAddr(ex, 1, gi.view) == INVALID
    assert aclnn.aclSetOutputTensorAddr(ex, np.array([0]), gi.view) == INVALID
    assert aclnn.aclSetInputTensorAddr(ex, False, g) == INVALID
    tb.execute(tb.alloc_workspace(size), size, ex)
    assert_matches_reference(gi.view, g, SHAPE_IN)
    gi.check_outside()


def test_stream_job_that_fails_at_start_writes_nothing(setup, torch):
    """A launched job whose gradInput tensor moved before it started fails at synchronize,
    having written nothing (not the old memory, not the new).

    The executor was handed to the stream at launch, so a single-use one is
    consumed by that launch (as documented); a repeatable one stays usable.
    """
    g, _, _, _ = setup
    for repeatable in (True, False):
        gi = torch.full(SHAPE_IN, float("nan"), dtype=getattr(torch, g.dtype.name))
        size, ex = tb.get_workspace_size(g, SHAPE_OUT, SHAPE_IN, False, 0.0, 0.0, 0.0, gi)
        if repeatable:
            ex.set_repeatable()
        stream = tb.Stream()
        started, release = threading.Event(), threading.Event()
        stream._submit(lambda: (started.set(), release.wait()))
        started.wait()
        tb.execute(tb.alloc_workspace(size), size, ex, stream=stream)
        old = gi.clone()
        gi.resize_(gi.numel() * 4)          # reallocates: the bound memory is gone
        gi.fill_(float("nan"))
        release.set()
        assert aclnn.aclrtSynchronizeStream(stream) == RUNTIME
        assert "moved" in aclnn.aclGetRecentErrMsg() or "no longer" in aclnn.aclGetRecentErrMsg()
        assert torch.isnan(gi).all() and torch.isnan(old).all()
        assert ex.state == ("ready" if repeatable else "consumed")
        stream.close()


def test_phase_one_failure_leaves_other_executors_alone(setup):
    """A failed phase one on the same gradInput does not disturb an existing executor."""
    g, gi, size, ex = setup
    with pytest.raises(tb.InvalidArgumentError):
        tb.get_workspace_size(g, SHAPE_OUT, SHAPE_IN, False, 0.0, float("nan"), 0.0, gi.view)
    gi.check_untouched()
    assert ex.state == "ready"
    tb.execute(tb.alloc_workspace(size), size, ex)
    assert_matches_reference(gi.view, g, SHAPE_IN)


def test_one_call_failure_writes_nothing():
    g = random_grad((1, 2) + SHAPE_OUT, "float32", seed=1)
    out = Guarded((1, 2, 3, 4, 5), np.float32, NDHWC, fill=np.nan)
    for kw in (dict(num_threads=0), dict(scales=(1.0, 1.0, 1.0)), dict(align_corners=1),
               dict(output_size=(5, 7, 8))):
        with pytest.raises(tb.InvalidArgumentError):
            tb.upsample_trilinear3d_backward(g, (3, 4, 5), out=out.view, **kw)
        out.check_untouched()

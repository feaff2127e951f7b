"""The edges users touch: one section per guarantee, each test named for the behaviour it holds.

Each test failed on the code before the fix (docs/reliability.md lists the
guarantees and the tests that hold each).
The long stress runs (60 s of enable/disable toggling under load, 2,000
stream batches) are marked ``slow``; ``.ci/run`` runs them.
"""

import copy
import gc
import multiprocessing
import numbers
import os
import pickle
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest
from _hardening import blocked_stream
from conftest import assert_matches_reference, examples, random_grad
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trilinear_bwd as tb
from trilinear_bwd import aclnn

INVALID, RUNTIME = 161002, 361001
STRESS_SECONDS = float(os.environ.get("TRILINEAR_BWD_STRESS_SECONDS", "60"))
STREAM_BATCHES = int(os.environ.get("TRILINEAR_BWD_STREAM_BATCHES", "2000"))


def _phase_one(shape_in=(1, 2, 3, 4, 5), shape_out=(6, 7, 8), dtype=np.float32, seed=0):
    g = random_grad(shape_in[:2] + shape_out, np.dtype(dtype).name, seed=seed)
    gi = np.full(shape_in, np.nan, g.dtype)
    size, ex = tb.get_workspace_size(g, shape_out, shape_in, False, 0.0, 0.0, 0.0, gi)
    return g, gi, size, ex


# -- enable()/disable() toggled under load ---------------------------------

def _toggle_under_load(torch, seconds, min_passes=20):
    """Toggle from one thread while two run F.interpolate(...).backward(); return counts.

    Runs for ``seconds`` and then until each worker has made ``min_passes``
    backward passes and this kernel has computed some of them (up to ten
    times ``seconds``): under a sanitizer or on a busy machine the toggler
    could otherwise take the GIL for the whole time, and the run would show
    nothing.  The toggler lets the GIL go on each state it sets, so the
    workers see it on, off and switching.
    """
    import trilinear_bwd.torch as tbt

    F = torch.nn.functional
    stop = threading.Event()
    errors, runs = [], [0, 0, 0]    # backward passes per worker, toggles
    x = torch.randn(1, 2, 6, 6, 6, requires_grad=True)

    def work(k):
        try:
            while not stop.is_set():
                xx = x.detach().requires_grad_()
                F.interpolate(xx, scale_factor=2, mode="trilinear").sum().backward()
                assert torch.isfinite(xx.grad).all()
                runs[k] += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def toggle():
        while not stop.is_set():
            tbt.enable()
            time.sleep(0)
            with tbt.enabled():
                time.sleep(0)
            tbt.disable()
            time.sleep(0)
            runs[2] += 1

    kernel_before = tbt.call_counts()["kernel"]
    workers = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for w in workers:
        w.start()
    toggler = threading.Thread(target=toggle)
    toggler.start()
    start = time.monotonic()
    while not errors:
        elapsed = time.monotonic() - start
        enough = (min(runs[:2]) >= min_passes
                  and tbt.call_counts()["kernel"] > kernel_before)
        if elapsed >= 10 * seconds or (elapsed >= seconds and enough):
            break
        time.sleep(0.05)
    stop.set()
    toggler.join()
    for w in workers:
        w.join()
    tbt.disable()
    return errors, runs


def _toggle_in_subprocess(seconds):
    """Run the toggling in a fresh interpreter: a crash is a signal, not a dead test run."""
    code = (
        "import sys, torch; sys.path.insert(0, %r); import test_edges as t; "
        "errors, runs = t._toggle_under_load(torch, %r); "
        "import trilinear_bwd.torch as tbt; kernel = tbt.call_counts()['kernel']; "
        "print('backward passes per worker, toggles:', runs, 'by this kernel:', kernel); "
        "sys.exit(1 if errors or min(runs) == 0 or kernel == 0 else 0)"
    ) % (os.path.dirname(__file__), seconds)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=10 * seconds + 120)


def test_toggling_is_a_switch_not_a_registration(torch):
    """enable/disable never touch the dispatcher after import: the registration is one object."""
    import trilinear_bwd.torch as tbt

    lib = tbt._override._library
    for _ in range(100):
        tbt.enable()
        tbt.disable()
    assert tbt._override._library is lib and not tbt.is_enabled()
    # Off: the registered kernel hands the call to PyTorch's (same result, no kernel count).
    x = torch.randn(1, 1, 3, 4, 5, dtype=torch.float64, requires_grad=True)
    before = tbt.call_counts()
    torch.nn.functional.interpolate(x, size=(5, 6, 7), mode="trilinear").sum().backward()
    assert tbt.call_counts() == before


@pytest.mark.slow
def test_toggling_under_load_short(torch):
    result = _toggle_in_subprocess(5)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr[-2000:])


@pytest.mark.slow
def test_toggling_under_load_60s(torch):
    result = _toggle_in_subprocess(STRESS_SECONDS)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr[-2000:])


# -- writes into torch tensors bump their version --------------------------

def _backward_refuses(loss):
    """PyTorch's own check: backward() through an overwritten saved tensor raises."""
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()

def _saved_tensor_case(torch):
    w = torch.ones(1, 1, 2, 2, 2, requires_grad=True)
    t = torch.full((1, 1, 2, 2, 2), 3.0)
    loss = (t * w).sum()     # saves t for backward
    return t, loss


def test_one_call_out_bumps_the_tensors_version(torch):
    t, loss = _saved_tensor_case(torch)
    v = t._version
    tb.upsample_trilinear3d_backward(torch.ones(1, 1, 4, 4, 4), (2, 2, 2), out=t)
    assert t._version > v
    _backward_refuses(loss)


@pytest.mark.parametrize("stream", [False, True])
def test_execute_bumps_grad_inputs_version_every_run(torch, stream):
    t, loss = _saved_tensor_case(torch)
    size, ex = tb.get_workspace_size(torch.ones(1, 1, 4, 4, 4), (4, 4, 4), (1, 1, 2, 2, 2),
                                     False, 0.0, 0.0, 0.0, t)
    ex.set_repeatable()
    ws = tb.alloc_workspace(size)
    versions = [t._version]
    s = tb.Stream() if stream else None
    for _ in range(3):
        tb.execute(ws, size, ex, stream=s)
        if s is not None:
            s.synchronize()
        versions.append(t._version)
    assert versions == sorted(set(versions)), versions   # strictly increasing
    _backward_refuses(loss)


def test_a_detached_view_out_bumps_its_bases_version(torch):
    t, loss = _saved_tensor_case(torch)
    v = t._version
    tb.upsample_trilinear3d_backward(torch.ones(1, 1, 4, 4, 4), (2, 2, 2), out=t.detach())
    assert t._version > v
    _backward_refuses(loss)


# -- the one call checks overlap on the caller's own (misaligned) array ------

def test_misaligned_grad_out_overlapping_out_is_refused():
    buf = np.zeros(4 * 4 * 4 * 4 * 2 + 8, np.uint8)
    g = np.frombuffer(buf.data, np.float32, count=64, offset=1).reshape(1, 1, 4, 4, 4)
    g_before = g.copy()
    assert not g.flags.aligned
    out = np.frombuffer(buf.data, np.float32, count=8, offset=4).reshape(1, 1, 2, 2, 2)
    out.flags.writeable = True
    with pytest.raises(tb.InvalidArgumentError, match="overlap") as info:
        tb.upsample_trilinear3d_backward(g, (2, 2, 2), out=out)
    assert info.value.status == INVALID
    assert np.array_equal(g, g_before)


def test_misaligned_grad_out_elsewhere_still_works():
    buf = np.zeros(64 * 4 + 1, np.uint8)
    g = np.frombuffer(buf.data, np.float32, count=64, offset=1).reshape(1, 1, 4, 4, 4)
    out = np.empty((1, 1, 2, 2, 2), np.float32)
    tb.upsample_trilinear3d_backward(g, (2, 2, 2), out=out)
    assert_matches_reference(out, g.copy(), (1, 1, 2, 2, 2))


# -- tensor states DLPack does not carry -------

def _neg(torch, shape):
    return torch._neg_view(torch.rand(shape))


def _conj_imag(torch, shape):
    return torch.ones(shape, dtype=torch.complex64).conj().imag


@pytest.mark.parametrize("make", [_neg, _conj_imag], ids=["neg_view", "conj_imag"])
@pytest.mark.parametrize("role", ["gradOut", "gradInput"])
def test_negative_and_conjugate_bits_are_refused(torch, make, role):
    assert make(torch, (2,)).is_neg()
    g = torch.rand(1, 1, 4, 4, 4)
    out = torch.zeros(1, 1, 2, 2, 2)
    if role == "gradOut":
        g = make(torch, (1, 1, 4, 4, 4))
    else:
        out = make(torch, (1, 1, 2, 2, 2))
    before = out.clone()
    with pytest.raises(tb.InvalidArgumentError, match="bit set") as info:
        tb.upsample_trilinear3d_backward(g, (2, 2, 2), out=out)
    assert info.value.status == INVALID
    assert torch.equal(out.resolve_neg(), before.resolve_neg())
    status, _, _ = aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(
        g, [4, 4, 4], [1, 1, 2, 2, 2], False, 0.0, 0.0, 0.0, out)
    assert status == INVALID


def test_enable_falls_back_to_torch_for_a_negative_view(torch):
    """Through enable(), a refused tensor state goes to PyTorch's kernel: the right sign."""
    import trilinear_bwd.torch as tbt

    g = torch._neg_view(torch.rand(1, 2, 4, 4, 4, dtype=torch.float64))
    expected = torch.ops.aten.upsample_trilinear3d_backward(
        g.resolve_neg(), (4, 4, 4), (1, 2, 2, 2, 2), False, None, None, None)
    with tbt.enabled():
        got = torch.ops.aten.upsample_trilinear3d_backward(
            g, (4, 4, 4), (1, 2, 2, 2, 2), False, None, None, None)
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_a_zero_tensor_reads_as_zeros(torch, dtype):
    z = torch._efficientzerotensor((1, 2, 4, 4, 4), dtype=getattr(torch, dtype))
    assert z.data_ptr() == 0
    out = torch.full((1, 2, 2, 2, 2), float("nan"), dtype=getattr(torch, dtype))
    tb.upsample_trilinear3d_backward(z, (2, 2, 2), out=out)
    assert (out == 0).all()


def test_a_zero_tensor_as_output_is_refused(torch):
    z = torch._efficientzerotensor((1, 1, 2, 2, 2))
    with pytest.raises(tb.InvalidArgumentError, match="zero tensor"):
        tb.upsample_trilinear3d_backward(torch.ones(1, 1, 4, 4, 4), (2, 2, 2), out=z)


def test_a_fake_tensor_is_refused(torch):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.ones(1, 1, 4, 4, 4)
    with pytest.raises(tb.InvalidArgumentError, match="memory"):
        tb.upsample_trilinear3d_backward(fake, (2, 2, 2))
    out = np.empty((1, 1, 2, 2, 2), np.float32)
    with pytest.raises(tb.InvalidArgumentError):
        tb.get_workspace_size(fake, (4, 4, 4), (1, 1, 2, 2, 2), False, 0.0, 0.0, 0.0, out)


def test_an_inference_tensor_is_written_only_in_inference_mode(torch):
    with torch.inference_mode():
        out = torch.zeros(1, 1, 2, 2, 2)
    g = torch.ones(1, 1, 4, 4, 4)
    with pytest.raises(tb.InvalidArgumentError, match="inference"):
        tb.upsample_trilinear3d_backward(g, (2, 2, 2), out=out)
    with torch.inference_mode():
        tb.upsample_trilinear3d_backward(g, (2, 2, 2), out=out)
    assert (out == 8).all()


def test_storage_resized_after_phase_one_is_refused_at_run(torch):
    out = torch.zeros(1, 1, 2, 2, 2)
    g = torch.ones(1, 1, 4, 4, 4)
    size, ex = tb.get_workspace_size(g, (4, 4, 4), (1, 1, 2, 2, 2), False, 0.0, 0.0, 0.0, out)
    ex.set_repeatable()
    ws = tb.alloc_workspace(size)
    tb.execute(ws, size, ex)
    assert (out == 8).all()
    out.resize_(10_000)          # reallocates: the memory the executor was bound to is freed
    out.zero_()
    with pytest.raises(tb.ExecutionError, match="no longer uses the memory") as info:
        tb.execute(ws, size, ex)
    assert info.value.status == RUNTIME
    assert (out == 0).all()
    ex.update_arrays(grad_input=out[:8].view(1, 1, 2, 2, 2))   # bind it again: runs
    tb.execute(ws, size, ex)
    assert (out[:8] == 8).all() and (out[8:] == 0).all()


# Hypothesis over torch tensors: random strides (permutations, steps), storage
# offsets, dtypes, requires_grad and flags; each call either matches NumPy's
# answer on a copy or is refused with 161002, never anything else.

_TORCH_DTYPES = ["float32", "float64", "float16", "bfloat16"]


@st.composite
def _torch_cases(draw):
    dtype = draw(st.sampled_from(_TORCH_DTYPES))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    ins = tuple(draw(st.integers(1, 4)) for _ in range(3))
    outs = tuple(draw(st.integers(1, 6)) for _ in range(3))
    perm = tuple(draw(st.permutations(range(5))))
    step = draw(st.sampled_from([1, 1, 2]))
    offset = draw(st.integers(0, 3))
    flag = draw(st.sampled_from(["plain", "plain", "requires_grad", "neg", "zero"]))
    out_kind = draw(st.sampled_from(["none", "contiguous", "channels_last", "strided"]))
    return dtype, (n, c) + outs, (n, c) + ins, perm, step, offset, flag, out_kind


def _strided_tensor(torch, values, perm, step, offset):
    """A view of ``values`` with the axes stored in ``perm`` order, gaps and an offset."""
    shape = values.shape
    stored_shape = [shape[p] for p in perm]
    stored_shape[-1] *= step
    base = torch.zeros(offset + int(np.prod(stored_shape)), dtype=values.dtype)
    view = base[offset:].view(stored_shape)
    if step > 1:
        view = view[..., ::step]
    inverse = np.argsort(perm)
    view = view.permute(*inverse.tolist())
    view.copy_(values)
    return view


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_torch_cases(), seed=st.integers(0, 2**16))
def test_fuzz_torch_tensors(torch, case, seed):
    dtype, gshape, ishape, perm, step, offset, flag, out_kind = case
    tdtype = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(seed)
    values = torch.randn(gshape, generator=gen, dtype=torch.float32).to(tdtype)
    g = _strided_tensor(torch, values, perm, step, offset)
    if flag == "requires_grad":
        g.requires_grad_(True)
    elif flag == "neg":
        g = torch._neg_view(g)
    elif flag == "zero":
        g = torch._efficientzerotensor(gshape, dtype=tdtype)
    out = None
    if out_kind == "contiguous":
        out = torch.full(ishape, float("nan"), dtype=tdtype)
    elif out_kind == "channels_last":
        out = torch.full(ishape, float("nan"), dtype=tdtype).contiguous(
            memory_format=torch.channels_last_3d)
    elif out_kind == "strided":
        out = torch.full(ishape[:4] + (ishape[4] * 2,), float("nan"), dtype=tdtype)[..., ::2]
    try:
        got = tb.upsample_trilinear3d_backward(g, ishape, out=out)
    except tb.InvalidArgumentError as exc:
        assert flag == "neg", f"refused a valid call: {exc}"
        return
    assert flag != "neg", "a negative view was accepted"
    if out is not None:
        got = out
    assert isinstance(got, torch.Tensor), "a torch tensor in, a torch tensor out"
    got = got.detach().double().numpy()
    expect_values = (torch.zeros(gshape) if flag == "zero" else values.float())
    if dtype == "float64":
        expect_values = values if flag != "zero" else torch.zeros(gshape, dtype=torch.float64)
    expected = tb.upsample_trilinear3d_backward(
        np.ascontiguousarray(expect_values.detach().numpy()), ishape)
    tol = {"float32": 1e-5, "float64": 1e-12, "float16": 2e-2, "bfloat16": 2e-2}[dtype]
    np.testing.assert_allclose(np.asarray(got, np.float64), expected.astype(np.float64),
                               rtol=tol, atol=tol * (1 + np.abs(expected).max()))


# -- runs queued on one stream all run, in order, with their own arrays -------

def test_stream_runs_a_repeatable_executor_launched_many_times():
    """The docs' pattern: launch; update_arrays; launch ... then synchronize. Nothing dropped."""
    g = random_grad((1, 2, 6, 6, 6), "float32", seed=3)
    batches = 200
    grads = [g * (k + 1) for k in range(4)]
    outs = [np.full((1, 2, 3, 3, 3), np.nan, np.float32) for _ in range(4)]
    size, ex = tb.get_workspace_size(grads[0], (6, 6, 6), (1, 2, 3, 3, 3), False, 0.0, 0.0,
                                     0.0, outs[0])
    ex.set_repeatable()
    ws = [tb.alloc_workspace(size) for _ in range(4)]
    expected = [tb.upsample_trilinear3d_backward(x, (3, 3, 3)) for x in grads]
    with tb.Stream() as stream:
        for _ in range(batches):
            for o in outs:
                o[...] = np.nan
            for k in range(4):
                ex.update_arrays(grad_out=grads[k], grad_input=outs[k])
                tb.execute(ws[k], size, ex, stream=stream)
            stream.synchronize()
            for k in range(4):
                assert np.array_equal(outs[k], expected[k])


def _stream_batches(batches, seed=0):
    """Several threads launch onto one stream with update_arrays between; each batch checked."""
    rng = np.random.default_rng(seed)
    g = random_grad((2, 2, 5, 6, 7), "float32", seed=5)
    size, ex = tb.get_workspace_size(g, (5, 6, 7), (2, 2, 3, 3, 4), False, 0.0, 0.0, 0.0,
                                     np.empty((2, 2, 3, 3, 4), np.float32))
    ex.set_repeatable()
    expected = tb.upsample_trilinear3d_backward(g, (3, 3, 4))
    stream = tb.Stream()
    failures = []
    for b in range(batches):
        outs = [np.full(expected.shape, np.nan, np.float32) for _ in range(int(rng.integers(1, 4)))]
        lock = threading.Lock()

        def launch(o):
            try:
                with lock:   # update_arrays + launch as one step per thread
                    ex.update_arrays(grad_input=o)
                    tb.execute(tb.alloc_workspace(size), size, ex, stream=stream)
            except BaseException as exc:  # noqa: BLE001
                failures.append(exc)

        threads = [threading.Thread(target=launch, args=(o,)) for o in outs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stream.synchronize()
        for o in outs:
            if not np.array_equal(o, expected):
                failures.append(f"batch {b}: a run was dropped or wrong")
    stream.close()
    return failures


def test_stream_runs_batches_from_threads_in_order_short():
    assert _stream_batches(100) == []


@pytest.mark.slow
def test_stream_runs_batches_from_threads_in_order_2000():
    assert _stream_batches(STREAM_BATCHES, seed=1) == []


def test_stream_update_arrays_and_destroy_never_wait_for_a_queued_run():
    g, gi, size, ex = _phase_one()
    ex.set_repeatable()
    stream = tb.Stream()
    release = blocked_stream(stream)
    tb.execute(tb.alloc_workspace(size), size, ex, stream=stream)
    other = np.full_like(gi, np.nan)
    ex.update_arrays(grad_input=other)     # the queued run keeps the array it was launched with
    ex.destroy()                            # and survives the executor's destruction
    release.set()
    stream.synchronize()
    assert_matches_reference(gi, g, gi.shape)
    assert np.isnan(other).all()
    stream.close()


# Hypothesis over the stream lifecycle: random sequences of launch /
# update_arrays / synchronize / destroy from several threads, checked against
# a sequential model of what each launch must write.

@settings(max_examples=examples(40), deadline=None)
@given(ops=st.lists(st.sampled_from(["launch", "launch", "update", "sync", "destroy",
                                     "execute"]), min_size=1, max_size=25),
       threads=st.integers(1, 3))
def test_fuzz_stream_lifecycle(ops, threads):
    g = random_grad((1, 2, 4, 5, 6), "float32", seed=9)
    expected = tb.upsample_trilinear3d_backward(g, (2, 3, 3))
    targets = [np.full(expected.shape, np.nan, np.float32) for _ in range(3)]
    size, ex = tb.get_workspace_size(g, (4, 5, 6), expected.shape, False, 0.0, 0.0, 0.0,
                                     targets[0])
    ex.set_repeatable()
    stream = tb.Stream()
    model_lock = threading.Lock()
    state = {"bound": 0, "destroyed": False, "launched": set()}

    def step(op, k):
        with model_lock:
            if op == "launch" or op == "execute":
                try:
                    tb.execute(tb.alloc_workspace(size), size, ex,
                               stream=stream if op == "launch" else None)
                    assert not state["destroyed"]
                    state["launched"].add(state["bound"])
                except tb.ExecutionError as exc:
                    assert state["destroyed"] or "running" in str(exc), exc
            elif op == "update":
                try:
                    ex.update_arrays(grad_input=targets[k % 3])
                    assert not state["destroyed"]
                    state["bound"] = k % 3
                except tb.ExecutionError:
                    assert state["destroyed"]
            elif op == "destroy":
                ex.destroy()
                state["destroyed"] = True
        if op == "sync":
            stream.synchronize()

    chunks = [ops[i::threads] for i in range(threads)]
    workers = [threading.Thread(target=lambda c=c, t=t: [step(op, t + 3 * i)
                                                         for i, op in enumerate(c)])
               for t, c in enumerate(chunks)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stream.synchronize()
    stream.close()
    for k, t in enumerate(targets):
        if k in state["launched"]:
            assert np.array_equal(t, expected), f"target {k}: a launched run is missing"
        else:
            assert np.isnan(t).all(), f"target {k} was written but never launched"


# -- streams after fork --------------------------------------------------------

def _child_uses_stream(conn, stream, size, ex_args):
    try:
        g, shape_in = ex_args
        gi = np.full(shape_in, np.nan, np.float32)
        size, ex = tb.get_workspace_size(g, g.shape[2:], shape_in, False, 0.0, 0.0, 0.0, gi)
        lost = None
        try:
            stream.synchronize()
        except tb.ExecutionError as exc:
            lost = str(exc)
        tb.execute(tb.alloc_workspace(size), size, ex, stream=stream)
        stream.synchronize()
        conn.send(("ok", bool(np.isfinite(gi).all()), lost))
    except BaseException as exc:  # noqa: BLE001
        conn.send(("error", repr(exc), None))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
@pytest.mark.parametrize("pending", [False, True])
def test_a_stream_works_in_a_forked_child(pending):
    g, gi, size, ex = _phase_one()
    ex.set_repeatable()
    stream = tb.Stream()
    tb.execute(tb.alloc_workspace(size), size, ex, stream=stream)
    stream.synchronize()                       # the worker thread exists now
    release = threading.Event()
    if pending:
        stream._submit(lambda: release.wait())  # still queued when the child is forked
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    with pytest.warns(DeprecationWarning) if sys.version_info >= (3, 12) else _nothing():
        proc = ctx.Process(target=_child_uses_stream,
                           args=(child, stream, size, (np.ascontiguousarray(g), gi.shape)))
        proc.start()
    assert parent.poll(60), "the child hung"
    status, finite, lost = parent.recv()
    proc.join(10)
    release.set()
    stream.close()
    assert status == "ok" and finite, (status, finite)
    assert (lost is not None) == pending
    if pending:
        assert "before fork" in lost


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# -- NaN and Inf exactly where PyTorch makes them --------------------------------

@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("layout", ["ncdhw", "ndhwc"])
def test_nan_inf_pattern_matches_torch_on_random_cases(torch, dtype, layout):
    rng = np.random.default_rng({"float64": 1, "float32": 2}[dtype] + (layout == "ndhwc"))
    for _ in range(400):
        ins = tuple(int(v) for v in rng.integers(1, 9, 3))
        outs = tuple(int(v) for v in rng.integers(1, 13, 3))
        ac = bool(rng.integers(2))
        scales = (0.0, 0.0, 0.0)
        if not ac and rng.integers(3) == 0:
            scales = tuple(o / i if rng.integers(2) else 0.0 for i, o in zip(ins, outs))
        c = int(rng.integers(1, 4))
        g = rng.standard_normal((1, c) + outs).astype(dtype)
        for _ in range(3):
            g[tuple(int(rng.integers(n)) for n in g.shape)] = rng.choice([np.inf, -np.inf])
        t = torch.from_numpy(g)
        if layout == "ndhwc":
            t = t.contiguous(memory_format=torch.channels_last_3d)
        ref = torch.ops.aten.upsample_trilinear3d_backward(
            t, outs, (1, c) + ins, ac, *[s or None for s in scales]).numpy()
        got = tb.upsample_trilinear3d_backward(t.numpy() if layout == "ncdhw" else
                                               t.permute(0, 2, 3, 4, 1).numpy().transpose(
                                                   0, 4, 1, 2, 3),
                                               (1, c) + ins, align_corners=ac, scales=scales)
        where = f"{ins} <- {outs} ac={ac} scales={scales}"
        assert np.array_equal(np.isnan(got), np.isnan(ref)), where
        assert np.array_equal(np.isposinf(got), np.isposinf(ref)), where
        assert np.array_equal(np.isneginf(got), np.isneginf(ref)), where


def test_nan_inf_pattern_of_a_single_inf_matches_torch(torch):
    g = np.zeros((1, 1, 5, 2, 2))
    g[0, 0, 2, 0, 0] = np.inf
    ref = torch.ops.aten.upsample_trilinear3d_backward(
        torch.from_numpy(g), (5, 2, 2), (1, 1, 1, 4, 4), False, None, None, None).numpy()
    got = tb.upsample_trilinear3d_backward(g, (1, 1, 1, 4, 4))
    assert np.isposinf(ref).sum() == 4
    np.testing.assert_array_equal(got, ref)


# -- destroy() releases what the executor holds -----------------------------------

@pytest.mark.parametrize("api", ["method", "aclnn"])
def test_destroy_releases_the_arrays(api):
    g, gi, size, ex = _phase_one()
    refs = [weakref.ref(g), weakref.ref(gi)]
    if api == "method":
        ex.destroy()
    else:
        assert aclnn.aclDestroyAclOpExecutor(ex) == 0
    del g, gi
    gc.collect()
    assert all(r() is None for r in refs), "a destroyed executor still holds its arrays"
    assert ex.state == "destroyed" and ex.grad_out is None and "destroyed" in repr(ex)
    with pytest.raises(tb.ExecutionError, match="destroyed"):
        tb.execute(None, size, ex)


# -- conversions that raise, and unordered containers ----------------------------

class _BadIntegral(numbers.Integral):
    """An Integral whose conversions all raise (registered through the ABC)."""

    def __int__(self):
        raise RuntimeError("no int for you")

    __index__ = __int__

    def __repr__(self):
        raise RuntimeError("no repr either")

    # The abstract methods, none of them usable.
    def _nope(self, *a):
        raise RuntimeError("no arithmetic")

    (__abs__, __add__, __and__, __ceil__, __eq__, __floor__, __floordiv__, __invert__,
     __le__, __lshift__, __lt__, __mod__, __mul__, __neg__, __or__, __pos__, __pow__,
     __radd__, __rand__, __rfloordiv__, __rlshift__, __rmod__, __rmul__, __ror__,
     __round__, __rpow__, __rrshift__, __rshift__, __rtruediv__, __rxor__, __truediv__,
     __trunc__, __xor__) = (_nope,) * 33
    __hash__ = object.__hash__


class _BadReal(numbers.Real):
    """A Real whose float() raises."""

    def __float__(self):
        raise RuntimeError("no float for you")

    def _nope(self, *a):
        raise RuntimeError("no arithmetic")

    (__abs__, __add__, __ceil__, __eq__, __floor__, __floordiv__, __le__, __lt__, __mod__,
     __mul__, __neg__, __pos__, __pow__, __radd__, __rfloordiv__, __rmod__, __rmul__,
     __round__, __rpow__, __rtruediv__, __truediv__, __trunc__) = (_nope,) * 22
    __hash__ = object.__hash__


def _two_phase(**kw):
    args = dict(gradOut=np.ones((1, 1, 4, 4, 4), np.float32), outputSize=[4, 4, 4],
                inputSize=[1, 1, 2, 2, 2], alignCorners=False, scalesD=0.0, scalesH=0.0,
                scalesW=0.0, gradInput=np.zeros((1, 1, 2, 2, 2), np.float32))
    args.update(kw)
    return aclnn.aclnnUpsampleTrilinear3dBackwardGetWorkspaceSize(*args.values())[0]


@pytest.mark.parametrize("kw", [
    dict(outputSize=[4, _BadIntegral(), 4]),
    dict(inputSize=[1, 1, 2, _BadIntegral(), 2]),
    dict(scalesH=_BadReal()),
    dict(outputSize={4, 5, 6}),
    dict(outputSize={4: 0, 5: 0, 6: 0}),
    dict(outputSize=iter([4, 4, 4])),
    dict(inputSize=(n for n in [1, 1, 2, 2, 2])),
    dict(outputSize="444"),
])
def test_conversion_unconvertible_arguments_are_161002(kw):
    assert _two_phase(**kw) == INVALID


@pytest.mark.parametrize("kw", [
    dict(input_size={2, 3, 4}), dict(input_size=[2, _BadIntegral(), 2]),
    dict(scales=[0.0, _BadReal(), 0.0]), dict(num_threads=_BadIntegral()),
    dict(scales={0.0, 1.0, 2.0}),
])
def test_conversion_errors_in_the_one_call_are_161002(kw):
    args = dict(input_size=(2, 2, 2))
    args.update(kw)
    with pytest.raises(tb.InvalidArgumentError) as info:
        tb.upsample_trilinear3d_backward(np.ones((1, 1, 4, 4, 4), np.float32), **args)
    assert info.value.status == INVALID


def test_conversion_errors_in_phase_two_are_161002():
    g, gi, size, ex = _phase_one()
    with pytest.raises(tb.InvalidArgumentError):
        tb.execute(tb.alloc_workspace(size), _BadIntegral(), ex)
    with pytest.raises(tb.InvalidArgumentError):
        tb.alloc_workspace(_BadIntegral())
    assert aclnn.aclSetOutputTensorAddr(ex, _BadIntegral(), gi) == INVALID


# -- the command line --------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["-i", "0,8,8"], ["-t", "0"], ["-n", "-1"], ["-c", "0"], ["--seed", "-1"],
    ["-n", "100000", "-c", "100000"], ["-i", "a,b,c"], ["-r", "0"], ["-i", "-4,8,8"],
    ["-o", "x"], ["--threads", "two"],
])
def test_cli_bad_options_are_one_line_and_status_2(argv):
    result = subprocess.run([sys.executable, "-m", "trilinear_bwd", "--no-check", *argv],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0], result.stderr
    assert "Traceback" not in result.stderr and "_triple" not in result.stderr


def test_cli_negative_looking_value_is_read_as_the_value():
    result = subprocess.run([sys.executable, "-m", "trilinear_bwd", "-i", "-4,8,8"],
                            capture_output=True, text=True, timeout=120)
    assert "expected one argument" not in result.stderr
    assert "-4,8,8" in result.stderr


# -- copies of executors and streams; F-contiguous workspaces -----------------

@pytest.mark.parametrize("how", [copy.copy, copy.deepcopy, pickle.dumps])
def test_executor_and_stream_cannot_be_copied(how):
    g, gi, size, ex = _phase_one()
    tb.execute(tb.alloc_workspace(size), size, ex)      # consumed
    with pytest.raises(tb.ExecutionError, match="cannot be copied"):
        how(ex)
    with pytest.raises(tb.ExecutionError, match="cannot be copied"):
        how(tb.Stream())


def test_fortran_ordered_workspace_is_one_block():
    g, gi, size, ex = _phase_one()
    ws = np.asfortranarray(np.empty((size // 8 + 8, 8), np.uint8)) if size else None
    assert ws is None or (ws.flags.f_contiguous and not ws.flags.c_contiguous)
    tb.execute(ws, size, ex)
    assert_matches_reference(gi, g, gi.shape)


def test_conversion_errors_in_the_torch_entry_are_161002(torch):
    import trilinear_bwd.torch as tbt

    g = torch.ones(1, 1, 4, 4, 4)
    for kw in (dict(input_size=[1, 1, 2, _BadIntegral(), 2]),
               dict(output_size=[4, _BadIntegral(), 4]),
               dict(scales_h=_BadReal()), dict(input_size={1, 2, 3, 4, 5})):
        args = dict(output_size=(4, 4, 4), input_size=(1, 1, 2, 2, 2), align_corners=False)
        args.update(kw)
        with pytest.raises(tb.InvalidArgumentError):
            tbt.upsample_trilinear3d_backward(g, **args)

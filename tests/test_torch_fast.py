"""The enabled path's per-geometry fast path: the same bits as the careful path, keyed on
metadata only, and every per-call fact (alignment, fresh result) checked on every call.

No timings here (docs/performance.md has them).
"""

import os
import signal
import threading

import pytest

import trilinear_bwd

torch = pytest.importorskip("torch")
F = torch.nn.functional
tbt = pytest.importorskip("trilinear_bwd.torch")
from trilinear_bwd.torch import _cache, _dropin, _fast, _pytorch  # noqa: E402
from _hardening import forks_while_threads_allocate  # noqa: E402

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
LAYOUTS = ["NCDHW", "NDHWC"]
OPS = ["forward", "backward"]


@pytest.fixture(autouse=True)
def fresh_geometries():
    _cache.forget()
    tbt.enable()
    yield
    tbt.disable()
    _cache.forget()


def _tensor(shape, dtype, layout, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    if layout == "NDHWC":
        t = t.contiguous(memory_format=torch.channels_last_3d)
    return t


def _call(op, t, size=(6, 8, 10), align_corners=False, scales=(None, None, None)):
    """The aten operator ``op`` as autograd calls it, on ``t`` (x, or grad_out)."""
    if op == "forward":
        return torch.ops.aten.upsample_trilinear3d(t, size, align_corners, *scales)
    return torch.ops.aten.upsample_trilinear3d_backward(
        t, tuple(t.shape[2:]), tuple(t.shape[:2]) + size, align_corners, *scales)


def _source(op, dtype, layout, n=2, c=3):
    # forward reads x (N, C, 3, 4, 5) -> (6, 8, 10); backward reads a grad_out
    # (N, C, 9, 11, 13) into (N, C, 6, 8, 10) (a downsample, every weight used).
    spatial = (3, 4, 5) if op == "forward" else (9, 11, 13)
    return _tensor((n, c) + spatial, dtype, layout)


def _counted(op):
    return "forward" if op == "forward" else "kernel"


@pytest.fixture
def no_careful_path(monkeypatch):
    """Fail if a call validates or plans again (a geometry already checked must not)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the careful path ran for a geometry already checked")

    def arm():
        for name in ("run", "as_array", "check"):
            monkeypatch.setattr(_cache, name, refuse)
    return arm


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("align_corners", [False, True])
def test_hot_calls_give_the_cold_calls_bits(op, layout, dtype, align_corners,
                                            no_careful_path):
    t = _source(op, dtype, layout)
    before = tbt.call_counts()[_counted(op)]
    cold = _call(op, t, align_corners=align_corners)
    assert len(_cache.geometries) == 1
    no_careful_path()
    for _ in range(3):
        hot = _call(op, t.clone(memory_format=torch.preserve_format),
                    align_corners=align_corners)
        assert hot.dtype == cold.dtype and hot.shape == cold.shape
        assert hot.stride() == cold.stride()
        assert torch.equal(hot, cold)
        assert hot.data_ptr() != cold.data_ptr()          # a fresh result every call
    assert tbt.call_counts()[_counted(op)] - before == 4


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("change", ["shape", "strides", "dtype", "sizes", "align_corners",
                                    "scales", "threads"])
def test_a_changed_geometry_misses(op, change):
    t = _source(op, torch.float32, "NCDHW")
    kwargs = {}
    _call(op, t)
    _call(op, t)          # found in the cache: now the fast path's last hit too
    assert len(_cache.geometries) == 1
    if change == "shape":
        t = _source(op, torch.float32, "NCDHW", n=1)
    elif change == "strides":
        t = t.contiguous(memory_format=torch.channels_last_3d)
    elif change == "dtype":
        t = t.double()
    elif change == "sizes":
        kwargs["size"] = (7, 8, 10)
    elif change == "align_corners":
        kwargs["align_corners"] = True
    elif change == "scales":
        if op == "forward":
            kwargs["scales"] = (2.0, 2.0, 2.0)
        else:
            kwargs["scales"] = (6 / 9, 8 / 11, 10 / 13)
    if change == "threads":
        # Another OpenMP default, as threadpoolctl or torch.set_num_threads sets it.
        threadpoolctl = pytest.importorskip("threadpoolctl")
        other = trilinear_bwd._kernels._native.effective_n_threads(None) + 1
        with threadpoolctl.threadpool_limits(limits=other, user_api="openmp"):
            assert trilinear_bwd._kernels._native.effective_n_threads(None) == other
            got = _call(op, t, **kwargs)
    else:
        got = _call(op, t, **kwargs)
    assert len(_cache.geometries) == 2
    # The miss computed its own geometry: PyTorch's kernel agrees within rounding.
    tbt.disable()
    want = _call(op, t.double(), **kwargs)
    tbt.enable()
    assert got.shape == want.shape and got.dtype == t.dtype
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("op", OPS)
def test_a_misaligned_source_of_a_known_geometry_is_checked_every_call(op, dtype,
                                                                      monkeypatch):
    """Same metadata, another address: alignment is a per-call fact, never cached."""
    careful = []
    real = _cache.run
    monkeypatch.setattr(_cache, "run", lambda *a, **k: careful.append(1) or real(*a, **k))
    aligned = _source(op, dtype, "NCDHW")
    cold = _call(op, aligned)
    n = aligned.numel()
    raw = bytearray(n * dtype.itemsize + 1)
    flat = torch.frombuffer(raw, dtype=dtype, offset=1, count=n)
    misaligned = flat.view(aligned.shape)
    misaligned.copy_(aligned)
    assert misaligned.data_ptr() % dtype.itemsize and misaligned.stride() == aligned.stride()
    before = tbt.call_counts()[_counted(op)]
    assert len(careful) == 1
    got = _call(op, misaligned)
    assert len(careful) == 2                     # the careful path (it copies), not the cache
    assert torch.equal(got, cold)
    assert tbt.call_counts()[_counted(op)] - before == 1
    assert _call(op, aligned).equal(cold)        # the geometry still serves aligned calls
    assert len(careful) == 2


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", OPS)
def test_a_team_of_two_runs_through_the_c_entry_point(op, layout):
    """A remembered geometry's team of several starts OpenMP from the variant's
    C entry point (``RUN_TEAM``): the same bits as its team of one."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    n, c = 2, 16
    results = {}
    for threads in (1, 2):
        _cache.forget()
        with threadpoolctl.threadpool_limits(limits=threads, user_api="openmp"):
            # About a megabyte moved: a team of two where two are asked for.
            t = _tensor((n, c) + ((16, 20, 24) if op == "backward" else (8, 10, 12)),
                        torch.float32, layout, seed=3)
            size = (8, 10, 12) if op == "backward" else (16, 20, 24)
            _call(op, t, size=size)
            (geometry,) = _cache.geometries.values()
            assert geometry.threads == threads
            before = tbt.call_counts()[_counted(op)]
            results[threads] = _call(op, t, size=size)
            assert tbt.call_counts()[_counted(op)] == before + 1
    assert torch.equal(results[1], results[2])


def test_a_geometry_refuses_what_would_crash_its_kernel():
    from trilinear_bwd._core import _operator, _runner

    x = torch.rand(1, 1, 2, 2, 2)
    call = _operator.check(_operator.FORWARD, x.numpy(), torch.empty(1, 1, 4, 4, 4).numpy(),
                           (4, 4, 4), None, False, (0.0, 0.0, 0.0))
    runner = _runner.prepare(call, 1)
    good = dict(runner=runner, shape=(1,), strides=(1,), itemsize=4, threads=1,
                allocate=None, allocate_args=())
    geometry = _fast.Geometry(**good)
    # Filled once: a second __init__ changes nothing (a run may be using it).
    geometry.__init__(**{**good, "shape": (2,), "threads": 2})
    assert geometry.shape == (1,) and geometry.threads == 1
    for bad in ({"itemsize": 0}, {"threads": 0}):
        with pytest.raises(ValueError, match="out of range"):
            _fast.Geometry(**{**good, **bad})
    with pytest.raises(TypeError):
        _fast.Geometry(**{**good, "runner": None})


@pytest.mark.parametrize("op", OPS)
def test_results_are_fresh_writable_and_alias_nothing(op):
    t = _source(op, torch.float32, "NDHWC")
    results = [_call(op, t) for _ in range(4)]
    spans = [(r.data_ptr(), r.data_ptr() + r.numel() * 4) for r in results]
    spans.append((t.data_ptr(), t.data_ptr() + t.numel() * 4))
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))     # no overlap at all
    first = results[0].clone()
    results[1].fill_(7.0)                          # writable, and writing one ...
    assert torch.equal(results[0], first)          # ... leaves the others alone
    assert torch.equal(results[2], first)
    # Small results copy a template's metadata; none lies in its storage,
    # and each owns a storage of its own size, resizable as PyTorch's are.
    template = _cache._template_storage
    assert template is not None
    shared = (template.data_ptr(), template.data_ptr() + template.nbytes())
    for r in results:
        storage = r.untyped_storage()
        assert storage.nbytes() == r.numel() * 4 and storage.data_ptr() == r.data_ptr()
        assert not shared[0] <= r.data_ptr() < shared[1]
    results[3].resize_(2, 3)
    assert results[3].shape == (2, 3)


@pytest.mark.parametrize("op", OPS)
def test_a_refused_geometry_goes_to_pytorch_every_time(op, no_careful_path):
    """Scales inconsistent with the sizes: PyTorch's kernel, counted, the refusal remembered."""
    t = _source(op, torch.float64, "NCDHW")
    scales = (1.5, 1.5, 1.5)
    fallback = "forward_fallback" if op == "forward" else "fallback"
    before = tbt.call_counts()
    first = _call(op, t, scales=scales)
    no_careful_path()
    second = _call(op, t, scales=scales)
    after = tbt.call_counts()
    assert after[fallback] - before[fallback] == 2
    assert after[_counted(op)] == before[_counted(op)]
    tbt.disable()
    assert torch.equal(first, _call(op, t, scales=scales)) and torch.equal(first, second)


def _same_shape_other_strides(t):
    """``t``'s values in tensors of its shape laid out in other ways, each a different layout for PyTorch."""
    swapped = t.transpose(2, 3).contiguous().transpose(2, 3)          # D and H strides swapped
    sliced = torch.cat([t, t], dim=-1)[..., ::2].copy_(t)              # not dense
    return [t, t.contiguous(memory_format=torch.channels_last_3d), swapped, sliced]


def _pytorch_strides(op, t, size):
    """The strides of PyTorch's own result for ``t``: its meta kernel, which the override leaves alone."""
    return _call(op, torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta"),
                 size=size).stride()


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("route", ["disabled", "refused"])
def test_calls_handed_to_pytorch_get_its_layout_for_every_source_layout(op, route):
    """PyTorch's layout of the result, on the first call of a source layout and after it.

    The layout of a call handed to PyTorch is remembered by the source's shape
    and strides: sources of one shape in other layouts, interleaved, must each
    get theirs -- among them a (1, 3, 1, 1, 1) pair that ``is_contiguous()``
    in both formats but that PyTorch lays out differently.
    """
    size = (6, 8, 10)
    sources = _same_shape_other_strides(_source(op, torch.float64, "NCDHW"))
    one = torch.arange(3, dtype=torch.float64).reshape(1, 3, 1, 1, 1)
    sources += [one, torch.empty_strided(one.shape, (3, 1, 3, 3, 3), dtype=one.dtype).copy_(one)]
    scales = (None, None, None)
    if route == "disabled":
        tbt.disable()
    else:
        scales = (1.5, 1.5, 1.5)        # inconsistent with the sizes: refused, PyTorch's
    expected = [_pytorch_strides(op, t, size) for t in sources]
    assert len({(t.shape, e) for t, e in zip(sources, expected)}) >= 4   # layouts differ
    first = [_call(op, t, size=size, scales=scales) for t in sources]
    for _ in range(2):
        for t, e, f in zip(sources, expected, first):
            again = _call(op, t, size=size, scales=scales)
            assert f.stride() == e and again.stride() == e
            assert torch.equal(again, f) and again.data_ptr() != f.data_ptr()
    for t, f in zip(sources, first):
        # PyTorch's values for each layout agree with its contiguous one.
        assert torch.allclose(f, _call(op, t.contiguous(), size=size, scales=scales))


def test_remembered_layouts_are_pytorchs_rule_for_every_source_layout(monkeypatch):
    """_memory_format's memo, keyed by shape and strides, answers as the rule does, bounded."""
    monkeypatch.setattr(_pytorch, "MEMO_SIZE", 3)
    monkeypatch.setattr(_pytorch, "_memory_formats", {})
    one = torch.arange(3.0).reshape(1, 3, 1, 1, 1)
    sources = _same_shape_other_strides(_source("forward", torch.float32, "NCDHW"))
    sources += [one, torch.empty_strided(one.shape, (3, 1, 3, 3, 3)).copy_(one)]
    expected = [_pytorch.suggested_memory_format(t) for t in sources]
    assert len(set(expected)) == 2
    for _ in range(2):
        for t, e in zip(sources, expected):
            assert _pytorch.memory_format(t) == e
            assert len(_pytorch._memory_formats) <= 3


def test_the_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(_cache, "GEOMETRY_CACHE_SIZE", 4)
    for n in range(1, 11):
        _call("forward", torch.rand(n, 1, 2, 2, 2))
        assert 1 <= len(_cache.geometries) <= 4


@pytest.fixture
def careful_calls(monkeypatch):
    """A list that grows by one on every call that goes the careful way."""
    careful = []
    real = _cache.run
    monkeypatch.setattr(_cache, "run", lambda *a, **k: careful.append(1) or real(*a, **k))
    return careful


@pytest.mark.parametrize("op", OPS)
def test_a_forgotten_geometry_goes_the_careful_way_again(op, careful_calls, monkeypatch):
    """The fast path's last hit is forgotten with the cache: cleared, or evicted."""
    a = _source(op, torch.float32, "NCDHW")
    b = _source(op, torch.float32, "NCDHW", n=1)
    want = _call(op, a)
    assert torch.equal(_call(op, a), want) and len(careful_calls) == 1   # the last hit
    _cache.forget()
    assert torch.equal(_call(op, a), want) and len(careful_calls) == 2
    assert torch.equal(_call(op, a), want) and len(careful_calls) == 2
    monkeypatch.setattr(_cache, "GEOMETRY_CACHE_SIZE", 1)
    _call(op, b)                                        # evicts a
    assert len(careful_calls) == 3 and len(_cache.geometries) == 1
    assert torch.equal(_call(op, a), want) and len(careful_calls) == 4


@pytest.mark.parametrize("op", OPS)
def test_two_threads_running_one_geometry_get_its_bits(op):
    """A small geometry's own workspace serves one run at a time: two threads calling
    it at once (the kernel runs without the GIL) get the bits of calls one by one."""
    sources = [_source(op, torch.float32, "NDHWC") * (k + 1) for k in range(2)]
    wants = [_call(op, t) for t in sources]
    (geometry,) = _cache.geometries.values()
    assert 0 < geometry.workspace_size <= trilinear_bwd._core._runner.OWN_WORKSPACE_BYTES
    wrong = []

    def work(k):
        for _ in range(3000):
            if not torch.equal(_call(op, sources[k]), wants[k]):
                wrong.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("op", OPS)
@forks_while_threads_allocate
def test_a_child_forked_while_a_geometry_runs_gets_its_bits(op):
    """A fork copies the last hits and a geometry's own workspace, possibly marked in
    use by a thread the child does not have: the child's calls still get the bits."""
    t = _source(op, torch.float32, "NDHWC")
    want = _call(op, t)
    assert torch.equal(_call(op, t), want)             # the last hit, its own workspace
    stop = threading.Event()

    def work():
        while not stop.is_set():
            _call(op, t)

    thread = threading.Thread(target=work)
    thread.start()
    try:
        children = []
        for _ in range(8):
            pid = os.fork()
            if pid == 0:
                signal.alarm(30)                       # a hung child fails, never hangs
                ok = all(torch.equal(_call(op, t), want) for _ in range(20))
                os._exit(0 if ok else 1)
            children.append(pid)
        statuses = [os.waitpid(pid, 0)[1] for pid in children]
    finally:
        stop.set()
        thread.join()
    assert statuses == [0] * len(children)


# -- autograd through enable(), on the fast path -----------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(size=(3, 4, 2), align_corners=True),
                                dict(scale_factor=(1.5, 2, 1.25))], ids=repr)
def test_gradcheck_gradgradcheck_and_forward_ad_through_enable(layout, kw):
    """Double backward and forward-mode AD are PyTorch's formulas over this library's kernels."""
    x = _tensor((1, 2, 2, 3, 2), torch.float64, layout).requires_grad_()

    def fn(v):
        return F.interpolate(v, mode="trilinear", **kw)

    before = tbt.call_counts()
    assert torch.autograd.gradcheck(fn, (x,), check_forward_ad=True, check_batched_grad=True)
    mid = tbt.call_counts()
    assert torch.autograd.gradgradcheck(fn, (x,), check_fwd_over_rev=True,
                                        check_batched_grad=True)
    after = tbt.call_counts()
    for start, end in ((before, mid), (mid, after)):
        assert end["forward"] > start["forward"] and end["kernel"] > start["kernel"]
        assert end["fallback"] == start["fallback"]
        assert end["forward_fallback"] == start["forward_fallback"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_double_backward_runs_the_forward_kernel_as_the_adjoint(layout):
    x = _tensor((1, 2, 3, 4, 5), torch.float64, layout).requires_grad_()
    v = _tensor((1, 2, 6, 8, 10), torch.float64, layout, seed=1).requires_grad_()

    def second_order():
        y = F.interpolate(x, scale_factor=2, mode="trilinear")
        (gx,) = torch.autograd.grad(y, x, v, create_graph=True)
        return torch.autograd.grad(gx.square().sum(), v)[0]

    before = tbt.call_counts()
    got = second_order()
    after = tbt.call_counts()
    assert after["kernel"] - before["kernel"] >= 1 and after["forward"] - before["forward"] >= 2
    tbt.disable()
    want = second_order()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def _entry_points(op):
    """Every route by which a tensor reaches a remembered geometry's kernel, by name."""
    size = (6, 8, 10)

    def public(t):
        if op == "forward":
            return tbt.upsample_trilinear3d(t, size=size)
        return tbt.upsample_trilinear3d_backward(t, tuple(t.shape[2:]),
                                                 tuple(t.shape[:2]) + size, False)

    def custom_op(t):
        if op == "forward":
            return torch.ops.trilinear_bwd.upsample_trilinear3d(t, size, False, None, None,
                                                                None)
        return torch.ops.trilinear_bwd.upsample_trilinear3d_backward(
            t, tuple(t.shape[2:]), tuple(t.shape[:2]) + size, False, None, None, None)

    def drop_in_gradient(t, create_graph=False):
        # The drop-in's backward on grad_output t: its Function's backward
        # (straight to the kernel), or under create_graph its backward's
        # Function (whose forward goes straight).
        x = torch.zeros(t.shape[:2] + size, dtype=t.dtype, requires_grad=True)
        y = tbt.upsample_trilinear3d(x, size=tuple(t.shape[2:]))
        (grad,) = torch.autograd.grad(y, x, t, create_graph=create_graph)
        return grad.detach()

    routes = {"aten": lambda t: _call(op, t), "public": public, "custom op": custom_op}
    if op == "forward":
        routes["F.interpolate"] = lambda t: F.interpolate(t, size=size, mode="trilinear")
        routes["drop-in with gradients"] = lambda t: tbt.upsample_trilinear3d(
            t.detach().requires_grad_(), size=size).detach()
    else:
        routes["drop-in's backward"] = drop_in_gradient
        routes["drop-in's backward, create_graph"] = lambda t: drop_in_gradient(t, True)
    return routes


def _outcome(route, t):
    """What ``route`` does with ``t``: its result, or its error's type and message."""
    try:
        return route(t)
    except Exception as exc:        # noqa: BLE001 - the error is the outcome compared
        return type(exc), str(exc)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("state", ["neg", "zero"])
@pytest.mark.parametrize("first", ["plain first", "state first"])
def test_tensor_states_of_a_known_geometry_are_right_by_every_route(op, state, first):
    """A lazy negation or a zero tensor has a plain tensor's metadata but other values.

    Whichever comes first, no route may read its memory as the values (each
    does what it does with no geometry remembered: PyTorch's values, or the
    public backward's error for a negative bit), and the plain tensor's calls
    stay right.  The fast path itself does not look (the dispatcher resolves
    both states before a CPU kernel runs, the public backward checks): this
    fails if a PyTorch release stops resolving them.
    """
    plain = _source(op, torch.float64, "NCDHW")
    odd = torch._neg_view(plain) if state == "neg" else torch._efficientzerotensor(
        plain.shape, dtype=plain.dtype)
    assert odd.shape == plain.shape and odd.stride() == plain.stride()
    tbt.disable()
    want_plain, want_values = _call(op, plain), _call(op, odd.clone())
    tbt.enable()
    order = [plain, odd, plain, odd] if first == "plain first" else [odd, plain, odd, plain]
    for name, route in _entry_points(op).items():
        _cache.forget()
        want_odd = _outcome(route, odd)
        if isinstance(want_odd, torch.Tensor):
            torch.testing.assert_close(want_odd, want_values, rtol=1e-12, atol=1e-12)
        _cache.forget()
        for t in order:
            got = _outcome(route, t)
            want = want_plain if t is plain else want_odd
            if isinstance(want, torch.Tensor):
                torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12,
                                           msg=lambda m: f"{name}: {m}")
            else:
                assert got == want, name
        assert _cache.geometries, f"{name} remembered no geometry: its fast path went untested"


@pytest.mark.slow
def test_the_sweep_reports_every_point_and_restores_the_switch(monkeypatch):
    """bench --sweep's plumbing (never its timings): every op and layout, both contenders."""
    from trilinear_bwd._bench import _sweep, _timing

    monkeypatch.setattr(_timing, "ROUND_SECONDS", 1e-4)
    tbt.disable()
    before = tbt.call_counts()
    rows = _sweep.measure_sweep(rounds=2, sweep=((1, 1, 2), (1, 2, 3)))
    assert not tbt.is_enabled()
    assert [(r["op"], r["layout"], r["shape"][:3]) for r in rows] == [
        (op, layout, (n, c, side)) for n, c, side in ((1, 1, 2), (1, 2, 3))
        for layout in LAYOUTS for op in OPS]
    assert all(r["torch_us"] > 0 and r["ours_us"] > 0 and r["rounds"] == 2 for r in rows)
    after = tbt.call_counts()
    assert after["forward"] > before["forward"] and after["kernel"] > before["kernel"]
    table = _sweep.format_sweep(rows).splitlines()
    assert len(table) == 2 + len(rows) and table[2].startswith("| forward | NCDHW | (1, 1, 2, 2, 2)")


@pytest.mark.slow
def test_the_sweeps_pytorch_side_runs_apart_and_reports_its_failures(monkeypatch):
    """PyTorch's side of bench --sweep: a process without this library's registration."""
    from trilinear_bwd._bench import _sweep, _timing

    monkeypatch.setattr(_timing, "ROUND_SECONDS", 1e-4)
    theirs = _sweep._PytorchProcess(((1, 1, 2),), None)
    try:
        assert theirs.time(0) > 0 and theirs.time(3) > 0
        with pytest.raises(RuntimeError, match="PyTorch side of the sweep failed"):
            theirs.time(4)                  # no such point: the child's error comes back
    finally:
        theirs.close()
    # The child refuses to time once trilinear_bwd.torch is imported there.
    import subprocess
    import sys
    code = ("import io, sys, trilinear_bwd.torch; sys.stdin = io.StringIO('0\\n'); "
            "from trilinear_bwd._bench._sweep import serve_pytorch_sweep; "
            "serve_pytorch_sweep('{\"sweep\": [[1, 1, 2]], \"threads\": 1, "
            "\"round_seconds\": 0.0001}')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode != 0 and "imported trilinear_bwd.torch" in done.stderr


# -- the public front ends: the same per-geometry path as the aten operators ----------

def _public_backward(g, **kwargs):
    return tbt.upsample_trilinear3d_backward(g, tuple(g.shape[2:]), tuple(g.shape[:2]) + (6, 8, 10),
                                             False, **kwargs)


@pytest.mark.parametrize("sizes", ["tuple", "list", "torch.Size"])
def test_the_public_backward_takes_sizes_as_users_spell_them(sizes, no_careful_path):
    g = _source("backward", torch.float32, "NDHWC")
    x_shape = torch.Size(tuple(g.shape[:2]) + (6, 8, 10))
    spell = {"tuple": tuple, "list": list, "torch.Size": torch.Size}[sizes]
    cold = tbt.upsample_trilinear3d_backward(g, spell(g.shape[2:]), spell(x_shape), False)
    no_careful_path()
    hot = tbt.upsample_trilinear3d_backward(g, g.shape[2:], x_shape, False)
    assert torch.equal(hot, cold) and len(_cache.geometries) == 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kwargs", [{}, {"num_threads": 1}, {"num_threads": 2},
                                    {"memory_format": torch.channels_last_3d},
                                    {"memory_format": torch.contiguous_format}])
def test_the_public_backward_reuses_a_checked_geometry(dtype, layout, kwargs,
                                                       no_careful_path):
    g = _source("backward", dtype, layout)
    cold = _public_backward(g, **kwargs)
    assert len(_cache.geometries) == 1
    no_careful_path()
    for _ in range(2):
        hot = _public_backward(g.clone(memory_format=torch.preserve_format), **kwargs)
        assert hot.stride() == cold.stride() and hot.dtype == cold.dtype
        assert torch.equal(hot, cold) and hot.data_ptr() != cold.data_ptr()
    if "memory_format" in kwargs:
        assert hot.is_contiguous(memory_format=kwargs["memory_format"])


def test_the_public_backward_keys_threads_and_layout_apart():
    g = _source("backward", torch.float32, "NCDHW")
    results = [_public_backward(g, **kw) for kw in (
        {}, {"num_threads": 1}, {"num_threads": 2}, {"memory_format": torch.channels_last_3d})]
    assert len(_cache.geometries) == 4
    assert results[3].is_contiguous(memory_format=torch.channels_last_3d)
    for r in results[1:]:
        assert torch.equal(r, results[0])


@pytest.mark.parametrize("spelling", [
    {"output_size": [9.0, 11.0, 13.0]},   # == [9, 11, 13] in a dict key
    {"input_size": [2.0, 3, 6, 8, 10]},
    {"align_corners": 0},                 # == False in a dict key
    {"num_threads": 1.0},                 # == 1
])
@pytest.mark.parametrize("plain_first", [True, False])
def test_a_public_call_spelled_otherwise_is_checked_every_time(spelling, plain_first):
    g = _source("backward", torch.float32, "NCDHW")
    plain = {"output_size": (9, 11, 13), "input_size": (2, 3, 6, 8, 10),
             "align_corners": False, "num_threads": 1}
    if plain_first:
        tbt.upsample_trilinear3d_backward(g, **plain)
    for _ in range(2):
        with pytest.raises(trilinear_bwd.InvalidArgumentError, match="must be"):
            tbt.upsample_trilinear3d_backward(g, **dict(plain, **spelling))
    tbt.upsample_trilinear3d_backward(g, **plain)
    assert len(_cache.geometries) == 1


def test_the_drop_in_without_gradients_reuses_the_forward_geometry(no_careful_path):
    x = _tensor((2, 3, 3, 4, 5), torch.float32, "NDHWC")
    cold = tbt.upsample_trilinear3d(x, scale_factor=2)
    assert len(_cache.geometries) == 1
    no_careful_path()
    hot = tbt.upsample_trilinear3d(x, scale_factor=(2, 2.0, 2))
    assert torch.equal(hot, cold) and hot.stride() == cold.stride()
    assert hot.grad_fn is None
    with torch.no_grad():
        assert torch.equal(tbt.upsample_trilinear3d(x.requires_grad_(), scale_factor=2), cold)


def test_the_drop_in_with_gradients_still_records_its_function():
    x = _tensor((2, 3, 3, 4, 5), torch.float64, "NCDHW").requires_grad_()
    y = tbt.upsample_trilinear3d(x, scale_factor=2)
    assert y.grad_fn is not None and "UpsampleTrilinear3d" in type(y.grad_fn).__name__
    torch.autograd.gradcheck(lambda t: tbt.upsample_trilinear3d(t, scale_factor=2), (x,))


def _record(mode, func, types, args=(), kwargs=None):
    """Note ``func`` in ``mode.seen`` and run it (a mode's hook)."""
    mode.seen.append(str(func))
    return func(*args, **(kwargs or {}))


class _Recorder(torch.utils._python_dispatch.TorchDispatchMode):
    """A dispatch mode that records the operators it sees."""

    __torch_dispatch__ = _record

    def __init__(self):
        super().__init__()
        self.seen = []


class _FunctionRecorder(torch.overrides.TorchFunctionMode):
    """A torch function mode that records the functions it sees."""

    __torch_function__ = _record

    def __init__(self):
        super().__init__()
        self.seen = []


class _FunctionSubclass(torch.Tensor):
    """A subclass with __torch_function__ only (no dispatch key of its own)."""


def _straight_cases():
    plain = _tensor((2, 3, 3, 4, 5), torch.float32, "NCDHW")
    return {
        "neg view": lambda: torch._neg_view(plain),
        "zero tensor": lambda: torch._efficientzerotensor(plain.shape),
        "sparse": lambda: plain.to_sparse(),
        "inference tensor": lambda: _inference(plain),
        "__torch_function__ subclass": lambda: plain.as_subclass(_FunctionSubclass),
        "under a dispatch mode": lambda: plain,
        "under a torch function mode": lambda: plain,
        "under FakeTensorMode": lambda: plain,
        "inside vmap": lambda: plain,
    }


def _inference(t):
    with torch.inference_mode():
        return t.clone()


@pytest.mark.parametrize("case", list(_straight_cases()))
def test_the_straight_route_refuses_what_the_dispatcher_would_change(case):
    """``_straight``: only a tensor the dispatcher hands the CPU kernel as it is skips it.

    Every tensor state with dispatch keys of its own, every subclass, every
    Python dispatch mode (user or infra) and functorch transform must keep
    the dispatcher in the way; plain tensors and parameters, both layouts,
    every dtype, skip it.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for layout in ("NCDHW", "NDHWC"):
            plain = _tensor((2, 3, 3, 4, 5), dtype, layout)
            assert _dropin._straight(plain)
            assert _dropin._straight(plain.requires_grad_())
            assert _dropin._straight(torch.nn.Parameter(plain.detach()))
    t = _straight_cases()[case]()
    if case == "under a dispatch mode":
        with _Recorder():
            assert not _dropin._straight(t)
    elif case == "under a torch function mode":
        with _FunctionRecorder():
            assert not _dropin._straight(t)
    elif case == "under FakeTensorMode":
        with FakeTensorMode():
            assert not _dropin._straight(t)
    elif case == "inside vmap":
        seen = []
        torch.func.vmap(lambda v: seen.append(_dropin._straight(v)) or v)(t)
        assert seen == [False]
    else:
        assert not _dropin._straight(t)
    assert _dropin._straight(_tensor((2, 3, 3, 4, 5), torch.float32, "NCDHW"))


@pytest.mark.parametrize("grad", [False, True], ids=["no grad", "grad"])
@pytest.mark.parametrize("recorder", [_Recorder, _FunctionRecorder],
                         ids=["dispatch mode", "torch function mode"])
def test_a_mode_sees_the_drop_ins_operators(recorder, grad):
    """Under a dispatch mode the drop-in's calls go through its operators; a function mode sees it.

    The straight route skips the operators, so a mode (a profiler, a
    tracer, FlopCounterMode) would see nothing of the upsampling if the
    route did not check for one.  A torch function mode sees the drop-in
    itself, as it sees ``F.interpolate`` (both hand their call to
    ``__torch_function__``).
    """
    x = _tensor((2, 3, 3, 4, 5), torch.float32, "NCDHW").requires_grad_(grad)
    g = _tensor((2, 3, 6, 8, 10), torch.float32, "NCDHW")
    ours = ("trilinear_bwd.upsample_trilinear3d.default" if recorder is _Recorder
            else str(tbt.upsample_trilinear3d))
    with recorder() as mode:
        y = tbt.upsample_trilinear3d(x, scale_factor=2)
        if grad:
            y.backward(g)
    assert ours in mode.seen
    if grad and recorder is _Recorder:
        # (The autograd engine runs the backward without torch function
        # modes, so only a dispatch mode sees the backward's operator.)
        assert "trilinear_bwd.upsample_trilinear3d_backward.default" in mode.seen
    if grad:
        expected = x.grad.clone()
        x.grad = None
        tbt.upsample_trilinear3d(x, scale_factor=2).backward(g)
        assert torch.equal(x.grad, expected)


def test_a_tangent_on_the_drop_ins_gradient_is_carried():
    """Forward-mode AD through the drop-in's backward (a dual grad_output, no functorch).

    The backward goes straight to the kernel only when no graph and no
    tangent need recording; with a dual grad_output its Function carries
    the tangent, as PyTorch's backward does.
    """
    import torch.autograd.forward_ad as fwAD

    gen = torch.Generator().manual_seed(5)
    x = torch.randn(1, 2, 3, 4, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    g = torch.randn(1, 2, 6, 8, 10, dtype=torch.float64, generator=gen)
    tangent = torch.randn(g.shape, dtype=torch.float64, generator=gen)
    tangents = []
    for fn in (lambda v: F.interpolate(v, scale_factor=2, mode="trilinear"),
               lambda v: tbt.upsample_trilinear3d(v, scale_factor=2)):
        y = fn(x)
        with fwAD.dual_level():
            (grad,) = torch.autograd.grad(y, x, fwAD.make_dual(g, tangent))
            tangents.append(fwAD.unpack_dual(grad).tangent)
    assert tangents[1] is not None
    torch.testing.assert_close(tangents[1], tangents[0], rtol=1e-12, atol=1e-12)

"""trilinear_bwd.torch: autograd op, aten override, torch.compile (skipped without torch)."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
tbt = pytest.importorskip("trilinear_bwd.torch")

import trilinear_bwd as tb  # noqa: E402

# Relative to the largest gradient element (the spec's tolerances vs PyTorch).
RTOL = {torch.float32: 2e-5, torch.float64: 1e-12, torch.bfloat16: 1.6e-2}
FORMATS = {"ncdhw": torch.contiguous_format, "channels_last_3d": torch.channels_last_3d}
CASES = [
    ((2, 3, 4, 5, 6), dict(scale_factor=2)),
    ((2, 3, 4, 5, 6), dict(size=(7, 9, 11))),
    ((1, 4, 4, 5, 6), dict(scale_factor=(2.5, 1.5, 2.0))),
    ((2, 3, 4, 5, 6), dict(size=(7, 9, 11), align_corners=True)),
    ((1, 2, 5, 4, 3), dict(scale_factor=1.7, recompute_scale_factor=True)),
    ((1, 2, 9, 8, 7), dict(size=(4, 3, 5))),
]


def assert_close_rel(got, expected, dtype):
    got, expected = got.to(torch.float64), expected.to(torch.float64)
    scale = expected.abs().max().item()
    torch.testing.assert_close(got, expected, rtol=RTOL[dtype], atol=RTOL[dtype] * scale)


def grads(fn, x0, seed=0, grad_layout=None):
    """Forward through ``fn`` and backward with a fixed random gradient."""
    x = x0.detach().clone().requires_grad_()
    y = fn(x)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed)).to(y.dtype)
    if grad_layout == "strided":
        big = torch.zeros(y.shape[:2] + tuple(2 * n for n in y.shape[2:]), dtype=y.dtype)
        big[:, :, ::2, ::2, ::2] = g
        g = big[:, :, ::2, ::2, ::2]
    y.backward(g)
    return y.detach(), x.grad


def interpolate(**kw):
    return lambda x: F.interpolate(x, mode="trilinear", **kw)


def ours(**kw):
    return lambda x: tbt.upsample_trilinear3d(x, **kw)


@pytest.fixture
def restore_pytorch_kernel():
    yield
    tbt.disable()


# -- upsample_trilinear3d ------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def test_gradient_matches_interpolate(dtype, fmt, case):
    shape, kw = case
    x0 = torch.randn(shape, dtype=torch.float64).to(dtype).contiguous(memory_format=FORMATS[fmt])
    calls = tbt.call_counts()
    y_ref, g_ref = grads(interpolate(**kw), x0)
    y, g = grads(ours(**kw), x0)
    # Both kernels ran, exactly once each.
    assert tbt.call_counts()["kernel"] == calls["kernel"] + 1
    assert tbt.call_counts()["forward"] == calls["forward"] + 1
    # The forward is this library's: PyTorch's values within rounding, its layout.
    assert y.stride() == y_ref.stride()
    assert_close_rel(y, y_ref, dtype)
    assert g.dtype == dtype and g.stride() == g_ref.stride() == x0.stride()
    assert_close_rel(g, g_ref, dtype)


def test_non_contiguous_grad_output():
    x0 = torch.randn(2, 3, 4, 5, 6)
    _, g_ref = grads(interpolate(scale_factor=2), x0, grad_layout="strided")
    _, g = grads(ours(scale_factor=2), x0, grad_layout="strided")
    assert_close_rel(g, g_ref, torch.float32)


def test_grad_output_layout_differs_from_input_layout():
    x0 = torch.randn(2, 3, 4, 5, 6).contiguous(memory_format=torch.channels_last_3d)
    x = x0.clone().requires_grad_()
    y = tbt.upsample_trilinear3d(x, size=(8, 10, 12))
    g = torch.randn(y.shape)  # NCDHW gradient for a channels-last output
    y.backward(g)
    x_ref = x0.clone().requires_grad_()
    F.interpolate(x_ref, size=(8, 10, 12), mode="trilinear").backward(g)
    assert x.grad.is_contiguous(memory_format=torch.channels_last_3d)
    assert_close_rel(x.grad, x_ref.grad, torch.float32)


def test_gradcheck_and_gradgradcheck_float64():
    # Tiny: gradgradcheck runs the backward twice per element of grad_output.
    x = torch.randn(1, 1, 2, 2, 3, dtype=torch.float64, requires_grad=True)
    for kw in (dict(scale_factor=2), dict(size=(3, 4, 2), align_corners=True)):
        def fn(t):
            return tbt.upsample_trilinear3d(t, **kw)
        assert torch.autograd.gradcheck(fn, (x,))
        assert torch.autograd.gradgradcheck(fn, (x,))


def test_upsample_needs_a_5d_input():
    # F.interpolate's own error for a 4-D input in trilinear mode.
    with pytest.raises(NotImplementedError, match="5D"):
        tbt.upsample_trilinear3d(torch.zeros(1, 2, 3, 4), scale_factor=2)


# -- upsample_trilinear3d_backward: aten's signature --------------------------

def test_backward_function_matches_aten():
    g = torch.randn(2, 3, 9, 7, 11).permute(0, 1, 2, 4, 3).contiguous().permute(0, 1, 2, 4, 3)
    for args in (((9, 7, 11), (2, 3, 4, 5, 6), False),
                 ((9, 7, 11), (2, 3, 4, 5, 6), True),
                 ((9, 7, 11), (2, 3, 3, 3, 5), False, 3.0, 7 / 3, 2.2)):
        expected = torch.ops.aten.upsample_trilinear3d_backward(g, *args)
        got = tbt.upsample_trilinear3d_backward(g, *args)
        assert got.stride() == expected.stride()
        assert_close_rel(got, expected, torch.float32)


def test_backward_function_errors_carry_status():
    with pytest.raises(tb.InvalidArgumentError, match="CPU memory") as info:
        tbt.upsample_trilinear3d_backward(torch.empty(1, 1, 2, 2, 2, device="meta"),
                                          (2, 2, 2), (1, 1, 1, 1, 1), False)
    assert info.value.status == 161002
    with pytest.raises(tb.InvalidArgumentError, match="scalesD"):
        tbt.upsample_trilinear3d_backward(torch.ones(1, 1, 4, 4, 4), (4, 4, 4),
                                          (1, 1, 2, 2, 2), False, 3.0, None, None)


# -- enable / disable ------------------------------------------------------------

@pytest.mark.parametrize("fmt", list(FORMATS))
def test_enable_routes_interpolate_backward_and_disable_restores(restore_pytorch_kernel, fmt):
    x0 = torch.randn(2, 4, 5, 6, 7).contiguous(memory_format=FORMATS[fmt])
    fn = interpolate(scale_factor=2)
    _, g_pytorch = grads(fn, x0)

    tbt.enable()
    tbt.enable()  # idempotent
    assert tbt.is_enabled()
    before = tbt.call_counts()["kernel"]
    _, g_enabled = grads(fn, x0)
    assert tbt.call_counts()["kernel"] == before + 1
    assert g_enabled.stride() == g_pytorch.stride()
    assert_close_rel(g_enabled, g_pytorch, torch.float32)
    # Not bitwise PyTorch's: the kernels sum in different orders (float32
    # rounding), which is how we know which one ran.
    x = torch.randn(1, 8, 16, 16, 16)
    _, g_big_enabled = grads(fn, x)

    tbt.disable()
    assert not tbt.is_enabled()
    before = tbt.call_counts()["kernel"]
    _, g_disabled = grads(fn, x0)
    _, g_big_disabled = grads(fn, x)
    assert tbt.call_counts()["kernel"] == before  # our kernel no longer runs
    assert torch.equal(g_disabled, g_pytorch)  # PyTorch's kernel, bit for bit
    assert not torch.equal(g_big_disabled, g_big_enabled)
    assert_close_rel(g_big_enabled, g_big_disabled, torch.float32)


def test_enabled_context_manager_restores_previous_state(restore_pytorch_kernel):
    x0 = torch.randn(1, 2, 3, 4, 5, dtype=torch.float64)
    before = tbt.call_counts()["kernel"]
    with tbt.enabled():
        assert tbt.is_enabled()
        grads(interpolate(size=(6, 8, 10)), x0)
        with tbt.enabled():
            pass
        assert tbt.is_enabled()  # the inner block leaves the outer one enabled
    assert not tbt.is_enabled()
    assert tbt.call_counts()["kernel"] == before + 1
    tbt.enable()
    with tbt.enabled():
        pass
    assert tbt.is_enabled()  # it was enabled before the block


def test_enabled_falls_back_to_pytorch_for_calls_outside_the_contract(restore_pytorch_kernel):
    # Explicit scales that floor(in * scale) != out: PyTorch accepts them,
    # this library's contract does not; PyTorch's kernel must answer.
    g = torch.randn(1, 2, 4, 4, 4)
    args = (g, (4, 4, 4), (1, 2, 2, 2, 2), False, 3.0, 3.0, 3.0)
    expected = torch.ops.aten.upsample_trilinear3d_backward(*args)
    with tbt.enabled():
        fallbacks = tbt.call_counts()["fallback"]
        got = torch.ops.aten.upsample_trilinear3d_backward(*args)
        assert tbt.call_counts()["fallback"] == fallbacks + 1
    assert torch.equal(got, expected)


def test_enabled_gradcheck(restore_pytorch_kernel):
    x = torch.randn(1, 1, 2, 2, 3, dtype=torch.float64, requires_grad=True)
    with tbt.enabled():
        before = tbt.call_counts()["kernel"]
        assert torch.autograd.gradcheck(interpolate(scale_factor=2), (x,))
        assert tbt.call_counts()["kernel"] > before


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=str)
def test_enabled_other_dtypes(restore_pytorch_kernel, dtype):
    x0 = torch.randn(2, 3, 4, 5, 6).to(dtype)
    _, g_ref = grads(interpolate(size=(8, 7, 12), align_corners=True), x0)
    with tbt.enabled():
        _, g = grads(interpolate(size=(8, 7, 12), align_corners=True), x0)
    assert_close_rel(g, g_ref, dtype)


# -- torch.compile -----------------------------------------------------------------

def _compiled_run(fn, backend, x0):
    """Through ``torch.compile(fn)``: the gradient, this library's backward calls, and
    ``(result, this library's forward calls)``."""
    torch._dynamo.reset()
    before = tbt.call_counts()
    y, g = grads(torch.compile(fn, backend=backend), x0)
    after = tbt.call_counts()
    return g, after["kernel"] - before["kernel"], (y, after["forward"] - before["forward"])


def test_compile_eager_backend_uses_enabled_kernel(restore_pytorch_kernel):
    x0 = torch.randn(1, 2, 4, 4, 4)
    _, g_ref = grads(interpolate(scale_factor=2), x0)
    with tbt.enabled():
        g, calls, (_, forward_calls) = _compiled_run(interpolate(scale_factor=2), "eager", x0)
    assert calls == 1 and forward_calls == 1     # both aten operators: this library's
    assert_close_rel(g, g_ref, torch.float32)


def test_compile_aot_eager_runs_enable_s_kernels(restore_pytorch_kernel):
    # What docs/torch.md says: under enable(), the trace of F.interpolate
    # records this library's operators instead of PyTorch's decomposition.
    x0 = torch.randn(2, 4, 5, 5, 5)      # not tiny (torch._compile.PYTORCH_BELOW)
    _, g_ref = grads(interpolate(scale_factor=2), x0)
    with tbt.enabled():
        g, calls, (_, forward_calls) = _compiled_run(interpolate(scale_factor=2), "aot_eager",
                                                     x0)
    assert calls == 1 and forward_calls == 1
    assert_close_rel(g, g_ref, torch.float32)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_keeps_upsample_trilinear3d_backward(backend):
    # Both custom operators, the forward and the backward, stay opaque calls.
    x0 = torch.randn(1, 2, 4, 4, 4)
    y_ref, g_ref = grads(interpolate(scale_factor=2), x0)
    g, calls, (y, forward_calls) = _compiled_run(ours(scale_factor=2), backend, x0)
    assert calls == 1 and forward_calls == 1
    assert_close_rel(g, g_ref, torch.float32)
    assert_close_rel(y, y_ref, torch.float32)


@pytest.mark.slow
def test_compile_inductor_keeps_upsample_trilinear3d_backward():
    x0 = torch.randn(1, 2, 4, 4, 4)
    y_ref, g_ref = grads(interpolate(scale_factor=2), x0)
    g, calls, (y, forward_calls) = _compiled_run(ours(scale_factor=2), "inductor", x0)
    assert calls == 1 and forward_calls == 1
    assert_close_rel(g, g_ref, torch.float32)
    assert_close_rel(y, y_ref, torch.float32)


# -- the training example ------------------------------------------------------------

def test_training_example_runs_and_loss_curves_agree(capsys, restore_pytorch_kernel):
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "examples", "unet3d_cpu_training.py")
    spec = importlib.util.spec_from_file_location("unet3d_cpu_training", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    before = tbt.call_counts()["kernel"]
    speedup, rel = example.main(["--size", "8", "--width", "2", "--steps", "2"])
    out = capsys.readouterr().out
    assert "whole-step speedup" in out and "loss curves" in out
    assert speedup > 0 and rel <= 1e-4
    assert tbt.call_counts()["kernel"] - before >= 2 * 3  # two upsamplings per enabled step
    assert not tbt.is_enabled()

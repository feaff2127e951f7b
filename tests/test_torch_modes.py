"""Every mode a call can run under: the drop-in does what ``F.interpolate`` does there.

The class: a mode that records, transforms or redirects
the call -- ``torch.jit.trace``, ``torch.jit.script``, ``torch.fx``,
``torch.compile`` (``fullgraph=True``, static and dynamic shapes),
``torch.export``, ``torch.func`` (``vmap``, ``grad``), forward AD, autocast,
``inference_mode``, a default-device context, deterministic algorithms.
For each, ``trilinear_bwd.torch.upsample_trilinear3d`` and
``F.interpolate`` under ``enable()`` must run where ``F.interpolate`` runs and
give its values and gradients (this library's forward is within float
rounding of PyTorch's: ``docs/numerics.md``).
"""

import io
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import trilinear_bwd.torch as tbt  # noqa: E402

SHAPE = (2, 3, 4, 5, 6)
# TorchScript (trace, script, save, load) is deprecated in PyTorch, still supported.
pytestmark = pytest.mark.filterwarnings(r"ignore:`torch\.jit\.\w+` is deprecated:DeprecationWarning")


def _reference(x):
    return F.interpolate(x, scale_factor=2.0, mode="trilinear")


def _drop_in(x):
    return tbt.upsample_trilinear3d(x, scale_factor=2.0)


def _enabled(x):
    return F.interpolate(x, scale_factor=2.0, mode="trilinear")


CALLERS = [_drop_in, _enabled]


@pytest.fixture(params=CALLERS, ids=["drop-in", "enable"])
def caller(request):
    if request.param is _enabled:
        with tbt.enabled():
            yield request.param
    else:
        yield request.param


@pytest.fixture(params=[False, True], ids=["no-grad", "requires-grad"])
def x(request):
    torch.manual_seed(0)
    return torch.rand(SHAPE).requires_grad_(request.param)


def _close(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)


def _same_values_and_grads(fn, x):
    """``fn(x)``'s values, and its gradient if ``x`` requires one, match F.interpolate's."""
    y = fn(x)
    _close(y, _reference(x.detach()))
    if x.requires_grad:
        g = torch.rand_like(y)
        (got,) = torch.autograd.grad(y, x, g)
        plain = x.detach().requires_grad_()
        (want,) = torch.autograd.grad(_reference(plain), plain, g)
        _close(got, want)


def test_jit_trace(caller, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(caller, x, check_trace=False)
    kinds = [n.kind() for n in traced.graph.nodes()]
    # The call is recorded, never baked in as a constant result.
    assert any(k.endswith("upsample_trilinear3d") for k in kinds)
    _same_values_and_grads(traced, x)


def _scripted_module(caller):
    if caller is _drop_in:
        class Up(torch.nn.Module):
            def forward(self, x):
                return tbt.upsample_trilinear3d(x, scale_factor=2.0) + tbt.upsample_trilinear3d(
                    x, size=[8, 10, 12], align_corners=False)
    else:
        class Up(torch.nn.Module):
            def forward(self, x):
                return F.interpolate(x, scale_factor=2.0, mode="trilinear") + F.interpolate(
                    x, size=[8, 10, 12], mode="trilinear", align_corners=False)
    return Up()


def test_jit_script_runs_saves_and_loads(caller, x):
    scripted = torch.jit.script(_scripted_module(caller))
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    buffer.seek(0)
    loaded = torch.jit.load(buffer)
    for module in (scripted, loaded):
        _same_values_and_grads(lambda t: module(t) / 2, x)


def test_fx_symbolic_trace_records_the_call(caller, x):
    graph_module = torch.fx.symbolic_trace(caller)
    targets = [n.target for n in graph_module.graph.nodes if n.op == "call_function"]
    assert targets == [tbt.upsample_trilinear3d if caller is _drop_in else F.interpolate]
    _same_values_and_grads(graph_module, x)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compile_fullgraph(caller, x, dynamic):
    torch._dynamo.reset()
    compiled = torch.compile(caller, fullgraph=True, dynamic=dynamic, backend="aot_eager")
    _same_values_and_grads(compiled, x)
    # Another shape: recompiled (static) or the same graph (dynamic).
    other = torch.rand(1, 2, 3, 3, 3).requires_grad_(x.requires_grad)
    _same_values_and_grads(compiled, other)


@pytest.mark.slow
def test_compile_fullgraph_inductor(caller, x):
    torch._dynamo.reset()
    _same_values_and_grads(torch.compile(caller, fullgraph=True), x)


def test_export(caller, x):
    class Up(torch.nn.Module):
        def forward(self, t):
            return caller(t)

    exported = torch.export.export(Up(), (x,))
    _same_values_and_grads(exported.module(), x)


def test_vmap_and_grad(caller, x):
    batch = torch.rand((3,) + SHAPE)
    _close(torch.func.vmap(caller)(batch), torch.stack([_reference(b) for b in batch]))
    got = torch.func.grad(lambda t: caller(t).square().sum())(x.detach())
    want = torch.func.grad(lambda t: _reference(t).square().sum())(x.detach())
    _close(got, want)


def test_forward_ad(caller, x):
    import torch.autograd.forward_ad as fwad

    tangent = torch.rand(SHAPE)
    with fwad.dual_level():
        got = fwad.unpack_dual(caller(fwad.make_dual(x.detach(), tangent))).tangent
    _close(got, _reference(tangent))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_autocast(caller, x, dtype):
    source = x.detach().to(dtype).requires_grad_(x.requires_grad)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = caller(source)
        want = _reference(source.detach())
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


def test_inference_mode(caller, x):
    with torch.inference_mode():
        got = caller(x.detach())
        want = _reference(x.detach())
    assert got.is_inference() == want.is_inference()
    _close(got, want)


def test_default_device_context(caller, x):
    with torch.device("meta"):
        y = caller(x)
    assert y.device.type == "cpu"
    _same_values_and_grads(caller, x)


def test_deterministic_algorithms(caller, x):
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        _same_values_and_grads(caller, x)
    finally:
        torch.use_deterministic_algorithms(previous)

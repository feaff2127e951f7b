"""torch.compile under enable(): compiled F.interpolate runs this library's kernels.

These tests fail if a PyTorch upgrade routes ``F.interpolate`` around the
hook of ``trilinear_bwd.torch._compile`` (the counts would not move), if
graphs traced while disabled stop being PyTorch's own, or if a compiled
frame or a cache entry of one state is reused in the other.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
tbt = pytest.importorskip("trilinear_bwd.torch")

FORMATS = {"ncdhw": torch.contiguous_format, "channels_last_3d": torch.channels_last_3d}


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    tbt.disable()
    torch._dynamo.reset()


def _counts():
    c = tbt.call_counts()
    return c["forward"], c["kernel"]


def _moved(before):
    after = _counts()
    return after[0] - before[0], after[1] - before[1]


def _relative_error(got, exact):
    return ((got.double() - exact).abs().max() / exact.abs().max()).item()


@pytest.mark.slow
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("layout,align_corners",
                         [("ncdhw", True), ("channels_last_3d", False)])
def test_inductor_runs_this_librarys_kernels(fresh_dynamo, dynamic, layout, align_corners):
    def layer(v):
        return F.interpolate(v, scale_factor=2, mode="trilinear", align_corners=align_corners)

    gen = torch.Generator().manual_seed(0)
    shapes = [(2, 5, 6, 7, 8), (1, 3, 7, 6, 8)]      # the second: a recompile or a new size
    compiled = torch.compile(layer, dynamic=dynamic)
    for shape in shapes:
        x0 = torch.randn(shape, generator=gen).contiguous(memory_format=FORMATS[layout])
        g = torch.randn((shape[0], shape[1]) + tuple(2 * s for s in shape[2:]), generator=gen)
        with tbt.enabled():
            eager_x = x0.clone().requires_grad_()
            eager_y = layer(eager_x)
            eager_y.backward(g)
            x = x0.clone().requires_grad_()
            before = _counts()
            y = compiled(x)
            y.backward(g)
            assert _moved(before) == (1, 1)
        # The compiled layer runs the same kernels as eager enable(): the same bits.
        assert torch.equal(y, eager_y) and torch.equal(x.grad, eager_x.grad)
        assert y.stride() == eager_y.stride()
        # As close to float64 as eager PyTorch's own gradient.
        x64 = x0.double().requires_grad_()
        layer(x64).backward(g.double())
        x32 = x0.clone().requires_grad_()
        layer(x32).backward(g)
        assert _relative_error(x.grad, x64.grad) <= max(
            2 * _relative_error(x32.grad, x64.grad), 1e-6)


def _graphs_script(body):
    return textwrap.dedent("""
        import json, sys
        import torch, torch.nn.functional as F
        from torch._dynamo.backends.common import aot_autograd

        def graphs(fn, x):
            seen = []
            def keep(gm, example_inputs):
                seen.append(gm.code)
                return gm
            torch._dynamo.reset()
            compiled = torch.compile(fn, backend=aot_autograd(fw_compiler=keep,
                                                              bw_compiler=keep))
            compiled(x).sum().backward()
            return seen

        def layer(v):
            return F.interpolate(v, scale_factor=2, mode="trilinear")

        x = torch.randn(2, 4, 5, 5, 5, requires_grad=True)
        out = {}
    """) + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"


def _run(script, env=None):
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_graphs_traced_while_disabled_are_pytorchs():
    out = _run(_graphs_script("""
        out["pytorch"] = graphs(layer, x)            # this library not imported
        import trilinear_bwd.torch as tbt
        out["imported"] = graphs(layer, x)
        tbt.enable()
        out["enabled"] = graphs(layer, x)
        tbt.disable()
        out["disabled"] = graphs(layer, x)
        out["sys_modules"] = "trilinear_bwd" in sys.modules
    """))
    assert out["sys_modules"]
    assert len(out["pytorch"]) == 2                   # forward and backward graphs
    assert out["imported"] == out["pytorch"]
    assert out["disabled"] == out["pytorch"]
    forward, backward = out["enabled"]
    assert "trilinear_bwd.enabled_upsample_trilinear3d.default" in forward
    assert "trilinear_bwd.enabled_upsample_trilinear3d_backward.default" in backward
    # PyTorch's decomposition indexes; the enabled graphs hold no such arithmetic.
    assert "_unsafe_index" in "".join(out["pytorch"])
    assert "_unsafe_index" not in forward + backward


def test_compiled_code_follows_the_switch_it_was_traced_in(fresh_dynamo):
    compiled = torch.compile(lambda v: F.interpolate(v, scale_factor=2, mode="trilinear"),
                             backend="aot_eager")
    x = torch.randn(2, 4, 5, 5, 5, requires_grad=True)
    expected = F.interpolate(x, scale_factor=2, mode="trilinear")
    expected_grad, = torch.autograd.grad(expected.sum(), x)

    def run():
        before = _counts()
        y = compiled(x)
        grad, = torch.autograd.grad(y.sum(), x)
        return _moved(before), y, grad

    tbt.enable()
    tbt.disable()
    assert run()[0] == (0, 0)                         # traced disabled: PyTorch's graph
    tbt.enable()
    assert run()[0] == (0, 0)                         # no guard on the switch: kept
    torch._dynamo.reset()
    assert run()[0] == (1, 1)                         # traced again, enabled
    tbt.disable()                                     # traced enabled, run disabled:
    moved, y, grad = run()                            # PyTorch's eager kernels
    assert moved == (0, 0)
    assert torch.equal(y, expected) and torch.equal(grad, expected_grad)
    tbt.enable()
    assert run()[0] == (1, 1)


def test_tiny_static_calls_are_traced_as_pytorchs_code(fresh_dynamo):
    # Under enable(), a call of static shapes with fewer than PYTORCH_BELOW
    # output elements compiles to PyTorch's decomposition, counted at trace
    # time; the same call with symbolic sizes gets the operators.
    def layer(v):
        return F.interpolate(v, scale_factor=2, mode="trilinear")

    x = torch.randn(1, 2, 4, 4, 4, requires_grad=True)          # 1,024 output elements
    expected = layer(x)
    expected_grad, = torch.autograd.grad(expected.sum(), x)
    with tbt.enabled():
        traced = tbt.call_counts()["traced_to_pytorch"]
        before = _counts()
        y = torch.compile(layer, dynamic=False, backend="aot_eager")(x)
        grad, = torch.autograd.grad(y.sum(), x)
        assert _moved(before) == (0, 0)
        assert tbt.call_counts()["traced_to_pytorch"] > traced
        torch._dynamo.reset()
        before = _counts()
        y_dyn = torch.compile(layer, dynamic=True, backend="aot_eager")(x)
        grad_dyn, = torch.autograd.grad(y_dyn.sum(), x)
        assert _moved(before) == (1, 1)
    torch.testing.assert_close(y, expected)
    torch.testing.assert_close(grad, expected_grad)
    torch.testing.assert_close(y_dyn, expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad_dyn, expected_grad, rtol=1e-6, atol=1e-6)


def test_the_tiny_rule_counts_concrete_output_elements():
    from trilinear_bwd.torch import _compile as _torch_compile

    below = _torch_compile.PYTORCH_BELOW
    assert below == 4096                                       # docs/torch.md's number
    assert _torch_compile.tiny((1, 1, 4, 4, 4), (16, 16, 15))  # 3,840
    assert not _torch_compile.tiny((1, 1, 4, 4, 4), (16, 16, 16))
    assert not _torch_compile.tiny((2, 4, 5, 5, 5), (10, 10, 10))

    class Symbolic:                                            # stands in for a SymInt
        pass

    assert not _torch_compile.tiny((1, Symbolic(), 2, 2, 2), (4, 4, 4))
    assert not _torch_compile.tiny((1, 1, 2, 2, 2), (Symbolic(), 4, 4))


@pytest.mark.slow
def test_the_first_enable_discards_frames_compiled_before_it():
    out = _run(textwrap.dedent("""
        import json
        import torch, torch.nn.functional as F
        compiled = torch.compile(lambda v: F.interpolate(v, scale_factor=2, mode="trilinear"),
                                 backend="aot_eager")
        x = torch.randn(2, 4, 5, 5, 5, requires_grad=True)
        compiled(x).sum().backward()                  # traced before the import
        import trilinear_bwd.torch as tbt
        tbt.enable()
        compiled(x).sum().backward()
        c = tbt.call_counts()
        print(json.dumps([c["forward"], c["kernel"]]))
    """))
    assert out == [1, 1]


def test_cache_tag_marks_the_enabled_state():
    # torch.compiler.config.cache_key_tag is PyTorch 2.6's; before it there is
    # no AOTAutograd cache keyed on dynamo's graph alone to separate.
    config = pytest.importorskip("torch.compiler.config")
    if not isinstance(getattr(config, "cache_key_tag", None), str):
        pytest.skip("this PyTorch has no torch.compiler.config.cache_key_tag")
    from trilinear_bwd.torch import _compile as _torch_compile
    tag = config.cache_key_tag
    try:
        with tbt.enabled():
            assert config.cache_key_tag == tag + _torch_compile.CACHE_TAG
            tbt.enable()                              # again: one marker
            assert config.cache_key_tag == tag + _torch_compile.CACHE_TAG
        assert config.cache_key_tag == tag
    finally:
        tbt.disable()
        config.cache_key_tag = tag


@pytest.mark.slow
def test_a_cached_graph_of_the_other_state_is_not_reused(tmp_path):
    # The AOTAutograd cache keys on dynamo's graph, the same in both states.
    script = textwrap.dedent("""
        import json, sys
        import torch, torch.nn.functional as F
        if sys.argv[1] == "enabled":
            import trilinear_bwd.torch as tbt
            tbt.enable()
        compiled = torch.compile(lambda v: F.interpolate(v, scale_factor=2, mode="trilinear"))
        x = torch.randn(2, 3, 5, 5, 5, requires_grad=True)
        compiled(x).sum().backward()
        counts = tbt.call_counts() if sys.argv[1] == "enabled" else {}
        print(json.dumps(counts))
    """)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path))
    for state, expected in (("disabled", {}), ("enabled", (1, 1)), ("disabled", {}),
                            ("enabled", (1, 1))):
        done = subprocess.run([sys.executable, "-c", script, state], capture_output=True,
                              text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]
        counts = json.loads(done.stdout.strip().splitlines()[-1])
        if state == "enabled":
            assert (counts["forward"], counts["kernel"]) == expected, state


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["ncdhw", "channels_last_3d"])
def test_the_example_unet_trains_compiled_under_enable(fresh_dynamo, layout):
    import copy
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "unet3d_cpu_training.py"
    spec = importlib.util.spec_from_file_location("unet3d_cpu_training", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    fmt = FORMATS[layout]
    torch.manual_seed(0)
    plain = example.UNet3d(width=4).to(memory_format=fmt)
    fast = copy.deepcopy(plain)
    batches = [(x.contiguous(memory_format=fmt), y.contiguous(memory_format=fmt))
               for x, y in example.synthetic_batches(3, 2, 16)]

    def train(model, on):
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        compiled = torch.compile(model)
        losses = []
        with tbt.enabled() if on else _disabled():
            for x, y in batches:
                losses.append(example.train_step(compiled, opt, x, y)[0])
        return losses

    before = _counts()
    fast_losses = train(fast, True)
    assert _moved(before) == (2 * len(batches), 2 * len(batches))   # two upsamplings a step
    torch._dynamo.reset()      # the same forward's code: trace it again, disabled
    before = _counts()
    plain_losses = train(plain, False)
    assert _moved(before) == (0, 0)
    for a, b in zip(plain_losses, fast_losses):
        assert abs(a - b) <= 1e-4 * abs(a)


class _disabled:
    def __enter__(self):
        tbt.disable()

    def __exit__(self, *exc):
        return False


# -- the operators' own autograd: reverse, double reverse and forward mode -----------

@pytest.mark.parametrize("pair", ["upsample_trilinear3d", "enabled_upsample_trilinear3d"])
def test_the_operators_autograd_is_complete(pair):
    forward = getattr(torch.ops.trilinear_bwd, pair)
    backward = getattr(torch.ops.trilinear_bwd, pair + "_backward")
    x = torch.rand(1, 2, 3, 4, 2, dtype=torch.float64, requires_grad=True)
    g = torch.rand(1, 2, 5, 7, 4, dtype=torch.float64, requires_grad=True)
    size, sizes = [5, 7, 4], list(x.shape)
    with tbt.enabled():
        before = _counts()
        assert torch.autograd.gradcheck(
            lambda v: forward(v, size, False, None, None, None), (x,), check_forward_ad=True)
        assert torch.autograd.gradgradcheck(
            lambda v: forward(v, size, False, None, None, None), (x,))
        assert torch.autograd.gradcheck(
            lambda v: backward(v, size, sizes, True, None, None, None), (g,),
            check_forward_ad=True)
        assert torch.autograd.gradgradcheck(
            lambda v: backward(v, size, sizes, True, None, None, None), (g,))
        moved = _moved(before)
    assert moved[0] > 0 and moved[1] > 0


@pytest.mark.slow
def test_the_compiled_table_runs_this_librarys_kernels(fresh_dynamo):
    # The benchmark's own check that its "enable() compiled" column is what
    # it says (no timing is asserted).
    from trilinear_bwd._bench import _compiled

    case = ("layer x2", "layer", (2, 4, 5, 5, 5), "NDHWC", False)
    rows = _compiled.measure_compiled(rounds=1, cases=(case,))
    assert [r["calls"] for r in rows] == [(1, 1)]
    table = _compiled.format_compiled(rows)
    assert table.count("\n") == 2 and "(2, 4, 5, 5, 5)" in table
    assert not tbt.is_enabled()

"""The torch front ends as drop-ins: checks before work, PyTorch-allocated results,
F.interpolate's argument checks, torch.func, and which compile backends are served."""

import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
tbt = pytest.importorskip("trilinear_bwd.torch")

import trilinear_bwd as tb  # noqa: E402
from trilinear_bwd import _api  # noqa: E402
from trilinear_bwd._core import _pool
from trilinear_bwd.torch import _arrays as _torch_arrays, _cache  # noqa: E402
from trilinear_bwd._core._status import InvalidArgumentError  # noqa: E402
from conftest import sample_product  # noqa: E402

# Most of these calls end in a C++ exception of PyTorch's (its argument and
# size checks, the drop-in's capture of F.interpolate's arguments): under
# ci/sanitize.sh they run with libstdc++ preloaded after libasan, so that
# ASan's __cxa_throw interceptor finds the real one.
DOCS = Path(__file__).resolve().parent.parent / "docs"
BIG = 2**20 + 1
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
FORMATS = {"ncdhw": torch.contiguous_format, "channels_last_3d": torch.channels_last_3d}


@pytest.fixture
def restore_pytorch_kernel():
    yield
    tbt.disable()


def _huge(shape, dtype=torch.float32):
    """A tensor of ``shape`` without the memory: one element, zero strides."""
    return torch.ones(1, dtype=dtype).expand(*shape)


@pytest.fixture
def no_allocation(monkeypatch):
    """Fail if this library allocates a result, plans or runs (a call refused must not)."""
    def refuse(*args, **kwargs):
        raise AssertionError("work done before the contract's checks")

    for owner, name in ((_torch_arrays, "new_tensor"), (_cache, "new_tensor"),
                        (_api, "_new_output"), (_pool, "empty"), (_api, "run_once"),
                        (_cache, "run_once")):
        monkeypatch.setattr(owner, name, refuse)


# -- every rule checked before anything is allocated, planned or copied ---------
#
# Each case breaks one limit of the contract (a dimension above 2**20, the
# 60 GiB working set, a 2**31 product), in the read array or the written one.

BACKWARD_LIMITS = {
    "input D > 2**20": ((1, 1, 2, 2, 2), (1, 1, BIG, 2, 2)),
    "input W > 2**20": ((1, 1, 2, 2, 2), (1, 1, 2, 2, BIG)),
    "N > 2**20": ((BIG, 1, 2, 2, 2), (BIG, 1, 2, 2, 2)),
    "C > 2**20": ((1, BIG, 2, 2, 2), (1, BIG, 2, 2, 2)),
    "gradOut H > 2**20": ((1, 1, 2, BIG, 2), (1, 1, 2, 2, 2)),
    "60 GiB": ((1, 16, 1, 1, 1), (1, 16, 1024, 1024, 1024)),
    "iW*iH >= 2**31": ((1, 1, 1, 1, 1), (1, 1, 1, 2**16, 2**15)),
    "N*C*oD*oH >= 2**31": ((2**11, 2**10, 2**5, 2**5, 1), (2**11, 2**10, 1, 1, 1)),
}
FORWARD_LIMITS = {
    "out D > 2**20": ((1, 1, 2, 2, 2), (BIG, 2, 2)),
    "out W > 2**20": ((1, 1, 2, 2, 2), (2, 2, BIG)),
    "self W > 2**20": ((1, 1, 2, 2, BIG), (2, 2, 2)),
    "N > 2**20": ((BIG, 1, 2, 2, 2), (2, 2, 2)),
    "60 GiB": ((1, 16, 1, 1, 1), (1024, 1024, 1024)),
    "out_W*out_H >= 2**31": ((1, 1, 1, 1, 1), (1, 2**16, 2**15)),
}


def _backward_front_ends():
    return {
        "tbt.upsample_trilinear3d_backward": lambda g, size: tbt.upsample_trilinear3d_backward(
            g, g.shape[2:], size, False),
        "tb.upsample_trilinear3d_backward(tensor)": lambda g, size:
            tb.upsample_trilinear3d_backward(g, size),
        "tb.upsample_trilinear3d_backward(ndarray)": lambda g, size:
            tb.upsample_trilinear3d_backward(g.numpy(), size),
    }


def _forward_front_ends():
    return {
        "tb.upsample_trilinear3d(tensor)": lambda x, size: tb.upsample_trilinear3d(x, size),
        "tb.upsample_trilinear3d(ndarray)": lambda x, size:
            tb.upsample_trilinear3d(x.numpy(), size),
        # The drop-in and its operator follow the contract too.
        "tbt.upsample_trilinear3d": lambda x, size: tbt.upsample_trilinear3d(x, size=size),
        "torch.ops.trilinear_bwd.upsample_trilinear3d": lambda x, size:
            torch.ops.trilinear_bwd.upsample_trilinear3d(x, size, False, None, None, None),
    }


@pytest.mark.parametrize("case", list(BACKWARD_LIMITS))
@pytest.mark.parametrize("front", list(_backward_front_ends()))
def test_backward_limits_are_161002_before_any_work(no_allocation, front, case):
    go_shape, input_size = BACKWARD_LIMITS[case]
    with pytest.raises(InvalidArgumentError) as info:
        _backward_front_ends()[front](_huge(go_shape), input_size)
    assert info.value.status == 161002


@pytest.mark.parametrize("case", list(FORWARD_LIMITS))
@pytest.mark.parametrize("front", list(_forward_front_ends()))
def test_forward_limits_are_161002_before_any_work(no_allocation, front, case):
    x_shape, size = FORWARD_LIMITS[case]
    with pytest.raises(InvalidArgumentError) as info:
        _forward_front_ends()[front](_huge(x_shape), size)
    assert info.value.status == 161002


@pytest.mark.parametrize("op", ["forward", "backward"])
def test_the_kernels_own_entries_check_before_any_work(no_allocation, op):
    # The registered kernels' library half (_cache.run) refuses with 161002
    # before allocating; enable()'s operators then fall back to PyTorch's.
    if op == "forward":
        with pytest.raises(InvalidArgumentError):
            _cache.run(_huge((1, 1, 2, 2, 2)), (2, 2, BIG), None, False, (0.0, 0.0, 0.0),
                       torch.contiguous_format, None)
    else:
        with pytest.raises(InvalidArgumentError):
            _cache.run(_huge((1, 1, 2, 2, 2)), (2, 2, 2), (1, 1, 2, BIG, 2), False,
                       (0.0, 0.0, 0.0), torch.contiguous_format, None)


# Sizes PyTorch itself refuses (its RuntimeError, before allocating) and sizes
# past this library's limits that PyTorch computes: under enable(), which
# stands in for PyTorch's kernel, the first get PyTorch's exception type, the
# second PyTorch's result, and neither allocates through this library first;
# the drop-in and its operators refuse both with 161002 (above).
IMPOSSIBLE_SIZES = [(2**40, 2**40, 2), (2**62, 1, 1), (2**21, 2**12, 2**10)]
PAST_LIMITS_SIZES = [(1, 2, BIG), (BIG, 1, 2)]


def _forward_pytorch_front_ends():
    def enabled(x, size):
        with tbt.enabled():
            return F.interpolate(x, size=size, mode="trilinear")

    return {"F.interpolate under enable()": enabled}


def _backward_pytorch_front_ends():
    def enabled(g, input_size):
        with tbt.enabled():
            return torch.ops.aten.upsample_trilinear3d_backward(
                g, g.shape[2:], input_size, False)

    return {"aten backward under enable()": enabled}


@pytest.mark.parametrize("size", IMPOSSIBLE_SIZES + PAST_LIMITS_SIZES, ids=str)
def test_the_drop_in_refuses_sizes_past_the_limits_before_any_work(no_allocation, size):
    x = torch.ones(1, 1, 2, 2, 2, requires_grad=True)
    for call in (lambda: tbt.upsample_trilinear3d(x, size=size),
                 lambda: tbt.upsample_trilinear3d(x.detach(), size=size),
                 lambda: torch.ops.trilinear_bwd.upsample_trilinear3d(
                     x.detach(), size, False, None, None, None)):
        with pytest.raises(InvalidArgumentError) as info:
            call()
        assert info.value.status == 161002


@pytest.mark.parametrize("input_size", [(1, 1, 2**62, 1, 1), (1, 1, 2**40, 2**40, 2),
                                        (1, 1, BIG, 2, 2)], ids=str)
def test_the_drop_ins_backward_operator_refuses_sizes_past_the_limits(no_allocation,
                                                                     input_size):
    g = _huge(input_size[:2] + (2, 2, 2))
    with pytest.raises(InvalidArgumentError) as info:
        torch.ops.trilinear_bwd.upsample_trilinear3d_backward(
            g, g.shape[2:], input_size, False, None, None, None)
    assert info.value.status == 161002


@pytest.mark.parametrize("size", IMPOSSIBLE_SIZES, ids=str)
@pytest.mark.parametrize("front", list(_forward_pytorch_front_ends()))
def test_forward_impossible_sizes_raise_what_pytorch_raises(no_allocation, front, size):
    x = torch.ones(1, 1, 2, 2, 2)
    with pytest.raises(Exception) as expected:
        F.interpolate(x, size=size, mode="trilinear")
    with pytest.raises(type(expected.value)):
        _forward_pytorch_front_ends()[front](x, size)
    assert type(expected.value) is RuntimeError


@pytest.mark.parametrize("input_size", [(1, 1, 2**62, 1, 1), (1, 1, 2**40, 2**40, 2)],
                         ids=str)
@pytest.mark.parametrize("front", list(_backward_pytorch_front_ends()))
def test_backward_impossible_sizes_raise_what_pytorch_raises(no_allocation, front, input_size):
    g = _huge(input_size[:2] + (2, 2, 2))
    with pytest.raises(Exception) as expected:
        torch.ops.aten.upsample_trilinear3d_backward(g, (2, 2, 2), input_size, False)
    with pytest.raises(type(expected.value)):
        _backward_pytorch_front_ends()[front](g, input_size)


@pytest.mark.parametrize("size", PAST_LIMITS_SIZES, ids=str)
@pytest.mark.parametrize("front", list(_forward_pytorch_front_ends()))
def test_forward_past_the_limits_gets_pytorchs_result(front, size):
    x = torch.randn(1, 2, 2, 2, 2)
    before = tbt.call_counts()["forward_fallback"]
    y = _forward_pytorch_front_ends()[front](x, size)
    assert tbt.call_counts()["forward_fallback"] == before + 1
    assert torch.equal(y, F.interpolate(x, size=size, mode="trilinear"))


# -- results behave like tensors PyTorch allocated ----------------------------

def _results(dtype, fmt, shape):
    """Every tensor the torch front ends hand out, by name."""
    x = torch.randn(shape).to(dtype).contiguous(memory_format=FORMATS[fmt])
    g = torch.randn(shape[:2] + tuple(2 * n for n in shape[2:])).to(dtype).contiguous(
        memory_format=FORMATS[fmt])
    out = {
        "tbt backward": tbt.upsample_trilinear3d_backward(g, g.shape[2:], shape, False),
        "tb backward(tensor)": tb.upsample_trilinear3d_backward(g, shape[2:]),
        "tb forward(tensor)": tb.upsample_trilinear3d(x, g.shape[2:]),
        "custom op forward": torch.ops.trilinear_bwd.upsample_trilinear3d(
            x, g.shape[2:], False, None, None, None),
    }
    xr = x.detach().clone().requires_grad_()
    y = tbt.upsample_trilinear3d(xr, scale_factor=2)
    y.backward(g)
    out["drop-in result"], out["drop-in x.grad"] = y.detach(), xr.grad
    xr = x.detach().clone().requires_grad_()
    with tbt.enabled():
        y = F.interpolate(xr, scale_factor=2, mode="trilinear")
        y.backward(g)
    out["enable() result"], out["enable() x.grad"] = y.detach(), xr.grad
    return out


# Small results and results large enough for the library's pool (> 1 MiB).
# (PyTorch warns that resizing a non-empty out= is deprecated: it does so for
# its own tensors too.)
@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
@pytest.mark.parametrize("shape,fmt,dtype",
                         sample_product(6, [(1, 2, 3, 4, 5), (2, 8, 24, 24, 24)], list(FORMATS),
                                        DTYPES))
def test_results_are_resizable_like_pytorchs(restore_pytorch_kernel, dtype, fmt, shape):
    results = _results(dtype, fmt, shape)
    for name, t in results.items():
        n = t.numel()
        grown = t.detach()
        grown.resize_(n + 1000)                    # its storage grows, as PyTorch's would
        assert grown.shape == (n + 1000,), name
        grown[n:] = 1                              # and the new part is real memory
    for name, t in _results(dtype, fmt, shape).items():
        a = torch.ones(3, 4, dtype=dtype)
        b = torch.full((2, 4), 2.0, dtype=dtype)
        y = t.detach()
        torch.cat([a, b], out=y)                   # out= of another shape resizes it
        assert y.shape == (5, 4) and torch.equal(y, torch.cat([a, b])), name


def test_enabled_results_come_from_the_library(restore_pytorch_kernel):
    before = dict(tbt.call_counts())
    _results(torch.float32, "ncdhw", (1, 2, 3, 4, 5))
    after = tbt.call_counts()
    assert after["kernel"] - before["kernel"] >= 2      # drop-in and enable() backward
    assert after["forward"] - before["forward"] >= 3


# -- every call F.interpolate refuses, refused with its exception type -------

BAD_ARGUMENTS = [
    dict(size=(5.0, 6, 7)),
    dict(size=(5, 6.5, 7)),
    dict(size=5.0),
    dict(size=(True, 6, 7)),
    dict(size="abc"),
    dict(size=(5, 6)),
    dict(size=(5, 6, 7, 8)),
    dict(size=0),
    dict(size=(5, -1, 7)),
    dict(size=(5, 6, 7), recompute_scale_factor=True),
    dict(size=(5, 6, 7), recompute_scale_factor="yes"),
    dict(size=(5, 6, 7), scale_factor=2),
    dict(),
    dict(scale_factor=float("nan")),
    dict(scale_factor=float("inf")),
    dict(scale_factor=(2.0, float("-inf"), 2.0)),
    dict(scale_factor=float("nan"), recompute_scale_factor=True),
    dict(scale_factor=float("inf"), recompute_scale_factor=True),
    dict(scale_factor=-1.0),
    dict(scale_factor=1e-9),
    dict(scale_factor=2**62),
    dict(scale_factor="2"),
    dict(scale_factor=(2.0, 2.0)),
    dict(scale_factor=(2.0, None, 2.0)),
    dict(scale_factor=torch.tensor(2.0)),
    dict(size=(5, 6, 7), align_corners=1),
    dict(size=(5, 6, 7), align_corners="yes"),
    # (size=2**62: past the contract's limits, which the drop-in refuses
    # with 161002 where PyTorch fails to allocate; tested above.)
]
GOOD_UNUSUAL_ARGUMENTS = [
    dict(size=torch.tensor(5)),
    dict(size=(np.int64(5), 6, 7)),
    dict(scale_factor=(2, 2, True)),
    dict(scale_factor=np.float64(1.5)),
    dict(scale_factor=2, recompute_scale_factor="yes"),
    dict(scale_factor=1.7, recompute_scale_factor=True),
]
BAD_INPUTS = {
    "4-D": (1, 2, 3, 4),
    "3-D": (1, 2, 3),
    "C = 0": (1, 0, 2, 3, 4),
    "D = 0": (1, 2, 0, 3, 4),
}


def _three_ways(x, kw):
    """The exception type (or the result) of F.interpolate, the drop-in, and enable()."""
    def outcome(fn):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - the type is what is compared
            return type(exc)

    reference = outcome(lambda: F.interpolate(x, mode="trilinear", **kw))
    ours = outcome(lambda: tbt.upsample_trilinear3d(x, **kw))
    with tbt.enabled():
        enabled = outcome(lambda: F.interpolate(x, mode="trilinear", **kw))
    return reference, ours, enabled


@pytest.mark.parametrize("kw", BAD_ARGUMENTS, ids=repr)
def test_bad_arguments_get_interpolates_exception(restore_pytorch_kernel, kw):
    reference, ours, enabled = _three_ways(torch.randn(1, 2, 3, 4, 5), kw)
    assert isinstance(reference, type) and issubclass(reference, Exception)
    assert ours is reference and enabled is reference


@pytest.mark.parametrize("shape", list(BAD_INPUTS.values()), ids=list(BAD_INPUTS))
@pytest.mark.parametrize("kw", [dict(size=6), dict(size=(6, 7)), dict(scale_factor=2)],
                         ids=repr)
def test_bad_inputs_get_interpolates_exception(restore_pytorch_kernel, shape, kw):
    reference, ours, enabled = _three_ways(torch.randn(shape), kw)
    assert isinstance(reference, type)
    assert ours is reference and enabled is reference


@pytest.mark.parametrize("kw", GOOD_UNUSUAL_ARGUMENTS, ids=repr)
def test_unusual_arguments_interpolate_accepts_give_its_result(restore_pytorch_kernel, kw):
    x = torch.randn(1, 2, 3, 4, 5, dtype=torch.float64)
    reference, ours, enabled = _three_ways(x, kw)
    for got in (ours, enabled):
        assert isinstance(got, torch.Tensor) and got.shape == reference.shape
        torch.testing.assert_close(got, reference, rtol=1e-12, atol=1e-12)


def test_the_drop_in_passes_the_scales_interpolate_passes():
    # With scale_factor (no recompute) the scales, else none: the backward
    # then uses the same coordinates as PyTorch's.
    x = torch.randn(1, 1, 5, 5, 5, dtype=torch.float64, requires_grad=True)
    for kw in (dict(scale_factor=1.7), dict(scale_factor=1.7, recompute_scale_factor=True),
               dict(size=(8, 8, 8))):
        (g_ref,) = torch.autograd.grad(F.interpolate(x, mode="trilinear", **kw).sum(), x)
        (g,) = torch.autograd.grad(tbt.upsample_trilinear3d(x, **kw).sum(), x)
        torch.testing.assert_close(g, g_ref, rtol=1e-12, atol=1e-12)


# -- torch.func and forward-mode AD ---------------------------------------------

def _fwd_ad(fn, x, t):
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level():
        return fwAD.unpack_dual(fn(fwAD.make_dual(x, t))).tangent


TRANSFORMS = {
    "grad": lambda fn, x, t: torch.func.grad(lambda v: (fn(v) * fn(v)).sum())(x),
    "grad of grad": lambda fn, x, t: torch.func.grad(
        lambda v: torch.func.grad(lambda w: (fn(w) ** 2).sum())(v).sin().sum())(x),
    "vmap": lambda fn, x, t: torch.func.vmap(fn)(torch.stack([x, t, x - t])),
    "vmap in_dims=1": lambda fn, x, t: torch.func.vmap(fn, in_dims=1)(
        torch.stack([x, t], dim=1)),
    "jacrev": lambda fn, x, t: torch.func.jacrev(fn)(x),
    "jacfwd": lambda fn, x, t: torch.func.jacfwd(fn)(x),
    "jvp": lambda fn, x, t: torch.func.jvp(fn, (x,), (t,))[1],
    "forward_ad": lambda fn, x, t: _fwd_ad(fn, x, t),
    "vjp of vmap": lambda fn, x, t: torch.func.vjp(torch.func.vmap(fn), torch.stack([x, t]))[1](
        torch.func.vmap(fn)(torch.stack([x, t])))[0],
}
REVERSE_MODE = {"grad", "grad of grad", "jacrev", "vjp of vmap"}
FUNC_CASES = [dict(scale_factor=(2, 1.5, 2)), dict(size=(3, 5, 4), align_corners=True)]


@pytest.mark.parametrize("kw", FUNC_CASES, ids=repr)
@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize("front", ["drop-in", "enable()"])
def test_torch_func_transforms_match_interpolate(restore_pytorch_kernel, front, transform,
                                                  fmt, kw):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(1, 2, 2, 3, 2, dtype=torch.float64, generator=gen).contiguous(
        memory_format=FORMATS[fmt])
    t = torch.randn(x.shape, dtype=torch.float64, generator=gen)
    reference = TRANSFORMS[transform](lambda v: F.interpolate(v, mode="trilinear", **kw), x, t)
    before = tbt.call_counts()
    if front == "drop-in":
        got = TRANSFORMS[transform](lambda v: tbt.upsample_trilinear3d(v, **kw), x, t)
        # The library's kernels ran, never PyTorch's.
        after = tbt.call_counts()
        assert after["forward"] > before["forward"]
        assert after["fallback"] == before["fallback"]
        assert after["forward_fallback"] == before["forward_fallback"]
    else:
        with tbt.enabled():
            got = TRANSFORMS[transform](
                lambda v: F.interpolate(v, mode="trilinear", **kw), x, t)
        after = tbt.call_counts()
        assert after["forward"] > before["forward"]
        if transform in REVERSE_MODE:
            assert after["kernel"] > before["kernel"]
    torch.testing.assert_close(got, reference, rtol=1e-12, atol=1e-12)


def test_drop_in_backward_under_grad_runs_the_librarys_kernel():
    x = torch.randn(1, 2, 3, 3, 3, dtype=torch.float64)
    before = tbt.call_counts()["kernel"]
    torch.func.grad(lambda v: tbt.upsample_trilinear3d(v, scale_factor=2).square().sum())(x)
    assert tbt.call_counts()["kernel"] == before + 1


# -- which torch.compile backends each front end is served under -----------
#
# (front end, backend) -> (this library's backward calls, forward calls) for
# one forward and backward.  docs/torch.md's table and enable()'s docstring
# state the same; the tests below hold all three together.
SERVED = {
    ("upsample_trilinear3d(x)", "eager"): (1, 1),
    ("upsample_trilinear3d(x)", "aot_eager"): (1, 1),
    ("upsample_trilinear3d(x)", "inductor"): (1, 1),
    ("F.interpolate + enable()", "eager"): (1, 1),
    ("F.interpolate + enable()", "aot_eager"): (1, 1),
    ("F.interpolate + enable()", "inductor"): (1, 1),
}
BACKENDS = ["eager", "aot_eager", "inductor"]


@pytest.mark.parametrize("backend", [
    b if b != "inductor" else pytest.param(b, marks=pytest.mark.slow) for b in BACKENDS])
@pytest.mark.parametrize("front", ["upsample_trilinear3d(x)", "F.interpolate + enable()"])
def test_compile_backends_served_as_documented(restore_pytorch_kernel, front, backend):
    if front == "F.interpolate + enable()":
        def fn(v):
            return F.interpolate(v, scale_factor=2, mode="trilinear")
    else:
        def fn(v):
            return tbt.upsample_trilinear3d(v, scale_factor=2)
    x0 = torch.randn(2, 4, 5, 5, 5)      # not tiny (torch._compile.PYTORCH_BELOW)
    g = torch.randn(2, 4, 10, 10, 10)
    x_ref = x0.clone().requires_grad_()
    F.interpolate(x_ref, scale_factor=2, mode="trilinear").backward(g)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend)
    x = x0.clone().requires_grad_()
    with tbt.enabled():
        before = tbt.call_counts()
        y = compiled(x)
        y.backward(g)
        after = tbt.call_counts()
    assert (after["kernel"] - before["kernel"],
            after["forward"] - before["forward"]) == SERVED[front, backend]
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=2e-5, atol=2e-5)


def _served_word(cell):
    return "this kernel" in cell


def test_docs_table_states_what_is_served():
    text = (DOCS / "torch.md").read_text()
    section = text[text.index("## `torch.compile`"):]
    header = next(line for line in section.splitlines() if line.startswith("| |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    rows = {}
    for line in section.splitlines():
        for front in ("upsample_trilinear3d(x)", "F.interpolate + enable()"):
            if line.startswith(f"| `{front.split(' ')[0]}"):
                rows[front] = [c.strip() for c in line.strip("|").split("|")]
    assert set(rows) == {"upsample_trilinear3d(x)", "F.interpolate + enable()"}
    for front, cells in rows.items():
        for backend in BACKENDS:
            k = next(i for i, c in enumerate(columns) if f'"{backend}"' in c)
            assert _served_word(cells[k]) == (SERVED[front, backend] != (0, 0)), (front, backend)


def test_enable_docstring_states_what_is_served():
    doc = " ".join(tbt.enable.__doc__.split())
    served = re.search(r"served with the (.*?) backends", doc).group(1)
    named = set(re.findall(r'backend="(\w+)"', served))
    assert named == {b for b in BACKENDS if SERVED["F.interpolate + enable()", b] != (0, 0)}


# -- the result's layout follows the caller's array, whatever is copied ------

def _misaligned(arr):
    """A copy of ``arr`` with the same strides at an address off by one byte."""
    raw = np.zeros(arr.nbytes + arr.itemsize + 1, np.uint8)
    base = np.lib.stride_tricks.as_strided(
        raw[1:1 + arr.nbytes].view(np.uint8), shape=(arr.nbytes,))
    assert base.ctypes.data % 2 == 1
    order = np.argsort([-abs(s) for s in arr.strides], kind="stable")
    dense = np.ascontiguousarray(arr.transpose(order))
    view = np.ndarray(dense.shape, arr.dtype, buffer=raw, offset=1,
                      strides=dense.strides).transpose(np.argsort(order))
    view[...] = arr
    assert not view.flags.aligned and view.strides == arr.strides
    return view


def _variants(arr):
    readonly = arr.copy(order="K")
    readonly.flags.writeable = False
    yield "aligned", arr
    yield "misaligned", _misaligned(arr)
    yield "read-only", readonly
    yield "memoryview", memoryview(arr)


def _layout_of(shape, dtype, fmt):
    base = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    if fmt == "channels_last_3d":
        return np.ascontiguousarray(base.transpose(0, 2, 3, 4, 1)).transpose(0, 4, 1, 2, 3)
    return base


def _is_channels_last(result):
    s = result.stride() if isinstance(result, torch.Tensor) else \
        tuple(st // result.itemsize for st in result.strides)
    return s[1] == 1


@pytest.mark.parametrize("op", ["backward", "forward"])
@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_result_layout_follows_the_callers_array(op, fmt, dtype):
    arr = _layout_of((1, 3, 4, 5, 6), dtype, fmt)

    def call(a):
        if op == "backward":
            return tb.upsample_trilinear3d_backward(a, (2, 3, 3))
        return tb.upsample_trilinear3d(a, (5, 7, 9))

    expected = call(arr)
    assert _is_channels_last(expected) == (fmt == "channels_last_3d")
    for name, variant in _variants(arr):
        got = call(variant)
        assert _is_channels_last(got) == (fmt == "channels_last_3d"), name
        np.testing.assert_array_equal(got, expected, err_msg=name)


@pytest.mark.parametrize("op", ["backward", "forward"])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_result_layout_follows_a_misaligned_tensor(op, fmt):
    arr = _layout_of((1, 3, 4, 5, 6), "float32", fmt)
    tensor = torch.from_numpy(_misaligned(arr))
    assert tensor.data_ptr() % 4
    if op == "backward":
        expected = tbt.upsample_trilinear3d_backward(torch.from_numpy(arr), (4, 5, 6),
                                                     (1, 3, 2, 3, 3), False)
        for got in (tbt.upsample_trilinear3d_backward(tensor, (4, 5, 6), (1, 3, 2, 3, 3), False),
                    tb.upsample_trilinear3d_backward(tensor, (2, 3, 3))):
            assert _is_channels_last(got) == (fmt == "channels_last_3d")
            assert torch.equal(got, expected)
    else:
        expected = tbt.upsample_trilinear3d(torch.from_numpy(arr), size=(5, 7, 9))
        for got in (tbt.upsample_trilinear3d(tensor, size=(5, 7, 9)),
                    tb.upsample_trilinear3d(tensor, (5, 7, 9))):
            assert _is_channels_last(got) == (fmt == "channels_last_3d")
            assert torch.equal(got, expected)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_byte_swapped_input_is_refused_not_converted(fmt):
    arr = _layout_of((1, 3, 4, 5, 6), "float32", fmt)
    swapped = arr.astype(arr.dtype.newbyteorder(), order="K")
    with pytest.raises(InvalidArgumentError, match="byte order"):
        tb.upsample_trilinear3d_backward(swapped, (2, 3, 3))
    with pytest.raises(InvalidArgumentError, match="byte order"):
        tb.upsample_trilinear3d(swapped, (5, 7, 9))


def test_scale_floor_rule_matches_pytorch_for_plain_factors():
    # The plain path computes the output size itself: PyTorch's truncated
    # double product, checked against F.interpolate on sizes near integers.
    for n, f in ((5, 1.7), (7, 0.3), (3, 10 / 3), (10, 0.1 * 3), (6, 2)):
        x = torch.zeros(1, 1, n, n, n)
        expected = F.interpolate(x, scale_factor=f, mode="trilinear").shape
        assert tbt.upsample_trilinear3d(x, scale_factor=f).shape == expected
        assert expected[2] == math.floor(n * f)


# -- no argument silently ignored or mis-reported --------------------

@pytest.mark.parametrize("memory_format", ["banana", 5, torch.channels_last, torch.strided,
                                           "channels_last_3d"], ids=repr)
def test_a_memory_format_other_than_the_four_is_refused(no_allocation, memory_format):
    g = torch.rand(1, 2, 4, 4, 4)
    with pytest.raises(InvalidArgumentError, match="memory_format must be") as info:
        tbt.upsample_trilinear3d_backward(g, (4, 4, 4), (1, 2, 2, 2, 2), False,
                                          memory_format=memory_format)
    assert info.value.status == 161002


@pytest.mark.parametrize("layout", list(FORMATS))
@pytest.mark.parametrize("memory_format", [None, torch.preserve_format, torch.contiguous_format,
                                           torch.channels_last_3d], ids=repr)
def test_each_memory_format_gives_its_layout(layout, memory_format):
    g = torch.rand(1, 2, 4, 4, 4).contiguous(memory_format=FORMATS[layout])
    got = tbt.upsample_trilinear3d_backward(g, (4, 4, 4), (1, 2, 2, 2, 2), False,
                                            memory_format=memory_format)
    # None and preserve_format: the layout PyTorch's kernel picks for g.
    wanted = (FORMATS[layout] if memory_format in (None, torch.preserve_format)
              else memory_format)
    assert got.is_contiguous(memory_format=wanted)
    torch.testing.assert_close(got, torch.ops.aten.upsample_trilinear3d_backward(
        g, (4, 4, 4), (1, 2, 2, 2, 2), False))


def _nested(layout):
    parts = [torch.rand(2, 4, 4, 4), torch.rand(2, 4, 4, 4)]
    with warnings.catch_warnings():    # the strided layout's "prototype stage" notice
        warnings.simplefilter("ignore", UserWarning)
        return torch.nested.nested_tensor(parts, layout=layout)


NOT_DENSE = {
    "nested (strided)": lambda: _nested(torch.strided),
    "nested (jagged)": lambda: _nested(torch.jagged),
    "sparse COO": lambda: torch.rand(2, 2, 4, 4, 4).to_sparse(),
    "mkldnn": lambda: torch.rand(2, 2, 4, 4, 4).to_mkldnn(),
}


@pytest.mark.parametrize("kind", list(NOT_DENSE))
def test_a_tensor_that_is_not_dense_is_161002_through_every_front_end(no_allocation, kind):
    g = NOT_DENSE[kind]()
    calls = {
        "tbt backward": lambda: tbt.upsample_trilinear3d_backward(
            g, (4, 4, 4), (2, 2, 2, 2, 2), False),
        "tb backward": lambda: tb.upsample_trilinear3d_backward(g, (2, 2, 2)),
        "tb forward": lambda: tb.upsample_trilinear3d(g, (8, 8, 8)),
        "executor": lambda: tb.get_workspace_size(g, (4, 4, 4), (2, 2, 2, 2, 2), False,
                                                  0.0, 0.0, 0.0, torch.empty(2, 2, 2, 2, 2)),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidArgumentError, match="dense") as info:
            call()
        assert info.value.status == 161002, name

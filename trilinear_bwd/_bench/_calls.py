"""The calls users make, timed beside PyTorch's: the headline table of ``trilinear_bwd.bench``.

Each row times the call a user writes -- the one call with its freshly
allocated result, a repeated ``execute`` of a repeatable executor, PyTorch's
autograd with :func:`trilinear_bwd.torch.enable` -- against PyTorch's
equivalent, in interleaved rounds in one process (each round runs every
contender in turn, a batch of calls each; the median per-call time over the
rounds is reported).  Calls repeat one geometry, as a training loop does, so
caches and this library's pools are warm: that is what the table measures.
The targets in docs/performance.md are checked against the ratios and
reported, never asserted (timing is not a test).
"""

import sys

import numpy as np

from ._timing import _interleaved

def _pytorch_kernel(torch):
    """PyTorch's own CPU kernel, called as its functional form runs it (allocate, compute).

    Once ``trilinear_bwd.torch`` is imported, a Python kernel stands in front
    of the functional form (it hands each call back to PyTorch's while not
    enabled: a hop of a few microseconds, docs/torch.md); PyTorch's kernel is
    then reached through the ``out=`` overload, which nothing overrides.
    """
    functional = torch.ops.aten.upsample_trilinear3d_backward
    if "trilinear_bwd.torch" not in sys.modules:
        return functional
    overload = functional.grad_input
    return lambda g, o, i, *rest: overload(g, o, i, *rest, grad_input=torch.empty(i))


def measure_calls(rounds=15, num_threads=None):
    """Time the calls users make beside PyTorch's; return a list of row dicts.

    Parameters
    ----------
    rounds : int
        Interleaved rounds per row.
    num_threads : int, optional
        Threads for both libraries (``torch.set_num_threads``); None leaves
        each at its default.

    Returns
    -------
    list of dict
        ``{"call", "shape", "ours_us", "torch_us", "ratio", "target", "holds"}``
        per row; ``ratio`` is the other column's time (PyTorch's, or the
        reused-``out`` call's) over ours: above 1, ours is faster.
    """
    import torch

    import trilinear_bwd as tb

    if num_threads is not None:
        torch.set_num_threads(num_threads)
    rng = np.random.default_rng(0)
    aten = _pytorch_kernel(torch)
    rows = []

    def row(call, shape, ours, theirs, target, holds, ratio):
        rows.append({"call": call, "shape": shape, "ours_us": ours * 1e6,
                     "torch_us": theirs * 1e6 if theirs else None, "ratio": ratio,
                     "target": target, "holds": holds})

    def one_call_against_torch(shape_out, shape_in):
        g = rng.random(shape_out, dtype=np.float32)
        tg = torch.from_numpy(g)
        return g, tg, _interleaved({
            "ours": lambda: tb.upsample_trilinear3d_backward(g, shape_in),
            "torch": lambda: aten(tg, shape_out[2:], shape_in, False, None, None, None),
        }, rounds)

    # Small volumes through the one call, and a repeated execute().
    for shape_out, shape_in, target in (((1, 1, 4, 4, 4), (1, 1, 2, 2, 2), 3.0),
                                        ((1, 4, 16, 16, 16), (1, 4, 8, 8, 8), 1 / 1.5)):
        g, tg, t = one_call_against_torch(shape_out, shape_in)
        text = (f"<= {target:g}x PyTorch's time" if target >= 1
                else f">= {1 / target:g}x faster than PyTorch")
        row("one call (fresh result)", shape_out, t["ours"], t["torch"], text,
            t["ours"] <= target * t["torch"], t["torch"] / t["ours"])
        if shape_out == (1, 1, 4, 4, 4):
            gi = np.empty(shape_in, np.float32)
            size, ex = tb.get_workspace_size(g, shape_out[2:], shape_in, False, 0.0, 0.0,
                                             0.0, gi)
            ex.set_repeatable()
            ws = tb.alloc_workspace(size)
            t2 = _interleaved({
                "ours": lambda: tb.execute(ws, size, ex),
                "torch": lambda tg=tg, a=shape_out[2:], s=shape_in: aten(tg, a, s, False,
                                                                         None, None, None),
            }, rounds)
            row("execute() of a repeatable executor", shape_out, t2["ours"], t2["torch"],
                "<= 1.5x PyTorch's time", t2["ours"] <= 1.5 * t2["torch"],
                t2["torch"] / t2["ours"])

    # Every size from 1e4 elements of grad_out up: faster than PyTorch.
    for side in (22, 46, 100, 216):
        shape_out = (1, 1, side, side, side)
        shape_in = (1, 1, side // 2, side // 2, side // 2)
        _, _, t = one_call_against_torch(shape_out, shape_in)
        row("one call (fresh result)", shape_out, t["ours"], t["torch"],
            "faster than PyTorch", t["ours"] < t["torch"], t["torch"] / t["ours"])

    # The downsample case: a 33.5 MB result, fresh, into a reused out, and
    # through enable() and PyTorch's autograd.
    shape_out, shape_in = (2, 16, 40, 40, 40), (2, 16, 64, 64, 64)
    g = rng.random(shape_out, dtype=np.float32)
    tg = torch.from_numpy(g)
    out = np.empty(shape_in, np.float32)
    x = torch.rand(shape_in, requires_grad=True)
    y = torch.nn.functional.interpolate(x, size=shape_out[2:], mode="trilinear")
    gy = torch.from_numpy(g)
    import trilinear_bwd.torch as tbt

    aten = _pytorch_kernel(torch)
    was = tbt.is_enabled()

    def autograd_ours():
        tbt.enable()
        try:
            torch.autograd.grad(y, x, gy, retain_graph=True)
        finally:
            if not was:
                tbt.disable()

    t = _interleaved({
        "fresh": lambda: tb.upsample_trilinear3d_backward(g, shape_in[2:]),
        "out": lambda: tb.upsample_trilinear3d_backward(g, shape_in[2:], out=out),
        "torch": lambda: aten(tg, shape_out[2:], shape_in, False, None, None, None),
        "autograd_ours": autograd_ours,
        "autograd_torch": lambda: torch.autograd.grad(y, x, gy, retain_graph=True),
    }, max(5, rounds // 2))
    row("one call into a reused out", shape_out, t["out"], t["torch"], "(the kernel)", True,
        t["torch"] / t["out"])
    row("one call (fresh result)", shape_out, t["fresh"], t["torch"],
        ">= 4x faster than PyTorch", t["torch"] >= 4 * t["fresh"], t["torch"] / t["fresh"])
    row("one call (fresh result) against a reused out", shape_out, t["fresh"], t["out"],
        "fresh <= 1.5x the reused out", t["fresh"] <= 1.5 * t["out"], t["out"] / t["fresh"])
    row("enable() + PyTorch autograd", shape_out, t["autograd_ours"], t["autograd_torch"],
        ">= 3x faster than PyTorch's autograd", t["autograd_torch"] >= 3 * t["autograd_ours"],
        t["autograd_torch"] / t["autograd_ours"])
    rows.extend(measure_layer(max(5, rounds // 2)))
    return rows


def _pytorch_forward(torch):
    """PyTorch's own CPU forward as its functional form runs it (allocate, compute).

    Through the ``out=`` overload, which ``trilinear_bwd.torch`` leaves
    alone, with the result in the layout PyTorch's functional form picks.
    """
    overload = torch.ops.aten.upsample_trilinear3d.out

    def call(x, size):
        fmt = (torch.channels_last_3d if x.is_contiguous(memory_format=torch.channels_last_3d)
               and not x.is_contiguous() else torch.contiguous_format)
        out = torch.empty(tuple(x.shape[:2]) + tuple(size), dtype=x.dtype, memory_format=fmt)
        return overload(x, size, False, None, None, None, out=out)
    return call


def measure_layer(rounds=8):
    """The forward, and the whole layer (forward + backward) beside PyTorch's; row dicts.

    The unet-x2 case, (2, 32, 32, 32, 32) -> 64^3 float32: the one call
    with its fresh result against PyTorch's forward, in NCDHW and
    channels-last; then one autograd step (``F.interpolate`` and
    ``torch.autograd.grad``) through :func:`trilinear_bwd.torch.enable`
    against the same step with PyTorch's kernels.
    """
    import torch
    import torch.nn.functional as F

    import trilinear_bwd as tb
    import trilinear_bwd.torch as tbt

    rows = []
    forward = _pytorch_forward(torch)
    shape, size = (2, 32, 32, 32, 32), (64, 64, 64)
    for layout, target in (("NCDHW", 8.0), ("NDHWC", 2.0)):
        x = torch.rand(shape)
        if layout == "NDHWC":
            x = x.contiguous(memory_format=torch.channels_last_3d)
        t = _interleaved({
            "ours": lambda x=x: tb.upsample_trilinear3d(x, size),
            "torch": lambda x=x: forward(x, size),
        }, rounds)
        rows.append({"call": f"forward one call (fresh result), {layout}", "shape": shape,
                     "ours_us": t["ours"] * 1e6, "torch_us": t["torch"] * 1e6,
                     "ratio": t["torch"] / t["ours"],
                     "target": f">= {target:g}x faster than PyTorch's forward",
                     "holds": t["torch"] >= target * t["ours"]})
    for layout, target in (("NCDHW", 6.0), ("NDHWC", None)):
        x = torch.rand(shape)
        if layout == "NDHWC":
            x = x.contiguous(memory_format=torch.channels_last_3d)
        x.requires_grad_()
        g = torch.rand((2, 32) + size)
        was = tbt.is_enabled()

        def step(x=x, g=g):
            y = F.interpolate(x, size=size, mode="trilinear")
            return torch.autograd.grad(y, x, g)

        def step_ours():
            tbt.enable()
            try:
                step()
            finally:
                if not was:
                    tbt.disable()

        t = _interleaved({"ours": step_ours, "torch": step}, rounds)
        rows.append({"call": f"layer: forward + backward, enable() + autograd, {layout}",
                     "shape": shape, "ours_us": t["ours"] * 1e6,
                     "torch_us": t["torch"] * 1e6, "ratio": t["torch"] / t["ours"],
                     "target": (f">= {target:g}x faster than PyTorch's" if target
                                else "(no target)"),
                     "holds": True if target is None else t["torch"] >= target * t["ours"]})
    return rows


def format_calls(rows):
    """The rows of :func:`measure_calls` as a Markdown table."""
    lines = ["| call | shape read (grad_out, or x) | ours (us) | PyTorch or reference (us) | ratio | "
             "target | holds |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        theirs = "" if r["torch_us"] is None else f"{r['torch_us']:.1f}"
        lines.append(f"| {r['call']} | {r['shape']} | {r['ours_us']:.1f} | {theirs} | "
                     f"{r['ratio']:.2f} | {r['target']} | {'yes' if r['holds'] else 'NO'} |")
    return "\n".join(lines)

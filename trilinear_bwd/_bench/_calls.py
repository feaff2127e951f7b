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
import time

import numpy as np

# Time per round, per contender: enough calls to span this many seconds.
ROUND_SECONDS = 0.02


def _batch(fn):
    """How many calls of ``fn`` span ``ROUND_SECONDS`` (after a warm-up call)."""
    fn()
    start = time.perf_counter()
    fn()
    return max(1, int(ROUND_SECONDS / max(time.perf_counter() - start, 1e-7)))


def _interleaved(contenders, rounds):
    """``{name: median seconds per call}``, the contenders run in turn in every round."""
    return {name: float(np.median(s)) for name, s in _samples(contenders, rounds).items()}


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


# The sweep: x2 upsampling from the deep, small levels of a 3-D
# U-Net decoder to a large volume, (N, C, side) of the forward's input.
SWEEP = ((1, 1, 4), (2, 32, 3), (2, 16, 6), (1, 4, 10), (2, 8, 12), (2, 16, 16),
         (2, 16, 24), (2, 32, 32))


def _samples(contenders, rounds):
    """``{name: [seconds per call, one per round]}``, the contenders in turn every round."""
    batches = {name: _batch(fn) for name, fn in contenders.items()}
    samples = {name: [] for name in contenders}
    for r in range(rounds):
        names = list(contenders)
        names = names[r % len(names):] + names[:r % len(names)]   # rotate the order
        for name in names:
            fn, batch = contenders[name], batches[name]
            start = time.perf_counter()
            for _ in range(batch):
                fn()
            samples[name].append((time.perf_counter() - start) / batch)
    return samples


_SWEEP_LAYOUTS = ("NCDHW", "NDHWC")
_SWEEP_OPS = ("forward", "backward")


def _sweep_points(sweep):
    """``[(op, layout, (N, C, side))]``: the sweep's points, in the table's order."""
    return [(op, layout, point) for point in sweep for layout in _SWEEP_LAYOUTS
            for op in _SWEEP_OPS]


def _sweep_call(torch, op, layout, point):
    """The call a user's code makes at one point of the sweep, ready to repeat.

    The forward is ``F.interpolate(x, scale_factor=2, mode="trilinear")``
    on a float32 ``x`` of ``(N, C, side^3)``; the backward is
    ``aten::upsample_trilinear3d_backward`` of the ``(2 side)^3`` gradient
    with the arguments autograd passes, through the operator's own entry
    point (no ``OpOverload`` Python frame), as close to autograd's call
    from C++ as Python gets.
    """
    import torch.nn.functional as F

    n, c, side = point
    fmt = torch.channels_last_3d if layout == "NDHWC" else torch.contiguous_format
    small = (n, c, side, side, side)
    if op == "forward":
        x = torch.rand(small).contiguous(memory_format=fmt)
        return lambda: F.interpolate(x, scale_factor=2, mode="trilinear")
    g = torch.rand((n, c) + (2 * side,) * 3).contiguous(memory_format=fmt)
    size, input_size = [2 * side] * 3, list(small)
    overload = torch.ops.aten.upsample_trilinear3d_backward.default
    backward = getattr(overload, "_op", overload)
    return lambda: backward(g, size, input_size, False, 2.0, 2.0, 2.0)


def serve_pytorch_sweep(spec):
    """The PyTorch side of :func:`measure_sweep`, in a process of its own.

    Reads a point's index per line from standard input, times a batch of
    that point's call (:func:`_sweep_call`) and writes the seconds per
    call.  The process never imports ``trilinear_bwd.torch``, so its calls
    reach PyTorch's kernels as in a program that does not use this library.

    Parameters
    ----------
    spec : str
        JSON: ``{"sweep": [[N, C, side], ...], "threads": int or null,
        "round_seconds": float}``, the parent's sweep, thread count and
        :data:`ROUND_SECONDS`.

    Raises
    ------
    RuntimeError
        If ``trilinear_bwd.torch`` is found imported: the times would be
        PyTorch's behind this library's registration, not PyTorch's.
    """
    import json

    import torch

    global ROUND_SECONDS
    spec = json.loads(spec)
    ROUND_SECONDS = spec["round_seconds"]
    if spec["threads"] is not None:
        torch.set_num_threads(spec["threads"])
    points = _sweep_points(spec["sweep"])
    current = None    # (index, call, batch): the parent asks for one point at a time
    for line in sys.stdin:
        i = int(line)
        if current is None or current[0] != i:
            op, layout, point = points[i]
            current = None    # the previous point's tensors go before the next one's come
            fn = _sweep_call(torch, op, layout, tuple(point))
            current = (i, fn, _batch(fn))
        _, fn, batch = current
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        elapsed = (time.perf_counter() - start) / batch
        if "trilinear_bwd.torch" in sys.modules:   # the comparison would be void
            raise RuntimeError("the PyTorch side imported trilinear_bwd.torch")
        print(repr(elapsed), flush=True)


class _PytorchProcess:
    """A child process running :func:`serve_pytorch_sweep`; ``time(i)`` asks it for point i."""

    def __init__(self, sweep, num_threads):
        import json
        import os
        import subprocess
        import tempfile

        import trilinear_bwd

        spec = json.dumps({"sweep": [list(p) for p in sweep], "threads": num_threads,
                           "round_seconds": ROUND_SECONDS})
        # A file, not a pipe, for the child's warnings: nothing reads them
        # until it fails, and a full pipe would stop it.
        self.errors = tempfile.TemporaryFile(mode="w+")
        # The child imports this very package, wherever it was imported from.
        root = os.path.dirname(os.path.dirname(os.path.abspath(trilinear_bwd.__file__)))
        self.proc = subprocess.Popen(
            [sys.executable, "-c",
             "import sys; sys.path.insert(0, sys.argv[2]); "
             "from trilinear_bwd._bench_calls import serve_pytorch_sweep; "
             "serve_pytorch_sweep(sys.argv[1])", spec, root],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors, text=True)

    def time(self, i):
        self.proc.stdin.write(f"{i}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            self.errors.seek(0)
            raise RuntimeError("the PyTorch side of the sweep failed:\n" + self.errors.read())
        return float(line)

    def close(self):
        try:
            self.proc.stdin.close()
        except BrokenPipeError:           # the child has already ended
            pass
        self.proc.wait()
        self.proc.stdout.close()
        self.errors.close()


def measure_sweep(rounds=15, num_threads=None, sweep=SWEEP):
    """The calls users make under ``enable()`` beside the same calls in plain PyTorch; row dicts.

    For each ``(N, C, side)`` of :data:`SWEEP`, both layouts, forward and
    backward, the call a user's code makes (:func:`_sweep_call`: the
    forward through ``F.interpolate``, the backward as autograd calls it),
    fresh results.  Ours: in this process with
    :func:`trilinear_bwd.torch.enable` in effect.  PyTorch's: the same call
    in a child process that never imports ``trilinear_bwd.torch``
    (:func:`serve_pytorch_sweep`) -- once this library's kernels are
    registered, even PyTorch's own calls in this process take the
    registration's hop, so only another process times PyTorch as its users
    meet it.  The two take turns, a batch each, order alternating, every
    round; the child waits while this process times and the other way
    round.

    Returns
    -------
    list of dict
        ``{"op", "layout", "shape", "torch_us", "ours_us", "ratio",
        "ratio_min", "ratio_max", "rounds"}``: the best (minimum) per-call
        time over the rounds of each; ``ratio`` = PyTorch's best over ours
        (above 1, ours is faster); ``ratio_min`` / ``ratio_max`` the spread
        of the per-round ratios.
    """
    import torch

    import trilinear_bwd.torch as tbt

    if num_threads is not None:
        torch.set_num_threads(num_threads)
    points = _sweep_points(sweep)
    theirs = _PytorchProcess(sweep, num_threads)
    was = tbt.is_enabled()
    tbt.enable()
    rows = []
    try:
        for i, (op, layout, point) in enumerate(points):
            ours = _sweep_call(torch, op, layout, point)
            batch = _batch(ours)
            s = {"ours": [], "torch": []}
            for r in range(rounds):
                for name in (("ours", "torch") if r % 2 == 0 else ("torch", "ours")):
                    if name == "torch":
                        s["torch"].append(theirs.time(i))
                        continue
                    start = time.perf_counter()
                    for _ in range(batch):
                        ours()
                    s["ours"].append((time.perf_counter() - start) / batch)
            per_round = [t / o for t, o in zip(s["torch"], s["ours"])]
            n, c, side = point
            rows.append({"op": op, "layout": layout, "shape": (n, c, side, side, side),
                         "torch_us": min(s["torch"]) * 1e6,
                         "ours_us": min(s["ours"]) * 1e6,
                         "ratio": min(s["torch"]) / min(s["ours"]),
                         "ratio_min": min(per_round), "ratio_max": max(per_round),
                         "rounds": rounds})
    finally:
        theirs.close()
        if not was:
            tbt.disable()
    return rows


def format_sweep(rows):
    """The rows of :func:`measure_sweep` as a Markdown table."""
    lines = ["| op | layout | x shape (N, C, D, H, W), x2 | PyTorch (us) | enabled (us) | "
             "ratio | per-round ratios |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['op']} | {r['layout']} | {r['shape']} | {r['torch_us']:.1f} | "
                     f"{r['ours_us']:.1f} | {r['ratio']:.2f} | "
                     f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f} |")
    return "\n".join(lines)


# The compiled-model table: (name, what is compiled, x's shape, layout,
# align_corners).  Layers from the deepest, smallest level of a U-Net decoder
# to unet-x2, issue 22's (2, 16, 24^3) align_corners=True layer, and a decoder
# block (convolution + upsampling) for a layer inside a model.
COMPILED = (
    ("layer x2", "layer", (1, 1, 4, 4, 4), "NCDHW", False),
    ("layer x2", "layer", (2, 32, 3, 3, 3), "NDHWC", False),
    ("layer x2", "layer", (1, 4, 10, 10, 10), "NCDHW", False),
    ("layer x2", "layer", (2, 16, 24, 24, 24), "NCDHW", True),
    ("layer x2 (unet-x2)", "layer", (2, 32, 32, 32, 32), "NCDHW", False),
    ("layer x2 (unet-x2)", "layer", (2, 32, 32, 32, 32), "NDHWC", False),
    ("decoder block: conv3d + x2", "block", (2, 16, 24, 24, 24), "NCDHW", False),
)


def _compiled_contenders(torch, tbt, kind, shape, layout, align_corners):
    """``{name: step}``: PyTorch and ``enable()``, eager and compiled (inductor)."""
    import types

    F = torch.nn.functional
    fmt = torch.channels_last_3d if layout == "NDHWC" else torch.contiguous_format
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(shape, generator=gen).contiguous(memory_format=fmt).requires_grad_()
    if kind == "block":
        conv = torch.nn.Conv3d(shape[1], shape[1], 3, padding=1).to(memory_format=fmt)

        def model(v):
            return F.interpolate(conv(v), scale_factor=2, mode="trilinear",
                                 align_corners=align_corners)
    else:
        def model(v):
            return F.interpolate(v, scale_factor=2, mode="trilinear",
                                 align_corners=align_corners)
    g = torch.rand(shape[:2] + tuple(2 * s for s in shape[2:]), generator=gen)
    g = g.contiguous(memory_format=fmt)

    def copy(fn, name):
        # A code object of its own: dynamo keeps compiled frames per code
        # object, and the two compiled contenders are traced in two states.
        return types.FunctionType(fn.__code__.replace(co_name=name), fn.__globals__, name,
                                  fn.__defaults__, fn.__closure__)

    pytorch_compiled = torch.compile(copy(model, "pytorch_compiled"))
    enabled_compiled = torch.compile(copy(model, "enabled_compiled"))

    leaves = [x] + (list(conv.parameters()) if kind == "block" else [])

    def state(on, fn):
        def step():
            (tbt.enable if on else tbt.disable)()
            for leaf in leaves:
                leaf.grad = None
            fn(x).backward(g)      # every gradient, as a training step asks
        return step

    return {
        "pytorch": state(False, model),
        "pytorch_compiled": state(False, pytorch_compiled),
        "enabled": state(True, model),
        "enabled_compiled": state(True, enabled_compiled),
    }


def measure_compiled(rounds=8, num_threads=None, cases=COMPILED):
    """Compiled layers with and without :func:`trilinear_bwd.torch.enable`; row dicts.

    For each case of :data:`COMPILED`: one forward and backward
    (``.backward()``, every gradient) of the function, float32, four ways in
    interleaved rounds in one process -- PyTorch eager, PyTorch compiled
    with the default backend (traced and run while disabled: PyTorch's
    decomposition), ``enable()`` eager, and ``enable()`` compiled (traced
    and run while enabled).  Compiling happens before the rounds.

    Returns
    -------
    list of dict
        ``{"case", "layout", "shape", "align_corners", "<contender>_ms"
        for each of the four, "calls": this library's forward and backward
        calls in the last compiled step}``: the best per-step time over the
        rounds.
    """
    import torch

    import trilinear_bwd.torch as tbt

    if num_threads is not None:
        torch.set_num_threads(num_threads)
    was = tbt.is_enabled()
    tbt.enable()        # the first enable() discards compiled frames: before compiling
    rows = []
    try:
        for name, kind, shape, layout, align_corners in cases:
            contenders = _compiled_contenders(torch, tbt, kind, shape, layout,
                                              align_corners)
            for step in contenders.values():
                step()                        # compile (and warm) in its own state
            before = tbt.call_counts()
            contenders["enabled_compiled"]()
            after = tbt.call_counts()
            s = _samples(contenders, rounds)
            row = {"case": name, "layout": layout, "shape": shape,
                   "align_corners": align_corners,
                   "calls": (after["forward"] - before["forward"],
                             after["kernel"] - before["kernel"])}
            row.update({f"{k}_ms": min(v) * 1e3 for k, v in s.items()})
            rows.append(row)
    finally:
        (tbt.enable if was else tbt.disable)()
    return rows


def format_compiled(rows):
    """The rows of :func:`measure_compiled` as a Markdown table."""
    lines = ["| case | layout | x shape | PyTorch eager (ms) | PyTorch compiled (ms) | "
             "enable() eager (ms) | enable() compiled (ms) | compiled: PyTorch / enable() | "
             "enable(): eager / compiled | this library's calls (fwd, bwd) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['layout']} | {r['shape']} | {r['pytorch_ms']:.2f} | "
            f"{r['pytorch_compiled_ms']:.2f} | {r['enabled_ms']:.2f} | "
            f"{r['enabled_compiled_ms']:.2f} | "
            f"{r['pytorch_compiled_ms'] / r['enabled_compiled_ms']:.2f} | "
            f"{r['enabled_ms'] / r['enabled_compiled_ms']:.2f} | {r['calls']} |")
    return "\n".join(lines)

"""The enable() sweep: the calls users make under ``enable()`` beside the same calls in plain PyTorch.

``python -m trilinear_bwd.bench --sweep``: size by size, both layouts,
forward and backward; PyTorch's side runs in a child process that never
imports ``trilinear_bwd.torch`` (:class:`_PytorchProcess`).
"""

import sys
import time

from . import _timing
from ._timing import _batch

# The sweep: x2 upsampling from the deep, small levels of a 3-D
# U-Net decoder to a large volume, (N, C, side) of the forward's input.
SWEEP = ((1, 1, 4), (2, 32, 3), (2, 16, 6), (1, 4, 10), (2, 8, 12), (2, 16, 16),
         (2, 16, 24), (2, 32, 32))


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
        :data:`._timing.ROUND_SECONDS`.

    Raises
    ------
    RuntimeError
        If ``trilinear_bwd.torch`` is found imported: the times would be
        PyTorch's behind this library's registration, not PyTorch's.
    """
    import json

    import torch

    spec = json.loads(spec)
    _timing.ROUND_SECONDS = spec["round_seconds"]
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
                           "round_seconds": _timing.ROUND_SECONDS})
        # A file, not a pipe, for the child's warnings: nothing reads them
        # until it fails, and a full pipe would stop it.
        self.errors = tempfile.TemporaryFile(mode="w+")
        # The child imports this very package, wherever it was imported from.
        root = os.path.dirname(os.path.dirname(os.path.abspath(trilinear_bwd.__file__)))
        self.proc = subprocess.Popen(
            [sys.executable, "-c",
             "import sys; sys.path.insert(0, sys.argv[2]); "
             "from trilinear_bwd._bench._sweep import serve_pytorch_sweep; "
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

"""The compiled-model table: layers under ``torch.compile``, with and without ``enable()``, beside eager.

``python -m trilinear_bwd.bench --compiled``.
"""

from ._timing import _samples

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

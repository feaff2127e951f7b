"""Train a small 3-D U-Net on the CPU with and without trilinear_bwd's backward kernel.

Unchanged PyTorch code -- ``F.interpolate(..., mode="trilinear")`` in the
decoder, ``loss.backward()`` -- runs PyTorch's own
``upsample_trilinear3d_backward`` or, inside ``trilinear_bwd.torch.enabled()``,
this library's.  Two copies of the model start from the same weights and see
the same synthetic batches; their training steps alternate (one plain, one
enabled, in alternating order) so that both see the same machine load, and
the script prints:

* the time of a whole training step (forward, backward, optimizer) for
  each, and the speedup (the median of the per-step ratios: each pair of
  steps runs back to back, so both see the same machine load);
* the largest relative difference between the two loss curves, and between
  the first step's parameter gradients (these differ only by the float32
  rounding of the upsampling gradients; the optimizer's steps then carry
  such differences forward, so the curves drift apart slowly);
* for context, the time of the upsampling backward alone on the model's
  shapes, PyTorch's kernel against this library's, measured side by side.

Run it from a fresh install (``pip install trilinear_bwd`` and a CPU build of
PyTorch)::

    python examples/unet3d_cpu_training.py            # batch 2, 1 -> 8 channels, 48^3, 10 steps
    python examples/unet3d_cpu_training.py --size 32 --steps 6 --channels-last
    python examples/unet3d_cpu_training.py --compile  # both under torch.compile (inductor)

With ``--compile`` both models are compiled with the default backend, and
the variants run one after the other instead of alternating: the two copies
share ``UNet3d.forward``, and dynamo keeps one compiled frame per code
object, traced in the state of the switch at the time (``docs/torch.md``,
"torch.compile"), so the frames are discarded (``torch._dynamo.reset()``)
between the two.  The first steps of each variant compile (the warm-up).

Takes about a minute on two cores with the defaults.
"""

import argparse
import contextlib
import copy
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import trilinear_bwd
import trilinear_bwd.torch as tbt


def block(c_in, c_out):
    return nn.Sequential(
        nn.Conv3d(c_in, c_out, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv3d(c_out, c_out, 3, padding=1), nn.ReLU(inplace=True),
    )


class UNet3d(nn.Module):
    """Three levels down (stride-2 convolutions), three up (trilinear upsampling + skip)."""

    def __init__(self, c_in=1, width=8, c_out=1):
        super().__init__()
        w = width
        self.enc1, self.enc2, self.enc3 = block(c_in, w), block(w, 2 * w), block(2 * w, 4 * w)
        self.down1 = nn.Conv3d(w, w, 2, stride=2)
        self.down2 = nn.Conv3d(2 * w, 2 * w, 2, stride=2)
        self.dec2, self.dec1 = block(4 * w + 2 * w, 2 * w), block(2 * w + w, w)
        self.head = nn.Conv3d(w, c_out, 1)

    def forward(self, x):
        e1 = self.enc1(x)                         # w   at size
        e2 = self.enc2(self.down1(e1))            # 2w  at size/2
        e3 = self.enc3(self.down2(e2))            # 4w  at size/4
        up2 = F.interpolate(e3, scale_factor=2, mode="trilinear", align_corners=False)
        d2 = self.dec2(torch.cat([up2, e2], 1))   # 2w  at size/2
        up1 = F.interpolate(d2, scale_factor=2, mode="trilinear", align_corners=False)
        d1 = self.dec1(torch.cat([up1, e1], 1))   # w   at size
        return self.head(d1)


def synthetic_batches(steps, batch, size, seed=0):
    """Noisy volumes and their smooth versions: a denoising task."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        clean = torch.randn(batch, 1, size // 4, size // 4, size // 4, generator=gen)
        clean = F.interpolate(clean, size=(size,) * 3, mode="trilinear")
        noisy = clean + 0.3 * torch.randn(clean.shape, generator=gen)
        out.append((noisy, clean))
    return out


def train_step(model, opt, x, y):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss.item(), time.perf_counter() - t0


def upsample_shapes(model, x):
    """The (input shape, scale) of each trilinear upsampling in the model's forward."""
    shapes, original = [], F.interpolate

    def spy(inp, *args, **kwargs):
        if kwargs.get("mode") == "trilinear":
            shapes.append(tuple(inp.shape))
        return original(inp, *args, **kwargs)

    F.interpolate = spy
    try:
        with torch.no_grad():
            model(x)
    finally:
        F.interpolate = original
    return shapes


def time_backward_op(shape, memory_format, repeats):
    """Median and best seconds of PyTorch's and this library's backward on one upsampling."""
    n, c, d, h, w = shape
    out_size = (2 * d, 2 * h, 2 * w)
    g = torch.randn((n, c) + out_size).contiguous(memory_format=memory_format)
    args = (g, out_size, shape, False, 2.0, 2.0, 2.0)
    times = {"pytorch": [], "trilinear_bwd": []}
    for _ in range(repeats):  # alternate, so that both see the same load
        for name, fn in (("pytorch", torch.ops.aten.upsample_trilinear3d_backward),
                         ("trilinear_bwd", tbt.upsample_trilinear3d_backward)):
            t0 = time.perf_counter()
            fn(*args)
            times[name].append(time.perf_counter() - t0)
    return ({k: statistics.median(v) for k, v in times.items()},
            {k: min(v) for k, v in times.items()})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=48, help="volume edge (multiple of 4)")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--width", type=int, default=8, help="channels of the first level")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per variant")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per variant")
    parser.add_argument("--channels-last", action="store_true",
                        help="run the model in channels_last_3d memory format")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads (default: PyTorch's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile both models (default backend); the variants "
                             "then run one after the other")
    args = parser.parse_args(argv)
    if args.size % 4:
        parser.error("--size must be a multiple of 4")
    if args.threads:
        torch.set_num_threads(args.threads)
    fmt = torch.channels_last_3d if args.channels_last else torch.contiguous_format

    torch.manual_seed(args.seed)
    plain = UNet3d(width=args.width).to(memory_format=fmt)
    fast = copy.deepcopy(plain)
    opts = {"pytorch": torch.optim.Adam(plain.parameters(), lr=1e-3),
            "trilinear_bwd": torch.optim.Adam(fast.parameters(), lr=1e-3)}
    models = {"pytorch": plain, "trilinear_bwd": fast}
    if args.compile:
        models = {k: torch.compile(m) for k, m in models.items()}
    batches = [(x.contiguous(memory_format=fmt), y.contiguous(memory_format=fmt))
               for x, y in synthetic_batches(args.warmup + args.steps, args.batch, args.size,
                                             args.seed)]

    print(f"trilinear_bwd {trilinear_bwd.__version__}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s)")
    print(f"model: 3-level U-Net, 1 -> {args.width} channels, "
          f"{sum(p.numel() for p in plain.parameters())} parameters; batch {args.batch} x "
          f"{args.size}^3, {'channels_last_3d' if args.channels_last else 'NCDHW'}, "
          f"{args.warmup} warm-up + {args.steps} timed steps each")

    losses = {k: [] for k in models}
    times = {k: [] for k in models}
    step_seconds = {k: [] for k in models}   # every step's, warm-up included (printed)
    calls = tbt.call_counts()["kernel"]
    first_grads = {}
    params = {"pytorch": plain, "trilinear_bwd": fast}

    def one_step(name, step, x, y):
        with tbt.enabled() if name == "trilinear_bwd" else contextlib.nullcontext():
            loss, seconds = train_step(models[name], opts[name], x, y)
        losses[name].append(loss)
        step_seconds[name].append(seconds)
        if step >= args.warmup:
            times[name].append(seconds)
        if step == 0:
            first_grads[name] = [p.grad.clone() for p in params[name].parameters()]

    if args.compile:
        # One variant after the other: the shared forward is traced once per
        # state of the switch (see the module docstring).
        for name in ("pytorch", "trilinear_bwd"):
            torch._dynamo.reset()
            for step, (x, y) in enumerate(batches):
                one_step(name, step, x, y)
    for step, (x, y) in enumerate(batches):
        if not args.compile:
            # Alternate which variant goes first, so neither always inherits
            # the other's caches and allocations.
            order = (("pytorch", "trilinear_bwd") if step % 2 == 0
                     else ("trilinear_bwd", "pytorch"))
            for name in order:
                one_step(name, step, x, y)
        timed = step >= args.warmup
        t = {k: v[step] for k, v in step_seconds.items()}
        print(f"  step {step:2d}{'          ' if timed else ' (warm-up)'}  "
              f"loss {losses['pytorch'][step]:.6f} / {losses['trilinear_bwd'][step]:.6f}   "
              f"{t['pytorch']:6.3f} s / {t['trilinear_bwd']:6.3f} s")
    # Same weights, same first batch: the gradients differ only by rounding.
    grad_diff = max(((a - b).abs().max() / a.abs().max().clamp_min(1e-30)).item()
                    for a, b in zip(first_grads["pytorch"], first_grads["trilinear_bwd"]))

    t_plain = statistics.median(times["pytorch"])
    t_fast = statistics.median(times["trilinear_bwd"])
    # Each pair of steps ran back to back, under the same load (one after the
    # other with --compile): the median of the per-pair ratios is the
    # estimate least disturbed by other processes.
    speedup = statistics.median(a / b for a, b in zip(times["pytorch"], times["trilinear_bwd"]))
    rel = max(abs(a - b) / abs(a) for a, b in zip(losses["pytorch"], losses["trilinear_bwd"]))
    print(f"training step over {args.steps} steps: PyTorch median {t_plain * 1e3:.1f} ms "
          f"(best {min(times['pytorch']) * 1e3:.1f}), with trilinear_bwd.torch.enable() "
          f"median {t_fast * 1e3:.1f} ms (best {min(times['trilinear_bwd']) * 1e3:.1f})")
    print(f"whole-step speedup (median of per-step ratios): {speedup:.3f}x; "
          f"ratio of medians {t_plain / t_fast:.3f}x, of bests "
          f"{min(times['pytorch']) / min(times['trilinear_bwd']):.3f}x")
    print(f"loss curves: max relative difference {rel:.2e} over {len(batches)} steps; "
          f"first-step parameter gradients: max relative difference {grad_diff:.2e}; "
          f"trilinear_bwd's kernel ran {tbt.call_counts()['kernel'] - calls} times")

    print("upsample_trilinear3d_backward alone on the model's shapes (median of 9, best):")
    best = {"pytorch": 0.0, "trilinear_bwd": 0.0}
    for shape in upsample_shapes(plain, batches[0][0]):
        t, t_best = time_backward_op(shape, fmt, repeats=9)
        for k in best:
            best[k] += t_best[k]
        out = tuple(shape[:2]) + tuple(2 * s for s in shape[2:])
        print(f"  {out} -> {shape}: PyTorch {t['pytorch'] * 1e3:7.2f} ms "
              f"({t_best['pytorch'] * 1e3:.2f}), trilinear_bwd {t['trilinear_bwd'] * 1e3:6.2f} ms "
              f"({t_best['trilinear_bwd'] * 1e3:.2f}), "
              f"speedup {t['pytorch'] / t['trilinear_bwd']:.1f}x")
    # Best against best: the times least inflated by other processes.
    step_best = min(times["pytorch"])
    saved = best["pytorch"] - best["trilinear_bwd"]
    print(f"  per step, best times: {best['pytorch'] * 1e3:.1f} ms -> "
          f"{best['trilinear_bwd'] * 1e3:.1f} ms; PyTorch's upsampling backward is "
          f"{100 * best['pytorch'] / step_best:.0f}% of its best training step, which bounds "
          f"the step speedup at {step_best / max(step_best - saved, 1e-9):.3f}x")
    # Same weights, same first batch: the first step's gradients differ by
    # the upsampling gradients' float32 rounding alone.  Every Adam step
    # after it feeds such differences back into the weights (Adam scales each
    # update to about the learning rate, however small the gradient), so the
    # loss curves drift apart slowly with the number of steps
    # (docs/performance.md, "A whole training step").  Each is held to its
    # own bound.
    grad_tolerance, loss_tolerance = 1e-4, 1e-3
    if grad_diff > grad_tolerance:
        raise SystemExit(f"first-step gradients differ by {grad_diff:.2e} > {grad_tolerance:g}")
    if rel > loss_tolerance:
        raise SystemExit(f"loss curves differ by {rel:.2e} > {loss_tolerance:g}")
    return speedup, rel


if __name__ == "__main__":
    main()

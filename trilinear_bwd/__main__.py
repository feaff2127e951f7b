"""``python -m trilinear_bwd``: run the backward (or the forward) on a case, check it, time it.

Without arguments it runs the CANN documentation's worked example, then a
U-Net-sized volume (2 x 32 x 32^3 <- 64^3), compares each result with the
float64 NumPy reference and prints shapes, the largest error against the
error bound, and the time.  ``--forward`` runs the forward operator on the
volume instead, ``--scales`` passes the forward's scale factors.  Exit
status 1 if a result is out of bounds.

``python -m trilinear_bwd golden generate|compare ...`` is the golden-data
workbench (``trilinear_bwd.golden``, docs/golden.md).
"""

import argparse
import sys
import time

import numpy as np

from trilinear_bwd._pipes import quiet_on_broken_pipe

DTYPES = ("float32", "float64", "float16", "bfloat16")


def _three(text, convert, what):
    """D,H,W values (or one for all three) of ``text``, each through ``convert``."""
    try:
        parts = [convert(p) for p in text.replace("x", ",").split(",") if p.strip()]
    except ValueError:
        parts = []
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"expected D,H,W or one {what}, got {text!r}")
    return tuple(parts)


def _triple(text):
    parts = _three(text, int, "size")
    if min(parts) <= 0:
        raise argparse.ArgumentTypeError(f"sizes must be > 0, got {text!r}")
    return parts


def _scales(text):
    """D,H,W scale factors (output / input), or one for all three; 0: not given.

    A negative scale is refused: the operator takes it for "not given", so
    the command would silently run another case than the one asked for.
    """
    parts = _three(text, float, "scale factor")
    if any(not s >= 0 for s in parts):
        raise argparse.ArgumentTypeError(f"each scale must be > 0 (or 0: not given), "
                                         f"got {text!r}")
    return parts


def _bounded(low, what):
    """An argparse type: an integer >= ``low``, refused with one line otherwise."""

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{what} must be >= {low}, got {value}")
        return value

    return parse


def _threads(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value == 0:
        raise argparse.ArgumentTypeError("threads must be non-zero (negative: all but |t|-1 cores)")
    return value


# Options whose value may start with "-" (a size such as -4,8,8): argparse
# would take it for an option and say "expected one argument".
_VALUE_OPTIONS = ("-i", "--input", "-o", "--output", "-t", "--threads", "-n", "--batch",
                  "-c", "--channels", "-r", "--repeat", "--seed", "--scales")


def _join_negative_values(argv):
    out, k = [], 0
    while k < len(argv):
        arg = argv[k]
        if arg in _VALUE_OPTIONS and k + 1 < len(argv) and argv[k + 1][:2].lstrip("-")[:1].isdigit() \
                and argv[k + 1].startswith("-"):
            out.append(f"{arg}={argv[k + 1]}")
            k += 2
            continue
        out.append(arg)
        k += 1
    return out


class _Parser(argparse.ArgumentParser):
    """argparse, with every error on one line of stderr (exit status 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parser():
    """The command-line interface (also used to render ``--help`` in the docs)."""
    p = _Parser(
        prog="python -m trilinear_bwd",
        description=(
            "Run UpsampleTrilinear3dBackward (or, with --forward, UpsampleTrilinear3d) "
            "on a case, check it against the float64 NumPy reference, and report the "
            "error and the time. With no shape options: the CANN worked example, then "
            "a 2x32x32^3 <- 64^3 volume."
        ),
        epilog="Golden data and Ascend's precision standards: "
               "python -m trilinear_bwd golden --help",
    )
    p.add_argument("--batch", "-n", type=_bounded(1, "N"), default=None, help="N (default 2)")
    p.add_argument("--channels", "-c", type=_bounded(1, "C"), default=None,
                   help="C (default 32)")
    p.add_argument("--input", "-i", type=_triple, default=None, metavar="D,H,W",
                   help="input (gradInput) spatial size, default 32,32,32")
    p.add_argument("--output", "-o", type=_triple, default=None, metavar="D,H,W",
                   help="output (gradOut) spatial size, default 64,64,64")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="default float32")
    p.add_argument("--layout", choices=("ncdhw", "ndhwc"), default="ncdhw",
                   help="memory layout of gradOut and gradInput, default ncdhw")
    p.add_argument("--align-corners", action="store_true", help="corner-aligned coordinates")
    p.add_argument("--scales", type=_scales, default=(0.0, 0.0, 0.0), metavar="D,H,W",
                   help="the forward's scale factors (output / input, or one for all "
                        "axes), each > 0, or 0: not given; with half-pixel coordinates each "
                        "must give floor(input * scale) == output; --align-corners uses none "
                        "(a note says so); default: not given")
    p.add_argument("--forward", action="store_true",
                   help="run the forward (upsampling input -> output) instead of the backward; "
                        "no worked example")
    p.add_argument("--threads", "-t", type=_threads, default=None,
                   help="OpenMP threads (default: OMP_NUM_THREADS, else all cores, but at "
                        "most one thread per 256 KiB of gradOut plus gradInput: a call "
                        "moving less than 512 KiB runs on one thread; docs/threads.md); "
                        "negative: all but |t|-1 cores")
    p.add_argument("--repeat", "-r", type=_bounded(1, "repeat"), default=5,
                   help="timed runs, median reported")
    p.add_argument("--no-check", action="store_true",
                   help="skip the (slow) comparison with the NumPy reference")
    p.add_argument("--seed", type=_bounded(0, "seed"), default=0,
                   help="random seed for gradOut")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("--info", action="store_true",
                   help="print the build configuration (OpenMP, threads, kernel variant) and exit")
    return p


def _layout(values, layout):
    if layout == "ndhwc":
        return np.ascontiguousarray(values.transpose(0, 2, 3, 4, 1)).transpose(0, 4, 1, 2, 3)
    return np.ascontiguousarray(values)


def run_case(title, source, target_size, align_corners, threads, repeat, check,
             scales=(0.0, 0.0, 0.0), forward=False):
    """Run one case; print its report; return True if it passed the check.

    The backward reads ``source`` (gradOut) and writes a gradInput of
    ``target_size``; with ``forward`` it upsamples ``source`` to an output
    of ``target_size``.
    """
    import trilinear_bwd as tb
    from trilinear_bwd import reference

    out = np.empty(target_size, dtype=source.dtype)
    if not source.flags.c_contiguous:  # channels-last in, channels-last out
        n, c, d, h, w = target_size
        out = np.empty((n, d, h, w, c), dtype=source.dtype).transpose(0, 4, 1, 2, 3)
    if forward:
        size, executor = tb.get_forward_workspace_size(source, target_size[2:], align_corners,
                                                       *scales, out, num_threads=threads)
    else:
        size, executor = tb.get_workspace_size(source, source.shape[2:], target_size,
                                               align_corners, *scales, out,
                                               num_threads=threads)
    executor.set_repeatable()
    workspace = tb.alloc_workspace(size)
    tb.execute(workspace, size, executor)  # warm-up
    times = []
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        tb.execute(workspace, size, executor)
        times.append(time.perf_counter() - start)
    executor.destroy()
    ms = 1e3 * float(np.median(times))
    moved = source.nbytes + out.nbytes
    names = ("self", "out") if forward else ("gradOut", "gradInput")
    print(f"{title}")
    print(f"  {names[0]:<9} {source.dtype} {tuple(source.shape)} -> {names[1]} {tuple(out.shape)}"
          f"   alignCorners={align_corners}   threads={executor.num_threads}")
    if any(scale > 0 for scale in scales):
        print(f"  scales    {tuple(scales)}")
    print(f"  time      {ms:.3f} ms (median of {len(times)}), {moved / ms / 1e6:.2f} GB/s moved")
    if not check:
        return True
    start = time.perf_counter()
    if forward:
        exact = reference.forward(source, target_size[2:], align_corners, scales)
        bound = reference.forward_error_bound(source, target_size[2:], align_corners, scales)
    else:
        exact = reference.backward(source.astype(np.float64), target_size, align_corners,
                                   scales, opmath=reference.opmath_of(source.dtype))
        bound = reference.error_bound(source, target_size, align_corners, scales,
                                      dtype=source.dtype)
    err = np.abs(out.astype(np.float64) - exact)
    ok = bool((err <= bound).all())
    scale = float(np.abs(exact).max()) or 1.0
    print(f"  check     max |error| {err.max():.3e} (relative to max |{names[1]}|: "
          f"{err.max() / scale:.2e}); within bound: {'yes' if ok else 'NO'}"
          f"   [reference {time.perf_counter() - start:.1f} s]")
    return ok


@quiet_on_broken_pipe
def main(argv=None):
    """Entry point of ``python -m trilinear_bwd`` and the ``trilinear-bwd`` script.

    A bad option, or a case the operator refuses or the machine cannot hold,
    is one line on stderr and exit status 2, as argparse reports its own.  A
    reader of the output that leaves (``| head``) ends it quietly, exit
    status 141 (``_pipes``); so for the ``golden`` verbs.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["golden"]:  # the workbench's own verbs and parser
        from trilinear_bwd.golden._cli import main as golden_main

        return golden_main(argv[1:])
    cli = parser()
    args = cli.parse_args(_join_negative_values(argv))
    if args.align_corners and any(s > 0 for s in args.scales):
        # Corner-aligned coordinates take no scale (operator.md): run the
        # case without them, and say so rather than print scales unused.
        sys.stderr.write(f"{cli.prog}: note: --scales does nothing with --align-corners "
                         f"(corner-aligned coordinates use (in - 1) / (out - 1) on every "
                         f"axis)\n")
        args.scales = (0.0, 0.0, 0.0)
    try:
        return _main(args)
    except MemoryError as exc:
        cli.error(f"not enough memory for this case: {exc or 'allocation failed'}")
    except Exception as exc:
        from trilinear_bwd import AclnnError

        if isinstance(exc, AclnnError):
            cli.error(str(exc))
        raise


def _check_case(n, c, ins, outs, dtype, align_corners, scales, forward):
    """Refuse, before allocating anything, a case the operator would refuse."""
    from trilinear_bwd._core._operator import BACKWARD, FORWARD, check

    if forward:
        stand_in = np.broadcast_to(np.zeros((), dtype), (n, c) + ins)
        check(FORWARD, stand_in, None, outs, None, align_corners, scales, allocate=True)
    else:
        stand_in = np.broadcast_to(np.zeros((), dtype), (n, c) + outs)
        check(BACKWARD, stand_in, None, outs, (n, c) + ins, align_corners, scales,
              allocate=True)


def _main(args):
    if args.version:
        from trilinear_bwd import __version__

        print(__version__)
        if not args.info:
            return 0
    if args.info:
        from trilinear_bwd import show_config

        show_config()
        return 0
    from trilinear_bwd._core._arrays import numpy_dtype

    dtype = numpy_dtype(args.dtype)
    rng = np.random.default_rng(args.seed)
    ok = True
    custom = any(v is not None for v in (args.batch, args.channels, args.input, args.output))
    if not custom and not args.forward and not any(s > 0 for s in args.scales):
        example = np.arange(1, 33, dtype=np.float32).astype(dtype).reshape(2, 2, 2, 2, 2)
        ok &= run_case("CANN worked example: gradOut 1..32, expected gradInput [36, 100, 164, 228]",
                       example, (2, 2, 1, 1, 1), False, args.threads, args.repeat,
                       not args.no_check)
        import trilinear_bwd as tb

        got = tb.upsample_trilinear3d_backward(example, (2, 2, 1, 1, 1)).astype(np.float64)
        print(f"  result    {got.ravel().tolist()}")
        ok &= got.ravel().tolist() == [36.0, 100.0, 164.0, 228.0]
        print()
    n = 2 if args.batch is None else args.batch
    c = 32 if args.channels is None else args.channels
    ins = args.input or (32, 32, 32)
    outs = args.output or (64, 64, 64)
    _check_case(n, c, ins, outs, dtype, args.align_corners, args.scales, args.forward)
    if args.forward:
        values = rng.standard_normal((n, c) + ins, dtype=np.float32).astype(dtype)
        ok &= run_case(f"Forward volume: N={n} C={c} {ins} -> {outs}, {args.dtype}, {args.layout}",
                       _layout(values, args.layout), (n, c) + outs, args.align_corners,
                       args.threads, args.repeat, not args.no_check, args.scales, True)
    else:
        values = rng.standard_normal((n, c) + outs, dtype=np.float32).astype(dtype)
        ok &= run_case(f"Volume: N={n} C={c} {ins} <- {outs}, {args.dtype}, {args.layout}",
                       _layout(values, args.layout), (n, c) + ins, args.align_corners,
                       args.threads, args.repeat, not args.no_check, args.scales)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

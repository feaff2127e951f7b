"""The command line of ``python -m trilinear_bwd.bench``: its options, and the tables it prints.

Timing is not a test: the numbers depend on the machine and on what else runs
on it.  Compare ratios measured side by side in one run.
"""

import argparse
import json
import sys

from .._pipes import quiet_on_broken_pipe
from ._kernel import CASES, STATS, run_benchmark
from ._kernel import __doc__ as _HARNESS_DOC
from ._report import format_table, plot


def _torch_available():
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@quiet_on_broken_pipe
def main(argv=None):
    """Command-line entry point: the calls users make first, then the kernel's table.

    A reader of the output that leaves (``| head``) ends it quietly, exit
    status 141 (``_pipes``).
    """
    p = argparse.ArgumentParser(prog="python -m trilinear_bwd.bench",
                                description=_HARNESS_DOC.split("\n\n")[0])
    p.add_argument("--repeat", "-r", type=int, default=15, help="interleaved rounds (median)")
    p.add_argument("--threads", "-t", type=int, default=None, help="threads for this library")
    p.add_argument("--no-torch", action="store_true", help="do not time PyTorch")
    p.add_argument("--cache", choices=["cold", "warm"], default="cold",
                   help="cache state at the start of each timed call (default: cold)")
    p.add_argument("--cases", default=None,
                   help="comma-separated case names to run (default: all)")
    p.add_argument("--stat", choices=sorted(STATS), default="median",
                   help="summary of the rounds: median (default), or min on a shared machine")
    p.add_argument("--variants", default=None,
                   help="comma-separated kernel variants to time side by side, the first in "
                        "the main columns (default: the active one)")
    p.add_argument("--calls-only", action="store_true",
                   help="only the headline table: the calls users make, beside PyTorch's")
    p.add_argument("--no-calls", action="store_true",
                   help="skip the headline table (the calls users make)")
    p.add_argument("--sweep", action="store_true",
                   help="only the enable() sweep: the calls users make under enable() "
                        "beside the same calls in a process with plain PyTorch, size by size "
                        "(both layouts, forward and backward)")
    p.add_argument("--compiled", action="store_true",
                   help="only the compiled-model table: layers under torch.compile, with and "
                        "without enable(), beside eager")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="also draw a chart (needs matplotlib)")
    args = p.parse_args(argv)
    calls = None
    # The tables that only make sense beside PyTorch: (flag, name, what is
    # timed, the heading printed above the table).
    only = {
        "sweep": ("the enable() sweep", "F.interpolate and the backward as autograd calls "
                  "it, through enable(), beside the same calls in a process with plain "
                  "PyTorch (warm: one geometry called repeatedly; best of the rounds; "
                  "ratio = PyTorch's time over ours):"),
        "compiled": ("the compiled-model table", "Under torch.compile (default backend), "
                     "beside eager (one forward + backward, float32; best of the rounds; "
                     "ratios above 1: the second is faster):"),
    }
    for flag, (what, heading) in only.items():
        if not getattr(args, flag):
            continue
        if args.no_torch or not _torch_available():
            p.error(f"--{flag} needs PyTorch")
        from . import _compiled, _sweep

        tables = {"sweep": _sweep, "compiled": _compiled}[flag]

        print(f"timing {what} ...", file=sys.stderr)
        rows = getattr(tables, f"measure_{flag}")(max(5, args.repeat), args.threads)
        print(heading + "\n")
        print(getattr(tables, f"format_{flag}")(rows))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({flag: rows}, f, indent=2)
        return 0
    if not (args.no_calls or args.no_torch) and _torch_available():
        from ._calls import format_calls, measure_calls

        print("timing the calls users make ...", file=sys.stderr)
        calls = measure_calls(max(5, args.repeat), args.threads)
        print("The calls users make (warm: one geometry called repeatedly, as in training;"
              " ratio = the other column's time over ours):\n")
        print(format_calls(calls))
        print()
        if args.calls_only:
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"calls": calls}, f, indent=2)
            return 0
    cases = CASES
    if args.cases:
        wanted = set(args.cases.split(","))
        cases = [c for c in CASES if c[0] in wanted]
    print("measuring copy bandwidth ...", file=sys.stderr)

    def progress(r):
        print(f"  {r['case']:<11} {r['layout']:<5} {r['dtype']:<8} {1e3 * r['ours_s']:8.2f} ms"
              + (f"  torch {1e3 * r['torch_s']:8.2f} ms" if "torch_s" in r else ""),
              file=sys.stderr)

    variants = args.variants.split(",") if args.variants else None
    report = run_benchmark(cases, args.repeat, args.threads, False if args.no_torch else None,
                           progress=progress, cache=args.cache, variants=variants,
                           stat=args.stat)
    print(f"The kernel, into preallocated outputs ({args.cache} caches):\n")
    print(format_table(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(report, calls=calls) if calls else report, f, indent=2)
    if args.plot:
        plot(report, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())

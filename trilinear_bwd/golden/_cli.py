"""``python -m trilinear_bwd golden generate|compare``: the workbench from the shell.

Exit status: 0 the set passes (or was written), 1 it does not pass, 2 a bad
option or files that do not match the manifest (one line on stderr naming
the file).
"""

import argparse
import json
import sys

from ._cases import LEVEL_CASES, OPS
from ._standards import DTYPES, LEVELS, STANDARDS


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _count(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def parser():
    """The ``golden`` verb's parser (its ``--help`` is in docs/golden.md)."""
    p = _Parser(prog="python -m trilinear_bwd golden",
                description="Golden data for the NPU operator, and verdicts by Ascend's "
                            "precision standards (docs/golden.md).")
    sub = p.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    g = sub.add_parser("generate", help="write cases, inputs and float64 goldens into DIR")
    g.add_argument("directory", metavar="DIR")
    g.add_argument("--op", choices=OPS, default="backward")
    g.add_argument("--level", choices=LEVELS, default="L0",
                   help="generation rules: " + ", ".join(f"{k} {v} cases"
                                                         for k, v in LEVEL_CASES.items()))
    g.add_argument("--dtype", choices=DTYPES, action="append", dest="dtypes",
                   help="repeat for several (default: all three)")
    g.add_argument("--cases", type=_count, default=None, help="cap on the count of cases")
    g.add_argument("--seed", type=_count, default=0)
    g.add_argument("--atk", metavar="FILE.json", help="the cases of an ATK case file")
    g.add_argument("--no-special", dest="special", action="store_false",
                   help="leave out the special cases (empty, sizes 1, NaN/Inf)")
    g.add_argument("--write-actual", metavar="ADIR",
                   help="also write this library's own results as ADIR/<id>.actual.bin")
    g.add_argument("--max-elements", type=_count, default=None, metavar="N",
                   help="leave out cases with more than N elements in an array (listed in the "
                        "manifest as skipped)")
    g.add_argument("--no-progress", dest="progress", action="store_false", default=None)
    c = sub.add_parser("compare", help="judge ADIR/<id>.actual.bin against DIR's goldens")
    c.add_argument("directory", metavar="DIR")
    c.add_argument("--actual", metavar="ADIR", required=True)
    c.add_argument("--reference", metavar="RDIR",
                   help="the third party's results (default: PyTorch's CPU kernel)")
    c.add_argument("--standard", choices=STANDARDS, default="commercial")
    c.add_argument("--level", choices=LEVELS, default="L0")
    c.add_argument("--json", metavar="REPORT", help="write every number as JSON")
    c.add_argument("--plot", metavar="PNG", help="each metric's distribution against its bound "
                                                 "(needs matplotlib)")
    c.add_argument("--no-progress", dest="progress", action="store_false", default=None)
    return p


def main(argv):
    """Run the ``golden`` verb on ``argv`` (the words after ``golden``); return the exit status."""
    cli = parser()
    args = cli.parse_args(argv)
    from . import GoldenFileError, compare, generate, plot

    prog = f"{cli.prog} {args.verb}"
    try:
        if args.verb == "generate":
            manifest = generate(args.directory, op=args.op, level=args.level, dtypes=args.dtypes,
                                cases=args.cases, seed=args.seed, atk=args.atk,
                                special=args.special, actual=args.write_actual,
                                progress=args.progress, max_elements=args.max_elements)
            cases = manifest["cases"]
            bad = [c["id"] for c in cases
                   if not c["checks"]["deterministic"] or c["checks"]["unwritten"]]
            print(f"{len(cases)} {manifest['op']} cases ({manifest['result_elements']} result "
                  f"elements) in {args.directory}: manifest.json, <id>.input.bin, "
                  f"<id>.golden.bin (float64)")
            print(f"this library: every case deterministic (2 runs, same bits) and every element "
                  f"written (NaN-prefilled): {'yes' if not bad else 'NO: ' + ', '.join(bad)}")
            if manifest["skipped"]:
                print(f"left out {len(manifest['skipped'])} case(s) over --max-elements "
                      f"{args.max_elements} (manifest.json: skipped)")
            if args.write_actual:
                print(f"this library's results: {args.write_actual}/<id>.actual.bin")
            return 0 if not bad else 1
        if args.plot:
            import importlib.util

            if importlib.util.find_spec("matplotlib") is None:
                raise GoldenFileError("--plot needs matplotlib: pip install "
                                      "'trilinear_bwd[golden]'")
        report = compare(args.directory, args.actual, reference=args.reference,
                         standard=args.standard, level=args.level, progress=args.progress)
    except (GoldenFileError, ValueError, OSError) as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        return 2
    print(report.summary())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report.to_dict(), f, indent=1)
        print(f"report: {args.json}")
    if args.plot:
        plot(report, args.plot)
        print(f"plot: {args.plot}")
    return 0 if report.passed else 1

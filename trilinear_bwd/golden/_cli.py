"""``python -m trilinear_bwd golden generate|compare``: the workbench from the shell.

Exit status: 0 the set passes (or was written), 1 it does not pass (or
this library's own run of a case was not deterministic); 2 a bad option, a
path that cannot serve its option, a manifest that breaks its format or
files that do not match it: one line on stderr per problem, naming the case
and the field or file, every problem reported and nothing judged or
written; 3 an internal error of the workbench (its traceback).  Only a
judged result is 0 or 1.  An option that does nothing in the combination
given says so on stderr (``note:``).
"""

import argparse
import importlib.util
import json
import os
import re
import sys
import traceback

from ._cases import FORMATS, LEVEL_CASES, OPS, VALUE_LAWS, real_scales, sizes
from ._compare import WORST, compare
from ._dtypes import DTYPES
from ._errors import GoldenError
from ._generate import write_set
from ._paths import input_dir, input_file, output_file, write_atomically
from ._report import plot
from ._standards import LEVELS, STANDARDS

INTERNAL_ERROR = 3


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


def _numbers(text, convert):
    """``(1,1,4,4,4)``, ``[1, 1, 4, 4, 4]``, ``1,1,4,4,4`` or ``1 1 4 4 4`` as a list (ops-cv writes tuples)."""
    words = [w for w in re.split(r"[\s,]+", text.strip().strip("()[]").strip()) if w]
    out = []
    for w in words:
        try:
            out.append(convert(w))
        except ValueError:
            out.append(w)       # named by the check below
    return out


def _size_option(count, minimum):
    def parse(text):
        try:
            return sizes(_numbers(text, int), count, None, minimum)
        except GoldenError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def _scales_option(text):
    try:
        return real_scales(_numbers(text, float), None)
    except GoldenError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parser():
    """The ``golden`` verb's parser (its ``--help`` is in docs/golden.md)."""
    p = _Parser(prog="python -m trilinear_bwd golden",
                description="Golden data for the NPU operator, and verdicts by Ascend's "
                            "precision standards (docs/golden.md).")
    sub = p.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    g = sub.add_parser("generate", help="write cases, inputs and goldens into DIR")
    g.add_argument("directory", metavar="DIR", help="an empty or new folder (see --replace)")
    g.add_argument("--op", choices=OPS, default="backward",
                   help="the operator whose cases are written (default backward)")
    g.add_argument("--level", choices=LEVELS, default=None,
                   help="generation rules (default L0): " + ", ".join(
                       f"{k} {v} regular cases" for k, v in LEVEL_CASES.items()))
    g.add_argument("--dtype", choices=DTYPES, action="append", dest="dtypes",
                   help="repeat for several (default: all three)")
    g.add_argument("--cases", type=_count, default=None, metavar="N",
                   help="the level's (or the ATK file's) first N regular cases; the special "
                        "cases come on top unless --no-special")
    g.add_argument("--seed", type=_count, default=0,
                   help="draws the inputs (and, with --atk, the laws' parameters); default 0")
    g.add_argument("--atk", metavar="FILE.json", help="the cases of an ATK case file")
    g.add_argument("--no-special", dest="special", action="store_false", default=None,
                   help="leave out the level's special cases (empty, sizes 1, NaN/Inf)")
    g.add_argument("--write-actual", metavar="ADIR",
                   help="also write this library's own results as ADIR/<id>.actual.bin")
    g.add_argument("--max-elements", type=_count, default=None, metavar="N",
                   help="leave out cases with more than N elements in an array (listed in the "
                        "manifest as skipped)")
    g.add_argument("--replace", action="store_true",
                   help="write into a folder holding an earlier set, removing the files its "
                        "manifest lists (and those cases' results in ADIR)")
    g.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                   help="no progress bar (default: one on stderr on a terminal from 200 cases)")
    one = g.add_argument_group(
        "cases from the command line (ops-cv's gen_data.py '(1,1,4,4,4)' '(16,16,16)' float32)",
        "one case per --dtype and --format")
    one.add_argument("--input-size", type=_size_option(5, (0, 0, 1, 1, 1)), metavar="N,C,D,H,W",
                     help="the volume before upsampling: the backward's inputSize (gradInput), "
                          "the forward's self")
    one.add_argument("--output-size", type=_size_option(3, (1, 1, 1)), metavar="D,H,W",
                     help="after upsampling: outputSize (gradOut's D, H, W for the backward)")
    one.add_argument("--format", choices=FORMATS, action="append", dest="formats",
                     help="repeat for both (default NCDHW)")
    one.add_argument("--align-corners", action="store_true", default=None,
                     help="corner-aligned coordinates (default: half-pixel)")
    one.add_argument("--scales", type=_scales_option, metavar="SD,SH,SW",
                     help="scalesD, scalesH, scalesW as the CANN call takes them (default 0: "
                          "not given; used only when all three are > 0)")
    # Choices listed in the help, not by argparse: one of them, '-inf,inf', holds
    # a comma, which argparse's {a,b,...} would print as two.
    one.add_argument("--values", choices=list(VALUE_LAWS), default=None, metavar="LAW",
                     help="the input's law: " + ", ".join(
                         repr(v) if "," in v else v for v in VALUE_LAWS) +
                     " (default uniform [-5, 5]; write --values=-inf)")
    c = sub.add_parser("compare", help="judge ADIR/<id>.actual.bin against DIR's goldens")
    c.add_argument("directory", metavar="DIR",
                   help="the golden set: manifest.json and the files it lists, as generate "
                        "wrote them")
    c.add_argument("--actual", metavar="ADIR", required=True,
                   help="the results to judge: ADIR/<id>.actual.bin per case, in the case's "
                        "dtype and format (golden.write_result writes them)")
    c.add_argument("--reference", metavar="RDIR",
                   help="the commercial standard's third party (default: PyTorch's CPU kernel)")
    c.add_argument("--standard", choices=STANDARDS, default="commercial",
                   help="the precision standard that judges: commercial (dual benchmark "
                        "against a third party), experimental or mixed (single benchmarks); "
                        "default commercial")
    c.add_argument("--level", choices=LEVELS, default=None,
                   help="the commercial standard's bounds (default L0)")
    c.add_argument("--case", metavar="ID", action="append", dest="cases",
                   help="judge only this case (repeat, or ID,ID,...); default: every case")
    c.add_argument("--present", action="store_true",
                   help="judge only the cases whose result ADIR holds (an interrupted NPU "
                        "run) and say how many are missing; the verdict covers the cases "
                        "judged")
    c.add_argument("--json", metavar="REPORT", help="write every number as JSON")
    c.add_argument("--plot", metavar="PNG", help="each metric's distribution against its bound "
                                                 "(needs matplotlib)")
    c.add_argument("--worst", type=_count, default=WORST, metavar="N",
                   help=f"elements listed per failing case (default {WORST})")
    c.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                   help="no progress bar (default: one on stderr on a terminal from 200 cases)")
    return p


def main(argv):
    """Run the ``golden`` verb on ``argv`` (the words after ``golden``); return the exit status."""
    cli = parser()
    args = cli.parse_args(argv)
    prog = f"{cli.prog} {args.verb}"

    def note(text):
        sys.stderr.write(f"{prog}: note: {text}\n")

    try:
        if args.verb == "generate":
            return _generate(args, note)
        return _compare(args, note)
    except GoldenError as exc:
        for line in exc.problems:
            sys.stderr.write(f"{prog}: error: {line}\n")
        if len(exc.problems) > 1:
            sys.stderr.write(f"{prog}: {len(exc.problems)} problems; nothing was "
                             f"{'written' if args.verb == 'generate' else 'judged'}\n")
        if exc.hint:
            note(exc.hint)
        return exc.exit_status
    except BrokenPipeError:
        raise  # the reader of the output left: no bug (``_pipes``, around the entry point)
    except Exception:  # a bug of the workbench: never mistaken for a verdict (0 or 1)
        traceback.print_exc()
        sys.stderr.write(f"{prog}: internal error (exit status {INTERNAL_ERROR}): the traceback "
                         f"above is a bug of trilinear_bwd.golden\n")
        return INTERNAL_ERROR


def _paths_checked(checks):
    """Run every path check; raise one error naming every bad path."""
    problems = []
    for check, *arguments in checks:
        try:
            check(*arguments)
        except GoldenError as exc:
            problems += exc.problems
    if problems:
        raise GoldenError(problems)


def _refuse(problem):
    raise GoldenError(problem)


def _not_a_set_file(path, flag, folders):
    """Refuse an output that would overwrite a set's manifest or one of its (or the results') files."""
    folder, name = os.path.split(os.path.realpath(path))
    if (name == "manifest.json" or name.endswith(".bin")) and any(
            os.path.realpath(f) == folder for f in folders):
        raise GoldenError(f"{flag} {path}: a file of the set or of its results; give another "
                          f"path")


# Options of cases from the command line, which need --input-size.
_GIVEN = (("output_size", "--output-size"), ("formats", "--format"),
          ("align_corners", "--align-corners"), ("scales", "--scales"), ("values", "--values"))


def _generate(args, note):
    source = "--atk" if args.atk else "--input-size" if args.input_size is not None else None
    stray = [flag for name, flag in _GIVEN if getattr(args, name) is not None]
    if args.input_size is None and stray:
        raise GoldenError(f"{', '.join(stray)}: describe the cases of --input-size, which is "
                          f"not given")
    if args.atk and args.input_size is not None:
        raise GoldenError("--atk, --input-size: two sources of cases; give one")
    if args.input_size is not None and args.output_size is None:
        raise GoldenError("--output-size: missing (the cases of --input-size need it)")
    if source and args.level is not None:
        note(f"--level {args.level} does nothing with {source} (the level's rules make the "
             f"cases only without --atk and --input-size)")
    if source and args.special is False:
        note(f"--no-special does nothing with {source} (only the level's rules add special "
             f"cases)")
    if source == "--input-size" and args.cases is not None:
        note(f"--cases {args.cases} does nothing with --input-size (one case per --dtype and "
             f"--format)")
    checks = [(input_file, args.atk, "--atk")] if args.atk else []
    _paths_checked(checks)
    level = args.level or "L0"
    manifest, done = write_set(
        args.directory, op=args.op, level=level, dtypes=args.dtypes, cases=args.cases,
        seed=args.seed, atk=args.atk, special=args.special is not False,
        actual=args.write_actual, progress=args.progress, max_elements=args.max_elements,
        input_size=args.input_size, output_size=args.output_size, formats=args.formats,
        align_corners=bool(args.align_corners) if args.input_size is not None else False,
        scales=args.scales, values=args.values, replace=args.replace,
        labels=(None, "--write-actual", "--atk"), hint="--replace")
    for line in done:
        print(line)
    cases = manifest["cases"]
    bad = [c["id"] for c in cases
           if not c["checks"]["deterministic"] or c["checks"]["unwritten"]]
    print(f"{len(cases)} {manifest['op']} case{'s' if len(cases) != 1 else ''} "
          f"({manifest['result_elements']} result elements) in {args.directory}: "
          f"{_origin(args, cases, level)}")
    if source == "--input-size":
        names = ("gradOut", "gradInput") if args.op == "backward" else ("self", "out")
        for c in cases:
            print(f"  {c['id']} {c['dtype']} {c['format']}: {names[0]} {tuple(c['input_shape'])}"
                  f" -> {names[1]} {tuple(c['result_shape'])}, align_corners "
                  f"{str(c['align_corners']).lower()}, scales {tuple(c['scales'])}")
    print("files: manifest.json, <id>.input.bin, <id>.golden.bin (float64: the standards judge "
          "by it), <id>.golden.<dtype>.bin (rounded to the case's dtype, for harnesses)")
    print(f"this library: every case deterministic (2 runs, same bits) and every element "
          f"written (NaN-prefilled): {'yes' if not bad else 'NO: ' + ', '.join(bad)}")
    if manifest["skipped"]:
        print(f"left out {len(manifest['skipped'])} case(s) over --max-elements "
              f"{args.max_elements} (manifest.json: skipped)")
    if args.write_actual:
        print(f"this library's results: {os.path.join(args.write_actual, '<id>.actual.bin')}")
    return 0 if not bad else 1


def _origin(args, cases, level):
    """Where the cases came from, with what was added to the regular ones and why."""
    if args.atk:
        return f"the cases of {os.path.basename(args.atk)} (ATK)"
    if args.input_size is not None:
        return "the sizes given"
    special = sum("special" in c["rule"] for c in cases)
    regular = len(cases) - special
    capped = f", --cases {args.cases} of its {LEVEL_CASES[level]}" if args.cases is not None \
        else ""
    text = f"{regular} regular (commercial standard {level} rules, seed {args.seed}{capped})"
    if special:
        text += (f" + {special} special (section 2.1: empty, sizes 1, NaN/Inf inputs; "
                 f"--no-special leaves them out)")
    return text


def _compare(args, note):
    commercial = args.standard == "commercial"
    if not commercial and args.level is not None:
        note(f"--level {args.level} does nothing with --standard {args.standard} (only the "
             f"commercial standard has levels)")
    if not commercial and args.reference is not None:
        note(f"--reference does nothing with --standard {args.standard} (a single benchmark: "
             f"no third party)")
    reference = args.reference if commercial else None
    checks = [(input_dir, args.directory, None),
              (input_dir, args.actual, "--actual", " (the results, <id>.actual.bin)")]
    if reference is not None:
        checks.append((input_dir, reference, "--reference",
                       " (the third party's results, <id>.actual.bin)"))
    outputs = [(path, flag) for path, flag in ((args.json, "--json"), (args.plot, "--plot"))
               if path]
    checks += [(output_file, path, flag) for path, flag in outputs]
    folders = [args.directory, args.actual] + ([reference] if reference else [])
    checks += [(_not_a_set_file, path, flag, folders) for path, flag in outputs]
    if len(outputs) == 2 and os.path.realpath(args.json) == os.path.realpath(args.plot):
        checks.append((_refuse, f"--json, --plot {args.plot}: the same file for both"))
    _paths_checked(checks)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        raise GoldenError("--plot needs matplotlib: pip install 'trilinear_bwd[golden]'")
    cases = None if args.cases is None else [
        i.strip() for text in args.cases for i in (text.split(",") if text else [text])]
    report = compare(args.directory, args.actual, reference=reference, standard=args.standard,
                     level=args.level or "L0", progress=args.progress, worst=args.worst,
                     cases=cases, present=args.present)
    print(report.summary())
    if args.json:
        def dump(tmp):
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(report.to_dict(), f, indent=1)

        write_atomically(args.json, dump, "--json")
        print(f"report: {args.json}")
    if args.plot:
        write_atomically(args.plot, lambda tmp: plot(report, tmp), "--plot")
        print(f"plot: {args.plot}")
    return 0 if report.passed else 1

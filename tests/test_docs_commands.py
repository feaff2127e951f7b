"""Every shell command of README.md and docs/*.md runs in CI as the page writes it.

The Python blocks run in tests/test_docs_examples.py; this is the shell's
half.  Each command of a ```bash block (a line, its trailing comment cut) or
of a ```console block (a ``$ `` line) must be listed in :data:`COMMANDS`,
which says how CI runs it, and that claim is checked:

* ``("ci", FILE)``: the CI file runs it verbatim (its text contains the
  command), e.g. ``.ci/run`` runs the README's install line from a fresh
  clone of the repository; ``("ci", FILE, FORM)``: it runs FORM, which does
  what the command does and more (the full-depth ``pytest``);
* ``("step", SCRIPT)``: ``.ci/run``'s step loop runs ``bash ci/SCRIPT``;
* ``("golden",)``: the README's golden loop, run here as written, in order,
  this library's results standing in for the NPU's;
* ``("here",)``: cheap, so this test runs it as written, from the
  repository root;
* ``("walk-through", TEST)``: a page run block by block by a test of its own
  (docs/golden.md's console sessions, tests/test_golden_docs.py);
* ``("parsed", TEST)``: a benchmark or example that runs for minutes: this
  test checks that its command line parses as written (the program's own
  argparse, stopped before the work), and TEST runs its work at a reduced
  size.

A command on a page and not in the list fails here, so a new one is a
decision about where CI runs it.
"""

import importlib.util
import os
import re
import runpy  # noqa: F401 - used by the parsing child
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from _hardening import UNDER_SANITIZER
from test_docs_examples import PAGES, blocks

ROOT = Path(__file__).resolve().parent.parent
# The commands run here are the CLIs' and examples' own code, which their
# tests run under the sanitizers; running them again there costs the
# sanitizer step minutes and finds nothing new.
_NOT_UNDER_SANITIZER = pytest.mark.skipif(
    UNDER_SANITIZER, reason="the pages' commands run in the plain runs; their code is tested "
    "under the sanitizers by its own tests")

_TORCH_RANGE = ".ci/run (its step loop runs `bash ci/test_torch_range.sh`)"
COMMANDS = {
    # README.md, docs/quickstart.md: the install and the main job.
    'pip install -e ".[torch,dask,golden,test]"': ("ci", ".ci/run"),
    "python -m trilinear_bwd": ("ci", ".ci/run"),
    "python -m trilinear_bwd --version --info": ("ci", ".ci/run"),
    # README.md: the tests.  .ci/run runs the full-depth form; the default
    # depth (`pytest` alone) is the same classes of test with fewer examples.
    "pytest": ("ci", ".ci/run", "TRILINEAR_BWD_TESTS=full pytest"),
    "TRILINEAR_BWD_TESTS=full pytest": ("ci", ".ci/run"),
    "bash ci/test_torch_range.sh": ("step", "test_torch_range.sh"),
    "bash ci/build_docs.sh": ("step", "build_docs.sh"),
    # README.md: the golden workbench's loop (the NPU's results stood in for
    # by this library's own, written by the first command).
    "python -m trilinear_bwd golden generate golden_L0 --op backward --level L0 "
    "--write-actual cpu_actual": ("golden",),
    "python -m trilinear_bwd golden compare golden_L0 --actual npu_actual --standard commercial "
    "--level L0": ("golden",),
    # docs/dask.md
    "python examples/dask_batch.py --help": ("here",),
    # docs/performance.md and docs/torch.md: benchmarks of minutes.
    "python -m trilinear_bwd.bench": ("parsed", "tests/test_bench.py"),
    "python -m trilinear_bwd.bench --calls-only": ("parsed", "tests/test_bench.py"),
    "python -m trilinear_bwd.bench --sweep": ("parsed", "tests/test_torch_fast.py"),
    "python -m trilinear_bwd.bench --compiled": ("parsed", "tests/test_bench.py"),
    "python -m trilinear_bwd.bench --cache warm": ("parsed", "tests/test_bench.py"),
    "python -m trilinear_bwd.bench -t 1 --stat min --variants avx512,avx2":
        ("parsed", "tests/test_bench.py"),
    "python -m trilinear_bwd.bench -r 30 --json results.json --plot results.png":
        ("parsed", "tests/test_bench.py"),
    "python examples/unet3d_cpu_training.py": ("parsed", "tests/test_torch_integration.py"),
    "python examples/unet3d_cpu_training.py --compile": ("parsed", "tests/test_torch_compile.py"),
    "python examples/unet3d_cpu_training.py --channels-last --size 32":
        ("parsed", "tests/test_torch_integration.py"),
}
WALK_THROUGHS = {"docs/golden.md": "tests/test_golden_docs.py"}


def page_commands():
    """``(page, line, command)`` of every shell command on the pages."""
    found = []
    for page in PAGES:
        for line, language, code, _ in blocks(page):
            if language == "bash":
                for text in code.splitlines():
                    command = re.sub(r"\s+#.*$", "", text).strip()
                    if command and not command.startswith("#"):
                        found.append((page, line, command))
            elif language == "console":
                for text in code.splitlines():
                    if text.startswith("$ "):
                        found.append((page, line, text[2:].strip()))
    return found


COMMANDS_FOUND = page_commands()


def test_every_command_is_accounted_for():
    missing = [f"{page}:{line}: {command}" for page, line, command in COMMANDS_FOUND
               if page not in WALK_THROUGHS and command not in COMMANDS]
    assert not missing, ("shell commands on the pages that CI does not run (list each in "
                         "tests/test_docs_commands.py's COMMANDS):\n" + "\n".join(missing))
    assert len(COMMANDS_FOUND) > 10


def test_every_listed_command_is_on_a_page():
    # A command dropped from the pages leaves the list too.
    on_pages = {command for _, _, command in COMMANDS_FOUND}
    assert not set(COMMANDS) - on_pages, set(COMMANDS) - on_pages


@pytest.mark.parametrize("command, how", [(c, h) for c, h in COMMANDS.items()
                                          if h[0] in ("ci", "step")])
def test_ci_runs_the_command_as_written(command, how):
    run = ROOT / ".ci" / "run"
    if not run.exists():
        pytest.skip("no CI runner in this tree")
    text = run.read_text()
    if how[0] == "ci":
        # As written, or (a third element) in the form CI runs, a superset.
        written = how[2] if len(how) > 2 else command
        assert re.search(rf"^\s*{re.escape(written)}(\s|$)", text, re.M), \
            f".ci/run does not run `{written}` as written"
    else:
        assert re.search(rf"^for step in .*\b{re.escape(how[1])}\b", text, re.M)
        assert 'bash "ci/$step"' in text and (ROOT / "ci" / how[1]).exists()


def test_walk_throughs_have_their_tests():
    for page, test in WALK_THROUGHS.items():
        assert (ROOT / test).exists() and Path(page).name in (ROOT / test).read_text()


def _env():
    path = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    if os.environ.get("TRILINEAR_BWD_EXPECT_INSTALLED_IN"):
        env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    return env


def _cwd(command, tmp_path):
    """The clone's root, as the pages mean; an empty folder for ``python -m`` against an
    installed package (the root would put the source tree first on sys.path)."""
    if os.environ.get("TRILINEAR_BWD_EXPECT_INSTALLED_IN") and " -m " in f" {command} ":
        return tmp_path
    return ROOT


def _python(command):
    """``command``'s argv with ``python`` as this interpreter."""
    argv = shlex.split(command)
    assert argv[0] == "python"
    return [sys.executable] + argv[1:]


@_NOT_UNDER_SANITIZER
@pytest.mark.parametrize("command", [c for c, h in COMMANDS.items() if h[0] == "here"])
def test_cheap_commands_run_as_written(command, tmp_path):
    if command.startswith("python examples/") and not (ROOT / "examples").exists():
        pytest.skip("no examples in this tree")
    if "dask_batch" in command:
        pytest.importorskip("distributed")
    out = subprocess.run(_python(command), cwd=_cwd(command, tmp_path), env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]


# One child parses every long command in turn (a child each would cost a
# second or two of imports each): each command's own argparse, stopped before
# the work starts.
_PARSE_ONLY = r"""
import argparse, json, os, runpy, sys
parse = argparse.ArgumentParser.parse_args
class Parsed(Exception):
    pass
def parse_only(self, *args, **kwargs):
    parse(self, *args, **kwargs)
    raise Parsed
argparse.ArgumentParser.parse_args = parse_only
results = {}
for argv in json.loads(sys.argv[1]):
    sys.argv = list(argv)
    try:
        if argv[0] == "-m":
            sys.argv = sys.argv[1:]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(argv[0], run_name="__main__")
        results[" ".join(argv)] = "ran without parsing"
    except Parsed:
        results[" ".join(argv)] = "parsed"
    except SystemExit as e:
        results[" ".join(argv)] = f"exit {e.code}"
print(json.dumps(results))
"""


@_NOT_UNDER_SANITIZER
def test_long_commands_parse_as_written(tmp_path):
    import json

    commands = [c for c, h in COMMANDS.items() if h[0] == "parsed"]
    if not (ROOT / "examples").exists() or importlib.util.find_spec("torch") is None:
        commands = [c for c in commands if not c.startswith("python examples/")]
    argvs = []
    for command in commands:
        argv = _python(command)[1:]
        if argv[0] != "-m":
            argv[0] = str(ROOT / argv[0])            # the example, from any folder
        argvs.append(argv)
        assert (ROOT / COMMANDS[command][1]).exists()
    cwd = _cwd("python -m x", tmp_path)
    out = subprocess.run([sys.executable, "-c", _PARSE_ONLY, json.dumps(argvs)], cwd=cwd,
                         env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    results = json.loads(out.stdout.splitlines()[-1])
    assert len(results) == len(argvs) and set(results.values()) == {"parsed"}, results


@_NOT_UNDER_SANITIZER
def test_the_readme_golden_loop_runs_as_written(tmp_path):
    pytest.importorskip("torch")
    generate, compare = [c for c, h in COMMANDS.items() if h[0] == "golden"]
    for command in (generate, compare):
        if command is compare:
            # The NPU's results: this library's own, as the README's comment says.
            (tmp_path / "cpu_actual").rename(tmp_path / "npu_actual")
        out = subprocess.run(_python(command), cwd=tmp_path, env=_env(), capture_output=True,
                             text=True, timeout=600)
        # compare exits 1 for a FAIL verdict (the standard judges, not the
        # command): either way it ran as written and gave its verdict.
        assert out.returncode in (0, 1) if command is compare else out.returncode == 0, (
            command, out.stdout[-2000:], out.stderr[-2000:])
    assert re.search(r"\d+ cases, \d+ passed, \d+ failed -> (PASS|FAIL)", out.stdout)

"""docs/golden.md's walk-through runs as written and prints what it shows.

Every ```console block's ``$ command`` runs in a shell, in one temporary
folder shared by the whole page, and its output (stdout and stderr, in the
order written) must match the lines shown under it: ``...`` inside a line
stands for any text, a line that is only ``...`` for any number of lines;
``$ echo $?`` shows the previous command's exit status.  Every ```python
block runs there too, in order, in one namespace; the ``torch_npu`` block
runs with PyTorch's CPU kernel standing in for the NPU (``device = "cpu"``).
"""

import importlib.util
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "golden.md"
BLOCK = re.compile(r"^```(console|python)\n(.*?)^```", re.MULTILINE | re.DOTALL)
HAS_TORCH = importlib.util.find_spec("torch") is not None


def blocks():
    """``(kind, text)`` of the page's console and python blocks, in order."""
    return BLOCK.findall(DOC.read_text(encoding="utf-8"))


def commands(text):
    """``(command, expected lines)`` of a console block."""
    out = []
    for line in text.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            assert out, f"output before any command: {line!r}"
            out[-1][1].append(line)
    return out


def _line_pattern(line):
    return re.compile(".*".join(re.escape(part) for part in line.split("...")) + r"\Z")


def matches(expected, actual):
    """Whether ``actual`` lines are ``expected`` (``...`` a wildcard in a line, or for lines)."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head == "...":
        return any(matches(rest, actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and bool(_line_pattern(head).match(actual[0])) and \
        matches(rest, actual[1:])


def test_matching_rules():
    assert matches(["a ... c", "..."], ["a b c", "x", "y"])
    assert matches(["...", "z"], ["x", "z"]) and matches(["a", "..."], ["a"])
    assert not matches(["a ... c"], ["a b d"]) and not matches(["a"], ["a", "b"])
    assert commands("$ x\n1\n$ y\n") == [("x", ["1"]), ("y", [])]


@pytest.mark.slow
@pytest.mark.skipif(not DOC.exists(), reason="docs/golden.md is not next to the tests")
@pytest.mark.skipif(not HAS_TORCH, reason="the walk-through's compare uses PyTorch's kernel")
def test_the_walk_through_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    namespace = {"__name__": "docs_golden"}
    status, ran = None, {"console": 0, "python": 0}
    for number, (kind, text) in enumerate(blocks(), 1):
        ran[kind] += 1
        if kind == "python":
            if "torch_npu" in text:
                text = text.replace("import torch, torch_npu", "import torch")
                assert 'device = "npu"' in text
                text = text.replace('device = "npu"', 'device = "cpu"')
            exec(compile(text, f"docs/golden.md block {number}", "exec"), namespace)
            continue
        for command, expected in commands(text):
            if command == "echo $?":
                assert expected == [str(status)], (command, expected, status)
                continue
            assert command.startswith("python -m trilinear_bwd golden "), command
            argv = [sys.executable] + shlex.split(command)[1:]
            result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, env=env)
            status = result.returncode
            lines = result.stdout.splitlines()
            assert matches(expected, lines), (
                f"docs/golden.md block {number}: $ {command}\nshown:\n" + "\n".join(expected)
                + "\nprinted:\n" + "\n".join(lines))
            assert status in (0, 1, 2), result.stdout
    assert ran["console"] >= 4 and ran["python"] >= 4

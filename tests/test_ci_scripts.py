"""CI's shell scripts cannot fail of their own pipes.

Under ``set -o pipefail`` a pipeline fails when any of its commands does, and
a command that writes into a reader that has already left (``head -n 1``,
``grep -q``, ``grep -m N``) dies of SIGPIPE: exit 141, the step fails, though
nothing is wrong.  Whether the writer is still writing when the reader leaves
is a matter of timing (bash writes a line-buffered ``echo`` of several lines
one line at a time), so such a pipeline passes on one machine and fails on
another: CI's floors step did, at ``ci_pythons | head -n 1``.  The class is
found by reading the scripts, because a run cannot show it reliably.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A reader that may stop before its input ends.
_EARLY_READER = re.compile(
    r"""^(?:
        head\b
      | grep\b[^|]*\s(?:-[a-zA-Z]*[qm][a-zA-Z0-9]*|--quiet|--silent|--max-count)\b
      | sed\b[^|]*\b\d*q\b
      | awk\b[^|]*\bexit\b
    )""",
    re.X,
)


def _scripts():
    found = sorted((ROOT / "ci").glob("*.sh")) + [ROOT / ".ci" / "run"]
    return [p for p in found if p.exists()]


def _commands(text):
    """Each command line of a shell script, continuation lines joined, comments and heredocs dropped."""
    lines, heredoc_end = [], None
    for line in text.replace("\\\n", " ").splitlines():
        if heredoc_end is not None:
            if line.strip() == heredoc_end:
                heredoc_end = None
            continue
        m = re.search(r"<<-?\s*'?\"?(\w+)", line)
        if m:
            heredoc_end = m.group(1)
        code = re.sub(r"(^|\s)#.*$", "", line)
        if code.strip():
            lines.append(code)
    return lines


def _pipes_into_an_early_reader(command):
    # `||` is not a pipe; split on single `|` only.
    stages = re.split(r"(?<!\|)\|(?!\|)", command)
    return [s.strip() for s in stages[1:] if _EARLY_READER.match(s.strip())]


@pytest.mark.parametrize("script", _scripts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_pipe_under_pipefail_ends_in_a_reader_that_leaves_early(script):
    # Every script, not only those that set pipefail: ci/_pythons.sh is
    # sourced into scripts that do.
    text = script.read_text()
    bad = [c.strip() for c in _commands(text) if _pipes_into_an_early_reader(c)]
    assert not bad, f"{script.name}: pipes whose reader may leave early: {bad}"


@pytest.mark.parametrize(
    "command, early",
    [
        ('py="$(ci_pythons | head -n 1)"', True),
        ("dpkg-query -W pkg | grep -q 'ok installed' || need+=(pkg)", True),
        ("apt-cache depends python3 | grep -m1 -oE 'python3'", True),
        ("gcc --version | sed 1q", True),
        ("gcc --version | sed -n 1p", False),
        ("dpkg-query -W pkg | grep 'ok installed' >/dev/null || need+=(pkg)", False),
        ("cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?'", False),
        ("sort -k1,1n | awk '{last[$1] = $3} END {print}' | cut -d' ' -f2-", False),
    ],
)
def test_the_check_tells_early_readers(command, early):
    assert bool(_pipes_into_an_early_reader(command)) is early

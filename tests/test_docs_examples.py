"""The documentation's examples run and say what they claim.

Every fenced code block of README.md and of every docs/*.md page is accounted
for, by the fence's language:

* ``python`` blocks are executed, in order, in one namespace per page (the
  blocks build on each other), from an empty temporary directory; their
  asserts are checks, and so is every ``print(...)  # text`` line: its
  comment is what it prints (``...`` at the end: what the output starts with).
* A ``python`` block that is not meant to be pasted as it stands (a signature,
  a sketch with placeholders, code for another machine) is marked on the line
  before its fence with ``<!-- not run: REASON -->``, which neither GitHub nor
  Sphinx shows.
* Blocks that are not Python say so by their language: shell commands
  (``bash``, ``console``), output listings (``text``), Sphinx directives
  (``{toctree}``, ``{eval-rst}``, ...).  A fence without a language, or with
  one not listed here, fails the test: nothing is skipped silently.

A page whose blocks import a package that is not installed (PyTorch, Dask)
is skipped with that reason.  Skipped as a whole where the pages are not next
to the tests (an installed test suite without the source tree).
"""

import importlib.util
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# The languages of blocks that are not Python code, and what they are.
NOT_PYTHON = {
    "bash": "shell commands",
    "console": "a shell session",
    "text": "an output listing",
    "{toctree}": "Sphinx: the table of contents",
    "{eval-rst}": "Sphinx: reStructuredText (autodoc)",
    "{include}": "Sphinx: an included file",
    "{trilinear-bwd-help}": "Sphinx: the rendered --help of docs/conf.py",
}
NOT_RUN = re.compile(r"^<!-- not run: (\S.*?) -->$")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<info>.*)$")
CLAIM = re.compile(r"^\s*print\(.*\)\s+# (?P<claim>.*\S)\s*$")
# Packages a page may need beyond the test extra's core (skipped without them).
OPTIONAL = ("torch", "dask", "distributed", "threadpoolctl")


def pages():
    """README.md and every docs/*.md page, as paths relative to the repository."""
    found = [ROOT / "README.md"] + sorted(DOCS.glob("*.md"))
    return [str(p.relative_to(ROOT)) for p in found if p.exists()]


def blocks(page):
    """Every fenced block of ``page``: (line, language, code, not-run reason or None)."""
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    found, k = [], 0
    while k < len(lines):
        m = FENCE.match(lines[k])
        if not m:
            k += 1
            continue
        indent, fence, info = len(m.group("indent")), m.group("fence"), m.group("info").strip()
        end = k + 1
        while end < len(lines) and not re.match(rf"^ *{fence}\s*$", lines[end]):
            end += 1
        assert end < len(lines), f"{page}:{k + 1}: a code fence that is never closed"
        code = "\n".join(line[indent:] for line in lines[k + 1:end]) + "\n"
        before = NOT_RUN.match(lines[k - 1].strip()) if k else None
        language = info.split()[0] if info else ""
        found.append((k + 1, language, code, before.group(1) if before else None))
        k = end + 1
    return found


PAGES = pages()
# Pages that are a walk-through of shell commands and Python blocks, run in
# order by a test of their own (the Python blocks read what the commands
# wrote): tests/test_golden_docs.py for docs/golden.md.
WALK_THROUGHS = {"docs/golden.md": "tests/test_golden_docs.py"}
# The pages with Python to run here (the others are covered by the block check).
PYTHON_PAGES = [p for p in PAGES if p not in WALK_THROUGHS and any(
    language == "python" and reason is None for _, language, _, reason in blocks(p))]


def test_every_page_is_covered():
    """README.md and the docs pages are all here (a renamed folder would skip them all)."""
    if not (ROOT / "README.md").exists():
        pytest.skip("the documentation is not next to the tests")
    assert "README.md" in PAGES and "docs/quickstart.md" in PAGES and len(PAGES) > 10
    assert {"README.md", "docs/quickstart.md", "docs/index.md"} <= set(PYTHON_PAGES)
    for page, test in WALK_THROUGHS.items():
        assert (ROOT / test).exists(), f"{page}'s walk-through test {test} is missing"


@pytest.mark.parametrize("page", PAGES)
def test_every_block_is_run_or_says_why_not(page):
    """Each block is Python that runs, or says by its language or a marker what it is."""
    unmarked = []
    for line, language, _, reason in blocks(page):
        if language == "python":
            continue
        if reason is not None:
            unmarked.append(f"{page}:{line}: a '<!-- not run -->' marker on a {language!r} block "
                            f"(only Python blocks run; the language says what the others are)")
        elif language not in NOT_PYTHON:
            unmarked.append(f"{page}:{line}: a block of language {language or '(none)'!r}; "
                            f"use python (run) or one of {sorted(NOT_PYTHON)}")
    assert not unmarked, "\n".join(unmarked)


def _needs(code):
    """The optional packages a block imports that are not installed."""
    missing = []
    for name in OPTIONAL:
        if re.search(rf"^\s*(import|from)\s+{name}\b|^\s*import .*\b{name}\b", code, re.MULTILINE):
            if importlib.util.find_spec(name) is None:
                missing.append(name)
    return missing


class _Printed:
    """``print`` for the examples: records what each source line printed."""

    def __init__(self, filename):
        self.filename, self.lines = filename, {}

    def __call__(self, *args, sep=" ", end="\n", file=None, flush=False):
        if file is not None:
            return print(*args, sep=sep, end=end, file=file, flush=flush)
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename != self.filename:
            frame = frame.f_back
        text = sep.join(str(a) for a in args) + end
        self.lines.setdefault(frame.f_lineno if frame else 0, []).append(text)
        return None


@pytest.mark.parametrize("page", PYTHON_PAGES)
def test_python_blocks_run_and_print_what_they_say(page, tmp_path, monkeypatch):
    runnable = [(line, code) for line, language, code, reason in blocks(page)
                if language == "python" and reason is None]
    missing = sorted({name for _, code in runnable for name in _needs(code)})
    if missing:
        pytest.skip(f"{page}'s examples need {', '.join(missing)}")
    monkeypatch.chdir(tmp_path)  # whatever an example writes goes there
    namespace = {"__name__": f"docs_{re.sub(r'[^A-Za-z0-9]', '_', page)}"}
    try:
        for line, code in runnable:
            filename = f"{page}, the python block at line {line}"
            printed = _Printed(filename)
            namespace["print"] = printed
            exec(compile(code, filename, "exec"), namespace)
            for number, source in enumerate(code.splitlines(), 1):
                m = CLAIM.match(source)
                if not m:
                    continue
                claim = m.group("claim")
                got = "".join(printed.lines.get(number, [])).rstrip("\n")
                where = f"{page}:{line + number}"
                assert got, f"{where}: the line printed nothing, the comment says {claim!r}"
                if claim.endswith("..."):
                    assert got.startswith(claim[:-3].rstrip()), (where, got, claim)
                else:
                    assert got == claim, (where, got, claim)
    finally:
        tbt = sys.modules.get("trilinear_bwd.torch")
        if tbt is not None:  # an example's enable() must not reach other tests
            tbt.disable()


def test_a_claim_that_is_wrong_fails(tmp_path, monkeypatch):
    """The checker can fail: a page whose comment misstates the output."""
    page = tmp_path / "wrong.md"
    page.write_text("```python\nprint(1 + 1)   # 3\n```\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match="'2', '3'"):
        test_python_blocks_run_and_print_what_they_say("wrong.md", tmp_path, monkeypatch)


def test_an_unmarked_block_fails(tmp_path, monkeypatch):
    """The checker can fail: a fence without a language."""
    page = tmp_path / "bare.md"
    page.write_text("```\nls -l\n```\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match="language '\\(none\\)'"):
        test_every_block_is_run_or_says_why_not("bare.md")

"""Words that say the behaviour: no issue numbers, no numbered tests, no dangling citations.

Three rules, each read from the files themselves:

* a user page (README.md and docs/*.md, but for docs/design.md and
  docs/performance.md, which record how the library came to be) names no
  issue of our tracker: a user reads "a negative scale is refused", not
  "issue 54, item 5";
* no test function or class is named by an item or issue number
  (``test_5_zero_tensor_reads_as_zeros`` says less than
  ``test_a_zero_tensor_reads_as_zeros``);
* every ``Decisions: <name>`` that the package's source (``trilinear_bwd/``:
  .py .pyx .pxd .pxi .h) cites has its row ``| <name> |`` in docs/design.md's
  "## Decisions" section, and nothing there cites ``benchmarks/NOTES.md``, the
  experiment log those rows were distilled from.  A citation keeps its name on
  one line: the name runs to the end of the line or to the first ``)``, ``,``,
  ``;``, ``"``, ``*/`` or sentence-ending ``.``; a name in backquotes or
  double quotes is taken whole.

Each rule is a function of text, shown here to reject a synthetic offender
and to accept a clean text before it is applied to the repository.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PACKAGE = ROOT / "trilinear_bwd"
HISTORY_PAGES = {"design.md", "performance.md"}
SOURCES = (".py", ".pyx", ".pxd", ".pxi", ".h")


# -- the rules, as functions of text ---------------------------------------------

_ISSUE_NUMBER = re.compile(
    r"\bissues?\s*#?\s*\d+"           # issue 42, issue #42, issues 12
    r"|\bissue's\b"                   # the issue's chunking
    r"|\bitems?\s+\d+"                # item 5 (of issue 12), items 1-4
    r"|(?<![\w&/#])#\d+\b",           # (#31)
    re.IGNORECASE)


def issue_numbers(text):
    """The places in ``text`` (a page) that name an issue or an item of one: (line, words)."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in _ISSUE_NUMBER.finditer(text)]


_NUMBERED_NAME = re.compile(r"^test_\d|(?:^|_)(?:item|issue)s?_?\d|^test_(?:item|issue)s?(?:_|$)",
                            re.IGNORECASE)
_NUMBERED_CLASS = re.compile(r"(?:item|issue)s?_?\d|^Test_?\d", re.IGNORECASE)


def numbered_test_names(source):
    """The test functions and classes of ``source`` (a module's text) named by a number."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("test") and _NUMBERED_NAME.search(node.name):
                found.append(node.name)
        elif isinstance(node, ast.ClassDef):
            if node.name.startswith("Test") and _NUMBERED_CLASS.search(node.name):
                found.append(node.name)
    return found


_CITATION = re.compile(r"Decisions:[ \t]*(`[^`\n]+`|\"[^\"\n]+\"|[^\n]*)")
_NAME_END = re.compile(r"\)|,|;|\"|\*/|\.(?=\s|$)")


def cited_decisions(text):
    """The names ``text`` (a source file) cites as ``Decisions: <name>``, in order."""
    names = []
    for m in _CITATION.finditer(text):
        rest = m.group(1)
        if rest[:1] in "`\"" and len(rest) > 1 and rest[-1] == rest[0]:
            names.append(rest[1:-1].strip())
            continue
        end = _NAME_END.search(rest)
        names.append((rest[:end.start()] if end else rest).strip().strip("'`"))
    return names


def _cell(text):
    return text.strip().strip("`").strip()


def decision_rows(design):
    """The names of the rows of ``design``'s (docs/design.md's text) "## Decisions" section.

    Its tables headed ``| name | ...`` hold the decisions; other tables there
    (the torch wing's modules) do not.
    """
    m = re.search(r"^## Decisions[ \t]*\n(.*?)(?=^## |\Z)", design, re.M | re.S)
    if m is None:
        return set()
    rows, header = set(), None
    for line in m.group(1).splitlines():
        line = line.strip()
        if not line.startswith("|"):
            header = None                       # a table ends where its rows do
            continue
        first = _cell(line.split("|")[1])
        if header is None:
            header = first                      # only tables headed "| name | ..." hold decisions
        elif header == "name" and first and not set(first) <= set("-: "):
            rows.add(first)
    return rows


def citation_problems(sources, design):
    """What is wrong with the citations of ``sources`` ({path: text}) against ``design``."""
    rows = decision_rows(design)
    problems = []
    for path, text in sorted(sources.items()):
        for name in cited_decisions(text):
            if not name:
                problems.append(f"{path}: 'Decisions:' with no name on its line")
            elif name not in rows:
                problems.append(f"{path}: Decisions: {name!r} has no row in docs/design.md")
        for n, line in enumerate(text.splitlines(), 1):
            if "NOTES.md" in line:
                problems.append(f"{path}:{n}: cites NOTES.md: {line.strip()}")
    return problems


# -- each rule rejects an offender and accepts a clean text ----------------------

@pytest.mark.parametrize("text", [
    "This is issue 42's case.", "fixed (#31), as", "the fix of Issue 20, items 1, 2",
    "see item 5 of the list", "since issue #54", "D slabs (the issue's chunking)",
    "issues 12 and 13",
])
def test_a_page_naming_an_issue_is_rejected(text):
    assert issue_numbers(text), text


@pytest.mark.parametrize("text", [
    "A negative scale is refused, exit status 2.", "Python's warnings issue a RuntimeWarning.",
    "## The torch front ends\n\n# A heading", "element #x, `0x1F`", "step 2 above",
])
def test_a_page_without_issue_numbers_is_accepted(text):
    assert issue_numbers(text) == [], text


def test_the_rejected_words_are_reported_with_their_line():
    assert issue_numbers("one\ntwo (issue 46)\n") == [(2, "issue 46")]


def test_a_test_named_by_a_number_is_rejected():
    source = '''
def test_5_zero_tensor_reads_as_zeros(): pass
def test_item_3_overlap(): pass
def test_issue54_scales(): pass
async def test_10_conversions(): pass
class TestItem12:
    def test_copies_item_12(self): pass
def test_a_zero_tensor_reads_as_zeros(): pass
def test_thirty_two_threads_at_once(): pass
def test_toggling_under_load_60s(): pass
def test_conversion_errors_are_161002(): pass
def helper_5(): pass
"a string: def test_7_in_a_string(): pass"
'''
    assert numbered_test_names(source) == [
        "test_5_zero_tensor_reads_as_zeros", "test_item_3_overlap", "test_issue54_scales",
        "test_10_conversions", "TestItem12", "test_copies_item_12"]


def test_a_citation_of_a_decision_is_read_to_the_end_of_its_name():
    text = (
        "# (docs/design.md, Decisions: two-pass rows).\n"
        "/* docs/design.md, Decisions: Whole channels-last planes */\n"
        "    # docs/design.md, Decisions: `float64 sums, one rounding`; then\n"
        "x = 1  # docs/design.md, Decisions: streaming-stores, measured\n"
        "# docs/design.md, Decisions: the ring\n"
        "# docs/design.md, Decisions: \"quoted name\"\n"
    )
    assert cited_decisions(text) == ["two-pass rows", "Whole channels-last planes",
                                     "float64 sums, one rounding", "streaming-stores",
                                     "the ring", "quoted name"]


DESIGN = """# Design
## Modules
| module | job |
|---|---|
| `_plan.py` | planning |

## Decisions

### Decisions: the kernels

| name | decision | why |
|---|---|---|
| two-pass rows | rows in two passes | measured |
| `streaming-stores` | never | measured |

### Decisions: the plan

| name | decision | why |
|---|---|---|
| the ring | ring of planes | measured |

### The torch wing

| module | job |
|---|---|
| `_ops.py` | the operators |

## One kernel
| late row | not a decision | |
"""


def test_the_decisions_rows_are_read_from_their_section_only():
    assert decision_rows(DESIGN) == {"two-pass rows", "streaming-stores", "the ring"}
    assert decision_rows("# Design\n| a | b |\n") == set()


def test_a_citation_without_its_row_is_rejected():
    sources = {
        "good.py": "# docs/design.md, Decisions: the ring.\n",
        "good.h": "/* docs/design.md, Decisions: streaming-stores */\n",
        "missing.pyx": "# docs/design.md, Decisions: late row\n",
        "wrapped.h": "/* docs/design.md, Decisions:\n * two-pass rows */\n",
        "notes.py": "# measured (benchmarks/NOTES.md, \"Whole planes\")\n",
        "notes.h": "/* NOTES.md says so */\n",
    }
    assert citation_problems(sources, DESIGN) == [
        "missing.pyx: Decisions: 'late row' has no row in docs/design.md",
        "notes.h:1: cites NOTES.md: /* NOTES.md says so */",
        "notes.py:1: cites NOTES.md: # measured (benchmarks/NOTES.md, \"Whole planes\")",
        "wrapped.h: 'Decisions:' with no name on its line",
    ]
    clean = {k: v for k, v in sources.items() if k.startswith("good")}
    assert citation_problems(clean, DESIGN) == []


# -- the rules, applied to the repository ---------------------------------------

def _need(path):
    if not path.exists():
        pytest.skip(f"{path.relative_to(ROOT)} is not next to the tests")


def _user_pages():
    pages = sorted(p for p in DOCS.glob("*.md") if p.name not in HISTORY_PAGES)
    return [ROOT / "README.md"] + pages


def test_no_user_page_names_an_issue():
    _need(DOCS)
    pages = _user_pages()
    assert len(pages) > 10 and (DOCS / "quickstart.md") in pages
    found = [f"{p.relative_to(ROOT)}:{line}: {words!r}"
             for p in pages for line, words in issue_numbers(p.read_text(encoding="utf-8"))]
    assert found == [], "say the behaviour, not the issue:\n" + "\n".join(found)


def test_no_test_is_named_by_an_item_or_issue_number():
    files = sorted(Path(__file__).resolve().parent.rglob("*.py"))
    assert len(files) > 20
    found = [f"{p.name}: {name}" for p in files
             for name in numbered_test_names(p.read_text(encoding="utf-8"))]
    assert found == [], "name the behaviour, not the item:\n" + "\n".join(found)


def test_every_decision_the_package_cites_has_its_row_and_none_cites_notes():
    _need(PACKAGE)
    _need(DOCS / "design.md")
    sources = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8", errors="replace")
               for p in sorted(PACKAGE.rglob("*")) if p.suffix in SOURCES}
    assert len(sources) > 50
    problems = citation_problems(sources, (DOCS / "design.md").read_text(encoding="utf-8"))
    assert problems == [], "\n".join(problems)

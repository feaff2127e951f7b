"""The documentation's examples run and say what they claim.

Every ```python block of the pages listed below is executed, in order, in one
namespace per page (the blocks build on each other); their asserts are the
checks.  Blocks that import torch are skipped when PyTorch is not installed.
Skipped as a whole where the docs are not next to the tests (an installed
test suite without the source tree).
"""

import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
PAGES = ["quickstart.md", "index.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def python_blocks(page):
    """The ```python blocks of a docs page, in order."""
    return BLOCK.findall((DOCS / page).read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", PAGES)
def test_docs_examples_run(page, capsys):
    if not (DOCS / page).exists():
        pytest.skip(f"docs/{page} is not next to the tests")
    blocks = python_blocks(page)
    assert blocks, f"docs/{page} has no python examples"
    namespace = {"__name__": f"docs_{page.replace('.', '_')}"}
    for number, code in enumerate(blocks, 1):
        if re.search(r"^import torch", code, re.MULTILINE):
            try:
                import torch  # noqa: F401
            except ImportError:
                continue
        exec(compile(code, f"docs/{page} python block {number}", "exec"), namespace)


def test_quickstart_printed_output_matches():
    """The outputs the quick start shows in comments are what the code prints."""
    if not (DOCS / "quickstart.md").exists():
        pytest.skip("docs/quickstart.md is not next to the tests")
    import io
    from contextlib import redirect_stdout

    namespace = {"__name__": "docs_quickstart"}
    for number, code in enumerate(python_blocks("quickstart.md"), 1):
        if "import torch" in code:
            continue
        printed = io.StringIO()
        with redirect_stdout(printed):
            exec(compile(code, f"quickstart block {number}", "exec"), namespace)
        claimed = [m.group(1).strip() for m in
                   re.finditer(r"^\s*print\(.*\)\s+# (.*)$", code, re.MULTILINE)]
        lines = printed.getvalue().splitlines()
        assert len(lines) == len(claimed), (number, lines, claimed)
        for line, claim in zip(lines, claimed):
            assert line == claim, (number, line, claim)

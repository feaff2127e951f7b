"""Sphinx configuration for the trilinear_bwd documentation.

Build with ``ci/build_docs.sh`` (a fresh virtual environment with the package
and the ``docs`` extra, then ``sphinx-build -W``).  The pages are MyST
Markdown; the API reference is generated from the numpydoc docstrings of the
installed package, which must therefore be importable with its compiled
extensions.  Figures are drawn at build time by the scripts in ``_scripts/``
(matplotlib's ``plot`` directive); nothing generated is written to the source
tree.
"""

import pathlib
import re
import sys

from docutils import nodes
from docutils.parsers.rst import Directive

import trilinear_bwd

HERE = pathlib.Path(__file__).resolve().parent

project = "trilinear_bwd"
author = "trilinear_bwd developers"
copyright = "trilinear_bwd developers, Apache-2.0"
release = trilinear_bwd.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "matplotlib.sphinxext.plot_directive",
]

# All pages are Markdown; ".rst" is listed because numpydoc's autosummary
# refuses to run (with a warning) without it.
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_scripts", "Thumbs.db", ".DS_Store"]
templates_path = []

# -- MyST -------------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# Pages other parts of the project add (performance, threads, the PyTorch and
# Dask integrations, reliability) may be linked before they exist on a branch:
# a link to one of those that is still missing is not an error.  Once the page
# exists the link is checked like any other.
PLANNED_PAGES = ["performance", "threads", "torch", "dask", "reliability"]
nitpick_ignore = [("myst", f"{name}.md") for name in PLANNED_PAGES
                  if not (HERE / f"{name}.md").exists()]

# -- autodoc / numpydoc -------------------------------------------------------
# In a Markdown page, put autodoc directives in an ```{eval-rst} block (see
# reference.md): autodoc emits reStructuredText, which a MyST directive would
# read as Markdown.  The same holds for matplotlib's plot directive.
autodoc_default_options = {"members": True, "undoc-members": False, "member-order": "bysource"}
autodoc_typehints = "none"
autodoc_preserve_defaults = True
# Optional integrations must never be imported by a docs build (slow, and not
# installed by the docs extra): documenting one of their modules sees mocks.
autodoc_mock_imports = ["torch", "dask", "distributed"]
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# -- figures ------------------------------------------------------------------
plot_basedir = str(HERE / "_scripts")
plot_include_source = False
plot_html_show_source_link = False
plot_html_show_formats = False
plot_formats = [("png", 110)]
plot_rcparams = {"font.size": 9, "savefig.bbox": "tight"}

# -- HTML -----------------------------------------------------------------------
html_theme = "alabaster"
html_title = f"trilinear_bwd {release}"
html_theme_options = {
    "description": "The backward of 3-D trilinear upsampling, fast and deterministic on CPUs",
    "fixed_sidebar": True,
    "page_width": "1100px",
    "sidebar_width": "230px",
}
html_sidebars = {"**": ["about.html", "navigation.html", "searchbox.html"]}


def _no_heavy_imports(app, exception):
    """Fail the build if it imported PyTorch or Dask for real (see above)."""
    if exception is not None:
        return
    real = [name for name in ("torch", "dask", "distributed")
            if name in sys.modules and getattr(sys.modules[name], "__file__", None)]
    if real:
        from sphinx.util import logging

        logging.getLogger(__name__).warning(
            "the docs build imported %s; document optional integrations without "
            "importing them (autodoc_mock_imports)", ", ".join(real))


class _CommandLineHelp(Directive):
    """``{trilinear-bwd-help}``: the ``--help`` text of ``python -m trilinear_bwd``."""

    def run(self):
        from trilinear_bwd.__main__ import parser

        text = parser().format_help()
        return [nodes.literal_block(text, text, language="text")]


_STATUS_AT_START = re.compile(r"^(\s*)\((\d{6})\)")


def _status_codes_are_text(app, what, name, obj, options, lines):
    """Keep a description that starts with a status code, "(161001) ...", a sentence.

    reStructuredText reads "(161001) text" at the start of a paragraph as item
    161001 of an enumerated list; escaping the parenthesis keeps the
    docstrings readable as plain text and renders them as written.
    """
    lines[:] = [_STATUS_AT_START.sub(r"\1\\(\2)", line) for line in lines]


def _hide_private_constructor(app, what, name, obj, options, signature, return_annotation):
    """Executors come from get_workspace_size(); do not show __init__'s arguments."""
    if what == "class" and name == "trilinear_bwd.Executor":
        return "", return_annotation
    return None


def setup(app):
    app.add_directive("trilinear-bwd-help", _CommandLineHelp)
    app.connect("autodoc-process-docstring", _status_codes_are_text)
    app.connect("autodoc-process-signature", _hide_private_constructor)
    app.connect("build-finished", _no_heavy_imports)

"""The package's folders are its layers: each imports only from the layers below.

``trilinear_bwd/`` (the public face and the front ends) may import the core and
the kernels; ``trilinear_bwd/_core/`` imports the kernels but no front end, no
PyTorch, no Dask; ``trilinear_bwd/_kernels/`` imports neither.  Read from the
source, every module of each folder, Python and Cython alike.
"""

import ast
import re
from pathlib import Path

import pytest

import trilinear_bwd

PACKAGE = Path(trilinear_bwd.__file__).parent
SOURCES = (".py", ".pyx", ".pxd", ".pxi")
_CYTHON_IMPORT = re.compile(r"^\s*(?:from\s+(\.*[\w.]*)\s+c?import|c?import\s+([\w.]+))", re.M)


def _modules(folder):
    return sorted(p for p in (PACKAGE / folder).rglob("*") if p.suffix in SOURCES)


def _imports(path, root=PACKAGE):
    """The absolute dotted names ``path`` imports (relative ones resolved)."""
    package = ["trilinear_bwd", *path.relative_to(root).parent.parts]
    text = path.read_text()
    found = []
    if path.suffix == ".py":
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                found += [(a.name, 0) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                found += [(base, node.level)]
                found += [(f"{base}.{a.name}" if base else a.name, node.level) for a in node.names]
    else:
        for rel, plain in _CYTHON_IMPORT.findall(text):
            name = rel or plain
            level = len(name) - len(name.lstrip("."))
            found.append((name.lstrip("."), level))
    names = []
    for name, level in found:
        if level:
            base = package[: len(package) - level + 1]
            name = ".".join(base + ([name] if name else []))
        names.append(name)
    return names


def _front_ends():
    """The root's modules and packages other than the core and the kernels."""
    out = {"torch", "dask", "trilinear_bwd.torch", "trilinear_bwd.golden", "trilinear_bwd.dask"}
    for p in PACKAGE.iterdir():
        if p.suffix in SOURCES and p.stem != "__init__":
            out.add(f"trilinear_bwd.{p.stem}")
    return out


@pytest.mark.parametrize("folder", ["_core", "_kernels"])
def test_the_core_and_the_kernels_import_no_front_end(folder):
    banned = _front_ends()
    offenders = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in _modules(folder)
        for name in _imports(path)
        if any(name == b or name.startswith(b + ".") for b in banned)
    ]
    assert _modules(folder) and not offenders, offenders


def test_the_kernels_import_nothing_of_the_core():
    offenders = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in _modules("_kernels")
        for name in _imports(path)
        if name == "trilinear_bwd._core" or name.startswith("trilinear_bwd._core.")
    ]
    assert not offenders, offenders


def test_the_reader_sees_an_upward_import(tmp_path):
    """The check can fail: relative and absolute imports of a front end are seen."""
    core = tmp_path / "_core"
    core.mkdir()
    (core / "a.py").write_text("from .. import dask\nfrom ..torch import _cache\n")
    (core / "b.pyx").write_text("from trilinear_bwd._api cimport x\nfrom .._core cimport y\n")
    assert _imports(core / "a.py", tmp_path) == [
        "trilinear_bwd", "trilinear_bwd.dask", "trilinear_bwd.torch", "trilinear_bwd.torch._cache"]
    assert _imports(core / "b.pyx", tmp_path) == ["trilinear_bwd._api", "trilinear_bwd._core"]


def test_the_root_holds_no_c_header_nor_cython_include():
    """Headers and Cython includes live with the kernels (or the core's two extensions)."""
    stray = [p.name for p in PACKAGE.iterdir() if p.suffix in (".h", ".pxd", ".pxi", ".pyx")]
    assert not stray, stray


def _harness(name):
    return name == "trilinear_bwd._bench" or name.startswith("trilinear_bwd._bench.")


def _harness_importers(root=PACKAGE):
    """The modules under ``root`` that import the benchmark harness, its entry and itself aside."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.suffix in SOURCES):
        rel = path.relative_to(root)
        if rel.parts[0] == "_bench" or rel == Path("bench.py"):
            continue
        if any(_harness(name) for name in _imports(path, root)):
            found.append(rel.as_posix())
    return found


def test_only_the_entry_point_imports_the_benchmark_harness():
    """``trilinear_bwd/_bench/`` is out of the library's import path: only ``bench.py`` reaches it."""
    assert any(_harness(name) for name in _imports(PACKAGE / "bench.py"))  # the reader sees it
    assert _harness_importers() == []


def test_the_harness_check_sees_an_import_of_the_harness(tmp_path):
    """The check can fail: relative and absolute imports of the harness are seen, anywhere."""
    for folder in ("_core", "_bench", "torch"):
        (tmp_path / folder).mkdir()
    (tmp_path / "_core" / "a.py").write_text("from .._bench import _kernel\n")
    (tmp_path / "torch" / "b.py").write_text("import trilinear_bwd._bench._cli\n")
    (tmp_path / "c.py").write_text("from . import _bench\n")
    (tmp_path / "d.py").write_text("from . import bench\n")
    (tmp_path / "bench.py").write_text("from ._bench._cli import main\n")
    (tmp_path / "_bench" / "_x.py").write_text("from . import _kernel\n")
    assert _harness_importers(tmp_path) == ["_core/a.py", "c.py", "torch/b.py"]


MAX_LINES = 600


def test_no_module_is_over_600_lines():
    """One job per module: none of the package's sources (Python, Cython, C) runs past 600 lines."""
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*")
        if p.suffix in SOURCES + (".h",)
        and (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, long

"""PyTorch's private names go through one module (trilinear_bwd/torch/_private.py).

A new private name is a visible decision: the scan below fails on one used
anywhere else in the wing, and ``_private.NAMES`` says for each what it is
for, since which release, and what happens without it.  Also here: a failed
import of the wing leaves nothing half registered.
"""

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trilinear_bwd.torch import _private  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WING = ROOT / "trilinear_bwd" / "torch"


def _private_part(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _root_and_chain(node):
    chain = []
    while isinstance(node, ast.Attribute):
        chain.append(node.attr)
        node = node.value
    return (node.id if isinstance(node, ast.Name) else None), chain[::-1]


def private_uses(path):
    """``(line, text)`` of each use of a private PyTorch name in one module."""
    tree = ast.parse(path.read_text())
    torch_names = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "torch":
                    if any(_private_part(p) for p in alias.name.split(".")):
                        found.append((node.lineno, f"import {alias.name}"))
                    torch_names.add(alias.asname or "torch")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] == "torch":
                for alias in node.names:
                    if any(_private_part(p) for p in parts + [alias.name]):
                        found.append((node.lineno, f"from {node.module} import {alias.name}"))
                    torch_names.add(alias.asname or alias.name)
    docstrings = {id(n.value) for n in ast.walk(tree)
                  if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:   # whole chains only
            root, chain = _root_and_chain(node)
            if root in torch_names and any(_private_part(p) for p in chain):
                found.append((node.lineno, ".".join([root] + chain)))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in docstrings and re.match(r"torch(\.\w+)*\._", node.value)):
            found.append((node.lineno, repr(node.value)))
    # Tensor methods are reached through any name: the private ones by their spelling.
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in {"_is_zerotensor", "_cdata",
                                                             "_version", "_base"}:
            if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                found.append((node.lineno, f"._{node.attr.lstrip('_')}"))
    return sorted(set(found))


def test_the_scan_finds_each_kind_of_use(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(textwrap.dedent('''
        """torch._C in a docstring is not a use."""
        import torch
        import torch.autograd.forward_ad as fad
        from torch._C import DispatchKey
        from torch import _C
        a = torch._C._dispatch_keys
        b = fad._current_level
        c = torch.nn.functional.interpolate
        d = "torch._dynamo"
        e = x._is_zerotensor()
    '''))
    uses = sorted(text for _, text in private_uses(sample))
    assert uses == sorted(["'torch._dynamo'", "._is_zerotensor", "fad._current_level",
                           "from torch import _C", "from torch._C import DispatchKey",
                           "torch._C._dispatch_keys"])


def test_private_pytorch_names_are_used_only_through_private_py():
    offenders = {}
    for path in sorted(WING.glob("*.py")):
        if path.name == "_private.py":
            continue
        uses = private_uses(path)
        if uses:
            offenders[path.name] = uses
    for path in sorted(WING.glob("*.pyx")):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if re.search(r"\btorch(\.\w+)*\._\w", code) and '"' not in code:
                offenders.setdefault(path.name, []).append((lineno, line.strip()))
    assert not offenders, (
        "private PyTorch names used outside trilinear_bwd/torch/_private.py "
        f"(add them there, with what they are for and what happens without them): {offenders}")


def test_private_py_lists_what_it_uses():
    # Every dotted torch._... path the module spells out is described in NAMES.
    text = (WING / "_private.py").read_text()
    described = {p.name for p in _private.NAMES}
    spelled = set(re.findall(r'_find\("([\w.]+)"\)', text))
    assert spelled <= described, spelled - described
    for p in _private.NAMES:
        assert p.purpose and p.without and re.fullmatch(r"\d+\.\d+", p.since), p
    assert set(_private.REQUIRED) <= described


def test_each_listed_name_is_present_on_this_release():
    # The floor and the newest release (ci/test_torch_range.sh) have them all:
    # a release that loses one shows here, before a slower route goes unnoticed.
    missing = [p.name for p in _private.NAMES
               if p.name != "torch._dynamo" and _private._find(p.name) is None]
    assert not missing, f"PyTorch {torch.__version__} lacks {missing}"


def test_a_failed_import_leaves_nothing_half_registered():
    # The third registration fails (after the first operator was defined):
    # the import raises, and a later import registers everything afresh.
    code = textwrap.dedent("""
        import torch, torch.library
        real = torch.library.register_fake
        count = [0]
        def failing(*args, **kwargs):
            count[0] += 1
            if count[0] == 3:
                raise RuntimeError("injected failure")
            return real(*args, **kwargs)
        torch.library.register_fake = failing
        try:
            import trilinear_bwd.torch
        except RuntimeError as e:
            assert "injected" in str(e), e
        else:
            raise SystemExit("the import did not fail")
        assert not [m for m in __import__("sys").modules
                    if m.startswith("trilinear_bwd.torch") and not m.endswith("_fast")]
        assert not hasattr(torch.ops.trilinear_bwd, "upsample_trilinear3d")
        torch.library.register_fake = real
        import trilinear_bwd.torch as tbt
        x = torch.randn(1, 2, 3, 3, 3, requires_grad=True)
        y = tbt.upsample_trilinear3d(x, scale_factor=2)
        y.sum().backward()
        z = torch.ops.trilinear_bwd.upsample_trilinear3d(x.detach(), [6, 6, 6], False,
                                                         None, None, None)
        assert torch.equal(y.detach(), z)
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    if os.environ.get("TRILINEAR_BWD_EXPECT_INSTALLED_IN"):
        env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.split()[-1:] == ["ok"], out.stderr[-3000:]


def test_the_plain_route_is_taken_on_this_release():
    # The dispatch-key test must say "plain" for a plain CPU tensor on every
    # release CI tests (before PyTorch 2.5 key sets compared by identity, so
    # it never did and every call went through the operator).
    from trilinear_bwd.torch import _dropin
    assert _private.PLAIN_KEYS is not None
    for tensor in (torch.randn(1, 2, 3, 3, 3), torch.nn.Parameter(torch.randn(1, 1, 2, 2, 2)),
                   torch.randn(1, 2, 3, 3, 3, requires_grad=True)):
        assert _dropin._plain(tensor)
    assert not _dropin._plain(torch.randn(1, 2, 3, 3, 3)._neg_view())
    with torch.inference_mode():
        assert not _dropin._plain(torch.randn(1, 2, 3, 3, 3))

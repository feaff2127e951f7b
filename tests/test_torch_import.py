"""Importing ``trilinear_bwd.torch`` changes nothing in PyTorch until the first ``enable()``.

Each check runs in a fresh interpreter: the registration, once made, is kept
for the life of the process (other tests of the session enable).  No timings:
the checks are the dispatcher's own table and whether this library's Python
is entered at all.
"""

import os
import subprocess
import sys

import pytest
from conftest import sample

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The CPU kernels of the aten operators enable() overrides, as the
# dispatcher lists them.  PyTorch's own is a C++ kernel, "boxed unboxed"; one
# registered from Python (this library's: nothing else in these processes
# registers one) is boxed only.  The file the line names differs by release
# (the registering file in 2.13, /dev/null in 2.4), so it is not read.
_PRELUDE = r"""
import sys, torch
OPS = ("aten::upsample_trilinear3d", "aten::upsample_trilinear3d_backward")
def cpu_lines():
    return {op: [l for l in torch._C._dispatch_dump(op).splitlines()
                 if l.startswith("CPU:")] for op in OPS}
def ours(lines):
    return {op: any("unboxed" not in l for l in ls) for op, ls in lines.items()}
"""


def _run(body):
    code = _PRELUDE + body
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.parametrize("layout", sample(["NCDHW", "NDHWC"], 1))
def test_import_registers_no_kernel_and_enters_no_python(layout):
    """Before enable(): PyTorch's own CPU kernels, and no call reaches this library's Python."""
    _run(r"""
before = cpu_lines()
import trilinear_bwd.torch as tbt
assert cpu_lines() == before, (before, cpu_lines())
assert not any(ours(cpu_lines()).values())
assert not tbt._override._library.registered

entered = []
def sentinel(name):
    def hook(*args, **kwargs):
        entered.append(name)
        raise AssertionError(name + " entered before enable()")
    return hook
from trilinear_bwd.torch import _cache, _override, _pytorch
for module, name in ((_override, "_switched_forward"), (_override, "_switched_backward"),
                     (_override, "_forward"), (_override, "_backward"),
                     (_cache, "run"), (_cache, "cold"), (_pytorch, "kernel")):
    setattr(module, name, sentinel(name))
x = torch.randn(2, 3, 4, 5, 6, dtype=torch.float64, requires_grad=True)
if %r == "NDHWC":
    x = x.detach().contiguous(memory_format=torch.channels_last_3d).requires_grad_()
y = torch.nn.functional.interpolate(x, scale_factor=2, mode="trilinear")
y.sum().backward()
tbt.disable()                       # disable() before any enable(): still nothing registered
torch.nn.functional.interpolate(x, size=(5, 7, 9), mode="trilinear",
                                align_corners=True).sum().backward()
assert entered == [] and tbt.call_counts() == dict.fromkeys(tbt.call_counts(), 0)
assert cpu_lines() == before and not tbt._override._library.registered
""" % layout)


def test_first_enable_registers_once_and_for_good():
    """The first enable() registers both kernels; disable() and later toggles never unregister."""
    _run(r"""
import trilinear_bwd.torch as tbt
holder = tbt._override._library
tbt.enable()
assert all(ours(cpu_lines()).values()), cpu_lines()
lib = holder.lib
x = torch.randn(1, 2, 3, 4, 5, requires_grad=True)
torch.nn.functional.interpolate(x, scale_factor=2, mode="trilinear").sum().backward()
assert tbt.call_counts()["forward"] == 1 and tbt.call_counts()["kernel"] == 1
for _ in range(50):
    tbt.disable(); tbt.enable()
tbt.disable()
assert tbt._override._library is holder and holder.lib is lib
assert all(ours(cpu_lines()).values())      # still registered, handing calls back
torch.nn.functional.interpolate(x, scale_factor=2, mode="trilinear").sum().backward()
assert tbt.call_counts()["forward"] == 1 and tbt.call_counts()["kernel"] == 1
""")


# The spelling that registers is read by capturing F.interpolate's call, which
# ends in a C++ throw (ci/sanitize.sh preloads libstdc++ for ASan's sake).
@pytest.mark.parametrize("spelling, registers", sample([("scale_factor=2", False),
                                                        ("size=(6, 8, 10)", False),
                                                        ("size=torch.Size([6, 8, 10])", True)],
                                                       2))
def test_drop_in_registers_only_when_it_must(spelling, registers):
    """The drop-in reads plain arguments itself; F.interpolate's other spellings register."""
    out = _run(r"""
import trilinear_bwd.torch as tbt
x = torch.randn(1, 2, 3, 4, 5, requires_grad=True)
tbt.upsample_trilinear3d(x, %s).sum().backward()
assert tbt.call_counts()["forward"] == 1 and tbt.call_counts()["kernel"] == 1
assert not tbt.is_enabled()
print(tbt._override._library.registered, any(ours(cpu_lines()).values()))
""" % spelling)
    assert out.split() == [str(registers)] * 2

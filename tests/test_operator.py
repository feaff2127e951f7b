"""The operator description, the checked call record, and a core that knows no PyTorch."""

import ast
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import trilinear_bwd
import trilinear_bwd as tb
from trilinear_bwd._core._operator import BACKWARD, FORWARD, OPERATORS, Call, check

PACKAGE = Path(trilinear_bwd.__file__).parent
# The folders whose modules may name torch: the torch wing, the golden-data
# workbench, the benchmark harness.
TORCH_FOLDERS = ("golden", "torch", "_bench")


def _backward_call(**kw):
    g = np.ones((1, 2, 4, 4, 4), np.float32)
    out = np.empty((1, 2, 2, 2, 2), np.float32)
    return check(BACKWARD, g, out, (4, 4, 4), (1, 2, 2, 2, 2), False, (0.0, 0.0, 0.0), **kw)


@pytest.mark.parametrize("op", [BACKWARD, FORWARD])
def test_each_operator_describes_its_arrays_shapes_and_direction(op):
    source_shape, target_shape = op.shapes((1, 2, 3, 4, 5), (6, 7, 8))
    upsampled, given = (1, 2, 6, 7, 8), (1, 2, 3, 4, 5)
    if op.forward:
        assert (source_shape, target_shape) == (given, upsampled)
        assert op.names == ("self", "out") and op.min_channels == 1
    else:
        assert (source_shape, target_shape) == (upsampled, given)
        assert op.names == ("gradOut", "gradInput") and op.min_channels == 0
    assert OPERATORS[op.name] is op


def test_a_checked_call_is_immutable_and_compared_by_identity():
    call = _backward_call()
    with pytest.raises(AttributeError):
        call.target = None
    with pytest.raises(AttributeError):
        call.anything = 1
    other = _backward_call()
    assert call != other and call == call          # never an element-wise comparison
    assert hash(call) != hash(other) or call is other
    assert not hasattr(call, "__dict__")           # nothing can be added to it either
    fresh = np.empty_like(call.target)
    moved = call.replace(target=fresh)
    assert moved.target is fresh and call.target is not fresh
    assert moved.source is call.source and moved.op is call.op


@pytest.mark.parametrize("op", [BACKWARD, FORWARD])
def test_a_call_pickles_with_its_operator_the_same_object(op):
    # Dask ships the whole call to its workers: the operator must come back
    # as the very same description (code compares and keys on it).
    x = np.ones((1, 2, 2, 2, 2), np.float32)
    if op.forward:
        call = check(FORWARD, x, None, (4, 4, 4), None, False, (0.0, 0.0, 0.0), allocate=True)
    else:
        call = check(BACKWARD, x, None, (2, 2, 2), (1, 2, 1, 1, 1), False, (0.0, 0.0, 0.0),
                     allocate=True)
    back = pickle.loads(pickle.dumps(call))
    assert back.op is op
    assert (back.input_size, back.output_size, back.scales) == \
        (call.input_size, call.output_size, call.scales)
    np.testing.assert_array_equal(back.source, call.source)


def test_one_check_serves_both_operators_with_each_ones_names():
    x = np.ones((1, 0, 2, 2, 2), np.float32)
    with pytest.raises(tb.InvalidArgumentError, match=r"^self C must be > 0"):
        check(FORWARD, x, None, (4, 4, 4), None, False, (0.0, 0.0, 0.0), allocate=True)
    # C = 0 is an empty backward, not an error.
    g = np.ones((1, 0, 4, 4, 4), np.float32)
    check(BACKWARD, g, None, (4, 4, 4), (1, 0, 2, 2, 2), False, (0.0, 0.0, 0.0), allocate=True)
    with pytest.raises(tb.InvalidArgumentError, match=r"^out shape must equal \(N, C\) of self"):
        check(FORWARD, np.ones((1, 1, 2, 2, 2), np.float32), np.empty((1, 1, 3, 3, 3), np.float32),
              (4, 4, 4), None, False, (0.0, 0.0, 0.0))
    with pytest.raises(tb.InvalidArgumentError, match=r"^gradInput shape must equal inputSize"):
        check(BACKWARD, g[:, :0], np.empty((1, 0, 3, 3, 3), np.float32), (4, 4, 4),
              (1, 0, 2, 2, 2), False, (0.0, 0.0, 0.0))


@pytest.mark.parametrize("call", ["backward", "forward"])
def test_every_written_array_must_be_shared_memory_not_a_copy(call):
    # The class: an array the library writes, whichever operator names it,
    # is never converted by copying (the result would land in a temporary).
    target = [[[[[0.0] * 2] * 2] * 2]]
    with pytest.raises(tb.InvalidArgumentError, match="written in place"):
        if call == "forward":
            tb.upsample_trilinear3d(np.ones((1, 1, 1, 1, 1), np.float32), (2, 2, 2), out=target)
        else:
            tb.upsample_trilinear3d_backward(np.ones((1, 1, 4, 4, 4), np.float32), (2, 2, 2),
                                             out=target)


def _names_torch(tree):
    """Lines of ``tree`` that import torch or name a module attribute ``torch``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch"
                                                for a in node.names):
            found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            found.append(node.lineno)
        elif isinstance(node, ast.Name) and node.id == "torch":
            found.append(node.lineno)
        elif isinstance(node, ast.Constant) and node.value == "torch":
            found.append(node.lineno)
    return found


def test_no_module_of_the_core_names_torch():
    # One table may say which front end handles a package's arrays
    # (_arrays.FOREIGN), and __init__ names its submodule trilinear_bwd.torch
    # (a string); nothing else of the core imports or names torch.  The
    # golden-data workbench uses PyTorch as its third party, as the
    # benchmark does: both are tools, not the core.
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name in TORCH_FOLDERS:
            continue
        tree = ast.parse(path.read_text())
        lines = _names_torch(tree)
        if path.name == "__init__.py":
            strings = {n.lineno for n in ast.walk(tree)
                       if isinstance(n, ast.Constant) and n.value == "torch"}
            lines = [n for n in lines if n not in strings]
        if path.name == "_arrays.py":
            table = [n.lineno for n in ast.walk(ast.parse(path.read_text()))
                     if isinstance(n, ast.Assign) and any(
                         getattr(t, "id", None) == "FOREIGN" for t in n.targets)]
            lines = [n for n in lines if n not in table]
        if lines:
            offenders[str(path.relative_to(PACKAGE))] = lines
    assert not offenders, offenders


def test_the_scan_finds_a_module_that_names_torch():
    # The control: the scan above is not vacuous.
    assert _names_torch(ast.parse("import torch\n")) == [1]
    assert _names_torch(ast.parse("x = sys.modules.get('torch')\n")) == [1]
    assert _names_torch(ast.parse("def f(torch):\n    return torch.Tensor\n"))


def test_import_loads_no_torch_and_a_tensor_still_works():
    code = (
        "import sys, trilinear_bwd as tb\n"
        "assert 'torch' not in sys.modules\n"
        "assert 'trilinear_bwd.torch._arrays' not in sys.modules\n"
        "try:\n"
        "    import torch\n"
        "except ImportError:\n"
        "    print('no torch'); raise SystemExit\n"
        "g = torch.ones(1, 1, 4, 4, 4)\n"
        "r = tb.upsample_trilinear3d_backward(g, (2, 2, 2))\n"
        "assert isinstance(r, torch.Tensor) and float(r.sum()) == 64.0\n"
        "assert 'trilinear_bwd.torch._arrays' in sys.modules\n"
        "from trilinear_bwd.torch import _override\n"
        "assert not _override._library.registered\n"
        "print('ok')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] in ("ok", "torch")


def test_a_forward_out_tensor_that_requires_grad_is_refused_in_grad_mode():
    torch = pytest.importorskip("torch")
    x = torch.ones(1, 1, 2, 2, 2)
    out = torch.zeros(1, 1, 4, 4, 4, requires_grad=True)
    with pytest.raises(tb.InvalidArgumentError, match="must not require grad"):
        tb.upsample_trilinear3d(x, (4, 4, 4), out=out)
    with torch.no_grad():
        tb.upsample_trilinear3d(x, (4, 4, 4), out=out)
    assert float(out.detach().sum()) == 64.0


def test_call_is_the_record_every_front_end_gets():
    # The executor's record is a Call (not a mutable or dataclass object).
    g = np.ones((1, 1, 4, 4, 4), np.float32)
    out = np.empty((1, 1, 2, 2, 2), np.float32)
    _, ex = tb.get_workspace_size(g, (4, 4, 4), out.shape, False, 0.0, 0.0, 0.0, out)
    assert type(ex._call) is Call and ex._call.op is BACKWARD
    assert ex.grad_out is g and ex.grad_input is out

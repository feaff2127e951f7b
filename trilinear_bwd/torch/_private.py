"""Every private PyTorch name the torch wing uses, in one place.

PyTorch promises nothing about its underscored names: any release may move,
rename or drop one.  The wing uses a few, each for speed or for a fact no
public call tells, and reaches them only through this module, so that

* a new private name is a visible decision (``tests/test_torch_private.py``
  scans the wing and fails on one used elsewhere, and lists those here);
* each is looked up once, at import, and a missing one is known at once: the
  wing then takes the slower, correct route written beside it, or, for the
  few it cannot do without (:data:`REQUIRED`), refuses to import before it
  registers anything.

:data:`NAMES` describes each: what it is for, the oldest release checked to
have it (the ``[torch]`` floor, 2.4, unless later), and what the wing does
without it.  ``ci/test_torch_range.sh`` runs the torch tests on the floor and
on the newest release; ``tests/test_torch_private.py`` checks that each name
listed as present on both is found on the release under test.
"""

import sys
from typing import NamedTuple

import torch
import torch.autograd.forward_ad as _forward_ad


class Private(NamedTuple):
    """One private PyTorch name: what it is for, since when, and what happens without it."""

    name: str
    purpose: str
    since: str
    without: str


def _find(path):
    """The object at dotted ``path`` under ``torch`` (importing submodules), or None if absent."""
    parts = path.split(".")
    assert parts[0] == "torch"
    obj = torch
    for i, part in enumerate(parts[1:], 1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            # A submodule not imported yet (torch._decomp, say): import it.
            try:
                __import__(".".join(parts[:i + 1]))
                obj = getattr(obj, part)
            except (ImportError, AttributeError):
                return None
    return obj


NAMES = (
    Private("torch._C.DispatchKey",
            "the dispatch keys the operators' Autograd kernel, the plain-tensor test and the "
            "compile hook name",
            "2.4", "required: the wing does not import"),
    Private("torch._C._after_autograd_keyset",
            "the keys below Autograd, which the custom operators' Autograd kernel redispatches "
            "to",
            "2.4", "required: the wing does not import"),
    Private("torch._C._dispatch_keys",
            "the plain-tensor test (_dropin._plain): a tensor whose keys are a plain CPU "
            "tensor's skips the dispatcher to the kernel",
            "2.4", "every call goes through the custom operator (a few microseconds more)"),
    Private("torch._C._dispatch_tls_is_dispatch_key_included",
            "the plain-tensor test: no Python dispatch mode (fake, proxy, functional) is on",
            "2.4", "every call goes through the custom operator"),
    Private("torch._C._is_torch_function_mode_enabled",
            "the plain-tensor test: no torch function mode would see the operator's call",
            "2.4", "every call goes through the custom operator"),
    Private("torch._C._are_functorch_transforms_active",
            "whether a torch.func transform (vmap, grad, jacrev, ...) is active, so that "
            "calls go through the autograd Function and the operators",
            "2.4", "taken as always active: every call takes the autograd Function (correct, "
            "slower)"),
    Private("torch._C._is_tracing",
            "torch.jit.is_tracing() without its Python frame",
            "2.4", "torch.jit.is_tracing() (public, a little slower)"),
    Private("torch._C._functorch.unwrap_if_dead",
            "what Function.apply does to a dead functorch wrapper, for the drop-in's "
            "Function.apply without signature binding",
            "2.4", "Function.apply itself (the per-call signature binding, slower)"),
    Private("torch._C._FunctionBase",
            "autograd.Function's C entry point (its apply), called without Function.apply's "
            "per-call signature binding",
            "2.4", "Function.apply itself (slower)"),
    Private("torch._unpack_dual",
            "is_dual: whether a tensor carries a forward-mode tangent, without "
            "forward_ad.unpack_dual's Python frame",
            "2.4", "forward_ad.unpack_dual (public, slower)"),
    Private("torch.autograd.forward_ad._current_level",
            "is_dual: the forward-mode level in effect (-1 outside dual_level)",
            "2.4", "forward_ad.unpack_dual (public, slower)"),
    Private("torch.Tensor._is_zerotensor",
            "whether a tensor is a lazy zero tensor (forward AD's), to be read as zeros rather "
            "than through memory it does not have",
            "2.4", "the tensor's dispatch keys are asked for DispatchKey.ZeroTensor"),
    Private("torch._prims_common.suggest_memory_format",
            "PyTorch's rule for the layout of a kernel's result, so the wing's results have "
            "PyTorch's layout",
            "2.4", "the rule written out in _pytorch.suggested_memory_format"),
    Private("torch._C._nn.upsample_trilinear3d",
            "PyTorch's forward kernel (out=) at the cost of F.interpolate's own call, for the "
            "calls handed to PyTorch",
            "2.4", "torch.ops.aten.upsample_trilinear3d.out (public, slower)"),
    Private("torch.ops.aten.upsample_trilinear3d_backward.grad_input._op",
            "the backward's out= operator without OpOverload's Python frame, for the calls "
            "handed to PyTorch",
            "2.4", "the OpOverload itself (public, slower)"),
    Private("torch.ops.aten.upsample_trilinear3d.vec._dispatch_cache",
            "cleared after the compile hook replaces the Python kernels of "
            "upsample_trilinear3d.vec (what OpOverload.py_impl does)",
            "2.4", "the hook is not installed: compiled code under enable() keeps PyTorch's "
            "decomposition"),
    Private("torch._decomp.decompositions.upsample_compute_output_size",
            "the compile hook computes the output size as PyTorch's decomposition does",
            "2.4", "the hook is not installed: compiled code under enable() keeps PyTorch's "
            "decomposition"),
    Private("torch.library.Library._destroy",
            "a failed import of the wing unregisters what it had registered, so that a later "
            "import can register the same operators again",
            "2.4", "the operators stay registered and a later import fails: 'Tried to "
            "register an operator ... multiple times'"),
    Private("torch._dynamo",
            "only whether it is imported (sys.modules): the first enable() resets "
            "torch.compiler's frames compiled before it, and never imports dynamo itself",
            "2.4", "not applicable: a module name, not an attribute"),
)

# Names the wing cannot work without: checked before anything is registered.
REQUIRED = ("torch._C.DispatchKey", "torch._C._after_autograd_keyset")
for _name in REQUIRED:
    if _find(_name) is None:
        raise ImportError(f"trilinear_bwd.torch needs {_name}, which this PyTorch "
                          f"({torch.__version__}) lacks; see docs/torch.md for the releases "
                          f"supported")

DispatchKey = torch._C.DispatchKey
after_autograd_keyset = torch._C._after_autograd_keyset

# The plain-tensor test's three facts; None where this PyTorch lacks one.
dispatch_keys = _find("torch._C._dispatch_keys")
key_included = _find("torch._C._dispatch_tls_is_dispatch_key_included")
function_mode_on = _find("torch._C._is_torch_function_mode_enabled")
# What dispatch_keys returns for a plain dense CPU tensor (outside
# inference mode, whatever the importer is in), or None without the test.
PLAIN_KEYS = None
if None not in (dispatch_keys, key_included, function_mode_on):
    with torch.inference_mode(False):
        PLAIN_KEYS = dispatch_keys(torch.empty(0, device="cpu"))
        if PLAIN_KEYS != dispatch_keys(torch.empty(0, device="cpu")):
            # DispatchKeySet compares by identity before PyTorch 2.5 (it has no
            # __eq__): compare the sets' text instead (a little slower).
            _keyset = dispatch_keys

            def dispatch_keys(tensor):
                """The tensor's dispatch keys, as text (comparable on every release)."""
                return repr(_keyset(tensor))

            PLAIN_KEYS = dispatch_keys(torch.empty(0, device="cpu"))


def _always_active():
    return True


functorch_transforms_active = (_find("torch._C._are_functorch_transforms_active")
                               or _always_active)
is_tracing = _find("torch._C._is_tracing") or torch.jit.is_tracing


def _same(tensor):
    return tensor


unwrap_if_dead = _find("torch._C._functorch.unwrap_if_dead") or _same
_function_base = _find("torch._C._FunctionBase")
# autograd.Function's C apply, or None (then Function.apply is called).
function_apply = (_function_base.__dict__.get("apply") if _function_base is not None
                  else None)

_unpack_dual = _find("torch._unpack_dual")
if _unpack_dual is not None and hasattr(_forward_ad, "_current_level"):
    def is_dual(tensor):
        """True if ``tensor`` carries a forward-mode tangent (inside ``forward_ad.dual_level``)."""
        level = _forward_ad._current_level
        return level >= 0 and _unpack_dual(tensor, level).tangent is not None
else:  # pragma: no cover - every release checked has both
    def is_dual(tensor):
        """True if ``tensor`` carries a forward-mode tangent (inside ``forward_ad.dual_level``)."""
        return _forward_ad.unpack_dual(tensor).tangent is not None

if hasattr(torch.Tensor, "_is_zerotensor"):
    def is_zerotensor(tensor):
        """True if ``tensor`` is a lazy zero tensor (it has no memory of its own)."""
        return tensor._is_zerotensor()
else:  # pragma: no cover - every release checked has it
    def is_zerotensor(tensor):
        """True if ``tensor`` is a lazy zero tensor (it has no memory of its own)."""
        return torch._C._dispatch_keys(tensor).has(DispatchKey.ZeroTensor)

suggest_memory_format = _find("torch._prims_common.suggest_memory_format")

# PyTorch's forward out= kernel: the Python binding F.interpolate calls.
forward_out = (_find("torch._C._nn.upsample_trilinear3d")
               or torch.ops.aten.upsample_trilinear3d.out)


def raw_op(overload):
    """``overload``'s C++ operator without ``OpOverload``'s Python frame, or the overload."""
    return getattr(overload, "_op", overload)


def clear_dispatch_cache(overload):
    """Clear ``overload``'s Python dispatch cache after its ``py_kernels`` changed.

    Returns
    -------
    bool
        False if this PyTorch has no such cache (then the caller leaves the
        kernels as they were).
    """
    cache = getattr(overload, "_dispatch_cache", None)
    if cache is None:
        return False
    cache.clear()
    return True


def upsample_compute_output_size():
    """PyTorch's decomposition's output-size rule (imported on first use), or None."""
    return _find("torch._decomp.decompositions.upsample_compute_output_size")


def dynamo_loaded():
    """True if ``torch.compile``'s tracer has been imported in this process."""
    return "torch._dynamo" in sys.modules


def destroy(library):
    """Unregister everything ``library`` (a ``torch.library.Library``) registered.

    For a failed import only: it leaves nothing half registered, so that a
    later import can register the same operators again.  Not safe while
    other threads are inside the dispatcher.
    """
    library._destroy()

"""Fork safety: one after-fork handler that renews the package's shared state in a child.

A child process has only the thread that called ``fork()``.  A lock that
another thread held at that moment stays held in the child forever, so the
child's first call that takes it never returns.  Every module-level lock,
thread-local and piece of shared state of the package is therefore
registered here, and the one handler this module installs with
``os.register_at_fork`` renews each of them in the child, before any code of
the child runs (``docs/reliability.md``, "Fork").

``tests/test_fork.py`` finds every lock and thread-local among the
package's module globals and fails if one is not registered.

A lock this handler cannot renew is importlib's own per-module lock: a fork
while another thread is importing a module for the first time leaves that
module locked in the child forever.  Modules the package imports on first
use (a kernel variant, the torch wing's tensor kind, ``ml_dtypes``) are
therefore imported through :func:`import_module`, and a fork waits until
no such import is under way.
"""

import importlib
import os
import sys
import threading

# (namespace, name, factory): ``namespace[name] = factory()`` in the child.
_renewed = []
# Callables run in the child after the renewals, in registration order,
# for state that is more than a lock (executors, streams, the pool).
_handlers = []


def renew(namespace, name, factory):
    """Give ``namespace[name]`` a fresh ``factory()`` in every forked child.

    Parameters
    ----------
    namespace : dict
        A module's ``globals()``.
    name : str
        The global holding a lock, condition or thread-local.
    factory : callable
        Builds the fresh object (``threading.Lock``, ``threading.local``...).
    """
    _renewed.append((namespace, name, factory))


def at_child(handler):
    """Run ``handler()`` in every forked child, after the renewals; return ``handler``."""
    _handlers.append(handler)
    return handler


# Held while the package imports a module on first use, and by fork() from
# before it forks until it has forked (re-entrant: an import may fork).
_importing = threading.RLock()


def import_module(name):
    """Import ``name`` (or return it if imported already) so that no fork happens meanwhile.

    Parameters
    ----------
    name : str
        An absolute module name.

    Returns
    -------
    module
    """
    module = sys.modules.get(name)
    if module is not None and not getattr(module.__spec__, "_initializing", False):
        return module
    with _importing:
        return importlib.import_module(name)


def registered():
    """Return ``(module name, global name)`` of every renewed global (for the tests)."""
    return [(namespace.get("__name__"), name) for namespace, name, _ in _renewed]


def _before_fork():
    _importing.acquire()


def _after_fork_in_parent():
    _importing.release()


def _after_fork_in_child():
    for namespace, name, factory in _renewed:
        namespace[name] = factory()
    for handler in _handlers:
        handler()


# The child's copy is held by the forking thread: a fresh one instead.
renew(globals(), "_importing", threading.RLock)

if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


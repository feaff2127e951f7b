"""Whether a path can serve what an argument wants of it, checked before anything is read or written.

Every path the workbench takes (a golden set's folder, a result folder, an
ATK file, a report or a plot to write) goes through one of these, so a bad
one is a :class:`GoldenFileError` naming the argument, the path and the
problem, before any case is generated or judged.  Writes go to a temporary
file beside the target, renamed over it once complete: a failed write
leaves no half-written file.
"""

import json
import os
import re
import sys
import uuid

from ._errors import GoldenFileError, shown

# A case's id and its files' names: plain names inside the set's folder (no
# separator, no leading dot, so neither ".." nor a hidden file), so that
# neither a manifest nor a caller's case can point outside the folder.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*\Z")


def plain_name_problem(v):
    """What keeps ``v`` from being a case's id or file name, or None: the one rule for both.

    Every entry point that turns an id or a name into a path applies it:
    the manifest's check (``read_manifest``, ``read_case``) and
    :func:`plain_name` (``write_result``, ``read_result``, the file names
    of a case).
    """
    if not isinstance(v, str):
        return f"must be a string, got {shown(v)}"
    if not _PLAIN_NAME.match(v):
        return (f"must be a plain file name (letters, digits, '_', '.', '+', '-'; no folder, "
                f"no leading dot), got {shown(v)}")
    return None


def plain_name(v, field="id"):
    """``v`` if it is a plain name (:func:`plain_name_problem`); else a :class:`GoldenFileError`.

    The error names the case and the field as the manifest's check does:
    ``case '../x': id: must be a plain file name ...``.
    """
    problem = plain_name_problem(v)
    if problem:
        label = v if isinstance(v, str) and _PLAIN_NAME.match(v) else shown(v)
        raise GoldenFileError(f"case {label}: {field}: {problem}")
    return v


def _named(label, path):
    return f"{label} {os.fspath(path)}" if label else f"{os.fspath(path)}"


def _writable_folder(folder, label, path):
    """A problem with ``folder`` (an existing ancestor of ``path``) as the place to write in, or None."""
    if not os.path.isdir(folder):
        return f"{_named(label, path)}: {folder} is not a directory"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{_named(label, path)}: {folder} is not writable"
    return None


def input_dir(path, label=None, what=""):
    """Raise unless ``path`` is a directory (``what``: its role, for the message)."""
    if path is None or not os.path.isdir(path):
        exists = path is not None and os.path.exists(path)
        raise GoldenFileError(f"{_named(label, path)}: not a directory"
                              f"{'' if exists else ' (no such path)'}{what}")


def input_file(path, label=None):
    """Raise unless ``path`` is a readable regular file."""
    if os.path.isdir(path):
        raise GoldenFileError(f"{_named(label, path)}: a directory, not a file")
    if not os.path.isfile(path):
        raise GoldenFileError(f"{_named(label, path)}: no such file")
    if not os.access(path, os.R_OK):
        raise GoldenFileError(f"{_named(label, path)}: not readable")


def output_file(path, label=None):
    """Raise unless a file can be written at ``path`` (its folder exists and is writable)."""
    if os.path.isdir(path):
        raise GoldenFileError(f"{_named(label, path)}: a directory; give a file's path")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(folder):
        raise GoldenFileError(f"{_named(label, path)}: its folder {folder} does not exist")
    problem = _writable_folder(folder, label, path)
    if problem is None and os.path.exists(path) and not os.access(path, os.W_OK):
        problem = f"{_named(label, path)}: not writable"
    if problem:
        raise GoldenFileError(problem)


def new_dir(path, label=None, replace=False, hint="replace=True"):
    """Raise unless ``path`` can receive a new set: an empty or absent folder (or any, with ``replace``).

    Returns
    -------
    list of str
        The names ``path`` holds now (empty when absent).
    """
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise GoldenFileError(f"{_named(label, path)}: not a directory")
        problem = _writable_folder(os.fspath(path), label, path)
        if problem:
            raise GoldenFileError(problem)
        held = sorted(os.listdir(path))
        if held and not replace:
            raise GoldenFileError(
                f"{_named(label, path)}: not empty ({len(held)} files: an earlier set?); "
                f"{hint} replaces it, removing what its manifest lists")
        return held
    ancestor = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(ancestor):
        ancestor = os.path.dirname(ancestor)
    problem = _writable_folder(ancestor, label, path)
    if problem:
        raise GoldenFileError(problem)
    return []


def write_atomically(path, write, label=None):
    """Call ``write(temporary_path)``, then rename the file over ``path``; an OSError is a :class:`GoldenFileError`."""
    folder = os.path.dirname(os.path.abspath(path))
    # A name of our own, created with the umask's permissions (mkstemp's
    # would leave the renamed file readable by its owner only).
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{uuid.uuid4().hex[:12]}")
    try:
        open(tmp, "xb").close()
    except OSError as exc:
        raise GoldenFileError(f"{_named(label, path)}: cannot be written "
                              f"({exc.strerror or exc})") from None
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise GoldenFileError(f"{_named(label, path)}: cannot be written "
                              f"({exc.strerror or exc})") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load_json(file):
    """``json.load(file)``; a document nested too deep to read is a ``ValueError`` too.

    JSON of any depth is valid JSON, and Python's reader stops at its
    recursion limit with a ``RecursionError``; no file the workbench reads
    (a manifest, an ATK case file) nests more than a few levels.  As a
    ``ValueError`` it is worded by the caller as any JSON it cannot read
    (``OSError`` too is left to the caller).
    """
    try:
        return json.load(file)
    except RecursionError:
        raise ValueError(f"arrays or objects nested deeper than {sys.getrecursionlimit()} "
                         f"levels") from None

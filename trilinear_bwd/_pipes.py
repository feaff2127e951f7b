"""Command-line entry points that end quietly when the reader of their output leaves.

``python -m trilinear_bwd --info | head -3``: ``head`` exits after three
lines, and the next write (or the flush at exit) fails with
``BrokenPipeError`` (Python ignores ``SIGPIPE``), which would end the
command in a traceback -- or in "Exception ignored ... BrokenPipeError" at
interpreter shutdown, when the output was still buffered.
"""

import functools
import os
import sys

# The exit status of a command that the reader left: what a shell reports
# for a program that SIGPIPE ends (128 + 13).  Not 1, which the commands
# use for a result out of bounds or a set that does not pass.
BROKEN_PIPE_STATUS = 141


def quiet_on_broken_pipe(main):
    """Wrap a command's ``main``: a reader that leaves ends it quietly, status 141.

    CPython's recommendation (the ``signal`` module's documentation, "Note on
    SIGPIPE"): flush standard output inside the ``try``, so that a write the
    buffer held fails here rather than at shutdown, and on
    ``BrokenPipeError`` point standard output at ``os.devnull`` so that the
    interpreter's own flush at exit finds nothing to fail on.  A
    ``SystemExit`` (``--help``, argparse's errors) is flushed the same way.

    Parameters
    ----------
    main : callable
        The entry point; returns the exit status.

    Returns
    -------
    callable
        ``main`` with the same signature and return value, except 141 when
        the reader left.
    """
    @functools.wraps(main)
    def run(*args, **kwargs):
        try:
            try:
                status = main(*args, **kwargs)
            except SystemExit:
                _flush()
                raise
            _flush()
            return status
        except BrokenPipeError:
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            except (OSError, AttributeError, ValueError):
                pass  # no file descriptor behind sys.stdout: nothing flushes there at exit
            return BROKEN_PIPE_STATUS

    return run


def _flush():
    if sys.stdout is not None:
        sys.stdout.flush()

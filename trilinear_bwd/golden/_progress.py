"""A one-line progress bar for long generations and comparisons."""

import sys
import time


class Progress:
    """A one-line progress bar on ``stream`` (stderr), redrawn at most every half second."""

    def __init__(self, what, total, stream):
        self.what, self.total, self.stream = what, total, stream
        self.last = 0.0

    def __call__(self, done):
        if self.stream is None:
            return
        now = time.monotonic()
        if done < self.total and now - self.last < 0.5:
            return
        self.last = now
        width = 30
        filled = width * done // max(self.total, 1)
        self.stream.write(f"\r{self.what} [{'#' * filled}{'.' * (width - filled)}] "
                          f"{done}/{self.total}")
        if done >= self.total:
            self.stream.write("\n")
        self.stream.flush()


def progress(what, total, wanted):
    """The bar ``wanted`` asks for: True (stderr), a stream, False, or None (stderr on a terminal from 200)."""
    stream = None
    if wanted is True or (wanted is None and total >= 200 and sys.stderr.isatty()):
        stream = sys.stderr
    elif wanted not in (None, False, True):
        stream = wanted
    return Progress(what, total, stream)

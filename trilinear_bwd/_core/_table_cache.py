"""The cache of axis terms and tables: least recently used out, bounded by bytes, fork-safe."""

import collections
import threading

from . import _fork

# Bytes of tables and terms the cache keeps (least recently used out): a
# whole axis of 2**20 points and its padded table take about 100 MiB in
# float64, so that one long axis fits and small ones (tens of KiB each)
# stay shared by every call that uses them.
CACHE_BYTES = 128 * 2**20


class _TableCache:
    """Least recently used entries, bounded by their bytes; safe across threads and forks."""

    def __init__(self, limit):
        self.limit = limit
        self._entries = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                return None
            self._entries.move_to_end(key)
            return hit[0]

    def put(self, key, value, nbytes):
        if nbytes > self.limit:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (value, nbytes)
            self._bytes += nbytes
            while self._bytes > self.limit:
                _, (_, size) = self._entries.popitem(last=False)
                self._bytes -= size

    def clear(self):
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    @property
    def nbytes(self):
        """Bytes held now."""
        return self._bytes

    def _after_fork_in_child(self):
        # A fork while another thread held the lock leaves it held forever
        # in the child; the entries themselves are immutable and stay valid.
        self._lock = threading.Lock()


_cache = _TableCache(CACHE_BYTES)
_fork.at_child(_cache._after_fork_in_child)


def clear_cache():
    """Forget every cached table and axis (tests that count table building call it)."""
    _cache.clear()

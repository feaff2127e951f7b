"""The pool of already-faulted memory that large fresh results come from.

NumPy results of 1 MiB or more that the library allocates (the one call
without ``out``, ``trilinear_bwd.dask``'s blocks on the local schedulers)
come from a bounded least-recently-used pool of blocks that earlier results
gave back when they and every view of them died, so that repeated calls do
not pay the operating system's first touch of fresh pages (``docs/api.md``,
"The memory pool").  Torch results are ``torch.empty``'s own and never
pooled.

Examples
--------
>>> import trilinear_bwd as tb
>>> previous = tb.pool.set_limit(256 * 2**20)     # keep at most 256 MiB
>>> sorted(tb.pool.stats())
['blocks', 'held', 'hits', 'limit', 'misses']
>>> tb.pool.set_limit(previous) == 256 * 2**20
True
"""

from ._core._pool import MIN_BYTES, POOL_BYTES, clear, held, limit, set_limit, stats

__all__ = ["MIN_BYTES", "POOL_BYTES", "clear", "held", "limit", "set_limit", "stats"]

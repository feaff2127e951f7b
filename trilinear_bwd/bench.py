"""Benchmark: this library against PyTorch and against the memory-bandwidth limit.

``python -m trilinear_bwd.bench`` (or ``python benchmarks/bench.py``) runs the
harness of ``trilinear_bwd/_bench/``, which nothing else in the library
imports (``tests/test_layers.py``): the calls users make beside PyTorch's,
then the kernel into preallocated outputs against PyTorch and the bandwidth
limit (``python -m trilinear_bwd.bench --help`` lists the options).  This
module is only the entry point, with the harness's public names.

Timing is not a test: the numbers depend on the machine and on what else runs
on it.  Compare ratios measured side by side in one run.
"""

import sys

from ._bench._cli import main
from ._bench._kernel import CASES, copy_bandwidth, measure, run_benchmark
from ._bench._report import format_table, plot

__all__ = ["CASES", "copy_bandwidth", "format_table", "main", "measure", "plot", "run_benchmark"]

if __name__ == "__main__":
    sys.exit(main())

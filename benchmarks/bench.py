"""Benchmark of trilinear_bwd against PyTorch and the memory-bandwidth limit.

The harness ships with the package (``trilinear_bwd/_bench/``, entered as
``python -m trilinear_bwd.bench``) so that it runs from a fresh install; this
script only calls the same entry point, for people working in the repository.

    python benchmarks/bench.py --json bench.json --plot bench.png
"""

import sys

from trilinear_bwd.bench import main

if __name__ == "__main__":
    sys.exit(main())

"""The benchmark harness (``python -m trilinear_bwd.bench``), out of the library's import path.

``_kernel`` times the kernel into preallocated outputs against PyTorch and
the memory-bandwidth limit, ``_report`` renders its table and chart;
``_calls`` (the calls users make), ``_sweep`` (the ``enable()`` sweep) and
``_compiled`` (layers under ``torch.compile``) time the calls beside
PyTorch's, in rounds ``_timing`` interleaves; ``_cli`` is the command line.
Only ``trilinear_bwd/bench.py`` imports it (``tests/test_layers.py``).
"""

"""The core: one operator description, one check, one plan, one runner.

Everything between a front end and a kernel lives here, in the order a call
meets it: ``_arguments`` and ``_coerce`` (the call's spelling), ``_arrays``
(the arrays, viewed in place), ``_operator`` (the operators and the one
``check``, which returns a ``Call``), the axis tables (``_coefficients`` in
float64, ``_pytorch_rounding`` for PyTorch's zero weights, ``_axis_terms``
and its windows, ``_axis_table`` the kernel's padded table, ``_table_cache``),
``_plan`` (the typed plan the kernel gets), ``_runner`` (the one seam to the
kernel), with ``_threads`` (the thread policy), ``_pool`` and ``_memory``
(results and remembered addresses), ``_fork``, ``_environ``, ``_status`` and
``_dispatch`` (which kernel variant runs).  Nothing here imports PyTorch,
Dask or a front end; see docs/design.md, "Modules".
"""

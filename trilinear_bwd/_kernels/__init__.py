"""The kernels: C headers, Cython includes and the per-ISA variants.

``baseline``, ``avx2`` and ``avx512`` are one driver (``_driver.pxi``)
compiled per instruction set; ``_kernel_plan`` holds the plan as C structs,
``_native`` what only compiled code can answer (OpenMP, the processor's
features, the shared constants).  The kernels take raw pointers and 64-bit
sizes, never raise and never allocate; nothing here imports the core.  See
docs/design.md, "Modules".
"""

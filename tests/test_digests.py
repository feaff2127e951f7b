"""The same bits everywhere: every kernel variant reproduces tests/digests.json.

The table was computed on x86-64 (see tests/_digests.py); the same test runs
on the aarch64 build under QEMU (ci/cross_aarch64.sh).  A mismatch means
this build rounds differently from the one the table came from: a fused
multiply-add, a changed summation order, a different half-type rounding.
"""

import platform

import pytest
from _digests import DTYPES, LAYOUTS, OPS, SHAPES, cases, compute, grad_out_values, load_table

from trilinear_bwd._core import _dispatch

TABLE = load_table()["digests"]
VARIANTS = _dispatch.available_variants()


def test_table_covers_every_case():
    ids = [c[0] for c in cases()]
    assert sorted(TABLE) == sorted(ids)
    assert len(ids) == len(OPS) * len(DTYPES) * len(LAYOUTS) * 2 * len(SHAPES)
    assert all(len(d) == 64 and int(d, 16) >= 0 for d in TABLE.values())


def test_inputs_are_exact_and_fixed():
    """The generator's own digest: integer arithmetic only, so fixed everywhere."""
    import hashlib

    got = {d: hashlib.sha256(grad_out_values((2, 3, 4, 5, 6), d, seed=7).tobytes()).hexdigest()[:16]
           for d in DTYPES}
    assert got == {
        "float32": "d983145c10c674da",
        "float64": "dc2b18e6c850c89f",
        "float16": "594ce8c8f8ce5469",
        "bfloat16": "08c10c1b79f7cb89",
    }


@pytest.mark.parametrize("variant", VARIANTS + ["api"])
def test_variant_reproduces_the_table(variant):
    got = compute(None if variant == "api" else variant)
    wrong = sorted(k for k in TABLE if got[k] != TABLE[k])
    assert not wrong, (
        f"{len(wrong)} of {len(TABLE)} cases differ from the table on "
        f"{platform.machine()} (variant {variant}): {wrong[:8]}")


def test_expected_variants_are_built():
    """The digest test covers what this processor runs: AVX2 wherever it can."""
    from trilinear_bwd._kernels import _native

    assert "baseline" in VARIANTS
    if _native.cpu_has_avx2_f16c():
        assert "avx2" in VARIANTS

"""Golden data and Ascend's precision standards: the NPU developer's workbench.

:func:`generate` writes cases, their inputs and goldens (float64, and the
same rounded to each case's dtype): the commercial standard's generation
rules per level, an ATK case file, or sizes given by the caller;
:func:`read_case` and :func:`write_result` (and :func:`read_result`) are
the NPU side's two ends of the loop; :func:`compare` judges results from an NPU (or anything else)
against the goldens by one of the three published standards, and
:func:`metrics` computes the figures of one result.
``python -m trilinear_bwd golden generate|compare`` is the same from the
shell.  ``docs/golden.md`` walks through it.

Examples
--------
>>> import tempfile, trilinear_bwd.golden as golden
>>> d, a = tempfile.mkdtemp(), tempfile.mkdtemp()
>>> manifest = golden.generate(d, cases=4, special=False, actual=a)
>>> golden.compare(d, a, standard="experimental").passed
True
"""

from . import _cases, _files, _run, _standards
from ._cases import atk_cases, given_cases, level_cases
from ._compare import TORCH_THIRD_PARTY, compare
from ._errors import GoldenError, GoldenFileError
from ._generate import generate
from ._manifest import read_manifest
from ._npu import NpuCase, read_case, read_result, write_result
from ._report import Report, plot
from ._standards import STANDARDS, bounds, metrics, ratios, verdict, worst

__all__ = ["GoldenError", "GoldenFileError", "NpuCase", "Report", "atk_cases", "bounds",
           "compare", "generate", "given_cases", "level_cases", "metrics", "plot", "ratios",
           "read_case", "read_manifest", "read_result", "verdict", "worst", "write_result"]

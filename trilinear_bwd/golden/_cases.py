"""Cases: the commercial standard's generation rules per level, and ATK case files.

Three sources of cases: the level rules (:func:`level_cases`), an ATK case
file (:func:`atk_cases`) and sizes given by the caller (:func:`given_cases`,
``golden generate --input-size ... --output-size ...``).

A case is a plain dict (the manifest's entry without file names): ``op``,
``dtype``, ``format``, ``input_shape`` (the logical NCDHW shape of the
operator's input: gradOut for the backward, self for the forward),
``result_shape``, ``align_corners``, ``scales`` (as the CANN call takes
them) and ``rule`` (how the input's values are drawn, with the case's own
seed).  :func:`values` draws the input of a case from its rule alone, so a
manifest entry is enough to draw it again.
"""

import itertools
import math
import sys

import numpy as np

from .._core._arrays import numpy_dtype
from ._dtypes import DTYPES
from ._errors import GoldenError, GoldenFileError, shown
from ._paths import load_json
from ._standards import LEVELS

OPS = ("backward", "forward")
FORMATS = ("NCDHW", "NDHWC")
# Commercial standard, table of section 2: cases per level.
LEVEL_CASES = {"L0": 5000, "L1": 10000, "L2": 30000}
# The scales' equivalence classes under CANN's rule: none given (the size
# ratio), all three given (used), one not given (all three ignored).
SCALE_CLASSES = ("none", "given", "partial")
# Distributions of the values, in slots of ten cases (section 2: L0 50%
# uniform [-5, 5], 50% normal; L1/L2 10% uniform [-0.001, 0.001], 30% uniform
# [-5, 5], 40% normal, 20% outliers).
_SLOTS = {"L0": ("uniform",) * 5 + ("normal",) * 5,
          "L1": ("small",) + ("uniform",) * 3 + ("normal",) * 4 + ("outliers",) * 2}
_SLOTS["L2"] = _SLOTS["L1"]
# L0 generalises sizes by steps of 15 and 16 (section 2); L1/L2 draw them at random.
_L0_SIZES = (1, 2, 15, 16, 17)
_RANDOM_SIZES = tuple(range(1, 25))
_CHANNELS = (1, 2, 3, 4, 16)
# Per case, at most this many elements in either array: keeps a level's run
# to minutes on a laptop while the set's result elements stay above the
# standard's 1,000,000 (section 2, note 3).
MAX_ELEMENTS = 1 << 14
SPECIAL_VALUES = ("nan", "inf", "-inf", "-inf,inf")
# The laws a rule's "distribution" names, with the parameters each needs.
DISTRIBUTIONS = {"uniform": ("low", "high"), "normal": ("mu", "sigma"), "constant": ("special",)}
# The values of given cases (--values): a few of the level rules' laws, with
# fixed parameters (``normal`` is ops-cv's randn), and the special values.
VALUE_LAWS = {
    "uniform": {"distribution": "uniform", "low": -5.0, "high": 5.0},
    "normal": {"distribution": "normal", "mu": 0.0, "sigma": 1.0},
    "small": {"distribution": "uniform", "low": -0.001, "high": 0.001},
    "outliers": {"distribution": "uniform", "low": -5.0, "high": 5.0, "outliers": True},
}
VALUE_LAWS.update({v: {"distribution": "constant", "special": v} for v in SPECIAL_VALUES})
_SPECIAL_SHAPES = ((1, 1, 2, 2, 2), (1, 2, 3, 4, 5), (2, 1, 4, 1, 3), (1, 3, 5, 5, 1))

_ATK_DTYPES = {"fp16": "float16", "float16": "float16", "bf16": "bfloat16",
               "bfloat16": "bfloat16", "fp32": "float32", "float32": "float32",
               "float": "float32"}


def _sizes(op, n, c, small, large):
    """``(input_shape, result_shape)`` of a case with the two spatial sizes given."""
    small, large = (n, c) + tuple(small), (n, c) + tuple(large)
    # The backward reads the larger gradOut; the forward reads the smaller self.
    return (large, small) if op == "backward" else (small, large)


def _draw_rule(kind, rng):
    if kind == "uniform":
        return {"distribution": "uniform", "low": -5.0, "high": 5.0}
    if kind == "small":
        return {"distribution": "uniform", "low": -0.001, "high": 0.001}
    rule = {"distribution": "normal", "mu": float(rng.uniform(-100, 100)),
            "sigma": float(rng.uniform(1, 25))}
    if kind == "outliers":
        base = rule if rng.random() < 0.5 else _draw_rule("uniform", rng)
        rule = dict(base, outliers=True)
    return rule


def _scales(cls, small, large, rng):
    # The forward's multiplier, out / in, for both operators.
    ratios = [float(o) / float(i) for i, o in zip(small, large)]
    if cls == "none":
        return [0.0, 0.0, 0.0]
    if cls == "given":
        return ratios
    ratios[int(rng.integers(3))] = 0.0
    return ratios


def level_cases(op, level, dtypes=DTYPES, count=None, seed=0, special=True):
    """The cases of ``level``'s generation rules, in a fixed order for ``seed``.

    Parameters
    ----------
    op : {"backward", "forward"}
    level : {"L0", "L1", "L2"}
    dtypes : sequence of str
        The dtypes covered (default: the three of the standards).
    count : int, optional
        At most this many regular cases (default: the level's count).
    seed : int
    special : bool
        Add the special cases (empty, all sizes 1, NaN/Inf inputs), which the
        standard does not count in the level's scale.

    Returns
    -------
    list of dict
    """
    if op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)}, got {op!r}")
    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    for name in dtypes:
        if name not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    total = LEVEL_CASES[level] if count is None else int(count)
    rng = np.random.default_rng(seed)
    # dtype x format x alignCorners x scale class, orthogonal: case k takes
    # combination k mod their count, its distribution slot from k div it.
    combos = list(itertools.product(dtypes, FORMATS, (False, True), SCALE_CLASSES))
    cases = []
    for k in range(total):
        dtype, fmt, align, cls = combos[k % len(combos)]
        kind = _SLOTS[level][(k // len(combos)) % 10]
        sizes = _L0_SIZES if level == "L0" else _RANDOM_SIZES
        while True:
            n, c = 1 + int(rng.integers(2)), _CHANNELS[int(rng.integers(len(_CHANNELS)))]
            picks = rng.integers(len(sizes), size=6).tolist()
            small = [sizes[p] for p in picks[:3]]
            large = [sizes[p] for p in picks[3:]]
            # An upsample (or same size) on each axis most of the time, as in training.
            if rng.random() < 0.8:
                small, large = [min(a, b) for a, b in zip(small, large)], \
                    [max(a, b) for a, b in zip(small, large)]
            if n * c * max(math.prod(small), math.prod(large)) <= MAX_ELEMENTS:
                break
        input_shape, result_shape = _sizes(op, n, c, small, large)
        scales = _scales(cls, small, large, rng)
        cases.append(_case(op, dtype, fmt, input_shape, result_shape, align, scales,
                           dict(_draw_rule(kind, rng), seed=int(rng.integers(2 ** 63)))))
    if special:
        cases.extend(special_cases(op, dtypes, rng))
    return cases


def _case(op, dtype, fmt, input_shape, result_shape, align, scales, rule):
    return {"op": op, "dtype": dtype, "format": fmt, "input_shape": list(input_shape),
            "result_shape": list(result_shape), "align_corners": bool(align),
            "scales": [float(s) for s in scales], "rule": rule}


def special_cases(op, dtypes, rng):
    """Section 2.1's special cases: empty tensors (N = 0; C = 0 for the backward), every size 1, NaN/Inf inputs."""
    cases = []
    for dtype in dtypes:
        def add(shape_in, shape_out, rule, fmt="NCDHW"):
            rule = dict(rule, seed=int(rng.integers(2 ** 63)))
            cases.append(_case(op, dtype, fmt, *_sizes(op, shape_in[0], shape_in[1],
                                                        shape_in[2:], shape_out[2:]),
                               False, [0.0] * 3, rule))

        uniform = {"distribution": "uniform", "low": -5.0, "high": 5.0, "special": "empty"}
        add((0, 2, 2, 3, 4), (0, 2, 4, 6, 8), uniform)
        # The forward refuses C = 0 (CANN's and PyTorch's rule): N = 0 twice.
        add((2, 0, 2, 3, 4) if op == "backward" else (0, 3, 1, 2, 3),
            (2, 0, 4, 6, 8) if op == "backward" else (0, 3, 2, 4, 6), uniform, "NDHWC")
        add((1, 1, 1, 1, 1), (1, 1, 1, 1, 1), dict(uniform, special="sizes 1"))
        for value, shape in itertools.product(SPECIAL_VALUES, _SPECIAL_SHAPES):
            small = shape[2:]
            large = tuple(2 * s for s in small)
            add(shape, shape[:2] + large, {"distribution": "constant", "special": value})
    return cases


def values(case):
    """Draw a case's input (its dtype, logical NCDHW shape) from its rule."""
    rule = case["rule"]
    shape = tuple(case["input_shape"])
    rng = np.random.default_rng(rule.get("seed", 0))
    dist = rule["distribution"]
    if dist == "uniform":
        x = rng.uniform(rule["low"], rule["high"], shape)
    elif dist == "normal":
        x = rng.normal(rule["mu"], rule["sigma"], shape)
    elif dist == "constant":
        choices = [float(v) for v in rule["special"].split(",")]
        x = rng.choice(np.array(choices), shape) if len(choices) > 1 else np.full(shape, choices[0])
    else:
        raise ValueError(f"unknown distribution {dist!r} in case {case.get('id', '?')}")
    if rule.get("outliers") and x.size:
        # Section 5.1.2: k = max(1, floor(n / 1000)) distinct positions, times 1000.
        k = max(1, x.size // 1000)
        flat = x.reshape(-1)
        flat[rng.choice(x.size, k, replace=False)] *= 1000.0
    return x.astype(numpy_dtype(case["dtype"]))


def atk_cases(path, op="backward", seed=0):
    """The cases of an ATK case file (ops-cv's ``atk_aclnnUpsampleTrilinear3dBackward.json``).

    Each ATK case describes the forward call ``interpolate(input, size=...)``
    (or ``scale_factor=...``) whose backward is tested: ``input``'s shape is
    the backward's gradInput, ``size`` the spatial size of gradOut.  As ATK's
    own executor does for the CANN call, a case given by ``size`` passes
    scales 0 (its ``scales*_double`` entries are not used) and one given by
    ``scale_factor`` passes those scales with ``outputSize = int(in * s)``.
    The values follow ``range_values``: ``{"name": "nd", "mean": [a, b],
    "std": [c, d]}`` a normal law with mu and sigma drawn in those ranges,
    ``[low, high]`` a uniform law, ``["nan"]`` / ``["inf"]`` / ``["-inf"]``
    / ``["-inf", "inf"]`` the special values; ``outlier_values`` set adds
    the outliers.

    Parameters
    ----------
    path : str or os.PathLike
    op : {"backward", "forward"}
    seed : int
        Draws the laws' parameters within the file's ranges and each case's
        own seed.

    Returns
    -------
    list of dict
        One case per ATK case, in the file's order; ``rule`` records the ATK id.

    Raises
    ------
    GoldenFileError
        (a ``ValueError``) The file cannot be read, or cases the parser
        cannot read: every one named by its ATK id and the field.
    """
    if op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)}, got {op!r}")
    try:
        with open(path, encoding="utf-8") as f:
            document = load_json(f)
    except ValueError as exc:
        raise GoldenFileError(f"{path}: not JSON ({exc})") from None
    except OSError as exc:
        raise GoldenFileError(f"{path}: unreadable ({exc.strerror or exc})") from None
    if not isinstance(document, list):
        raise GoldenFileError(f"{path}: an ATK case file is a JSON list of cases")
    rng = np.random.default_rng(seed)
    cases, problems = [], []
    for item in document:
        try:
            cases.append(_atk_case(item, op, path, rng))
        except GoldenFileError as exc:
            problems.extend(exc.problems)
    if problems:
        raise GoldenFileError(problems)
    return cases


def _atk_case(item, op, path, rng):
    ident = item.get("id", "?") if isinstance(item, dict) else "?"
    where = f"{path}: ATK case {ident}"
    try:
        entries = {}
        for entry in item["inputs"]:
            if isinstance(entry, list):
                entries[entry[0]["name"]] = [e["range_values"] for e in entry]
            else:
                entries[entry["name"]] = entry
        tensor = entries["input"]
        dtype = _ATK_DTYPES.get(str(tensor.get("dtype")).lower())
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise GoldenFileError(f"{where}: inputs: no readable 'input' tensor "
                              f"({shown(exc)})") from None
    if dtype is None:
        raise GoldenFileError(f"{where}: input dtype {shown(tensor.get('dtype'))} is not one of "
                              f"{', '.join(sorted(_ATK_DTYPES))}")
    shape = tensor.get("shape")
    if not (isinstance(shape, list) and len(shape) == 5
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in shape)):
        raise GoldenFileError(f"{where}: input shape must be 5 integers >= 0, got {shown(shape)}")
    try:
        align = entries.get("align_corners", {}).get("range_values", False)
        fmt = entries.get("format", {}).get("range_values", "NCDHW")
    except AttributeError as exc:
        raise GoldenFileError(f"{where}: align_corners, format: not readable "
                              f"({shown(exc)})") from None
    if not isinstance(align, bool):
        raise GoldenFileError(f"{where}: align_corners must be true or false, got {shown(align)}")
    if fmt not in FORMATS:
        raise GoldenFileError(f"{where}: format {shown(fmt)} is not one of {', '.join(FORMATS)}")
    if "size" not in entries and "scale_factor" not in entries:
        raise GoldenFileError(f"{where}: neither 'size' nor 'scale_factor' given")
    try:
        if "size" in entries:
            size, scales = [_atk_int(v) for v in entries["size"]], [0.0, 0.0, 0.0]
        else:
            factor = entries["scale_factor"]
            factor = factor if isinstance(factor, list) else [factor["range_values"]] * 3
            scales = [_atk_real(v) for v in factor]
            size = [int(n * s) for n, s in zip(shape[2:], scales)]
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        # OverflowError: a finite scale times a size beyond float64's range.
        raise GoldenFileError(f"{where}: size, scale_factor: not 3 numbers ({exc})") from None
    if len(size) != 3:
        raise GoldenFileError(f"{where}: size must have 3 elements, got {shown(size)}")
    rule = _atk_rule(tensor.get("range_values"), where, rng)
    if tensor.get("outlier_values"):
        rule["outliers"] = True
    rule.update(atk_id=ident, seed=int(rng.integers(2 ** 63)))
    input_shape, result_shape = ((shape[:2] + size, shape) if op == "backward"
                                 else (shape, shape[:2] + size))
    return _case(op, dtype, fmt, input_shape, result_shape, align, scales, rule)


def is_finite(v):
    """True for a number (not a bool) that is a finite float64; never raises.

    An integer beyond float64's range is not: ``math.isfinite`` raises
    ``OverflowError`` on one, and JSON (a manifest, an ATK file) puts no
    bound on its numbers.
    """
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        return False
    if isinstance(v, (int, np.integer)):
        return -sys.float_info.max <= v <= sys.float_info.max
    return math.isfinite(v)


def _atk_int(v):
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{shown(v)} is not an integer")
    return v


def _atk_real(v):
    if not is_finite(v):
        raise ValueError(f"{shown(v)} is not a finite number")
    return float(v)


def _atk_rule(spec, where, rng):
    try:
        if isinstance(spec, dict) and spec.get("name") == "nd":
            (m0, m1), (s0, s1) = spec["mean"], spec["std"]
            return {"distribution": "normal", "mu": float(rng.uniform(m0, m1)),
                    "sigma": float(rng.uniform(s0, s1))}
    except (KeyError, TypeError, ValueError, OverflowError):
        pass
    if isinstance(spec, list) and spec and all(isinstance(v, str) for v in spec):
        text = ",".join(v.strip().lower() for v in spec)
        if all(v in ("nan", "inf", "-inf") for v in text.split(",")):
            return {"distribution": "constant", "special": text}
    if isinstance(spec, list) and len(spec) == 2 and all(is_finite(v) for v in spec):
        return {"distribution": "uniform", "low": float(spec[0]), "high": float(spec[1])}
    raise GoldenFileError(f"{where}: input range_values {shown(spec)} is not a law this parser "
                          f"reads")


def sizes(value, count, name, minimum):
    """``value`` as a tuple of ``count`` integers, each >= the minimum; a :class:`GoldenError` names ``name``.

    Parameters
    ----------
    value : sequence of int
    count : int
    name : str or None
        The parameter as the caller wrote it (``input_size``), which starts
        the message (None: the caller names it).
    minimum : sequence of int
        Per element.
    """
    name = f"{name}: " if name else ""
    axes = "NCDHW"[5 - count:]
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != count:
        raise GoldenError(f"{name}must be {count} integers ({', '.join(axes)}), got {value!r}")
    out = []
    for k, (v, low) in enumerate(zip(value, minimum)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise GoldenError(f"{name}{axes[k]} must be an integer, got {v!r}")
        if v < low:
            raise GoldenError(f"{name}{axes[k]} must be >= {low}, got {v}")
        out.append(int(v))
    return tuple(out)


def real_scales(value, name):
    """``value`` as 3 finite floats (``scalesD, scalesH, scalesW``); a :class:`GoldenError` names ``name`` (or None)."""
    name = f"{name}: " if name else ""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 3:
        raise GoldenError(f"{name}must be 3 numbers (scalesD, scalesH, scalesW), got {value!r}")
    for k, v in enumerate(value):
        if not is_finite(v):
            raise GoldenError(f"{name}scales{'DHW'[k]} must be a finite number, got {v!r}")
    return tuple(float(v) for v in value)


def given_cases(op, input_size, output_size, dtypes=DTYPES, formats=("NCDHW",),
                align_corners=False, scales=(0.0, 0.0, 0.0), values="uniform", seed=0):
    """Cases of sizes given by the caller: one per dtype and format (ops-cv's ``gen_data.py``).

    Parameters
    ----------
    op : {"backward", "forward"}
    input_size : sequence of 5 int
        ``(N, C, D, H, W)`` of the volume before upsampling: the backward's
        ``inputSize`` (gradInput's shape), the forward's self.
    output_size : sequence of 3 int
        ``(D, H, W)`` after upsampling: both CANN calls' ``outputSize``.
    dtypes : sequence of str
    formats : sequence of {"NCDHW", "NDHWC"}
    align_corners : bool
    scales : sequence of 3 float
        ``scalesD, scalesH, scalesW`` as the CANN call takes them (<= 0: not
        given; CANN uses them only when all three are > 0).
    values : str
        The input's law: a key of ``golden._cases.VALUE_LAWS`` (``uniform`` [-5, 5],
        ``normal`` (0, 1), ``small`` [-0.001, 0.001], ``outliers``, or a
        special value ``nan``, ``inf``, ``-inf``, ``-inf,inf``).
    seed : int

    Returns
    -------
    list of dict

    Raises
    ------
    GoldenError
        (a ``ValueError``) An argument that breaks its rule, named.
    """
    if op not in OPS:
        raise GoldenError(f"op: must be one of {', '.join(OPS)}, got {op!r}")
    input_size = sizes(input_size, 5, "input_size", (0, 0, 1, 1, 1))
    output_size = sizes(output_size, 3, "output_size", (1, 1, 1))
    scales = real_scales(scales, "scales")
    for name, chosen, allowed in (("dtypes", dtypes, DTYPES), ("formats", formats, FORMATS)):
        if isinstance(chosen, str) or not chosen or any(v not in allowed for v in chosen):
            raise GoldenError(f"{name}: must be a non-empty list of {', '.join(allowed)}, "
                              f"got {chosen!r}")
    if not isinstance(align_corners, bool):
        raise GoldenError(f"align_corners: must be True or False, got {align_corners!r}")
    if values not in VALUE_LAWS:
        raise GoldenError(f"values: must be one of {', '.join(VALUE_LAWS)}, got {values!r}")
    rng = np.random.default_rng(seed)
    n, c = input_size[:2]
    shapes = _sizes(op, n, c, input_size[2:], output_size)
    return [_case(op, dtype, fmt, *shapes, align_corners, scales,
                  dict(VALUE_LAWS[values], seed=int(rng.integers(2 ** 63))))
            for dtype in dtypes for fmt in formats]

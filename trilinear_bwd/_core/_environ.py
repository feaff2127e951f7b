"""The environment variables the package reads, and the one place that parses them.

A value that cannot be used never breaks ``import trilinear_bwd`` or a
call: it gives one ``RuntimeWarning`` that names the variable, the value and
the default used instead (``docs/reliability.md``, "Environment
variables").  ``VARIABLES`` lists every variable with the forms it accepts;
``tests/test_environment.py`` scans the package's source for variable names
and fails if one is read without being listed here.
"""

import os
import re
import warnings

POOL_BYTES = "TRILINEAR_BWD_POOL_BYTES"
KERNEL = "TRILINEAR_BWD_KERNEL"

# Every variable the package itself parses -> the forms it accepts.
VARIABLES = {
    POOL_BYTES: "a byte count: digits 0-9, optionally followed by K, M, G or T (or KiB, MiB, "
                "GiB, TiB; powers of 1024, any case) and B, e.g. 536870912, 512M, 1GiB; at most "
                "2**63 - 1; 0 turns the pool off",
    KERNEL: "one of the kernel variants built and runnable here (avx512, avx2, baseline; "
            "any case); empty or unset picks the fastest",
}

# The largest byte count a variable may give (an int64, what C and NumPy sizes hold).
MAX_BYTES = 2**63 - 1
_UNITS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4}
_BYTES = re.compile(r"\s*([0-9]+)\s*([KMGT]?)(I?B)?\s*", re.IGNORECASE)


def parse_bytes(text):
    """Return the byte count ``text`` spells (see ``VARIABLES``), or None if it spells none.

    Parameters
    ----------
    text : str

    Returns
    -------
    int or None
        0 to ``MAX_BYTES``; None for anything else (signs, decimals,
        exponents, junk, more than ``MAX_BYTES``).
    """
    match = _BYTES.fullmatch(text)
    if match is None:
        return None
    digits, unit, suffix = match.groups()
    unit = unit.upper()
    if suffix is not None and suffix.upper() == "IB" and not unit:
        return None                      # "12iB" is not a unit
    if len(digits.lstrip("0")) > len(str(MAX_BYTES)):
        return None                      # and no 5,000-digit int() to refuse it
    nbytes = int(digits) * 1024 ** _UNITS[unit]
    return nbytes if nbytes <= MAX_BYTES else None


def _read(name, default, parse, shown, why):
    """``parse($name)``: ``default`` if the variable is unset, or unusable (``parse`` gives None).

    The one place a variable is read: an unusable value gives one
    ``RuntimeWarning`` naming the variable, the value, ``why`` and the
    default used instead (``shown``), and never an error.
    """
    value = os.environ.get(name)
    if value is None:
        return default
    parsed = parse(value)
    if parsed is None:
        warnings.warn(
            f"trilinear_bwd: ignoring {name}={value!r}: {why}; using the default, {shown}. "
            f"Accepted: {VARIABLES[name]}.",
            # (_read, read_bytes or read_choice, then the code that asked: it is named.)
            RuntimeWarning, stacklevel=3,
        )
        return default
    return parsed


def read_bytes(name, default):
    """Read a byte count from ``$name``; ``default`` if it is unset or unusable (with a warning).

    Parameters
    ----------
    name : str
        A variable of ``VARIABLES``.
    default : int

    Returns
    -------
    int
    """
    return _read(name, default, parse_bytes, f"{default} bytes",
                 "not a byte count (negative, fractional, exponent forms and more than "
                 f"{MAX_BYTES} are refused)")


def read_choice(name, choices, default):
    """Read one of ``choices`` (any case, spaces ignored) from ``$name``.

    Parameters
    ----------
    name : str
        A variable of ``VARIABLES``.
    choices : sequence of str
        The values usable here, lower case.
    default : str
        Returned when the variable is unset, empty or not one of ``choices``
        (with a warning in the last case).

    Returns
    -------
    str
    """
    def choose(value):
        wanted = value.strip().lower()
        if not wanted:
            return default                 # empty: the default, without a warning
        return wanted if wanted in choices else None

    return _read(name, default, choose, repr(default),
                 f"not available here (choose one of {list(choices)})")

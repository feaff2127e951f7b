"""Scalar arguments turned into Python values, or a 161002 that names them.

Every front end's integers, reals and sequences pass through here, so that a
bool where an integer belongs, a NaN scale or a set of sizes is refused the
same way everywhere, with the caller's name for the argument and the value
shown (``describe``), never with a stray ``TypeError``.
"""

import math
import numbers
import operator
from collections.abc import Sequence

import numpy as np

from ._status import InvalidArgumentError


def invalid(message):
    """Return a 161002 error with ``message``."""
    return InvalidArgumentError(message)


def describe(value):
    """``repr(value)`` for a message, or its type name if ``repr`` itself fails."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__ must not escape either
        return f"a {type(value).__name__}"
    return text if len(text) <= 80 else text[:77] + "..."


def as_int(value, name):
    """Return ``value`` as a Python int, or raise 161002.

    Booleans and non-integral numbers (3.0 included) are refused; so is an
    ``Integral`` whose conversion raises: every failure is a 161002, never a
    stray ``TypeError`` or ``ValueError``.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise invalid(f"{name} must be an integer, got {describe(value)}")
    try:
        return operator.index(value)
    except Exception:  # noqa: BLE001 - whatever the object's __index__ raises
        try:
            return int(value)
        except Exception:  # noqa: BLE001
            raise invalid(
                f"{name} must be an integer, got a {type(value).__name__} that cannot be "
                "converted to int"
            ) from None


def as_real(value, name):
    """Return ``value`` as a finite Python float, or raise 161002 (bools refused)."""
    if type(value) is float and math.isfinite(value):
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise invalid(f"{name} must be a real number, got {describe(value)}")
    # float() of a huge integer (10**400) raises OverflowError; a foreign
    # Real's __float__ may raise anything.
    try:
        value = float(value)
    except Exception:  # noqa: BLE001
        raise invalid(f"{name} must be a finite real number, got {describe(value)}") from None
    if not math.isfinite(value):
        raise invalid(f"{name} must be finite, got {value}")
    return value


def as_scale(value, name):
    """A scale as the tables use it: None ("not given") is 0.0, anything else :func:`as_real`."""
    return 0.0 if value is None else as_real(value, name)


def as_sequence(value, name, what):
    """Return the items of an ordered sequence as a list, or raise 161002.

    Sets, dicts, strings, iterators and other unordered or non-sequence
    containers are refused (PyTorch refuses them too); NumPy arrays of one
    axis are accepted.
    """
    if type(value) in (tuple, list):
        return list(value)
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise invalid(f"{name} must be a sequence of {what}, got a {value.ndim}-D array")
        return value.tolist()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise invalid(
            f"{name} must be a sequence of {what} (a list or tuple), got {type(value).__name__}"
        )
    try:
        return list(value)
    except Exception:  # noqa: BLE001 - whatever the object's iteration raises
        raise invalid(f"{name} must be a sequence of {what}, got {type(value).__name__}") from None


def as_scales(value, name="scales"):
    """The one calls' ``scales``: a sequence of exactly three (None is three 0.0)."""
    scales = as_sequence((0.0, 0.0, 0.0) if value is None else value, name, "3 floats")
    if len(scales) != 3:
        raise invalid(f"{name} must have exactly 3 elements (D, H, W), got {len(scales)}")
    return scales


def element_name(name, k, first=0, axes="NCDHW"):
    """``inputSize[0] (D)``: element ``k`` of ``name`` as the caller numbered it, and its axis.

    ``first`` is how many leading elements the caller did not pass (the one
    call's ``input_size=(D, H, W)`` is ``(N, C, D, H, W)`` with ``first=2``).
    """
    index = k - first
    return f"{name}[{index}] ({axes[k]})" if index >= 0 else f"{name} {axes[k]}"


def int_tuple(value, name, length, first=0):
    """The integers of a size argument; element ``k`` is named ``name[k - first] (axis)``."""
    items = as_sequence(value, name, f"{length - first} integers" if first else
                        f"{length} integers")
    if len(items) != length:
        raise invalid(f"{name} must have exactly {length} elements, got {len(items)}")
    if all(type(item) is int for item in items):   # the common spelling, checked at once
        return tuple(items)
    axes = "NCDHW"[5 - length:]
    return tuple(as_int(item, element_name(name, k, first, axes))
                 for k, item in enumerate(items))

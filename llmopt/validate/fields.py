"""Reading the fields of a solution file without trusting their types.

A solution file is user input to the validator: any field may be missing, of the wrong type, or
not finite. These readers say which, so that every malformed field becomes a reason, never a
traceback.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard


def is_number(value: Any) -> TypeGuard[float]:
    """A finite int or float (not a bool)."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def number_or_none(sol: dict[str, Any], key: str, reasons: list[str]) -> float | None:
    """The field as a float, or None when absent/null; a reason when it is something else."""
    value = sol.get(key)
    if value is None:
        return None
    if not is_number(value):
        reasons.append(f"{key} {value!r} is not a finite number")
        return None
    return float(value)


def string_or_none(sol: dict[str, Any], key: str, reasons: list[str]) -> str | None:
    value = sol.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        reasons.append(f"{key} {value!r} is not a string")
        return None
    return value


def mapping_or_none(sol: dict[str, Any], key: str, reasons: list[str]) -> dict[str, Any] | None:
    value = sol.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        reasons.append(f"{key} must be a mapping, found {type(value).__name__}")
        return None
    return value


def numbers_by_name(sol: dict[str, Any], key: str, reasons: list[str]) -> dict[str, float]:
    """A mapping of names to finite numbers (e.g. ``heuristics``); bad entries are reasons."""
    value = mapping_or_none(sol, key, reasons)
    if value is None:
        return {}
    out = {}
    for name, v in value.items():
        if not is_number(v):
            reasons.append(f"{key}.{name} {v!r} is not a finite number")
        else:
            out[str(name)] = float(v)
    return out

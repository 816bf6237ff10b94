"""The checks of the numbers the limiter's API takes: one rule each, one error text each, naming the argument.

A number is an ``int`` or a ``float`` (not a ``bool``, not a string) and finite; ``finite``, ``at_least_zero``
and ``positive`` return it or raise ``ValueError`` (or the ``error`` class given, e.g. ``PolicyError``) that says
which argument, which rule and what it got:

    capacity must be a finite number > 0, got nan

``rule`` adds why, where the rule needs one: ``finite("bytes_per_s", x, rule=" (> 0 limits, <= 0 turns it off)")``.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["is_number", "finite", "at_least_zero", "positive"]


def is_number(value: Any) -> bool:
    """An int or float, not a bool, and finite."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _fail(name: str, rule: str, value: Any, error: type[ValueError], kind: str = "a finite number") -> ValueError:
    return error(f"{name} must be {kind}{rule}, got {value!r}")


def _kind(unit: str) -> str:
    return f"a finite number of {unit}" if unit else "a finite number"


def finite(name: str, value: Any, *, unit: str = "", rule: str = "", error: type[ValueError] = ValueError) -> float:
    """``unit``: what the number counts ("seconds", "tokens"), said in the error."""
    if not is_number(value):
        raise _fail(name, rule, value, error, _kind(unit))
    return value


def at_least_zero(name: str, value: Any, *, unit: str = "", rule: str = "", error: type[ValueError] = ValueError,
                  infinite_ok: bool = False) -> float:
    """``infinite_ok``: ``inf`` passes too (an amount that means "as much as there is")."""
    ok = is_number(value) or (infinite_ok and value == math.inf and not isinstance(value, bool))
    if not ok or value < 0:
        raise _fail(name, " >= 0" + rule, value, error, "a number" if infinite_ok else _kind(unit))
    return value


def positive(name: str, value: Any, *, unit: str = "", rule: str = "", error: type[ValueError] = ValueError) -> float:
    if not is_number(value) or value <= 0:
        raise _fail(name, " > 0" + rule, value, error, _kind(unit))
    return value

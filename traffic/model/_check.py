"""Small argument checks shared by the traffic modules.

Each raises ``TrafficError`` with a one-line message that names the argument,
the bad value and what would be accepted, so callers need not repeat it.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from traffic.model.errors import TrafficError


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def int_at_least(name: str, value: Any, minimum: int) -> int:
    """Return ``value`` if it is an int >= ``minimum``, else raise."""
    if not _is_int(value) or value < minimum:
        raise TrafficError(f"{name} {value!r} is not allowed; expected an integer >= {minimum}", key=name)
    return value


def real_positive(name: str, value: Any) -> float:
    """Return ``value`` as float if it is finite and > 0, else raise."""
    if not _is_real(value) or value <= 0:
        raise TrafficError(f"{name} {value!r} is not allowed; expected a finite number > 0", key=name)
    return float(value)


def real_at_least(name: str, value: Any, minimum: float) -> float:
    """Return ``value`` as float if it is finite and >= ``minimum``, else raise."""
    if not _is_real(value) or value < minimum:
        raise TrafficError(f"{name} {value!r} is not allowed; expected a finite number >= {minimum}", key=name)
    return float(value)


def one_of(name: str, value: Any, allowed: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``allowed``, else raise listing them."""
    options = list(allowed)
    if value not in options:
        raise TrafficError(f"{name} {value!r} is not known; expected one of {', '.join(options)}", key=name)
    return value

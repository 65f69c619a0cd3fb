"""Text with units -> numbers: link rates, byte sizes, durations.

The bottom layer (imports only ``common.errors``): the CLI verbs and the
experiment schema parse the same strings with the same rules, so a value means
the same thing on the command line and in an experiment file.
"""

from __future__ import annotations

import re

from common.errors import TestbedError

_RATE_UNITS = {"": 1e6, "k": 1e3, "kbit": 1e3, "m": 1e6, "mbit": 1e6, "g": 1e9, "gbit": 1e9}
_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1e6, "mb": 1e6, "mib": 1 << 20}


def parse_rate(text: str) -> float:
    """'2' (Mbit/s), '2mbit', '500k', '1g' -> bit/s."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _RATE_UNITS:
        raise TestbedError(f"rate {text!r} is not understood: expected e.g. 2mbit, 500kbit, 2 (Mbit/s)")
    return float(m.group(1)) * _RATE_UNITS[m.group(2).lower()]


def parse_size(text: str) -> int:
    """'60000', '60kb', '64KiB' -> bytes."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise TestbedError(f"size {text!r} is not understood: expected bytes, e.g. 60000, 60kb, 64KiB")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def parse_seconds(text: str) -> float:
    """'120', '120s', '2m' -> seconds."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(s|m|min)?\s*", str(text))
    if not m:
        raise TestbedError(f"duration {text!r} is not understood: expected e.g. 120s or 2m")
    return float(m.group(1)) * (60 if m.group(2) in ("m", "min") else 1)

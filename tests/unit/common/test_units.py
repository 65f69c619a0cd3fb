"""common.units (rates, sizes, durations as text): every accepted spelling and the one-line refusals."""

from __future__ import annotations

import pytest

from common.errors import TestbedError
from common.units import parse_rate, parse_seconds, parse_size


@pytest.mark.parametrize("text,bps", [("2", 2e6), ("2mbit", 2e6), ("2M", 2e6), ("500k", 5e5), ("500kbit", 5e5),
                                      ("1g", 1e9), ("1.5gbit", 1.5e9), (" 3 mbit ", 3e6), (4, 4e6)])
def test_rates(text, bps):
    assert parse_rate(text) == bps


@pytest.mark.parametrize("text,size", [("60000", 60000), ("60kb", 60000), ("60k", 60000), ("64KiB", 65536),
                                       ("1mib", 1048576), ("1.5mb", 1500000), ("9b", 9)])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text,seconds", [("120", 120.0), ("120s", 120.0), ("2m", 120.0), ("1.5min", 90.0)])
def test_durations(text, seconds):
    assert parse_seconds(text) == seconds


@pytest.mark.parametrize("parse,text,message", [
    (parse_rate, "fast", "rate 'fast' is not understood: expected e.g. 2mbit, 500kbit, 2 (Mbit/s)"),
    (parse_rate, "2tbit", "rate '2tbit' is not understood"),
    (parse_size, "-5", "size '-5' is not understood: expected bytes, e.g. 60000, 60kb, 64KiB"),
    (parse_seconds, "2h", "duration '2h' is not understood: expected e.g. 120s or 2m"),
])
def test_refusals_are_one_line(parse, text, message):
    with pytest.raises(TestbedError) as info:
        parse(text)
    assert str(info.value).startswith(message)

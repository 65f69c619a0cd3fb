"""traffic.model._check (the model's argument checks): what each accepts and returns, and the one-line
refusals."""

from __future__ import annotations

import math

import pytest

from traffic.model import _check
from traffic.model.errors import TrafficError


def test_checks_accept_and_return():
    assert _check.int_at_least("n", 3, 3) == 3
    assert _check.real_positive("x", 2) == 2.0 and isinstance(_check.real_positive("x", 2), float)
    assert _check.real_at_least("x", 0, 0.0) == 0.0
    assert _check.one_of("mode", "a", ["a", "b"]) == "a"


@pytest.mark.parametrize("call,message", [
    (lambda: _check.int_at_least("n", 2, 3), "n 2 is not allowed; expected an integer >= 3"),
    (lambda: _check.int_at_least("n", True, 0), "n True is not allowed; expected an integer >= 0"),
    (lambda: _check.int_at_least("n", 3.0, 0), "n 3.0 is not allowed"),
    (lambda: _check.real_positive("x", 0), "x 0 is not allowed; expected a finite number > 0"),
    (lambda: _check.real_positive("x", math.inf), "x inf is not allowed"),
    (lambda: _check.real_at_least("x", -0.5, 0.0), "x -0.5 is not allowed; expected a finite number >= 0.0"),
    (lambda: _check.real_at_least("x", math.nan, 0.0), "x nan is not allowed"),
    (lambda: _check.one_of("mode", "c", ["a", "b"]), "mode 'c' is not known; expected one of a, b"),
])
def test_check_refusals(call, message):
    with pytest.raises(TrafficError) as info:
        call()
    assert str(info.value).startswith(message)

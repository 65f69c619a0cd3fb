"""Synthetic generator: determinism, rates, burstiness, length kinds."""

from __future__ import annotations

import numpy as np
import pytest

from synthetic import LengthSpec, generate
from testbed.errors import TestbedError
from traffic.traces import Request


def test_same_seed_same_list():
    a = generate(500, seed=3, arrival="bursty", rate_per_s=10.0)
    assert a == generate(500, seed=3, arrival="bursty", rate_per_s=10.0)
    assert a != generate(500, seed=4, arrival="bursty", rate_per_s=10.0)
    assert [r.request_id for r in a] == list(range(500))


def test_poisson_rate_and_cv():
    reqs = generate(20_000, seed=1, rate_per_s=50.0)
    gaps = np.diff([0.0] + [r.arrival_s for r in reqs])
    assert gaps.mean() == pytest.approx(1 / 50.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)


def test_bursty_has_same_rate_higher_cv():
    reqs = generate(20_000, seed=1, arrival="bursty", rate_per_s=50.0, cv=3.0)
    gaps = np.diff([0.0] + [r.arrival_s for r in reqs])
    assert gaps.mean() == pytest.approx(1 / 50.0, rel=0.1)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.15)


def test_duration_mode():
    reqs = generate(duration_s=100.0, seed=2, rate_per_s=20.0)
    assert all(r.arrival_s < 100.0 for r in reqs)
    assert 1800 < len(reqs) < 2200
    assert all(b.arrival_s >= a.arrival_s for a, b in zip(reqs, reqs[1:]))


def test_length_kinds():
    reqs = generate(5000, seed=5, input_lengths=LengthSpec("lognormal", median=2000.0, sigma=0.5,
                                                           max_tokens=10_000),
                    output_lengths=LengthSpec("fixed", value=64))
    lens = np.array([r.input_tokens for r in reqs])
    assert np.median(lens) == pytest.approx(2000, rel=0.05) and lens.max() <= 10_000 and lens.min() >= 1
    assert {r.output_tokens for r in reqs} == {64}
    pool = [Request(0, 0.0, 111, 1), Request(1, 0.0, 222, 2)]
    reqs = generate(200, seed=5, input_lengths=LengthSpec("trace"), output_lengths=LengthSpec("trace"),
                    trace=pool)
    assert {(r.input_tokens, r.output_tokens) for r in reqs} == {(111, 1), (222, 2)}


@pytest.mark.parametrize("kwargs,message", [
    (dict(n_requests=10, rate_per_s=0), "rate_per_s 0"),
    (dict(n_requests=10, arrival="bursty", cv=1.0), "bursty cv 1.0"),
    (dict(n_requests=10, arrival="uniform"), "arrival process 'uniform'"),
    (dict(), "expected exactly one"),
    (dict(n_requests=10, input_lengths=LengthSpec("trace")), "needs requests to sample"),
])
def test_generate_validation(kwargs, message):
    with pytest.raises(TestbedError, match=message):
        generate(**kwargs)


def test_length_spec_validation():
    with pytest.raises(TestbedError, match="length kind 'normal'"):
        LengthSpec("normal")
    with pytest.raises(TestbedError, match="lognormal median -1"):
        LengthSpec("lognormal", median=-1.0)

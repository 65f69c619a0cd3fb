"""Seeded synthetic request streams: a test helper (the testbed replays real traces only).

Arrivals:
* ``"poisson"``: exponential inter-arrival times with mean 1 / rate_per_s.
* ``"bursty"``: gamma inter-arrival times with the same mean and coefficient
  of variation ``cv`` > 1 (shape k = 1 / cv**2, scale = 1 / (rate * k)); small
  gaps cluster into bursts separated by long silences. cv = 1 would be Poisson.

Lengths (``LengthSpec``): ``"fixed"`` (value), ``"lognormal"`` (median and
sigma of the underlying normal, rounded and clipped to [min, max]) or
``"trace"`` (sampled with replacement from given requests). When both input
and output are ``"trace"`` they come from the same sampled request, keeping
the trace's input/output correlation. Synthetic requests have no hash_ids.

One ``numpy.random.default_rng(seed)`` drives everything, in a fixed order,
so the same arguments give an identical list.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from traffic._check import int_at_least, one_of, real_at_least, real_positive
from traffic.errors import TrafficError
from traffic.traces import Request

ARRIVALS = ("poisson", "bursty")
LENGTH_KINDS = ("fixed", "lognormal", "trace")


@dataclass(frozen=True)
class LengthSpec:
    """How to draw a token count."""

    kind: str = "fixed"
    value: int = 1024
    median: float = 1024.0
    sigma: float = 1.0
    min_tokens: int = 1
    max_tokens: int = 131_072

    def __post_init__(self) -> None:
        one_of("length kind", self.kind, LENGTH_KINDS)
        int_at_least("length min_tokens", self.min_tokens, 0)
        int_at_least("length max_tokens", self.max_tokens, max(1, self.min_tokens))
        if self.kind == "fixed":
            int_at_least("fixed length value", self.value, self.min_tokens)
        if self.kind == "lognormal":
            real_positive("lognormal median", self.median)
            real_at_least("lognormal sigma", self.sigma, 0.0)


def _inter_arrivals(rng: np.random.Generator, n: int, arrival: str, rate: float, cv: float) -> np.ndarray:
    if arrival == "poisson":
        return rng.exponential(1.0 / rate, n)
    shape = 1.0 / cv ** 2
    return rng.gamma(shape, 1.0 / (rate * shape), n)


def _lengths(rng: np.random.Generator, spec: LengthSpec, n: int, picks: np.ndarray | None,
             pool: Sequence[Request], field: str) -> np.ndarray:
    if spec.kind == "fixed":
        return np.full(n, spec.value, dtype=np.int64)
    if spec.kind == "lognormal":
        raw = np.rint(rng.lognormal(math.log(spec.median), spec.sigma, n))
        return np.clip(raw, spec.min_tokens, spec.max_tokens).astype(np.int64)
    assert picks is not None
    return np.array([getattr(pool[i], field) for i in picks], dtype=np.int64)


def generate(n_requests: int | None = None, duration_s: float | None = None, *, seed: int = 0,
             arrival: str = "poisson", rate_per_s: float = 1.0, cv: float = 4.0,
             input_lengths: LengthSpec = LengthSpec("lognormal", median=6909.0, sigma=1.0),
             output_lengths: LengthSpec = LengthSpec("fixed", value=256, min_tokens=0),
             trace: Sequence[Request] | None = None) -> list[Request]:
    """Generate requests: the first ``n_requests``, or all arriving before ``duration_s``.

    The first request arrives after one inter-arrival gap (not at 0). Default
    input median 6,909 tokens is the Mooncake conversation trace's median.
    """
    if (n_requests is None) == (duration_s is None):
        raise TrafficError(f"n_requests {n_requests!r} / duration_s {duration_s!r}: expected exactly one")
    one_of("arrival process", arrival, ARRIVALS)
    rate = real_positive("rate_per_s", rate_per_s)
    if arrival == "bursty" and not (isinstance(cv, (int, float)) and math.isfinite(cv) and cv > 1):
        raise TrafficError(f"bursty cv {cv!r} is not allowed; expected a finite number > 1 "
                           "(cv 1 is Poisson)")
    int_at_least("seed", seed, 0)
    uses_trace = "trace" in (input_lengths.kind, output_lengths.kind)
    pool = list(trace or [])
    if uses_trace and not pool:
        raise TrafficError("length kind 'trace' needs requests to sample; expected a non-empty trace=")
    rng = np.random.default_rng(seed)
    if n_requests is not None:
        int_at_least("n_requests", n_requests, 0)
        times = np.cumsum(_inter_arrivals(rng, n_requests, arrival, rate, cv))
    else:
        duration = real_positive("duration_s", duration_s)
        chunks, total = [], 0.0
        while total < duration:   # draw in blocks until past the end, then cut
            block = np.cumsum(_inter_arrivals(rng, max(16, int(rate * duration * 1.2)), arrival, rate, cv))
            chunks.append(block + total)
            total = float(chunks[-1][-1])
        times = np.concatenate(chunks)
        times = times[times < duration]
    n = len(times)
    picks = rng.integers(len(pool), size=n) if uses_trace else None
    n_in = _lengths(rng, input_lengths, n, picks, pool, "input_tokens")
    n_out = _lengths(rng, output_lengths, n, picks, pool, "output_tokens")
    if (n_in < 1).any():
        raise TrafficError(f"input lengths {input_lengths} can give 0 tokens; expected min_tokens >= 1")
    return [Request(i, float(t), int(a), int(b)) for i, (t, a, b) in enumerate(zip(times, n_in, n_out))]


__all__ = ["LengthSpec", "generate", "ARRIVALS", "LENGTH_KINDS"]

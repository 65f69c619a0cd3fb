"""Percentiles, FCT slowdown, size bins and the fct.txt writer on known data."""

from __future__ import annotations

import numpy as np
import pytest

from common.errors import TestbedError
from traffic.model.metrics import (
    FctRecord,
    binned_slowdowns,
    fct_slowdown,
    fct_slowdowns,
    ideal_fct_s,
    percentile,
    percentiles,
    read_fct_txt,
    rounded_percentiles,
    size_bins,
    summary,
    write_fct_txt,
)


def test_nearest_rank_percentiles():
    values = list(range(1, 101))                       # 1..100
    assert percentiles(values) == {"p50": 50.0, "p95": 95.0, "p99": 99.0, "p999": 100.0}
    thousand = list(range(1, 1001))[::-1]              # order must not matter
    assert percentiles(thousand) == {"p50": 500.0, "p95": 950.0, "p99": 990.0, "p999": 999.0}
    assert percentile([3.0, 1.0, 2.0], 0) == 1.0 and percentile([3.0, 1.0, 2.0], 100) == 3.0
    assert percentile([10.0, 20.0, 30.0, 40.0], 50) == 20.0   # observed value, not 25
    assert percentile([7.0], 99.9) == 7.0


def test_percentile_validation():
    with pytest.raises(TestbedError, match="values is empty"):
        percentiles([])
    with pytest.raises(TestbedError, match="percentile 101"):
        percentile([1.0], 101)
    with pytest.raises(TestbedError, match="non-finite"):
        percentile([1.0, float("nan")], 50)


def test_rounded_percentiles_scale_round_and_show_nothing_measured_as_none():
    assert rounded_percentiles([0.0012345, 0.002, 0.004], ("p50", "p99"), factor=1e3) == {"p50": 2.0, "p99": 4.0}
    assert rounded_percentiles([0.6, 0.0]) == {"p50": 0.0, "p99": 0.6}   # nearest rank: observed values
    assert rounded_percentiles([], ("p50", "p95", "p999")) == {"p50": None, "p95": None, "p999": None}


def test_summary():
    s = summary([2.0, 4.0, 6.0, 8.0])
    assert s == {"count": 4, "mean": 5.0, "min": 2.0, "max": 8.0, "p50": 4.0, "p95": 8.0,
                 "p99": 8.0, "p999": 8.0}


def test_ideal_fct_and_slowdown():
    # 1,250,000 B at 10 Gb/s = 1 ms, plus 10 us overhead
    assert ideal_fct_s(1_250_000, 10e9, overhead_s=10e-6) == pytest.approx(1.01e-3)
    assert fct_slowdown(2.02e-3, 1_250_000, 10e9, overhead_s=10e-6) == pytest.approx(2.0)
    # headers: 2,896 B = 2 packets of 1448 B, + 2 x 52 B headers = 3,000 B on the wire
    assert ideal_fct_s(2_896, 8e9, header_bytes=52) == pytest.approx(3_000 * 8 / 8e9)
    with pytest.raises(TestbedError, match="link_bps 0"):
        ideal_fct_s(100, 0)
    with pytest.raises(TestbedError, match="ideal FCT of 0 bytes is 0"):
        fct_slowdown(1.0, 0, 1e9)


def test_size_bins_equal_count():
    sizes = [50, 10, 40, 30, 20, 100, 90, 80, 70, 60]
    bins = size_bins(sizes, n_bins=5)
    assert [(b.min_bytes, b.max_bytes, b.count) for b in bins] == \
        [(10, 20, 2), (30, 40, 2), (50, 60, 2), (70, 80, 2), (90, 100, 2)]
    assert bins[0].members == (1, 4)                   # indices into the input
    uneven = size_bins(list(range(23)), n_bins=10)
    assert sum(b.count for b in uneven) == 23 and {b.count for b in uneven} == {2, 3}
    assert len(size_bins([5, 6], n_bins=10)) == 2


def test_binned_slowdowns():
    sizes = [1, 2, 3, 4, 100, 200, 300, 400]
    slow = [1.0, 2.0, 3.0, 4.0, 10.0, 20.0, 30.0, 40.0]
    rows = binned_slowdowns(sizes, slow, n_bins=2)
    assert [(r["min_bytes"], r["max_bytes"], r["count"], r["p50"], r["p99"]) for r in rows] == \
        [(1, 4, 4, 2.0, 4.0), (100, 400, 4, 20.0, 40.0)]
    with pytest.raises(TestbedError, match="8 sizes but 2 slowdowns"):
        binned_slowdowns(sizes, [1.0, 2.0])


def test_fct_txt_round_trip(tmp_path):
    records = [FctRecord(1, 9, 65536, 0, 52_000, 50_000), FctRecord(2, 10, 100, 1_000, 9_000, 8_000)]
    path = tmp_path / "fct.txt"
    assert write_fct_txt(path, records) == 2
    assert path.read_text() == "1 9 65536 0 52000 50000\n2 10 100 1000 9000 8000\n"
    assert read_fct_txt(path) == records
    with pytest.raises(TestbedError, match="non-integer or negative"):
        write_fct_txt(path, [FctRecord(1, 2, -5, 0, 1, 1)])
    path.write_text("1 2 3\n")
    with pytest.raises(TestbedError, match=r"fct.txt:1: '1 2 3' is not an fct line"):
        read_fct_txt(path)

def test_slowdowns_of_many_are_the_scalar_floats_exactly():
    rng = np.random.default_rng(3)
    sizes = [int(x) for x in rng.integers(1, 50_000_000, 5000)] + [1, 2895, 2896, 2897, 10**12]
    fcts = [float(x) for x in rng.random(len(sizes)) * 3]
    for kwargs in ({}, {"mtu_payload": 2896, "header_bytes": 66}, {"overhead_s": 1e-5, "header_bytes": 40}):
        many = fct_slowdowns(fcts, sizes, 3e6, **kwargs)
        assert many == [fct_slowdown(f, b, 3e6, **kwargs) for f, b in zip(fcts, sizes)]  # ==, not approx
        assert all(type(x) is float for x in many)
    assert fct_slowdowns([], [], 3e6) == []


@pytest.mark.parametrize("fcts,sizes", [([0.1, -0.5], [10, 10]), ([0.1, float("nan")], [10, 10]),
                                        ([0.1, 0.2], [10, -1]), ([0.1, 0.2], [10, 2.5]), ([0.1, 0.2], [0, 0])])
def test_a_bad_pair_among_many_raises_what_the_scalar_raises(fcts, sizes):
    with pytest.raises(TestbedError) as scalar:
        for f, b in zip(fcts, sizes):
            fct_slowdown(f, b, 3e6)
    with pytest.raises(TestbedError) as many:
        fct_slowdowns(fcts, sizes, 3e6)
    assert str(many.value) == str(scalar.value)

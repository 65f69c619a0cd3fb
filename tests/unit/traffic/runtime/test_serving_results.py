"""Reading requests.csv back: which requests a live run measured."""

from __future__ import annotations

from traffic.runtime.serving_results import read_requests, write_csv


def test_measured_requests_are_those_arriving_from_the_warmup_up_to_but_not_at_the_end(tmp_path):
    write_csv(tmp_path / "requests.csv", [{"request_id": i, "arrival_s": a} for i, a in
                                          enumerate((0.5, 1.0, 2.9, 3.0, 4.0))])
    rows, measured = read_requests(tmp_path, 1.0, 3.0)
    assert [r["request_id"] for r in rows] == ["0", "1", "2", "3", "4"]
    assert [r["request_id"] for r in measured] == ["1", "2"]

"""The in-flight rule (testbed.repetition.in_flight): which figures stand when a run stops with messages in
flight, and when the run fails for it (testbed.report.headline.missing_fails)."""

from __future__ import annotations

from testbed.repetition import in_flight
from testbed.report.headline import missing_fails

DIL = 12.0
WINDOW = (4.0, 32.0)  # cluster s: the run's window ends at 384 s of run time
STOP = 32 * DIL + 30  # the twin stops 30 s after the window's end


def kv(i, start, end=None, request=1, error=None):
    done = end is not None
    return {"id": i, "kind": "kv", "request_id": request, "start": start, "end": end, "verified": done,
            "error": None if done else (error or in_flight.IN_FLIGHT)}


def ep(i, start, end=None):
    return {"id": i, "kind": "combine", "request_id": None, "start": start, "end": end, "verified": end is not None,
            "error": None if end is not None else in_flight.IN_FLIGHT}


def live(rows, stopped=STOP, measured=frozenset({5, 6})):
    return in_flight.verdict(rows, driver="live", stopped_s=stopped, dilation=DIL, window=WINDOW,
                             measured=set(measured))


def test_nothing_missing_says_nothing_and_passes():
    v = live([kv(0, 1.0, 1.5), ep(1, 2.0, 2.1)])
    assert v["messages"] == 0 and not v["fails"] and v["note"] == "" and v["censored"] == []
    assert v["window_figures_stand"]


def test_kv_of_a_warm_up_request_in_flight_leaves_the_window_standing_and_censors_the_kv_figures():
    rows = [kv(i, 10.0 + i, 10.5 + i + i / 10) for i in range(100)] + [kv(100, 12.3, request=1)]
    v = live(rows)
    assert v["messages"] == v["kv"] == 1 and v["kv_of_unmeasured_requests"] == 1
    assert v["measured_requests_waiting"] == 0 and v["sent_after_window"] == 0
    assert v["window_figures_stand"] and v["affected"] == [] and not v["fails"]
    assert "fct_ms" in v["censored"] and "ep_exchange_ms" not in v["censored"]
    # nearest rank: the P99 of the 100 delivered is the 99th (10.3 s); counting the one in flight (at least its
    # age, STOP - 12.3 s) it is the 100th of 101: the slowest delivered (10.4 s)
    assert v["fct_p99_ms"] == 10300.0 and v["fct_p99_ms_counting_in_flight_at_least"] == 10400.0
    assert "stand" in v["note"] and "does not fail" in v["note"]


def test_messages_sent_after_the_window_and_of_measured_requests_are_counted_apart():
    rows = [kv(0, 1.0, 2.0), kv(1, 100.0, request=5), ep(2, 32 * DIL + 1.0), ep(3, 50.0)]
    v = live(rows)
    assert (v["messages"], v["kv"], v["ep"]) == (3, 1, 2)
    assert v["sent_after_window"] == 1 and v["measured_requests_waiting"] == 1 and v["kv_of_unmeasured_requests"] == 0
    assert not v["fails"] and {"fct_ms", "ep_exchange_ms", "decode_step_ms"} <= set(v["censored"])


def test_a_run_that_stopped_before_the_window_ended_fails_with_the_window_figures_affected():
    v = live([kv(0, 1.0, 2.0), kv(1, 3.0)], stopped=200.0)
    assert not v["window_figures_stand"] and v["fails"]
    assert {"ttft_ms", "throughput_tokens_per_s"} <= set(v["affected"])


def test_a_transfer_that_failed_otherwise_fails_the_run():
    v = live([kv(0, 1.0, 2.0), kv(1, 3.0, error="connection reset")])
    assert v["failed_otherwise"] == 1 and v["messages"] == 0 and v["fails"]


def test_the_planned_replay_has_no_window_every_missing_transfer_fails_it():
    v = in_flight.verdict([kv(0, 1.0, 2.0), kv(1, 3.0)], driver="plan", stopped_s=40.0)
    assert v["window_figures_stand"] is None and v["fails"]


def test_the_run_exit_rule_reads_the_verdict_from_the_headline():
    ok = {"transfers": 10, "verified": 10}
    assert not missing_fails(ok)
    standing = live([kv(0, 1.0, 2.0), kv(1, 3.0)])
    assert not missing_fails({"transfers": 2, "verified": 1, "in_flight": standing})
    failing = live([kv(0, 1.0, 2.0), kv(1, 3.0)], stopped=100.0)
    assert missing_fails({"transfers": 2, "verified": 1, "in_flight": failing})
    assert missing_fails({"transfers": 2, "verified": 1})  # no verdict (an older run): as before, it fails

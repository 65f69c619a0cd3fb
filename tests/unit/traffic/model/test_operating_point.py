"""Operating point: per-instance utilization, queue series and the overload flag, on hand-made schedules."""

from __future__ import annotations

import pytest

from common.errors import TestbedError
from traffic.model.models import custom_model
from traffic.model.placement import Scheduler, place
from traffic.model.schedule import OVERLOAD_MESSAGE, RequestTiming, build_schedule, operating_point, overloaded
from traffic.model.traces import Request

TINY = custom_model("tiny", "gqa", layers=4, kv_heads=2, head_dim=16, prefill_tokens_per_s_per_gpu=1000.0)


def _t(rid, arrival, p, start, end, decode_end, d=0):
    return RequestTiming(rid, arrival, p, d, start, end, 0, 0, decode_end)


# Two prefill instances, one decode instance, window 0..10 s.
HAND = [_t(0, 0.0, 0, 0.0, 2.0, 5.0),
        _t(1, 0.5, 0, 2.0, 3.0, 4.0),       # waited 1.5 s behind request 0
        _t(2, 1.5, 1, 1.5, 4.5, 6.5),
        _t(3, 6.0, 0, 6.0, 7.0, 9.0),
        _t(4, 9.5, 1, 9.5, 11.5, 12.0)]     # prefill runs past the window end


def test_utilization_and_offered_load_by_hand():
    op = operating_point(HAND, 10.0)
    got = {(i.kind, i.instance): i for i in op.instances}
    assert list(got) == [("prefill", 0), ("prefill", 1), ("decode", 0)]
    # prefill 0 busy [0, 3] + [6, 7] = 4 s; prefill 1 busy [1.5, 4.5] + [9.5, 10] = 3.5 s
    assert (got["prefill", 0].busy_s, got["prefill", 0].utilization) == (4.0, 0.4)
    assert got["prefill", 1].utilization == pytest.approx(0.35)
    # offered: prefill 1 is asked 3 s + 2 s (request 4 arrives inside the window) = 0.5
    assert got["prefill", 0].offered_load == pytest.approx(0.4)
    assert got["prefill", 1].offered_load == pytest.approx(0.5)
    assert (got["prefill", 0].requests, got["prefill", 1].requests) == (3, 2)
    # decode busy: union of [2, 5], [3, 4], [4.5, 6.5], [7, 9] = 6.5 s; offered 3+1+2+2+0.5 = 8.5 s
    assert got["decode", 0].utilization == pytest.approx(0.65)
    assert got["decode", 0].offered_load == pytest.approx(0.85)


def test_queue_series_by_hand():
    op = operating_point(HAND, 10.0, sample_s=1.0)
    assert [t for t, _ in op.series("prefill", 0)] == [float(t) for t in range(11)]
    assert [q for _, q in op.series("prefill", 0)] == [1, 2, 1, 0, 0, 0, 1, 0, 0, 0, 0]
    assert [q for _, q in op.series("prefill", 1)] == [0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1]
    assert [q for _, q in op.series("decode", 0)] == [0, 0, 1, 2, 1, 1, 1, 1, 1, 0, 0]
    rows = {(r["kind"], r["instance"]): r for r in op.instance_rows()}
    assert rows["prefill", 0] == {"instance": 0, "kind": "prefill", "utilization": 0.4, "busy_s": 4.0,
                                  "window_s": 10.0, "offered_load": 0.4, "requests": 3,
                                  "mean_queue": round(5 / 11, 4), "max_queue": 2}
    assert rows["decode", 0]["mean_queue"] == round(8 / 11, 4) and rows["decode", 0]["max_queue"] == 2
    assert op.queue_rows()[:4] == [{"t_s": 0.0, "kind": "prefill", "instance": 0, "queue": 1},
                                   {"t_s": 0.0, "kind": "prefill", "instance": 1, "queue": 0},
                                   {"t_s": 0.0, "kind": "decode", "instance": 0, "queue": 0},
                                   {"t_s": 1.0, "kind": "prefill", "instance": 0, "queue": 2}]
    assert len(op.queue_rows()) == 11 * 3
    assert op.utilization("prefill") == {0: 0.4, 1: pytest.approx(0.35)}


def test_window_as_start_end_and_default_window():
    op = operating_point(HAND, (2.0, 6.0), sample_s=2.0)
    # prefill 0 busy [2, 3] = 1 s of 4; samples at 2, 4, 6
    assert op.utilization("prefill")[0] == 0.25
    assert [q for _, q in op.series("prefill", 0)] == [1, 0, 1]
    # default window: 0 .. last prefill end (11.5 s); prefill 1 busy 3 + 2 = 5 s
    assert operating_point(HAND).utilization("prefill")[1] == pytest.approx(5 / 11.5)


def test_build_schedule_records_decode_end_and_instance_counts():
    pl = place(16, 4, 4)                                     # 2 prefill + 2 decode TP-4 instances
    s = build_schedule([Request(0, 0.0, 4000, 10)], pl, Scheduler(), TINY, decode_s_per_token=0.05)
    t = s.requests[0]
    assert (t.prefill_end_s, t.decode_end_s) == (1.0, 1.5)  # 4000 / (1000 x 4); + 10 x 0.05
    assert (s.n_prefill, s.n_decode) == (2, 2)
    op = operating_point(s, 2.0)
    assert op.utilization("prefill") == {0: 0.5, 1: 0.0}     # the idle instance is listed
    assert op.utilization("decode") == {0: 0.25, 1: 0.0}


def _fifo(tokens, n=30):
    """One TP-1 prefill instance at 1000 tokens/s, a request every second."""
    reqs = [Request(i, float(i), tokens, 1) for i in range(n)]
    return operating_point(build_schedule(reqs, place(2, 1, 1, gpus_per_server=1), Scheduler(), TINY), 30.0)


def test_growing_queue_is_flagged():
    op = _fifo(1500)              # 1.5 s of prefill a second: the queue grows by 1/3 a second
    # first third t = 0..9: 1 2 2 2 3 3 3 4 4 4 -> 2.8; last third t = 21..30: 8 9 9 9 10 10 10 11 11 10 -> 9.7
    msg = overloaded(op, max_utilization=2.0)                # the trend rule alone
    assert msg.startswith(OVERLOAD_MESSAGE + " (prefill 0: ")
    assert "queue 2.8 -> 9.7 requests" in msg and "utilization 1.00" in msg and "\n" not in msg
    assert overloaded(op, min_growth=6.8, max_utilization=2.0) is not None     # grew by 6.9
    assert overloaded(op, min_growth=7.0, max_utilization=2.0) is None
    assert overloaded(op) is not None                       # and it is busy all the window


def test_steady_queue_is_not_flagged():
    op = _fifo(500)               # 0.5 s a second: each request done before the next arrives
    assert op.utilization("prefill") == {0: 0.5}
    # sampled at arrivals: the one in prefill; none arrives at t = 30
    assert [q for _, q in op.series("prefill", 0)] == [1] * 30 + [0]
    assert overloaded(op) is None


def test_busy_but_steady_queue_is_flagged_by_utilization():
    op = _fifo(980)               # 0.98 s a second: never grows, but the instance is never idle
    assert op.utilization("prefill")[0] == pytest.approx(0.98)
    msg = overloaded(op)
    assert msg is not None and "utilization 0.98" in msg and "queue 1.0 -> 0.9" in msg   # t = 30: empty
    assert overloaded(op, max_utilization=0.99) is None


@pytest.mark.parametrize("kwargs,message", [
    (dict(schedule=[]), "the schedule has no request"),
    (dict(window_s=(5.0, 5.0)), "window end 5 s is not after its start 5 s"),
    (dict(window_s=-1.0), "window_s -1.0 is not allowed"),
    (dict(sample_s=0), "sample_s 0 is not allowed"),
    (dict(n_prefill=1), "n_prefill 1 is fewer than the prefill instances the schedule uses (2)"),
])
def test_operating_point_validation(kwargs, message):
    args = dict(schedule=HAND, window_s=10.0) | kwargs
    with pytest.raises(TestbedError) as info:
        operating_point(**args)
    assert message in str(info.value) and "\n" not in str(info.value)

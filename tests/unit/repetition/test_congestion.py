"""testbed.repetition.congestion: port classes, congested time by the queue that paused, KV per NIC port."""

import pytest

from pfc.analysis import PauseEvent
from testbed.backends.base import QueueCounters, QueueInfo
from testbed.repetition import congestion

QUEUES = [QueueInfo("gpu1:p1", "nic", "sw1"), QueueInfo("sw1:1", "switch", "gpu1:p1"),
          QueueInfo("sw1:9", "switch", "sw2"), QueueInfo("sw2:9", "switch", "sw1")]


def test_a_queue_s_class_is_what_it_feeds():
    assert [congestion.port_class(q) for q in QUEUES] == ["gpu_to_switch", "switch_to_gpu", "switch_to_switch",
                                                          "switch_to_switch"]


def _e(t: int, node: str, kind: int, port: int, event: int, cause: str) -> PauseEvent:
    return PauseEvent(t, node, kind, port, event, cause)


def test_congested_time_is_the_union_of_the_spans_a_queue_paused_whatever_released_them():
    # sw1:9 pauses gpu1:p1 over [1, 4] s and sw2:9 (another transmitter) over [3, 6] s: its union is 5 s.
    # gpu1:p2 is paused by sw1:9 at 7 s and released at 8 s by the pause daemon's exit (another cause): 1 s more.
    # sw2:9 pauses sw1:9 at 9 s and never releases it: open until the end, 10 s: 1 s.
    events = [_e(1_000_000_000, "gpu1", 0, 1, 1, "sw1:9"), _e(3_000_000_000, "sw2", 1, 9, 1, "sw1:9"),
              _e(4_000_000_000, "gpu1", 0, 1, 0, "sw1:9"), _e(6_000_000_000, "sw2", 1, 9, 0, "sw1:9"),
              _e(7_000_000_000, "gpu1", 0, 2, 1, "sw1:9"), _e(8_000_000_000, "gpu1", 0, 2, 0, "exit"),
              _e(9_000_000_000, "sw1", 1, 9, 1, "sw2:9")]
    assert congestion.congested_spans(events, 10_000_000_000) == {"sw1:9": 6.0, "sw2:9": 1.0}


def test_by_class_sums_congested_and_paused_time_in_cluster_seconds_and_averages_backlog():
    counters = QueueCounters(QUEUES, first={q.qid: {"bytes": 0, "drops": 0} for q in QUEUES},
                             last={"gpu1:p1": {"bytes": 100, "drops": 0}, "sw1:1": {"bytes": 50, "drops": 0},
                                   "sw1:9": {"bytes": 70, "drops": 0}, "sw2:9": {"bytes": 30, "drops": 0}},
                             samples=[(0.0, {"sw1:9": {"backlog": 1000}, "sw2:9": {"backlog": 3000},
                                             "gpu1:p1": {"backlog": 0}}),
                                      (1.0, {"sw1:9": {"backlog": 0}, "sw2:9": {"backlog": 0},
                                             "gpu1:p1": {"backlog": 600}})])
    ports = [{"queue": "gpu1:p1", "paused_s": 8.0, "paused_fraction": 0.2},
             {"queue": "sw2:9", "paused_s": 4.0, "paused_fraction": 0.1}]
    out = congestion.by_class(counters, ports, wall_per_run_s=4.0, congested={"sw1:9": 6.0, "sw2:9": 2.0})
    s2s = out["switch_to_switch"]  # samples: mean of (1000 + 3000) / 2 and 0 -> 1000; the largest 3000
    assert (s2s["queues"], s2s["bytes"], s2s["backlog_mean_bytes"], s2s["backlog_max_bytes"]) == (2, 100, 1000.0, 3000)
    assert (s2s["congested_s"], s2s["congested_queues"], s2s["paused_s"]) == (2.0, 2, 1.0)  # (6 + 2) / 4, 4 / 4
    g2s = out["gpu_to_switch"]
    assert (g2s["congested_s"], g2s["paused_s"], g2s["paused_fraction_max"], g2s["backlog_mean_bytes"]) == (
        0.0, 2.0, 0.2, 300.0)
    assert out["switch_to_gpu"]["bytes"] == 50 and congestion.by_class(None, None, 1.0) == {}


def test_kv_by_nic_lists_every_port_of_a_sending_server_with_its_real_bytes():
    rows = [{"kind": "kv", "verified": True, "src_ip": "10.1.0.1", "bytes": 10},
            {"kind": "kv", "verified": True, "src_ip": "10.2.0.1", "bytes": 30, "sent_src_ip": "10.1.0.1"},
            {"kind": "kv", "verified": True, "src_ip": "10.2.0.3", "bytes": 20},
            {"kind": "dispatch", "verified": True, "src_ip": "10.1.0.2", "bytes": 99},
            {"kind": "kv", "verified": False, "src_ip": "10.1.0.4", "bytes": 99}]
    out = congestion.kv_by_nic(rows, gpus_per_server=4, bytes_scale=1000.0)
    assert list(out) == ["server1"]
    s1 = out["server1"]
    assert s1["ports"] == {"gpu1:p1": 40_000, "gpu1:p2": 0, "gpu2:p1": 0, "gpu2:p2": 0, "gpu3:p1": 0,
                           "gpu3:p2": 20_000, "gpu4:p1": 0, "gpu4:p2": 0}
    assert s1["bytes"] == 60_000 and s1["max_over_mean"] == pytest.approx(40_000 / 7_500, abs=1e-3)

"""bench pfc's pure parts: incast sender choice, targets, latency log parsing."""

import pytest

from common.errors import TestbedError
from fabrics import build_fabric
from pfc import analysis
from testbed.bench import pfc


@pytest.mark.parametrize("kind,n,count", [("zcube", 16, 6), ("zcube", 32, 8), ("roft", 32, 8)])
def test_incast_senders_spread_over_switches(kind, n, count):
    fabric = build_fabric(kind, gpus=n)
    who = pfc.incast_senders(fabric, (1, 2), count)
    assert len(who) == len(set(who)) == count and 1 not in who
    switches = [fabric.switch_of(g, 1) for g in who]
    per = {s: switches.count(s) for s in switches}
    assert max(per.values()) - min(per.values()) <= 1  # round robin over the senders' switches


def test_every_incast_sender_uses_the_victims_other_port_number():
    assert pfc.incast_flows((1, 2), [5, 9]) == [((5, 1), (1, 2)), ((9, 1), (1, 2))]


def test_incast_senders_bad_count_is_one_line():
    with pytest.raises(TestbedError, match="incast senders 40 is out of range: expected 1 .. 31"):
        pfc.incast_senders(build_fabric("zcube", gpus=32), (1, 2), 40)


@pytest.mark.parametrize("kind,count", [("zcube", 8), ("roft", 4)])
def test_one_switch_senders_share_one_switch_that_is_not_the_victims(kind, count):
    fabric = build_fabric(kind, gpus=32)
    who = pfc.one_switch_senders(fabric, (1, 2), count)
    assert len(who) == len(set(who)) == count and 1 not in who
    switches = {fabric.switch_of(g, 1) for g in who}  # the port they send from (the victim's other number)
    assert len(switches) == 1 and switches != {fabric.switch_of(1, 2)}


def test_one_switch_senders_bad_count_is_one_line():
    with pytest.raises(TestbedError, match="incast senders 9 is out of range for --one-switch on this fabric: "
                                           "expected 1 .. 8"):
        pfc.one_switch_senders(build_fabric("zcube", gpus=32), (1, 2), 9)
    with pytest.raises(TestbedError, match="expected 1 .. 4"):  # a ROFT leaf holds one rail of 4 servers
        pfc.one_switch_senders(build_fabric("roft", gpus=32), (1, 2), 8)


def test_target_is_two_frames_capped_at_5ms():
    assert pfc.target_ms(3e6, 3000) == 5.0  # two 3014-byte frames take 16 ms at 3 Mbit/s
    assert pfc.target_ms(100e6, 1500) == pytest.approx(2 * 1514 * 8 / 100e6 * 1e3)


def test_read_latencies(tmp_path):
    log = tmp_path / "pfc_latency.txt"
    log.write_text("pause sw1:9 sw2:1 1000000 1500000 1600000 0.600\n"
                   "pause gpu2:p1 sw3:9 2000000 2300000 0 0.000\n"
                   "resume sw1:9 sw2:1 5000000 5400000 6000000 1.000\n"
                   "garbage\n")
    got = pfc.read_latencies(log)
    # nearest-rank (traffic.model.metrics.percentile): observed values, the lower one at p50 of two
    assert got["pause_latency_ms"] == {"n": 2, "p50": 0.0, "p99": 0.6, "max": 0.6}
    assert got["resume_latency_ms"]["n"] == 1 and got["resume_latency_ms"]["max"] == 1.0
    assert got["reaction_ms"]["max"] == 0.5 and got["reaction_ms"]["n"] == 2
    assert pfc.read_latencies(tmp_path / "missing")["pause_latency_ms"]["n"] == 0


def test_paused_nodes(tmp_path):
    log = tmp_path / "pfc.txt"
    log.write_text("1 sw1 1 9 1 sw2:1\n2 gpu3 0 1 1 sw1:9\n3 sw1 1 9 0 sw2:1\n")
    assert pfc.paused_nodes(analysis.read_events(log)) == ["gpu3", "sw1"]


def test_paused_queues_after_skip(tmp_path):
    log = tmp_path / "pfc.txt"
    log.write_text("1 sw1 1 9 1 sw2:1\n2 gpu3 0 1 1 sw1:9\n3 sw1 1 9 0 sw2:1\n4 leaf2 1 12 1 spine1:3\n")
    assert pfc.paused_queues(analysis.read_events(log)) == {"sw1:9", "gpu3:p1", "leaf2:12"}
    assert pfc.paused_queues(analysis.read_events(log)[2:]) == {"leaf2:12"}


@pytest.mark.parametrize("kind", ["zcube", "roft"])
def test_bystanders_avoid_the_incast_and_some_share_its_hot_switch(kind):
    fabric = build_fabric(kind, gpus=32)
    senders = pfc.incast_senders(fabric, (1, 2), 8)
    hot = fabric.switch_of(1, 2)
    assert all(fabric.switch_of(g, 2) != hot for g in senders)  # hot-switch GPUs are kept for bystanders
    flows = pfc.bystander_flows(fabric, (1, 2), senders)
    assert len(flows) == 8
    gpus = [g for (s, _), (d, _) in flows for g in (s, d)]
    assert len(set(gpus)) == 16 and not set(gpus) & set(senders + [1])
    assert all(sp == 1 and dp == 2 for (_, sp), (_, dp) in flows)
    near = [d for _, (d, _) in flows if fabric.switch_of(d, 2) == hot]
    assert 1 <= len(near) <= 4


def test_steal_is_the_worst_cpus_share_of_stolen_time():
    before = {"cpu0": [0] * 8, "cpu1": [0] * 8}
    after = {"cpu0": [50, 0, 10, 40, 0, 0, 0, 0], "cpu1": [60, 0, 0, 20, 0, 0, 0, 20]}
    assert pfc.steal_pct(before, after) == 20.0
    assert pfc.steal_pct(after, after) is None  # no time passed


def test_helper_health_sums_the_gaps_and_keeps_the_longest():
    doc = pfc.helper_health({"scheduling": "fifo", "doorbell_rings": 7,
                             "loop_gaps": {"sleep": 3, "step": 2}, "loop_gap_max_ms": {"sleep": 2.5, "step": 4.1}})
    assert doc == {"scheduling": "fifo", "doorbell_rings": 7, "loop_gaps": 5, "loop_gap_max_ms": 4.1}
    assert pfc.helper_health({})["loop_gap_max_ms"] == 0.0


def test_host_warnings_only_when_steal_is_above_one_percent():
    assert pfc.host_warnings(None) == [] and pfc.host_warnings(0.23) == [] and pfc.host_warnings(1.0) == []
    (w,) = pfc.host_warnings(4.88)
    assert w.startswith("the host took 4.88 % of a vCPU during the incast")


def test_cpu_times_read_each_cpus_eight_counters_from_proc_stat():
    got = pfc.cpu_times()
    assert got and all(k.startswith("cpu") and k != "cpu" for k in got)
    assert all(len(v) == 8 and all(isinstance(x, int) and x >= 0 for x in v) for v in got.values())

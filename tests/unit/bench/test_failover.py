"""The failover benchmark's pure parts: which cable it cuts, and how a flow's deliveries show a stall."""

import pytest

from fabrics import build_fabric
from fabrics.routing import forwarding_tables, walk
from testbed.bench.failover import (
    cables_crossed,
    cables_to_cut,
    classify_stalled,
    cut_times,
    flows_of,
    probe_recovery,
    probe_windows,
    resent,
    restart_effect,
    summarise,
)


def stream(lo, hi, every=2, delay=3.0, seq0=0):
    """Datagrams sent every ``every`` ms from ``lo`` to ``hi``, each arriving ``delay`` ms later."""
    return [(seq0 + i, float(t), t + delay) for i, t in enumerate(range(lo, hi, every))]


def test_a_stream_that_loses_datagrams_at_the_cut_recovers_with_the_first_sent_after_the_last_loss():
    got = [d for d in stream(0, 8000) if not 4990 <= d[1] < 5020]  # lost: sent 4990..5018
    r = probe_recovery(got, cut_ms=5000.5, until_ms=8000, every_ms=2)
    assert r == {"stalled": True, "lost": 15, "delay_ms": 3.0, "recovery_ms": 22.5, "blackhole_ms": 17.5}


def test_fast_failover_losing_only_what_was_on_the_cable_recovers_in_one_delay():
    got = [d for d in stream(0, 8000) if not 4994 <= d[1] < 5000]
    r = probe_recovery(got, cut_ms=5000, until_ms=8000, every_ms=2)
    assert r == {"stalled": True, "lost": 3, "delay_ms": 3.0, "recovery_ms": 3.0, "blackhole_ms": 0.0}


def test_congestion_losses_after_the_recovery_are_not_the_cuts():
    got = [d for d in stream(0, 8000) if not (4994 <= d[1] < 5000 or d[1] in (5100, 5400))]
    r = probe_recovery(got, cut_ms=5000, until_ms=8000, every_ms=2)
    assert r == {"stalled": True, "lost": 3, "delay_ms": 3.0, "recovery_ms": 3.0, "blackhole_ms": 0.0}


def test_a_stream_that_loses_nothing_did_not_stall():
    assert probe_recovery(stream(0, 8000), 5000, 8000, 2)["stalled"] is False


def test_a_stream_with_nothing_after_the_cut_never_recovered():
    r = probe_recovery(stream(0, 5000), 5000, 8000, 2)
    assert r["stalled"] and r["recovery_ms"] is None


def test_arrivals_after_the_clear_are_not_a_recovery():
    got = [d for d in stream(0, 9000) if not 5000 <= d[1] < 8000]
    r = probe_recovery(got, cut_ms=5000, until_ms=8000, every_ms=2)
    assert r["stalled"] and r["recovery_ms"] is None


def test_resent_is_the_difference_between_two_samples_or_none():
    infos = [{"bytes_retrans": 10}, {"bytes_retrans": 10}, {"bytes_retrans": 4010}]
    assert resent(infos, 1, 2) == 4000
    assert resent(infos, 1, 4) is None


@pytest.mark.parametrize("kind", ["zcube", "roft"])
def test_the_cut_cable_is_crossed_by_the_flows_it_names(kind):
    fabric = build_fabric(kind, gpus=16, gpus_per_switch=8)
    flows = flows_of(fabric)
    cuts = cables_to_cut(fabric, flows, k=3)
    assert len({end for end, _ in cuts}) == len(cuts) == 3
    assert [len(c) for _, c in cuts] == sorted((len(c) for _, c in cuts), reverse=True)
    (sw, port), crossing = cuts[0]
    assert not fabric.peer(sw, port)[0].startswith("gpu")
    far = fabric.peer(sw, port)
    tables = forwarding_tables(fabric)
    for key, (src, dst) in flows.items():
        used = set()
        for a, b in ((src, dst), (dst, src)):
            for hops, ports in walk(fabric, tables, a, b):
                used |= set(zip(hops, ports))
        assert (key in crossing) == bool(used & {(sw, port), far})
    assert crossing and len(crossing) < len(flows)


def test_cables_crossed_holds_no_gpu_link():
    fabric = build_fabric("zcube", gpus=16, gpus_per_switch=8)
    for sw, p in cables_crossed(fabric, (1, 1), (9, 2)):
        assert not fabric.peer(sw, p)[0].startswith("gpu")


def test_restart_effect_counts_misses_and_young_flows():
    before = {"sw1": {"miss": 3, "ages": [10.0, 10.0]}}
    after = {"sw1": {"miss": 5, "ages": [12.0, 0.4]}}
    assert restart_effect(before, after, span_s=2.0) == {"controller_restart_drops": 2, "flows_reinstalled": 1}


# ------------------------------------------------------------------ the switches' reaction and stalled flows
def reaction(ms, into=0.0, proto=17):
    return {"reaction_ms": ms, "into_dead_ms": into, "proto": proto}


def test_a_flow_that_delivered_is_not_classified():
    assert classify_stalled(("a", "b"), True, [reaction(None, 1000, 6)], [], {"backoff": 3}) is None


def test_packets_still_going_into_the_dead_cable_with_no_other_port_is_a_black_hole():
    assert classify_stalled(("a", "b"), False, [reaction(None, 900, 6)], [], {"backoff": 2}) == "blackholed"
    assert classify_stalled(("a", "b"), False, [reaction(None, 300, 6)], [], {"backoff": 2}, moved_ms=250) \
        == "blackholed"


def test_a_packet_into_the_dead_cable_before_the_switches_moved_anyone_is_no_black_hole():
    # one retransmission 21 ms after the cut, then the sender backed off: the switch had not reacted yet
    assert classify_stalled(("a", "b"), False, [reaction(None, 21.5, 6)], [], {"backoff": 3}, moved_ms=285) \
        == "backoff"
    assert classify_stalled(("a", "b"), False, [reaction(None, 600, 6)], [], {"backoff": 0}) == "downstream"


def test_a_flow_starved_before_the_cut_is_not_the_cuts():
    assert classify_stalled(("a", "b"), False, [reaction(None, 900, 6)], [reaction(None, 1400)], {"backoff": 0},
                            before=False) == "downstream"


def test_a_silent_flow_whose_pair_probes_never_moved_is_black_holed_and_whose_probes_moved_is_in_backoff():
    silent = [reaction(None, 0.0, 6)]
    assert classify_stalled(("a", "b"), False, silent, [reaction(None, 1400)], {"backoff": 3}) == "blackholed"
    assert classify_stalled(("a", "b"), False, silent, [reaction(35.0)], {"backoff": 3}) == "backoff"


def test_backoff_needs_the_senders_timer_and_otherwise_the_flow_was_held_downstream():
    assert classify_stalled(("a", "b"), False, [], [], {"backoff": 0, "ca_state": 4}) == "backoff"
    assert classify_stalled(("a", "b"), False, [reaction(20.0, 0, 6)], [], {"backoff": 0, "ca_state": 0}) \
        == "downstream"
    assert classify_stalled(("a", "b"), False, [], [], {}) == "downstream"


def test_summarise_counts_reactions_of_probe_streams_only_and_names_stalled_flows_apart():
    streams = [{"stalled": True, "recovery_ms": 50.0, "blackhole_ms": 5.0, "delay_ms": 40.0, "lost": 3}]
    rows = [{"crossing": True, "starved": True, "stalled": "backoff", "bytes_retrans": 100},
            {"crossing": False, "starved": True, "stalled": "downstream", "bytes_retrans": 0},
            {"crossing": True, "starved": False, "stalled": None, "bytes_retrans": 50}]
    moved = [reaction(float(i)) for i in range(1, 101)] + [reaction(None, 1500.0), reaction(3.0, 0, 6)]
    got = summarise(streams, rows, moved)
    assert got["switch_reaction_ms"] == {"p50": 50.0, "p99": 99.0, "max": 100.0, "n": 100}
    assert got["probes_never_moved"] == 1 and got["switch_into_dead_ms"]["max"] == 1500.0
    assert (got["blackholed_flows"], got["backoff_flows"], got["downstream_flows"]) == (0, 1, 1)
    assert (got["starved_through_cut"], got["crossing"], got["bytes_retrans"]) == (1, 2, 150)
    assert not any("lost" in k for k in got if k != "probes_lost")  # nothing else reads as data loss


def test_probe_windows_surround_the_cuts_a_pair_crosses_or_are_empty_when_it_crosses_all():
    cables = [{("sw1", 9)}, {("sw2", 9)}, {("sw3", 9)}]
    assert probe_windows(cables, lambda c: ("sw2", 9) in c) == "@6-10"
    assert probe_windows(cables, lambda c: True) == ""
    c0 = cut_times(0)
    assert probe_windows(cables, lambda c: ("sw2", 9) not in c) == (
        f"@{c0[0] - 1:g}-{c0[1] + 1.5:g},{cut_times(2)[0] - 1:g}-{cut_times(2)[1] + 1.5:g}")


def test_a_stream_idle_between_its_windows_counts_no_gap_as_lost_and_stays_quick():
    import time

    # sequence numbers run on through an idle stretch: 200,000 ticks between two windows
    got = stream(0, 1000) + [d for d in stream(5000, 8000, seq0=200_000) if not 5994 <= d[1] < 6000]
    t = time.perf_counter()
    r = probe_recovery(got, cut_ms=6000, until_ms=8000, every_ms=2)
    assert time.perf_counter() - t < 0.5
    assert r == {"stalled": True, "lost": 3, "delay_ms": 3.0, "recovery_ms": 3.0, "blackhole_ms": 0.0}

"""The failover benchmark's pure parts: which cable it cuts, and how a flow's deliveries show a stall."""

import pytest

from testbed.bench.failover import cables_crossed, cables_to_cut, flows_of, probe_recovery, resent, restart_effect
from testbed.fabric import build_fabric
from testbed.fabric.routing import forwarding_tables, walk


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

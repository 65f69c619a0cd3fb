"""pfc.analysis: the pause log, per-port stats, spread and victim flows."""

import csv
import random
import time

import pytest

from common.errors import TestbedError
from fabrics import addressing, build_fabric
from pfc.analysis import (
    PORT_STATS_COLUMNS,
    PauseEvent,
    port_stats,
    read_events,
    spread,
    transfer_path,
    victim_flows,
    write_port_stats_csv,
)
from pfc.policy import feeders, tables_of

S = 1_000_000_000  # ns per second
T0 = 1_700_000_000 * S


def ev(t_s, node, port, event, cause):
    node_type = 0 if node.startswith("gpu") else 1
    return PauseEvent(T0 + int(t_s * S), node, node_type, port, event, cause)


def write_events(path, events):
    """A pause log as pfcd writes it (one PauseEvent.line() a line)."""
    path.write_text("".join(e.line() + "\n" for e in events))
    return path


def by_queue(rows):
    return {r["queue"]: r for r in rows}


# ---------------------------------------------------------------------- I/O
def test_write_read_round_trip(tmp_path):
    events = [ev(0.001, "sw3", 9, 1, "sw4:3"), ev(0.002, "gpu5", 1, 1, "sw3:9"),
              ev(0.003, "leaf2", 12, 0, "spine1:4"), ev(0.004, "gpu5", 1, 0, "sw3:9")]
    path = write_events(tmp_path / "pfc.txt", events)
    assert path.read_text().splitlines()[0] == f"{T0 + 1_000_000} sw3 1 9 1 sw4:3"
    back = read_events(path)
    assert back == events
    assert back[1].queue == "gpu5:p1" and back[0].queue == "sw3:9"


def test_blank_lines_and_comments_are_skipped(tmp_path):
    p = tmp_path / "pfc.txt"
    p.write_text("# time_ns node node_type port event cause\n\n5 sw1 1 2 1 sw2:3\n")
    assert read_events(p) == [PauseEvent(5, "sw1", 1, 2, 1, "sw2:3")]


@pytest.mark.parametrize("line,field", [
    ("5 sw1 1 2 1", "field cause is missing"),
    ("5 sw1 1 2 1 sw2:3 extra", "1 extra field"),
    ("5.5 sw1 1 2 1 sw2:3", "field time_ns '5.5' is not an integer"),
    ("-5 sw1 1 2 1 sw2:3", "field time_ns -5 is negative"),
    ("5 sw1 2 2 1 sw2:3", "field node_type 2 is invalid"),
    ("5 sw1 0 2 1 sw2:3", "field node 'sw1' is not a host"),
    ("5 gpu1 1 2 1 sw2:3", "field node 'gpu1' is a host"),
    ("5 gpu1 0 3 1 sw2:3", "field port 3 is invalid: expected 1 or 2"),
    ("5 sw1 1 x 1 sw2:3", "field port 'x' is not an integer"),
    ("5 sw1 1 2 7 sw2:3", "field event 7 is invalid: expected 0 or 1"),
])
def test_bad_line_names_file_line_and_field(tmp_path, line, field):
    p = tmp_path / "pfc.txt"
    p.write_text(f"1 sw1 1 2 1 sw2:3\n{line}\n")
    with pytest.raises(TestbedError) as info:
        read_events(p)
    text = str(info.value)
    assert text.startswith(f"{p}:2: {field}"), text
    assert "\n" not in text


def test_missing_file_is_a_testbed_error(tmp_path):
    with pytest.raises(TestbedError, match="cannot read the PFC log"):
        read_events(tmp_path / "nope.txt")


# -------------------------------------------------------------- port stats
def test_stats_with_overlapping_causes_and_a_pause_open_at_the_end(tmp_path):
    events = [
        ev(1, "sw3", 9, 1, "sw4:3"),   # paused from 1 s ...
        ev(2, "sw3", 9, 1, "sw4:5"),   # ... held by a second cause too
        ev(3, "sw3", 9, 0, "sw4:3"),   # still held by sw4:5
        ev(4, "sw3", 9, 0, "sw4:5"),   # released at 4 s: one pause of 3 s
        ev(8, "sw3", 9, 1, "sw4:3"),   # paused again, never resumed
        ev(0.5, "gpu5", 1, 1, "sw3:9"),  # before the window starts
        ev(1.5, "gpu5", 1, 0, "sw3:9"),
    ]
    rows = port_stats(events, T0 + 1 * S, T0 + 11 * S)
    assert [r["queue"] for r in rows] == ["gpu5:p1", "sw3:9"]
    sw = by_queue(rows)["sw3:9"]
    assert sw["node"] == "sw3" and sw["port"] == 9
    assert sw["pauses"] == 2
    assert sw["paused_s"] == pytest.approx(3 + 3)  # 1..4 and 8..11 (open: counted until the window end)
    assert sw["longest_pause_s"] == pytest.approx(3)
    assert sw["paused_fraction"] == pytest.approx(0.6)
    gpu = by_queue(rows)["gpu5:p1"]
    assert gpu["pauses"] == 0  # its pause began before the window
    assert gpu["paused_s"] == pytest.approx(0.5) and gpu["paused_fraction"] == pytest.approx(0.05)

    out = write_port_stats_csv(tmp_path / "pfc_ports.csv", rows)
    with out.open() as fh:
        read = list(csv.DictReader(fh))
    assert tuple(read[0]) == PORT_STATS_COLUMNS
    assert read[1]["queue"] == "sw3:9" and float(read[1]["paused_s"]) == pytest.approx(6)


def test_stats_window_clips_and_counts_duplicate_causes():
    events = [ev(1, "sw1", 2, 1, "sw2:1"), ev(1.5, "sw1", 2, 1, "sw2:1"),  # same cause twice: count 2
              ev(2, "sw1", 2, 0, "sw2:1"), ev(5, "sw1", 2, 0, "sw2:1")]
    row = port_stats(events, T0, T0 + 4 * S)[0]
    assert row["pauses"] == 1
    assert row["paused_s"] == pytest.approx(3)  # 1..5 clipped to the window end at 4
    with pytest.raises(TestbedError, match="not after its start"):
        port_stats(events, T0 + S, T0 + S)


def test_transition_only_log_and_exit_release():
    """pfcd logs the pause with the first cause and the resume with the last one."""
    events = [ev(1, "sw1", 9, 1, "sw2:1"), ev(3, "sw1", 9, 0, "sw2:5"),
              ev(4, "sw1", 10, 1, "sw2:1"), ev(4.5, "sw1", 10, 1, "sw2:2"), ev(6, "sw1", 10, 0, "exit"),
              ev(7, "sw1", 11, 0, "sw2:1")]  # a resume with nothing held: ignored
    rows = by_queue(port_stats(events, T0, T0 + 10 * S))
    assert rows["sw1:9"]["paused_s"] == pytest.approx(2)
    assert rows["sw1:10"]["paused_s"] == pytest.approx(2) and rows["sw1:10"]["pauses"] == 1
    assert rows["sw1:11"]["pauses"] == 0 and rows["sw1:11"]["paused_s"] == 0


# ------------------------------------------------------------------ spread
def test_spread_over_a_three_level_chain():
    events = [
        ev(1, "sw4", 2, 1, "sw5:1"),    # sw5:1 is congested (not paused): root, sw4:2 is 1 hop
        ev(2, "sw3", 7, 1, "sw4:2"),    # sw4:2 is paused: sw3:7 is 2 hops
        ev(3, "gpu1", 1, 1, "sw3:7"),   # 3 hops
        ev(4, "gpu1", 1, 0, "sw3:7"),
        ev(5, "sw3", 7, 0, "sw4:2"),
        ev(6, "sw4", 2, 0, "sw5:1"),
        ev(7, "gpu2", 1, 1, "sw4:2"),   # sw4:2 no longer paused: now a root itself, gpu2 1 hop
    ]
    out = spread(events)
    assert out["roots"] == ["sw4:2", "sw5:1"]
    assert out["max_hops"] == 3
    assert out["hops_by_queue"] == {"gpu1:p1": 3, "gpu2:p1": 1, "sw3:7": 2, "sw4:2": 1}
    # order matters: the same events out of time order in the list are sorted first
    assert spread(list(reversed(events))) == out


def test_spread_takes_the_shortest_chain_of_a_cause_held_twice():
    events = [ev(1, "sw4", 2, 1, "sw5:1"), ev(2, "sw3", 7, 1, "sw4:2"),   # sw3:7 at 2 hops
              ev(3, "sw3", 7, 1, "sw9:9"),                                # and directly by a root: 1 hop
              ev(4, "sw2", 1, 1, "sw3:7")]                                # so sw2:1 is 2 hops
    out = spread(events)
    assert out["hops_by_queue"]["sw2:1"] == 2 and out["max_hops"] == 2
    assert spread([]) == {"roots": [], "max_hops": 0, "hops_by_queue": {}}


# ----------------------------------------------------------------- victims
@pytest.fixture(scope="module")
def zc16():
    f = build_fabric("zcube", gpus=16, gpus_per_switch=8)
    # sw1 holds port 1 of the odd GPUs; ports 9..12 are its 4 cables to sw2, which holds port 2 of GPUs 1..8;
    # destination h uses cable ((h - 1) % 8) // 2, so gpu1 and gpu2 (port 2) are both behind sw1:9
    assert f.peer("sw1", 9)[0] == "sw2" and f.peer("sw2", 1) == ("gpu1", 2) and f.peer("sw2", 2) == ("gpu2", 2)
    assert "sw1:9" in feeders(f)["sw2:1"]
    return f


def transfer(rid, src, dst, start_s, end_s, dst_port=2):
    sp = 1 if dst_port == 2 else 2
    return {"request_id": rid, "src": src, "dst": dst, "src_ip": addressing.ip_of(src, sp),
            "dst_ip": addressing.ip_of(dst, dst_port), "start_ns": T0 + int(start_s * S),
            "end_ns": T0 + int(end_s * S)}


def test_transfer_path_is_nic_queue_then_switch_queues(zc16):
    path, ambiguous = transfer_path(zc16, tables_of(zc16), "10.1.0.3", "10.2.0.2")
    assert path == {"gpu3:p1", "sw1:9", "sw2:2"} and not ambiguous


def test_victim_is_a_flow_held_by_congestion_it_does_not_cross(zc16):
    # sw2:1 (towards gpu1 port 2) is congested and pauses its feeder sw1:9 from 1 s to 3 s
    events = [ev(1, "sw1", 9, 1, "sw2:1"), ev(3, "sw1", 9, 0, "sw2:1")]
    transfers = [
        transfer("r-victim", 3, 2, 2, 5),     # over sw1:9 into sw2:2: held by sw2:1, which it does not cross
        transfer("r-culprit", 3, 1, 2, 5),    # over sw1:9 into sw2:1: contributes to the congestion
        transfer("r-other-cable", 3, 8, 2, 5),  # gpu8 is behind cable 3 (sw1:12): never paused
        transfer("r-too-late", 3, 2, 3.5, 6),  # same path as the victim, after the pause
        {**transfer("r-failed", 3, 2, 2, 5), "end_ns": None},  # never finished: not judged
    ]
    rows = victim_flows(events, transfers, zc16)
    assert [r["request_id"] for r in rows] == ["r-victim"]
    v = rows[0]
    assert (v["src"], v["dst"], v["paused_queue"], v["cause"]) == (3, 2, "sw1:9", "sw2:1")
    assert v["overlap_s"] == pytest.approx(1.0) and v["ambiguous"] is False and v["pairs"] == 1


def test_victim_through_its_own_nic_queue_and_open_pause(zc16):
    # gpu3's port 1 queue is paused by sw1:9 and never resumed; a flow on another cable is a victim
    events = [ev(1, "gpu3", 1, 1, "sw1:9")]
    transfers = [transfer("a", 3, 8, 2, 4), transfer("b", 3, 2, 2, 4), transfer("c", 5, 8, 2, 4)]
    rows = victim_flows(events, transfers, zc16)
    assert [(r["request_id"], r["paused_queue"], r["cause"]) for r in rows] == [("a", "gpu3:p1", "sw1:9")]
    assert rows[0]["overlap_s"] == pytest.approx(2.0)


def test_roft_victims_are_marked_ambiguous():
    f = build_fabric("roft", gpus=16)
    src_leaf, _ = f.attachment[(1, 1)]
    up = next(p for p, (peer, _) in sorted(f.switches[src_leaf].ports.items()) if peer.startswith("spine"))
    spine, spine_port = f.peer(src_leaf, up)
    # a spine queue towards gpu2's leaf is the congestion; the uplink that feeds it is paused
    dst_leaf = f.switch_of(2, 2)
    assert dst_leaf != src_leaf
    cause = f"{spine}:{f.ports_towards(spine, dst_leaf)[0]}"
    events = [ev(1, src_leaf, up, 1, cause), ev(2, src_leaf, up, 0, cause)]
    other = next(g for g in f.gpus() if f.switch_of(g, 2) not in (src_leaf, dst_leaf))
    rows = victim_flows(events, [transfer("x", 1, other, 0, 3)], f)
    assert len(rows) == 1 and rows[0]["ambiguous"] is True and rows[0]["paused_queue"] == f"{src_leaf}:{up}"


def test_victims_are_fast_for_5000_transfers_and_10000_events():
    f = build_fabric("zcube", gpus=32, gpus_per_switch=8)
    rng = random.Random(7)
    fd = feeders(f)
    pairs = [(c, u) for c, ups in fd.items() for u in ups]
    events, clock = [], 0
    while len(events) < 10000:
        cause, up = rng.choice(pairs)
        clock += rng.randint(1, 2_000_000)
        node, port = up.split(":")
        kind = 0 if node.startswith("gpu") else 1
        p = int(port.lstrip("p"))
        events.append(PauseEvent(clock, node, kind, p, 1, cause))
        events.append(PauseEvent(clock + rng.randint(100_000, 5_000_000), node, kind, p, 0, cause))
    transfers = []
    for i in range(5000):
        s, d = rng.sample(range(1, 33), 2)
        start = rng.randint(0, clock)
        transfers.append(transfer(i, s, d, 0, 0, dst_port=rng.choice((1, 2))) | {
            "start_ns": start, "end_ns": start + rng.randint(1_000_000, 50_000_000)})
    t = time.perf_counter()
    rows = victim_flows(events, transfers, f)
    assert time.perf_counter() - t < 5
    assert 0 < len(rows) < 5000

"""Measurement invariants (testbed.repetition.invariants): each fed a passing and a violating sample."""

from __future__ import annotations

import copy

import pytest

from testbed.repetition import invariants as inv

FRAME = 3014
RATE = 3_000_000.0
BURST = 18000

# a two-switch fabric: gpu1 -> a -> b -> gpu2 (and the reverse), one port each way
QUEUES = [
    {"qid": "gpu1:p1", "kind": "nic", "towards": "a"},
    {"qid": "gpu2:p1", "kind": "nic", "towards": "b"},
    {"qid": "a:1", "kind": "switch", "towards": "gpu1:p1"},
    {"qid": "a:2", "kind": "switch", "towards": "b"},
    {"qid": "b:1", "kind": "switch", "towards": "gpu2:p1"},
    {"qid": "b:2", "kind": "switch", "towards": "a"},
]


def row(b=0, p=0, d=0, q=0):
    return {"bytes": b, "packets": p, "drops": d, "backlog": q}


FIRST = {q["qid"]: row() for q in QUEUES}
# gpu1 sends 100 kB to gpu2 (through a:2, b:1); gpu2 sends 10 kB of ACKs back (through b:2, a:1)
LAST = {"gpu1:p1": row(100_000, 40), "a:2": row(100_000, 40), "b:1": row(100_000, 40),
        "gpu2:p1": row(10_000, 150), "b:2": row(10_000, 150), "a:1": row(10_000, 150)}
ROWS = [{"id": 1, "src_ip": "10.1.0.1", "bytes": 60_000, "received_bytes": 60_000, "verified": True},
        {"id": 2, "src_ip": "10.1.0.1", "bytes": 30_000, "received_bytes": 30_000, "verified": True},
        {"id": 3, "src_ip": "10.1.0.1", "bytes": 5_000, "received_bytes": 0, "verified": False}]


def last_with(**changes) -> dict:
    out = copy.deepcopy(LAST)
    for qid, fields in changes.items():
        out[qid.replace("_", ":")].update(fields)
    return out


# ----------------------------------------------------------------- counters
def test_counter_deltas_pass_and_fail():
    assert inv.counter_deltas(FIRST, LAST) == []
    bad = inv.counter_deltas(LAST, last_with(b_1={"bytes": 90_000}))
    assert bad == ["b:1: bytes went down by 10000 over the run (100000 -> 90000)"]


def test_a_missing_counter_is_not_zero():
    """The links.csv bug: a queue whose last sample had no bytes field (device already deleted)."""
    last = copy.deepcopy(LAST)
    del last["b:1"]["bytes"]
    assert inv.counter_deltas(FIRST, last) == ["b:1: no bytes counter in the last queue sample"]
    del last["a:2"]
    assert "a:2: missing from the last queue sample" in inv.counter_deltas(FIRST, last)


def test_counter_regressions_between_consecutive_samples():
    assert inv.counter_regressions(FIRST, LAST, 1.0, 2.0) == []
    bad = inv.counter_regressions(LAST, last_with(a_1={"drops": 0, "packets": 149}), 2.0, 3.0)
    assert bad == ["a:1: packets went down by 1 between samples at 2.000 and 3.000 s (150 -> 149)"]


def test_many_violations_are_capped():
    first = {f"q{i}": row(10) for i in range(30)}
    last = {f"q{i}": row(5) for i in range(30)}
    out = inv.counter_deltas(first, last)
    assert len(out) == inv.MAX_LINES + 1 and out[-1] == "... and 20 queue counters"


def test_utilization_bounds():
    tol = inv.utilization_tolerance(60.0, RATE, BURST, FRAME)
    # a minute at 3 Mbit/s is 3e6 / 8 x 60 = 22 500 000 B; one 18 000 B bucket over it: 0.0008 (0.08 %)
    assert tol == pytest.approx(0.0008, rel=1e-12)
    assert inv.utilization_bounds({"a:1": 0.5, "a:2": 1.0 + tol / 2}, tol) == []
    assert inv.utilization_bounds({"spine2:1": -0.0016}, tol) == ["spine2:1: utilization -0.0016 is negative"]
    over = inv.utilization_bounds({"a:2": 1.01}, tol)
    assert len(over) == 1 and over[0].startswith("a:2: utilization 1.0100 is over 1 + 0.0008")


def test_utilization_tolerance_grows_with_pfc_refills_and_read_time():
    # 10 resumes refill a whole bucket each, 10 pauses a frame each: (18 000 x 11 + 3 014 x 10) B = 228 140 B
    # over 22 500 000 B = 0.0101395...
    assert inv.utilization_tolerance(60.0, RATE, BURST, FRAME, pauses=10, resumes=10) == pytest.approx(
        0.010139555555555556, rel=1e-12)
    # a 0.6 s read: 375 000 B/s x 0.6 s = 225 000 B more, 0.01: 0.0008 + 0.01 = 0.0108
    assert inv.utilization_tolerance(60.0, RATE, BURST, FRAME, read_s=0.6) == pytest.approx(0.0108, rel=1e-12)


# ------------------------------------------------------------- conservation
def test_switch_feeds_from_the_queue_list():
    feeds = inv.switch_feeds(QUEUES)
    assert feeds == {"a": {"in": ["gpu1:p1", "b:2"], "out": ["a:1", "a:2"]},
                     "b": {"in": ["gpu2:p1", "a:2"], "out": ["b:1", "b:2"]}}


def test_conservation_holds_on_a_balanced_sample():
    margins: dict = {}
    assert inv.switch_conservation(QUEUES, FIRST, LAST, FRAME, margins=margins) == []
    assert margins["a"]["unaccounted"] == 0 and margins["fabric"]["unaccounted"] == 0


def test_conservation_counts_backlog_and_drops():
    # b holds 6 kB at the end and dropped 2 frames: in = out + queued + <= 2 frames
    last = last_with(b_1={"bytes": 88_000, "backlog": 6_000, "drops": 2})
    assert inv.switch_conservation(QUEUES, FIRST, last, FRAME) == []


def test_a_counted_drop_may_stand_for_the_rest_of_an_ovs_send_batch():
    # PFC off: b's queue dropped 1 packet but 5 frames never left (OVS freed the rest of its batch)
    last = last_with(b_1={"bytes": 100_000 - 5 * FRAME, "drops": 1})
    margins: dict = {}
    assert inv.switch_conservation(QUEUES, FIRST, last, FRAME, margins=margins) == []
    assert margins["b"]["beyond_counted_drops"] == 4 * FRAME
    # ... but not for more than a whole batch
    last = last_with(gpu1_p1={"bytes": 200_000}, a_2={"bytes": 200_000}, b_1={"bytes": 0, "drops": 1})
    assert inv.switch_conservation(QUEUES, FIRST, last, FRAME)[0] == (
        "b: 210000 B in, 10000 B out, +0 B queued, 1 drops: +200000 B unaccounted, allowed -12056 .. +108504 B")


def test_conservation_catches_lost_bytes():
    # b forwarded 40 kB less than came in, with nothing queued or dropped
    last = last_with(b_1={"bytes": 60_000})
    out = inv.switch_conservation(QUEUES, FIRST, last, FRAME)
    assert out[0] == ("b: 110000 B in, 70000 B out, +0 B queued, 0 drops: +40000 B unaccounted, "
                      "allowed -12056 .. +12056 B")


def test_conservation_catches_bytes_from_nowhere():
    last = last_with(a_2={"bytes": 150_000}, b_1={"bytes": 150_000})  # a sent 50 kB more than it got
    out = inv.switch_conservation(QUEUES, FIRST, last, FRAME)
    assert out and out[0].startswith("a: 110000 B in, 160000 B out") and "-50000 B unaccounted" in out[0]


def test_pfc_frames_widen_the_window_on_the_right_sides():
    # a:2 (a's queue towards b) paused 10 times: its XOFF/padded frames count as sent by a but never
    # came into a, and as into b but b never forwards them
    events = [(i * 10, "a:2", e) for i in range(10) for e in (1, 0)]
    ctl = inv.control_bytes(QUEUES, events, FRAME)
    assert ctl == {"a": {"in": 0, "out": 10 * (60 + FRAME) + 10 * 60, "nic": 0},
                   "b": {"in": 10 * (60 + FRAME) + 10 * 60, "out": 0, "nic": 0}}
    frames = 10 * (60 + 2000) + 10 * 60
    last = last_with(a_2={"bytes": 100_000 + frames})
    assert inv.switch_conservation(QUEUES, FIRST, last, FRAME) != []  # without the PFC allowance: a violation
    assert inv.switch_conservation(QUEUES, FIRST, last, FRAME, ctl) == []
    # a NIC's frames are not forwarded either: they stay unaccounted fabric-wide, within its NIC allowance
    events = [(i * 10, "gpu1:p1", e) for i in range(10) for e in (1, 0)]
    last = last_with(gpu1_p1={"bytes": 100_000 + frames})
    ctl = inv.control_bytes(QUEUES, events, FRAME)
    assert inv.switch_conservation(QUEUES, FIRST, last, FRAME, ctl) == []
    assert inv.switch_conservation(QUEUES, FIRST, last, FRAME) != []


def test_fabric_wide_conservation_is_tighter_than_per_switch():
    # b's queue towards a paused 10 times: a may see up to 31 kB of its PFC frames that it never
    # forwards. a loses 30 kB of b's traffic: hidden at a by that allowance, not by the fabric total
    events = [(i * 10, "b:2", e) for i in range(10) for e in (1, 0)]
    ctl = inv.control_bytes(QUEUES, events, FRAME)
    last = last_with(gpu2_p1={"bytes": 30_000}, b_2={"bytes": 30_000}, a_1={"bytes": 0})
    margins: dict = {}
    out = inv.switch_conservation(QUEUES, FIRST, last, FRAME, ctl, margins=margins)
    assert margins["a"]["unaccounted"] == 30_000 and margins["a"]["allowed"] == [-12056, 31340 + 12056]
    assert out == ["fabric: +30000 B sent by NICs but neither delivered, queued nor dropped, allowed "
                   "-12056 .. +12056 B (0 drops, 0 B of NIC PFC frames at most)"]


def test_conservation_says_when_it_cannot_check():
    last = copy.deepcopy(LAST)
    del last["b:2"]["bytes"]
    out = inv.switch_conservation(QUEUES, FIRST, last, FRAME)
    assert "a: conservation not checkable, no b:2 bytes in the first or last sample" in out


# ----------------------------------------------------------------- payload
def test_nic_sent_covers_payload():
    assert inv.nic_of_ip("10.2.1.3") == "gpu259:p2"
    assert inv.nic_sent_covers_payload(FIRST, LAST, ROWS) == []
    short = last_with(gpu1_p1={"bytes": 80_000})
    out = inv.nic_sent_covers_payload(FIRST, short, ROWS)
    assert out == ["gpu1:p1: its queue sent 80000 B, less than the 90000 B of payload receivers verified from it"]


def test_nic_total_check():
    rows = [{"id": 1, "src_ip": "10.1.0.1", "bytes": 200_000, "received_bytes": 200_000, "verified": True}]
    out = inv.nic_sent_covers_payload(FIRST, LAST, rows)
    assert "NIC queues sent 110000 B in all, less than the 200000 B of verified payload" in out


def test_verified_bytes_match_plan():
    assert inv.verified_bytes_match_plan(ROWS) == []
    bad = copy.deepcopy(ROWS)
    bad[1]["received_bytes"] = 29_000
    assert inv.verified_bytes_match_plan(bad) == [
        "2 verified transfers: receivers verified 89000 B but 90000 B were planned; 1 differ "
        "(e.g. transfer 2: 29000 of 30000 B)"]


# --------------------------------------------------------------------- PFC
def test_lossless():
    assert inv.lossless(QUEUES, FIRST, LAST) == []
    assert inv.lossless(QUEUES, FIRST, last_with(gpu1_p1={"drops": 3})) == []  # a host's own queue: not the fabric
    assert inv.lossless(QUEUES, FIRST, last_with(b_1={"drops": 3})) == ["b:1: dropped 3 packets with PFC on"]


def test_pauses_paired():
    ok = [(1, "a:2", 1), (2, "a:2", 0), (3, "gpu1:p1", 1), (4, "a:2", 1), (5, "a:2", 0), (6, "gpu1:p1", 1 - 1),
          (7, "b:2", 1)]
    assert inv.pauses_paired(ok) == []
    assert inv.open_pauses(ok) == ["b:2"]  # still paused at the end: allowed
    assert inv.pauses_paired([(1, "a:2", 1), (2, "a:2", 1), (3, "a:2", 0)]) == [
        "a:2: paused again at 2 ns without a resume of its pause at 1 ns"]
    assert inv.pauses_paired([(5, "b:2", 0)]) == ["b:2: resumed at 5 ns while not paused"]


# ---------------------------------------------------------------- together
def check(**kw):
    args = dict(span_s=60.0, rate_bps=RATE, burst_bytes=BURST, frame_bytes=FRAME, rows=ROWS, pfc_enabled=True,
                pause_events=[])
    args |= kw
    return inv.check_all(QUEUES, args.pop("first", FIRST), args.pop("last", LAST), **args)


def test_check_all_passes_a_healthy_run():
    res = check()
    assert res["ok"] is True and res["violations"] == []
    assert res["checked"] == ["queue_samples", "counters_monotonic", "utilization_bounds", "switch_conservation",
                              "nic_sent_covers_payload", "verified_bytes_match_plan", "pfc_lossless",
                              "pfc_pauses_paired"]
    assert "pfc_lossless" not in check(pfc_enabled=False)["checked"]


@pytest.mark.parametrize("kw, name", [
    ({"last": last_with(b_1={"bytes": -1})}, "counters_monotonic"),
    ({"regressions": ["a:1: bytes went down by 5 between samples at 1.000 and 2.000 s (10 -> 5)"]},
     "counters_monotonic"),
    ({"span_s": 0.2}, "utilization_bounds"),  # 100 kB in 0.2 s at 3 Mbit/s: 1.33 of the rate
    ({"last": last_with(b_1={"bytes": 50_000})}, "switch_conservation"),
    ({"last": last_with(gpu1_p1={"bytes": 50_000}, a_2={"bytes": 50_000}, b_1={"bytes": 50_000})},
     "nic_sent_covers_payload"),
    ({"rows": [dict(ROWS[0], received_bytes=1)]}, "verified_bytes_match_plan"),
    ({"last": last_with(a_2={"drops": 1, "bytes": 100_000 - FRAME}, b_1={"bytes": 100_000 - FRAME})},
     "pfc_lossless"),
    ({"pause_events": [(1, "a:2", 1), (2, "a:2", 1)]}, "pfc_pauses_paired"),
    ({"sampler_error": "sampling stopped after 3 samples: FileNotFoundError: /run/netns/tb-gpu1"}, "queue_samples"),
])
def test_check_all_fails_with_the_check_named(kw, name):
    res = check(**kw)
    assert res["ok"] is False
    assert res["violations"] and all(v.split(":")[0] in res["checked"] for v in res["violations"])
    assert any(v.startswith(f"{name}: ") for v in res["violations"]), res["violations"]


def test_a_switch_with_a_cut_cable_reports_its_loss_instead_of_failing_conservation():
    """Bytes flushed from a queue whose port lost carrier are counted by no drop counter."""
    from testbed.repetition.invariants import switch_conservation

    queues = [{"qid": "gpu1:p1", "kind": "nic", "towards": "sw1"}, {"qid": "sw1:5", "kind": "switch", "towards": "sw2"},
              {"qid": "sw2:1", "kind": "switch", "towards": "gpu2:p2"}]
    first = {q["qid"]: {"bytes": 0, "backlog": 0, "drops": 0} for q in queues}
    last = {"gpu1:p1": {"bytes": 1_000_000, "backlog": 0, "drops": 0},
            "sw1:5": {"bytes": 900_000, "backlog": 0, "drops": 0},
            "sw2:1": {"bytes": 900_000, "backlog": 0, "drops": 0}}
    strict = switch_conservation(queues, first, last, 3014)
    assert strict and strict[0].startswith("sw1:")
    margins: dict = {}
    assert switch_conservation(queues, first, last, 3014, margins=margins, cut=frozenset({"sw1"})) == []
    assert margins["sw1"]["lost_at_cut"] == 100_000 and "beyond_counted_drops" not in margins["sw1"]

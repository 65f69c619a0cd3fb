"""The experiment's ``twin`` section reaches the twin: each assumption issue 38's ablation varies changes what a
message does on a ZCube n=16 the way it says (one message gpu5:p1 -> gpu1:p2 on an idle connection), and the
defaults are the twin as built."""

from __future__ import annotations

import dataclasses

import pytest

from fabrics import addressing, build_fabric
from fabrics.datapath import DatapathConfig
from testbed.backends.base import LinkSettings
from testbed.backends.ns3 import apps, engine, plan, summarise
from testbed.backends.ns3.assumptions import DEFAULT, Assumptions
from testbed.repetition.settings import Twin

LINK = LinkSettings.of(DatapathConfig().validate(), 200e9)
SRC, DST = (5, 1), (1, 2)


def carried(nbytes: int, model: Assumptions = DEFAULT, start: float = 1.0) -> dict:
    """One message of ``nbytes`` at ``start`` (the connection opened at 0): its row, the switches on its path
    (``hops``) and the receiver's NIC frame bytes (``rx_nic``: its ACKs and acks)."""
    fabric = build_fabric("zcube", gpus=16)
    engine.load()
    engine.configure(LINK.mtu, 0, model)
    built = plan.build(fabric, LINK, None, 0, model=model)
    rows = [{"id": 0, "src": f"gpu{SRC[0]}", "dst": f"gpu{DST[0]}", "src_ip": addressing.ip_of(*SRC),
             "dst_ip": addressing.ip_of(*DST), "bytes": nbytes, "start": start}]
    try:
        sent, sampler = apps.carry(built, rows)
        row = summarise.merged_rows(sent, built.twin, key=lambda i, _r: i)[0]
        hops = len(plan.installed_path(built, SRC, DST))
        rx_nic = summarise.counters(built, sampler).link_bytes()[f"gpu{DST[0]}:p{DST[1]}"][1]
    finally:
        del built.twin
        engine.load().Destroy()
    assert row["verified"]
    return row | {"hops": hops, "rx_nic": rx_nic, "fct": row["end"] - row["start"]}


def test_the_experiments_twin_section_defaults_to_the_twin_as_built():
    assert Twin().model_dump() == dataclasses.asdict(DEFAULT)
    assert plan.CABLE_DELAY_S == 2e-6
    assert (DEFAULT.burst_bytes, DEFAULT.hop_delay_us, DEFAULT.send_delay_us, DEFAULT.tcp, DEFAULT.delack_count,
            DEFAULT.delack_timeout_ms, DEFAULT.initial_cwnd, DEFAULT.min_rto_ms) == \
        (None, 0.0, 0.0, "cubic", 2, 40.0, 10, 200.0)


def test_hop_cable_and_send_delays_add_their_time_where_they_act():
    base = carried(100)  # one segment: header and payload in one write
    assert base["hops"] >= 1
    hop = carried(100, Assumptions(hop_delay_us=50))
    assert hop["end"] - base["end"] == pytest.approx(base["hops"] * 50e-6, abs=1e-9)  # once per switch
    cable = carried(100, Assumptions(cable_delay_us=102))
    assert cable["end"] - base["end"] == pytest.approx((base["hops"] + 1) * 100e-6, abs=1e-9)  # once per cable
    send = carried(100, Assumptions(send_delay_us=300))
    assert send["end"] - base["end"] == pytest.approx(300e-6, abs=1e-9)  # once, before the write


def test_a_burst_lets_a_small_message_through_at_once_and_holds_a_large_one_to_the_rate():
    plain, burst = carried(10_000), carried(10_000, Assumptions(burst_bytes=18_000))
    assert plain["fct"] >= 10_000 * 8 / LINK.rate_bps  # serialised at the link rate at least once
    assert burst["fct"] < plain["fct"] / 20  # within the bucket: at the cables' speed
    big = carried(100_000, Assumptions(burst_bytes=18_000))
    # beyond the bucket the rest waits for tokens at the link rate, on the first link already
    assert big["fct"] >= (100_000 - 18_000) * 8 / LINK.rate_bps


def test_delayed_ack_count_and_initial_window_change_the_tcp_the_hosts_run():
    two, one = carried(100_000), carried(100_000, Assumptions(delack_count=1))
    # an ACK a segment instead of every second one: ~17 pure ACKs more from the receiver for 34 segments
    assert one["rx_nic"] - two["rx_nic"] >= 10 * 66
    slow = carried(60_000, Assumptions(initial_cwnd=1))
    assert slow["fct"] > carried(60_000)["fct"]  # more round trips before the window covers the message

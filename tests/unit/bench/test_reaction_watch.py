"""The reaction watch's pure parts: map rows as the kernel writes them, tc's listing, and when a stream moved."""

import socket
from pathlib import Path

from testbed.bench.reaction_watch import (
    KEY,
    PRIO,
    TCP,
    UDP,
    VAL,
    Row,
    clsact_devices,
    parse_row,
    stream_reactions,
    tc_lines,
)

MS = 1_000_000


def row(ifindex, first_ms, last_ms, sport=40000, epoch=1, proto=UDP, src="10.0.0.1", dst="10.0.1.2"):
    return Row(src, sport, dst, 5400, proto, ifindex, epoch, first_ms * MS, last_ms * MS, 10)


def test_parse_row_reads_addresses_in_network_order_and_ports_in_host_order():
    key = KEY.pack(socket.inet_aton("10.1.2.3"), socket.inet_aton("10.4.5.6"), 17, 40001, 5400, 17)
    assert len(key) == 20  # struct rw_key: 3 x u32, 2 x u16, u8, 3 pad bytes
    got = parse_row(key, VAL.pack(3, 100, 250, 7))
    assert got == Row("10.1.2.3", 40001, "10.4.5.6", 5400, 17, 17, 3, 100, 250, 7)
    assert got.stream == ("10.1.2.3", 40001, "10.4.5.6", 5400, 17)


def test_clsact_devices_are_read_from_tc_qdisc_show():
    shown = """qdisc noqueue 0: dev lo root refcnt 2
qdisc tbf 1: dev sw1-eth1 root refcnt 2 rate 3Mbit burst 3028b lat 0us
qdisc clsact ffff: dev sw1-eth1 parent ffff:fff1
qdisc bfifo 10: dev sw1-eth1 parent 1:1 limit 30000b
qdisc clsact ffff: dev gpu1-p1u parent ffff:fff1
"""
    assert clsact_devices(shown) == {"sw1-eth1", "gpu1-p1u"}


def test_tc_lines_add_clsact_only_where_missing_and_go_before_the_queue_watch():
    lines = tc_lines(["sw1-eth1", "sw1-eth2"], Path("/x/rw.o"), {"sw1-eth1"})
    assert lines == ["filter add dev sw1-eth1 egress prio 1 handle 1 bpf da obj /x/rw.o sec tc/react",
                     "qdisc add dev sw1-eth2 clsact",
                     "filter add dev sw1-eth2 egress prio 1 handle 1 bpf da obj /x/rw.o sec tc/react"]
    from pfc.queue_watch import tc_lines as queue_lines

    class Q:
        kind, dev, peer = "switch", "sw1-eth1", "sw1-eth1r"

    assert any(f"egress prio {PRIO + 1} " in line for line in queue_lines([Q()], Path("/q.o"), set()))


def test_a_stream_moved_by_the_switch_reacts_at_its_first_packet_on_a_new_port():
    cut = 5000
    rows = [row(7, 4700, 5030), row(8, 5041, 6400), row(9, 4700, 6400)]  # 7 dead; 9 a port used all along
    (r,) = stream_reactions(rows, 1, {7: cut * MS}, 6500 * MS)
    assert r["reaction_ms"] == 41.0 and r["into_dead_ms"] == 30.0 and r["ports_new"] == 1


def test_streams_that_never_used_the_dead_port_or_rows_of_another_epoch_do_not_count():
    rows = [row(8, 4700, 6000, sport=1), row(7, 4700, 4990, sport=2, epoch=0), row(8, 5100, 6000, sport=2, epoch=0)]
    assert stream_reactions(rows, 1, {7: 5000 * MS}, 6500 * MS) == []


def test_a_stream_that_never_left_by_another_port_before_the_clear_has_no_reaction():
    rows = [row(7, 4700, 6400, proto=TCP), row(8, 6600, 6700, proto=TCP)]  # after the clear: not a reaction
    (r,) = stream_reactions(rows, 1, {7: 5000 * MS}, 6500 * MS)
    assert r["reaction_ms"] is None and r["into_dead_ms"] == 1400.0 and r["proto"] == TCP


def test_the_first_new_port_counts_when_several_switches_move_a_stream():
    rows = [row(7, 4700, 5000), row(8, 5020, 6000), row(11, 5021, 6000), row(12, 5300, 6000)]
    (r,) = stream_reactions(rows, 1, {7: 5000 * MS, 30: 4000 * MS}, 6500 * MS)
    assert r["reaction_ms"] == 20.0 and r["into_dead_ms"] == 0.0 and r["ports_new"] == 3


def test_each_dead_port_counts_from_its_own_carrier_loss():
    # the cable's second end went down 60 ms after the first (one netlink call after the other)
    rows = [row(7, 4700, 5000, sport=1), row(8, 5030, 6000, sport=1),
            row(30, 4700, 5080, sport=2), row(31, 5090, 6000, sport=2)]
    got = stream_reactions(rows, 1, {7: 5000 * MS, 30: 5060 * MS}, 6500 * MS)
    assert [(r["sport"], r["reaction_ms"], r["into_dead_ms"]) for r in got] == [(1, 30.0, 0.0), (2, 30.0, 20.0)]

"""ovs_watch's pure parts: port-status lines of ``ovs-ofctl --timestamp monitor``, and which threads to raise."""

import calendar
import time

from testbed.bench.ovs_watch import parse_port_status, status_after, threads_to_raise

MONITOR = """2026-12-05 11:30:12.345: OFPT_PORT_STATUS (OF1.3) (xid=0x0): MOD: 9(sw1-eth9): addr:aa:bb:cc:dd:ee:09
     config:     0
     state:      0
     speed: 10000 Mbps now, 0 Mbps max
2026-12-05 11:30:12.346: OFPT_PORT_STATUS (OF1.3) (xid=0x0): MOD: 9(sw1-eth9): addr:aa:bb:cc:dd:ee:09
     config:     0
     state:      LINK_DOWN
     speed: 10000 Mbps now, 0 Mbps max
2026-12-05 11:30:13.845: OFPT_PORT_STATUS (OF1.3) (xid=0x0): MOD: 9(sw1-eth9): addr:aa:bb:cc:dd:ee:09
     config:     0
     state:      LIVE
2026-12-05 11:30:14.001: OFPT_PORT_STATUS (OF1.3) (xid=0x0): DEL: 3(sw1-eth3): addr:aa:bb:cc:dd:ee:03
     config:     0
     state:      0
"""
T0 = calendar.timegm(time.strptime("2026-12-05 11:30:12", "%Y-%m-%d %H:%M:%S"))


def test_port_status_lines_give_utc_times_ports_and_whether_the_link_went_down():
    got = parse_port_status(MONITOR)
    assert [(round(e["wall_s"] - T0, 3), e["port"], e["name"], e["reason"], e["down"]) for e in got] == [
        (0.345, 9, "sw1-eth9", "MOD", True), (0.346, 9, "sw1-eth9", "MOD", True),
        (1.845, 9, "sw1-eth9", "MOD", False),
        (2.001, 3, "sw1-eth3", "DEL", True)]
    assert parse_port_status("OFPT_HELLO\nnothing here") == []


def test_status_after_is_the_first_down_report_after_the_cut():
    events = parse_port_status(MONITOR)
    assert status_after(events, 9, T0 + 0.300, T0 + 1.5) == 45.0
    assert status_after(events, 9, T0 + 0.400, T0 + 1.5) is None  # the downs came before; the up is no down
    assert status_after(events, 3, T0 + 2.0, T0 + 3) == 1.0
    assert status_after(events, 9, T0 + 0.346, T0 + 1.5) == 0.0  # a ms of clock rounding is not negative


def test_threads_to_raise_leave_the_pmds_unless_asked():
    names = {1: "ovs-vswitchd", 2: "pmd-c01/id:7", 3: "revalidator5", 4: "handler1", 5: "urcu2"}
    assert threads_to_raise(names, "1") == [1, 3, 4]
    assert threads_to_raise(names, "all") == [1, 2, 3, 4, 5]
    assert threads_to_raise(names, "") == threads_to_raise(names, "0") == []

"""controller.session against fake switches: program, read back, compare, resync, cabling, status.

The fakes keep real tables (tests/support/fakes/datapath.py), so what the core sends is
what the read-back returns, and a fault injected into a table must show up in
the status the core reports.
"""

from __future__ import annotations

import itertools
import json
import logging

import pytest

from controller.rules import ETH_IPV4, FAST_FAILOVER, PRIO_MISS, PRIO_ROUTE, FlowSpec, GroupSpec
from controller.session import RESYNC_HOLD_S, FabricSessions, changes
from fabrics import addressing
from tests.support.fakes.datapath import FakeDatapath, FakeFabric
from tests.support.fakes.flow_table import FakeFlowTable
from tests.support.programs import fabric_programs

FABRICS = {
    "zcube16": {"kind": "zcube", "gpus": 16, "gpus_per_switch": 8},
    "roft16": {"kind": "roft", "gpus": 16},
}


def make_core(tmp_path, name="roft16", **config) -> FabricSessions:
    return FabricSessions({"fabric": FABRICS[name], "status_file": str(tmp_path / "status.json"), **config},
                          logging.getLogger("test-controller"))


def verified_fabric(core: FabricSessions, **options) -> FakeFabric:
    fake = FakeFabric(core.fabric, **options)
    fake.connect(core)
    fake.deliver(core)
    return fake


def states(core):
    return {name: s.state for name, s in core.sessions.items()}


def route(program):
    """A route rule of a program (the first)."""
    return next(f for f in program.flows if f.priority == PRIO_ROUTE)


# ------------------------------------------------------------- program and read back

def test_connect_reads_back_first_and_an_empty_switch_gets_groups_flows_and_a_barrier(tmp_path):
    core = make_core(tmp_path, "roft16")
    leaf = next(n for n, p in fabric_programs(core.fabric).items() if p.groups)
    program = core.sessions[leaf].program
    dp = FakeDatapath(program.dpid, ports=core.fabric.switches[leaf].ports)
    core.switch_connected(dp)
    assert dp.calls == [("request_ports",), ("request_groups",), ("request_flows", None)]  # nothing written yet
    assert core.sessions[leaf].state == {"connected": True, "installed": False, "verified": False,
                                       "connects": 1, "flows_read": 0, "mismatch": None, "miss_packets": 0}
    dp.deliver(core, limit=3)
    sent = dp.calls[3:]
    assert [c[0] for c in sent] == ["add_group"] * len(program.groups) + ["add_flow"] * len(program.flows) + ["barrier"]
    assert [c[1] for c in sent if c[0] == "add_group"] == program.groups
    assert [c[1] for c in sent if c[0] == "add_flow"] == program.flows


def test_a_switch_holding_other_rules_waits_for_every_switchs_ports_then_gets_only_the_difference(tmp_path):
    core = make_core(tmp_path, "roft16")
    leaf = next(n for n, p in fabric_programs(core.fabric).items() if p.groups)
    program = core.sessions[leaf].program
    dp = FakeDatapath(program.dpid, ports=core.fabric.switches[leaf].ports)
    for group in program.groups:
        dp.groups[group.group_id] = group
    for flow in program.flows:
        dp.install(flow)
    leftover = FlowSpec(5, (("eth_type", 0x86DD),), ())  # left over from an earlier life
    dp.install(leftover)
    core.switch_connected(dp)
    dp.deliver(core)
    assert len(dp.calls) == 3 and not core.sessions[leaf].state["verified"]  # the other switches' ports unknown
    core.tick(10.0)
    assert len(dp.calls) == 3
    core.tick(10.0 + RESYNC_HOLD_S)  # nobody else came: act on what is known
    assert dp.calls[3:] == [("delete_flow", leftover), ("barrier",)]
    dp.deliver(core)
    assert core.sessions[leaf].state["verified"] and (leftover.priority, leftover.match) not in dp.flows


@pytest.mark.parametrize("name", FABRICS)
def test_barrier_starts_the_read_back_and_a_faithful_switch_is_verified(tmp_path, name):
    core = make_core(tmp_path, name)
    fake = FakeFabric(core.fabric)
    fake.connect(core)
    for dp in fake.datapaths.values():
        assert dp.deliver(core, limit=3) == 3  # ports, groups, flows: an empty switch
        assert dp.calls[-1] == ("barrier",)
    assert not core.all_verified()
    for dp in fake.datapaths.values():
        assert dp.deliver(core, limit=1) == 1  # the barrier reply
        assert dp.calls[-2:] == [("request_groups",), ("request_flows", None)]  # every table
    fake.deliver(core)
    assert core.all_verified()
    for name_, st in states(core).items():
        program = core.sessions[name_].program
        assert st["installed"] and st["verified"] and st["mismatch"] is None
        assert st["flows_read"] == len(program.flows)


@pytest.mark.parametrize("name", FABRICS)
def test_what_the_core_installs_forwards_every_nic_pair_to_its_destination(tmp_path, name):
    """The tables the fakes hold after programming, not the plan, carry the packets."""
    core = make_core(tmp_path, name)
    fake = verified_fabric(core)
    f = core.fabric
    tables = {n: FakeFlowTable(dp.program(n)) for n, dp in fake.datapaths.items()}
    for (src, dst), p in itertools.product(itertools.product(f.gpus(), repeat=2), (1, 2)):
        s, d = (src, p), (dst, 3 - p)
        pkt = {"eth_type": ETH_IPV4, "ipv4_src": addressing.ip_of(*s), "ipv4_dst": addressing.ip_of(*d),
               "ip_proto": 6, "tp_src": 10000 + src, "tp_dst": 5201}
        switch, hops = f.attachment[s][0], 0
        while True:
            (out,) = tables[switch].forward(pkt)
            peer, peer_port = f.switches[switch].ports[out]
            hops += 1
            if peer.startswith("gpu"):
                assert (int(peer[3:]), peer_port) == d
                break
            assert hops < 4, (s, d)
            switch = peer


def test_multipart_flow_stats_are_compared_only_when_complete(tmp_path):
    core = make_core(tmp_path, "zcube16")
    session = next(iter(core.sessions.values()))
    dp = FakeDatapath(session.program.dpid, part_size=3)
    core.switch_connected(dp)
    dp.deliver(core, limit=5)  # ports, groups, flows (none), then after the program: barrier, groups
    parts = len(dp.pending)
    assert parts == -(-len(session.program.flows) // 3) and parts > 1
    dp.deliver(core, limit=parts - 1)
    assert not session.state["verified"] and session.state["flows_read"] == 0
    dp.deliver(core)
    assert session.state["verified"] and session.state["flows_read"] == len(session.program.flows)


# ------------------------------------------------------------- mismatch detection

def test_a_rule_the_switch_lost_is_reported_missing_and_holds_back_the_probes(tmp_path):
    core = make_core(tmp_path, "zcube16")
    victim = next(iter(core.sessions))
    lost = route(core.sessions[victim].program)
    fake = FakeFabric(core.fabric)
    fake.datapaths[victim].drop = lambda rule: rule == lost
    fake.connect(core)
    fake.deliver(core)
    st = core.sessions[victim].state
    assert st["installed"] and not st["verified"]
    assert st["mismatch"] == "1 rules missing, 0 unexpected"
    assert all(s["verified"] for n, s in states(core).items() if n != victim)
    core.tick(100.0)
    assert not core.cabling.probes_sent
    assert all(not dp.packets_out for dp in fake.datapaths.values())


def test_a_rule_added_behind_the_controllers_back_is_reported_unexpected(tmp_path):
    core = make_core(tmp_path, "zcube16")
    session = next(iter(core.sessions.values()))
    dp = FakeDatapath(session.program.dpid)
    core.switch_connected(dp)
    dp.install(FlowSpec(PRIO_ROUTE, (("eth_type", ETH_IPV4), ("ipv4_dst", "10.9.9.9")), (("output", 1),)))
    dp.deliver(core)
    assert session.state["mismatch"] == "0 rules missing, 1 unexpected" and not session.state["verified"]


def test_a_changed_action_counts_as_one_missing_and_one_unexpected(tmp_path):
    core = make_core(tmp_path, "zcube16")
    session = next(iter(core.sessions.values()))
    dp = FakeDatapath(session.program.dpid)
    core.switch_connected(dp)
    dp.deliver(core, limit=3)  # the program goes out
    flow = route(session.program)
    (_, port), = flow.actions
    dp.install(FlowSpec(flow.priority, flow.match, (("output", port + 1),)))  # same match: replaces it
    dp.deliver(core)
    assert session.state["mismatch"] == "1 rules missing, 1 unexpected"


def test_a_select_group_with_a_bucket_missing_is_a_mismatch(tmp_path):
    core = make_core(tmp_path, "roft16")
    session = next(s for s in core.sessions.values() if s.program.groups)
    group = session.program.groups[0]
    dp = FakeDatapath(session.program.dpid, drop=lambda rule: rule == group)
    core.switch_connected(dp)
    dp.groups[group.group_id] = GroupSpec(group.group_id, group.ports[:-1])  # instead of the dropped one
    dp.deliver(core)
    assert session.state["mismatch"] == "1 rules missing, 1 unexpected" and not session.state["verified"]


def test_unknown_datapath_is_ignored(tmp_path, caplog):
    core = make_core(tmp_path, "zcube16")
    before = json.dumps(states(core))
    dp = FakeDatapath(0xDEAD)
    with caplog.at_level(logging.WARNING, logger="test-controller"):
        core.switch_connected(dp)
        core.barrier_reply(dp)
        core.port_status(dp, 1, False)
        core.ports_reply(dp, [(1, False)])
        core.switch_gone(dp)
    assert dp.calls == []
    assert json.dumps(states(core)) == before and core.down == set()
    assert "unknown datapath 000000000000dead; ignored" in caplog.text


# ------------------------------------------------------------- reconnect

def test_a_reconnecting_switch_with_stale_rules_gets_only_the_difference(tmp_path):
    core = make_core(tmp_path, "roft16")
    fake = verified_fabric(core)
    name = next(n for n, s in core.sessions.items() if s.program.groups)
    old = fake.datapaths[name]
    core.switch_gone(old)
    st = core.sessions[name].state
    assert (st["connected"], st["installed"], st["verified"]) == (False, False, False)
    assert not core.all_verified()

    new = old.reconnected()  # the switch kept its tables, and picked up two stale rules
    stale_flow = FlowSpec(PRIO_ROUTE, (("eth_type", ETH_IPV4), ("ipv4_dst", "10.9.9.9")), ())
    new.install(stale_flow)
    new.groups[99] = GroupSpec(99, (1,))
    core.switch_connected(new)
    new.deliver(core)
    assert new.calls[3:6] == [("delete_flow", stale_flow), ("delete_group", 99), ("barrier",)]
    assert st["connected"] and st["verified"] and st["connects"] == 2 and st["mismatch"] is None
    program = core.sessions[name].program
    assert set(new.flows.values()) == set(program.flows) and set(new.groups.values()) == set(program.groups)
    assert core.all_verified()


def test_a_late_disconnect_of_the_old_connection_leaves_the_new_one_alone(tmp_path):
    core = make_core(tmp_path, "zcube16")
    fake = verified_fabric(core)
    name, old = next(iter(fake.datapaths.items()))
    new = FakeDatapath(old.dpid)
    core.switch_connected(new)  # the switch came back before its old connection was declared dead
    new.deliver(core)
    core.switch_gone(old)
    st = core.sessions[name].state
    assert st["connected"] and st["verified"] and st["connects"] == 2
    core.switch_gone(new)
    assert not st["connected"] and not st["verified"]
    core.switch_gone(new)  # a second notice changes nothing
    assert st["connects"] == 2


def test_late_replies_of_a_replaced_connection_are_dropped(tmp_path):
    core = make_core(tmp_path, "zcube16")
    session = next(iter(core.sessions.values()))
    old = FakeDatapath(session.program.dpid)
    core.switch_connected(old)  # its read-back is still on the way
    new = FakeDatapath(session.program.dpid)
    core.switch_connected(new)
    old.deliver(core)
    assert old.calls == [("request_ports",), ("request_groups",), ("request_flows", None)]  # nothing sent on it
    new.deliver(core)
    assert session.state["verified"] and session.state["connects"] == 2


def test_a_mismatch_is_cleared_by_a_clean_reconnect(tmp_path):
    core = make_core(tmp_path, "zcube16")
    session = next(iter(core.sessions.values()))
    lost = route(session.program)
    bad = FakeDatapath(session.program.dpid, drop=lambda rule: rule == lost)
    core.switch_connected(bad)
    bad.deliver(core)
    assert session.state["mismatch"]
    core.switch_gone(bad)
    good = FakeDatapath(session.program.dpid)
    core.switch_connected(good)
    assert session.state["mismatch"] is None
    good.deliver(core)
    assert session.state["verified"]


# ------------------------------------------------------------- counters

def test_table_miss_counters_are_polled_every_fourth_tick_without_verifying_again(tmp_path):
    core = make_core(tmp_path, "zcube16")
    fake = verified_fabric(core)
    name, dp = next(iter(fake.datapaths.items()))
    miss = next(f for f in core.sessions[name].program.flows if f.priority == PRIO_MISS)
    dp.count(miss, 7)
    del dp.flows[(PRIO_ROUTE, route(core.sessions[name].program).match)]  # a poll does not re-verify
    for t in range(3):
        core.tick(10.0 + t)
        assert ("request_flows", 0) not in dp.calls
    core.tick(13.0)
    assert all(d.calls.count(("request_flows", 0)) == 1 for d in fake.datapaths.values())
    fake.deliver(core)
    st = core.sessions[name].state
    assert st["miss_packets"] == 7 and st["verified"] and st["mismatch"] is None
    assert st["flows_read"] == len(core.sessions[name].program.flows) - 1
    assert core.status(14.0)["miss_packets"] == 7


def test_a_disconnected_switch_is_not_polled(tmp_path):
    core = make_core(tmp_path, "zcube16")
    fake = verified_fabric(core)
    name, dp = next(iter(fake.datapaths.items()))
    core.switch_gone(dp)
    for t in range(4):
        core.tick(float(t))
    assert ("request_flows", 0) not in dp.calls


def test_a_switch_with_a_mismatch_is_not_polled_so_it_stays_unverified(tmp_path):
    core = make_core(tmp_path, "zcube16")
    victim = next(iter(core.sessions))
    lost = route(core.sessions[victim].program)
    fake = FakeFabric(core.fabric)
    fake.datapaths[victim].drop = lambda rule: rule == lost
    fake.connect(core)
    fake.deliver(core)
    fake.datapaths[victim].install(lost)  # the rule shows up later: only a reconnect verifies again
    for t in range(4):
        core.tick(float(t))
    fake.deliver(core)
    assert ("request_flows", 0) not in fake.datapaths[victim].calls
    assert not core.sessions[victim].state["verified"]


# ------------------------------------------------------------- cabling

@pytest.mark.parametrize("name", FABRICS)
def test_probes_go_out_once_everything_is_verified_and_confirm_every_cable(tmp_path, name):
    core = make_core(tmp_path, name)
    fake = FakeFabric(core.fabric)
    fake.connect(core)
    core.tick(1.0)
    assert not core.cabling.probes_sent and all(not dp.packets_out for dp in fake.datapaths.values())
    fake.deliver(core)
    core.tick(2.0)
    expected = {(n, p) for n, sw in core.fabric.switches.items() for p, (peer, _) in sw.ports.items()
                if not peer.startswith("gpu")}
    sent = {(n, port) for n, dp in fake.datapaths.items() for port, _ in dp.packets_out}
    assert sent == expected and sum(len(dp.packets_out) for dp in fake.datapaths.values()) == len(expected)
    assert fake.carry_packets(core) == len(expected)
    cabling = core.status(3.0)["cabling"]
    assert cabling == {"probes_sent": True, "expected": len(expected), "confirmed": len(expected), "wrong": {}}
    core.tick(10.0)  # nothing wrong: no more probes
    assert all(not dp.packets_out for dp in fake.datapaths.values())


def test_swapped_cables_are_reported_with_what_each_port_reaches(tmp_path):
    core = make_core(tmp_path, "roft16")
    fake = verified_fabric(core)
    sw = core.fabric.switches
    a = b = "leaf1"
    pa = next(p for p, (peer, _) in sw[a].ports.items() if peer == "spine1")
    pb = next(p for p, (peer, _) in sw[b].ports.items() if peer == "spine2")
    far_a, far_b = "spine1", "spine2"
    core.tick(1.0)
    fake.carry_packets(core, miswire={(a, pa): far_b, (b, pb): far_a})
    cabling = core.cabling.result()
    assert cabling["wrong"] == {f"{a}-eth{pa}": {"expected": far_a, "found": far_b},
                                f"{b}-eth{pb}": {"expected": far_b, "found": far_a}}
    assert cabling["confirmed"] == cabling["expected"] - 2


def test_a_lost_probe_is_sent_again_after_two_seconds(tmp_path):
    core = make_core(tmp_path, "zcube16")
    fake = verified_fabric(core)
    lost_switch = next(iter(fake.datapaths))
    core.tick(100.0)
    n_probes = sum(len(dp.packets_out) for dp in fake.datapaths.values())
    fake.carry_packets(core, lose=lambda s, p: s == lost_switch)
    wrong = core.cabling.result()["wrong"]
    assert wrong and all(w["found"] is None and p.startswith(f"{lost_switch}-eth") for p, w in wrong.items())
    core.tick(101.5)
    assert all(not dp.packets_out for dp in fake.datapaths.values())
    core.tick(102.5)
    assert sum(len(dp.packets_out) for dp in fake.datapaths.values()) == n_probes  # every port again
    fake.carry_packets(core)
    assert core.cabling.result()["wrong"] == {}


def test_a_switch_without_its_probe_rule_confirms_no_cable(tmp_path):
    core = make_core(tmp_path, "zcube16")
    fake = verified_fabric(core)
    victim = next(iter(fake.datapaths))
    probe_rule = next(f for f in core.sessions[victim].program.flows if f.actions == (("controller", 0),))
    del fake.datapaths[victim].flows[(probe_rule.priority, probe_rule.match)]
    core.tick(1.0)
    fake.carry_packets(core)
    wrong = core.cabling.result()["wrong"]
    assert wrong and all(w["expected"] == victim and w["found"] is None for w in wrong.values())


def test_packets_that_are_not_probes_are_ignored(tmp_path):
    core = make_core(tmp_path, "zcube16")
    dp = FakeDatapath(next(iter(core.sessions.values())).program.dpid)
    core.packet_in(dp, b"\xff" * 12 + b"\x08\x00" + b"\0" * 46)
    core.packet_in(dp, b"short")
    assert core.cabling.seen == {}


# ------------------------------------------------------------- status file and PFC

def test_every_tick_rewrites_the_status_file(tmp_path):
    core = make_core(tmp_path, "zcube16")
    fake = FakeFabric(core.fabric)
    fake.connect(core)
    core.tick(50.0)
    doc = json.loads((tmp_path / "status.json").read_text())
    assert doc["framework"] == "os_ken" and doc["updated"] == 50.0 and doc["pfc"] is None
    assert set(doc["switches"]) == set(core.fabric.switches)
    assert all(s["connected"] and not s["installed"] for s in doc["switches"].values())
    assert doc["cabling"]["probes_sent"] is False and doc["miss_packets"] == 0
    fake.deliver(core)
    core.tick(51.0)
    doc = json.loads((tmp_path / "status.json").read_text())
    assert all(s["verified"] for s in doc["switches"].values()) and doc["cabling"]["probes_sent"]
    assert not (tmp_path / "status.json.tmp").exists()


class FakeProcess:
    pid = 4242
    start = 987654  # its start time (/proc/PID/stat field 22), reported beside the pid for who stops it

    def __init__(self):
        self.code = None

    def poll(self):
        return self.code


def pfc_core(tmp_path, start):
    return FabricSessions({"fabric": FABRICS["zcube16"], "status_file": str(tmp_path / "status.json"),
                           "state_dir": str(tmp_path), "pfc": {"enabled": True}},
                          logging.getLogger("test-controller"), start_pfc=start)


def test_pfc_daemon_starts_once_after_every_switch_is_verified_and_its_exit_is_an_error(tmp_path):
    started = []
    proc = FakeProcess()

    def start(fabric, config):
        started.append((fabric, config["state_dir"]))
        return proc

    core = pfc_core(tmp_path, start)
    fake = FakeFabric(core.fabric)
    fake.connect(core)
    core.tick(1.0)
    assert started == []
    fake.deliver(core)
    (tmp_path / "pfc_status.json").write_text(json.dumps({"ready": True, "queues": 3}))
    core.tick(2.0)
    core.tick(3.0)
    assert started == [(core.fabric, str(tmp_path))]
    assert core.status(4.0)["pfc"] == {"ready": True, "queues": 3, "pid": 4242, "start": 987654}
    proc.code = 1
    pfc = core.status(5.0)["pfc"]
    assert pfc["ready"] is False and pfc["error"] == "pfcd exited with status 1 (see pfcd.log)"
    core.tick(6.0)
    assert len(started) == 1


def test_a_pfc_daemon_that_fails_to_start_is_reported_and_not_retried(tmp_path):
    calls = []

    def start(fabric, config):
        calls.append(1)
        raise RuntimeError("no clang")

    core = pfc_core(tmp_path, start)
    fake = verified_fabric(core)
    core.tick(1.0)
    core.tick(2.0)
    assert calls == [1]
    assert core.status(3.0)["pfc"] == {"error": "RuntimeError: no clang"}
    assert fake.carry_packets(core) > 0  # the cabling check goes on regardless


# ------------------------------------------------------------- failures: port status and repair

def carry(core: FabricSessions, fake: FakeFabric) -> set[tuple[str, int]]:
    """Send a packet for every cross-plane NIC pair (many 5-tuples) through what the switches hold now, skipping
    buckets on ports without link as the switches do; every one must arrive. The (switch, port)s used."""
    f = core.fabric
    tables = {n: FakeFlowTable(dp.program(n), down=dp.down()) for n, dp in fake.datapaths.items()}
    used = set()
    for (src, dst), p in itertools.product(itertools.product(f.gpus(), repeat=2), (1, 2)):
        s, d = (src, p), (dst, 3 - p)
        for tp_src in range(10000 + src, 10008 + src):
            pkt = {"eth_type": ETH_IPV4, "ipv4_src": addressing.ip_of(*s), "ipv4_dst": addressing.ip_of(*d),
                   "ip_proto": 6, "tp_src": tp_src, "tp_dst": 5201}
            switch = f.attachment[s][0]
            for _ in range(4):
                (out,) = tables[switch].forward(pkt)
                used.add((switch, out))
                peer, peer_port = f.switches[switch].ports[out]
                if peer.startswith("gpu"):
                    assert (int(peer[3:]), peer_port) == d
                    break
                switch = peer
            else:
                raise AssertionError(f"{s} -> {d} did not arrive")
    return used


def calls_since(fake: FakeFabric, marks: dict[str, int]) -> dict[str, list]:
    return {n: dp.calls[marks[n]:] for n, dp in fake.datapaths.items()}


def marks(fake: FakeFabric) -> dict[str, int]:
    return {n: len(dp.calls) for n, dp in fake.datapaths.items()}


def holds_program(core: FabricSessions, fake: FakeFabric, programs) -> bool:
    return all(set(dp.flows.values()) == set(programs[n].flows) and set(dp.groups.values()) == set(programs[n].groups)
               for n, dp in fake.datapaths.items())


def test_roft_a_dead_uplink_is_skipped_at_once_then_modified_out_of_its_groups_and_back_on_port_up(tmp_path):
    """ROFT n=16: leaf1's uplinks 5, 6 go to spine1 (its ports 1, 2), 7, 8 to spine2; group 1 of leaf1 is the
    uplink set, group 1 of spine1 the cables to leaf1."""
    core = make_core(tmp_path, "roft16")
    fake = verified_fabric(core)
    planned = fabric_programs(core.fabric)
    assert fake.datapaths["leaf1"].groups[1] == GroupSpec(1, (5, 6, 7, 8))
    assert fake.datapaths["spine1"].groups[1] == GroupSpec(1, (1, 2))
    fake.datapaths["leaf1"].set_port(5, False)
    fake.datapaths["spine1"].set_port(1, False)
    used = carry(core, fake)  # before the controller hears of it: the watch ports keep traffic off the cable
    assert ("leaf1", 5) not in used and ("spine1", 1) not in used and ("leaf1", 6) in used

    before = marks(fake)
    core.port_status(fake.datapaths["leaf1"], 5, False)
    core.port_status(fake.datapaths["spine1"], 1, False)  # the same cable: nothing more to do
    sent = calls_since(fake, before)
    assert sent["leaf1"] == [("modify_group", GroupSpec(1, (6, 7, 8))), ("barrier",)]
    assert sent["spine1"] == [("modify_group", GroupSpec(1, (2,))), ("barrier",)]
    assert all(calls == [] for n, calls in sent.items() if n not in ("leaf1", "spine1"))
    assert core.status(1.0)["ports_down"] == ["leaf1-eth5", "spine1-eth1"]
    fake.deliver(core)
    assert core.all_verified() and fake.datapaths["leaf1"].groups[1] == GroupSpec(1, (6, 7, 8))
    assert ("leaf1", 5) not in carry(core, fake)

    before = marks(fake)
    fake.cut(core, "leaf1", 5, live=True)
    sent = calls_since(fake, before)
    assert sent["leaf1"] == [("modify_group", GroupSpec(1, (5, 6, 7, 8))), ("barrier",)]
    assert sent["spine1"] == [("modify_group", GroupSpec(1, (1, 2))), ("barrier",)]
    fake.deliver(core)
    assert core.all_verified() and holds_program(core, fake, planned) and core.status(2.0)["ports_down"] == []
    assert not any(c[0].startswith("delete") for dp in fake.datapaths.values() for c in dp.calls)


def test_roft_leaves_stop_sending_a_leafs_traffic_to_a_spine_that_lost_that_leaf(tmp_path):
    core = make_core(tmp_path, "roft16")
    fake = verified_fabric(core)
    planned = fabric_programs(core.fabric)
    fake.cut(core, "leaf1", 5)
    before = marks(fake)
    fake.cut(core, "leaf1", 6)  # spine1 has no cable to leaf1 left
    sent = calls_since(fake, before)
    assert sent["leaf1"] == [("modify_group", GroupSpec(1, (7, 8))), ("barrier",)]
    assert sent["spine1"] == [("modify_group", GroupSpec(1, ())), ("barrier",)]
    to_leaf1 = [f for f in planned["leaf2"].flows if f.match_dict.get("ipv4_dst") in
                ("10.1.0.1", "10.1.0.9", "10.2.0.1", "10.2.0.9")]  # GPUs 1 and 9 are leaf1's
    assert [f.actions for f in to_leaf1] == [(("group", 1),)] * 4
    for leaf in (f"leaf{j}" for j in range(2, 9)):  # a group of spine2's uplinks for leaf1's four addresses
        assert sent[leaf] == ([("add_group", GroupSpec(2, (7, 8)))]
                              + [("add_flow", FlowSpec(f.priority, f.match, (("group", 2),))) for f in to_leaf1]
                              + [("barrier",)]), leaf
    fake.deliver(core)
    assert core.all_verified()
    used = carry(core, fake)
    assert not {("spine1", 1), ("spine1", 2)} & used and ("leaf2", 5) in used  # leaf2 -> spine1 still for others

    before = marks(fake)
    fake.cut(core, "leaf1", 6, live=True)
    sent = calls_since(fake, before)
    assert sent["leaf2"] == [("add_flow", f) for f in to_leaf1] + [("delete_group", 2), ("barrier",)]
    fake.cut(core, "leaf1", 5, live=True)
    fake.deliver(core)
    assert core.all_verified() and holds_program(core, fake, planned)


def test_zcube_without_parallel_cables_leaves_the_detour_to_the_hosts(tmp_path):
    core = FabricSessions({"fabric": {"kind": "zcube", "gpus": 16, "gpus_per_switch": 8, "cables": 1},
                           "status_file": str(tmp_path / "status.json")}, logging.getLogger("test-controller"))
    fake = verified_fabric(core)
    before = marks(fake)
    fake.cut(core, "sw1", 10)  # sw1 - sw4
    assert all(calls == [] for calls in calls_since(fake, before).values())
    assert core.status(1.0)["ports_down"] == ["sw1-eth10", "sw4-eth9"] and core.all_verified()


def test_zcube_parallel_cables_fail_over_to_a_sibling_and_the_dead_one_leaves_the_groups(tmp_path):
    """ZCube n=16, k=8 has 4 cables per odd-even pair: sw1 ports 9-12 go to sw2 (its ports 9-12)."""
    core = make_core(tmp_path, "zcube16")
    fake = verified_fabric(core)
    assert core.fabric.ports_towards("sw1", "sw2") == [9, 10, 11, 12]
    to_sw2 = {g.ports for g in fake.datapaths["sw1"].groups.values() if 9 in g.ports}
    assert to_sw2 == {(9, 10, 11, 12), (10, 11, 12, 9), (11, 12, 9, 10), (12, 9, 10, 11)}
    fake.datapaths["sw1"].set_port(9, False)
    fake.datapaths["sw2"].set_port(9, False)
    assert not {("sw1", 9), ("sw2", 9)} & carry(core, fake)  # fast failover, before the controller hears of it
    before = marks(fake)
    core.port_status(fake.datapaths["sw1"], 9, False)
    sent = calls_since(fake, before)
    for switch in ("sw1", "sw2"):
        mods = [c[1] for c in sent[switch][:-1]]
        assert sent[switch][-1] == ("barrier",) and len(mods) == 4
        assert all(c == "modify_group" for c, _ in sent[switch][:-1])
        assert all(g.kind == FAST_FAILOVER and 9 not in g.ports and len(g.ports) == 3 for g in mods)
    # (9, 10, 11, 12) and (10, 11, 12, 9) both become (10, 11, 12): two groups, one bucket list
    assert {c[1].ports for c in sent["sw1"][:-1]} == {(10, 11, 12), (11, 12, 10), (12, 10, 11)}
    fake.deliver(core)
    assert core.all_verified()


@pytest.mark.parametrize("name", FABRICS)
def test_a_restarted_controller_leaves_switches_that_hold_their_program_alone(tmp_path, name):
    core = make_core(tmp_path, name)
    fake = verified_fabric(core)
    for dp in fake.datapaths.values():
        dp.count(route(dp.program()), 5)  # traffic has flowed
    held = {n: (dict(dp.flows), dict(dp.groups), dict(dp.counters)) for n, dp in fake.datapaths.items()}
    restarted = make_core(tmp_path, name)
    fake.reconnect(restarted)
    fake.deliver(restarted)
    for n, dp in fake.datapaths.items():
        assert dp.calls == [("request_ports",), ("request_groups",), ("request_flows", None)], n  # no delete, no add
        assert (dp.flows, dp.groups, dp.counters) == held[n]
    assert restarted.all_verified()


def test_a_controller_restarted_during_a_failure_learns_it_from_the_ports_and_changes_nothing(tmp_path):
    core = make_core(tmp_path, "roft16")
    fake = verified_fabric(core)
    fake.cut(core, "leaf1", 5)
    fake.cut(core, "leaf1", 6)
    fake.deliver(core)
    assert core.all_verified()
    restarted = make_core(tmp_path, "roft16")
    fake.reconnect(restarted, order=["leaf2"])  # leaf2 holds a repair for a failure it cannot see itself
    fake.datapaths["leaf2"].deliver(restarted)
    assert len(fake.datapaths["leaf2"].calls) == 3 and not restarted.sessions["leaf2"].state["verified"]
    fake.reconnect(restarted, order=[n for n in fake.datapaths if n != "leaf2"])
    fake.deliver(restarted)
    assert restarted.all_verified()
    assert all(len(dp.calls) == 3 for dp in fake.datapaths.values())
    assert restarted.status(1.0)["ports_down"] == ["leaf1-eth5", "leaf1-eth6", "spine1-eth1", "spine1-eth2"]


def test_a_repair_sent_behind_a_counter_poll_is_not_taken_for_a_mismatch(tmp_path, caplog):
    core = make_core(tmp_path, "roft16")
    fake = verified_fabric(core)
    for t in range(4):
        core.tick(float(t))  # the 4th tick polls every switch's counters
    assert all(dp.pending for dp in fake.datapaths.values())
    fake.cut(core, "leaf1", 5)
    with caplog.at_level(logging.ERROR, logger="test-controller"):
        fake.deliver(core)
    assert "mismatch" not in caplog.text and core.all_verified()


def test_ports_the_model_has_no_cable_on_are_ignored(tmp_path):
    core = make_core(tmp_path, "zcube16")
    fake = verified_fabric(core)
    before = marks(fake)
    core.port_status(fake.datapaths["sw1"], 1000, False)  # the receive (afxdp) port
    core.ports_reply(fake.datapaths["sw1"], [(0xFFFFFFFE, False)])  # LOCAL
    assert core.down == set() and all(c == [] for c in calls_since(fake, before).values())


def test_changes_turn_what_a_switch_holds_into_its_program_in_a_safe_order():
    miss = FlowSpec(PRIO_MISS, (), ())
    a = FlowSpec(PRIO_ROUTE, (("ipv4_dst", "10.1.0.1"),), (("group", 1),))
    b = FlowSpec(PRIO_ROUTE, (("ipv4_dst", "10.1.0.2"),), (("output", 3),))
    b_old = FlowSpec(PRIO_ROUTE, (("ipv4_dst", "10.1.0.2"),), (("group", 7),))
    stray = FlowSpec(PRIO_ROUTE, (("ipv4_dst", "10.9.9.9"),), ())
    want = type("P", (), {"flows": [miss, a, b], "groups": [GroupSpec(1, (5, 6)), GroupSpec(2, (7,))]})
    have_groups = {GroupSpec(1, (5,)), GroupSpec(7, (8,))}
    assert changes(want, {miss, a, b_old, stray}, have_groups) == [
        ("modify_group", GroupSpec(1, (5, 6))), ("add_group", GroupSpec(2, (7,))),
        ("add_flow", b), ("delete_flow", stray), ("delete_group", 7)]
    assert changes(want, {miss, a, b}, {GroupSpec(1, (5, 6)), GroupSpec(2, (7,))}) == []

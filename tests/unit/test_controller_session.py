"""controller.session against fake switches: program, read back, compare, resync, cabling, status.

The fakes keep real tables (tests/fakes/datapath.py), so what the core sends is
what the read-back returns, and a fault injected into a table must show up in
the status the core reports.
"""

from __future__ import annotations

import itertools
import json
import logging

import pytest

from controller.rules import ETH_IPV4, PRIO_MISS, PRIO_ROUTE, FlowSpec, GroupSpec, fabric_programs
from controller.session import FabricSessions
from testbed.fabric import addressing
from tests.fakes.datapath import FakeDatapath, FakeFabric
from tests.fakes.flow_table import FakeFlowTable

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

def test_connect_wipes_the_switch_then_sends_groups_flows_and_a_barrier(tmp_path):
    core = make_core(tmp_path, "roft16")
    leaf = next(n for n, p in fabric_programs(core.fabric).items() if p.groups)
    program = core.sessions[leaf].program
    dp = FakeDatapath(program.dpid)
    dp.install(FlowSpec(5, (("eth_type", 0x86DD),), ()))  # left over from an earlier life
    core.switch_connected(dp)
    kinds = [c[0] for c in dp.calls]
    assert kinds == ["clear"] + ["add_group"] * len(program.groups) + ["add_flow"] * len(program.flows) + ["barrier"]
    assert [c[1] for c in dp.calls if c[0] == "add_group"] == program.groups
    assert [c[1] for c in dp.calls if c[0] == "add_flow"] == program.flows
    assert core.sessions[leaf].state == {"connected": True, "installed": False, "verified": False,
                                       "connects": 1, "flows_read": 0, "mismatch": None, "miss_packets": 0}


@pytest.mark.parametrize("name", FABRICS)
def test_barrier_starts_the_read_back_and_a_faithful_switch_is_verified(tmp_path, name):
    core = make_core(tmp_path, name)
    fake = FakeFabric(core.fabric)
    fake.connect(core)
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
    dp.deliver(core, limit=2)  # barrier, groups
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
        core.switch_gone(dp)
    assert dp.calls == []
    assert json.dumps(states(core)) == before
    assert "unknown datapath 000000000000dead; ignored" in caplog.text


# ------------------------------------------------------------- reconnect

def test_a_reconnecting_switch_is_wiped_and_programmed_again(tmp_path):
    core = make_core(tmp_path, "roft16")
    fake = verified_fabric(core)
    name = next(n for n, s in core.sessions.items() if s.program.groups)
    old = fake.datapaths[name]
    core.switch_gone(old)
    st = core.sessions[name].state
    assert (st["connected"], st["installed"], st["verified"]) == (False, False, False)
    assert not core.all_verified()

    new = FakeDatapath(old.dpid)
    new.install(FlowSpec(PRIO_ROUTE, (("eth_type", ETH_IPV4), ("ipv4_dst", "10.9.9.9")), ()))  # stale
    new.groups[99] = GroupSpec(99, (1,))
    core.switch_connected(new)
    new.deliver(core)
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
    assert core.status(4.0)["pfc"] == {"ready": True, "queues": 3, "pid": 4242}
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

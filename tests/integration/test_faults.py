"""Faults on a real fabric: a cut cable loses carrier at both ends, the switches route around it, the
controller repairs and restores its groups and reads them back; a restarted controller changes nothing.
(A whole run with faults: test_fault_run.py, apart because it brings up its own fabrics.)"""

from __future__ import annotations

import json

import pytest

from testbed.bench.failover import switch_counters
from testbed.emulation import fabricctl
from tests.support.integration import run_testbed, unreachable_pairs


def first_fabric_cable(f) -> str:
    sw = sorted(f.switches)[0]
    port = next(p for p, (peer, _) in sorted(f.switches[sw].ports.items()) if not peer.startswith("gpu"))
    return f"{sw}:{port}"


def carrier(dev: str) -> str:
    return open(f"/sys/class/net/{dev}/carrier").read().strip()


@pytest.mark.parametrize("fabric", ["zcube16", "roft16"], indirect=True)
def test_a_cut_cable_is_routed_around_and_restored(fabric):
    f = fabric.model()
    end = first_fabric_cable(f)
    sw, port = end.split(":")
    far_sw, far_port = f.peer(sw, int(port))
    down = run_testbed("fault", "link", end, "down", "--json")
    assert down.returncode == 0, down.stderr
    assert set(json.loads(down.stdout)["target"].split()[1:]) == {end, f"{far_sw}:{far_port}"}
    assert carrier(f"{sw}-eth{port}") == "0" and carrier(f"{far_sw}-eth{far_port}") == "0"
    status = json.loads(run_testbed("status", "--json", check=True).stdout)
    assert sorted(status["controller"]["ports_down"]) == sorted([f"{sw}-eth{port}", f"{far_sw}-eth{far_port}"])
    assert list(status["faults"]) == [json.loads(down.stdout)["target"]]
    unreachable = unreachable_pairs(f)  # parallel cables (ZCube k=8) or ECMP (ROFT) carry everything
    assert unreachable == [], f"{len(unreachable)} unreachable with {end} down, e.g. {unreachable[:5]}"
    up = run_testbed("fault", "link", f"{far_sw}:{far_port}", "up", "--json")
    assert up.returncode == 0, up.stderr
    assert json.loads(up.stdout)["restored_s"] < 10  # every switch read back equal to its planned program
    status = json.loads(run_testbed("status", "--json", check=True).stdout)
    assert status["controller"]["ports_down"] == [] and status["faults"] == {}
    assert carrier(f"{sw}-eth{port}") == "1"


@pytest.mark.parametrize("fabric", ["zcube16"], indirect=True)
def test_bad_fault_targets_are_one_line_naming_what_exists(fabric):
    for args, says in ((["link", "sw9:1", "down"], "switches: sw1"), (["switch", "leaf1", "down"], "switches:"),
                       (["link", "sw1:1", "sideways"], "expected down or up"),
                       (["controller", "down"], "expected stop or start or restart")):
        proc = run_testbed("fault", *args)
        assert proc.returncode == 2 and says in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert run_testbed("fault", "link", "sw1:1", "up").returncode == 2  # not down: nothing to bring up


@pytest.mark.parametrize("fabric", ["roft16"], indirect=True)
def test_a_restarted_controller_leaves_the_switches_alone(fabric):
    st = fabricctl.load_state()
    before = switch_counters(st)
    proc = run_testbed("fault", "controller", "restart", "--json")
    assert proc.returncode == 0, proc.stderr
    after = switch_counters(st)
    assert sum(a["miss"] for a in after.values()) == sum(b["miss"] for b in before.values())
    span = json.loads(proc.stdout)["took_s"]
    young = [age for br in after.values() for age in br["ages"] if age < span]
    assert young == [], f"{len(young)} flows re-installed by the restart"
    status = json.loads(run_testbed("status", "--json", check=True).stdout)
    assert status["controller"]["alive"] and status["controller"]["pid"] != fabric.controller_pid


@pytest.mark.parametrize("fabric", ["zcube16"], indirect=True)
def test_the_reaction_watch_sees_a_cut_streams_first_packet_out_of_another_port(fabric, tmp_path):
    """The tc watch stamps a UDP stream at the switch ports: into the dead port before the cut and out of a
    sibling after it, without a path's queues in between (what ``bench failover`` reports)."""
    import subprocess
    import sys
    import time

    from fabrics import addressing
    from fabrics.datapath import netns_of
    from testbed.bench import failover, reaction_watch

    f = fabric.model()
    flows = failover.flows_of(f)
    (end, _), = failover.cables_to_cut(f, flows, k=1)
    cable = {end, f.peer(*end)}
    key = next(k for k in flows if failover.data_crosses(f, *flows[k], cable))
    (sg, sp), (dg, dp) = flows[key]
    devs = [addressing.switch_intf(sw, p) for sw in f.switches for p in f.switches[sw].ports]
    watch = reaction_watch.Watch(devs, tmp_path, port=failover.PORT)
    sender = ("import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
              f"s.bind(('{addressing.ip_of(sg, sp)}',0))\nend=time.monotonic()+3\n"
              "while time.monotonic()<end:\n"
              f"    s.sendto(b'x'*16,('{addressing.ip_of(dg, dp)}',{failover.PORT}))\n    time.sleep(0.002)\n")
    proc = subprocess.Popen(["ip", "netns", "exec", netns_of(sg), sys.executable, "-c", sender])
    try:
        time.sleep(0.5)
        watch.epoch(1)
        time.sleep(0.3)
        down = json.loads(run_testbed("fault", "link", f"{end[0]}:{end[1]}", "down", "--json", check=True).stdout)
        time.sleep(1.0)
        rows, clear_ns = watch.rows(), time.monotonic_ns()
        run_testbed("fault", "link", f"{end[0]}:{end[1]}", "up", check=True)
        dead = {watch.ifindex[addressing.switch_intf(*e)]: round(down["t_devices"][addressing.switch_intf(*e) + "r"]
                                                                  * 1e9) for e in cable}
        got = [r for r in reaction_watch.stream_reactions(rows, 1, dead, clear_ns) if r["proto"] == reaction_watch.UDP]
    finally:
        proc.wait(timeout=10)
        watch.close()
    assert len(got) == 1, got
    assert got[0]["reaction_ms"] is not None and 0 <= got[0]["reaction_ms"] < 1000
    assert got[0]["into_dead_ms"] <= got[0]["reaction_ms"] + 5

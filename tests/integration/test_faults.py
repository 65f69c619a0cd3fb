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

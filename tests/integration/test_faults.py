"""Faults on a real fabric: a cut cable loses carrier at both ends, the switches route around it, the
controller repairs and restores its groups and reads them back; a restarted controller changes nothing;
a run with a cable cut and a controller restart verifies or explains every transfer and leaves nothing."""

from __future__ import annotations

import csv
import json

import pytest

from integration_helpers import leftovers, run_testbed, unreachable_pairs
from test_live import EXPERIMENT as LIVE16  # the short closed-loop MoE run at n=16
from testbed.bench.failover import switch_counters
from testbed.emulation import fabricctl
from testbed.fabric import build_fabric


def first_fabric_cable(f) -> str:
    sw = sorted(f.switches)[0]
    port = next(p for p, (peer, _) in sorted(f.switches[sw].ports.items()) if not peer.startswith("gpu"))
    return f"{sw}:{port}"


def carrier(dev: str) -> str:
    return open(f"/sys/class/net/{dev}/carrier").read().strip()


@pytest.mark.parametrize("fabric", ["zcube16", "roft16"], indirect=True)
def test_a_cut_cable_is_routed_around_and_restored(fabric):
    f = build_fabric(**fabric["fabric"])
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
    assert status["controller"]["alive"] and status["controller"]["pid"] != fabric["controller_pid"]


EXPERIMENT = LIVE16.replace("name: live16", "name: faults16") + """faults:
  - {at: 1.0, duration: 1.0, target: {zcube: link sw1:5, roft: link leaf1:5}}
  - {at: 2.2, target: controller, action: restart}
"""


def test_a_run_with_a_cable_cut_and_a_controller_restart_accounts_for_every_transfer(tmp_path):
    """ZCube k=4 has one cable per switch pair: its cut needs the other NIC port pair (the agents' retry)."""
    exp = tmp_path / "faults16.yaml"
    exp.write_text(EXPERIMENT)
    proc = run_testbed("run", str(exp), "--out", str(tmp_path), timeout=900)
    assert proc.returncode == 0, proc.stderr
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir() and p.name.endswith("-faults16"))
    for kind in ("zcube", "roft"):
        rep = run_dir / "runs" / kind / "rep1"
        events = [json.loads(line) for line in (rep / "faults.jsonl").read_text().splitlines()]
        assert [(e["trace_s"], e["action"]) for e in events] == [(1.0, "down"), (2.0, "up"), (2.2, "restart")]
        assert all(abs(e["late_ms"]) < 50 for e in events), events
        for name in ("transfers.csv", "messages.csv"):
            with open(rep / name) as fh:
                rows = list(csv.DictReader(fh))
            assert rows, f"{kind}: no rows in {name}"
            unexplained = [r for r in rows if r["verified"] != "True" and not r["error"]]
            assert unexplained == [], f"{kind} {name}: neither verified nor failed with a cause: {unexplained[:3]}"
        summary = json.loads((rep / "summary.json").read_text())
        assert not summary["invariants"]["violations"], summary["invariants"]["violations"]
    assert (run_dir / "report.html").exists()
    assert "Faults" in (run_dir / "report.html").read_text()
    assert leftovers() == []

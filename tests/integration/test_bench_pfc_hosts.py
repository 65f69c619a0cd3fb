"""``bench pfc --hosts`` on two pseudo-hosts (issue 26): the incast with PFC on reports local and
cross-host pauses apart, their counts add up to the pauses of the merged pfc.txt, some pauses cross
hosts, nothing drops; ``--pfc off --hosts`` is refused in one line before anything is built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.integration import run_testbed

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def bench(two_pseudo_hosts, tmp_path_factory):
    logs = tmp_path_factory.mktemp("bench") / "logs"
    proc = run_testbed("bench", "pfc", "roft", "--gpus", "16", "--hosts", two_pseudo_hosts, "--duration", "6", "--json",
                       "--logs", str(logs), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), logs


def _pause_lines(path: Path) -> int:
    return sum(1 for ln in path.read_text().splitlines() if len(ln.split()) == 6 and ln.split()[4] == "1")


def test_local_and_cross_groups_add_up_to_the_pauses_logged(bench):
    doc, logs = bench
    lat = doc["latency"]
    assert set(lat) == {"local", "cross"}
    for group in lat.values():
        assert set(group) == {"pause", "resume", "reaction"}
    counted = _pause_lines(logs / "pfc.txt")
    assert counted == doc["pauses"] > 0
    assert lat["local"]["pause"]["n"] + lat["cross"]["pause"]["n"] == counted
    assert json.loads((logs / "bench.json").read_text())["pauses"] == counted


def test_some_pauses_cross_hosts(bench):
    doc, _ = bench
    assert doc["cross_host_cables"] > 0 and doc["incast"]["cross_host_senders"]
    assert doc["latency"]["cross"]["pause"]["n"] >= 1


def test_lossless_and_every_transfer_verified(bench):
    doc, _ = bench
    assert doc["drops"] == 0 and doc["lossless"]
    assert doc["transfers"]["verified"] == doc["transfers"]["planned"] > 0
    assert set(doc["clocks"]["offsets"]) == {"ph1", "ph2"}


def test_pfc_off_with_hosts_is_refused_in_one_line(two_pseudo_hosts):
    proc = run_testbed("bench", "pfc", "roft", "--gpus", "16", "--hosts", two_pseudo_hosts, "--pfc", "off", timeout=60)
    assert proc.returncode != 0
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "without --hosts" in err[0], err
    # nothing built: no switch of the fabric in either pseudo-host
    import subprocess

    for h in ("tb-ph1", "tb-ph2"):
        out = subprocess.run(["ip", "netns", "exec", h, "ip", "-o", "link", "show"], capture_output=True,
                             text=True).stdout
        assert "leaf1" not in out and "spine1" not in out and "tbt" not in out

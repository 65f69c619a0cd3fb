"""Plain `mn` with our Topo file builds the model's wiring (userspace OVS)."""

from __future__ import annotations

import subprocess

from fabrics import build_fabric
from tests.support.integration import REPO, leftovers


def test_mn_custom_builds_the_model_wiring():
    """Plain `mn` with our Topo file (userspace OVS: no kernel module here);
    while it runs, OVS must show the model's OpenFlow port numbers."""
    f = build_fabric("zcube", gpus=16, gpus_per_switch=8)
    check = "; ".join(f"sh ovs-vsctl get interface {sw}-eth{p} ofport" for sw in ("sw1", "sw4") for p in (1, 9, 16))
    script = REPO / "tests" / "integration" / ".mn-check.txt"
    script.write_text("\n".join(c.strip() for c in check.split(";")) + "\n")
    try:
        proc = subprocess.run(
            ["mn", "--custom", str(REPO / "testbed" / "mininet_topos.py"), "--topo", "zcube,16,8",
             "--switch", "ovs,datapath=user,protocols=OpenFlow13", "--controller", "none", "--post", str(script),
             "--test", "none"], capture_output=True, text=True, timeout=180, cwd="/tmp")
    finally:
        script.unlink()
    assert proc.returncode == 0, proc.stderr[-2000:]
    ports = [int(x) for x in proc.stdout.split() if x.isdigit()]
    assert ports == [1, 9, 16, 1, 9, 16], proc.stdout
    assert len(f.switches) == 4 and "*** Starting 4 switches" in proc.stderr
    assert subprocess.run(["ovs-vsctl", "br-exists", "sw1"]).returncode == 2  # mn removed what it made
    assert leftovers() == []

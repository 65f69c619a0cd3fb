"""`testbed cli`: Mininet's CLI attached to a running fabric."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.integration import run_testbed


@pytest.mark.parametrize("fabric", ["zcube16"], indirect=True)
def test_cli_runs_mininet_commands_in_the_gpus_and_leaves_the_fabric_up(fabric):
    proc = run_testbed("cli", "--cmd", "nodes", "--cmd", "net", "--cmd", "gpu3 ip -br addr",
                       "--cmd", "gpu1 ping -c1 -W2 10.2.0.2", "--cmd", "pingall", timeout=180)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "gpu1 gpu1-p1:sw1-eth1 gpu1-p2:sw2-eth1" in out
    assert "10.1.0.3/16" in out and "10.2.0.3/16" in out  # gpu3's shell is in gpu3's namespace
    assert "1 received" in out
    assert "0% dropped" in out
    shells = subprocess.run(["pgrep", "-f", "mininet:"], capture_output=True, text=True).stdout.split()
    assert shells == []
    assert run_testbed("exec", "gpu2", "--", "true").returncode == 0

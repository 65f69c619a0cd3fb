"""Bring-up and teardown as a user meets them: miswiring caught and named,
bad input refused with one line, and nothing of ours left behind after
down, clean, Ctrl-C or kill -9 half way, while other people's things survive."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from testbed.emulation import fabricctl
from testbed.fabric import build_fabric
from tests.support.integration import REPO, leftovers, run_testbed


def one_line_error(proc: subprocess.CompletedProcess, status: int, *words: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    assert len(lines) == 1, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


def start_up(*args: str) -> subprocess.Popen:
    # SIGINT back to its default in the child: a test run started in the background by a
    # non-interactive shell inherits SIGINT ignored, and 'up' would then never see the Ctrl-C
    return subprocess.Popen([sys.executable, "-m", "testbed", "up", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_until_building(proc: subprocess.Popen, what: str, timeout: float = 30) -> None:
    """Until the running 'up' has recorded some ``what`` (netns, links, ovs_bridges)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = fabricctl.load_state()
        if st and getattr(st.created, what):
            return
        assert proc.poll() is None, f"up ended before building {what}: {proc.communicate()}"
        time.sleep(0.02)
    raise AssertionError(f"up did not start building {what} within {timeout} s")


def test_miswired_cable_is_detected_and_named():
    f = build_fabric("zcube", gpus=16, gpus_per_switch=8)
    ports = f.switches["sw1"].ports
    a = next(p for p, (peer, _) in ports.items() if peer == "sw2")
    b = next(p for p, (peer, _) in ports.items() if peer == "sw4")
    proc = run_testbed("up", "zcube", "--gpus", "16", "--miswire", f"sw1-eth{a},sw1-eth{b}")
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "cabling differs from the plan" in last and (f"sw1-eth{a}" in last or f"sw1-eth{b}" in last), last
    assert leftovers() == []


@pytest.mark.parametrize("stage", ["netns", "ovs_bridges"])
def test_ctrl_c_half_way_removes_what_was_built(stage):
    proc = start_up("zcube", "--gpus", "32")
    wait_until_building(proc, stage)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert leftovers() == []
    assert fabricctl.load_state() is None


def test_kill_9_half_way_then_clean_removes_only_ours():
    foreign = ["ip netns add foreign-ns", "ip link add foreign-a type veth peer name foreign-b",
               "ovs-vsctl add-br foreign0 -- set bridge foreign0 datapath_type=netdev"]
    for cmd in foreign:
        subprocess.run(cmd.split(), check=True)
    try:
        proc = start_up("roft", "--gpus", "32")
        wait_until_building(proc, "ovs_bridges")
        time.sleep(0.5)
        proc.kill()
        proc.wait()
        assert leftovers(), "nothing was built before the kill: the test proves nothing"
        out = run_testbed("clean", check=True)
        assert "removed" in out.stdout
        assert leftovers() == []
        assert os.path.exists("/run/netns/foreign-ns")
        assert subprocess.run(["ip", "link", "show", "foreign-a"], capture_output=True).returncode == 0
        assert subprocess.run(["ovs-vsctl", "br-exists", "foreign0"]).returncode == 0
        assert "removed 0 items" in run_testbed("clean", check=True).stdout
    finally:
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", "foreign0"])
        subprocess.run(["ip", "link", "del", "foreign-a"], capture_output=True)
        subprocess.run(["ip", "netns", "del", "foreign-ns"], capture_output=True)


def test_verbs_without_a_fabric_say_so():
    for verb in (["down"], ["exec", "gpu1", "--", "true"], ["status"], ["cli"]):
        one_line_error(run_testbed(*verb), 2, "no fabric is up")


def test_bad_input_is_one_line_and_builds_nothing():
    one_line_error(run_testbed("up", "fattree"), 2, "fattree")
    one_line_error(run_testbed("up", "zcube", "--gpus", "12"), 2, "12")
    one_line_error(run_testbed("up", "zcube", "--rate", "fast"), 2, "fast")
    one_line_error(run_testbed("up", "zcube", "--mtu", "9000"), 2, "9000")
    assert leftovers() == []


def test_ovs_not_running_is_one_line(tmp_path):
    env = {**os.environ, "OVS_RUNDIR": str(tmp_path)}  # ovs-vsctl looks for its socket here
    proc = subprocess.run([sys.executable, "-m", "testbed", "up", "zcube", "--gpus", "16"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    one_line_error(proc, 1, "Open vSwitch is not running")
    assert leftovers() == []


def test_not_root_is_one_line():
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                           "testbed", "up", "zcube", "--gpus", "16"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "HOME": "/tmp"})
    one_line_error(proc, 1, "needs root")


def test_kill_9_mid_replay_then_clean_leaves_nothing(tmp_path):
    """SIGKILL a replay while its agents send: the launcher and agents die with it (parent-death
    signal), the fabric stays; 'clean' removes everything of ours, processes and pins included."""
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "replay", "zcube", "--gpus", "16", "--duration", "20s",
                             "--speed", "2", "--cross", "2", "--out", str(tmp_path)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not [p for p in tmp_path.glob("*/agents/*.sent.jsonl") if p.stat().st_size]:
        assert proc.poll() is None, f"the replay ended before sending: {proc.communicate()[1]}"
        assert time.monotonic() < deadline, "no transfer was sent within 120 s"
        time.sleep(0.1)
    agents = json.loads(next(tmp_path.glob("*/agents/launcher.json")).read_text())
    assert len(agents) == 16
    proc.kill()
    proc.wait()
    time.sleep(1.0)  # the parent-death signals land
    left = leftovers()
    assert any(item.startswith("netns") for item in left), "the fabric should outlive a SIGKILLed replay"
    assert not [i for i in left if i.startswith(("agent ", "agent launcher"))], left
    out = run_testbed("clean", check=True)
    assert "removed" in out.stdout
    assert leftovers() == []


@pytest.mark.parametrize("fabric", ["zcube16"], indirect=True)
def test_second_up_and_unknown_host_are_refused(fabric):
    one_line_error(run_testbed("up", "roft", "--gpus", "16"), 2, "already up")
    one_line_error(run_testbed("exec", "gpu17", "--", "true"), 2, "gpu17")
    assert run_testbed("exec", "gpu16", "--", "true").returncode == 0  # the first fabric is untouched
    assert json.loads(run_testbed("status", "--json", check=True).stdout)["controller"]["alive"]


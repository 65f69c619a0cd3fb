"""Pseudo-hosts (issue 26): stand-in machines on this one, each a namespace set with its own sshd and
Open vSwitch; a one-host fabric built inside one over SSH stays inside it; a killed one is gone for the
others; ``down`` leaves nothing, also after ``up`` was killed half way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from common.paths import REPO
from testbed.emulation.hosts import hostsfile, pseudo, remote
from tests.support.integration import leftovers, run_testbed

pytestmark = pytest.mark.integration


# first: the module's pseudo-hosts (the fixture below) are not up yet
def test_down_after_up_was_killed_leaves_nothing():
    if pseudo.load_state() is not None or pseudo.existing_netns():
        pytest.skip("pseudo-hosts are already up on this machine")
    wmem = open("/proc/sys/net/core/wmem_default").read()
    p = subprocess.Popen([sys.executable, "-m", "testbed", "hosts", "pseudo", "up", "--count", "2"], cwd=REPO,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not pseudo.existing_netns() and time.monotonic() < deadline:  # killed once it made something
        time.sleep(0.01)
    time.sleep(0.2)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert pseudo.leftovers() != []
    down = run_testbed("hosts", "pseudo", "down")
    assert down.returncode == 0, down.stderr
    assert pseudo.leftovers() == []
    assert open("/proc/sys/net/core/wmem_default").read() == wmem
    assert leftovers() == []


@pytest.fixture(scope="module")
def two_hosts():
    if pseudo.load_state() is not None or pseudo.existing_netns():
        pytest.skip("pseudo-hosts are already up on this machine; these tests leave them alone")
    proc = run_testbed("hosts", "pseudo", "up", "--count", "2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(pseudo.hosts_path())
    try:
        yield hostsfile.load(pseudo.hosts_path())
    finally:
        down = run_testbed("hosts", "pseudo", "down")
        assert down.returncode == 0, down.stderr + down.stdout
        assert pseudo.leftovers() == []


def _ssh(hosts, name: str, command: str, timeout: float = 120) -> remote.Result:
    s = remote.Session(hosts[name])
    try:
        return s.run(command, timeout=timeout)
    finally:
        s.close()


def test_check_reaches_both_with_the_same_sources(two_hosts):
    proc = run_testbed("hosts", "check", "--hosts", str(pseudo.hosts_path()))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == ["ph1", "ph2"]
    assert all(f"sources {remote.fingerprint()}" in ln and "vxlan to" in ln for ln in lines)


def test_each_has_its_own_machine_view(two_hosts):
    r1 = _ssh(two_hosts, "ph1", "hostname; ip -br addr show eth0; ovs-vsctl get open_vswitch . _uuid; "
                                "ls /run/netns | wc -l")
    r2 = _ssh(two_hosts, "ph2", "hostname; ip -br addr show eth0; ovs-vsctl get open_vswitch . _uuid")
    h1, h2 = r1.out.split("\n"), r2.out.split("\n")
    assert (h1[0], h2[0]) == ("ph1", "ph2")
    assert "10.250.0.1/24" in h1[1] and "10.250.0.2/24" in h2[1]
    assert h1[2] != h2[2]  # two ovsdb-servers
    own = subprocess.run(["ovs-vsctl", "get", "open_vswitch", ".", "_uuid"], capture_output=True, text=True).stdout
    assert own.strip() not in (h1[2].strip(), h2[2].strip())
    assert h1[3].strip() == "0"  # the machine's /run/netns (tb-ph1, tb-ph2) is not visible inside


def _outside_pseudo_hosts(found: list[str]) -> list[str]:
    """Inventory entries of this machine's own: processes in a pseudo-host's PID namespace are visible
    from here (a parent namespace sees its children's) but are that pseudo-host's."""
    own = os.stat("/proc/self/ns/pid").st_ino
    out = []
    for entry in found:
        pid = entry.rsplit(" pid ", 1)[1] if " pid " in entry else None
        try:
            if pid and os.stat(f"/proc/{pid}/ns/pid").st_ino != own:
                continue
        except OSError:
            continue
        out.append(entry)
    return out


def test_a_fabric_inside_one_stays_inside_it(two_hosts):
    """The one-host 'testbed up' runs unchanged inside ph1 (over SSH); 'clean' on ph2 does not touch it,
    and this machine's namespaces, links and Open vSwitch hold nothing of it."""
    py = sys.executable
    up = _ssh(two_hosts, "ph1", f"cd {REPO} && {py} -m testbed up zcube --gpus 8 --gpus-per-switch 4", 180)
    assert up.rc == 0, up.err
    try:
        clean = _ssh(two_hosts, "ph2", f"cd {REPO} && {py} -m testbed clean")
        assert clean.rc == 0, clean.err
        ping = _ssh(two_hosts, "ph1", f"cd {REPO} && {py} -m testbed exec gpu1 -- ping -c 3 -i 0.2 10.2.0.5")
        assert ping.rc == 0, ping.out + ping.err
        from testbed.emulation import inventory

        assert _outside_pseudo_hosts(inventory.leftovers()) == []  # nothing of it on this machine
    finally:
        down = _ssh(two_hosts, "ph1", f"cd {REPO} && {py} -m testbed down", 120)
        assert down.rc == 0, down.err


def test_a_killed_host_is_unreachable_in_one_line(two_hosts):
    pseudo.kill("ph2")
    proc = run_testbed("hosts", "check", "--hosts", str(pseudo.hosts_path()))
    assert proc.returncode == 1
    err = proc.stderr.strip()
    assert "\n" not in err and err.startswith("testbed: error: host ph2: cannot reach 10.250.0.2:22 over SSH"), err

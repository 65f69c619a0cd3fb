"""Bring-up and teardown as a user meets them: miswiring caught and named,
bad input refused with one line, and nothing of ours left behind after
down, clean, Ctrl-C, a closed terminal or kill -9 half way, while other people's things survive,
whatever a state file says (issue 28)."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

import pytest

from common import owned
from fabrics import build_fabric
from testbed.emulation import fabricctl
from tests.support.integration import REPO, leftovers, run_testbed
from traffic.runtime.launcher import STOP_TIMEOUT_S


def one_line_error(proc: subprocess.CompletedProcess, status: int, *words: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    assert len(lines) == 1, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


def start_up(*args: str, env: dict | None = None) -> subprocess.Popen:
    # SIGINT back to its default in the child: a test run started in the background by a
    # non-interactive shell inherits SIGINT ignored, and 'up' would then never see the Ctrl-C
    return subprocess.Popen([sys.executable, "-m", "testbed", "up", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def exits_within(pid: int | None, timeout_s: float) -> bool:
    """Whether process ``pid`` is gone within ``timeout_s`` (its pidfd turns readable: no polling)."""
    if not pid:
        return True
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)


FOREIGN = ["ip netns add foreign-ns", "ip link add foreign-a type veth peer name foreign-b",
           "ovs-vsctl add-br foreign0 -- set bridge foreign0 datapath_type=netdev"]


def add_foreign() -> None:
    for cmd in FOREIGN:
        subprocess.run(cmd.split(), check=True)


def foreign_intact() -> bool:
    return (os.path.exists("/run/netns/foreign-ns")
            and subprocess.run(["ip", "link", "show", "foreign-a"], capture_output=True).returncode == 0
            and subprocess.run(["ovs-vsctl", "br-exists", "foreign0"]).returncode == 0)


def remove_foreign() -> None:
    subprocess.run(["ovs-vsctl", "--if-exists", "del-br", "foreign0"])
    subprocess.run(["ip", "link", "del", "foreign-a"], capture_output=True)
    subprocess.run(["ip", "netns", "del", "foreign-ns"], capture_output=True)


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


@pytest.mark.parametrize("stage,sig", [("netns", signal.SIGINT), ("ovs_bridges", signal.SIGINT),
                                       ("ovs_bridges", signal.SIGHUP)], ids=["netns-ctrl-c", "ovs-ctrl-c", "ovs-hup"])
def test_ctrl_c_or_a_closed_terminal_half_way_removes_what_was_built(stage, sig):
    """SIGHUP is what a closed terminal sends: before, it killed 'up' on the spot and everything stayed."""
    proc = start_up("zcube", "--gpus", "32")
    wait_until_building(proc, stage)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert leftovers() == []
    assert fabricctl.load_state() is None


@pytest.mark.parametrize("state", ["as left", "corrupt"])
def test_kill_9_half_way_then_clean_removes_only_ours(state):
    """kill -9 of 'up': its controller stops by itself (the lifeline is cut); 'clean' removes the rest, also
    when the state file is garbage (before: an unparsable state.json made clean abort)."""
    add_foreign()
    try:
        proc = start_up("roft", "--gpus", "32")
        wait_until_building(proc, "ovs_bridges")
        controller = fabricctl.load_state().controller_pid
        assert controller and owned.proc_info(controller) is not None
        proc.kill()
        proc.wait()
        assert exits_within(controller, 15), "the controller outlived a kill -9 of 'up'"
        assert leftovers(), "nothing was built before the kill: the test proves nothing"
        if state == "corrupt":
            fabricctl.state_file().write_text('{"created": {"netns": [tru')
        out = run_testbed("clean", check=True)
        assert "removed" in out.stdout
        assert leftovers() == []
        assert foreign_intact()
        assert "removed 0 items" in run_testbed("clean", check=True).stdout
    finally:
        remove_foreign()


DECOY = "import sys\nprint('ready', flush=True)\nsys.stdin.read()\n"


def test_a_forged_state_file_touches_nothing_foreign(tmp_path):
    """A state file naming foreign devices, a foreign pid and a decoy controller (its true start time and exact
    command line, run from another folder): 'down' removes none of it and says so in one line; 'clean' too."""
    add_foreign()
    (tmp_path / "controller.py").write_text(DECOY)
    sdir = fabricctl.state_dir()
    sdir.mkdir(exist_ok=True)
    decoy = subprocess.Popen([sys.executable, "-m", "controller", "--port", "6653", "--listen-fd", "3", "--config",
                              str(sdir / "controller.json")], cwd=tmp_path, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        assert decoy.stdout.readline() == b"ready\n"
        info = owned.proc_info(decoy.pid)
        fabricctl.state_file().write_text(json.dumps({
            "fabric": {"kind": "zcube", "gpus": 16}, "controller_pid": decoy.pid, "controller_start": info.start,
            "controller_argv": list(info.argv), "state_dir": str(sdir), "pfc": {"enabled": True},
            "created": {"netns": ["foreign-ns"], "links": ["foreign-a", "foreign-b"], "ovs_bridges": ["foreign0"]}}))
        (sdir / "status.json").write_text(json.dumps({"pfc": {"pid": sleeper.pid,
                                                              "start": owned.start_time(sleeper.pid)}}))
        one_line_error(run_testbed("down"), 1, "left alone 4 things the state file named that are not ours",
                       "netns foreign-ns", "bridge foreign0", "link foreign-a", "link foreign-b")
        assert foreign_intact() and decoy.poll() is None and sleeper.poll() is None
        fabricctl.state_file().write_text(json.dumps({"controller_pid": decoy.pid, "state_dir": str(sdir)}))
        assert "removed 0 items" in run_testbed("clean", check=True).stdout
        assert foreign_intact() and decoy.poll() is None and sleeper.poll() is None
    finally:
        decoy.kill()
        sleeper.kill()
        decoy.wait()
        sleeper.wait()
        (sdir / "status.json").unlink(missing_ok=True)
        fabricctl.state_file().unlink(missing_ok=True)
        remove_foreign()


def test_a_state_dir_others_can_write_is_refused_in_one_line(tmp_path):
    sdir = tmp_path / "state"
    sdir.mkdir()
    sdir.chmod(0o777)
    env = {**os.environ, "TESTBED_STATE_DIR": str(sdir)}
    proc = subprocess.run([sys.executable, "-m", "testbed", "up", "zcube", "--gpus", "16"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    one_line_error(proc, 1, f"TESTBED_STATE_DIR {sdir}: refused, {sdir} is writable by group and others (mode 777)",
                   "as root, expected a directory owned by root")
    assert os.listdir(sdir) == [] and leftovers() == []


def test_a_controller_port_grabbed_before_up_fails_in_one_line_and_no_switch_talks_to_it():
    """The port is held by someone else before the controller could have it: 'up' fails before anything is
    built, so no switch is ever pointed at the grabber."""
    with socket.socket() as grabber:
        grabber.bind(("127.0.0.1", 0))
        grabber.listen(16)
        grabber.setblocking(False)
        port = grabber.getsockname()[1]
        env = {**os.environ, "TESTBED_CONTROLLER_PORT": str(port)}
        proc = start_up("zcube", "--gpus", "16", env=env)
        _, err = proc.communicate(timeout=120)
        lines = err.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, err
        assert lines[0] == (f"testbed: error: controller port 127.0.0.1:{port} cannot be bound (Address already in "
                            "use): another process holds it; free it, or set TESTBED_CONTROLLER_PORT to another "
                            "port (0: any free one)")
        assert leftovers() == [] and fabricctl.load_state() is None
        with pytest.raises(BlockingIOError):
            grabber.accept()  # no switch ever connected to it


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
    """SIGKILL a replay (PFC on) while its agents send: the launcher and agents die with it (parent-death
    signal), and so do the controller and the pause daemon (their lifeline is cut: before, they lived on
    until 'clean'); the fabric's devices stay; 'clean' removes everything of ours, processes and pins included."""
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "replay", "zcube", "--gpus", "16", "--duration", "20s",
                             "--speed", "2", "--cross", "2", "--pfc", "on", "--out", str(tmp_path)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not [p for p in tmp_path.glob("*/agents/*.sent.jsonl") if p.stat().st_size]:
        assert proc.poll() is None, f"the replay ended before sending: {proc.communicate()[1]}"
        assert time.monotonic() < deadline, "no transfer was sent within 120 s"
        time.sleep(0.1)
    agents = json.loads(next(tmp_path.glob("*/agents/launcher.json")).read_text())
    assert len(agents) == 16
    st = fabricctl.load_state()
    pfcd = (fabricctl.controller_status(st) or {}).get("pfc", {}).get("pid")
    assert st.controller_pid and pfcd, "the controller and the pause daemon should run during the replay"
    proc.kill()
    proc.wait()
    assert exits_within(st.controller_pid, 15), "the controller outlived a SIGKILLed replay"
    assert exits_within(pfcd, 15), "the pause daemon outlived a SIGKILLed replay"
    # the parent-death SIGTERM starts the launcher's graceful stop: agents get SIGTERM, SIGKILL after its
    # stop timeout; so they are gone within that bound (on a loaded 2-core runner, well after 1 s)
    ours = ("agent ", "agent launcher", "controller", "PFC helper")
    deadline = time.monotonic() + STOP_TIMEOUT_S + 5
    while [i for i in leftovers() if i.startswith(ours)] and time.monotonic() < deadline:
        time.sleep(0.2)
    left = leftovers()
    assert any(item.startswith("netns") for item in left), "the fabric should outlive a SIGKILLed replay"
    assert not [i for i in left if i.startswith(ours)], left
    out = run_testbed("clean", check=True)
    assert "removed" in out.stdout
    assert leftovers() == []


@pytest.mark.parametrize("fabric", ["zcube16"], indirect=True)
def test_second_up_and_unknown_host_are_refused(fabric):
    # the controller's port was bound by 'up' before it was written anywhere, and is held: nobody else gets it
    with socket.socket() as late:
        with pytest.raises(OSError, match="Address already in use"):
            late.bind(("127.0.0.1", fabric.controller_port))
    # 'up' has exited and released its fabric: the controller lives on (checked by its start time and command line)
    assert fabricctl.controller_alive(fabricctl.load_state())
    one_line_error(run_testbed("up", "roft", "--gpus", "16"), 2, "already up")
    one_line_error(run_testbed("exec", "gpu17", "--", "true"), 2, "gpu17")
    assert run_testbed("exec", "gpu16", "--", "true").returncode == 0  # the first fabric is untouched
    assert json.loads(run_testbed("status", "--json", check=True).stdout)["controller"]["alive"]


"""Stopping the fabric's processes signals only the process recorded, while it provably is that process and
ours: never a pid a stale or forged state file names (issue 28). The real controller, started as ``up``
starts it, on a socket bound here: it serves that socket, hangs on the lifeline, and is stopped by its record."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys

import pytest

from common import owned
from common.paths import REPO
from testbed.emulation import fabricctl, inventory
from testbed.emulation.state import FabricState

FABRIC = {"kind": "zcube", "gpus": 16, "gpus_per_switch": 8, "cables": 4}


@pytest.fixture
def sdir(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path))
    yield tmp_path
    fabricctl._drop_lifeline()


@pytest.fixture
def bystander():
    """A process that is not ours (root's maybe, but not our command line): it must survive everything."""
    proc = subprocess.Popen([sys.executable, "-c", "print('ready', flush=True); import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"  # exec'd: its own command line and start time are in /proc
    yield proc
    proc.communicate(b"")


def _exited(pid: int, timeout_s: float) -> bool:
    """Whether ``pid`` exits within ``timeout_s`` (its pidfd turns readable: no polling loop)."""
    fd = os.pidfd_open(pid)
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)


def test_a_recorded_pid_whose_start_time_differs_is_not_signalled(sdir, bystander):
    """A stale state file: its controller pid now belongs to another process (a later start time)."""
    start = owned.start_time(bystander.pid)
    st = FabricState(controller_pid=bystander.pid, controller_start=start - 100, state_dir=str(sdir))
    assert fabricctl._stop_controller_process(st) == "not ours"
    assert not fabricctl.controller_alive(st)
    assert bystander.poll() is None


def test_a_forged_record_with_the_right_start_time_is_still_not_ours(sdir, bystander):
    """A forged state file can copy a process's start time and command line: it is still not our controller
    (not our command line, nor started from this checkout on this state directory)."""
    info = owned.proc_info(bystander.pid)
    st = FabricState(controller_pid=bystander.pid, controller_start=info.start, controller_argv=list(info.argv),
                     state_dir=str(sdir))
    assert fabricctl._stop_controller_process(st) == "not ours"
    assert bystander.poll() is None
    fabricctl.stop_controller(st)  # 'testbed fault controller stop' on that record: the same
    assert bystander.poll() is None and st.controller_pid is None


def test_a_forged_pause_daemon_pid_in_the_status_file_is_not_signalled(sdir, bystander):
    (sdir / "status.json").write_text(json.dumps({"pfc": {"pid": bystander.pid,
                                                          "start": owned.start_time(bystander.pid)}}))
    st = FabricState(pfc={"enabled": True}, state_dir=str(sdir))
    fabricctl._stop_pfc(st)
    assert bystander.poll() is None


def _start_real_controller(sdir, port: int = 0) -> tuple[FabricState, socket.socket]:
    """The controller process exactly as ``up`` starts it (on this process's lifeline), with no switch."""
    st = FabricState(fabric=dict(FABRIC), config={}, state_dir=str(sdir))
    listener = fabricctl.listen(port)
    st.controller_port = listener.getsockname()[1]
    fabricctl._take_lifeline()
    with listener:
        fabricctl._start_controller(st, listener)
    return st, listener


def _listening_ports(pid: int) -> list[int]:
    """The TCP ports the process ``pid`` holds listening sockets on (/proc/net/tcp{,6} and its fds)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # state 0A: LISTEN
                ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _hello(port: int) -> bytes:
    """The first OpenFlow header the controller sends on a new connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        return conn.recv(8)


def test_the_controller_serves_the_socket_it_was_handed_and_is_stopped_by_its_record(sdir):
    st, _ = _start_real_controller(sdir)
    try:
        info = owned.proc_info(st.controller_pid)
        assert list(info.argv) == st.controller_argv and info.start == st.controller_start
        assert info.cwd == str(REPO) and inventory.our_process(info, sdir) == "controller"
        assert st.controller_argv[1:] == ["-m", "controller", "--port", str(st.controller_port), "--listen-fd",
                                          st.controller_argv[6], "--config", str(sdir / "controller.json"),
                                          "--lifeline-fd", str(fabricctl._LIFELINE[0])]
        hello = _hello(st.controller_port)
        assert hello[:2] == bytes([4, 0])  # OpenFlow 1.3 (wire version 4), OFPT_HELLO (type 0)
        # the controller never bound a port of its own: its only TCP listener is the socket handed over
        assert _listening_ports(st.controller_pid) == [st.controller_port]
        assert fabricctl.controller_alive(st)
        assert fabricctl._stop_controller_process(st) == "stopped"
        assert owned.proc_info(st.controller_pid) is None
    finally:
        owned.stop(st.controller_pid, st.controller_start, lambda info: True)


def test_the_controller_stops_when_the_lifeline_is_cut_and_outlives_a_release(sdir):
    st, _ = _start_real_controller(sdir)
    try:
        _hello(st.controller_port)  # up and serving
        fabricctl._drop_lifeline()  # what a kill -9 of 'up' or 'run' does to the write end
        assert _exited(st.controller_pid, 30), "the controller outlived the process that started it"
    finally:
        owned.stop(st.controller_pid, st.controller_start, lambda info: True)
    st, _ = _start_real_controller(sdir)
    try:
        _hello(st.controller_port)
        fabricctl.release_fabric()  # 'testbed up' done: the fabric outlives it
        assert not _exited(st.controller_pid, 1.0)
        assert fabricctl.controller_alive(st)
    finally:
        assert fabricctl._stop_controller_process(st) == "stopped"


def test_a_port_another_process_holds_is_one_line_and_no_controller_starts(sdir):
    with socket.socket() as grabber:
        grabber.bind(("127.0.0.1", 0))
        grabber.listen(1)
        port = grabber.getsockname()[1]
        with pytest.raises(fabricctl.EnvironmentProblem) as info:
            fabricctl.listen(port)
        assert str(info.value) == (f"controller port 127.0.0.1:{port} cannot be bound (Address already in use): "
                                   "another process holds it; free it, or set TESTBED_CONTROLLER_PORT to another "
                                   "port (0: any free one)")
        st = FabricState(fabric=dict(FABRIC), config={}, state_dir=str(sdir), controller_port=port)
        with pytest.raises(fabricctl.EnvironmentProblem, match="cannot be bound"):
            fabricctl.start_controller(st)  # a restart finds the port taken: it starts nothing
        assert st.controller_pid is None and not (sdir / "controller.json").exists()


@pytest.mark.parametrize("value,error", [("x", "TESTBED_CONTROLLER_PORT 'x': expected a TCP port 1..65535"),
                                         ("70000", "TESTBED_CONTROLLER_PORT '70000': expected")])
def test_a_bad_controller_port_setting_is_one_line(monkeypatch, value, error):
    monkeypatch.setenv("TESTBED_CONTROLLER_PORT", value)
    with pytest.raises(fabricctl.TestbedError, match=error):
        fabricctl.requested_port()

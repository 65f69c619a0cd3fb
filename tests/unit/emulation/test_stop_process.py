"""Stopping a fabric's processes must survive a process that exits on its own meanwhile."""

import subprocess
import time

from testbed.emulation import fabricctl


def _gone_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()  # reaped: signalling this pid now fails with ESRCH
    return proc.pid


def test_a_process_that_exits_between_check_and_signal_is_stopped(monkeypatch):
    pid = _gone_pid()
    monkeypatch.setattr(fabricctl, "_alive", lambda p: True if p == pid else False)
    fabricctl._stop_process(pid)  # SIGTERM, 2.5 s of polling, SIGKILL: each meets ESRCH


def test_a_process_that_ignores_sigterm_is_killed():
    proc = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 30"])
    try:
        time.sleep(0.2)  # the trap is set
        fabricctl._stop_process(proc.pid)
        deadline = time.monotonic() + 5  # SIGKILL is delivered asynchronously
        while fabricctl._alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not fabricctl._alive(proc.pid)
    finally:
        proc.kill()


def test_clean_recognises_our_processes_by_the_inventory_table_and_our_state_files(tmp_path):
    mine = [b"python", b"-m", b"controller", b"--config", str(tmp_path / "controller.json").encode()]
    other = [b"python", b"-m", b"controller", b"--config", b"/elsewhere/controller.json"]
    pfcd = [b"python", b"-m", b"pfc.pfcd", b"--policy", str(tmp_path / "pfc_policy.json").encode()]
    assert fabricctl._our_process(mine, tmp_path) == "controller"
    assert fabricctl._our_process(other, tmp_path) is None  # another testbed's controller is not ours
    assert fabricctl._our_process(pfcd, tmp_path) == "PFC helper"
    assert fabricctl._our_process([b"python", b"-m", b"traffic.runtime.coordinator", b"c.json"], tmp_path) == \
        "serving coordinator"
    assert fabricctl._our_process([b"python", b"-m", b"http.server"], tmp_path) is None

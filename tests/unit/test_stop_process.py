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

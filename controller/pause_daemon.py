"""The PFC pause daemon (``pfc.pfcd``) as the controller runs it.

The controller starts it once, after every switch is verified, and reports it
in the status file; a failed start or an exit is an error there, which
``testbed up`` fails on. The daemon outlives a controller restart (pauses are the
datapath's, not the control plane's), so a restarted controller adopts the one
running on its state directory's policy instead of starting a second. Adopted is only a process
that is provably that daemon: run by this user (root), from this checkout, with exactly the
arguments ``pfc_launch.start`` gives it; a process that merely names the module and the policy is
not, and a real daemon is started beside it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import Protocol

from common import owned
from common.paths import REPO
from pfc.files import STATUS_FILE
from pfc.launch import is_pfcd


class Process(Protocol):
    """What is needed of the started daemon (a ``subprocess.Popen``)."""

    pid: int

    def poll(self) -> int | None: ...


class Adopted:
    """A pause daemon an earlier controller started: not our child, so its exit status is unknown."""

    def __init__(self, pid: int, start: int | None = None) -> None:
        self.pid = pid
        self.start = start if start is not None else owned.start_time(pid)

    def poll(self) -> int | None:
        """None while it runs; -1 once it is gone (a zombie counts as gone, and so does another process
        that was given its pid since: its start time differs)."""
        info = owned.proc_info(self.pid)
        return -1 if info is None or info.zombie or info.start != self.start else None


def is_daemon(info: owned.ProcInfo, state_dir: str) -> bool:
    """Whether a process is the pause daemon of ``state_dir``: this user's, this checkout's (its working
    directory), and exactly ``pfc_launch``'s command line."""
    return (owned.same_user(info) and not info.zombie and info.cwd == str(REPO)
            and is_pfcd(info.argv, state_dir))


def running_daemon(state_dir: str) -> owned.ProcInfo | None:
    """The pause daemon running on ``state_dir``'s policy file, if any."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (info := owned.proc_info(int(entry))) is not None and is_daemon(info, state_dir):
            return info
    return None


class PauseDaemonSupervisor:
    """Start pfcd at most once; merge its own status file with whether it still runs."""

    def __init__(self, state_dir: str, start: Callable[[], Process], logger: logging.Logger) -> None:
        self.state_dir = state_dir
        self.status_path = os.path.join(state_dir, STATUS_FILE)
        self._start = start
        self.logger = logger
        self.proc: Process | None = None
        self.error: str | None = None
        self.started_at: int | None = None  # the daemon's start time (/proc/PID/stat field 22)

    @property
    def tried(self) -> bool:
        """Started or failed to: either way it is not started again."""
        return self.proc is not None or self.error is not None

    def start(self) -> None:
        """Start pfcd (or adopt the one already running); a failure becomes the status file's error instead
        of killing the controller."""
        running = running_daemon(self.state_dir)
        if running is not None:
            self.proc = Adopted(running.pid, running.start)
            self.started_at = running.start
            self.logger.info("PFC helper already running, pid %d: adopted", running.pid)
            return
        try:
            self.proc = self._start()
            known = getattr(self.proc, "start", None)  # a Popen has none: read it while the pid is surely its
            self.started_at = known if isinstance(known, int) else owned.start_time(self.proc.pid)
            self.logger.info("PFC helper started, pid %d", self.proc.pid)
        except Exception as exc:  # reported through the status file; 'up' fails on it
            self.error = f"{type(exc).__name__}: {exc}"
            self.logger.error("PFC helper not started: %s", self.error)

    def status(self) -> dict:
        """pfcd's own status document, plus its pid and any error (its exit included)."""
        doc: dict = {}
        try:
            with open(self.status_path) as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            pass
        if self.proc is not None:
            doc["pid"] = self.proc.pid
            doc["start"] = self.started_at  # with the pid: who stops it checks it is still this process
            code = self.proc.poll()
            if code is not None:
                doc["ready"] = False
                self.error = self.error or f"pfcd exited with status {code} (see pfcd.log)"
        if self.error:
            doc["error"] = self.error
        return doc

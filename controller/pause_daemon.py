"""The PFC pause daemon (``pfc.pfcd``) as the controller runs it.

The controller starts it once, after every switch is verified, and reports it
in the status file; a failed start or an exit is an error there, which
``testbed up`` fails on. The daemon outlives a controller restart (pauses are the
datapath's, not the control plane's), so a restarted controller adopts the one
running on its state directory's policy instead of starting a second.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import Protocol

from pfc.files import POLICY_FILE, STATUS_FILE


class Process(Protocol):
    """What is needed of the started daemon (a ``subprocess.Popen``)."""

    pid: int

    def poll(self) -> int | None: ...


class Adopted:
    """A pause daemon an earlier controller started: not our child, so its exit status is unknown."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> int | None:
        """None while it runs; -1 once it is gone (a zombie counts as gone)."""
        try:
            with open(f"/proc/{self.pid}/stat") as fh:
                return -1 if fh.read().rsplit(")", 1)[1].split()[0] == "Z" else None
        except OSError:
            return -1


def running_daemon(state_dir: str) -> int | None:
    """The pid of a pause daemon running on ``state_dir``'s policy file, if any."""
    want = os.path.join(state_dir, POLICY_FILE).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if b"pfc.pfcd" in argv and want in argv:
            return int(entry)
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

    @property
    def tried(self) -> bool:
        """Started or failed to: either way it is not started again."""
        return self.proc is not None or self.error is not None

    def start(self) -> None:
        """Start pfcd (or adopt the one already running); a failure becomes the status file's error instead
        of killing the controller."""
        running = running_daemon(self.state_dir)
        if running is not None:
            self.proc = Adopted(running)
            self.logger.info("PFC helper already running, pid %d: adopted", running)
            return
        try:
            self.proc = self._start()
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
            code = self.proc.poll()
            if code is not None:
                doc["ready"] = False
                self.error = self.error or f"pfcd exited with status {code} (see pfcd.log)"
        if self.error:
            doc["error"] = self.error
        return doc

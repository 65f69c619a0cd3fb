"""controller.pause_daemon: the controller starts the pause daemon once, reports it, and adopts a running one
only when it provably is ours; a decoy is never adopted (issue 28). controller.pfc_launch's command line is
the one the adoption and 'clean' match exactly."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common import owned
from common.paths import REPO
from controller import pause_daemon, pfc_launch
from pfc import launch

LOG = logging.getLogger("test-pause-daemon")


WAIT = "print('ready', flush=True); import sys; sys.stdin.read()"


def _running(argv: list[str], cwd: Path) -> subprocess.Popen:
    """A process with exactly ``argv``, once it runs it (it says so), until we close its stdin."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=cwd)
    assert proc.stdout.readline() == b"ready\n"
    return proc


def _decoy_module(tmp_path: Path) -> Path:
    """A folder where ``python -m pfc.pfcd`` is a decoy that only waits."""
    (tmp_path / "decoy" / "pfc").mkdir(parents=True)
    (tmp_path / "decoy" / "pfc" / "__init__.py").write_text("")
    (tmp_path / "decoy" / "pfc" / "pfcd.py").write_text(WAIT + "\n")
    return tmp_path / "decoy"


class Started:
    """What the supervisor's start function returned: a real child standing in for pfcd."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def __call__(self):
        proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
        self.procs.append(proc)
        return proc


@pytest.fixture
def started():
    s = Started()
    yield s
    for p in s.procs:
        p.communicate(b"")


def test_pfcds_command_line_is_exact():
    sdir = "/run/zcube-testbed"
    assert launch.pfcd_args(sdir) == ["-m", "pfc.pfcd", "--policy", "/run/zcube-testbed/pfc_policy.json"]
    assert launch.pfcd_args(sdir, 7)[-2:] == ["--lifeline-fd", "7"]
    py = sys.executable
    assert launch.is_pfcd([py, *launch.pfcd_args(sdir)], sdir)
    assert launch.is_pfcd([py, *launch.pfcd_args(sdir, 12)], sdir)
    assert not launch.is_pfcd([py, *launch.pfcd_args(sdir), "--extra"], sdir)
    assert not launch.is_pfcd([py, *launch.pfcd_args(sdir)[:-2], "--lifeline-fd", "x"], sdir)
    assert not launch.is_pfcd([py, *launch.pfcd_args("/elsewhere")], sdir)
    assert not launch.is_pfcd(["/bin/sh", *launch.pfcd_args(sdir)], sdir)  # not an interpreter
    # the old adoption test: any process whose arguments contain the module and the policy path
    assert not launch.is_pfcd([py, "-c", "pass", "pfc.pfcd", "/run/zcube-testbed/pfc_policy.json"], sdir)


def test_a_decoy_naming_the_module_and_the_policy_is_not_adopted_and_the_real_one_starts(tmp_path, started):
    """Before: adoption matched 'pfc.pfcd' and the policy path anywhere in the arguments, so a decoy was adopted
    and PFC was silently off."""
    policy = str(tmp_path / "pfc_policy.json")
    decoy = _running([sys.executable, "-c", WAIT, "pfc.pfcd", "--policy", policy], REPO)
    try:
        assert pause_daemon.running_daemon(str(tmp_path)) is None
        sup = pause_daemon.PauseDaemonSupervisor(str(tmp_path), started, LOG)
        sup.start()
        assert len(started.procs) == 1 and sup.proc is started.procs[0]
        assert sup.status() == {"pid": started.procs[0].pid, "start": owned.start_time(started.procs[0].pid)}
    finally:
        decoy.communicate(b"")


def test_a_decoy_with_the_exact_arguments_but_another_checkout_is_not_adopted(tmp_path, started):
    folder = _decoy_module(tmp_path)
    decoy = _running([sys.executable, *launch.pfcd_args(tmp_path)], folder)
    try:
        info = owned.proc_info(decoy.pid)
        assert info.argv[1:] == ("-m", "pfc.pfcd", "--policy", str(tmp_path / "pfc_policy.json"))
        assert info.cwd == str(folder) and not pause_daemon.is_daemon(info, str(tmp_path))
        sup = pause_daemon.PauseDaemonSupervisor(str(tmp_path), started, LOG)
        sup.start()
        assert len(started.procs) == 1
    finally:
        decoy.communicate(b"")


def test_a_daemon_of_ours_is_adopted_once_and_reported_with_its_start_time(tmp_path, started, monkeypatch):
    """This checkout's pause daemon (its exact command line, from the repository, this user): adopted, not
    started again. Its stand-in runs the decoy module from REPO's place on the path, as the real one would."""
    folder = _decoy_module(tmp_path)
    monkeypatch.setattr(pause_daemon, "REPO", folder)  # 'this checkout' is where the stand-in runs from
    real = _running([sys.executable, *launch.pfcd_args(tmp_path, 9)], folder)
    try:
        found = pause_daemon.running_daemon(str(tmp_path))
        assert found is not None and found.pid == real.pid
        sup = pause_daemon.PauseDaemonSupervisor(str(tmp_path), started, LOG)
        sup.start()
        assert started.procs == [] and isinstance(sup.proc, pause_daemon.Adopted) and sup.tried
        (tmp_path / "pfc_status.json").write_text(json.dumps({"ready": True, "pauses": 3}))
        assert sup.status() == {"ready": True, "pauses": 3, "pid": real.pid, "start": found.start}
    finally:
        real.communicate(b"")
    doc = sup.status()  # gone now: an error, not ready
    assert doc["ready"] is False and doc["error"] == "pfcd exited with status -1 (see pfcd.log)"


def test_an_adopted_pid_given_to_another_process_counts_as_gone(tmp_path):
    proc = _running([sys.executable, "-c", WAIT], tmp_path)
    try:
        start = owned.start_time(proc.pid)
        assert pause_daemon.Adopted(proc.pid, start).poll() is None
        assert pause_daemon.Adopted(proc.pid, start + 1).poll() == -1  # same pid, another start: not it
    finally:
        proc.communicate(b"")
    assert pause_daemon.Adopted(proc.pid, start).poll() == -1


def test_a_failed_start_is_the_status_files_error_and_is_not_retried(tmp_path):
    calls = []

    def boom():
        calls.append(1)
        raise OSError(2, "No such file or directory", "pfcd")

    sup = pause_daemon.PauseDaemonSupervisor(str(tmp_path), boom, LOG)
    sup.start()
    assert sup.tried and calls == [1]
    assert sup.status() == {"error": "FileNotFoundError: [Errno 2] No such file or directory: 'pfcd'"}


def test_an_unreadable_status_file_is_ignored(tmp_path, started):
    (tmp_path / "pfc_status.json").write_text("{half")
    sup = pause_daemon.PauseDaemonSupervisor(str(tmp_path), started, LOG)
    assert sup.status() == {} and not sup.tried
    sup.start()
    assert set(sup.status()) == {"pid", "start"}


def test_start_passes_the_lifeline_on_and_writes_without_following_links(tmp_path, monkeypatch):
    """pfc_launch.start: the policy beside the controller's files (a planted link there is not followed), the
    daemon on exactly pfcd_args, with the controller's lifeline fd inherited."""
    seen = {}

    class FakePopen:
        def __init__(self, argv, **kwargs):
            seen.update(argv=argv, pass_fds=kwargs["pass_fds"], cwd=kwargs["cwd"])
            self.pid = 1

    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "pfc_policy.json").symlink_to(victim)
    monkeypatch.setattr(pfc_launch.subprocess, "Popen", FakePopen)
    monkeypatch.setattr(pfc_launch.pfc_policy, "daemon_policy", lambda *a: {"queues": {}})
    monkeypatch.setattr(pfc_launch, "LIFELINE_FD", 11)
    pfc_launch.start(None, {"state_dir": str(tmp_path), "datapath": {}, "pfc": {}})
    assert seen == {"argv": [sys.executable, "-m", "pfc.pfcd", "--policy", str(tmp_path / "pfc_policy.json"),
                             "--lifeline-fd", "11"], "pass_fds": (11,), "cwd": REPO}
    assert victim.read_text() == "keep" and json.loads((tmp_path / "pfc_policy.json").read_text()) == {"queues": {}}
    assert not os.path.islink(tmp_path / "pfc_policy.json")

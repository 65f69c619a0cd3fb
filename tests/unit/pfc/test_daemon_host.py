"""pfc.daemon_host (the writer thread and what keeps the loop on time) and pfc.files (one spelling of the
daemon's files), directly."""

from __future__ import annotations

import json
import os

import pytest

from common.errors import EnvironmentProblem
from fabrics import build_fabric
from fabrics.datapath import DatapathConfig
from pfc import daemon_host, files
from pfc.policy import PfcConfig, daemon_policy


def test_the_policy_names_the_daemons_files_in_the_state_directory():
    doc = daemon_policy(build_fabric("zcube", gpus=16, gpus_per_switch=8), DatapathConfig(), PfcConfig(),
                        "/run/zcube-testbed")
    assert (doc["log"], doc["status"]) == ("/run/zcube-testbed/pfc.txt", "/run/zcube-testbed/pfc_status.json")
    assert len({files.POLICY_FILE, files.STATUS_FILE, files.LOG_FILE, files.LATENCY_FILE, files.GAPS_FILE}) == 5


def test_the_writer_replaces_the_status_and_appends_the_logs(tmp_path):
    w = daemon_host.Writer({"status": str(tmp_path / files.STATUS_FILE), "log": str(tmp_path / files.LOG_FILE)})
    w.start()
    w.put({"pauses": 1}, {files.LOG_FILE: ["1 sw1 switch 9 1 sw2:3\n"]})
    w.put({"pauses": 2}, {files.LOG_FILE: ["2 sw1 switch 9 0 sw2:3\n"], files.GAPS_FILE: ["step 3.1\n"]})
    w.close()
    assert json.loads((tmp_path / files.STATUS_FILE).read_text()) == {"pauses": 2}
    assert (tmp_path / files.LOG_FILE).read_text() == "1 sw1 switch 9 1 sw2:3\n2 sw1 switch 9 0 sw2:3\n"
    assert (tmp_path / files.GAPS_FILE).read_text() == "step 3.1\n" and not w.is_alive()


def test_the_writer_never_writes_through_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / files.LOG_FILE).symlink_to(victim)
    w = daemon_host.Writer({"status": str(tmp_path / files.STATUS_FILE), "log": str(tmp_path / files.LOG_FILE)})
    errors = []
    w.run = lambda run=w.run: errors.append(pytest.raises(EnvironmentProblem, run))  # the thread's own failure
    w.start()
    w.put({}, {files.LOG_FILE: ["x\n"]})
    w.close()
    assert victim.read_text() == "keep" and len(errors) == 1


def test_realtime_then_nice_and_the_idle_poll_request(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "sched_setscheduler", lambda *a: calls.append("fifo"))
    assert daemon_host.realtime() == "fifo"

    def refuse(*a):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    monkeypatch.setattr(os, "nice", lambda n: calls.append(n))
    assert daemon_host.realtime() == "nice" and calls == ["fifo", -15]
    monkeypatch.setattr(os, "open", lambda *a: (_ for _ in ()).throw(PermissionError(13, "Permission denied")))
    assert daemon_host.no_idle_halt() == (None, "idle CPUs may halt (Permission denied)")


def test_away_from_pmd_keeps_every_core_when_ovs_says_nothing(monkeypatch):
    class Done:
        stdout = "no pmd threads"

    monkeypatch.setattr(daemon_host.os, "sched_setaffinity", lambda *a: pytest.fail("must not move"))
    import subprocess

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: Done())
    assert daemon_host.away_from_pmd() == "any core"
    Done.stdout = "pmd thread numa_id 0 core_id 1:\n"
    moved = []
    monkeypatch.setattr(daemon_host.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(daemon_host.os, "sched_setaffinity", lambda pid, cpus: moved.append(cpus))
    assert daemon_host.away_from_pmd() == "cores 0 (PMD on 1)" and moved == [{0}]

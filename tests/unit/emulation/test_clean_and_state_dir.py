"""'clean' works whatever the state file says; the state directory is root's alone or refused in one line;
only our own /tmp/tb-serving-* folders are removed; 'ours' for a process is root's, this checkout's and our
exact command line (issue 28)."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest

from common import owned
from common.errors import EnvironmentProblem, TestbedError
from common.paths import REPO
from testbed.cli import main
from testbed.emulation import clean, fabricctl, inventory


@pytest.fixture
def sdir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "state"
    d.mkdir()
    d.chmod(0o755)
    monkeypatch.setenv("TESTBED_STATE_DIR", str(d))
    return d


# ------------------------------------------------------------- corrupt state
@pytest.mark.parametrize("text,reason", [
    ("{half", "not JSON (Expecting property name enclosed in double quotes at line 1)"),
    ("[1, 2]", "a JSON list, not an object"),
    ('{"created": []}', "entry 'created' is a list"),
    ('{"created": {"netns": "tb-gpu1"}}', "entry 'created.netns' is not a list of names"),
    ('{"controller_pid": "1"}', "entry 'controller_pid' is a str"),
    ("\xff\xfe", "not a fabric state (invalid start byte)"),
])
def test_a_state_file_that_is_not_a_state_is_one_line_naming_the_file_not_its_content(sdir, text, reason):
    (sdir / "state.json").write_bytes(text.encode("latin-1") if text.startswith("\xff") else text.encode())
    with pytest.raises(TestbedError) as info:
        fabricctl.load_state()
    msg = str(info.value)
    assert msg.startswith(f"{sdir / 'state.json'}: not a fabric state (") and reason.split(" (")[-1] in msg
    assert msg.endswith("; 'testbed clean' removes what is ours whatever the file says") and "\n" not in msg
    assert "tb-gpu1" not in msg and "half" not in msg


def _fake_sweep(monkeypatch) -> list[str]:
    """clean's sweepers, recorded instead of run (the real ones are the integration tests')."""
    calls: list[str] = []
    monkeypatch.setattr(fabricctl, "require_root", lambda: None)
    for name in ("_stop_our_processes", "_remove_socket_folders", "_remove_ovs_rows", "_remove_namespaces",
                 "_remove_links"):
        monkeypatch.setattr(clean, name, lambda n=name: calls.append(n) or [f"{n} item"])
    monkeypatch.setattr(fabricctl, "_restore_ovs_tuning", lambda saved: calls.append(f"restore OVS from {saved}"))
    monkeypatch.setattr(clean.subprocess, "run", lambda *a, **k: type("P", (), {"returncode": 0})())
    from pfc import queue_watch

    monkeypatch.setattr(queue_watch, "remove_pins", lambda: [])
    return calls


def test_clean_goes_on_past_a_corrupt_state_file_and_removes_it(sdir, monkeypatch):
    """Before: load_state raised on an unparsable state.json and clean (and .ci/run with it) aborted."""
    calls = _fake_sweep(monkeypatch)
    (sdir / "state.json").write_text("{half")
    removed = clean.clean()
    # OVS's setting is given back from what OVS's own row keeps (the state file's copy is garbage)
    assert calls == ["restore OVS from None", "_stop_our_processes", "_remove_socket_folders", "_remove_ovs_rows",
                     "_remove_namespaces", "_remove_links"]
    assert len(removed) == 5 and not (sdir / "state.json").exists()


# ------------------------------------------------------------- the state dir
def _as_root(monkeypatch) -> None:
    """Make the checks run as they do as root (owned asks os.geteuid)."""
    monkeypatch.setattr(owned.os, "geteuid", lambda: 0)


def test_a_world_writable_state_dir_is_refused_in_one_line(sdir, monkeypatch, capsys):
    sdir.chmod(0o777)
    _as_root(monkeypatch)
    assert main(["status"]) == 1
    err = capsys.readouterr().err.strip()
    reason = owned.unsafe_dir(sdir) if os.getuid() == 0 else f"{sdir} is owned by uid {os.getuid()}"
    assert err == f"testbed: error: TESTBED_STATE_DIR {sdir}: refused, {reason}; {owned.PRIVATE_DIR_RULE}"
    if os.getuid() == 0:
        assert reason == f"{sdir} is writable by group and others (mode 777)"


def test_clean_in_an_unsafe_state_dir_sweeps_by_markers_but_leaves_its_files(sdir, monkeypatch):
    calls = _fake_sweep(monkeypatch)
    (sdir / "state.json").write_text(json.dumps({"controller_pid": 1}))  # pid 1: init, never to be signalled
    sdir.chmod(0o777)
    _as_root(monkeypatch)
    with pytest.raises(EnvironmentProblem) as info:
        clean.clean()
    assert str(info.value).startswith("removed 5 items by their markers, but did not touch the state files: "
                                      f"TESTBED_STATE_DIR {sdir}: refused, ")
    assert len(calls) == 6 and (sdir / "state.json").exists()


def test_up_refuses_an_unsafe_state_dir_before_building_anything(sdir, monkeypatch):
    sdir.chmod(0o777)
    _as_root(monkeypatch)
    with pytest.raises(EnvironmentProblem, match="refused"):
        fabricctl._fresh_state_dir()
    assert os.listdir(sdir) == []


def test_a_state_file_that_is_a_symbolic_link_is_not_followed(sdir):
    target = sdir.parent / "elsewhere.json"
    target.write_text(json.dumps({"fabric": {"kind": "zcube", "gpus": 16}}))
    (sdir / "state.json").symlink_to(target)
    with pytest.raises(EnvironmentProblem, match=r"state.json: cannot read the fabric state \(Too many levels"):
        fabricctl.load_state()


# ---------------------------------------------------------- socket folders
def test_only_our_socket_folders_are_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(clean.tempfile, "gettempdir", lambda: str(tmp_path))
    ours = tmp_path / "tb-serving-ours"
    ours.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(ours / "control.sock"))
    empty = tmp_path / "tb-serving-empty"
    empty.mkdir(mode=0o700)
    busy = tmp_path / "tb-serving-with-files"  # someone's folder with their files in it
    busy.mkdir(mode=0o700)
    (busy / "notes.txt").write_text("keep")
    open_dir = tmp_path / "tb-serving-open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    link = tmp_path / "tb-serving-link"
    link.symlink_to(busy)
    fake_sock = tmp_path / "tb-serving-fake"  # control.sock that is a regular file
    fake_sock.mkdir(mode=0o700)
    (fake_sock / "control.sock").write_text("")
    removed = clean._remove_socket_folders()
    assert sorted(removed) == [f"control socket folder {empty}", f"control socket folder {ours}"]
    assert not ours.exists() and not empty.exists()
    assert (busy / "notes.txt").read_text() == "keep" and open_dir.exists() and link.is_symlink()
    assert (fake_sock / "control.sock").exists()


# ------------------------------------------------------------ our processes
def _info(argv, uid=None, cwd=str(REPO), zombie=False) -> owned.ProcInfo:
    uid = os.geteuid() if uid is None else uid
    return owned.ProcInfo(pid=1234, start=1, argv=tuple(argv), uid=uid, euid=uid, cwd=cwd, zombie=zombie)


def test_our_process_is_this_users_this_checkouts_and_exactly_our_command_line(tmp_path):
    py = sys.executable
    ctl = [py, *inventory.controller_args(40123, 5, tmp_path, 7)]
    assert ctl[1:] == ["-m", "controller", "--port", "40123", "--listen-fd", "5", "--config",
                       str(tmp_path / "controller.json"), "--lifeline-fd", "7"]
    assert inventory.our_process(_info(ctl), tmp_path) == "controller"
    assert inventory.our_process(_info(ctl[:-2]), tmp_path) == "controller"  # no lifeline (a restart by 'fault')
    assert inventory.our_process(_info(ctl + ["--extra"]), tmp_path) is None
    assert inventory.our_process(_info(ctl), tmp_path / "other") is None  # another state directory's
    assert inventory.our_process(_info(ctl, uid=65534 if os.geteuid() != 65534 else 0), tmp_path) is None
    assert inventory.our_process(_info(ctl, cwd="/elsewhere"), tmp_path) is None  # another checkout's
    assert inventory.our_process(_info(ctl, zombie=True), tmp_path) is None
    assert inventory.our_process(_info(["/bin/sh", *ctl[1:]]), tmp_path) is None
    pfcd = [py, "-m", "pfc.pfcd", "--policy", str(tmp_path / "pfc_policy.json")]
    assert inventory.our_process(_info(pfcd), tmp_path) == "PFC helper"
    assert inventory.our_process(_info(pfcd[:-1] + ["/elsewhere/pfc_policy.json"]), tmp_path) is None
    launcher = [py, "-m", "traffic.runtime.launcher", "--specs", "x.json", "--parent", "99"]
    assert inventory.our_process(_info(launcher), tmp_path) == "agent launcher"
    assert inventory.our_process(_info(launcher, cwd="/tmp"), tmp_path) is None
    assert inventory.our_process(_info([py, "-m", "http.server"]), tmp_path) is None
    assert inventory.our_process(_info([py]), tmp_path) is None


# ------------------------------------------------------------ OVS's setting
class FakeOvs:
    """ovs-vsctl's Open_vSwitch row: other_config and external_ids, and the commands run."""

    def __init__(self, other: dict, ids: dict) -> None:
        self.row = {"other_config": dict(other), "external_ids": dict(ids)}
        self.commands: list[list[str]] = []

    def run(self, cmd, capture_output=True, text=False, **kw):
        self.commands.append(cmd)
        words = [w for w in cmd[1:] if not w.startswith("--timeout") and w != "--if-exists"]
        out = ""
        if words[0] == "get":
            column, key = words[3].split(":", 1)
            value = self.row[column].get(key)
            out = json.dumps(value) if value is not None else ""
        i = 0
        while i < len(words):
            if words[i] == "set":
                for kv in words[i + 3:]:
                    if kv == "--":
                        break
                    column, rest = kv.split(":", 1)
                    key, value = rest.split("=", 1)
                    self.row[column][key] = json.loads(value) if value.startswith('"') else value
            if words[i] == "remove":
                self.row[words[i + 3]].pop(words[i + 4], None)
            i += 1
        return type("P", (), {"returncode": 0, "stdout": out})()


@pytest.mark.parametrize("other,ids,kept,returned", [
    ({}, {}, "", None),  # OVS's default: nothing to give back but the absence
    ({"pmd-maxsleep": "200"}, {}, "200", "200"),
    ({"pmd-maxsleep": "500"}, {fabricctl.OVS_WAS: "300"}, "300", "300"),  # an earlier fabric's, never cleaned
])
def test_the_value_a_fabric_replaces_is_kept_on_ovss_own_row(monkeypatch, other, ids, kept, returned):
    ovs = FakeOvs(other, ids)
    monkeypatch.setattr(fabricctl.subprocess, "run", ovs.run)
    assert fabricctl._set_ovs_tuning() == {"pmd-maxsleep": returned}
    assert ovs.row == {"other_config": {"pmd-maxsleep": "500"}, "external_ids": {fabricctl.OVS_WAS: kept}}


@pytest.mark.parametrize("other,ids,saved,after", [
    ({"pmd-maxsleep": "500"}, {fabricctl.OVS_WAS: "200"}, None, {"pmd-maxsleep": "200"}),  # a corrupt state
    ({"pmd-maxsleep": "500"}, {fabricctl.OVS_WAS: ""}, {"pmd-maxsleep": "999"}, {}),  # OVS's row wins
    ({"pmd-maxsleep": "500"}, {}, {"pmd-maxsleep": "250"}, {"pmd-maxsleep": "250"}),  # a state of an earlier version
    ({"pmd-maxsleep": "500"}, {}, {"pmd-maxsleep": "1; rm"}, {}),  # not a value we saved: OVS's default
    ({"pmd-maxsleep": "77"}, {}, None, {"pmd-maxsleep": "77"}),  # nothing of ours changed it: left alone
])
def test_clean_gives_the_setting_back_from_ovss_row_whatever_the_state_says(monkeypatch, other, ids, saved, after):
    ovs = FakeOvs(other, ids)
    monkeypatch.setattr(fabricctl.subprocess, "run", ovs.run)
    fabricctl._restore_ovs_tuning(saved)
    assert ovs.row == {"other_config": after, "external_ids": {}}

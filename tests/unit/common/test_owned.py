"""common.owned: a process is signalled only while it is provably the one recorded, a directory root writes
into is writable by no one else, files are written without following links, and a lifeline tells the
fabric's processes whether the process that started them died (issue 28)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common import owned
from common.errors import EnvironmentProblem
from common.paths import REPO

PY = sys.executable


def _sleeper(*extra: str, trap_term: bool = False) -> subprocess.Popen:
    """A child that says 'ready' once its SIGTERM handler is set, then sleeps. On SIGTERM it says 'term' and
    exits, or with ``trap_term`` says it and sleeps on (only SIGKILL ends it)."""
    code = ("import os, signal, sys, time\n"
            "def on_term(*_):\n"
            "    print('term', flush=True)\n"
            + ("" if trap_term else "    os._exit(0)\n")
            + "signal.signal(signal.SIGTERM, on_term)\nprint('ready', flush=True)\n"
            "while True:\n    time.sleep(60)\n")
    proc = subprocess.Popen([PY, "-c", code, *extra], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    return proc


# ------------------------------------------------------------------ processes
def test_proc_info_reads_start_time_argv_uid_and_cwd(tmp_path):
    code = "print('ready', flush=True); import sys; sys.stdin.read()"
    proc = subprocess.Popen([PY, "-c", code, "x y"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=tmp_path)
    try:
        assert proc.stdout.readline() == b"ready\n"  # exec'd: /proc shows its own command line now
        info = owned.proc_info(proc.pid)
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        assert info.start == int(fields[19])  # field 22 of the whole line: 19th after the comm's ')'
        assert info.argv == (PY, "-c", code, "x y")
        assert (info.uid, info.euid) == (os.getuid(), os.geteuid()) and owned.same_user(info)
        assert info.cwd == str(tmp_path) and info.zombie is False
    finally:
        proc.communicate(b"")
    assert owned.proc_info(proc.pid) is None  # reaped: no such process


def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields(tmp_path):
    script = tmp_path / "a b) c"
    script.write_text("#!/bin/sh\necho ready\nread x\n")
    script.chmod(0o755)
    proc = subprocess.Popen([str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        info = owned.proc_info(proc.pid)
        raw = Path(f"/proc/{proc.pid}/stat").read_text()
        assert info.start == int(raw[raw.rindex(")") + 2:].split()[19])
    finally:
        proc.communicate(b"\n")


def test_a_pid_whose_start_time_differs_is_never_signalled():
    """A stale record of a pid now given to another process: the pid's start time is not the recorded one."""
    proc = _sleeper()
    try:
        start = owned.start_time(proc.pid)
        assert owned.stop(proc.pid, start + 1, lambda info: True) == "not ours"
        assert owned.stop(proc.pid, start - 1, lambda info: True) == "not ours"
        assert proc.poll() is None  # alive: no signal reached it
    finally:
        proc.kill()
        proc.wait()


def test_a_process_that_is_not_ours_is_never_signalled():
    proc = _sleeper()
    try:
        seen = []
        assert owned.stop(proc.pid, owned.start_time(proc.pid), lambda info: seen.append(info.argv) or False) == \
            "not ours"
        assert len(seen) == 1 and seen[0][:2] == (PY, "-c")  # asked about the process itself
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_our_process_gets_sigterm_first_and_is_reaped():
    proc = _sleeper()
    assert owned.stop(proc.pid, owned.start_time(proc.pid), lambda info: True) == "stopped"
    assert proc.stdout.read() == "term\n"  # it cleaned up on SIGTERM (the pause daemon resumes its queues)
    assert owned.proc_info(proc.pid) is None  # exited, and reaped by stop: our child leaves no zombie


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace():
    proc = _sleeper(trap_term=True)
    t0 = time.monotonic()
    assert owned.stop(proc.pid, owned.start_time(proc.pid), lambda info: True, term_s=0.2) == "stopped"
    assert time.monotonic() - t0 >= 0.2  # the grace was given
    assert proc.stdout.read() == "term\n"  # SIGTERM came and was ignored: only SIGKILL ended it
    assert owned.proc_info(proc.pid) is None


def test_a_gone_or_zombie_process_is_gone_and_never_signalled():
    proc = subprocess.Popen(["true"])
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # until it exited, left unreaped: a zombie
    assert owned.proc_info(proc.pid).zombie
    assert owned.stop(proc.pid, None, lambda info: True) == "gone"  # and stop reaps our zombie
    assert owned.proc_info(proc.pid) is None
    assert owned.stop(proc.pid, None, lambda info: True) == "gone"
    assert owned.stop(None, None, lambda info: True) == "gone" and owned.stop(0, None, lambda info: True) == "gone"


# ---------------------------------------------------------------- directories
def test_a_private_directory_under_tmp_is_safe(tmp_path):
    d = tmp_path / "state"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    assert owned.unsafe_dir(d) is None
    assert owned.unsafe_dir(d / "not" / "yet") is None  # made later, inside a checked directory


@pytest.mark.parametrize("mode,who", [(0o777, "group and others"), (0o757, "others"), (0o775, "its group"),
                                      (0o1777, "group and others")])
def test_a_directory_others_can_write_is_refused(tmp_path, mode, who):
    d = tmp_path / "state"
    d.mkdir()
    d.chmod(mode)
    assert owned.unsafe_dir(d) == f"{d} is writable by {who} (mode {mode:o})"
    # and below it: a writable ancestor that is not sticky lets others swap what is below
    assert owned.unsafe_dir(d / "inner") == (None if mode & stat.S_ISVTX else f"{d} is writable by {who} "
                                                                             f"(mode {mode:o})")


def test_a_file_is_not_a_directory(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    assert owned.unsafe_dir(f) == f"{f} is not a directory"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")  # CI runs as root: this never skips there
def test_a_directory_owned_by_another_user_is_refused(tmp_path):
    d = tmp_path / "state"
    d.mkdir(mode=0o755)
    os.chown(d, 65534, 65534)
    assert owned.unsafe_dir(d) == f"{d} is owned by uid 65534"
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    os.lchown(link, 65534, 65534)
    assert owned.unsafe_dir(link / "x") == f"{link} is a symbolic link owned by uid 65534"


def test_a_symbolic_link_is_followed_and_its_target_checked(tmp_path):
    target = tmp_path / "open"
    target.mkdir()
    target.chmod(0o777)
    link = tmp_path / "state"
    link.symlink_to(target)
    assert owned.unsafe_dir(link) == f"{target} is writable by group and others (mode 777)"
    target.chmod(0o755)
    assert owned.unsafe_dir(link) is None


def test_require_private_dir_as_root_refuses_in_one_line(tmp_path, monkeypatch):
    d = tmp_path / "state"
    d.mkdir()
    d.chmod(0o777)
    monkeypatch.setattr(owned.os, "geteuid", lambda: 0)
    with pytest.raises(EnvironmentProblem) as info:
        owned.require_private_dir(d, "TESTBED_STATE_DIR")
    reason = owned.unsafe_dir(d)
    assert str(info.value) == f"TESTBED_STATE_DIR {d}: refused, {reason}; {owned.PRIVATE_DIR_RULE}"
    assert "\n" not in str(info.value)


def test_require_private_dir_makes_a_missing_directory_755(tmp_path):
    old = os.umask(0)  # root with umask 0 would make it 777 without the chmod
    try:
        d = owned.require_private_dir(tmp_path / "a" / "b", "state directory")
    finally:
        os.umask(old)
    if os.getuid() == 0:
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o755 and stat.S_IMODE(os.stat(d.parent).st_mode) == 0o755
    else:  # not root: nothing to check, nothing made (the OS protects the caller)
        assert not d.exists()


# ---------------------------------------------------------------------- files
def test_open_private_refuses_a_symbolic_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "log").symlink_to(victim)
    with pytest.raises(EnvironmentProblem, match=r"log: is a symbolic link; refused to write through it"):
        owned.open_private(tmp_path / "log", "a")
    assert victim.read_text() == "keep"


def test_open_private_refuses_a_hard_link_and_replaces_with_w(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.link(victim, tmp_path / "log")
    with pytest.raises(EnvironmentProblem, match=r"log: not a regular file of this user with one name"):
        owned.open_private(tmp_path / "log", "ab")
    with owned.open_private(tmp_path / "log", "w") as fh:  # "w" unlinks the name first, then creates anew
        fh.write("new")
    assert victim.read_text() == "keep" and (tmp_path / "log").read_text() == "new"


def test_write_private_replaces_atomically_and_never_through_a_planted_temporary_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "state.json.tmp").symlink_to(victim)  # a planted temporary file
    owned.write_private(tmp_path / "state.json", '{"a": 1}')
    assert (tmp_path / "state.json").read_text() == '{"a": 1}' and victim.read_text() == "keep"
    assert not (tmp_path / "state.json.tmp").exists()


# ------------------------------------------------------------------- lifeline
WATCHER = "from common import owned; import sys; print(owned.lifeline_state({fd}, None), flush=True)"
STARTER = """
import subprocess, sys, time
from common import owned
r, w = owned.lifeline()
child = subprocess.Popen([sys.executable, "-c", {watcher!r}.format(fd=r)], pass_fds=(r,), stdout=sys.stdout)
print(child.pid, flush=True)
if sys.argv[1] == "release":
    owned.release(w)
    sys.exit(0)
time.sleep(60)
"""


@pytest.mark.parametrize("how,seen", [("kill", "cut"), ("release", "released")])
def test_a_lifeline_is_cut_by_the_starters_death_and_released_on_purpose(how, seen):
    starter = subprocess.Popen([PY, "-c", STARTER.format(watcher=WATCHER), how], stdout=subprocess.PIPE, text=True,
                               cwd=REPO)
    child = int(starter.stdout.readline())
    assert owned.proc_info(child) is not None
    if how == "kill":
        starter.kill()  # kill -9: no chance to let go
    assert starter.stdout.readline() == f"{seen}\n"  # the watcher's verdict, as soon as it has one
    starter.wait(timeout=10)


def test_lifeline_state_held_until_released_or_cut():
    r, w = owned.lifeline()
    try:
        assert owned.lifeline_state(r) == owned.LIFELINE_HELD
        assert not os.get_inheritable(r) and not os.get_inheritable(w)  # passed on only on purpose
        owned.release(w)
        assert owned.lifeline_state(r) == owned.LIFELINE_RELEASED
    finally:
        os.close(r)
    r, w = owned.lifeline()
    os.close(w)
    assert owned.lifeline_state(r) == owned.LIFELINE_CUT
    os.close(r)

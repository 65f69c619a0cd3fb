"""As root, --logs must be a directory only root can write to (issue 28): checked before anything is built,
refused in one line naming the path and the rule. Not root: the OS's permissions protect the caller."""

from __future__ import annotations

import os
from argparse import Namespace

import pytest

from common import owned
from common.errors import TestbedError
from testbed.cli import outputs
from testbed.cli.bench import common
from testbed.cli.bench import lateness as lateness_verb


@pytest.fixture
def as_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)


def _open(tmp_path, name="open"):
    d = tmp_path / name
    d.mkdir()
    d.chmod(0o777)
    return d


def test_a_logs_directory_others_can_write_is_refused(tmp_path, as_root):
    d = _open(tmp_path)
    with pytest.raises(TestbedError) as info:
        common.new_logs_dir(Namespace(logs=str(d)))  # bench pfc, exchange, failover
    assert str(info.value) == f"--logs {d}: refused, {owned.unsafe_dir(d)}; {owned.PRIVATE_DIR_RULE}"
    if os.getuid() == 0:  # as root the reason is the mode; not root, tmp_path is not root's to begin with
        assert owned.unsafe_dir(d) == f"{d} is writable by group and others (mode 777)"


def test_a_logs_directory_to_be_made_inside_one_others_can_write_is_refused(tmp_path, as_root):
    d = _open(tmp_path)
    with pytest.raises(TestbedError, match=r"^--logs .*/open/new: refused, "):
        outputs.require_new_dir(d / "new", "--logs")
    assert not (d / "new").exists()
    with pytest.raises(TestbedError, match="refused"):
        lateness_verb._check(Namespace(levels="16", logs=str(d)))  # bench lateness: an existing directory


def test_a_private_logs_directory_and_other_flags_pass(tmp_path, as_root):
    if os.getuid() == 0:
        ok = tmp_path / "ok"
        ok.mkdir(mode=0o755)
        assert outputs.require_new_dir(ok / "new", "--logs") == ok / "new"
    assert outputs.require_dir(_open(tmp_path, "out"), "--out")  # --out is not a private flag


def test_not_root_nothing_more_is_checked(tmp_path, monkeypatch):
    d = _open(tmp_path)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert outputs.require_dir(d, "--logs") == d

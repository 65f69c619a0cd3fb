"""A path the user gave that the OS refuses is one line and exit 2, never a traceback (issue 14, section 4).

Every case goes through ``testbed.cli.main`` as a user's command does. Verbs
that would need root and a fabric (replay, bench) are fenced: the functions
that would build anything are replaced by ones that fail the test, so a check
that does not happen early enough fails here instead of building a fabric.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from common.errors import TestbedError
from testbed.cli import main, outputs
from testbed.experiment import run, rundir
from testbed.experiment.schema import EXAMPLES_DIR
from tests.support import fake_runs
from tests.support.no_fabric import no_fabric  # noqa: F401 (autouse: nothing here reaches the fabric)

SMOKE = str(EXAMPLES_DIR / "smoke.yaml")


def _never(*args, **kwargs):
    raise AssertionError("a unit test reached code that needs root or builds a fabric")


@pytest.fixture(autouse=True)
def no_repetition(monkeypatch):
    """Besides the fabric (``no_fabric``): no repetition runs either."""
    from testbed.repetition import orchestrate

    monkeypatch.setattr(orchestrate, "run_repetition", _never)
    monkeypatch.setattr(run, "run_repetition", _never)


def one_line(capsys, argv: list[str], alone: bool = True) -> str:
    """Run the CLI, expect exit 2 and one 'testbed: error: ...' line on stderr, last, and no traceback;
    ``alone``: and nothing else (the check came before any progress message)."""
    status = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert status == 2, err
    assert lines and lines[-1].startswith("testbed: error: "), err
    assert sum(ln.startswith("testbed: error: ") for ln in lines) == 1 and "Traceback" not in err, err
    if alone:
        assert len(lines) == 1, err
    return lines[-1]


@pytest.fixture
def a_file(tmp_path) -> Path:
    path = tmp_path / "plain-file"
    path.write_text("not a directory\n")
    return path


# ------------------------------------------------------------ --out of run, sweep, replay
def _bad_outs(tmp_path: Path, a_file: Path) -> list[tuple[str, str]]:
    return [(str(tmp_path / "missing" / "dir"), "does not exist"),
            ("/nonexistent/dir", "does not exist"),
            (str(a_file / "sub"), f"{a_file} is a file, not a directory"),
            (str(a_file), "is a file, not a directory"),
            ("/proc/sys", "cannot create files there")]


def test_run_dry_run_checks_out(capsys, tmp_path, a_file):
    for out, words in _bad_outs(tmp_path, a_file):
        line = one_line(capsys, ["run", "--dry-run", "--out", out])
        assert f"--out {out}: " in line and words in line, line
    assert main(["run", "--dry-run", "--out", str(tmp_path)]) == 0


def test_run_checks_out_before_any_run_directory(capsys, tmp_path, a_file):
    line = one_line(capsys, ["run", SMOKE, "--out", str(a_file / "sub")])
    assert "is a file, not a directory" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == [a_file.name]


def test_sweep_checks_out(capsys, tmp_path, a_file):
    for argv in (["--dry-run"], []):
        line = one_line(capsys, ["sweep", SMOKE, "--param", "link.rate=3mbit,4mbit", *argv,
                                 "--out", str(tmp_path / "missing")])
        assert f"--out {tmp_path / 'missing'}: does not exist" in line


def test_replay_checks_out_before_anything(capsys, tmp_path, a_file):
    for out, words in _bad_outs(tmp_path, a_file):
        line = one_line(capsys, ["replay", "zcube", "--gpus", "16", "--out", out])
        assert f"--out {out}: " in line and words in line, line


# ------------------------------------------------------------ --logs of bench pfc
def test_bench_pfc_checks_logs_before_root(capsys, tmp_path, a_file):
    for logs, words in ((str(a_file / "logs"), f"{a_file} is a file, not a directory"),
                        (str(tmp_path / "missing" / "logs"), "does not exist"),
                        (str(a_file), "is a file, not a directory"),
                        ("/proc/sys/testbed-logs", "cannot create files in /proc/sys")):
        line = one_line(capsys, ["bench", "pfc", "zcube", "--logs", logs])
        assert f"--logs {logs}: " in line and words in line, line


def test_bench_logs_may_be_new_or_existing(tmp_path):
    from argparse import Namespace

    from testbed.cli.bench.common import new_logs_dir

    new_logs_dir(Namespace(logs=str(tmp_path / "new")))
    new_logs_dir(Namespace(logs=str(tmp_path)))
    assert not (tmp_path / "new").exists()  # checked, not made: bench makes it when it has logs


# ------------------------------------------------------------ --graph of plan
def test_plan_graph_folder_problems(capsys, tmp_path, a_file):
    for graph, words in ((str(tmp_path / "missing" / "g.png"), "does not exist"),
                         (str(a_file / "g.png"), f"{a_file} is a file, not a directory"),
                         (str(tmp_path), "is a directory"),
                         ("/proc/sys/g.dot", "cannot create files in /proc/sys")):
        line = one_line(capsys, ["plan", "zcube", "--graph", graph])
        assert f"--graph {graph}: " in line and words in line, line


def test_plan_checks_every_picture_before_drawing_one(capsys, tmp_path):
    (tmp_path / "g-roft.dot").mkdir()  # the second picture's place is taken by a folder
    line = one_line(capsys, ["plan", "zcube", "roft", "--graph", str(tmp_path / "g.dot")])
    assert f"--graph {tmp_path / 'g-roft.dot'}: is a directory" in line
    assert not (tmp_path / "g-zcube.dot").exists()


def test_plan_graph_on_a_full_device(capsys, tmp_path):
    full = tmp_path / "full.dot"
    full.symlink_to("/dev/full")  # every write: ENOSPC
    if not os.path.exists("/dev/full"):
        pytest.fail("/dev/full is missing on this machine")
    line = one_line(capsys, ["plan", "zcube", "--graph", str(full)])
    assert line == f"testbed: error: --graph {full}: No space left on device"


def test_plan_graph_on_a_full_disk_png(capsys, tmp_path, monkeypatch):
    from fabrics import draw as draw_module

    def full_disk(fabric, out):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(draw_module, "draw", full_disk)
    line = one_line(capsys, ["plan", "zcube", "--graph", str(tmp_path / "g.png")])
    assert line == f"testbed: error: --graph {tmp_path / 'g.png'}: No space left on device"


# ------------------------------------------------------------ a full disk during a run
def test_run_on_a_full_disk_is_one_line(capsys, tmp_path, monkeypatch):
    fake_runs.install(monkeypatch, _never)
    monkeypatch.setattr(rundir, "collect_versions", lambda: {})

    def full_disk(path, doc):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as file.write() raises it: no file name

    monkeypatch.setattr(rundir, "_write_json", full_disk)
    line = one_line(capsys, ["run", SMOKE, "--fabrics", "zcube", "--out", str(tmp_path)], alone=False)
    assert line == f"testbed: error: writing under --out {tmp_path}: No space left on device"


def test_an_os_error_naming_a_file_names_it(capsys, tmp_path, monkeypatch):
    fake_runs.install(monkeypatch, _never)
    monkeypatch.setattr(rundir, "collect_versions", lambda: {})
    target = tmp_path / "x" / "experiment.json"

    def refused(path, doc):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(target))

    monkeypatch.setattr(rundir, "_write_json", refused)
    line = one_line(capsys, ["run", SMOKE, "--fabrics", "zcube", "--out", str(tmp_path)], alone=False)
    assert line == f"testbed: error: {target}: Permission denied"


# ------------------------------------------------------------ a trace that is a directory
def test_trace_that_is_a_directory(capsys, tmp_path):
    line = one_line(capsys, ["run", "--dry-run", "--trace", str(tmp_path), "--out", str(tmp_path)])
    assert f"trace {tmp_path} is a directory" in line
    line = one_line(capsys, ["replay", "zcube", "--trace", str(tmp_path), "--out", str(tmp_path)])
    assert f"trace {tmp_path} is a directory" in line


# ------------------------------------------------------------ the helpers themselves
def test_os_error_line_forms():
    assert outputs.os_error_line(OSError(errno.ENOSPC, "No space left on device")) == "No space left on device"
    assert outputs.os_error_line(OSError(errno.ENOSPC, "No space left on device"), "--out r") == \
        "writing under --out r: No space left on device"
    assert outputs.os_error_line(OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b")) == \
        "/a -> /b: Invalid cross-device link"


def test_require_dir_accepts_a_writable_folder(tmp_path):
    assert outputs.require_dir(tmp_path) == tmp_path
    assert list(tmp_path.iterdir()) == []  # the write probe leaves nothing
    with pytest.raises(TestbedError, match="does not exist"):
        outputs.require_dir(tmp_path / "nope")

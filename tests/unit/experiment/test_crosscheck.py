"""The cross-check's orchestration (testbed.experiment.crosscheck): which engines run, B on A's recorded paths
when A is the emulator and B routes by itself, compare-only, and the verb's wiring; no engine runs (the run loop
is replaced by hand-made run directories)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from common.errors import TestbedError
from testbed.cli import build_parser
from testbed.cli import crosscheck as crosscheck_verb
from testbed.experiment import crosscheck
from tests.unit.report.test_crosscheck import make_run


@pytest.fixture
def runs(monkeypatch, tmp_path):
    """Replace the run loop: each run_experiment makes a hand-made run directory and records its overrides."""
    import testbed.experiment.run as run_mod
    import testbed.report

    made = []

    def fake_run(resolved, out_root, log, out):
        exp = resolved.experiment
        d = make_run(Path(out_root) / f"run{len(made)}-{exp.backend}", exp.backend,
                     tokens={"zcube": 105.0, "roft": 100.0}, paths_from=exp.paths_from)
        made.append({"backend": exp.backend, "paths_from": exp.paths_from, "dir": d})
        out(str(d))

    monkeypatch.setattr(run_mod, "run_experiment", fake_run)
    monkeypatch.setattr(testbed.report, "build_report", lambda d: d)
    monkeypatch.setattr("testbed.experiment.schema._check_paths_from", lambda exp: None)  # fake runs record nothing
    return made


def test_b_follows_the_emulators_recorded_paths_unless_told_not_to(runs, tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    doc, b_dir = crosscheck.run_crosscheck(None, [], tmp_path, ("emulated", "ns3"), None, False, print)
    assert [r["backend"] for r in runs] == ["emulated", "ns3"] and runs[1]["paths_from"] == str(runs[0]["dir"])
    assert doc["same_paths"] == "recorded" and (b_dir / "crosscheck.json").is_file()
    doc, _ = crosscheck.run_crosscheck(None, [], tmp_path, ("emulated", "ns3"), runs[0]["dir"], True, print)
    assert runs[2]["backend"] == "ns3" and runs[2]["paths_from"] is None and doc["same_paths"] == "own"


def test_two_simulators_share_one_path_rule_and_the_emulator_needs_root(runs, tmp_path, monkeypatch):
    doc, _ = crosscheck.run_crosscheck(None, [], tmp_path, ("ns3", "ideal"), None, False, print)
    assert [r["paths_from"] for r in runs] == [None, None]
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(TestbedError, match="needs root"):
        crosscheck.run_crosscheck(None, [], tmp_path, ("emulated", "ns3"), None, False, print)


def test_the_verb_compares_two_finished_runs_and_prints_the_json(runs, tmp_path, capsys):
    a = make_run(tmp_path / "a", "emulated", tokens={"zcube": 105.0, "roft": 100.0})
    b = make_run(tmp_path / "b", "ns3", tokens={"zcube": 105.0, "roft": 100.0}, paths_from=str(tmp_path / "a"))
    args = build_parser().parse_args(["crosscheck", "--runs", str(a), str(b), "--json"])
    assert args.func is crosscheck_verb.cmd_crosscheck and args.func(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["agreement"]["all"] and doc["same_paths"] == "recorded" and not runs
    args = build_parser().parse_args(["crosscheck", "--runs", str(a), str(b), "--against", str(a)])
    with pytest.raises(TestbedError, match="--runs compares two finished runs"):
        args.func(args)


def test_a_run_shows_the_shipped_cross_check_only_for_the_experiment_as_checked(tmp_path, monkeypatch):
    """The default names its cross-check; a run that changes what is served or carried (n=128) is another
    experiment the check does not speak for, and a run that only changes how often or on which engine is not."""
    from testbed.experiment import rundir
    from testbed.experiment.schema import EXAMPLES_DIR, Override, resolve

    monkeypatch.setattr(rundir, "write_plan", lambda exp, run_dir, log: None)
    default = EXAMPLES_DIR / "default.yaml"
    said: list[str] = []
    for name, overrides in (("same", [Override("repetitions", 1, "--reps"), Override("backend", "ideal", "--backend")]),
                            ("other", [Override("gpus", 128, "--set")])):
        (tmp_path / name).mkdir()
        rundir.start_run_dir(resolve(default, overrides), tmp_path / name, {}, said.append, [], 0.0)
    assert json.loads((tmp_path / "same" / "crosscheck.json").read_text())["shipped"] == "crosscheck.json"
    assert not (tmp_path / "other" / "crosscheck.json").exists()
    assert any("this run sets gpus: its line is left out" in m for m in said)

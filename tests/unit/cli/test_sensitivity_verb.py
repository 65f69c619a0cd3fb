"""The ``sensitivity`` verb's flags: what it hands to ``testbed.experiment.sensitivity`` (no run)."""

from __future__ import annotations

import argparse

import pytest

from testbed.cli import sensitivity
from testbed.cli.__init__ import main


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="testbed")
    sensitivity.register(parser.add_subparsers(dest="verb"))
    return parser


def test_the_verb_takes_its_flags_and_the_run_flags():
    args = _parser().parse_args(["sensitivity", "exp.yaml", "--only", "pair-hash,zipf", "--reps", "1", "--json",
                                 "--set", "trace.duration_s=14", "--backend", "ideal"])
    assert (args.experiment, args.only, args.reps, args.json, args.backend) == ("exp.yaml", "pair-hash,zipf", 1,
                                                                                True, "ideal")
    assert args.set == ["trace.duration_s=14"] and args.func is sensitivity.cmd_sensitivity


@pytest.mark.parametrize("only", [",", " , "])
def test_an_empty_only_list_is_refused_in_one_line_before_anything_runs(only, tmp_path, capsys):
    assert main(["sensitivity", "--only", only, "--dry-run", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"testbed: error: --only {only!r}: expected alternative names, e.g. --only pair-hash,single-node"]
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_alternative_is_named(tmp_path, capsys):
    assert main(["sensitivity", "--only", "no-such", "--dry-run", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no-such" in err and len(err.strip().splitlines()) == 1

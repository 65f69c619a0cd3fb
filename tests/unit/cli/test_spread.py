"""The spread verb: flags to testbed.experiment.spread, the table or --json, the directory last."""

import json

from testbed.cli import build_parser
from testbed.cli import spread as spread_verb
from tests.support import fake_runs


def test_spread_prints_its_json_and_takes_the_experiment_flags(tmp_path, monkeypatch, capsys):
    fake_runs.install(monkeypatch, fake_runs.FakeReplay(summary_of=lambda spec: fake_runs.default_summary(spec)
                                                        | {"throughput_tokens_per_s": 100.0}))
    fake_runs.no_report(monkeypatch)
    args = build_parser().parse_args(["spread", "--outcomes", "2", "--set", "trace.first_n=300", "--json",
                                      "--out", str(tmp_path)])
    assert args.func is spread_verb.cmd_spread
    assert spread_verb.cmd_spread(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["outcomes"] == 2 and doc["figures"]["throughput_tokens_per_s"]["per_outcome"] == [1.0, 1.0]

"""The scale verb: flags to testbed.experiment.scale, --dry-run, --json, the progress display off a terminal."""

import json

from testbed.cli import build_parser
from testbed.cli import scale as scale_verb
from testbed.experiment.run import RepetitionBar
from tests.support import fake_runs


def test_dry_run_prints_every_size_resolved_and_runs_nothing(tmp_path, capsys):
    args = build_parser().parse_args(["scale", "--sizes", "32,2048", "--dry-run", "--out", str(tmp_path)])
    assert args.func is scale_verb.cmd_scale and scale_verb.cmd_scale(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["values"] for d in doc] == [{"gpus": "32", "serving.concurrency": "28", "trace.first_n": "10000"},
                                         {"gpus": "2048", "serving.concurrency": "1792", "trace.first_n": "40000"}]
    assert doc[1]["experiment"]["gpus_per_switch"] == 64 and doc[1]["experiment"]["backend"] == "fluid"
    assert list(tmp_path.iterdir()) == []


def test_the_verb_runs_the_curve_with_the_experiment_flags_and_prints_json(tmp_path, monkeypatch, capsys):
    fake_runs.install(monkeypatch, fake_runs.FakeReplay(summary_of=lambda spec: fake_runs.default_summary(spec)
                                                        | {"throughput_tokens_per_s": 100.0}))
    fake_runs.no_report(monkeypatch)
    args = build_parser().parse_args(["scale", "--sizes", "32", "--reps", "1", "--json", "--out", str(tmp_path)])
    assert scale_verb.cmd_scale(args) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert [p["n"] for p in doc["points"]] == [32] and doc["points"][0]["ratios"]["throughput_tokens_per_s"] == 1.0
    assert "estimated wall time" in err and "scale curve of default on the fluid backend" in err  # plain lines


def test_without_a_terminal_the_bar_is_plain_log_lines(capsys):
    bar = RepetitionBar("scale")
    bar.start(4)  # stderr is captured, not a terminal: no rich display
    bar.log("a line")
    bar.step(None, {"status": "ok"})
    bar.stop()
    assert capsys.readouterr().err == "a line\n"

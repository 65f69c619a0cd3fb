"""Where a run's requests come from (issue 40): a trace file (``trace.path``) and a named workload
(``trace.workload``) are alternatives. The one the command line sets replaces the file's other one; both in one
place is one line naming both keys, exit 2, before a run directory exists; experiment.json records what was
served and the terminal's first line names it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from common.errors import TestbedError
from testbed.cli import main
from testbed.experiment import run
from testbed.experiment.schema import Override, resolve

ROWS = 7


def mooncake(path: Path, rows: int = ROWS, input_tokens: int = 2560) -> Path:
    """A hand-made Mooncake JSONL: ``rows`` requests of ``input_tokens`` sharing their first 4 blocks."""
    path.write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": input_tokens, "output_length": 20,
                                        "hash_ids": [0, 1, 2, 3, 10 + i]}) + "\n" for i in range(rows)))
    return path


def test_a_trace_set_on_the_command_line_replaces_the_default_experiments_workload(tmp_path):
    trace = mooncake(tmp_path / "mine.jsonl")
    exp = resolve(None, [Override("trace.path", str(trace), "--set")]).experiment
    assert (exp.trace.path, exp.trace.workload) == (str(trace), None)
    served = run.served(exp)
    assert (served["source"], served["path"], served["format"]) == ("trace", str(trace), "mooncake")
    assert served["requests"] == served["with_hash_ids"] == ROWS


def test_a_workload_set_on_the_command_line_replaces_the_files_trace(tmp_path):
    trace = mooncake(tmp_path / "mine.jsonl")
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump({"trace": {"path": str(trace)}}))
    exp = resolve(path, [Override("trace.workload", "azure-conversation", "--set")]).experiment
    assert exp.trace.workload == "azure-conversation" and exp.trace.path.endswith("azure2023_conv.csv.gz")
    # the workaround of issue 40 still means the trace
    exp = resolve(None, [Override("trace.workload", None, "--set"), Override("trace.path", str(trace), "--set")])
    assert exp.experiment.trace.path == str(trace)


def test_both_on_the_command_line_are_one_line_naming_both_before_a_run_directory(tmp_path, capsys):
    trace = mooncake(tmp_path / "mine.jsonl")
    out = tmp_path / "out"
    out.mkdir()
    status = main(["run", "--backend", "ideal", "--trace", str(trace), "--set", "trace.workload=agentic-coding",
                   "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert status == 2 and list(out.iterdir()) == []
    assert err.count("\n") == 0 and err.endswith(
        "default experiment: trace.path (from --trace) and trace.workload (from --set) are alternatives (a trace "
        f"file, or a named workload): expected one of them, not both (got {str(trace)!r} and 'agentic-coding')")


def test_both_in_the_file_are_one_line_naming_both(tmp_path):
    trace = mooncake(tmp_path / "mine.jsonl")
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump({"trace": {"path": str(trace), "workload": "agentic-coding"}}))
    with pytest.raises(TestbedError) as info:
        resolve(path)
    assert str(info.value) == (f"{path}: trace: trace.path and trace.workload are alternatives (a trace file, or a "
                               f"named workload): expected one of them, not both (got path {str(trace)!r} and "
                               "workload 'agentic-coding')")


def test_a_runs_experiment_json_runs_again_with_its_workload(tmp_path):
    """experiment.json records a shipped workload's file as its trace.path (what was served): run again, the
    workload names it again, not a second source."""
    exp = resolve(None, [Override("trace.workload", "mooncake-conversation", "--set")])
    saved = tmp_path / "experiment.json"
    saved.write_text(json.dumps(exp.as_dict()))
    assert exp.experiment.trace.path and exp.as_dict()["experiment"]["trace"]["workload"] == "mooncake-conversation"
    again = resolve(saved).experiment
    assert (again.trace.workload, again.trace.path) == ("mooncake-conversation", exp.experiment.trace.path)


@pytest.mark.parametrize("served, line", [
    ({"source": "trace", "workload": None, "seed": None, "path": "/x/MY_TRACE.jsonl", "format": "mooncake",
      "requests": 3993, "with_hash_ids": 3993, "skipped_rows": 0},
     "MY_TRACE.jsonl, 3,993 requests, Mooncake format, with hash_ids"),
    ({"source": "generated", "workload": "agentic-coding", "seed": 0, "path": None, "format": None,
      "requests": 10000, "with_hash_ids": 10000, "skipped_rows": 0},
     "agentic-coding, generated, seed 0 (10,000 requests drawn)"),
    ({"source": "workload", "workload": "azure-conversation", "seed": None, "path": "/r/azure2023_conv.csv.gz",
      "format": "azure", "requests": 19366, "with_hash_ids": 0, "skipped_rows": 2},
     "azure-conversation (azure2023_conv.csv.gz), 19,366 requests, Azure format, no hash_ids, 2 bad rows skipped"),
])
def test_what_was_served_in_one_line(served, line):
    from testbed.report.workload import served_text

    assert served_text(served) == line


def test_a_users_mooncake_trace_is_served_on_the_ideal_backend_with_its_hit_rate(tmp_path, capsys):
    """The default experiment with a user's Mooncake JSONL (`--set trace.path=`), shortened: every request is 2,560
    tokens whose first 4 blocks (2,048 tokens) all requests share, so once the first requests have filled the
    prefill units' caches (before the warm-up ends) every measured request hits 2,048 of 2,560 tokens: 80 %."""
    trace = tmp_path / "mine.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i, "input_length": 2560, "output_length": 20,
                                         "hash_ids": [0, 1, 2, 3]}) + "\n" for i in range(40)))
    out = tmp_path / "out"
    out.mkdir()
    status = main(["run", "--backend", "ideal", "--set", f"trace.path={trace}", "--set", "trace.duration_s=3",
                   "--set", "serving.warmup_s=1", "--reps", "1", "--out", str(out)])
    std = capsys.readouterr()
    assert status == 0
    assert std.err.splitlines()[0] == "serving: mine.jsonl, 40 requests, Mooncake format, with hash_ids"
    run_dir = Path(std.out.splitlines()[-1])
    assert json.loads((run_dir / "experiment.json").read_text())["served"]["path"] == str(trace)
    for f in ("zcube", "roft"):
        rep = run_dir / "runs" / f / "rep1"
        assert {r["input_tokens"] for r in csv.DictReader((rep / "requests.csv").open())} == {"2560"}
        p = json.loads((rep / "summary.json").read_text())["prefix_cache"]
        assert p["requests"] > 20 and (p["hit_rate"], p["device_hit_rate"], p["host_hit_rate"]) == (0.8, 0.8, 0.0)
    assert ("prefix-cache hit, token-weighted over the measured requests (TTFT's): ZCube 80.0 % (GPU 80.0 % + host "
            "0.0 %), ROFT 80.0 % (GPU 80.0 % + host 0.0 %)") in std.out.splitlines()
    assert json.loads((run_dir / "summary.json").read_text())["headline"]["prefix_cache"]["roft"]["hit_rate"] == 0.8
    assert "hit: host tier" in (run_dir / "report.html").read_text()

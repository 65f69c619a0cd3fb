"""testbed.experiment.experiment_file: an experiment file's raw mapping, or one line naming the file."""

import json

import pytest

from common.errors import TestbedError
from testbed.experiment.experiment_file import read_file


def test_a_key_given_twice_is_refused_with_its_line(tmp_path):
    p = tmp_path / "e.yaml"
    p.write_text("gpus: 32\nlink:\n  rate: 3mbit\n  rate: 4mbit\n")
    with pytest.raises(TestbedError, match=r"e.yaml: line 4: not valid YAML: duplicate key 'rate'"):
        read_file(p)


def test_not_a_mapping_and_empty(tmp_path):
    p = tmp_path / "e.yaml"
    p.write_text("- 1\n- 2\n")
    with pytest.raises(TestbedError, match="must hold a mapping of keys .* got a list"):
        read_file(p)
    p.write_text("")
    assert read_file(p) == {}


def test_a_runs_experiment_json_is_its_experiment_with_the_workloads_file_named_again(tmp_path):
    p = tmp_path / "experiment.json"
    p.write_text(json.dumps({"overrides": [], "experiment": {"gpus": 16, "trace": {"workload": "agentic-coding",
                                                                                   "path": "/abs/file.jsonl"}}}))
    assert read_file(p) == {"gpus": 16, "trace": {"workload": "agentic-coding", "path": None}}

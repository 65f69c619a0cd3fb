"""One definition of a workload (testbed.report.workload) used by every comparison of experiments: the
calibration's applicability, a shipped sensitivity's baseline, `testbed compare` and `testbed crosscheck
--against`; and paths shown relative to the repository."""

from __future__ import annotations

import html
import json
from types import SimpleNamespace

import pytest

from common.paths import REPO, shown
from testbed.experiment import crosscheck
from testbed.experiment.schema import Experiment, resolve
from testbed.report import crosscheck as xc
from testbed.report import sensitivity_section, workload
from testbed.report.comparison import differences as compare_differences
from testbed.report.serving import calibration_applies, calibration_differences

# a value for every key that does not define a workload, other than the default's
RUN_KEYS_CHANGED = {"name": "elsewhere", "fabrics": ["roft"], "backend": "ideal", "hosts": "/tmp/hosts.yaml",
                    "repetitions": 7, "seed": 9, "calibration": "/x/calibration.json", "load_curve": "/x/lc.json",
                    "sensitivity": [{"name": "a", "assumption": None, "set": {"serving.policy": "adaptive"}}],
                    "sensitivity_result": "/x/sensitivity.json", "sweep": {"seed": [1, 2]}, "sweep_paired": True,
                    "hash_seed": 5, "scale_result": "/x/scale_result.json", "paths_from": "/x/run",
                    "crosscheck_result": "/x/crosscheck.json", "jobs": 3, "scale_live": "never",
                    "twin": {"burst_bytes": 18000, "cable_delay_us": 5.0, "hop_delay_us": 250.0,
                             "send_delay_us": 3500.0, "tcp": "newreno", "delack_count": 1, "delack_timeout_ms": 20.0,
                             "initial_cwnd": 4, "min_rto_ms": 100.0}}


def _default() -> dict:
    return resolve(None).experiment.model_dump(mode="json")


def _run(experiment: dict) -> SimpleNamespace:
    return SimpleNamespace(config={"experiment": experiment})


def test_the_list_names_only_keys_of_the_schema_and_every_one_is_changed_here():
    assert set(workload.NOT_WORKLOAD_KEYS) <= set(Experiment.model_fields)
    assert set(RUN_KEYS_CHANGED) == set(workload.NOT_WORKLOAD_KEYS)
    assert not workload.is_workload_key("seed") and not workload.is_workload_key("sweep_paired")
    assert workload.is_workload_key("serving.concurrency") and workload.is_workload_key("trace.path")


def test_a_run_differing_only_in_keys_that_do_not_define_a_workload_is_the_same_workload():
    base = _default()
    other = json.loads(json.dumps(base)) | RUN_KEYS_CHANGED
    assert workload.differences(base, other) == []
    # the calibration applies (the report's warning named sensitivity_result and sweep_paired before)
    assert calibration_applies({"experiment": base, "knob": "serving.concurrency"}, _run(other)) is True
    # a shipped sensitivity's baseline is not called different from this run
    assert sensitivity_section._differences({"baseline": {"experiment": base}}, {"experiment": other}) == []
    # compare lists the keys, none of them as the workload
    diff = compare_differences([base, other])
    assert {d["key"].split(".")[0] for d in diff} == set(RUN_KEYS_CHANGED)
    assert not any(d["workload"] for d in diff)


def test_a_run_differing_in_the_knob_only_is_the_calibrated_workload_and_in_more_is_not():
    calibrated = _default()
    run = json.loads(json.dumps(calibrated))
    run["serving"]["concurrency"] = calibrated["serving"]["concurrency"] * 2
    cal = {"experiment": calibrated, "knob": "serving.concurrency"}
    assert calibration_differences(cal, _run(run)) == [] and calibration_applies(cal, _run(run)) is True
    # without the knob set aside it is a difference like any other
    assert workload.differences(calibrated, run) == ["serving.concurrency"]
    # the knob the calibration names, not a fixed one
    assert calibration_differences(cal | {"knob": "serving.decode_batch"}, _run(run)) == ["serving.concurrency"]
    run["serving"]["model"] = "deepseek-v3"
    assert calibration_differences(cal, _run(run)) == ["serving.model"]
    assert calibration_applies(cal, _run(run)) is False


def test_a_calibration_at_the_seeds_scale_carries_its_load_per_gpu_to_a_smaller_cluster():
    from testbed.report.serving import calibrated_level

    calibrated = _default() | {"gpus": 512, "gpus_per_switch": "auto"}
    calibrated["trace"] = {**calibrated["trace"], "duration_s": 15}
    run = _default() | {"gpus": 32, "gpus_per_switch": 8}
    run["serving"] = {**run["serving"], "concurrency": 24}
    per_size = {"experiment": calibrated, "knob": "serving.concurrency", "chosen": {"level": 384}}
    # a calibration of one size only: the size and the run's length are differences
    assert calibration_differences(per_size, _run(run)) == ["gpus", "gpus_per_switch", "trace.duration_s"]
    assert calibrated_level(per_size, 32) == 384
    per_gpu = per_size | {"gpus": 512, "per_gpu": 0.75}
    assert calibration_differences(per_gpu, _run(run)) == [] and calibration_applies(per_gpu, _run(run)) is True
    assert calibrated_level(per_gpu, 32) == 24 and calibrated_level(per_gpu, 1) == 1
    assert calibrated_level({"chosen": None}, 32) is None and calibrated_level(None, 32) is None


def test_files_by_name_and_a_key_one_side_lacks_left_at_its_empty_default():
    a = {"trace": {"path": "/one/clone/data/traces/x.csv.gz"}, "serving": {"new_key": None}}
    b = {"trace": {"path": "/another/data/traces/x.csv.gz"}}
    assert workload.differences(a, b) == []
    b["serving"] = {"new_key": 3}
    assert workload.differences(a, b) == ["serving.new_key"]
    assert workload.differences(a, b, aside=("serving",)) == []


def test_crosscheck_of_another_workload_says_so(tmp_path):
    from tests.unit.report.test_crosscheck import make_run

    a = make_run(tmp_path / "a", "emulated", tokens={"zcube": 2.0, "roft": 1.0})
    b = make_run(tmp_path / "b", "ns3", tokens={"zcube": 2.0, "roft": 1.0})
    assert xc.compare_runs(a, b)["workload_differences"] == []
    exp = json.loads((a / "experiment.json").read_text())
    exp["experiment"]["link"] = {"represents": 1e11}
    (a / "experiment.json").write_text(json.dumps(exp))
    doc = xc.compare_runs(a, b)
    assert doc["workload_differences"] == ["link.represents"]
    assert any(line.startswith("NOT the same workload") and "link.represents" in line for line in crosscheck.table(doc))


@pytest.mark.parametrize("given,expected", [
    (str(REPO / "reports" / "20261205-sensitivity-default"), "reports/20261205-sensitivity-default"),
    (REPO / "experiments" / "default.yaml", "experiments/default.yaml"),
    ("/somewhere/else/reports/x", "/somewhere/else/reports/x"),
    ("reports/x (on the machine that ran it)", "reports/x (on the machine that ran it)"),
])
def test_a_path_under_the_repository_is_shown_relative_to_it(given, expected):
    assert shown(given) == expected


def test_the_sensitivity_caption_shows_where_it_was_made_relative_to_the_repository():
    doc = {"dir": str(REPO / "reports" / "20261205-161422-sensitivity-default"), "baseline": {"name": "baseline"},
           "alternatives": []}
    text = html.unescape(sensitivity_section.section(doc))
    assert "(reports/20261205-161422-sensitivity-default, created" in text and str(REPO) not in text


def test_the_calibration_section_says_at_which_size_it_was_made_and_that_the_run_takes_its_load_per_gpu():
    from testbed.report.serving import calibration_section

    row = {"level": 448, "throughput_ratio": 1.182, "ttft_p99_ratio": 0.854, "ttft_p50_ratio": 0.725,
           "distance": 0.074}
    cal = {"knob": "serving.concurrency", "levels": [row], "chosen": row, "distance": 0.074,
           "within_resolution": False, "seed": {"throughput_ratio": 1.19, "ttft_ratio": 0.78}}
    at_size = calibration_section(cal, None, True)
    assert "with 512 GPUs" not in at_size and "a GPU)" not in at_size
    per_gpu = calibration_section(cal | {"gpus": 512, "per_gpu": 0.875}, None, True)
    assert "on ROFT (the fabric of the seed's cluster before its migration: an assumption) with 512 GPUs" in per_gpu
    assert "not within the testbed's resolution; this run takes its load per GPU (0.875 a GPU)" in per_gpu

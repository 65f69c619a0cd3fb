"""What a repetition would fail on that the experiment alone decides is refused by the schema's semantic check
(issue 40): one line naming the key path and what would be accepted, exit 2, before any run directory exists.
Each rule is planted here once; without its check the experiment would resolve and the repetition fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.errors import TestbedError
from testbed.cli import main
from testbed.experiment.schema import Override, resolve, validate


def error(overrides=(), path=None) -> TestbedError:
    with pytest.raises(TestbedError) as info:
        resolve(path, [Override(k, v, "--set") for k, v in overrides])
    assert "\n" not in str(info.value)
    return info.value


def small_trace(path: Path, input_tokens: int = 2048, rows: int = 4) -> str:
    path.write_text("".join(json.dumps({"timestamp": i, "input_length": input_tokens, "output_length": 10,
                                        "hash_ids": [0, 1, 2, 3]}) + "\n" for i in range(rows)))
    return str(path)


def test_a_warm_up_not_shorter_than_the_run_is_refused_before_a_run_directory(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    assert main(["run", "--backend", "ideal", "--set", "trace.duration_s=4", "--out", str(out)]) == 2
    assert list(out.iterdir()) == []
    assert capsys.readouterr().err.strip() == (
        "testbed: error: default experiment: serving.warmup_s: 5 s is not shorter than the run's 4 cluster seconds "
        "(trace.duration_s 4): expected serving.warmup_s < 4, or a longer trace.duration_s")


def test_the_warm_up_is_compared_with_the_run_in_cluster_seconds_for_trace_timed_arrivals(tmp_path):
    exc = error([("trace.path", small_trace(tmp_path / "t.jsonl")), ("serving.arrivals", "trace"),
                 ("serving.warm_start", False), ("trace.duration_s", 6), ("trace.speed", 1.5)])
    assert exc.key == "serving.warmup_s"
    assert "run's 4 cluster seconds (trace.duration_s 6 / trace.speed 1.5)" in str(exc)


def test_an_ep_group_must_divide_the_models_experts():
    # 3 decode servers of 8: an EP24 group cannot hold GLM-5's 256 routed experts evenly
    exc = error([("serving.layout", None), ("serving.prefill_fraction", 0.25)])
    assert exc.key == "serving.decode_ep"
    assert "decode EP group of 24 GPUs does not divide 256 routed experts; expected a group size dividing 256" \
        in str(exc)


def test_an_ep_size_must_divide_its_kinds_gpus():
    exc = error([("serving.layout", None), ("serving.decode_ep", 12)])
    assert exc.key == "serving.decode_ep" and "decode EP size 12 does not divide the 16 decode GPUs" in str(exc)


def test_the_model_must_leave_memory_for_the_prefix_cache_on_its_gpu():
    exc = error([("serving.gpu", "h100")])
    assert exc.key == "serving.gpu" and "glm-5 on h100" in str(exc) and "expected a unit whose weights fit" in str(exc)


def test_every_request_must_fit_a_decode_units_kv_pool(tmp_path):
    exc = error([("trace.path", small_trace(tmp_path / "huge.jsonl", input_tokens=5_000_000))])
    assert exc.key == "serving.decode_memory"
    assert "request 0 needs 5000010 tokens of KV, more than a decode unit holds" in str(exc)


@pytest.mark.parametrize("driver", ["plan", "live"])
def test_a_slice_without_requests_is_refused_whatever_the_driver(tmp_path, driver):
    trace = small_trace(tmp_path / "t.jsonl")
    extra = [] if driver == "live" else [("serving.driver", "plan"), ("serving.arrivals", "trace"),
                                         ("trace.workload", None), ("serving.layout", None),
                                         ("serving.model", "llama-3.1-70b"), ("link.time_dilation", 1)]
    exc = error([("trace.path", trace), ("trace.start_s", 100), *extra])
    assert exc.key == "trace.start_s" and f"{trace}: " in str(exc)


def test_a_fault_after_the_run_would_never_be_applied():
    with pytest.raises(TestbedError) as info:
        validate({"trace": {"duration_s": 10}, "faults": [{"at": 12, "target": "controller", "action": "restart"}]},
                 "x")
    assert info.value.key == "faults[0].at"
    assert str(info.value) == ("x: faults[0].at: 12 s is not within the run's 10 s (it would never be applied): "
                               "expected at < 10")


def test_two_faults_may_not_hold_one_target_at_once():
    faults = [{"at": 1, "duration": 5, "target": "link gpu3:p1"}, {"at": 3, "target": "link gpu3:p1"}]
    with pytest.raises(TestbedError) as info:
        validate({"trace": {"duration_s": 10}, "faults": faults}, "x")
    assert info.value.key == "faults[1].at"
    assert "faults[1].at: on zcube: link " in str(info.value)
    assert "is held by faults[0] from 1 s to 6 s" in str(info.value)
    faults[1]["at"] = 6  # one after the other: fine
    assert len(validate({"trace": {"duration_s": 10}, "faults": faults}, "x").faults) == 2


def test_the_twins_assumptions_are_checked_and_reach_its_repetitions(tmp_path, capsys):
    from testbed.experiment.schema import repetition_spec
    from testbed.repetition.drivers.base import conditions

    exc = error([("twin.tcp", "reno")])
    assert exc.key == "twin.tcp" and "'cubic'" in str(exc) and "reno" in str(exc)
    exc = error([("twin.burst_bytes", 1000)])
    assert exc.key == "twin.burst_bytes"
    assert "1000 B is smaller than one frame (3014 B at link.mtu 3000): expected at least 3014" in str(exc)
    assert error([("twin.delack_count", 0)]).key == "twin.delack_count"
    out = tmp_path / "out"
    out.mkdir()
    assert main(["run", "--backend", "ns3", "--set", "twin.hop_delay_us=-1", "--out", str(out)]) == 2
    assert list(out.iterdir()) == []
    assert "twin.hop_delay_us (from --set): must be >= 0 (got -1)" in capsys.readouterr().err
    exp = resolve(None, [Override("twin.burst_bytes", "18kb", "--set"), Override("twin.tcp", "newreno", "--set")]
                  ).experiment
    spec = repetition_spec(exp, "roft", 2)
    assert conditions(spec).twin == spec.twin == exp.twin
    assert (exp.twin.burst_bytes, exp.twin.tcp) == (18000, "newreno")


def test_the_twins_bucket_holds_one_frame_at_the_links_mtu():
    from testbed.repetition.settings import Twin

    Twin(burst_bytes=3014).check_frame(3000)  # one frame: IP 3000 + Ethernet 14
    Twin().check_frame(3000)  # no bucket
    with pytest.raises(TestbedError) as info:
        Twin(burst_bytes=3013).check_frame(3000)
    assert info.value.key == "burst_bytes" and "3013 B is smaller than one frame (3014 B" in str(info.value)

"""testbed.repetition.settings (a repetition's sections as the schema reads them) and
testbed.repetition.drivers.base (what surrounds a repetition's traffic), directly."""

from __future__ import annotations

import pydantic
import pytest

from common.paths import DEFAULT_TRACE
from testbed.repetition import settings
from testbed.repetition.drivers import base as driver
from tests.support.settings import repetition


def test_link_values_take_the_command_lines_units():
    link = settings.Link(rate="4mbit", represents="400gbit", buffer_bytes="64KiB", burst_bytes=18000)
    assert (link.rate, link.represents, link.buffer_bytes, link.burst_bytes) == (4e6, 4e11, 65536, 18000)
    assert settings.Link().rate == 3e6 and settings.Link().mtu == 3000 and settings.Link().time_dilation == 1.0


@pytest.mark.parametrize("section,kw,says", [
    (settings.Link, {"rate": True}, "expected a rate such as 3mbit or a number of bit/s, not a boolean"),
    (settings.Link, {"rate": "fast"}, "rate 'fast' is not understood"),
    (settings.Link, {"time_dilation": 0.5}, "greater than or equal to 1"),
    (settings.Serving, {"prefill_tp": "8"}, "Input should be a valid integer"),  # strict: YAML types its scalars
    (settings.Serving, {"model": "gpt-9"}, "gpt-9"),
    (settings.Serving, {"extra_key": 1}, "Extra inputs are not permitted"),
    (settings.Pfc, {"dynamic_alpha": 0.001}, "greater than or equal to 0.0078125"),
    (settings.Fault, {"at": 1.0, "target": "link sw1:9", "action": "up"}, "Input should be 'down', 'stop' or"),
])
def test_a_bad_value_names_what_is_expected(section, kw, says):
    with pytest.raises(pydantic.ValidationError) as info:
        section(**kw)
    assert says in str(info.value)


def test_a_trace_path_is_resolved_against_the_experiment_files_folder(tmp_path):
    (tmp_path / "t.jsonl").write_text("{}\n")
    assert settings.Trace.model_validate({"path": "t.jsonl"}, context={"base": str(tmp_path)}).path == \
        str(tmp_path / "t.jsonl")
    assert settings.Trace().path == str(DEFAULT_TRACE)
    with pytest.raises(pydantic.ValidationError, match="is a directory"):
        settings.Trace.model_validate({"path": "."}, context={"base": str(tmp_path)})
    with pytest.raises(pydantic.ValidationError, match="does not exist"):
        settings.Trace.model_validate({"path": "missing.jsonl"}, context={"base": str(tmp_path)})


def test_a_fault_names_its_target_per_fabric():
    one = settings.Fault(at="2s", target="controller", action="restart")
    per = settings.Fault(at=1, duration="1m", target={"zcube": "link sw1:9", "roft": "link leaf1:9"})
    assert (one.at, one.target_on("roft")) == (2.0, "controller")
    assert (per.duration, per.target_on("zcube"), per.target_on("roft")) == (60.0, "link sw1:9", "link leaf1:9")


def test_conditions_carry_the_repetitions_settings():
    spec = repetition({"seed": 10, "cross_flows": 2, "link": {"time_dilation": 12},
                       "serving": {"driver": "live", "model": "glm-5"},
                       "faults": [{"at": 1.0, "target": "controller", "action": "stop"}]}, rep=2)
    c = driver.conditions(spec, cross_s=45.0)
    assert (c.seed, c.cross_flows, c.cross_s, c.wall_per_run_s, c.timeout_s, c.connections) == (
        11, 2, 45.0, 12.0, spec.transfer_timeout_s, "persistent")
    assert c.faults == ({"at": 1.0, "duration": None, "target": "controller", "action": "stop"},)


def test_served_source_says_what_a_repetition_serves(tmp_path):
    import json

    from testbed.repetition.spec import served_source

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i, "input_length": 10, "output_length": 1,
                                         "hash_ids": [i] if i % 2 else []}) + "\n" for i in range(6)))
    assert served_source(repetition({"trace": {"path": str(trace), "duration_s": 100}})) == {
        "source": "trace", "workload": None, "seed": None, "path": str(trace), "format": "mooncake", "requests": 6,
        "with_hash_ids": 3, "skipped_rows": 0}
    drawn = served_source(repetition({"trace": {"workload": "agentic-coding", "first_n": 50, "workload_seed": 2},
                                      "serving": {"driver": "live", "arrivals": "closed", "model": "glm-5",
                                                  "layout": "glm5-recipe"}}))
    assert {k: drawn[k] for k in ("source", "workload", "seed", "path", "format")} == \
        {"source": "generated", "workload": "agentic-coding", "seed": 2, "path": None, "format": None}
    assert 0 < drawn["requests"] == drawn["with_hash_ids"] <= 50

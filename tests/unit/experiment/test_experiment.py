"""The experiment file (no root): shipped examples valid, bad files rejected in
one line naming the key path and the rule, CLI overrides win and are recorded,
seeds per repetition, the committed JSON schema is the generated one."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from common.errors import TestbedError
from common.paths import DEFAULT_TRACE
from testbed.cli import build_parser
from testbed.cli.run import overrides_from_args
from testbed.experiment.schema import (
    EXAMPLES_DIR,
    SCHEMA_PATH,
    Experiment,
    Override,
    cli_value,
    fabric_spec,
    repetition_spec,
    resolve,
    schema_text,
    validate,
)

EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))


def _first_trace_line() -> str:
    """The shipped default trace's first request (a one-line trace of the same format)."""
    import gzip

    with gzip.open(DEFAULT_TRACE, "rt", encoding="utf-8") as fh:
        return fh.readline().rstrip("\n")


def write(tmp_path: Path, doc, name: str = "experiment.yaml") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


def error_of(tmp_path: Path, doc, overrides=()) -> str:
    with pytest.raises(TestbedError) as info:
        resolve(write(tmp_path, doc), list(overrides))
    message = str(info.value)
    assert "\n" not in message
    return message


# ------------------------------------------------------------ examples
def test_the_shipped_examples_are_the_promised_ones():
    assert {p.stem for p in EXAMPLES} >= {"default", "incast", "tp-mismatch", "layerwise", "smoke"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_shipped_example_is_valid(path):
    exp = resolve(path).experiment
    assert exp.name == path.stem
    assert exp.trace.generated or Path(exp.trace.path).is_file()
    jsonschema.validate(yaml.safe_load(path.read_text()) or {}, json.loads(SCHEMA_PATH.read_text()))


def test_kv_replay_yaml_is_exactly_the_schema_defaults():
    spelled = resolve(EXAMPLES_DIR / "kv-replay.yaml").experiment.model_dump(exclude={"name"})
    assert spelled == validate({}, "defaults").model_dump(exclude={"name"})


def test_run_without_an_experiment_runs_default_yaml():
    got = resolve(None)
    assert got.source == str((EXAMPLES_DIR / "default.yaml").resolve())
    assert got.experiment == resolve(EXAMPLES_DIR / "default.yaml").experiment


def test_examples_say_what_they_claim():
    by = {p.stem: resolve(p).experiment for p in EXAMPLES}
    d = by["default"]
    assert d.fabrics == ["zcube", "roft"] and d.gpus == 32
    # three repetitions a fabric (the headline's interval is over them), 20 measured cluster seconds each
    assert d.repetitions == 3 and d.trace.duration_s - d.serving.warmup_s == 23
    assert d.serving.driver == "live" and d.serving.arrivals == "closed" and d.serving.model == "glm-5"
    # the agentic coding service: generated sessions, prefix caches (HiCache), decode memory, FP8 KV, warm
    assert d.trace.workload == "agentic-coding" and d.trace.generated and d.serving.dtype == "fp8"
    assert d.serving.prefix_cache and d.serving.hicache_ratio == 2 and d.serving.decode_memory
    assert d.serving.warm_start and d.serving.prefill_routing == "kv" and not d.serving.decode_prefix_cache
    assert d.calibration is None or Path(d.calibration).is_file()  # the calibration it stands on, once shipped
    kv = by["kv-replay"]
    assert kv.serving.model == "llama-3.1-70b" and kv.trace.duration_s == 120 and kv.serving.driver == "plan"
    assert kv.serving.prefill_tp == 8 and kv.serving.decode_tp == 2  # the asymmetry
    assert kv.trace.speed == 1.5  # prefill keeps up (utilization ~0.75)
    assert by["incast"].serving.prefill_fraction == 0.75 and by["incast"].trace.speed > 1
    assert by["tp-mismatch"].serving.prefill_tp != by["tp-mismatch"].serving.decode_tp
    assert by["layerwise"].serving.mode == "layerwise" and by["layerwise"].serving.chunk_bytes == 65536
    assert by["smoke"].gpus == 16 and by["smoke"].repetitions == 1 and by["smoke"].trace.duration_s <= 15


def test_committed_schema_is_the_generated_one():
    assert SCHEMA_PATH.read_text() == schema_text(), "regenerate: python -m testbed.experiment.schema"


# ------------------------------------------------------------ rejections
@pytest.mark.parametrize("doc, expected", [
    ({"link": {"rat": "3mbit"}}, "experiment.yaml: link.rat: unknown key (known: rate, represents, buffer_bytes,"),
    ({"serving": {"modle": "x"}}, "serving.modle: unknown key (known: model, dtype,"),
    ({"colour": "red"}, "experiment.yaml: colour: unknown key (known: name, fabrics,"),
    ({"trace": {"speed": -1}}, "experiment.yaml: trace.speed: must be > 0 (got -1)"),
    ({"trace": {"duration_s": "2h"}}, "trace.duration_s: duration '2h' is not understood"),
    ({"serving": {"model": "gpt-5"}}, "serving.model: model 'gpt-5' is not known; expected one of"),
    ({"serving": {"decode_tp": 3, "model": "deepseek-v3"}},
     "serving.decode_tp: decode_tp 3 does not divide gpus_per_server 8"),
    ({"serving": {"decode_tp": 3}}, "serving.decode_tp: TP 3 does not split 8 kv heads of llama-3.1-70b evenly"),
    ({"serving": {"prefill_tp": 16}}, "serving.prefill_tp: prefill_tp 16 does not divide"),
    ({"serving": {"mode": "streamed"}}, "serving.mode: must be 'whole' or 'layerwise' (got 'streamed')"),
    ({"link": {"rate": "3mbps"}}, "link.rate: rate '3mbps' is not understood"),
    ({"link": {"rate": 5}}, "link.rate: rate 5 bit/s is out of range"),
    ({"link": {"mtu": 9000}}, "link.mtu: mtu 9000 is out of range"),
    ({"link": {"buffer_bytes": 1000}}, "link.buffer_bytes: buffer 1000 B holds fewer than two frames"),
    ({"link": "fast"}, "link: must be a mapping with keys rate,"),
    ({"fabrics": ["zcube", "fattree"]}, "fabrics[1]: must be 'zcube' or 'roft' (got 'fattree')"),
    ({"fabrics": ["roft", "roft"]}, "fabrics: 'roft' is listed twice"),
    ({"gpus": 30}, "gpus: gpus=30 is not divisible by gpus-per-switch=8"),
    ({"gpus": "32"}, "gpus: must be a valid integer (got '32')"),
    ({"seed": True}, "seed: must be a valid integer (got true)"),
    ({"repetitions": 0}, "repetitions: must be >= 1 (got 0)"),
    ({"serving": {"prefill_fraction": 0.95}}, "serving.prefill_fraction: prefill_fraction 0.95 of 4 servers"),
    ({"pfc": {"xon_bytes": 5000, "xoff_bytes": 4000}}, "pfc.xon_bytes: must be < xoff_bytes 4000 (got 5000)"),
    ({"pfc": {"enabled": "yes"}}, "pfc.enabled: must be a valid boolean (got 'yes')"),
    ({"trace": {"path": "missing.jsonl"}}, "trace.path: trace"),
    ({"serving": {"layout": "tp-everywhere"}}, "serving.layout: must be 'glm5-recipe', 'single-node', 'large-ep' or "
                                               "'two-server-ep' (got 'tp-everywhere')"),
    ({"serving": {"model": "glm-5", "layout": "glm5-recipe", "decode_ep": 8}},
     "serving.layout: glm5-recipe sets the EP groups; expected serving.prefill_ep and serving.decode_ep null"),
    ({"serving": {"layout": "large-ep"}}, "serving.layout: large-ep is a mixture-of-experts deployment; "
                                          "llama-3.1-70b is dense"),
])
def test_bad_values_are_one_line_with_the_key_path_and_the_rule(tmp_path, doc, expected):
    assert expected in error_of(tmp_path, doc)


def test_several_problems_report_the_first_and_count_the_rest(tmp_path):
    msg = error_of(tmp_path, {"trace": {"speed": -1, "duration_s": 0}, "gpus": 0})
    assert msg.endswith("(and 2 more)")


@pytest.mark.parametrize("text, expected", [
    ("link:\n  rate: 3mbit\n  rate: 4mbit\n", "duplicate key 'rate'"),
    ("link: [1\n", "not valid YAML"),
    ("- zcube\n- roft\n", "must hold a mapping"),
])
def test_unreadable_files_are_one_line(tmp_path, text, expected):
    msg = error_of(tmp_path, text)
    assert msg.startswith(str(tmp_path / "experiment.yaml")) and expected in msg


def test_relative_trace_paths_resolve_against_the_experiment_folder(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "t.jsonl").write_text(_first_trace_line() + "\n")
    exp = resolve(write(tmp_path / "sub", {"trace": {"path": "t.jsonl"}})).experiment
    assert exp.trace.path == str(tmp_path / "sub" / "t.jsonl")


def test_a_users_own_trace_works_plain_or_gzip(tmp_path):
    import gzip

    from testbed.experiment import run

    with gzip.open(DEFAULT_TRACE, "rt", encoding="utf-8") as fh:
        text = "".join(fh.readline() for _ in range(50))
    (tmp_path / "mine.jsonl").write_text(text)
    (tmp_path / "mine.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    counts = []
    for name in ("mine.jsonl", "mine.jsonl.gz"):
        exp = resolve(write(tmp_path, {"trace": {"path": name, "duration_s": 600}}, f"{name}.yaml")).experiment
        assert exp.trace.path == str(tmp_path / name)
        counts.append(run.requests_served(exp))
    assert counts[0] == counts[1] > 0


def test_empty_file_is_the_defaults_named_after_the_file(tmp_path):
    exp = resolve(write(tmp_path, "", "my-exp.yaml")).experiment
    assert exp.name == "my-exp"
    assert exp.model_dump(exclude={"name"}) == validate({}, "defaults").model_dump(exclude={"name"})


# ------------------------------------------------------------ overrides
def parse(*argv):
    return build_parser().parse_args(["run", *argv])


def test_cli_flags_override_file_values_and_are_recorded(tmp_path):
    path = write(tmp_path, {"trace": {"speed": 2, "duration_s": 30}, "link": {"rate": "3mbit"}, "seed": 5})
    args = parse(str(path), "--speed", "4", "--rate", "4mbit", "--fabrics", "roft", "--pfc", "off",
                 "--set", "pfc.xoff_bytes=30000")
    res = resolve(args.experiment, overrides_from_args(args))
    exp = res.experiment
    assert exp.trace.speed == 4 and exp.link.rate == 4e6 and exp.fabrics == ["roft"] and not exp.pfc.enabled
    assert exp.pfc.xoff_bytes == 30000
    assert exp.trace.duration_s == 30 and exp.seed == 5  # not given on the command line: the file's values
    recorded = {(o["key"], o["origin"]) for o in res.as_dict()["overrides"]}
    assert recorded == {("trace.speed", "--speed"), ("link.rate", "--rate"), ("fabrics", "--fabrics"),
                        ("pfc.enabled", "--pfc"), ("pfc.xoff_bytes", "--set")}


def test_flags_not_given_are_not_overrides():
    assert overrides_from_args(parse()) == []
    assert overrides_from_args(parse("x.yaml", "--gpus", "16")) == [Override("gpus", 16, "--gpus")]


def test_a_bad_override_names_its_flag(tmp_path):
    path = write(tmp_path, {"trace": {"speed": 2}})
    args = parse(str(path), "--speed", "-1")
    with pytest.raises(TestbedError, match=r"experiment.yaml: trace.speed \(from --speed\): must be > 0 \(got -1\)"):
        resolve(args.experiment, overrides_from_args(args))
    with pytest.raises(TestbedError, match=r"link.rat \(from --set\): unknown key"):
        resolve(None, [Override("link.rat", 3, "--set")])


def test_command_line_values_read_like_yaml_but_a_bare_rate_is_mbit_as_with_rate_flag():
    assert cli_value("seed", "2") == 2 and cli_value("trace.speed", "1.5") == 1.5
    assert cli_value("pfc.enabled", "false") is False
    assert cli_value("pfc.xoff_bytes", "null") is None and cli_value("name", "2024") == "2024"
    assert resolve(None, [Override("link.rate", cli_value("link.rate", "4"), "--set")]).experiment.link.rate == 4e6


def test_set_needs_key_equals_value():
    with pytest.raises(TestbedError, match="expected KEY=VALUE"):
        overrides_from_args(parse("--set", "pfc.xoff_bytes"))


def test_cli_trace_path_is_relative_to_the_current_folder(tmp_path, monkeypatch):
    (tmp_path / "t.jsonl").write_text(_first_trace_line() + "\n")
    (tmp_path / "exp").mkdir()
    path = write(tmp_path / "exp", {})
    monkeypatch.chdir(tmp_path)
    args = parse(str(path), "--trace", "t.jsonl")
    assert resolve(args.experiment, overrides_from_args(args)).experiment.trace.path == str(tmp_path / "t.jsonl")


# ------------------------------------------------------------ mapping
def test_repetitions_get_seeds_seed_seed_plus_one():
    exp = validate({"seed": 7, "repetitions": 3}, "x")
    assert [repetition_spec(exp, "zcube", r).seed for r in (1, 2, 3)] == [7, 8, 9]


def test_mapping_onto_the_replay_datapath_and_fabric():
    exp = validate({"link": {"rate": "4mbit", "buffer_bytes": "90kb"}, "gpus": 16, "cables": 2,
                    "serving": {"model": "llama-3.1-70b", "decode_tp": 2, "chunk_bytes": 0},
                    "pfc": {"xoff_bytes": 30000}, "cross_flows": 2}, "x")
    dp = fabric_spec(exp, "zcube").datapath
    assert (dp.rate_bps, dp.buffer_bytes, dp.mtu) == (4e6, 90000, 3000) and dp.nic_buffer_bytes > 0
    cfg = repetition_spec(exp, "zcube")
    assert cfg.serving is exp.serving and cfg.trace is exp.trace  # passed through
    assert (cfg.serving.model, cfg.serving.decode_tp, cfg.chunk_bytes, cfg.cross_flows) == ("llama-3.1-70b", 2, None, 2)
    assert cfg.trace.path == str(DEFAULT_TRACE) and cfg.trace.duration_s == 120
    assert cfg.represents_bps == exp.link.represents and cfg.time_dilation == exp.link.time_dilation
    assert fabric_spec(exp, "zcube").args == {"kind": "zcube", "gpus": 16, "gpus_per_switch": 8, "cables": 2}
    assert fabric_spec(exp, "roft").args["kind"] == "roft" and "cables" not in fabric_spec(exp, "roft").args
    pfc = fabric_spec(exp, "zcube").pfc
    assert (pfc.enabled, pfc.xoff_bytes, pfc.xon_bytes, pfc.headroom_bytes, pfc.dynamic_alpha) == (
        True, 30000, None, None, None)


def test_replay_verb_defaults_are_the_schema_defaults():
    """`replay` with no flags replays what an empty experiment file would on its one fabric, PFC off (one home
    for defaults; the same flags as `run`)."""
    from testbed.cli.replay import replay_settings

    resolved, cfg = replay_settings(build_parser().parse_args(["replay", "zcube"]))
    empty = validate({"fabrics": ["zcube"], "pfc": {"enabled": False}}, "defaults")
    assert resolved.experiment == empty and cfg == repetition_spec(empty, "zcube", 1)
    resolved, given = replay_settings(build_parser().parse_args(["replay", "roft", "--speed", "3", "--chunk", "0",
                                                            "--represents", "100gbit", "--start", "1m", "--pfc", "on"]))
    assert (given.trace.speed, given.chunk_bytes, given.represents_bps, given.trace.start_s) == (3, None, 100e9, 60)
    exp = resolved.experiment
    assert given.serving.decode_tp == exp.serving.decode_tp == 2 and exp.pfc.enabled and exp.fabrics == ["roft"]


def test_run_and_replay_take_the_same_flags_for_the_same_keys():
    """One table: every experiment flag of replay is run's, with the same key, type and choices."""
    import argparse

    from testbed.cli import flags

    def actions(verb: str) -> dict:
        sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
        return {a.option_strings[0]: a for a in sub.choices[verb]._actions if a.option_strings}

    run, replay = actions("run"), actions("replay")
    table = {f.name: f for f in flags.RUN}
    shared = [name for name in replay if name in table]
    assert set(shared) == {f.name for f in flags.REPETITION} and set(table) - set(shared) == {"--fabrics", "--reps",
                                                                                             "--jobs", "--name"}
    for name in shared:
        assert (run[name].dest, run[name].type, run[name].choices) == (replay[name].dest, replay[name].type,
                                                                       replay[name].choices), name
    assert run["--mode"].choices == ["whole", "layerwise"] and run["--chunk"].type is None  # text: 64KiB works


def test_schema_forbids_unknown_keys_in_every_section():
    doc = json.loads(schema_text())
    assert doc["additionalProperties"] is False
    assert all(d["additionalProperties"] is False for d in doc["$defs"].values())
    assert set(doc["properties"]) == set(Experiment.model_fields)


@pytest.mark.parametrize("doc, key", [({"link": {"mtu": 9000}}, "link.mtu"), ({"gpus": 30}, "gpus"),
                                      ({"link": {"buffer_bytes": 1000}}, "link.buffer_bytes"),
                                      ({"serving": {"prefill_fraction": 0.95}}, "serving.prefill_fraction"),
                                      ({"gpus_per_switch": 5}, "gpus"), ({"trace": {"speed": 0}}, "trace.speed"),
                                      ({"backend": "ideal", "cross_flows": 1}, "cross_flows")])
def test_errors_carry_their_key_path(doc, key):
    """The key comes from the check that failed (the consumer names its parameter), not from the message."""
    with pytest.raises(TestbedError) as info:
        validate(doc, "x")
    assert info.value.key == key and str(info.value).startswith(f"x: {key}")


def test_config_json_records_every_setting_under_its_old_flat_name():
    """config.json's "replay" is read by the report and by older tools: the same names, from the sections."""
    exp = validate({"trace": {"speed": 2}, "link": {"time_dilation": 1}, "serving": {"chunk_bytes": 0},
                    "gpus_per_server": 4, "gpus": 16, "gpus_per_switch": 4}, "x")
    rec = repetition_spec(exp, "zcube", 2).record()
    assert list(rec)[:3] == ["trace", "trace_format", "skip_bad"] and list(rec)[-3:] == ["faults", "hash_seed",
                                                                                     "paths_from"]
    assert len(rec) == 38 and "backend" not in rec
    assert (rec["speed"], rec["seed"], rec["chunk_bytes"], rec["represents_bps"], rec["gpus_per_server"]) == \
        (2, 1, None, exp.link.represents, 4)
    assert (rec["driver"], rec["time_dilation"], rec["warmup_s"], rec["faults"]) == ("plan", 1, 0, [])


def test_the_datapath_and_queue_limits_are_checked_for_the_backends_that_build_them(monkeypatch):
    """The emulated datapath's plan (interface names) and every queue's PFC limit are checked on the emulated
    fabric (and the limits on the twin), not for a backend that builds neither: at n = 16,384 both are
    quadratic, and the ideal network has no interface to name."""
    from fabrics import datapath
    from pfc import policy

    def refuse(*args, **kwargs):
        raise TestbedError("interface name 'spine128-eth256r' is longer than 15 characters", key="interface")

    monkeypatch.setattr(datapath, "plan_datapath", refuse)
    monkeypatch.setattr(policy, "queue_limits", refuse)
    assert validate({"backend": "ideal", "gpus": 64}, "t").gpus == 64
    with pytest.raises(TestbedError, match="gpus: interface name"):
        validate({"backend": "emulated", "gpus": 64}, "t")
    with pytest.raises(TestbedError, match="pfc: interface name"):
        validate({"backend": "ns3", "gpus": 64}, "t")
    with pytest.raises(TestbedError, match="pfc.xoff_bytes"):  # PFC's own settings still checked everywhere
        validate({"backend": "ideal", "pfc": {"xoff_bytes": 10}}, "t")


def test_the_blogs_size_validates_on_the_ideal_network():
    exp = validate({"backend": "ideal", "gpus": 16384, "gpus_per_switch": "auto"}, "t")
    assert exp.gpus_per_switch == 128 and fabric_spec(exp, "roft").args["radix"] is None

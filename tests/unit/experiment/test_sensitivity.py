"""`testbed sensitivity` (no root): alternatives checked in one line before anything is built, the verdict
comparison on hand-made ratios, the JSON contract of a whole sensitivity on the ideal backend at n=16, a
failed alternative kept and marked, the shipped default set and its budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from common.errors import TestbedError
from common.paths import AZURE_TRACE
from testbed.cli import main
from testbed.experiment import sensitivity as S
from testbed.experiment.schema import EXAMPLES_DIR, Override
from testbed.report import sensitivity_section
from tests.support import fake_runs
from tests.support.no_fabric import no_fabric  # noqa: F401 (autouse: nothing here reaches the fabric)
from traffic.model import placement

SMALL = {"name": "sens16", "backend": "ideal", "gpus": 16, "gpus_per_switch": 4, "gpus_per_server": 4,
         "link": {"time_dilation": 4}, "trace": {"path": str(AZURE_TRACE), "duration_s": 3},
         "serving": {"model": "glm-5", "driver": "live", "arrivals": "closed", "concurrency": 16, "warmup_s": 1},
         "sensitivity": [{"name": "zipf", "assumption": "expert popularity", "set": {"serving.popularity": "zipf"}},
                         {"name": "pair-hash", "assumption": "port policy", "set": {"serving.policy": "pair-hash"}}]}


def write(tmp_path: Path, doc: dict, name: str = "sens16.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# ------------------------------------------------------------------ refused before anything is built
@pytest.mark.parametrize("alternative, expected", [
    ({"name": "typo", "set": {"serving.polcy": "pair-hash"}},
     "sensitivity[0].set: serving.polcy (from alternative 'typo'): unknown key (known: model, dtype,"),
    ({"name": "typo", "set": {"serving": "pair-hash"}},
     "sensitivity[0].set: serving (from alternative 'typo'): is a section"),
    ({"name": "bad", "set": {"serving.policy": "bogus"}},
     "sens16.yaml: serving.policy (from alternative 'bad'): must be 'striped', 'rail-out', 'server-out', "
     "'pair-hash' or 'adaptive' (got 'bogus')"),
    ({"name": "bad", "set": {"link.represents": "fast"}}, "link.represents (from alternative 'bad'): rate 'fast'"),
    ({"name": "bad", "set": {"serving.concurrency": 0}},
     "serving.concurrency (from alternative 'bad'): must be >= 1 (got 0)"),
    ({"name": "dense", "set": {"serving.model": "llama-3.1-70b", "serving.layout": "large-ep"}},
     "serving.layout (from alternative 'dense'): large-ep is a mixture-of-experts deployment"),
    ({"name": "both", "set": {"fabrics": "zcube"}},
     "fabrics (from alternative 'both'): cannot be set by an alternative"),
    ({"name": "grid", "set": {"serving.concurrency": [64, 128]}},
     "serving.concurrency (from alternative 'grid'): expected one value, as --set serving.concurrency=VALUE takes "
     "(got a list)"),
    ({"name": "same", "set": {"serving.policy": "striped"}},
     "sens16.yaml: alternative 'same': serving.policy changes nothing: the experiment as given already has "
     "serving.policy=striped"),
])
def test_a_bad_alternative_is_one_line_naming_it_and_its_key_before_anything_is_built(tmp_path, capsys, alternative,
                                                                                         expected):
    path = write(tmp_path, SMALL | {"sensitivity": [alternative]})
    out = tmp_path / "out"
    out.mkdir()
    assert main(["sensitivity", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1, err
    assert list(out.iterdir()) == []  # no directory, no run


def test_a_bad_alternative_is_refused_by_the_library_too_and_nothing_runs(tmp_path, monkeypatch):
    path = write(tmp_path, SMALL | {"sensitivity": [SMALL["sensitivity"][0],
                                                    {"name": "late", "set": {"serving.decode_step_s": "soon"}}]})
    fake_runs.install(monkeypatch)  # a repetition that runs fails the test
    with pytest.raises(TestbedError, match=r"serving.decode_step_s \(from alternative 'late'\): duration 'soon'"):
        S.run_sensitivity(path, [], tmp_path, log=lambda m: None)
    assert [p.name for p in tmp_path.iterdir()] == ["sens16.yaml"]


def test_only_names_declared_alternatives_and_a_file_without_any_is_refused(tmp_path, capsys):
    path = write(tmp_path, SMALL)
    assert main(["sensitivity", str(path), "--only", "zipf,pairhash", "--out", str(tmp_path)]) == 2
    assert "--only pairhash: no such alternative in" in capsys.readouterr().err
    assert [p.name for p in S.plan(path, [], ["pair-hash"])] == ["baseline", "pair-hash"]
    with pytest.raises(TestbedError, match="sensitivity: no alternative declared"):
        S.plan(write(tmp_path, SMALL | {"sensitivity": []}, "none.yaml"), [])
    with pytest.raises(TestbedError, match="fabrics: a sensitivity compares ZCube with ROFT"):
        S.plan(path, [Override("fabrics", ["roft"], "--fabrics")])
    with pytest.raises(TestbedError, match="alternative 'zipf' is listed twice"):
        S.plan(write(tmp_path, SMALL | {"sensitivity": SMALL["sensitivity"][:1] * 2}, "twice.yaml"), [])


def test_only_is_a_comma_list_of_names_and_the_dry_run_document_lists_every_run(tmp_path):
    assert S.parse_only(None) is None and S.parse_only(" zipf, pair-hash ,") == ["zipf", "pair-hash"]
    with pytest.raises(TestbedError, match="--only ',': expected alternative names"):
        S.parse_only(",")
    planned = S.plan(write(tmp_path, SMALL), [])
    doc = S.dry_run_doc(planned)
    assert [r["name"] for r in doc["runs"]] == ["baseline", "zipf", "pair-hash"]
    assert doc["runs"][1]["overrides"] == {"serving.popularity": "zipf"} and doc["budget_s"] == S.BUDGET_S
    assert doc["runs"][2]["experiment"]["serving"]["policy"] == "pair-hash"
    assert doc["estimate_s"] == round(S.estimate_s(planned)) and doc["source"] == str(tmp_path / "sens16.yaml")


def test_an_alternatives_relative_trace_is_the_experiment_files_and_the_command_line_applies_to_every_run(tmp_path):
    doc = SMALL | {"sensitivity": [{"name": "other", "set": {"trace.path": "traces/t.csv.gz"}}]}
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "t.csv.gz").write_bytes(AZURE_TRACE.read_bytes())
    planned = S.plan(write(tmp_path, doc), [Override("seed", 7, "--seed")])
    assert planned[1].resolved.experiment.trace.path == str(tmp_path / "traces" / "t.csv.gz")
    assert [p.resolved.experiment.seed for p in planned] == [7, 7]
    # an alternative is not itself a sensitivity, and no run shows a shipped result of its own
    assert planned[1].resolved.experiment.sensitivity == [] and planned[0].resolved.experiment.sensitivity
    assert all(p.resolved.experiment.sensitivity_result is None for p in planned)


# ------------------------------------------------------------------ the verdict, by hand
def _summary(ratios: dict, ci: dict, fidelity_ok: bool = True) -> dict:
    """A report summary.json as a live run's: its ratios and their 95 % intervals."""
    return {"ratios": ratios, "fidelity_ok": fidelity_ok, "fidelity_problems": [] if fidelity_ok else ["x"],
            "confidence": {"ratios": {k: {"ratio": r, "ci95": ci.get(k)} for k, r in ratios.items()}}}


BASE = _summary({"throughput_tokens_per_s": 1.08, "ttft_ms.p50": 0.95, "ttft_ms.p99": 1.16},
                {"throughput_tokens_per_s": [1.03, 1.12], "ttft_ms.p50": [0.90, 0.99], "ttft_ms.p99": [0.95, 1.40]})


def test_the_verdict_is_the_side_of_1_the_interval_lies_on():
    v = {k: S.verdict_of(BASE, k) for k in S.RATIO_KEYS}
    # throughput 1.03..1.12 > 1 (higher is better); TTFT P50 0.90..0.99 < 1 (lower is better); P99 spans 1
    assert v == {"throughput_tokens_per_s": "better", "ttft_ms.p50": "better",
                 "ttft_ms.p99": "not resolved at this sample size"}
    worse = _summary({"ttft_ms.p99": 1.30}, {"ttft_ms.p99": [1.10, 1.50]})
    assert S.verdict_of(worse, "ttft_ms.p99") == "worse"
    assert S.verdict_of(worse, "throughput_tokens_per_s") == "not measured"


@pytest.mark.parametrize("ratios, ci, same", [
    # throughput's interval now spans 1: not resolved where the baseline was better -> a different verdict
    ({"throughput_tokens_per_s": 1.02, "ttft_ms.p99": 1.10}, {"throughput_tokens_per_s": [0.98, 1.06],
                                                             "ttft_ms.p99": [0.90, 1.30]}, False),
    # TTFT P99 resolved worse where the baseline's was not resolved -> different
    ({"throughput_tokens_per_s": 1.10, "ttft_ms.p99": 1.30}, {"throughput_tokens_per_s": [1.01, 1.20],
                                                             "ttft_ms.p99": [1.10, 1.50]}, False),
    # both ratios moved, neither verdict did -> the same (TTFT P50 is not part of the verdict)
    ({"throughput_tokens_per_s": 1.20, "ttft_ms.p50": 1.3, "ttft_ms.p99": 0.90},
     {"throughput_tokens_per_s": [1.10, 1.30], "ttft_ms.p50": [1.2, 1.4], "ttft_ms.p99": [0.70, 1.10]}, True),
    # throughput better by a hair: still better
    ({"throughput_tokens_per_s": 1.01, "ttft_ms.p99": 1.00}, {"throughput_tokens_per_s": [1.001, 1.02],
                                                             "ttft_ms.p99": [0.5, 2.0]}, True),
])
def test_same_verdict_on_hand_made_ratios(ratios, ci, same):
    base = S.from_summary(BASE, {})
    alt = S.from_summary(_summary(ratios, ci), {})
    assert S.same_verdict(base, alt) is same


def test_a_failed_run_never_has_the_same_verdict_and_the_spread_pairs_repetitions_by_seed():
    base = S.from_summary(BASE, {})
    assert S.same_verdict(base, S.failed("boom")) is False
    assert S.same_verdict(S.failed("boom"), base) is False
    no_ttft = S.from_summary(_summary({"throughput_tokens_per_s": 1.08}, {"throughput_tokens_per_s": [1.03, 1.12]}),
                             {})
    assert no_ttft["status"] == "failed" and "ttft_ms.p99" in no_ttft["error"] and not no_ttft["fidelity_ok"]
    heads = {"zcube": {"repetitions": [{"rep": 1, "throughput_tokens_per_s": 110.0, "ttft_p99_ms": 300.0},
                                       {"rep": 2, "throughput_tokens_per_s": 120.0, "ttft_p99_ms": None}]},
             "roft": {"repetitions": [{"rep": 2, "throughput_tokens_per_s": 100.0, "ttft_p99_ms": 200.0},
                                      {"rep": 1, "throughput_tokens_per_s": 100.0, "ttft_p99_ms": 250.0}]}}
    # rep1 110/100, rep2 120/100; TTFT P99 rep1 300/250 only; no P50 anywhere
    assert S.ratio_spread(heads) == {"throughput_tokens_per_s": [1.1, 1.2], "ttft_ms.p50": None,
                                     "ttft_ms.p99": [1.2, 1.2]}


# ------------------------------------------------------------------ a whole sensitivity on the ideal network
CONTRACT_ALTERNATIVE = {"name", "overrides", "ratios", "spread", "same_verdict", "fidelity_ok"}


def test_the_json_contract_of_an_ideal_sensitivity_at_n16_with_one_alternative(tmp_path, capsys):
    path = write(tmp_path, SMALL)
    assert main(["sensitivity", str(path), "--only", "zipf", "--json", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)  # nothing but the document on stdout
    assert "estimated wall time: 2 runs" in captured.err
    assert set(doc) >= {"baseline", "alternatives"} and set(doc["baseline"]) >= {"ratios"}
    assert set(doc["baseline"]["ratios"]) == set(S.RATIO_KEYS)
    (alt,) = doc["alternatives"]
    assert set(alt) >= CONTRACT_ALTERNATIVE
    assert set(alt["ratios"]) == {"throughput_tokens_per_s", "ttft_ms.p50", "ttft_ms.p99"}
    assert alt["name"] == "zipf" and alt["overrides"] == {"serving.popularity": "zipf"}
    assert isinstance(alt["same_verdict"], bool) and isinstance(alt["fidelity_ok"], bool)
    # the ideal network is the same non-blocking fabric for ZCube and ROFT: every ratio is exactly 1; one
    # repetition has no between-run spread, so there is no interval over repetitions and nothing is resolved,
    # in the baseline and the alternative; the run's own (within-run) interval is kept beside it
    for entry in (doc["baseline"], alt):
        assert entry["status"] == "ok" and entry["fidelity_ok"] is True
        assert entry["ratios"] == dict.fromkeys(S.RATIO_KEYS, 1.0)
        assert entry["spread"] == dict.fromkeys(S.RATIO_KEYS, [1.0, 1.0])  # one repetition: min = max
        assert set(entry["verdicts"].values()) == {S.SPREAD_UNKNOWN}
        assert entry["ci95"] == dict.fromkeys(S.RATIO_KEYS) and entry["pairs"] == dict.fromkeys(S.RATIO_KEYS, 1)
        lo, hi = entry["within_run_ci95"]["ttft_ms.p99"]
        assert lo <= 1.0 <= hi
        assert "(1 rep; within the run [" in sensitivity_section.cell_ratio(entry, "ttft_ms.p99")
    assert alt["same_verdict"] is True
    sens_dir = Path(doc["dir"])
    assert json.loads((sens_dir / "sensitivity.json").read_text()) == doc
    for rel in ("baseline", "alternatives/zipf"):  # each a complete run directory `report` reads
        run_dir = sens_dir / rel
        assert (run_dir / "report.html").is_file() and (run_dir / "runs" / "roft" / "rep1" / "summary.json").is_file()
        assert main(["report", str(run_dir)]) == 0
    exp = json.loads((sens_dir / "alternatives" / "zipf" / "experiment.json").read_text())
    assert exp["experiment"]["serving"]["popularity"] == "zipf" and exp["experiment"]["sensitivity"] == []
    assert {"key": "serving.popularity", "value": "zipf", "origin": "alternative 'zipf'"} in exp["overrides"]
    # the baseline's report shows the table first after the headline
    page = (sens_dir / "baseline" / "report.html").read_text()
    ids = [s.split('"')[1] for s in page.split('<section id=')[1:]]
    assert ids[ids.index("headline") + 1] == "sensitivity"
    assert "This run is that baseline." in page and "depends on none of the assumptions tried" in page


def test_an_alternative_whose_run_fails_is_shown_as_failed_never_dropped(tmp_path, monkeypatch):
    from testbed.experiment import run
    from testbed.repetition.orchestrate import run_repetition

    monkeypatch.setattr(run, "report_builder", lambda: lambda run_dir: None)  # no figures: the ratios come from
    # the run's files as the report computes them (sensitivity.outcome without a summary.json)

    def breaks_pair_hash(*args, run_dir=None, **kwargs):
        if "pair-hash" in str(run_dir):
            raise RuntimeError("the agents could not start")
        return run_repetition(*args, run_dir=run_dir, **kwargs)

    monkeypatch.setattr(run, "run_repetition", breaks_pair_hash)
    status, doc, sens_dir = S.run_sensitivity(write(tmp_path, SMALL), [], tmp_path, log=lambda m: None)
    assert status == 1
    assert [a["name"] for a in doc["alternatives"]] == ["zipf", "pair-hash"]
    broken = doc["alternatives"][1]
    assert broken["status"] == "failed" and "no replay finished" in broken["error"]
    assert broken["same_verdict"] is False and broken["fidelity_ok"] is False
    assert broken["ratios"] == dict.fromkeys(S.RATIO_KEYS) and broken["overrides"] == {"serving.policy": "pair-hash"}
    assert doc["alternatives"][0]["same_verdict"] is True
    lines = S.table(doc)
    assert "run failed" in lines[3] and "no verdict: the run failed" in lines[3]
    assert lines[-1].endswith("; unknown under pair-hash (the run failed).")
    assert json.loads((sens_dir / "sensitivity.json").read_text())["alternatives"][1]["status"] == "failed"


# ------------------------------------------------------------------ the shipped set
def test_the_default_declares_the_shipped_set_and_every_alternative_resolves():
    planned = S.plan(None, [Override("repetitions", 1, "--reps")])
    assert [(p.name, p.assumption, p.overrides) for p in planned] == [
        ("baseline", None, {}),
        ("pair-hash", "port policy", {"serving.policy": "pair-hash"}),
        ("adaptive", "port policy", {"serving.policy": "adaptive"}),
        ("single-node", "layout", {"serving.layout": "single-node"}),
        ("large-ep", "layout", {"serving.layout": "large-ep", "serving.prefill_chunk_tokens": 512}),
        ("hit-60", "prefix hit", {"trace.agentic_turns": 1.55, "trace.agentic_first_tokens": 44000}),
        ("hit-96", "prefix hit", {"trace.agentic_turns": 30}),
        ("decode-cache", "KV transfer", {"serving.decode_prefix_cache": True}),
        ("layersplit", "KV senders", {"serving.mla_sender": "layersplit"}),
        ("mooncake", "request mix", {"trace.workload": "mooncake-conversation"}),
        ("zipf", "expert popularity", {"serving.popularity": "zipf"}),
        ("100gbit", "link bandwidth", {"link.represents": "100gbit"})]
    base = planned[0].resolved.experiment
    # what the baseline is, so each alternative is an alternative to it
    assert (base.serving.policy, base.serving.layout, base.serving.popularity, base.link.represents) == (
        "striped", "glm5-recipe", "uniform", 200e9)
    assert base.trace.workload == "agentic-coding" and base.serving.mla_sender == "rank0"
    assert Path(planned[9].resolved.experiment.trace.path) == EXAMPLES_DIR.parent / "data" / "traces" / \
        "mooncake_conversation.jsonl.gz"
    assert planned[11].resolved.experiment.link.represents == 100e9


def test_two_server_ep_is_left_out_because_it_is_large_ep_at_n32():
    at = {lay: placement.layout_engines(lay, 32, 8, 0.5) for lay in ("large-ep", "two-server-ep")}
    assert at["large-ep"] == at["two-server-ep"]
    assert placement.layout_engines("large-ep", 64, 8, 0.5) != placement.layout_engines("two-server-ep", 64, 8, 0.5)


def test_the_shipped_set_is_over_the_budget_on_the_emulator_even_with_one_repetition_each():
    # per run on the emulator: 2 fabrics x (1 repetition x (28 cluster s x dilation 4 = 112 s + 22 s set-up on a
    # held fabric) + 14 s a fabric) + 15 s report = 311 s; 12 runs and the baseline's report once more with the
    # table: 12 x 311 + 15 = 3,747 s, over the 60 min (so the shipped set runs on the twin: docs/serving.md)
    planned = S.plan(None, [Override("repetitions", 1, "--reps")])
    assert [p.estimate_s for p in planned] == [311.0] * 12
    assert S.estimate_s(planned) == 3747.0 > S.BUDGET_S
    lines = S.estimate_lines(planned)
    assert lines[-1] == ("estimated wall time: 12 runs + the baseline's report again ~15 s = ~62.5 min (budget of the "
                         "shipped set 60 min: OVER by 2.5 min)")
    over = S.plan(None, [])  # the file's own three repetitions: 2 x (3 x 134 + 14) s a run
    assert S.estimate_s(over) == 12 * (2 * (3 * 134 + 14) + 15) + 15 and "OVER by" in S.estimate_lines(over)[-1]


def test_dry_run_prints_every_run_and_builds_nothing(tmp_path, capsys):
    argv = ["sensitivity", "--reps", "1", "--dry-run", "--out", str(tmp_path)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert [r["name"] for r in doc["runs"]][:2] == ["baseline", "pair-hash"] and doc["estimate_s"] == 3747
    assert doc["runs"][3]["experiment"]["serving"]["layout"] == "single-node"
    assert "(budget of the shipped set 60 min: OVER by 2.5 min)" in captured.err
    assert list(tmp_path.iterdir()) == []

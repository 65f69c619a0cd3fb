"""The load curve (no root, no fabric): from a fake sweep directory with hand-written summary.json files,
the document's spreads, the numeric order of levels, repetitions that failed, the refusal of a two-key
sweep; the figure; `testbed sweep` writing it; the `load_curve:` key of an experiment file; the report's
"Load curve" section, present with a load_curve.json and absent without."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from common.errors import TestbedError
from testbed.experiment import load_curve, rundir, sweep
from testbed.experiment.schema import EXAMPLES_DIR, Override, resolve
from testbed.report import build_report, headline
from tests.support import fake_runs
from tests.support.report_fixture import write_experiment

CREATED = "2026-12-01T10:00:00+0000"
PNG = b"\x89PNG\r\n\x1a\n"


def summary(ttft_p99, ttft_p50, slowdown_p99, tokens) -> dict:
    s = {"goodput_bps": 1e6, "transfers": 10, "verified": 10, "fct_ms": {"p50": 1.0, "p99": 9.0},
         "ttft_ms": {"p50": ttft_p50, "p99": ttft_p99}, "throughput_tokens_per_s": tokens}
    if slowdown_p99 is not None:
        s["slowdown"] = {"p50": 1.1, "p95": 1.5, "p99": slowdown_p99, "p999": 2 * slowdown_p99}
    return s


def fake_sweep(root: Path, params: dict, reps: dict) -> Path:
    """A sweep directory as testbed.experiment.sweep writes it. ``reps[(value, fabric)]``: one entry per repetition,
    a summary dict, or "error" (the replay failed: error.txt, no summary.json)."""
    points = [{"name": f"{k}={v}", "values": {k: v}, "dir": f"points/{k}={v}", "status": 0, "fabrics": None}
              for k, vals in params.items() for v in vals]
    root.mkdir(parents=True)
    (root / "sweep.json").write_text(json.dumps({"source": "exp.yaml", "params": params, "created": CREATED,
                                                 "points": points}))
    for p in points:
        (value,) = p["values"].values()
        runs = []
        for (v, fabric), entries in reps.items():
            if v != value:
                continue
            for k, entry in enumerate(entries, 1):
                d = root / p["dir"] / "runs" / fabric / f"rep{k}"
                d.mkdir(parents=True)
                runs.append({"fabric": fabric, "rep": k, "seed": k - 1, "dir": f"runs/{fabric}/rep{k}"})
                if entry == "error":
                    (d / "error.txt").write_text("RuntimeError: agents never came up\n")
                else:
                    (d / "summary.json").write_text(json.dumps(entry))
        (root / p["dir"]).mkdir(parents=True, exist_ok=True)
        (root / p["dir"] / "experiment.json").write_text(json.dumps({"experiment": {}, "runs": runs}))
    return root


LEVELS = {"serving.concurrency": ["256", "64", "128"]}  # given out of order: sorted as numbers, not as text
REPS = {
    ("64", "zcube"): [summary(100.0, 50.0, 2.0, 3000.0), summary(140.0, 70.0, 4.0, 3100.0)],
    ("64", "roft"): [summary(110.0, 40.0, 1.5, 2900.0), summary(110.0, 40.0, 1.5, 2900.0)],
    ("128", "zcube"): [summary(300.0, 120.0, 8.0, 3500.0), summary(500.0, 180.0, 12.0, 3300.0)],
    ("128", "roft"): [summary(250.0, 100.0, 5.0, 3400.0), summary(270.0, 110.0, None, 3600.0)],
    ("256", "zcube"): [summary(900.0, 400.0, 30.0, 4000.0), summary(1100.0, 500.0, 50.0, 4200.0)],
    ("256", "roft"): [summary(700.0, 300.0, 20.0, 4100.0), "error"],
}


@pytest.fixture
def curve(tmp_path):
    root = fake_sweep(tmp_path / "sweep", LEVELS, REPS)
    return root, load_curve.build(root)


# ------------------------------------------------------------------ the document
def test_headline_reads_the_kv_slowdown_p99_and_none_without_it(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "summary.json").write_text(json.dumps(summary(1.0, 0.5, 7.25, 10.0)))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "summary.json").write_text(json.dumps(summary(1.0, 0.5, None, 10.0)))
    assert headline.rep_headline(tmp_path / "a")["kv_slowdown_p99"] == 7.25
    assert headline.rep_headline(tmp_path / "b")["kv_slowdown_p99"] is None
    assert "kv_slowdown_p99" in headline.HEADLINE_KEYS


def test_levels_sort_as_numbers_with_one_line_per_fabric(curve):
    root, doc = curve
    assert doc["knob"] == "serving.concurrency"
    assert list(doc["fabrics"]) == ["zcube", "roft"]
    for rows in doc["fabrics"].values():
        assert [r["level"] for r in rows] == [64, 128, 256]
    assert doc["dir"] == str(root.resolve()) and doc["created"] == CREATED


def test_every_metric_is_the_spread_over_repetitions(curve):
    _, doc = curve
    z64 = doc["fabrics"]["zcube"][0]
    assert z64["ttft_p99_ms"] == {"median": 120.0, "mean": 120.0, "min": 100.0, "max": 140.0,
                                   "stdev": 28.284271, "n": 2}
    assert z64["ttft_p50_ms"] == {"median": 60.0, "mean": 60.0, "min": 50.0, "max": 70.0, "stdev": 14.142136,
                                   "n": 2}
    assert z64["kv_slowdown_p99"] == {"median": 3.0, "mean": 3.0, "min": 2.0, "max": 4.0, "stdev": 1.414214, "n": 2}
    assert z64["throughput_tokens_per_s"] == {"median": 3050.0, "mean": 3050.0, "min": 3000.0,
                                              "max": 3100.0, "stdev": 70.710678, "n": 2}
    z256 = doc["fabrics"]["zcube"][2]
    assert z256["kv_slowdown_p99"] == {"median": 40.0, "mean": 40.0, "min": 30.0, "max": 50.0,
                                      "stdev": 14.142136, "n": 2}


def test_a_failed_repetition_or_an_old_summary_is_left_out_of_its_spread(curve):
    _, doc = curve
    r256 = doc["fabrics"]["roft"][2]  # rep2 failed: error.txt, no summary.json
    assert r256["level"] == 256
    assert r256["ttft_p99_ms"] == {"median": 700.0, "mean": 700.0, "min": 700.0, "max": 700.0,
                                    "stdev": 0.0, "n": 1}
    r128 = doc["fabrics"]["roft"][1]  # rep2's summary predates the slowdown key
    assert r128["kv_slowdown_p99"] == {"median": 5.0, "mean": 5.0, "min": 5.0, "max": 5.0, "stdev": 0.0,
                                        "n": 1}
    assert r128["ttft_p99_ms"]["n"] == 2


def test_a_level_where_every_repetition_failed_has_no_numbers(tmp_path):
    doc = load_curve.build(fake_sweep(tmp_path / "s", {"serving.concurrency": ["64"]},
                                      {("64", "roft"): ["error", "error"]}))
    assert doc["fabrics"]["roft"] == [{"level": 64, "ttft_p99_ms": None, "ttft_p50_ms": None,
                                       "kv_slowdown_p99": None, "throughput_tokens_per_s": None}]
    assert load_curve.plot(doc, tmp_path / "none.png") is None  # nothing to draw


def test_words_keep_the_sweeps_order(tmp_path):
    doc = load_curve.build(fake_sweep(tmp_path / "s", {"serving.policy": ["striped", "adaptive", "pair-hash"]},
                                      {(v, "zcube"): [summary(1.0, 1.0, 1.0, 1.0)]
                                       for v in ("striped", "adaptive", "pair-hash")}))
    assert [r["level"] for r in doc["fabrics"]["zcube"]] == ["striped", "adaptive", "pair-hash"]
    assert load_curve.plot(doc, tmp_path / "words.png").read_bytes().startswith(PNG)


def test_a_sweep_over_two_keys_is_refused_in_one_line(tmp_path):
    root = fake_sweep(tmp_path / "two", {"serving.concurrency": ["64"], "link.represents": ["100gbit"]}, {})
    with pytest.raises(TestbedError) as info:
        load_curve.build(root)
    assert "\n" not in str(info.value)
    assert "exactly one key" in str(info.value) and "2 (serving.concurrency, link.represents)" in str(info.value)


def test_a_folder_without_sweep_json_is_one_line(tmp_path):
    with pytest.raises(TestbedError, match="sweep.json: cannot be read") as info:
        load_curve.build(tmp_path)
    assert "\n" not in str(info.value)


def test_the_figure_and_the_document_are_written(curve):
    root, doc = curve
    png = load_curve.plot(doc, root / "plot.png", mark=128)
    assert png == root / "plot.png" and png.read_bytes().startswith(PNG)
    out, png = load_curve.write(root, log=lambda message: None)
    assert json.loads(out.read_text()) == doc
    assert out == root / "load_curve.json" and png == root / "load_curve.png" and png.is_file()


# ---------------------------------------------------------------- testbed sweep
def _by_speed(spec) -> dict:
    """A replay whose TTFT and slowdown depend on the trace's speed (the load) and fabric only (written by hand
    below)."""
    zcube = spec.kind == "zcube"
    return summary(ttft_p99=200.0 if zcube else 300.0, ttft_p50=20.0 if zcube else 30.0,
                   slowdown_p99=(2.0 if zcube else 6.0) + spec.trace.speed, tokens=1000.0)


@pytest.fixture
def no_real_fabric(monkeypatch):
    """As in test_run_plan: the real repetition replaced by one whose figures depend on the load and fabric,
    a stub report, fixed versions."""
    fake_runs.install(monkeypatch, fake_runs.FakeReplay(summary_of=_by_speed))
    fake_runs.no_report(monkeypatch)


def test_a_one_key_sweep_writes_its_load_curve_and_the_csv_its_new_columns(tmp_path, no_real_fabric):
    import csv

    smoke = EXAMPLES_DIR / "smoke.yaml"
    log = []
    status, sweep_dir = sweep.run_sweep(smoke, [Override("fabrics", ["zcube", "roft"], "--fabrics")],
                                        [("trace.speed", ["10", "2"])], tmp_path, log=log.append,
                                        out=lambda line: None)
    assert status == 0
    doc = json.loads((sweep_dir / "load_curve.json").read_text())
    assert doc["knob"] == "trace.speed" and [r["level"] for r in doc["fabrics"]["roft"]] == [2, 10]
    assert doc["fabrics"]["roft"][1]["kv_slowdown_p99"]["mean"] == 16.0
    assert doc["fabrics"]["zcube"][0]["kv_slowdown_p99"]["mean"] == 4.0
    assert (sweep_dir / "load_curve.png").read_bytes().startswith(PNG)
    assert any(line.startswith("load curve: ") for line in log)
    rows = list(csv.DictReader(open(sweep_dir / "sweep.csv")))
    assert [(r["trace.speed"], r["fabric"], r["kv_slowdown_p99"], r["ttft_p50_ms"]) for r in rows] == [
        ("10", "zcube", "12.0", "20.0"), ("10", "roft", "16.0", "30.0"),
        ("2", "zcube", "4.0", "20.0"), ("2", "roft", "8.0", "30.0")]


def test_a_sweep_over_a_seed_or_two_keys_writes_no_load_curve(tmp_path, no_real_fabric):
    status, seeds = sweep.run_sweep(EXAMPLES_DIR / "smoke.yaml", [Override("fabrics", ["roft"], "--fabrics")],
                                    [("seed", ["1", "2"])], tmp_path, log=lambda m: None, out=lambda line: None)
    assert status == 0 and not (seeds / "load_curve.json").exists()  # a seed is no load axis
    status, sweep_dir = sweep.run_sweep(EXAMPLES_DIR / "smoke.yaml", [Override("fabrics", ["roft"], "--fabrics")],
                                        [("seed", ["1"]), ("trace.speed", ["2"])], tmp_path,
                                        log=lambda m: None, out=lambda line: None)
    assert status == 0 and (sweep_dir / "sweep.csv").is_file() and not (sweep_dir / "load_curve.json").exists()


# ------------------------------------------------------------ the experiment key
def write_yaml(folder: Path, doc: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "experiment.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_load_curve_path_is_relative_to_the_experiment_file(tmp_path, curve):
    root, doc = curve
    (tmp_path / "exp" / "curves").mkdir(parents=True)
    (tmp_path / "exp" / "curves" / "load_curve.json").write_text(json.dumps(doc))
    exp = resolve(write_yaml(tmp_path / "exp", {"load_curve": "curves/load_curve.json"})).experiment
    assert exp.load_curve == str(tmp_path / "exp" / "curves" / "load_curve.json")
    assert resolve(write_yaml(tmp_path / "none", {})).experiment.load_curve is None


@pytest.mark.parametrize("content, expected", [
    (None, "does not exist: expected a load_curve.json written by `testbed sweep` over one key"),
    ("{not json", "cannot be read as JSON"),
    (json.dumps({"levels": []}), "has no knob and fabrics"),
])
def test_a_bad_load_curve_is_one_line_naming_the_key_and_the_path(tmp_path, content, expected):
    if content is not None:
        (tmp_path / "lc.json").write_text(content)
    with pytest.raises(TestbedError) as info:
        resolve(write_yaml(tmp_path, {"load_curve": "lc.json"}))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'experiment.yaml'}: load_curve: {tmp_path / 'lc.json'} ")
    assert expected in message


def test_the_run_directory_gets_a_copy_of_the_load_curve(tmp_path, curve, monkeypatch):
    _, doc = curve
    (tmp_path / "lc.json").write_text(json.dumps(doc))
    monkeypatch.setattr(rundir, "write_plan", lambda exp, run_dir, log: None)
    resolved = resolve(write_yaml(tmp_path / "exp", {"load_curve": "../lc.json", "gpus": 16}))
    (tmp_path / "run").mkdir()
    rundir.start_run_dir(resolved, tmp_path / "run", {}, lambda m: None, [], 0.0)
    assert json.loads((tmp_path / "run" / "load_curve.json").read_text()) == doc
    (tmp_path / "run2").mkdir()
    other = resolve(write_yaml(tmp_path / "exp2", {"gpus": 16}))
    rundir.start_run_dir(other, tmp_path / "run2", {}, lambda m: None, [], 0.0)
    assert not (tmp_path / "run2" / "load_curve.json").exists()


def test_load_curve_yaml_is_the_default_workload_swept_over_concurrency():
    lc = resolve(EXAMPLES_DIR / "load-curve.yaml").experiment
    default = resolve(EXAMPLES_DIR / "default.yaml").experiment
    assert lc.sweep == {"serving.concurrency": [16, 32, 48, 64]}
    assert lc.fabrics == ["zcube", "roft"] and lc.repetitions == 1 and lc.load_curve is None
    from testbed.report.workload import NOT_WORKLOAD_KEYS

    skip = set(NOT_WORKLOAD_KEYS)  # the same workload: it differs only in keys that do not define one
    assert lc.model_dump(exclude=skip) == default.model_dump(exclude=skip)


# ----------------------------------------------------------------------- the report
@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Two report builds of the same synthetic run: with a load_curve.json (this run at concurrency 128)
    and without."""
    base = tmp_path_factory.mktemp("lc")
    doc = load_curve.build(fake_sweep(base / "sweep", LEVELS, REPS))
    with_curve = write_experiment(base / "with", reps=1)
    (with_curve / "experiment.json").write_text(json.dumps({"experiment": {"serving": {"concurrency": 128}}}))
    (with_curve / "load_curve.json").write_text(json.dumps(doc))
    without = base / "without"
    shutil.copytree(with_curve, without)
    (without / "load_curve.json").unlink()
    return (with_curve, build_report(with_curve).read_text()), (without, build_report(without).read_text())


def test_the_report_shows_the_load_curve_after_the_headline(reports):
    (root, html), _ = reports
    assert html.index('id="headline"') < html.index('id="loadcurve"') < html.index('id="serving"')
    assert '<a href="#loadcurve">Load curve</a>' in html
    assert (root / "figures" / "load_curve.png").read_bytes().startswith(PNG)
    assert "comes from a separate sweep over serving.concurrency" in html and "created 2026-12-01 10:00" in html
    assert str((root.parent / "sweep").resolve()) in html
    assert "<b>128 (this run)</b>" in html and "This run used serving.concurrency = 128" in html
    assert "120 [100, 140]" in html and "3.00 [2.00, 4.00]" in html  # ZCube at 64: TTFT P99, KV slowdown P99
    assert "<td class=\"\">700</td>" in html  # ROFT at 256: one repetition left, no range


def test_a_run_level_off_the_curve_is_said_so(tmp_path, curve):
    from testbed.report.load_curve_section import section

    _, doc = curve
    html = section(doc, None, 96)
    assert "serving.concurrency = 96 is not among the curve&#x27;s levels" in html and "(this run)" not in html


def test_no_load_curve_no_section(reports):
    _, (root, html) = reports
    assert 'id="loadcurve"' not in html and "#loadcurve" not in html and "Load curve" not in html
    assert not (root / "figures" / "load_curve.png").exists()

"""testbed.experiment.calibrate: ratios, choice and resolution from sweep points (no fabric)."""

import pytest

from common.errors import TestbedError
from testbed.experiment import calibrate


def point(level: int, bw: str, reps: list[tuple[float, float, float]]) -> dict:
    """A sweep point as sweep.json holds it: (throughput, TTFT P99, TTFT P50) per repetition."""
    return {"values": {"serving.concurrency": str(level), "link.represents": bw},
            "fabrics": {"roft": {"repetitions": [{"throughput_tokens_per_s": t, "ttft_p99_ms": p99, "ttft_p50_ms": p50}
                                                 for t, p99, p50 in reps]}}}


def test_parse_levels_sorts_and_rejects_bad_values():
    assert calibrate.parse_levels("256,128") == [128, 256]
    for bad in ("", "a,b", "0,5", "3,3"):
        with pytest.raises(TestbedError, match="--levels"):
            calibrate.parse_levels(bad)


def test_ratios_pair_repetitions_and_the_closest_level_is_chosen():
    points = [point(100, "100gbit", [(1000, 2000, 500), (1100, 2200, 550)]),
              point(100, "200gbit", [(1050, 1900, 490), (1100, 2090, 540)]),   # x1.05 / x1.0; x0.95 / x0.95
              point(200, "100gbit", [(2000, 4000, 900), (2000, 4000, 900)]),
              point(200, "200gbit", [(2400, 3100, 800), (2360, 3140, 800)])]   # x1.2 / x1.18; x0.775 / x0.785
    doc = calibrate.summarize(points, [100, 200])
    low, high = doc["levels"]
    assert low["throughput_ratio"] == pytest.approx(1.025) and low["throughput_ratio_spread"] == [1.0, 1.05]
    assert low["ttft_p99_ratio"] == pytest.approx(0.95)
    assert high["throughput_ratio"] == pytest.approx(1.19) and high["ttft_p99_ratio"] == pytest.approx(0.78)
    assert doc["chosen"]["level"] == 200 and doc["distance"] == pytest.approx(0.0)
    assert doc["within_resolution"] is True
    assert doc["fabric"] == "roft" and doc["seed"] == {"throughput_ratio": 1.19, "ttft_ratio": 0.78}


def test_a_level_far_from_the_seed_is_not_within_resolution():
    points = [point(64, "100gbit", [(1000, 1000, 300)]), point(64, "200gbit", [(1010, 995, 300)])]
    doc = calibrate.summarize(points, [64])
    assert doc["chosen"]["level"] == 64
    assert doc["within_resolution"] is False
    assert doc["distance"] == pytest.approx(((1.01 - 1.19) ** 2 + (0.995 - 0.78) ** 2) ** 0.5, abs=1e-4)


def test_a_level_without_measurements_is_never_chosen():
    points = [point(64, "100gbit", [(None, None, None)]), point(64, "200gbit", [(1000, 900, 300)])]
    doc = calibrate.summarize(points, [64])
    assert doc["levels"][0]["throughput_ratio"] is None and doc["chosen"] is None
    assert "nothing chosen" in "\n".join(calibrate.table(doc))


def test_the_refinement_splits_the_grid_around_the_closest_level():
    rows = [{"level": 256, "distance": 0.30}, {"level": 512, "distance": 0.10}, {"level": 1024, "distance": 0.20}]
    assert calibrate.next_levels(rows) == [384, 768]
    rows += [{"level": 384, "distance": 0.05}, {"level": 768, "distance": 0.15}]
    assert calibrate.next_levels(rows) == [320, 448]
    assert calibrate.next_levels([{"level": 8, "distance": 0.1}, {"level": 9, "distance": 0.2}]) == []  # no room
    assert calibrate.next_levels([{"level": 8, "distance": None}]) == []
    edge = [{"level": 64, "distance": 0.01}, {"level": 128, "distance": 0.2}]  # the best at the edge: one side
    assert calibrate.next_levels(edge) == [96]


def test_a_refined_calibration_measures_the_midpoints_and_chooses_among_every_round(tmp_path, monkeypatch):
    """The run loop with a fake repetition whose 200G/100G throughput ratio peaks at 1.19 at level 24 (TTFT
    P99 ratio 0.78 everywhere): levels 16 and 64 first, then 40 (between 16 and 64), then 28 (between 16 and
    40): round three's 28 is chosen, the closest level to 24 measured."""
    from testbed.experiment.schema import EXAMPLES_DIR, Override
    from tests.support import fake_runs

    def summary(spec):
        level, hi = spec.serving.concurrency, spec.represents_bps > 150e9
        tokens = 1000.0 * (1 + 0.19 * max(0.0, 1 - abs(level - 24) / 64)) if hi else 1000.0
        return {"fabric": "roft", "transfers": 1, "verified": 1, "goodput_bps": 1.0,
                "throughput_tokens_per_s": tokens, "ttft_ms": {"p50": 10.0, "p99": 78.0 if hi else 100.0},
                "queue_drops": 0, "pfc": {"enabled": True, "pauses": 0}, "warnings": []}

    fake_runs.install(monkeypatch, fake_runs.FakeReplay(summary_of=summary))
    fake_runs.no_report(monkeypatch)
    status, doc, cal_dir = calibrate.run_calibration(
        EXAMPLES_DIR / "default.yaml", [Override("trace.first_n", 300, "test")], [16, 64], tmp_path,
        log=lambda m: None, refine=2)
    assert status == 0 and [r["level"] for r in doc["levels"]] == [16, 28, 40, 64]
    assert doc["chosen"]["level"] == 28 and len(doc["sweeps"]) == 3
    assert (cal_dir / "calibration.json").is_file() and (cal_dir / "calibrated.yaml").is_file()


def test_a_finished_sweep_is_read_again_and_written_as_calibration_json_and_the_chosen_experiment(tmp_path,
                                                                                                  monkeypatch):
    import json

    import yaml

    from testbed.report import headline

    made = {f"points/{lv}-{bw}": point(lv, bw, reps)["fabrics"] for lv, bw, reps in (
        (100, "100gbit", [(1000, 2000, 500)]), (100, "200gbit", [(1190, 1560, 400)]))}
    (tmp_path / "sweep.json").write_text(json.dumps({"points": [
        {"values": {"serving.concurrency": "100", "link.represents": d.rsplit("-", 1)[1]}, "dir": d} for d in made]}))
    monkeypatch.setattr(headline, "fabric_headlines", lambda point_dir: made[str(point_dir.relative_to(tmp_path))])
    assert [p["fabrics"] for p in calibrate.points_of(tmp_path)] == list(made.values())
    experiment = {"name": "x", "serving": {"concurrency": 8, "model": "glm-5"}}
    doc = calibrate.write_calibration(tmp_path, [tmp_path], experiment)
    assert json.loads((tmp_path / "calibration.json").read_text()) == doc
    assert doc["chosen"]["level"] == 100 and doc["experiment"] == experiment and doc["dir"] == str(tmp_path)
    text = (tmp_path / "calibrated.yaml").read_text()
    assert text.startswith("# Written by `testbed calibrate`") and "# chosen: serving.concurrency = 100" in text
    assert yaml.safe_load(text)["serving"] == {"concurrency": 100, "model": "glm-5"}
    assert experiment["serving"]["concurrency"] == 8  # the caller's mapping is left alone
    assert "per_gpu" not in doc  # no cluster size, no load per GPU
    # at a stated size the chosen level is also written per GPU, for a smaller cluster of the same workload
    at_512 = calibrate.write_calibration(tmp_path, [tmp_path], experiment | {"gpus": 512})
    assert (at_512["gpus"], at_512["per_gpu"]) == (512, 0.1953)

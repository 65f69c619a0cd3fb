"""testbed.experiment.scale: the sizes, what each sets, the checks before anything runs, and a curve run end to
end on fake repetitions (no fabric)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from common.errors import TestbedError
from testbed.experiment import scale
from testbed.experiment.schema import EXAMPLES_DIR, Override
from tests.support import fake_runs

DEFAULT = EXAMPLES_DIR / "default.yaml"


def test_sizes_are_distinct_whole_numbers():
    assert scale.parse_sizes("32, 128,16384") == [32, 128, 16384]
    for bad, why in (("32,abc", "'abc' is not a number"), ("1", "'1' is not a number"), ("32,32", "listed twice"),
                     ("", "'' is not a number")):
        with pytest.raises(TestbedError, match=why):
            scale.parse_sizes(bad)


def test_each_size_holds_the_defaults_load_and_workload_per_gpu():
    """The default's 28 sessions at n=32 are 0.875 a GPU; its generated workload holds the calibration's 10,000
    requests at 512 GPUs per GPU above 512 and keeps 10,000 below."""
    base, overrides, params, points = scale.plan(DEFAULT, [], [32, 512, 2048, 16384])
    assert params == [("gpus", ["32", "512", "2048", "16384"]),
                      ("serving.concurrency", ["28", "448", "1792", "14336"]),
                      ("trace.first_n", ["10000", "10000", "40000", "320000"])]
    exps = [res.experiment for _, res in points]
    assert [e.gpus_per_switch for e in exps] == [8, 32, 64, 128]  # auto: the blog's k=128 at 16,384
    assert {e.backend for e in exps} == {scale.BACKEND} and base.experiment.backend == scale.BACKEND
    assert overrides[0] == Override("gpus_per_switch", "auto", "testbed scale")
    # a backend asked for is kept, and the experiment's own load per GPU is what is held
    _, _, params, points = scale.plan(DEFAULT, [Override("backend", "ns3", "--backend"),
                                                Override("serving.concurrency", 64, "--concurrency")], [64])
    assert params[1] == ("serving.concurrency", ["128"]) and points[0][1].experiment.backend == "ns3"


def test_sizes_the_wiring_cannot_make_and_other_experiments_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(TestbedError, match="gpus=100 is not divisible by the scaled k=16"):
        scale.plan(DEFAULT, [], [32, 100])
    with pytest.raises(TestbedError, match="one layer of them reaches 16384 GPUs"):
        scale.plan(DEFAULT, [], [32768])
    with pytest.raises(TestbedError, match="expected a closed loop"):
        scale.plan(EXAMPLES_DIR / "kv-replay.yaml", [], [32])
    with pytest.raises(TestbedError, match="expected fabrics zcube and roft"):
        scale.plan(DEFAULT, [Override("fabrics", ["zcube"], "--fabrics")], [32])
    proc = subprocess.run([sys.executable, "-m", "testbed", "scale", "--sizes", "32,96", "--out", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "gpus=96" in proc.stderr
    assert list(tmp_path.iterdir()) == []  # no directory made


def test_a_curve_runs_every_size_on_both_fabrics_and_writes_the_scale_page(tmp_path, monkeypatch):
    def summary(spec):  # ZCube 5 % ahead at every size, ROFT's TTFT P99 moving with the seed
        n, z = spec.fabric.args["gpus"], spec.kind == "zcube"
        return {"fabric": spec.kind, "transfers": 1, "verified": 1, "goodput_bps": 1.0,
                "throughput_tokens_per_s": n * (1.05 if z else 1.0), "ttft_ms": {"p50": 10.0,
                                                                               "p99": 50.0 if z else 60.0 + spec.seed},
                "queue_drops": 0, "pfc": {"enabled": False, "pauses": 0}, "warnings": []}

    replay = fake_runs.FakeReplay(summary_of=summary)
    fake_runs.install(monkeypatch, replay)
    fake_runs.no_report(monkeypatch)
    planned = scale.plan(DEFAULT, [Override("repetitions", 2, "--reps")], [32, 64])
    seen, lines = [], []
    status, out, doc = scale.run_scale(DEFAULT, planned, tmp_path, log=lambda m: None, out=lines.append,
                                       progress=lambda t, outcome: seen.append((t.fabric, t.rep, outcome["status"])))
    assert status == 0 and len(replay.calls) == 8 and len(seen) == 8
    assert {(c["kind"], c["gpus"]) for c in replay.calls} == {(f, n) for f in ("zcube", "roft") for n in (32, 64)}
    assert json.loads((out / "sweep.json").read_text())["paired"] is True
    assert (out / "scale.json").is_file() and (out / "scale.png").is_file() and (out / "scale.html").is_file()
    assert [p["n"] for p in doc["points"]] == [32, 64]
    tput = doc["points"][1]["intervals"]["throughput_tokens_per_s"]
    assert tput["ratio"] == 1.05 and tput["ci95"] == [1.05, 1.05] and tput["pairs"] == 2
    assert doc["points"][0]["intervals"]["ttft_p99_ms"]["ratio"] == pytest.approx((50 / 60 * 50 / 61) ** 0.5, abs=1e-4)
    cost = doc["points"][1]["cost"]  # n=64, k=16: 4 + 4 switches of 32 ports; ROFT 8 rail leaves + 4 spines
    assert cost["zcube"]["switches"] == 8 and cost["roft"]["switches"] == 12 and cost["ratios"]["switches"] == 0.6667
    assert lines[0].startswith("n ") and lines[-1].endswith("scale.html") and "1.050 [1.050, 1.050]" in lines[2]

"""testbed.experiment.spread: ZCube once, ROFT once per ECMP outcome, and the distributions (no fabric)."""

import pytest

from common.errors import TestbedError
from testbed.experiment import spread
from testbed.experiment.schema import EXAMPLES_DIR, Override
from tests.support import fake_runs


def test_the_distribution_of_a_ratio_and_the_share_on_each_side_of_one():
    z = {"throughput_tokens_per_s": 110.0, "ttft_p99_ms": 100.0, "ttft_p50_ms": 50.0}
    roft = [{"throughput_tokens_per_s": t, "ttft_p99_ms": p, "ttft_p50_ms": 50.0, "hash_seed": i}
            for i, (t, p) in enumerate([(100.0, 80.0), (110.0, 100.0), (120.0, 125.0), (100.0, 200.0)], 1)]
    doc = spread.summarize(z, roft)
    tp = doc["figures"]["throughput_tokens_per_s"]
    assert tp["per_outcome"] == [1.1, 1.0, pytest.approx(0.9167, abs=1e-4), 1.1]
    assert tp["ratio"]["median"] == pytest.approx(1.05) and tp["ratio"]["min"] == pytest.approx(0.9167, abs=1e-4)
    assert tp["zcube_better_share"] == 0.5  # 1.1 twice of four: higher is better; 1.0 is neither side
    p99 = doc["figures"]["ttft_p99_ms"]
    assert p99["per_outcome"] == [1.25, 1.0, 0.8, 0.5] and p99["zcube_better_share"] == 0.5  # lower is better
    assert p99["roft"]["max"] == 200.0 and doc["hash_seeds"] == [1, 2, 3, 4]
    assert spread.distribution([]) is None
    assert "ZCube better in" in spread.table(doc)[0] and len(spread.table(doc)) == 4


def test_spread_runs_zcube_once_and_roft_once_per_hash_seed(tmp_path, monkeypatch):
    def summary(spec):
        tokens = 1000.0 if spec.kind == "zcube" else 900.0 + 10 * (spec.hash_seed or 0)
        return {"fabric": spec.kind, "transfers": 1, "verified": 1, "goodput_bps": 1.0,
                "throughput_tokens_per_s": tokens, "ttft_ms": {"p50": 10.0, "p99": 50.0}, "queue_drops": 0,
                "pfc": {"enabled": True, "pauses": 0}, "warnings": []}

    replay = fake_runs.FakeReplay(summary_of=summary)
    fake_runs.install(monkeypatch, replay)
    fake_runs.no_report(monkeypatch)
    status, doc, out = spread.run_spread(EXAMPLES_DIR / "default.yaml", [Override("trace.first_n", 300, "test")], 3,
                                         tmp_path, log=lambda m: None)
    assert status == 0 and [(c["kind"], c["spec"].hash_seed, c["seed"]) for c in replay.calls] == [
        ("zcube", None, 0), ("roft", 1, 0), ("roft", 2, 0), ("roft", 3, 0)]  # expert routing fixed: seed 0
    assert doc["figures"]["throughput_tokens_per_s"]["per_outcome"] == pytest.approx([1000 / 910, 1000 / 920,
                                                                                       1000 / 930], abs=1e-4)
    assert (out / "spread.json").is_file()
    with pytest.raises(TestbedError, match="--outcomes 1"):
        spread.run_spread(EXAMPLES_DIR / "default.yaml", [], 1, tmp_path, log=lambda m: None)

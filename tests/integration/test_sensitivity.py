"""`testbed sensitivity --only` with one alternative on real fabrics: a short closed-loop MoE experiment at
n=16 (EP groups across two 4-GPU servers, dilation 8, 3 cluster seconds), the baseline and the alternative
each on ZCube and ROFT, the JSON contract, nothing left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.paths import AZURE_TRACE
from tests.support.integration import leftovers, run_testbed

pytestmark = pytest.mark.integration

EXPERIMENT = f"""
name: sens16
fabrics: [zcube, roft]
gpus: 16
gpus_per_switch: 4
gpus_per_server: 4
link:
  time_dilation: 8
trace:
  path: {AZURE_TRACE}
  duration_s: 3
serving:
  model: glm-5
  driver: live
  arrivals: closed
  concurrency: 48
  warmup_s: 1
sensitivity:
  - {{name: pair-hash, assumption: port policy, set: {{serving.policy: pair-hash}}}}
  - {{name: zipf, assumption: expert popularity, set: {{serving.popularity: zipf}}}}
"""
RATIOS = {"throughput_tokens_per_s", "ttft_ms.p50", "ttft_ms.p99"}


def test_sensitivity_only_one_alternative_runs_both_fabrics_and_prints_the_contract(tmp_path):
    exp = tmp_path / "sens16.yaml"
    exp.write_text(EXPERIMENT)
    proc = run_testbed("sensitivity", str(exp), "--only", "pair-hash", "--json", "--out", str(tmp_path),
                       timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert "estimated wall time: 2 runs" in proc.stderr
    assert set(doc["baseline"]["ratios"]) == RATIOS
    (alt,) = doc["alternatives"]  # --only: zipf is not run
    assert {"name", "overrides", "ratios", "spread", "same_verdict", "fidelity_ok"} <= set(alt)
    assert alt["name"] == "pair-hash" and alt["overrides"] == {"serving.policy": "pair-hash"}
    assert set(alt["ratios"]) == RATIOS and isinstance(alt["same_verdict"], bool)
    assert isinstance(alt["fidelity_ok"], bool)
    for entry in (doc["baseline"], alt):
        assert entry["status"] == "ok", entry["error"]
        assert all(entry["ratios"][k] > 0 for k in RATIOS), entry["ratios"]
        # one repetition: no interval over repetitions, the run's own (within-run) interval kept beside it
        assert entry["ci95"]["throughput_tokens_per_s"] is None and entry["pairs"]["throughput_tokens_per_s"] == 1
        lo, hi = entry["within_run_ci95"]["throughput_tokens_per_s"]
        assert lo <= entry["ratios"]["throughput_tokens_per_s"] <= hi
        run_dir = Path(entry["dir"])
        for fabric in ("zcube", "roft"):
            s = json.loads((run_dir / "runs" / fabric / "rep1" / "summary.json").read_text())
            assert s["driver"] == "live" and s["ep_messages"] == s["ep_messages_verified"] > 0, fabric
        assert (run_dir / "report.html").is_file()
    config = json.loads((Path(alt["dir"]) / "runs" / "zcube" / "rep1" / "config.json").read_text())
    assert config["replay"]["policy"] == "pair-hash"
    assert json.loads((Path(doc["dir"]) / "sensitivity.json").read_text()) == doc
    assert 'id="sensitivity"' in (Path(doc["baseline"]["dir"]) / "report.html").read_text()
    assert leftovers() == []

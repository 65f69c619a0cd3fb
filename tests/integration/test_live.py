"""Serving with the network in the loop on both fabrics: a short closed-loop MoE run at n=16 whose
expert-parallel groups span two servers, every KV transfer and EP message verified, the serving
figures and files present, nothing left behind."""

from __future__ import annotations

import csv
import json

from common.paths import AZURE_TRACE
from tests.support.integration import leftovers, run_testbed

EXPERIMENT = f"""
name: live16
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
"""


def test_closed_loop_moe_run_verifies_every_transfer_and_message(tmp_path):
    exp = tmp_path / "live16.yaml"
    exp.write_text(EXPERIMENT)
    proc = run_testbed("run", str(exp), "--out", str(tmp_path), timeout=900)
    assert proc.returncode == 0, proc.stderr
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir() and p.name.endswith("-live16"))
    for kind in ("zcube", "roft"):
        rep = run_dir / "runs" / kind / "rep1"
        s = json.loads((rep / "summary.json").read_text())
        assert s["driver"] == "live" and s["closed_loop"] is True and s["time_dilation"] == 8
        assert s["transfers"] == s["verified"] > 0, kind
        assert s["ep_messages"] == s["ep_messages_verified"] > 0, kind  # EP crossed the fabric
        assert s["ep_bytes"] > 0 and s["nvlink_bytes"] > 0 and s["kv_bytes"] > 0
        assert s["throughput_tokens_per_s"] > 0 and s["ttft_ms"]["p50"] is not None
        assert set(s["prefill_utilization"]) == {"prefill0"} and set(s["decode_utilization"]) == {"decode0"}
        assert 0 < s["prefill_utilization"]["prefill0"] < 1 and s["decode_utilization"]["decode0"] > 0
        assert s["crashed_agents"] == {} and s["serving_failed_messages"] == 0
        assert s["invariants"]["violations"] == [], s["invariants"]["violations"]
        messages = list(csv.DictReader(open(rep / "messages.csv")))
        assert len(messages) == s["ep_messages"] and {m["kind"] for m in messages} == {"dispatch", "combine"}
        assert all(m["verified"] == "True" for m in messages)
        steps = list(csv.DictReader(open(rep / "steps.csv")))
        assert any(st["engine"] == "decode0" and int(st["messages"]) > 0 for st in steps)
        nics = list(csv.DictReader(open(rep / "nics.csv")))
        assert sum(int(n["ep_sent_bytes"]) for n in nics) == sum(int(m["bytes"]) for m in messages)
    report = json.loads((run_dir / "summary.json").read_text())
    assert report["ratios"]["throughput_tokens_per_s"] is not None
    assert (run_dir / "figures" / "serving.png").is_file()
    assert leftovers() == []

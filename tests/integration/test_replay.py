"""A short trace replay over real TCP on both fabrics: every transfer verified,
the run directory complete and consistent with the schedule."""

from __future__ import annotations

import csv
import json

import pytest

from common import scale
from testbed.repetition.drivers.plan import prepare_plan
from tests.support.integration import leftovers, run_testbed
from tests.support.settings import repetition


@pytest.mark.parametrize("kind", ["zcube", "roft"])
def test_short_replay_verifies_every_transfer(kind, tmp_path):
    cross = ["--cross", "2"] if kind == "zcube" else []
    proc = run_testbed("replay", kind, "--gpus", "16", "--duration", "10s", "--out", str(tmp_path), *cross,
                       timeout=600)
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / proc.stdout.strip().splitlines()[-1].rsplit("/", 1)[-1]
    assert {"transfers.csv", "summary.json", "fct.txt", "config.json", "queues.csv", "links.csv", "nics.csv",
            "goodput.csv", "slowdown_bins.json"} <= {p.name for p in run_dir.iterdir()}
    rows = list(csv.DictReader(open(run_dir / "transfers.csv")))
    summary = json.loads((run_dir / "summary.json").read_text())
    defaults = repetition({"trace": {"duration_s": 10}, "fabrics": [kind]})  # a flag left out: the schema's
    expected = prepare_plan(defaults, 16, scale.DEFAULT_RATE_BPS, scale.DEFAULT_MTU)
    assert len(rows) == summary["transfers"] == summary["verified"] == len(expected.plan_rows)
    assert all(r["verified"] == "True" for r in rows)
    sent = sum(int(r["bytes"]) for r in rows)
    assert sent == sum(int(r["received_bytes"]) for r in rows) == sum(t["bytes"] for t in expected.plan_rows)
    assert summary["bytes"] == sent
    assert len((run_dir / "fct.txt").read_text().splitlines()) == len(rows)
    # the measured figures are the machine's; their bounds are not: 16 GPUs x 2 NIC ports x 3 Mbit/s = 96 Mbit/s
    # is all the fabric can carry, and a transfer cannot finish before it starts
    assert 0 < summary["goodput_bps"] <= 16 * 2 * 3e6
    assert 0 < summary["fct_ms"]["p50"] <= summary["fct_ms"]["p99"] <= summary["fct_ms"]["p999"]
    assert set(summary["ttft_ms"]) >= {"p50", "p99"} and 0 < summary["ttft_ms"]["p50"] <= summary["ttft_ms"]["p99"]
    assert 0 <= summary["start_lateness_ms"]["p50"] <= summary["start_lateness_ms"]["p99"]
    assert summary["crashed_agents"] == {}
    if cross:  # background iperf3 (Python binding) ran beside the replay
        assert summary["cross_traffic"]["flows"] == 2 and summary["cross_traffic"]["goodput_bps"] > 0
    assert leftovers() == []  # the replay brought its fabric up and took it down again
    nic_sent = sum(int(r["sent_bytes"]) for r in csv.DictReader(open(run_dir / "nics.csv")))
    assert nic_sent == sent
    link_bytes = sum(int(r["bytes"]) for r in csv.DictReader(open(run_dir / "links.csv")))
    assert link_bytes >= sent  # every payload byte crossed at least its NIC queue (plus headers)

"""`testbed run` end to end on real fabrics (smoke example: n=16, 10 s of trace, PFC on):
a complete report directory whose numbers agree with the raw data."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.support.integration import leftovers, run_testbed

pytestmark = pytest.mark.integration


def test_run_smoke_experiment(tmp_path):
    proc = run_testbed("run", "experiments/smoke.yaml", "--out", str(tmp_path), timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    assert run_dir.parent == tmp_path
    for name in ("report.html", "summary.json", "experiment.json", "versions.json"):
        assert (run_dir / name).is_file(), name
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary) >= {"zcube", "roft", "ratios", "fidelity_ok"}
    for fabric in ("zcube", "roft"):
        rep = run_dir / "runs" / fabric / "rep1"
        rows = list(csv.DictReader(open(rep / "transfers.csv")))
        assert summary[fabric]["transfers"] == len(rows) > 0
        assert summary[fabric]["verified"] == sum(r["verified"].lower() == "true" for r in rows) == len(rows)
        replay = json.loads((rep / "summary.json").read_text())
        assert replay["pfc"]["enabled"] and replay["pfc"]["lossless_ok"], replay["pfc"]
        assert (rep / "pfc.txt").exists() and (rep / "pfc_ports.csv").exists()
    assert summary["ratios"]["goodput_bps"] == pytest.approx(
        summary["zcube"]["goodput_bps"] / summary["roft"]["goodput_bps"], rel=0.01)
    assert "<table" in (run_dir / "report.html").read_text()
    assert leftovers() == []


def test_run_rejects_bad_experiment_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trace:\n  speed: -1\n")
    proc = run_testbed("run", str(bad), "--out", str(tmp_path))
    assert proc.returncode == 2
    assert "trace.speed" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1

"""A run with a cable cut and a controller restart on both fabrics (n=16, live serving): every transfer
and message verified or failed with its cause, the invariants hold, the report shows the faults, nothing
is left behind. A module of its own: it brings up its own fabrics, so no module fixture's may be up."""

from __future__ import annotations

import csv
import json

from tests.integration.test_live import EXPERIMENT as LIVE16  # the short closed-loop MoE run at n=16
from tests.support.integration import leftovers, run_testbed

EXPERIMENT = LIVE16.replace("name: live16", "name: faults16") + """faults:
  - {at: 1.0, duration: 1.0, target: {zcube: link sw1:5, roft: link leaf1:5}}
  - {at: 2.2, target: controller, action: restart}
"""


def test_a_run_with_a_cable_cut_and_a_controller_restart_accounts_for_every_transfer(tmp_path):
    """ZCube k=4 has one cable per switch pair: its cut needs the other NIC port pair (the agents' retry)."""
    exp = tmp_path / "faults16.yaml"
    exp.write_text(EXPERIMENT)
    proc = run_testbed("run", str(exp), "--out", str(tmp_path), timeout=900)
    assert proc.returncode == 0, proc.stderr
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir() and p.name.endswith("-faults16"))
    for kind in ("zcube", "roft"):
        rep = run_dir / "runs" / kind / "rep1"
        events = [json.loads(line) for line in (rep / "faults.jsonl").read_text().splitlines()]
        assert [(e["trace_s"], e["action"]) for e in events] == [(1.0, "down"), (2.0, "up"), (2.2, "restart")]
        assert all(0 <= e["late_ms"] < 200 for e in events), events  # 25 ms of cluster time at dilation 8
        for name in ("transfers.csv", "messages.csv"):
            with open(rep / name) as fh:
                rows = list(csv.DictReader(fh))
            assert rows, f"{kind}: no rows in {name}"
            unexplained = [r for r in rows if r["verified"] != "True" and not r["error"]]
            assert unexplained == [], f"{kind} {name}: neither verified nor failed with a cause: {unexplained[:3]}"
        summary = json.loads((rep / "summary.json").read_text())
        assert not summary["invariants"]["violations"], summary["invariants"]["violations"]
    assert (run_dir / "report.html").exists()
    assert "Faults" in (run_dir / "report.html").read_text()
    assert leftovers() == []

"""The emulation's speed, as a user runs it: the default experiment at n=16 at the default time dilation keeps
fidelity over two repetitions on one fabric each (start lateness P99 within the 2 ms goal of cluster time, every
message verified, ecmp.json recorded), and the two benchmarks of where the time goes print their JSON contracts
(``bench control-path``, ``bench datapath``), leaving nothing behind."""

from __future__ import annotations

import json

from tests.support.integration import leftovers, run_testbed

GOAL_MS = 2.0


def test_the_default_at_n16_keeps_fidelity_over_two_repetitions(tmp_path):
    proc = run_testbed("run", "--set", "gpus=16", "--reps", "2", "--set", "trace.duration_s=6", "--set",
                       "serving.warmup_s=2", "--out", str(tmp_path), timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir() and p.name.endswith("-default"))
    assert "zcube: one fabric for its 2 repetition(s)" in proc.stderr  # built once, reused
    report = json.loads((run_dir / "summary.json").read_text())
    assert report["fidelity_ok"], report["fidelity_problems"]
    for kind in ("zcube", "roft"):
        for rep in (1, 2):
            d = run_dir / "runs" / kind / f"rep{rep}"
            s = json.loads((d / "summary.json").read_text())
            assert s["time_dilation"] == 4 and s["transfers"] == s["verified"] > 0
            assert s["start_lateness_ms"]["p99"] <= GOAL_MS, (kind, rep, s["start_lateness_ms"])
            assert s["invariants"]["violations"] == []
            ecmp = json.loads((d / "ecmp.json").read_text())
            assert ecmp["hash_seed"] == rep - 1 and ecmp["connections"] > 0
            if kind == "roft":
                # both directions of every multipath connection learnt (the twin replays each one's path)
                assert ecmp["learnt"] == ecmp["multipath_directions"] == 2 * ecmp["multipath_connections"]
    assert leftovers() == []


def test_bench_control_path_prints_its_json_contract(tmp_path):
    proc = run_testbed("bench", "control-path", "roft", "--duration", "5", "--path", "hosted,processes", "--json",
                       "--logs", str(tmp_path / "cp"), timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["bench"] == "control-path" and doc["fabric"] == "roft" and set(doc["paths"]) == {"hosted", "processes"}
    for r in doc["paths"].values():
        assert r["delivered"] == r["ordered"] > 0
        for stage in ("order_ms", "send_ms", "order_to_wire_ms", "wire_ms"):
            assert set(r[stage]) == {"all", "timer", "arrival"} and r[stage]["all"]["n"] > 0
        assert {"p50", "p99"} <= set(r["report_ms"]) and r["cpu"]["busy"] >= 0
    assert doc["paths"]["hosted"]["cpu"].get("host", 0) > 0 and doc["paths"]["processes"]["cpu"].get("agents", 0) > 0
    assert (tmp_path / "cp" / "bench.json").is_file()
    assert leftovers() == []


def test_bench_datapath_prints_its_json_contract(tmp_path):
    proc = run_testbed("bench", "datapath", "--seconds", "3", "--json", "--logs", str(tmp_path / "dp"), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["bench"] == "datapath"
    for hop in ("emulated", "kernel"):
        r = doc[hop]
        assert r["received_pps"] > 0 and r["hop_cores"] > 0 and r["pps_per_core"] > 0, r
    assert doc["ratio"] == round(doc["emulated"]["pps_per_core"] / doc["kernel"]["pps_per_core"], 4)
    assert leftovers() == []

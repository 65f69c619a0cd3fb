"""``bench lateness`` (the experiments layer: it runs a sweep): does the live replay keep time as the load rises?

The default experiment (the live GLM-5 cluster) on one fabric, one short
replay per level of ``serving.concurrency`` (requests in flight). Per level:
the bytes the coordinator ordered against the bytes delivered and verified,
start lateness P99 (real-cluster and wall time), the agents' and the
coordinator's CPU, the coordinator's lag, and each EP exchange's span against
its ideal on an otherwise idle fabric (``testbed.repetition.drivers.live.exchange_vs_ideal``).
Level 1 is one request in flight: prefill and decode alternate, so each
exchange has the fabric to itself and its ratio is the idle-fabric figure.

The replay keeps time at a level when start lateness P99 stays within
``GOAL_MS`` of real-cluster time and every ordered byte arrived verified.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from common.errors import TestbedError
from testbed.experiment import calibrate, run, sweep
from testbed.experiment.schema import Override

KNOB = "serving.concurrency"
LEVELS = (1, 64, 128, 192, 256)
GOAL_MS = 2.0  # start lateness P99, real-cluster time
DURATION_S = 8.0  # cluster seconds per level (the first WARMUP_S not measured)
WARMUP_S = 2.0


def parse_levels(text: str | None) -> list[int]:
    """'1,64,128' -> [1, 64, 128] (``LEVELS`` when not given); one line naming the bad value otherwise."""
    return list(LEVELS) if text is None else calibrate.parse_levels(text)


def _bytes(path: Path) -> tuple[int, int]:
    """(ordered, delivered and verified) payload bytes of one transfers.csv or messages.csv."""
    ordered = delivered = 0
    try:
        with open(path, newline="") as fh:
            for row in csv.DictReader(fh):
                ordered += int(row["bytes"] or 0)
                if row["verified"] == "True":
                    delivered += int(row["received_bytes"] or 0)
    except FileNotFoundError:
        pass
    return ordered, delivered


def level_figures(level: int, rep_dir: Path) -> dict:
    """One level's figures from its replay directory (``error`` set when the replay left no summary)."""
    try:
        s = json.loads((rep_dir / "summary.json").read_text())
    except (OSError, json.JSONDecodeError):
        err = rep_dir / "error.txt"
        first = err.read_text(errors="replace").splitlines()[:1] if err.is_file() else []
        return {"level": level, "error": first[0] if first else "no summary.json"}
    ordered = delivered = 0
    for name in ("transfers.csv", "messages.csv"):
        o, d = _bytes(rep_dir / name)
        ordered, delivered = ordered + o, delivered + d
    wall_s = float(s.get("time_dilation") or 1) * _duration_s(rep_dir)
    late = s.get("start_lateness_ms") or {}
    row = {
        "level": level,
        "ordered_bytes": ordered,
        "delivered_bytes": delivered,
        "delivered_fraction": round(delivered / ordered, 6) if ordered else None,
        "lateness_p99_ms": late.get("p99"),
        "lateness_wall_p99_ms": (s.get("start_lateness_wall_ms") or {}).get("p99"),
        "control_lag_p99_ms": (s.get("control_lag_ms") or {}).get("p99"),
        "agents_cores": round(s["agents_cpu_s"] / wall_s, 3) if s.get("agents_cpu_s") and wall_s else None,
        "coordinator_cores": round(s["coordinator_cpu_s"] / wall_s, 3) if s.get("coordinator_cpu_s") and wall_s
        else None,
        "exchange_vs_ideal": s.get("ep_exchange_vs_ideal"),
        "throughput_tokens_per_s": s.get("throughput_tokens_per_s"),
        "invariants_ok": (s.get("invariants") or {}).get("ok"),
    }
    row["keeps_time"] = (row["lateness_p99_ms"] is not None and row["lateness_p99_ms"] <= GOAL_MS
                         and ordered > 0 and delivered == ordered)
    return row


def _duration_s(rep_dir: Path) -> float:
    """Cluster seconds served, from the replay's serving configuration."""
    try:
        cfg = json.loads((rep_dir / "serving_config.json").read_text())
        return float(cfg["spec"]["duration_s"])
    except (OSError, KeyError, ValueError, json.JSONDecodeError):
        return 0.0


def summarize(fabric: str, rows: list[dict], sweep_dir: Path) -> dict:
    """The ``--json`` document: every level, and the highest level below which every level kept time."""
    highest = None
    for r in sorted(rows, key=lambda r: r["level"]):
        if not r.get("keeps_time"):
            break
        highest = r["level"]
    return {"fabric": fabric, "knob": KNOB, "goal_lateness_p99_ms": GOAL_MS, "levels": rows,
            "highest_level_keeping_time": highest, "dir": str(sweep_dir)}


def run_bench(fabric: str, levels: list[int], duration_s: float, out_root: Path, sized: list[Override],
              log: run.Log) -> tuple[int, dict]:
    """One short replay of the default experiment (at the size ``sized`` sets) per level on ``fabric``;
    (exit status, document)."""
    if duration_s <= WARMUP_S:
        raise TestbedError(f"--duration {duration_s:g} is not allowed: expected more than the {WARMUP_S:g} s "
                           "warm-up (cluster seconds)")
    overrides = [*sized, Override("fabrics", [fabric], "bench"), Override("repetitions", 1, "bench"),
                 Override("trace.duration_s", duration_s, "--duration"),
                 Override("serving.warmup_s", WARMUP_S, "bench"), Override("calibration", None, "bench"),
                 Override("load_curve", None, "bench")]
    status, sweep_dir = sweep.run_sweep(None, overrides, [(KNOB, [str(v) for v in levels])], out_root, log=log,
                                        out=lambda line: None, name=f"bench-replay-{fabric}")
    doc = json.loads((sweep_dir / "sweep.json").read_text())
    rows = [level_figures(int(p["values"][KNOB]), sweep_dir / p["dir"] / "runs" / fabric / "rep1")
            for p in doc["points"]]
    result = summarize(fabric, rows, sweep_dir)
    (sweep_dir / "bench.json").write_text(json.dumps(result, indent=1) + "\n")
    return status, result


def table(doc: dict) -> list[str]:
    """The printed table, one line per level."""
    def f(v, digits=2):
        return "-" if v is None else f"{v:.{digits}f}"

    head = ("in flight", "delivered/ordered", "lateness P99 ms (wall)", "control lag P99", "agents cores",
            "coordinator cores", "exchange/ideal P50 (P99)", "keeps time")
    rows = [head]
    for r in doc["levels"]:
        if "error" in r:
            rows.append((str(r["level"]), f"FAILED: {r['error']}", "", "", "", "", "", "no"))
            continue
        x = r["exchange_vs_ideal"] or {}
        rows.append((str(r["level"]), f(r["delivered_fraction"], 4),
                     f"{f(r['lateness_p99_ms'])} ({f(r['lateness_wall_p99_ms'], 1)})", f(r["control_lag_p99_ms"], 1),
                     f(r["agents_cores"]), f(r["coordinator_cores"]), f"{f(x.get('p50'))} ({f(x.get('p99'), 1)})",
                     "yes" if r["keeps_time"] else "NO"))
    out = [f"bench lateness on {doc['fabric']}: the default experiment, one short replay per {doc['knob']} level; "
           f"goal: start lateness P99 <= {doc['goal_lateness_p99_ms']:g} ms (real-cluster time), every byte verified"]
    out += run.columns(rows)
    hi = doc["highest_level_keeping_time"]
    out.append(f"highest load keeping time: {hi} in flight" if hi is not None else
               "the replay kept time at no level: its figures are not a result")
    return out

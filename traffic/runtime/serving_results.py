"""The serving run's own files, whoever drove the cluster: requests.csv, steps.csv and serving.json.

The live driver's serving cluster (``traffic.model.serving.Cluster``) is driven by the coordinator
process on the emulated fabric and in-process by the other network backends; each hands it here when
the run is over, so the files the write-up and the report read are the same whichever carried it.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from traffic.model.metrics import rounded_percentiles
from traffic.model.serving import Cluster

_LISTS = ("ttft_s", "exchange_s", "decode_step_s")  # Cluster.results' per-item lists: in the CSVs, not the summary


def write_csv(path: Path, rows: list[dict]) -> None:
    """Rows of dicts with the first row's keys as the header (an empty file for no rows)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        if not rows:
            return
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def read_requests(run_dir: Path, warmup_s: float, duration_s: float) -> tuple[list[dict], list[dict]]:
    """requests.csv's rows (as ``write_results`` wrote them), and the measured ones: those arriving in the
    window [warmup, duration)."""
    with open(Path(run_dir) / "requests.csv", newline="") as fh:
        reqs = list(csv.DictReader(fh))
    return reqs, [r for r in reqs if warmup_s <= float(r["arrival_s"]) < duration_s]


def write_results(run_dir: Path, cluster: Cluster, *, t0: float, dilation: float, cpu_s: float | None,
                  failed: dict[int, str], lag_s: list[float]) -> dict:
    """Write ``run_dir``/requests.csv, steps.csv and serving.json; the serving results (serving.json's
    content, what the live driver's summary reads). ``t0``: the run's time 0 on the driver's clock;
    ``dilation``: wall seconds per cluster second; ``cpu_s``: the driver's CPU seconds (None: not
    measured); ``failed``: message id -> why it was not delivered; ``lag_s``: per arrival, how long after
    its last byte the driver learnt of it."""
    run_dir = Path(run_dir)
    res = cluster.results(cluster.spec.duration_s)
    write_csv(run_dir / "requests.csv", cluster.request_rows())
    write_csv(run_dir / "steps.csv", cluster.step_rows())
    summary = {k: v for k, v in res.items() if k not in _LISTS}
    summary |= {"t0": t0, "dilation": dilation, "cpu_s": cpu_s, "failed_messages": len(failed),
                "failures": dict(list(failed.items())[:10]), "messages": cluster.message_count,
                "in_flight_at_end": cluster.in_flight, "control_lag_ms": rounded_percentiles(lag_s, factor=1e3)}
    (run_dir / "serving.json").write_text(json.dumps(summary, indent=1))
    return summary


__all__ = ["write_results", "write_csv", "read_requests"]

"""``testbed spread``: is ROFT's result a lottery? The experiment's ZCube/ROFT ratios over many ECMP outcomes.

On ROFT the spine a flow takes is the switches' hash of its 5-tuple, so which flows collide on a spine
cable is drawn anew with every set of connections (their source ports); ZCube has one path per port
pair and draws nothing. ``spread`` runs ZCube once and ROFT once per ECMP outcome (``hash_seed`` 1 .. N,
everything else, the expert routing included, at the experiment's seed), one repetition each, and gives
the distribution of ROFT's figures and of the ZCube/ROFT ratios over the outcomes: their median, range,
5th/95th percentiles, the spread of the log ratio, and the share of outcomes on each side of 1.

Layout:

    reports/<YYYYmmdd-HHMMSS>-spread-<name>/
      zcube/                    a run directory (testbed.experiment.run) of ZCube
      <...>-roft/               a sweep directory (testbed.experiment.sweep) over hash_seed, ROFT only
      spread.json               the distributions (the ``--json`` document)
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np

from common.errors import TestbedError
from testbed.experiment import run, rundir, sweep
from testbed.experiment.schema import Override, resolve
from testbed.report import headline

FIGURES = (("throughput_tokens_per_s", "output tokens/s", True), ("ttft_p99_ms", "TTFT P99 ms", False),
           ("ttft_p50_ms", "TTFT P50 ms", False))
FIXED = ("fabrics", "repetitions", "hash_seed")


def distribution(values: list[float]) -> dict | None:
    """median, min, max, 5th and 95th percentiles (linear interpolation: a summary of a distribution, not a
    sample statistic), and the standard deviation of the log (a ratio's relative spread); None for no value."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return None
    logs = [math.log(v) for v in vals if v > 0]
    return {"n": len(vals), "median": round(statistics.median(vals), 4), "min": round(min(vals), 4),
            "max": round(max(vals), 4), "p5": round(float(np.quantile(vals, 0.05)), 4),
            "p95": round(float(np.quantile(vals, 0.95)), 4),
            "log_sd": round(statistics.stdev(logs), 4) if len(logs) > 1 else None}


def summarize(zcube: dict, roft: list[dict]) -> dict:
    """The document from ZCube's repetition figures and each ROFT outcome's (``headline.rep_headline``
    dicts with its ``hash_seed``)."""
    figures = {}
    for key, label, higher in FIGURES:
        z = zcube.get(key)
        ratios = [z / r[key] for r in roft if z is not None and r.get(key)]
        better = sum(1 for x in ratios if (x > 1) == higher and x != 1)
        figures[key] = {"label": label, "zcube": z, "roft": distribution([r.get(key) for r in roft]),
                        "ratio": distribution(ratios), "per_outcome": [round(x, 4) for x in ratios],
                        "zcube_better_share": round(better / len(ratios), 3) if ratios else None}
    return {"outcomes": len(roft), "hash_seeds": [r.get("hash_seed") for r in roft], "figures": figures}


def table(doc: dict) -> list[str]:
    """The printed table: per figure, ZCube's value, ROFT's distribution and the ratio's."""
    def d(x: dict | None) -> str:
        if not x:
            return "-"
        return f"{x['median']:.4g} [{x['min']:.4g}, {x['max']:.4g}] (5-95 %: {x['p5']:.4g}-{x['p95']:.4g})"

    rows = [("figure", "ZCube", f"ROFT over {doc['outcomes']} ECMP outcomes: median [min, max]",
             "ZCube / ROFT: median [min, max]", "log sd", "ZCube better in")]
    for f in doc["figures"].values():
        r = f["ratio"] or {}
        share = "-" if f["zcube_better_share"] is None else f"{f['zcube_better_share']:.0%}"
        rows.append((f["label"], "-" if f["zcube"] is None else f"{f['zcube']:.4g}", d(f["roft"]), d(f["ratio"]),
                     "-" if r.get("log_sd") is None else f"{r['log_sd']:.3f}", share))
    return run.columns(rows)


def run_spread(path, overrides: list[Override], outcomes: int, out_root: Path,
               log: run.Log = run.stderr_log) -> tuple[int, dict, Path]:
    """ZCube once, ROFT once per hash seed 1 .. ``outcomes``; (worst exit status, document, spread directory)."""
    if outcomes < 2:
        raise TestbedError(f"--outcomes {outcomes}: expected at least 2 ECMP outcomes")
    given = [o for o in overrides if o.key not in FIXED]
    one = [Override("repetitions", 1, "spread")]
    zcube = resolve(path, given + one + [Override("fabrics", ["zcube"], "spread")])
    roft = given + one + [Override("fabrics", ["roft"], "spread")]
    resolve(path, roft)  # both checked before anything runs
    zcube.backend.check(build_own=True)
    spread_dir = rundir.new_run_dir(Path(out_root), f"spread-{zcube.experiment.name}")
    log(f"spread directory {spread_dir}: ZCube once, then ROFT at hash_seed 1 .. {outcomes}")
    (spread_dir / "zcube").mkdir()
    worst, _ = run.run_into(zcube, spread_dir / "zcube", zcube.backend, log, rundir.collect_versions())
    status, sweep_dir = sweep.run_sweep(path, roft, [("hash_seed", [str(i) for i in range(1, outcomes + 1)])],
                                        spread_dir, log=log, out=lambda line: None, name="roft")
    z = headline.rep_headline(spread_dir / "zcube" / "runs" / "zcube" / "rep1")
    points = json.loads((sweep_dir / "sweep.json").read_text())["points"]
    r = [headline.rep_headline(sweep_dir / p["dir"] / "runs" / "roft" / "rep1") | {"hash_seed": int(p["values"]
                                                                                                      ["hash_seed"])}
         for p in points]
    doc = summarize(z, r) | {"dir": str(spread_dir), "zcube_dir": "zcube", "roft_dir": sweep_dir.name,
                             "experiment": zcube.experiment.model_dump(mode="json")}
    (spread_dir / "spread.json").write_text(json.dumps(doc, indent=1) + "\n")
    return max(worst, status), doc, spread_dir


__all__ = ["run_spread", "summarize", "distribution", "table"]

"""``testbed calibrate``: where does the emulated cluster's network matter as much as the seed's did?

The seed's ablation (512 GPUs; GPUs, software, model and application
unchanged): NICs capped at 200 instead of 100 Gbit/s gave ~19 % more
throughput and ~22 % lower TTFT. It involves no topology change, so it fixes
how much the network matters independently of ZCube. Calibration runs the
experiment on ROFT (the production fabric before the migration, an
assumption) with links standing for 100 and for 200 Gbit/s, at several levels
of one intensity knob, and picks the level whose 200G/100G ratios are closest
to the seed's. ZCube is never run here, so ZCube's figures at that level are a
prediction, not a fit.

The knob is ``serving.concurrency`` (requests in flight, closed loop): it sets
the decode batch, hence the expert-parallel bytes per step against a step's
fixed compute, which is what decides how much a step waits for the network
(a serving benchmark's max-concurrency). TTFT is compared at P99, the
percentile of the seed's headline.

The search: the given levels first, then ``refine`` rounds, each adding the
midpoints between the closest level so far and its nearest measured neighbours
(whole numbers not yet measured), so the chosen level is found to within the
grid's last step rather than the first grid's.

Layout: a calibration directory with one sweep directory (``testbed.experiment.sweep``) per round (one
point per (level, represents)), plus ``calibration.json`` (the ``--json`` document, every round's levels
together) and ``calibrated.yaml`` (the experiment at the chosen level, the figures as comments).
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import yaml

from common.errors import TestbedError
from testbed.experiment import run, rundir, sweep
from testbed.experiment.schema import Override, resolve
from testbed.report import headline

SEED = {"throughput_ratio": 1.19, "ttft_ratio": 0.78}
KNOB = "serving.concurrency"
BANDWIDTHS = ("100gbit", "200gbit")
FABRIC = "roft"


def parse_levels(text: str) -> list[int]:
    """'128,256,384' -> [128, 256, 384]; one line naming the bad value otherwise."""
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        levels = []
    if not levels or any(v < 1 for v in levels) or len(set(levels)) != len(levels):
        raise TestbedError(f"--levels {text!r} is not allowed: expected distinct positive integers, e.g. 128,256,384")
    return sorted(levels)


def _rep_values(point: dict, key: str) -> list[float | None]:
    reps = ((point.get("fabrics") or {}).get(FABRIC) or {}).get("repetitions") or []
    return [r.get(key) for r in reps]


def _pair_ratios(hi: list, lo: list) -> list[float]:
    """Repetition k at 200G over repetition k at 100G (same seed), where both were measured."""
    return [a / b for a, b in zip(hi, lo) if a is not None and b]


def level_row(level: int, lo: dict, hi: dict) -> dict:
    """One level's 200G/100G ratios (median over repetition pairs) and their spread [min, max]."""
    row: dict = {"level": level}
    for name, key in (("throughput_ratio", "throughput_tokens_per_s"), ("ttft_p99_ratio", "ttft_p99_ms"),
                      ("ttft_p50_ratio", "ttft_p50_ms")):
        pairs = _pair_ratios(_rep_values(hi, key), _rep_values(lo, key))
        row[name] = round(statistics.median(pairs), 4) if pairs else None
        row[f"{name}_spread"] = [round(min(pairs), 4), round(max(pairs), 4)] if pairs else None
    for bw, point in (("100g", lo), ("200g", hi)):
        for key in ("throughput_tokens_per_s", "ttft_p99_ms", "ttft_p50_ms"):
            vals = [v for v in _rep_values(point, key) if v is not None]
            row[f"{key}_{bw}"] = round(statistics.fmean(vals), 3) if vals else None
    row["distance"] = distance(row)
    return row


def distance(row: dict) -> float | None:
    """Euclidean distance of (throughput ratio, TTFT P99 ratio) from the seed's (1.19, 0.78)."""
    t, f = row.get("throughput_ratio"), row.get("ttft_p99_ratio")
    if t is None or f is None:
        return None
    return round(math.hypot(t - SEED["throughput_ratio"], f - SEED["ttft_ratio"]), 4)


def within_resolution(row: dict, floor: float = 0.05) -> bool:
    """Both ratios within the seed's, give or take the larger of ``floor`` (the report's resolution)
    and the repetitions' spread."""
    for name, seed in (("throughput_ratio", SEED["throughput_ratio"]), ("ttft_p99_ratio", SEED["ttft_ratio"])):
        v, sp = row.get(name), row.get(f"{name}_spread")
        if v is None:
            return False
        tol = max(floor, (sp[1] - sp[0]) / 2 if sp else 0.0)
        if abs(v - seed) > tol:
            return False
    return True


def summarize(points: list[dict], levels: list[int]) -> dict:
    """The ``--json`` document from the sweep's points (each with values and per-fabric headlines)."""
    by = {(int(p["values"][KNOB]), p["values"]["link.represents"]): p for p in points}
    rows = [level_row(lv, by[(lv, BANDWIDTHS[0])], by[(lv, BANDWIDTHS[1])]) for lv in levels
            if (lv, BANDWIDTHS[0]) in by and (lv, BANDWIDTHS[1]) in by]
    scored = [r for r in rows if r["distance"] is not None]
    chosen = min(scored, key=lambda r: r["distance"]) if scored else None
    return {"fabric": FABRIC, "knob": KNOB, "levels": rows, "chosen": chosen, "seed": dict(SEED),
            "distance": chosen["distance"] if chosen else None,
            "within_resolution": within_resolution(chosen) if chosen else False}


def table(doc: dict) -> list[str]:
    def f(v, digits=3):
        return "-" if v is None else f"{v:.{digits}f}"

    def sp(v):
        return "" if not v else f" ({v[0]:.3f}..{v[1]:.3f})"

    out = [f"calibration on {doc['fabric']}: {doc['knob']} levels, links standing for 100 vs 200 Gbit/s; seed "
           f"throughput x{doc['seed']['throughput_ratio']}, TTFT x{doc['seed']['ttft_ratio']}"]
    rows = [("level", "throughput 200G/100G", "TTFT P99 200G/100G", "TTFT P50 200G/100G", "distance")]
    for r in doc["levels"]:
        rows.append((str(r["level"]), f(r["throughput_ratio"]) + sp(r["throughput_ratio_spread"]),
                     f(r["ttft_p99_ratio"]) + sp(r["ttft_p99_ratio_spread"]),
                     f(r["ttft_p50_ratio"]) + sp(r["ttft_p50_ratio_spread"]), f(r["distance"])))
    out += run.columns(rows)
    c = doc["chosen"]
    if c is None:
        out.append("no level measured both ratios: nothing chosen")
    else:
        verdict = "within" if doc["within_resolution"] else "NOT within"
        out.append(f"chosen: {doc['knob']} = {c['level']} (distance {c['distance']:.3f}; {verdict} the testbed's "
                   "resolution of the seed's ablation)")
    return out


def write_experiment(path: Path, base: dict, doc: dict) -> None:
    """The experiment at the chosen level, the calibration's table as comments above it."""
    exp = json.loads(json.dumps(base))
    exp["serving"]["concurrency"] = doc["chosen"]["level"]
    lines = ["# Written by `testbed calibrate`: the level of serving.concurrency at which ROFT's", "#"
             " 100 -> 200 Gbit/s ablation comes closest to the seed's (+19 % throughput, -22 % TTFT).", "#"]
    lines += [f"# {t}" for t in table(doc)]
    path.write_text("\n".join(lines) + "\n" + yaml.safe_dump(exp, sort_keys=False))


def next_levels(rows: list[dict]) -> list[int]:
    """The refinement's next levels: the midpoints between the closest level so far and its nearest measured
    neighbours below and above (whole numbers not measured yet; none when the grid cannot be split)."""
    scored = [r for r in rows if r["distance"] is not None]
    if not scored:
        return []
    measured = sorted(r["level"] for r in rows)
    best = min(scored, key=lambda r: r["distance"])["level"]
    i = measured.index(best)
    out = []
    for other in (measured[i - 1] if i else None, measured[i + 1] if i + 1 < len(measured) else None):
        if other is not None:
            mid = (best + other) // 2
            if mid not in measured and mid not in out:
                out.append(mid)
    return sorted(out)


def run_calibration(path, overrides: list[Override], levels: list[int], out_root: Path,
                    log: run.Log = run.stderr_log, refine: int = 0) -> tuple[int, dict, Path]:
    """Sweep (level x represents) on ROFT, then ``refine`` rounds around the closest level, then summarize;
    (worst exit status, document, calibration directory)."""
    fixed = [o for o in overrides if o.key not in ("fabrics", KNOB, "link.represents")]
    fixed.append(Override("fabrics", [FABRIC], "calibrate"))
    base = resolve(path, fixed).experiment
    if base.serving.driver != "live" or base.serving.arrivals != "closed":
        raise TestbedError("calibrate needs a closed-loop live experiment (serving.driver live, serving.arrivals "
                           f"closed); this one has driver {base.serving.driver}, arrivals {base.serving.arrivals}")
    if refine < 0:
        raise TestbedError(f"--refine {refine}: expected a number of rounds >= 0")
    cal_dir = rundir.new_run_dir(Path(out_root), f"calibrate-{base.name}")
    log(f"calibration directory {cal_dir}")
    worst, sweeps, todo = 0, [], list(levels)
    for round_ in range(refine + 1):
        log(f"== calibration round {round_ + 1}/{refine + 1}: {KNOB} = {', '.join(map(str, todo))}")
        params = [(KNOB, [str(v) for v in todo]), ("link.represents", list(BANDWIDTHS))]
        status, sweep_dir = sweep.run_sweep(path, fixed, params, cal_dir, log=log, out=lambda line: None,
                                            name=f"round{round_ + 1}")
        worst, sweeps = max(worst, status), sweeps + [sweep_dir]
        done = sorted({int(p["values"][KNOB]) for s in sweeps for p in points_of(s)})
        todo = next_levels(summarize([p for s in sweeps for p in points_of(s)], done)["levels"])
        if not todo:
            break
    return worst, write_calibration(cal_dir, sweeps, base.model_dump(mode="json")), cal_dir


def points_of(sweep_dir: Path) -> list[dict]:
    """The sweep's points with every repetition's headline read again from its run directory."""
    doc = json.loads((sweep_dir / "sweep.json").read_text())
    return [p | {"fabrics": headline.fabric_headlines(sweep_dir / p["dir"])} for p in doc["points"]]


def write_calibration(cal_dir: Path, sweeps: list[Path], experiment: dict) -> dict:
    """calibration.json (and calibrated.yaml when a level was chosen) from a finished calibration's sweeps."""
    points = [p | {"sweep": s.name} for s in sweeps for p in points_of(s)]
    levels = sorted({int(p["values"][KNOB]) for p in points})
    result = summarize(points, levels) | {"dir": str(cal_dir), "sweeps": [s.name for s in sweeps],
                                          "experiment": experiment}
    gpus = experiment.get("gpus")
    if result["chosen"] is not None and gpus:
        # the load a GPU carries, which a smaller cluster of the same workload takes over (testbed.report.serving)
        result |= {"gpus": gpus, "per_gpu": round(result["chosen"]["level"] / gpus, 4)}
    (cal_dir / "calibration.json").write_text(json.dumps(result, indent=1) + "\n")
    if result["chosen"] is not None:
        write_experiment(cal_dir / "calibrated.yaml", experiment, result)
    return result

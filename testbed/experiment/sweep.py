"""``testbed sweep``: one ``run`` per point of a grid over one or two experiment keys.

Every point is resolved and validated before the first repetition starts (a typo
in the last value must not surface an hour in). Layout:

    reports/<YYYYmmdd-HHMMSS>-sweep-<name>/
      sweep.json, sweep.csv       the grid and, per point and fabric, the headline numbers
      load_curve.json, .png       a sweep over one load key: TTFT P99 and KV slowdown P99 per level (load_curve)
      points/<key=value,...>/     a complete run directory each (testbed.experiment.run)

sweep.csv, sweep.json and the load curve are rewritten after every point, so an
interrupted sweep keeps what it measured.
"""

from __future__ import annotations

import csv
import itertools
import json
import re
import time
from pathlib import Path

from common.errors import TestbedError
from testbed.experiment import run, rundir
from testbed.experiment.schema import Override, Resolved, check_key_path, cli_value, resolve

# the one-key sweeps whose points are loads, for which a load curve is drawn (a sweep over a seed, a rate or a
# policy has no load axis)
LOAD_KEYS = ("serving.concurrency", "trace.speed", "trace.first_n", "gpus")
CSV_FIELDS = ("goodput_bps", "goodput_bps_min", "goodput_bps_max", "fct_p99_ms", "ttft_p99_ms", "pfc_pauses",
              "queue_drops", "throughput_tokens_per_s", "kv_slowdown_p99", "ttft_p50_ms")


def parse_param(text: str) -> tuple[str, list[str]]:
    """'link.rate=3mbit,4mbit' -> ('link.rate', ['3mbit', '4mbit']); the key must be a value of the schema."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not key or not values.strip():
        raise TestbedError(f"--param {text!r}: expected KEY=V1,V2,... e.g. link.rate=3mbit,4mbit")
    check_key_path(key, "--param")
    if key in ("fabrics", "name", "repetitions"):
        raise TestbedError(f"--param {key}: cannot be swept (every point runs every fabric, all repetitions, "
                           "into its own folder): set it in the experiment file or with a flag")
    items = [v.strip() for v in values.split(",")]
    if any(not v for v in items):
        raise TestbedError(f"--param {text!r}: an empty value: expected KEY=V1,V2,...")
    dup = next((v for v in items if items.count(v) > 1), None)
    if dup is not None:
        raise TestbedError(f"--param {key}: value {dup!r} is listed twice")
    return key, items


def expand(params: list[tuple[str, list[str]]], paired: bool = False) -> list[list[tuple[str, str]]]:
    """The grid: every combination of the values of one or two parameters, in the order given; ``paired``:
    the i-th value of each parameter together (a load that grows with the cluster: gpus and concurrency; the
    scale curve's three: gpus, concurrency and the workload's size)."""
    if not 1 <= len(params) <= (3 if paired else 2):
        raise TestbedError(f"sweep takes one or two --param, got {len(params)}")
    keys = [k for k, _ in params]
    if len(set(keys)) != len(keys):
        raise TestbedError(f"--param {keys[0]} is given twice: list all its values in one --param")
    if paired:
        lengths = {len(values) for _, values in params}
        if len(params) < 2 or len(lengths) != 1:
            raise TestbedError(f"a paired sweep takes two or three keys with as many values each, got "
                               f"{', '.join(f'{k} ({len(v)})' for k, v in params)}")
        return [list(zip(keys, combo)) for combo in zip(*(values for _, values in params))]
    return [list(zip(keys, combo)) for combo in itertools.product(*(values for _, values in params))]


def point_name(point: list[tuple[str, str]]) -> str:
    """Folder name of a grid point: key=value,key=value (path separators and spaces replaced)."""
    return ",".join(f"{k}={re.sub(r'[^A-Za-z0-9._=+-]+', '_', v)}" for k, v in point)


def resolve_points(path: str | Path | None, overrides: list[Override], params: list[tuple[str, list[str]]],
                   paired: bool = False) -> list[tuple[list[tuple[str, str]], Resolved]]:
    """Every grid point as a validated experiment (the file, then the flags, then the point's values)."""
    out = []
    for point in expand(params, paired):
        extra = [Override(k, cli_value(k, v), "--param") for k, v in point]
        out.append((point, resolve(path, list(overrides) + extra)))
    names = [point_name(p) for p, _ in out]
    if len(set(names)) != len(names):
        raise TestbedError("two grid points map to the same folder name: use plainer values")
    return out


def _rows(point: list[tuple[str, str]], heads: dict) -> list[dict]:
    rows = []
    for kind, h in heads.items():
        g = h.get("goodput_bps") or {}
        row = {"point": point_name(point), **dict(point), "fabric": kind, "runs": h["runs"], "runs_ok": h["ok"],
               "goodput_bps": g.get("mean"), "goodput_bps_min": g.get("min"), "goodput_bps_max": g.get("max")}
        for key in ("fct_p99_ms", "ttft_p99_ms", "pfc_pauses", "queue_drops", "throughput_tokens_per_s",
                    "kv_slowdown_p99", "ttft_p50_ms"):
            row[key] = (h.get(key) or {}).get("mean")
        rows.append(row)
    return rows


def _write(sweep_dir: Path, keys: list[str], doc: dict, rows: list[dict]) -> None:
    (sweep_dir / "sweep.json").write_text(json.dumps(doc, indent=1) + "\n")
    with open(sweep_dir / "sweep.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["point", *keys, "fabric", "runs", "runs_ok", *CSV_FIELDS])
        w.writeheader()
        w.writerows(rows)


def run_sweep(path: str | Path | None, overrides: list[Override], params: list[tuple[str, list[str]]],
              out_root: Path, log: run.Log = run.stderr_log,
              out: run.Log = print, name: str | None = None, slo_ttft_ms: float | None = None,
              paired: bool = False, points: list | None = None,
              progress: run.Progress | None = None) -> tuple[int, Path]:
    """The ``sweep`` verb: validate every point, run them in turn, print a table and the sweep directory last;
    (worst exit status, sweep directory). ``paired``: see ``expand``; ``points``: ``resolve_points``' result
    when the caller has it; ``progress``: told each repetition as it ends (``run.run_into``)."""
    points = points or resolve_points(path, overrides, params, paired)
    base = points[0][1].experiment
    for _, res in points:
        run.requests_served(res.experiment)
    total = sum(run.estimate_s(res.experiment, res.backend) for _, res in points)
    joined = (" with " if paired else " x ").join(f"{k} ({len(v)})" for k, v in params)
    log(f"sweep over {joined}: {len(points)} points, estimated wall time ~{run.minutes(total)}")
    for point, res in points:
        log(f"  {point_name(point)}: {run.estimate_text(res.experiment, res.backend)}")
    for _, res in points:  # every point's backend can run
        res.backend.check(build_own=True)
    sweep_dir = rundir.new_run_dir(Path(out_root), name or f"sweep-{base.name}")
    log(f"sweep directory {sweep_dir}")
    versions = rundir.collect_versions()
    keys = [k for k, _ in params]
    doc = {"source": points[0][1].source, "params": {k: v for k, v in params}, "paired": paired,
           "overrides": [o.as_dict() for o in overrides], "versions": versions,
           "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "points": [{"name": point_name(p), "values": dict(p), "dir": f"points/{point_name(p)}", "status": None,
                       "fabrics": None} for p, _ in points]}
    rows: list[dict] = []
    _write(sweep_dir, keys, doc, rows)
    worst = 0
    for i, (point, res) in enumerate(points):
        log(f"== point {i + 1}/{len(points)}: {point_name(point)}")
        point_dir = sweep_dir / "points" / point_name(point)
        point_dir.mkdir(parents=True)
        status, heads = run.run_into(res, point_dir, res.backend, log, versions,
                                     extra={"sweep": {"dir": str(sweep_dir), "point": dict(point)}},
                                     progress=progress)
        worst = max(worst, status)
        doc["points"][i] |= {"status": status, "fabrics": {k: {key: h[key] for key in h if key != "repetitions"}
                                                            for k, h in heads.items()}}
        rows += _rows(point, heads)
        if slo_ttft_ms is not None:
            doc["slo_goodput"] = {"slo_ttft_p99_ms": slo_ttft_ms, "key": keys[0],
                                  "fabrics": slo_goodput(rows, keys[0], slo_ttft_ms)}
        _write(sweep_dir, keys, doc, rows)
        if len(keys) == 1 and keys[0] in LOAD_KEYS:
            _write_load_curve(sweep_dir, log, last=i == len(points) - 1)
    if "gpus" in keys:
        _write_scale(sweep_dir, log)
    for line in _table(keys, rows):
        out(line)
    for fabric, best in (doc.get("slo_goodput") or {}).get("fabrics", {}).items():
        out(f"SLO goodput ({fabric}, TTFT P99 <= {slo_ttft_ms:g} ms): " + (
            f"{keys[0]} = {best[keys[0]]}, {best['throughput_tokens_per_s']} output tokens/s" if best else "no point"))
    out(str(sweep_dir))
    return worst, sweep_dir


def _write_load_curve(sweep_dir: Path, log: run.Log, last: bool) -> None:
    """load_curve.json and load_curve.png (testbed.experiment.load_curve); a failure costs the curve, never the sweep.
    Quiet until the last point."""
    from testbed.experiment import load_curve

    try:
        load_curve.write(sweep_dir, log=log if last else (lambda message: None))
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        if last:
            log(f"WARNING: no load curve: {type(exc).__name__}: {exc}")


def _write_scale(sweep_dir: Path, log: run.Log) -> None:
    """scale.json, scale.png, scale.html of a sweep over gpus (testbed.report.scale_section); a failure costs the
    page, never the sweep."""
    from testbed.report import scale_section

    try:
        log(f"scale: {scale_section.write(sweep_dir)}")
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        log(f"WARNING: no scale page: {type(exc).__name__}: {exc}")


def slo_goodput(rows: list[dict], key: str, slo_ms: float) -> dict:
    """Per fabric, the highest value of the swept ``key`` whose TTFT P99 (mean over repetitions) stays
    within ``slo_ms``, with its output tokens/s: the SLO goodput of a load sweep (None: no point did)."""
    out: dict = {}
    for fabric in dict.fromkeys(r["fabric"] for r in rows):
        ok = [r for r in rows if r["fabric"] == fabric and r.get("ttft_p99_ms") is not None
              and r["ttft_p99_ms"] <= slo_ms]
        best = max(ok, key=lambda r: float(r[key]), default=None)
        out[fabric] = None if best is None else {key: best[key], "ttft_p99_ms": best["ttft_p99_ms"],
                                                 "throughput_tokens_per_s": best.get("throughput_tokens_per_s")}
    return out


def _table(keys: list[str], rows: list[dict]) -> list[str]:
    def num(v, scale=1.0, digits=2):
        return "-" if v is None else f"{v / scale:.{digits}f}"

    table = [(*keys, "fabric", "goodput Mbit/s", "FCT p99 ms", "TTFT p99 ms", "pauses", "drops")]
    for r in rows:
        table.append((*(str(r[k]) for k in keys), r["fabric"], num(r["goodput_bps"], 1e6, 3),
                      num(r["fct_p99_ms"], digits=1), num(r["ttft_p99_ms"], digits=1),
                      num(r["pfc_pauses"], digits=0), num(r["queue_drops"], digits=0)))
    return run.columns(table)

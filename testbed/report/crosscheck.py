"""Two engines' runs of one experiment side by side, repetition by repetition (``testbed crosscheck``).

Reads two run directories (``testbed run`` on any two backends: the emulator, the ns-3 twin, the flow-level
engine) and compares, for each repetition k both have and each fabric:

* the headline's figures (output tokens/s, TTFT P50/P99) and the ZCube/ROFT ratio of each on each engine;
* per message class (KV transfer, EP dispatch, EP combine) the completion-time distributions: P50, P90, P99
  and their distance (the two-sample Kolmogorov-Smirnov statistic: the largest gap between the two CDFs);
* bytes per link (links.csv), PFC pauses per port (pfc_ports.csv), decode-step time and its parts
  (steps.csv) and TTFT's parts (requests.csv), over the measured window.

Times are cluster milliseconds on both sides: each run's clock is divided by its ``wall_per_run_s``
(summary.json), so a dilated emulator and a simulator on cluster time compare directly.

The goals (issue 38, stated before any run) are ``GOALS``; ``agreement`` says which hold in every repetition,
and ``line`` is the one sentence the headline prints about it.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

import numpy as np

from common.errors import TestbedError

FABRICS = ("zcube", "roft")
CLASSES = ("kv", "dispatch", "combine")  # message classes: KV transfers, the EP exchanges' two phases
TTFT_PARTS = ("decode_memory", "prefill_queue", "prefill_compute", "prefill_exchange", "kv_transfer",
              "decode_wait", "decode_compute", "decode_exchange")
STEP_PARTS = ("compute", "dispatch", "combine")
# the goals: engine B within these of engine A (relative), in every repetition
GOALS = {"ratio_throughput": 0.01, "ttft_p50": 0.05, "fct_p50": 0.10, "fct_p99": 0.20, "link_bytes": 0.05,
         "roft_200g_over_100g": 0.03}
LINK_FLOOR = 0.01  # links carrying less than this share of engine A's busiest link are not compared
CDF_POINTS = tuple(round(i / 40, 3) for i in range(41))  # the quantiles kept per class for the report's CDF plot


def _num(v) -> float | None:
    if v is None or v == "" or isinstance(v, bool):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _rows(path: Path) -> list[dict]:
    try:
        with open(path, newline="") as fh:
            return list(csv.DictReader(fh))
    except OSError:
        return []


def percentiles(values, qs=(50, 90, 99)) -> dict:
    """{"n", "p50", "p90", "p99"} of ``values`` (linear interpolation, as numpy's default); None without values."""
    a = np.asarray([v for v in values if v is not None], dtype=float)
    if a.size == 0:
        return {"n": 0} | {f"p{q}": None for q in qs}
    return {"n": int(a.size)} | {f"p{q}": round(float(np.percentile(a, q)), 4) for q in qs}


def _quantiles(values) -> list[float] | None:
    """The values at ``CDF_POINTS`` (what the report draws the CDF from); None without values."""
    a = np.asarray(values, dtype=float)
    return [round(float(x), 4) for x in np.quantile(a, CDF_POINTS)] if a.size else None


def ks_distance(a, b) -> float | None:
    """The two-sample Kolmogorov-Smirnov statistic: the largest vertical gap between the two empirical CDFs."""
    x, y = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))
    if x.size == 0 or y.size == 0:
        return None
    grid = np.concatenate([x, y])
    fx = np.searchsorted(x, grid, side="right") / x.size
    fy = np.searchsorted(y, grid, side="right") / y.size
    return round(float(np.max(np.abs(fx - fy))), 4)


def _fcts(rep_dir: Path, per_s: float) -> dict[str, list[float]]:
    """Completion times (cluster ms) per class, of every delivered message."""
    out: dict[str, list[float]] = {c: [] for c in CLASSES}
    for name, default in (("transfers.csv", "kv"), ("messages.csv", None)):
        for r in _rows(rep_dir / name):
            kind = r.get("kind") or default
            start, end = _num(r.get("start")), _num(r.get("end"))
            if kind in out and start is not None and end is not None:
                out[kind].append((end - start) / per_s * 1e3)
    return out


def _window_steps(rep_dir: Path, warmup: float, duration: float) -> list[dict]:
    return [r for r in _rows(rep_dir / "steps.csv") if str(r.get("engine", "")).startswith("decode")
            and _num(r.get("end_s")) is not None and warmup <= float(r["start_s"]) < duration]


def rep_figures(rep_dir: Path, warmup_s: float, duration_s: float) -> dict:
    """One repetition's figures as the cross-check compares them (see the module docstring)."""
    rep_dir = Path(rep_dir)
    try:
        s = json.loads((rep_dir / "summary.json").read_text())
    except (OSError, ValueError):
        raise TestbedError(f"{rep_dir}: no summary.json: expected a finished repetition's directory") from None
    per_s = _num(s.get("wall_per_run_s")) or 1.0
    fcts = _fcts(rep_dir, per_s)
    steps = _window_steps(rep_dir, warmup_s, duration_s)
    parts = {p: [] for p in STEP_PARTS}
    totals = []
    for r in steps:
        t0, c, d, e = (float(r[k]) for k in ("start_s", "compute_end_s", "dispatch_end_s", "end_s"))
        totals.append((e - t0) * 1e3)
        parts["compute"].append((c - t0) * 1e3)
        parts["dispatch"].append((d - c) * 1e3)
        parts["combine"].append((e - d) * 1e3)
    measured = [r for r in _rows(rep_dir / "requests.csv")
                if warmup_s <= float(r["arrival_s"]) < duration_s and _num(r.get("ttft_s")) is not None]
    ttft_parts = {p: round(statistics.fmean(float(r[f"{p}_s"]) for r in measured) * 1e3, 3) if measured else None
                  for p in TTFT_PARTS if measured and f"{p}_s" in measured[0]}
    ttft = s.get("ttft_ms") or {}
    return {
        "throughput_tokens_per_s": _num(s.get("throughput_tokens_per_s")),
        "ttft_p50_ms": _num(ttft.get("p50")), "ttft_p99_ms": _num(ttft.get("p99")), "requests": len(measured),
        "ttft_parts_mean_ms": ttft_parts,
        "decode_step_ms": percentiles(totals) | {"parts_mean": {p: round(statistics.fmean(v), 3) if v else None
                                                                for p, v in parts.items()}},
        "fct_ms": {c: percentiles(v) for c, v in fcts.items()},
        "pfc_pauses": _num((s.get("pfc") or {}).get("pauses")) if (s.get("pfc") or {}).get("enabled") else None,
        "queue_drops": _num(s.get("queue_drops")),
        "links": {r["queue"]: float(r["bytes"]) for r in _rows(rep_dir / "links.csv")},
        "pauses_per_port": {r["queue"]: int(float(r["pauses"])) for r in _rows(rep_dir / "pfc_ports.csv")
                            if int(float(r["pauses"] or 0)) > 0},
        "_fcts": fcts,  # the samples themselves, for the distance and the plot (not written)
    }


def _ratio(a, b) -> float | None:
    return round(a / b, 4) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def link_bytes(a: dict[str, float], b: dict[str, float]) -> dict:
    """Per link, B/A bytes over the links carrying at least LINK_FLOOR of A's busiest: the count, the median,
    the worst, the share within the goal and the links outside it (worst first)."""
    top = max(a.values(), default=0.0)
    per = {q: b.get(q, 0.0) / v for q, v in a.items() if top > 0 and v >= LINK_FLOOR * top}
    if not per:
        return {"links": 0, "median": None, "worst": None, "within": None, "outside": {}}
    tol = GOALS["link_bytes"]
    outside = dict(sorted(((q, round(r, 4)) for q, r in per.items() if abs(r - 1) > tol),
                          key=lambda x: -abs(x[1] - 1)))
    return {"links": len(per), "median": round(statistics.median(per.values()), 4),
            "worst": round(max(per.values(), key=lambda r: abs(r - 1)), 4),
            "within": round(1 - len(outside) / len(per), 4), "outside": dict(list(outside.items())[:10])}


def pauses(a: dict[str, int], b: dict[str, int]) -> dict:
    """PFC pauses per port: the totals, the ports paused on either side and on both, and the busiest of each."""
    ports = set(a) | set(b)
    top = sorted(ports, key=lambda q: -(a.get(q, 0) + b.get(q, 0)))[:8]
    return {"a": sum(a.values()), "b": sum(b.values()), "ports_a": len(a), "ports_b": len(b),
            "ports_both": len(set(a) & set(b)), "top": {q: [a.get(q, 0), b.get(q, 0)] for q in top}}


def compare_fabric(fa: dict, fb: dict) -> dict:
    """One fabric in one repetition: engine A's figures, engine B's and their comparison."""
    classes = {}
    for c in CLASSES:
        pa, pb = fa["fct_ms"][c], fb["fct_ms"][c]
        classes[c] = {"a": pa, "b": pb, "p50_b_over_a": _ratio(pb["p50"], pa["p50"]),
                      "p90_b_over_a": _ratio(pb["p90"], pa["p90"]), "p99_b_over_a": _ratio(pb["p99"], pa["p99"]),
                      "ks": ks_distance(fa["_fcts"][c], fb["_fcts"][c]),
                      "quantiles_ms": {"a": _quantiles(fa["_fcts"][c]), "b": _quantiles(fb["_fcts"][c])}}
    keys = ("throughput_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "requests", "pfc_pauses", "queue_drops")
    return {"a": {k: fa[k] for k in keys}, "b": {k: fb[k] for k in keys},
            "b_over_a": {k: _ratio(fb[k], fa[k]) for k in keys},
            "fct": classes,
            "decode_step_ms": {"a": fa["decode_step_ms"], "b": fb["decode_step_ms"]},
            "ttft_parts_mean_ms": {"a": fa["ttft_parts_mean_ms"], "b": fb["ttft_parts_mean_ms"]},
            "link_bytes": link_bytes(fa["links"], fb["links"]),
            "pauses_per_port": pauses(fa["pauses_per_port"], fb["pauses_per_port"])}


def _within(value, tol: float) -> bool | None:
    return None if value is None else abs(value - 1) <= tol


def goals_of(rep: dict) -> dict[str, bool | None]:
    """Each goal in one repetition: True, False, or None (a figure is missing)."""
    out: dict[str, bool | None] = {}
    ra, rb = rep["ratios"]["a"].get("throughput_tokens_per_s"), rep["ratios"]["b"].get("throughput_tokens_per_s")
    out["ratio_throughput"] = _within(_ratio(rb, ra), GOALS["ratio_throughput"])
    for kind, f in rep["fabrics"].items():
        out[f"{kind}_ttft_p50"] = _within(f["b_over_a"]["ttft_p50_ms"], GOALS["ttft_p50"])
        for c, cc in f["fct"].items():
            if cc["a"]["n"] and cc["b"]["n"]:
                out[f"{kind}_{c}_fct_p50"] = _within(cc["p50_b_over_a"], GOALS["fct_p50"])
                out[f"{kind}_{c}_fct_p99"] = _within(cc["p99_b_over_a"], GOALS["fct_p99"])
        lb = f["link_bytes"]
        out[f"{kind}_link_bytes"] = None if lb["within"] is None else lb["within"] == 1.0
    return out


def compare_runs(a_dir: Path, b_dir: Path, self_routing: tuple[str, ...] = ()) -> dict:
    """The cross-check document of two run directories of one experiment (engine A, the reference, and B);
    ``self_routing``: the backends that pick their connections' paths by the one rule (``testbed.backends``)."""
    a_dir, b_dir = Path(a_dir), Path(b_dir)
    exp_a, exp_b = (_experiment(d) for d in (a_dir, b_dir))
    from testbed.report import workload

    differs = workload.differences(exp_a, exp_b)
    warmup = float((exp_a.get("serving") or {}).get("warmup_s") or 0.0)
    duration = float((exp_a.get("trace") or {}).get("duration_s") or 0.0)
    reps = []
    common = [f for f in _fabrics(a_dir) if f in _fabrics(b_dir)]
    k = 1
    while common and all((d / "runs" / f / f"rep{k}" / "summary.json").is_file() for d in (a_dir, b_dir)
                         for f in common):
        figs = {side: {f: rep_figures(d / "runs" / f / f"rep{k}", warmup, duration) for f in common}
                for side, d in (("a", a_dir), ("b", b_dir))}
        fabrics = {f: compare_fabric(figs["a"][f], figs["b"][f]) for f in FABRICS if f in figs["a"] and f in
                   figs["b"]}
        ratios = {side: {key: _ratio(figs[side].get("zcube", {}).get(key), figs[side].get("roft", {}).get(key))
                         for key in ("throughput_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms")}
                  for side in ("a", "b")}
        rep = {"rep": k, "fabrics": fabrics, "ratios": ratios,
               "_fcts": {side: {f: figs[side][f]["_fcts"] for f in figs[side]} for side in ("a", "b")}}
        rep["goals"] = goals_of(rep)
        reps.append(rep)
        k += 1
    if not reps:
        raise TestbedError(f"{a_dir} and {b_dir} have no repetition in common (runs/<fabric>/rep1/summary.json on "
                           "both): expected two finished runs of one experiment")
    doc = {"a": {"run": str(a_dir), "backend": exp_a.get("backend"), "paths_from": exp_a.get("paths_from")},
           "b": {"run": str(b_dir), "backend": exp_b.get("backend"), "paths_from": exp_b.get("paths_from")},
           "same_paths": _same_paths(a_dir, exp_a, b_dir, exp_b, self_routing),
           "workload_differences": differs, "goals": dict(GOALS), "repetitions": reps}
    doc["agreement"] = agreement(doc)
    return doc


def _roft_means(run_dir: Path) -> dict:
    """ROFT's output tokens/s and TTFT P99, each the mean over the run's repetitions."""
    sums = [json.loads(p.read_text()) for p in sorted((Path(run_dir) / "runs" / "roft").glob("rep*/summary.json"))]
    if not sums:
        raise TestbedError(f"{run_dir}: no runs/roft/rep*/summary.json: expected a run of ROFT")
    tp = [_num(s.get("throughput_tokens_per_s")) for s in sums]
    p99 = [_num((s.get("ttft_ms") or {}).get("p99")) for s in sums]
    return {"throughput": statistics.fmean(v for v in tp if v is not None) if any(v is not None for v in tp) else None,
            "ttft_p99": statistics.fmean(v for v in p99 if v is not None) if any(v is not None for v in p99) else None}


def bandwidth_ablation(a200: Path, b200: Path, a100: Path, b100: Path) -> dict:
    """The calibration's quantity on both engines: ROFT at 200 Gbit/s over ROFT at 100 (output tokens/s and TTFT
    P99, means over repetitions), and whether B's are within the goal of A's (absolute)."""
    out = {}
    for side, hi, lo in (("a", a200, a100), ("b", b200, b100)):
        h, low = _roft_means(hi), _roft_means(lo)
        out[side] = {k: _ratio(h[k], low[k]) for k in ("throughput", "ttft_p99")}
    tol = GOALS["roft_200g_over_100g"]
    out["within"] = {k: None if out["a"][k] is None or out["b"][k] is None else abs(out["b"][k] - out["a"][k]) <= tol
                     for k in ("throughput", "ttft_p99")}
    return out


def _fabrics(run_dir: Path) -> list[str]:
    return [f for f in FABRICS if (run_dir / "runs" / f).is_dir()]


def _experiment(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "experiment.json").read_text())["experiment"]
    except (OSError, ValueError, KeyError, TypeError):
        raise TestbedError(f"{run_dir}: no experiment.json: expected a run directory of `testbed run`") from None


def _same_paths(a_dir: Path, exp_a: dict, b_dir: Path, exp_b: dict, routed: tuple[str, ...]) -> str:
    """How the two runs' connections were routed: 'recorded' (B followed A's recorded paths, or A's), 'rule' (both
    routed themselves by the one rule with the same seeds), or 'own' (each its own: the emulator's OVS hash
    against a simulator's)."""
    if exp_b.get("paths_from") and Path(exp_b["paths_from"]).resolve() == a_dir.resolve():
        return "recorded"
    if exp_a.get("paths_from") and Path(exp_a["paths_from"]).resolve() == b_dir.resolve():
        return "recorded"
    if exp_a.get("backend") in routed and exp_b.get("backend") in routed and exp_a.get("paths_from") == \
            exp_b.get("paths_from") and (exp_a.get("seed"), exp_a.get("hash_seed")) == (exp_b.get("seed"),
                                                                                      exp_b.get("hash_seed")):
        return "rule"
    return "own"


def agreement(doc: dict) -> dict:
    """Per goal, in how many repetitions it held: {"goals": {goal: [held, of]}, "all": bool, "missed": [goal]}."""
    tally: dict[str, list[int]] = {}
    for rep in doc["repetitions"]:
        for g, ok in rep["goals"].items():
            if ok is None:
                continue
            t = tally.setdefault(g, [0, 0])
            t[0] += bool(ok)
            t[1] += 1
    for k, ok in ((doc.get("roft_200g_over_100g") or {}).get("within") or {}).items():
        if ok is not None:
            tally[f"roft_200g_over_100g_{k}"] = [int(ok), 1]
    missed = [g for g, (held, of) in tally.items() if held < of]
    return {"goals": tally, "all": bool(tally) and not missed, "missed": missed}


def line(doc: dict) -> str:
    """The one sentence after the headline: whether the two engines agree within the goals."""
    a, b = doc["a"]["backend"], doc["b"]["backend"]
    n = len(doc["repetitions"])
    paths = {"recorded": "on the same recorded paths", "rule": "on the same paths (one rule)",
             "own": "each on its own ECMP paths"}[doc["same_paths"]]
    ag = doc["agreement"]
    ratios = ", ".join(f"{_fmt(r['ratios']['a'].get('throughput_tokens_per_s'))} vs "
                       f"{_fmt(r['ratios']['b'].get('throughput_tokens_per_s'))}" for r in doc["repetitions"])
    where = f"; the shipped check {doc['shipped']} of runs {Path(doc['a']['run']).name} and " \
            f"{Path(doc['b']['run']).name}" if doc.get("shipped") else ""
    head = (f"cross-check: {a} and {b} ({n} repetition pair{'s' if n != 1 else ''}, {paths}{where}; ZCube/ROFT "
            f"output tokens/s {ratios})")
    if ag["all"]:
        return f"{head} agree within every goal of the cross-check"
    return f"{head} do not agree on: {', '.join(ag['missed'])}"


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def strip(doc: dict) -> dict:
    """The document without the samples (what crosscheck.json holds)."""
    return doc | {"repetitions": [{k: v for k, v in r.items() if not k.startswith("_")} for r in doc["repetitions"]]}

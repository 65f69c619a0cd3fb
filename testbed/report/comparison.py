"""``testbed compare RUN_DIR RUN_DIR...``: several runs' headlines side by side, and whether they agree.

Each run's headline is computed again from its saved files (``testbed.report.build.summary_of``, fresh: a
summary.json may be stale or missing), so comparing never needs the reports built first. Per run: the
ZCube/ROFT ratios of output tokens/s and TTFT P99 (the seed's two claims, ``headline.VERDICT_KEYS``) with their
95 % intervals over the repetitions and verdicts, the repetitions and the requests measured, fidelity and the
commit (versions.json's ``git``); and, across the runs, every key path where their experiments
(experiment.json's ``experiment``) differ, each marked as defining the workload or not (``testbed.report.workload``).

They **agree** on a figure when no two verdicts contradict (one run's ZCube better, another's worse) and every
run's interval covers every other run's ratio. A run without an interval (one repetition) cannot say whether
it covers the others, so then the answer is unknown (None) unless something already contradicts. Overall they
agree when they agree on every figure.
"""

from __future__ import annotations

import json
from pathlib import Path

from common.errors import TestbedError
from common.paths import shown
from testbed.report import headline, workload
from testbed.report.build import summarize
from testbed.report.fmt import num, ratio_text
from testbed.report.load import load_experiment

FIGURE_KEYS = headline.VERDICT_KEYS
LABELS = {"throughput_tokens_per_s": "output tokens/s", "ttft_ms.p99": "TTFT P99"}


def _label(i: int) -> str:
    """A, B, ..., Z, then R27, R28, ..."""
    return chr(ord("A") + i) if i < 26 else f"R{i + 1}"


def run_entry(run_dir: Path, label: str) -> tuple[dict, dict]:
    """(the run's entry, its experiment mapping) from its saved files; a folder that is not a run directory is a
    TestbedError naming it (``testbed.report.load``)."""
    exp = load_experiment(run_dir)
    doc = summarize(exp)
    h = doc["headline"]
    req = h.get("requests_measured")
    figures = {}
    for key in FIGURE_KEYS:
        fig = h["figures"][key]
        figures[key] = {"ratio": fig["ratio"], "ci95": fig["ci95"], "verdict": fig["verdict"],
                        "per_rep": [p["ratio"] for p in fig["per_rep"]]}
    entry = {"label": label, "dir": str(run_dir), "run_id": exp.run_id, "commit": (exp.versions or {}).get("git"),
             "reps": h["reps"], "pairs": len(h["pairs"]),
             "requests_measured": {f: sum(v) for f, v in req.items()} if req else None,
             "fidelity_ok": h["fidelity_ok"], "fidelity_problems": h["fidelity_problems"], "figures": figures}
    return entry, (exp.config or {}).get("experiment")


MISSING = "(absent)"


def differences(experiments: list[dict | None]) -> list[dict]:
    """[{"key": "link.rate", "values": [value of each run], "workload": True}] for every key path where the
    runs' experiments differ (MISSING where a run's experiment has no such key), values compared as
    ``testbed.report.workload`` compares them; ``workload``: whether the key defines a workload
    (``workload.NOT_WORKLOAD_KEYS``: the seed, the backend, ... do not). Runs without an experiment.json are left
    out."""
    flats = [workload.flat(e) for e in experiments if e]
    if len(flats) < 2:
        return []
    keys = sorted(set().union(*flats))
    out = []
    for k in keys:
        if any(not workload.same_value(f.get(k), flats[0].get(k)) for f in flats[1:]):
            out.append({"key": k, "values": [f.get(k, MISSING) for f in flats],
                        "workload": workload.is_workload_key(k)})
    return out


def agreement(runs: list[dict], key: str) -> dict:
    """Whether the runs agree on one figure: {"agree": True / False / None (cannot tell), "contradicting":
    [[label, label]], "not_covered": [{"run", "ci95", "other", "ratio"}], "without_interval": [label],
    "not_measured": [label], "why"}."""
    figs = [(r["label"], r["figures"][key]) for r in runs]
    better = [lb for lb, f in figs if f["verdict"] == headline.BETTER]
    worse = [lb for lb, f in figs if f["verdict"] == headline.WORSE]
    contradicting = [[a, b] for a in better for b in worse]
    not_measured = [lb for lb, f in figs if f["ratio"] is None]
    without = [lb for lb, f in figs if f["ratio"] is not None and not f["ci95"]]
    not_covered = []
    for lb, f in figs:
        if not f["ci95"]:
            continue
        lo, hi = f["ci95"]
        for other, g in figs:
            if other != lb and g["ratio"] is not None and not lo <= g["ratio"] <= hi:
                not_covered.append({"run": lb, "ci95": f["ci95"], "other": other, "ratio": g["ratio"]})
    name = LABELS.get(key, key)
    if contradicting or not_covered:
        bits = [f"{a} says ZCube better, {b} worse" for a, b in contradicting]
        bits += [f"{c['run']}'s interval [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}] does not cover {c['other']}'s "
                 f"ratio {c['ratio']:.3f}" for c in not_covered]
        return {"agree": False, "contradicting": contradicting, "not_covered": not_covered,
                "without_interval": without, "not_measured": not_measured,
                "why": f"{name}: DISAGREE: " + "; ".join(bits)}
    if not_measured or without:
        bits = ([f"not measured in {', '.join(not_measured)}"] if not_measured else []) + (
            [f"no interval over repetitions in {', '.join(without)} (one repetition)"] if without else [])
        return {"agree": None, "contradicting": [], "not_covered": [], "without_interval": without,
                "not_measured": not_measured,
                "why": f"{name}: cannot tell: " + "; ".join(bits) + " (no contradicting verdicts)"}
    return {"agree": True, "contradicting": [], "not_covered": [], "without_interval": [], "not_measured": [],
            "why": f"{name}: agree (no contradicting verdicts; every run's interval covers the others' ratios)"}


def compare_runs(run_dirs: list[Path | str]) -> dict:
    """The comparison document (``testbed compare --json``): {"runs": [entry], "differences": [...],
    "same_workload": whether no key that defines a workload differs (None: fewer than two experiment.json),
    "figures": {key: agreement}, "agree": True / False / None}. Fewer than two distinct run directories, or a
    folder that is not one, is a TestbedError naming it."""
    paths = [Path(p) for p in run_dirs]
    seen: dict[Path, Path] = {}
    for p in paths:
        key = p.resolve()
        if key in seen:
            raise TestbedError(f"{p}: given twice (as {seen[key]}): compare needs two or more different run "
                               "directories")
        seen[key] = p
    if len(paths) < 2:
        raise TestbedError(f"{paths[0] if paths else 'compare'}: only one run directory given: compare needs two "
                           "or more (reports/<run-id>/ with runs/<fabric>/rep<k>/)")
    runs, experiments = [], []
    for i, p in enumerate(paths):
        entry, experiment = run_entry(p, _label(i))
        runs.append(entry)
        experiments.append(experiment)
    figures = {k: agreement(runs, k) for k in FIGURE_KEYS}
    verdicts = [f["agree"] for f in figures.values()]
    overall = False if False in verdicts else (None if None in verdicts else True)
    diff = differences(experiments)
    compared = sum(1 for e in experiments if e) > 1
    return {"runs": runs, "differences": diff,
            "same_workload": (not any(d["workload"] for d in diff)) if compared else None,
            "experiment_missing": [r["label"] for r, e in zip(runs, experiments) if not e],
            "figures": figures, "agree": overall}


def _cell(f: dict) -> str:
    ci = f"[{f['ci95'][0]:.3f}, {f['ci95'][1]:.3f}]" if f["ci95"] else "[no interval]"
    return f"{ratio_text(f['ratio'])} {ci}"


def lines(doc: dict) -> list[str]:
    """The terminal's comparison: one row a run, where their experiments differ, whether they agree."""
    head = ["run", "commit", "reps Z/R", "requests Z/R", "fidelity"]
    for key in FIGURE_KEYS:
        head += [f"{LABELS.get(key, key)} Z/R [95%]", "verdict"]
    rows = [head]
    for r in doc["runs"]:
        req = r["requests_measured"]
        row = [r["label"], str(r["commit"] or "-"),
               "/".join(str(r["reps"].get(f, "-")) for f in ("zcube", "roft")),
               "/".join(num(req.get(f)) for f in ("zcube", "roft")) if req else "-",
               "ok" if r["fidelity_ok"] else f"NOT ok ({r['fidelity_problems']})"]
        for key in FIGURE_KEYS:
            f = r["figures"][key]
            row += [_cell(f), headline.verdict_text(f["verdict"])]
        rows.append(row)
    out = headline.columns(rows)
    out += [f"{r['label']}: {shown(r['dir'])}" for r in doc["runs"]]
    labels = [r["label"] for r in doc["runs"] if r["label"] not in doc["experiment_missing"]]
    if doc["differences"]:
        out.append("where their experiments differ (" + " vs ".join(labels) + "):")
        out += [f"  {d['key']}: " + " vs ".join(_value(v) for v in d["values"]) for d in doc["differences"]
                if d["workload"]]
        out += [f"  {d['key']}: " + " vs ".join(_value(v) for v in d["values"]) + " (not the workload)"
                for d in doc["differences"] if not d["workload"]]
        if doc.get("same_workload"):
            out.append("their workloads are the same (only keys that do not define one differ)")
    elif len(labels) > 1:
        out.append("their experiments are the same (" + ", ".join(labels) + ")")
    if doc["experiment_missing"]:
        out.append(f"no experiment.json in {', '.join(doc['experiment_missing'])}: its experiment is not compared")
    out += [f["why"] for f in doc["figures"].values()]
    verdict = {True: "the runs agree", False: "the runs DISAGREE",
               None: "cannot tell whether the runs agree"}[doc["agree"]]
    out.append(verdict)
    return out


def _value(v) -> str:
    return v if isinstance(v, str) else json.dumps(v)


__all__ = ["compare_runs", "lines", "agreement", "differences", "run_entry", "FIGURE_KEYS"]

"""The cross-check (issue 25): the same experiment on the emulator and on the ns-3 twin, side by side.

Per fabric: per-link bytes (twin / emulator, from links.csv), output tokens/s, TTFT P50/P99, KV FCT P50/P99
(the transfers' FCT), EP exchange P99 and pauses; and the ZCube/ROFT ratio of each figure on each backend.
The goals, stated before any run (the issue's): every link's bytes within 5 %, throughput within 10 %, and
the two backends' ZCube/ROFT ratios of throughput and of TTFT P99 within 10 % of each other.

Which links count for "every link": those that carried at least ``LINK_FLOOR`` of the busiest link's bytes on
the emulator (an idle link's ratio is noise over nothing).

A link's bytes are the payload routed over it times what the wire adds per payload byte (TCP/IP/Ethernet
headers, the agents' frame headers and acks, TCP's ACKs). When the two backends serve a different amount of
work (the twin's throughput differs), the bytes differ with it; ``link_overhead`` separates the counting from
the work: per link, (wire bytes / payload bytes routed over it, from link_traffic.csv) twin over emulator.

A run given as ``--against`` must be the same workload as the twin's (``workload_differences``, the one
definition in ``testbed.report.workload``): crosscheck.json's ``workload_differences`` lists the keys where it
is not, and the table says so.
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
from pathlib import Path

from common.errors import TestbedError
from testbed.report import headline, workload

FIGURES = ("throughput_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "kv_fct_p50_ms", "kv_fct_p99_ms",
           "ep_exchange_p99_ms", "pfc_pauses")
GOALS = {"link_bytes": 0.05, "throughput": 0.10, "ratio_throughput": 0.10, "ratio_ttft_p99": 0.10}
LINK_FLOOR = 0.01
FABRICS = ("zcube", "roft")


def _p(block, key: str):
    return (block or {}).get(key) if isinstance(block, dict) else None


def figures(rep_dir: Path) -> dict:
    """One repetition's figures (``FIGURES``) and its per-link bytes, from its summary.json and links.csv."""
    rep_dir = Path(rep_dir)
    try:
        s = json.loads((rep_dir / "summary.json").read_text())
    except (OSError, ValueError):
        raise TestbedError(f"{rep_dir}: no summary.json: expected a finished repetition's directory") from None
    out = {"throughput_tokens_per_s": s.get("throughput_tokens_per_s"),
           "ttft_p50_ms": _p(s.get("ttft_ms"), "p50"), "ttft_p99_ms": _p(s.get("ttft_ms"), "p99"),
           "kv_fct_p50_ms": _p(s.get("fct_ms"), "p50"), "kv_fct_p99_ms": _p(s.get("fct_ms"), "p99"),
           "ep_exchange_p99_ms": _p(s.get("ep_exchange_ms"), "p99"),
           "pfc_pauses": headline.pfc_pauses(s) if headline.pfc_enabled(s) else None}
    links = {}
    try:
        with open(rep_dir / "links.csv", newline="") as fh:
            for row in csv.DictReader(fh):
                links[row["queue"]] = float(row["bytes"])
    except OSError:
        pass
    overhead = {}  # wire bytes per payload byte routed over the link
    try:
        with open(rep_dir / "link_traffic.csv", newline="") as fh:
            for row in csv.DictReader(fh):
                payload = float(row.get("kv_bytes") or 0) + float(row.get("ep_bytes") or 0)
                if payload > 0 and row.get("measured_bytes") not in (None, ""):
                    overhead[row["queue"]] = float(row["measured_bytes"]) / payload
    except OSError:
        pass
    return out | {"links": links, "overhead": overhead}


def _ratio(a, b):
    if a is None or b is None or not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or b == 0:
        return None
    return round(a / b, 4)


def link_overhead(twin: dict[str, float], emulator: dict[str, float], counted) -> dict:
    """Per counted link, twin/emulator of the wire bytes per payload byte: {"links", "median", "within_5pct"}."""
    per = [twin[q] / emulator[q] for q in counted if q in twin and emulator.get(q)]
    if not per:
        return {"links": 0, "median": None, "within_5pct": None}
    return {"links": len(per), "median": round(statistics.median(per), 4),
            "within_5pct": round(sum(1 for r in per if abs(r - 1) <= GOALS["link_bytes"]) / len(per), 4)}


def link_ratios(twin: dict[str, float], emulator: dict[str, float]) -> dict:
    """Per link twin/emulator bytes over the links that carried at least LINK_FLOOR of the busiest one on
    the emulator: {"links", "median", "worst", "within_5pct" (share of links), "per_link"}."""
    top = max(emulator.values(), default=0.0)
    counted = {q: b for q, b in emulator.items() if top > 0 and b >= LINK_FLOOR * top}
    per = {q: round(twin.get(q, 0.0) / b, 4) for q, b in sorted(counted.items())}
    if not per:
        return {"links": 0, "median": None, "worst": None, "within_5pct": None, "per_link": {}}
    worst = max(per.values(), key=lambda r: abs(r - 1))
    return {"links": len(per), "median": round(statistics.median(per.values()), 4), "worst": worst,
            "within_5pct": round(sum(1 for r in per.values() if abs(r - 1) <= GOALS["link_bytes"]) / len(per), 4),
            "per_link": per}


def compare(emulator: dict[str, dict] | None, twin: dict[str, dict]) -> dict:
    """The cross-check document from each side's ``figures`` per fabric (``emulator`` None: the twin only)."""
    fabrics = {}
    for kind in FABRICS:
        if kind not in twin:
            continue
        t = twin[kind]
        e = (emulator or {}).get(kind)
        entry = {"twin": {k: t.get(k) for k in FIGURES}}
        if e is not None:
            entry["emulator"] = {k: e.get(k) for k in FIGURES}
            entry["twin_over_emulator"] = {k: _ratio(t.get(k), e.get(k)) for k in FIGURES}
            entry["link_bytes"] = lb = link_ratios(t.get("links", {}), e.get("links", {}))
            entry["link_overhead"] = link_overhead(t.get("overhead", {}), e.get("overhead", {}), lb["per_link"])
        fabrics[kind] = entry
    ratios = {}
    for side, data in (("emulator", emulator), ("twin", twin)):
        if data and all(k in data for k in FABRICS):
            ratios[side] = {k: _ratio(data["zcube"].get(k), data["roft"].get(k)) for k in FIGURES}
    return {"goals": dict(GOALS), "fabrics": fabrics, "ratios": ratios, "within_goals": within_goals(fabrics, ratios)}


def _close(a, b, tol: float):
    if a is None or b is None:
        return None
    return abs(a / b - 1) <= tol if b else None


def within_goals(fabrics: dict, ratios: dict) -> dict:
    """Each goal: True, False, or None (not measurable: the emulator side or a figure is missing)."""
    out: dict = {}
    for kind, entry in fabrics.items():
        lb = entry.get("link_bytes")
        out[f"{kind}_link_bytes"] = None if not lb or lb["within_5pct"] is None else lb["within_5pct"] == 1.0
        r = (entry.get("twin_over_emulator") or {}).get("throughput_tokens_per_s")
        out[f"{kind}_throughput"] = None if r is None else abs(r - 1) <= GOALS["throughput"]
    e, t = ratios.get("emulator", {}), ratios.get("twin", {})
    out["ratio_throughput"] = _close(t.get("throughput_tokens_per_s"), e.get("throughput_tokens_per_s"),
                                     GOALS["ratio_throughput"])
    out["ratio_ttft_p99"] = _close(t.get("ttft_p99_ms"), e.get("ttft_p99_ms"), GOALS["ratio_ttft_p99"])
    known = [v for v in out.values() if v is not None]
    out["all"] = all(known) if len(known) == len(out) else None
    return out


def side(run_dir: Path, rep: int = 1) -> dict[str, dict]:
    """Per fabric, the figures of repetition ``rep`` of a run directory (``<run>/runs/<fabric>/rep<k>``)."""
    run_dir = Path(run_dir)
    out = {}
    for kind in FABRICS:
        d = run_dir / "runs" / kind / f"rep{rep}"
        if (d / "summary.json").is_file():
            out[kind] = figures(d)
    if not out:
        raise TestbedError(f"{run_dir}: no runs/<fabric>/rep{rep}/summary.json: expected a run directory of "
                           "'testbed run'")
    return out


def workload_differences(emulator_dir: Path, twin_dir: Path) -> list[str] | None:
    """The key paths in which the two runs' workloads differ (``testbed.report.workload``: the backend and the
    other keys that do not define a workload aside): [] when ``--against`` is a run of the same experiment;
    None when either has no experiment.json to tell."""
    try:
        a, b = (json.loads((Path(d) / "experiment.json").read_text())["experiment"] for d in (emulator_dir, twin_dir))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return workload.differences(a, b)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not math.isfinite(v):
        return "-"
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def table(doc: dict) -> list[str]:
    """The terminal table: per fabric and figure, emulator, twin, twin/emulator; then the ZCube/ROFT ratios."""
    from testbed.experiment.run import columns

    rows = [("fabric", "figure", "emulator", "twin", "twin/emulator")]
    for kind, entry in doc["fabrics"].items():
        for k in FIGURES:
            rows.append((kind, k, _fmt((entry.get("emulator") or {}).get(k)), _fmt(entry["twin"].get(k)),
                         _fmt((entry.get("twin_over_emulator") or {}).get(k))))
        lb = entry.get("link_bytes")
        if lb:
            rows.append((kind, f"link bytes ({lb['links']} links)", "", "", f"median {_fmt(lb['median'])}, worst "
                         f"{_fmt(lb['worst'])}, {_fmt(lb['within_5pct'])} within 5%"))
        lo = entry.get("link_overhead")
        if lo and lo["links"]:
            rows.append((kind, f"wire/payload bytes ({lo['links']} links)", "", "", f"median {_fmt(lo['median'])}, "
                         f"{_fmt(lo['within_5pct'])} within 5%"))
    rows.append(("zcube/roft", "figure", "emulator", "twin", ""))
    for k in FIGURES:
        rows.append(("zcube/roft", k, _fmt(doc["ratios"].get("emulator", {}).get(k)),
                     _fmt(doc["ratios"].get("twin", {}).get(k)), ""))
    lines = columns(rows)
    lines.append("within goals: " + ", ".join(f"{k}={_fmt(v)}" for k, v in doc["within_goals"].items()))
    if doc.get("workload_differences"):
        lines.append("NOT the same workload: the emulator's run differs from the twin's in "
                     + ", ".join(doc["workload_differences"]))
    return lines


def run_crosscheck(experiment: str | None, overrides: list, out_root: Path, against: Path | None, log) -> tuple[
        dict, Path]:
    """Run the twin (and the emulator when ``against`` is None and this is root) and compare; the document and
    the twin's run directory (crosscheck.json is written there)."""
    from testbed.experiment import run
    from testbed.experiment.schema import Override, resolve

    emulator_dir = Path(against) if against is not None else None
    emulator = side(emulator_dir) if emulator_dir is not None else None  # a bad --against fails before the twin

    def on(backend: str):
        return [o for o in overrides if o.key != "backend"] + [Override("backend", backend, "crosscheck")]

    twin_dir = _run(resolve(experiment, on("ns3")), out_root, log, run)
    if emulator_dir is None and os.geteuid() == 0:
        emulator_dir = _run(resolve(experiment, on("emulated")), out_root, log, run)
        emulator = side(emulator_dir)
    elif emulator_dir is None:
        log("crosscheck: not root, so the emulator side is not run (give --against EMULATOR_RUN_DIR)")
    doc = compare(emulator, side(twin_dir))
    doc["runs"] = {"twin": str(twin_dir), "emulator": str(emulator_dir) if emulator_dir else None}
    doc["workload_differences"] = workload_differences(emulator_dir, twin_dir) if emulator_dir else None
    if doc["workload_differences"]:
        log("crosscheck: the emulator's run is not the same workload as the twin's: it differs in "
            + ", ".join(doc["workload_differences"]))
    (twin_dir / "crosscheck.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc, twin_dir


def _run(resolved, out_root: Path, log, run) -> Path:
    seen: list[str] = []
    run.run_experiment(resolved, out_root, log=log, out=seen.append)
    return Path(seen[-1])

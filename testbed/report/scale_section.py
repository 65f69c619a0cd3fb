"""The scale study: ZCube/ROFT ratios against the number of GPUs, from a sweep over ``gpus`` (``testbed sweep``,
``testbed scale``).

``doc(sweep_dir)`` reads a sweep directory (``testbed.experiment.sweep``: sweep.json and each point's
``runs/<fabric>/rep<k>/summary.json`` and ``links.csv``, its ``plan/cost.json`` and ``headline.json``) and gives,
per n, each fabric's output tokens/s, TTFT P99, pauses and busiest-link utilization (means over repetitions) and
the ZCube/ROFT ratio of each; the ratios of output tokens/s, TTFT P50 and TTFT P99 with their 95 % intervals over
the repetitions (``intervals``: the headline's, ``testbed.report.confidence.between_runs`` over the ratios of
repetitions of the same seed); both fabrics' switches, optics and capex (``cost``: the cost model at that size,
``fabrics.cost``); the wall seconds its repetitions took; and the hottest links of each fabric at the largest n.
``write`` puts scale.json, scale.png and scale.html (the section on a page of its own) into the sweep directory;
``section`` is the HTML for a report.
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from common.paths import shown  # noqa: E402
from testbed.report import html as H  # noqa: E402
from testbed.report.confidence import METHOD, between_runs  # noqa: E402
from testbed.report.headline import pfc_pauses, verdict  # noqa: E402
from testbed.report.plots import colour, name, save, style  # noqa: E402

KEY = "gpus"
FABRICS = ("zcube", "roft")
FIGURES = (("throughput_tokens_per_s", "output tokens/s"), ("ttft_p99_ms", "TTFT P99"), ("pfc_pauses", "pauses"),
           ("busiest_link", "busiest link utilization"))
HOT = 5  # hottest links listed per fabric at the largest n
# the ratios given with their interval over the repetitions: key -> (summary.json path, label, higher is better)
INTERVALS = {"throughput_tokens_per_s": (("throughput_tokens_per_s",), "output tokens/s", True),
             "ttft_p50_ms": (("ttft_ms", "p50"), "TTFT P50", False),
             "ttft_p99_ms": (("ttft_ms", "p99"), "TTFT P99", False)}
COST = (("switches", "switches"), ("transceivers", "optics (transceivers)"))  # drawn against n


def _mean(values: list) -> float | None:
    vals = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return statistics.fmean(vals) if vals else None


def _reps(point_dir: Path, fabric: str) -> list[Path]:
    return sorted(p for p in (point_dir / "runs" / fabric).glob("rep*") if (p / "summary.json").is_file())


def _links(rep: Path) -> list[tuple[str, str, float, int]]:
    """links.csv rows as (queue, towards, utilization, bytes), busiest first."""
    try:
        with open(rep / "links.csv", newline="") as fh:
            rows = [(r["queue"], r["towards"], float(r["utilization"]), int(float(r["bytes"])))
                    for r in csv.DictReader(fh)]
    except OSError:
        return []
    return sorted(rows, key=lambda r: (-r[2], r[0]))


def fabric_figures(point_dir: Path, fabric: str) -> dict | None:
    """One fabric's figures at one point (means over its repetitions); None when it has none."""
    reps = _reps(point_dir, fabric)
    if not reps:
        return None
    sums = [json.loads((r / "summary.json").read_text()) for r in reps]
    busiest = [(_links(r) or [(None, None, None, 0)])[0][2] for r in reps]
    return {"throughput_tokens_per_s": _mean([s.get("throughput_tokens_per_s") for s in sums]),
            "ttft_p99_ms": _mean([(s.get("ttft_ms") or {}).get("p99") for s in sums]),
            "pfc_pauses": _mean([pfc_pauses(s) for s in sums]),
            "busiest_link": _mean(busiest), "repetitions": len(reps)}


def _ratio(a, b) -> float | None:
    return round(a / b, 4) if a is not None and b else None


def _at(doc: dict, path: tuple[str, ...]):
    for key in path:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc if isinstance(doc, (int, float)) and not isinstance(doc, bool) else None


def intervals(point_dir: Path) -> dict:
    """key -> {"ratio", "ci95", "pairs", "verdict"}: ZCube rep k / ROFT rep k over the repetitions both fabrics
    have, their geometric mean and 95 % interval (the headline's method)."""
    reps = {f: {p.name: json.loads((p / "summary.json").read_text()) for p in _reps(point_dir, f)} for f in FABRICS}
    pairs = sorted(set(reps["zcube"]) & set(reps["roft"]))
    out = {}
    for key, (path, _, higher) in INTERVALS.items():
        ratios = [_ratio(_at(reps["zcube"][k], path), _at(reps["roft"][k], path)) for k in pairs]
        b = between_runs([r for r in ratios if r is not None])
        out[key] = {"ratio": b["ratio"], "ci95": b["ci95"], "pairs": b["pairs"],
                    "verdict": verdict(b["ci95"], higher, pairs=b["pairs"])}
    return out


def cost(point_dir: Path) -> dict | None:
    """plan/cost.json of a point (``testbed.experiment.rundir.write_plan``): each fabric's counts and the
    ZCube/ROFT ratios; None when the point has none."""
    try:
        d = json.loads((point_dir / "plan" / "cost.json").read_text())
    except (OSError, ValueError):
        return None
    fabrics = d.get("fabrics") or {}
    return {"zcube": fabrics.get("zcube"), "roft": fabrics.get("roft"), "ratios": d.get("ratios_zcube_over_roft")}


def wall_s(point_dir: Path) -> float | None:
    """The wall seconds the point's repetitions took (headline.json's ``elapsed_s``, else the sum of its
    outcomes': the same when they ran one after the other), None when unknown."""
    try:
        doc = json.loads((point_dir / "headline.json").read_text())
    except (OSError, ValueError):
        return None
    if isinstance(doc.get("elapsed_s"), (int, float)):
        return doc["elapsed_s"]
    took = [o.get("wall_s") for o in doc.get("outcomes") or [] if isinstance(o.get("wall_s"), (int, float))]
    return round(sum(took), 1) if took else None


def doc(sweep_dir: Path | str) -> dict:
    """The scale document of a sweep over ``gpus`` (other keys may vary with it, e.g. a paired load)."""
    sweep_dir = Path(sweep_dir)
    try:
        sweep = json.loads((sweep_dir / "sweep.json").read_text())
    except (OSError, ValueError):
        raise ValueError(f"{sweep_dir}: no sweep.json: expected a directory written by `testbed sweep`") from None
    if KEY not in sweep.get("params", {}):
        raise ValueError(f"{sweep_dir}: the sweep does not vary {KEY}: no scale study")
    rows = []
    for p in sweep["points"]:
        point_dir = sweep_dir / p["dir"]
        figs = {f: fabric_figures(point_dir, f) for f in FABRICS}
        if not all(figs.values()):
            continue
        row = {"n": int(p["values"][KEY]), "values": p["values"], "dir": p["dir"], "fabrics": figs,
               "ratios": {k: _ratio(figs["zcube"][k], figs["roft"][k]) for k, _ in FIGURES},
               "intervals": intervals(point_dir), "cost": cost(point_dir), "wall_s": wall_s(point_dir)}
        rows.append(row)
    rows.sort(key=lambda r: r["n"])
    hottest = {}
    if rows:
        last = sweep_dir / rows[-1]["dir"]
        for f in FABRICS:
            links = _links(_reps(last, f)[0])[:HOT]
            hottest[f] = [{"queue": q, "towards": t, "utilization": u, "bytes": b} for q, t, u, b in links]
    return {"dir": str(sweep_dir), "params": sweep.get("params"), "paired": sweep.get("paired", False),
            "method": METHOD, "points": rows, "hottest_at": rows[-1]["n"] if rows else None, "hottest": hottest}


def figure(d: dict, path: Path) -> Path | None:
    """Left: the ZCube/ROFT ratios against n (log2 axis), output tokens/s and TTFT P99 with their 95 % intervals
    as bars; right: each fabric's switches and optics at each n (log axes). None with no point."""
    if not d["points"]:
        return None
    ns = [r["n"] for r in d["points"]]
    with style():
        fig, (ax, cx) = plt.subplots(1, 2, figsize=(12, 4.4), gridspec_kw={"width_ratios": [3, 2]})
        for (key, label), marker in zip(FIGURES, "osD^"):
            pts = []  # (n, ratio, its interval): the interval's centre, the pairs' geometric mean, where there is one
            for n, r in zip(ns, d["points"]):
                iv = (r.get("intervals") or {}).get(key) or {}
                y = iv.get("ratio") or r["ratios"][key]
                if y is not None:
                    pts.append((n, y, iv.get("ci95")))
            if not pts:
                continue
            xs, ys = [x for x, _, _ in pts], [y for _, y, _ in pts]
            err = [[y - ci[0] if ci else 0 for _, y, ci in pts], [ci[1] - y if ci else 0 for _, y, ci in pts]]
            ax.errorbar(xs, ys, yerr=err if any(ci for _, _, ci in pts) else None, marker=marker, capsize=3,
                        label=label + (" [95 %]" if key in INTERVALS else ""))
        ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel("GPUs (n)")
        ax.set_ylabel("ZCube / ROFT")
        ax.legend(fontsize=8)
        costs = [(n, r["cost"]) for n, r in zip(ns, d["points"]) if r.get("cost")]
        for f in FABRICS:
            for (key, label), ls in zip(COST, ("-", "--")):
                pts = [(n, c[f][key]) for n, c in costs if c.get(f) and c[f].get(key)]
                if pts:
                    cx.plot([x for x, _ in pts], [y for _, y in pts], ls=ls, marker="o", color=colour(f),
                            label=f"{name(f)} {label}")
        cx.set_xscale("log", base=2)
        cx.set_yscale("log")
        cx.set_xticks(ns, [str(n) for n in ns])
        cx.set_xlabel("GPUs (n)")
        cx.set_ylabel("count")
        cx.set_title("cost at each size (fabrics.cost)", fontsize=9)
        if costs:
            cx.legend(fontsize=7)
        return save(fig, path)


def _f(v, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _interval(r: dict | None) -> str:
    if not r or r.get("ratio") is None:
        return "-"
    ci = r.get("ci95")
    return f"{r['ratio']:.3f} " + (f"[{ci[0]:.3f}, {ci[1]:.3f}] {r['verdict']}" if ci else "(one pair: no interval)")


def section(d: dict, fig: Path | None) -> str:
    """The Scale section: the figure, a table per n (ratios with their intervals, pauses, busiest link, cost,
    wall time), the hottest links at the largest n."""
    others = [k for k in (d.get("params") or {}) if k != KEY]
    head = ["n", *others, "tokens/s Z/R [95 %]", "TTFT P99 Z/R [95 %]", "TTFT P50 Z/R [95 %]", "pauses Z / R",
            "busiest link Z / R", "wall s"]
    rows = []
    for r in d["points"]:
        z, ro = r["fabrics"]["zcube"], r["fabrics"]["roft"]
        iv = r.get("intervals") or {}
        rows.append([str(r["n"]), *(str(r["values"].get(k, "-")) for k in others),
                     _interval(iv.get("throughput_tokens_per_s")) if iv else _f(r["ratios"]["throughput_tokens_per_s"]),
                     _interval(iv.get("ttft_p99_ms")) if iv else _f(r["ratios"]["ttft_p99_ms"]),
                     _interval(iv.get("ttft_p50_ms")),
                     f"{_f(z['pfc_pauses'], 0)} / {_f(ro['pfc_pauses'], 0)}",
                     f"{_f(100 * z['busiest_link'], 1)} % / {_f(100 * ro['busiest_link'], 1)} %"
                     if z["busiest_link"] is not None and ro["busiest_link"] is not None else "-",
                     _f(r.get("wall_s"), 0)])
    cost_rows = []
    for r in d["points"]:
        c = r.get("cost") or {}
        if not (c.get("zcube") and c.get("roft")):
            continue
        ratios = c.get("ratios") or {}
        cost_rows.append([str(r["n"]), *(f"{c['zcube'][k]:,} / {c['roft'][k]:,} ({_f(ratios.get(k), 2)})"
                                          for k in ("switches", "transceivers", "fabric_transceivers")),
                          f"{c['zcube']['capex_units']:,.0f} / {c['roft']['capex_units']:,.0f} "
                          f"({_f(ratios.get('capex_units'), 2)})"])
    hot = []
    for f, links in d["hottest"].items():
        for i, link in enumerate(links):
            hot.append([H.fab(f) if i == 0 else "", H.escape(f"{link['queue']} -> {link['towards']}"),
                        f"{100 * link['utilization']:.1f} %", str(link["bytes"])])
    return "".join([
        H.img(fig, "ZCube/ROFT ratios against the number of GPUs (1.0: the same; a ratio of pauses or of the "
              "busiest link's load below 1 favours ZCube, of tokens/s above 1), bars the 95 % interval over the "
              "repetitions; right: each fabric's switches and optics", "scale ratios"),
        H.table(head, rows, left=1),
        f'<p class="note">Intervals: {H.escape(d.get("method") or METHOD)}.</p>',
        "<h3>Cost at each size: ZCube / ROFT (ratio)</h3>" if cost_rows else "",
        H.table(["n", "switches", "optics (transceivers)", "switch-switch optics", "capex (units)"], cost_rows,
                left=1) if cost_rows else "",
        f"<h3>Hottest links at n = {d['hottest_at']}</h3>" if hot else "",
        H.table(["fabric", "link", "utilization", "bytes"], hot, left=2) if hot else "",
        f'<p class="note">From {H.escape(shown(d["dir"]))}{" (a paired sweep)" if d["paired"] else ""}.</p>'])


def write(sweep_dir: Path | str) -> Path:
    """scale.json, scale.png and scale.html in the sweep directory; the page's path."""
    sweep_dir = Path(sweep_dir)
    d = doc(sweep_dir)
    (sweep_dir / "scale.json").write_text(json.dumps(d, indent=1) + "\n")
    body = section(d, figure(d, sweep_dir / "scale.png"))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>Scale</title><style>{H.CSS}</style></head>"
            f"<body><main><h2>Scale</h2>{body}</main></body></html>")
    (sweep_dir / "scale.html").write_text(page)
    return sweep_dir / "scale.html"

"""The scale study: ZCube/ROFT ratios against the number of GPUs, from a sweep over ``gpus``.

``doc(sweep_dir)`` reads a sweep directory (``testbed.experiment.sweep``: sweep.json and each point's
``runs/<fabric>/rep<k>/summary.json`` and ``links.csv``) and gives, per n, each fabric's output tokens/s,
TTFT P99, pauses and busiest-link utilization (means over repetitions) and the ZCube/ROFT ratio of each,
plus the hottest links of each fabric at the largest n. ``write`` puts scale.json, scale.png and scale.html
(the section on a page of its own) into the sweep directory; ``section`` is the HTML for a report.
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
from testbed.report.headline import pfc_pauses  # noqa: E402
from testbed.report.plots import save, style  # noqa: E402

KEY = "gpus"
FABRICS = ("zcube", "roft")
FIGURES = (("throughput_tokens_per_s", "output tokens/s"), ("ttft_p99_ms", "TTFT P99"), ("pfc_pauses", "pauses"),
           ("busiest_link", "busiest link utilization"))
HOT = 5  # hottest links listed per fabric at the largest n


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
               "ratios": {k: _ratio(figs["zcube"][k], figs["roft"][k]) for k, _ in FIGURES}}
        rows.append(row)
    rows.sort(key=lambda r: r["n"])
    hottest = {}
    if rows:
        last = sweep_dir / rows[-1]["dir"]
        for f in FABRICS:
            links = _links(_reps(last, f)[0])[:HOT]
            hottest[f] = [{"queue": q, "towards": t, "utilization": u, "bytes": b} for q, t, u, b in links]
    return {"dir": str(sweep_dir), "params": sweep.get("params"), "paired": sweep.get("paired", False),
            "points": rows, "hottest_at": rows[-1]["n"] if rows else None, "hottest": hottest}


def figure(d: dict, path: Path) -> Path | None:
    """The four ZCube/ROFT ratios against n (log2 axis); None with no point."""
    if not d["points"]:
        return None
    ns = [r["n"] for r in d["points"]]
    with style():
        fig, ax = plt.subplots(figsize=(7.5, 4.2))
        for (key, label), marker in zip(FIGURES, "osD^"):
            pts = [(n, r["ratios"][key]) for n, r in zip(ns, d["points"]) if r["ratios"][key] is not None]
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker=marker, label=label)
        ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel("GPUs (n)")
        ax.set_ylabel("ZCube / ROFT")
        ax.legend(fontsize=8)
        return save(fig, path)


def _f(v, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def section(d: dict, fig: Path | None) -> str:
    """The Scale section: the figure, a table per n, the hottest links at the largest n."""
    head = ["n", *[k for k in (d.get("params") or {}) if k != KEY], "tokens/s Z/R", "TTFT P99 Z/R", "pauses Z / R",
            "busiest link Z / R"]
    rows = []
    for r in d["points"]:
        z, ro = r["fabrics"]["zcube"], r["fabrics"]["roft"]
        others = [str(v) for k, v in r["values"].items() if k != KEY]
        rows.append([str(r["n"]), *others, _f(r["ratios"]["throughput_tokens_per_s"]),
                     _f(r["ratios"]["ttft_p99_ms"]), f"{_f(z['pfc_pauses'], 0)} / {_f(ro['pfc_pauses'], 0)}",
                     f"{_f(100 * z['busiest_link'], 1)} % / {_f(100 * ro['busiest_link'], 1)} %"
                     if z["busiest_link"] is not None and ro["busiest_link"] is not None else "-"])
    hot = []
    for f, links in d["hottest"].items():
        for i, link in enumerate(links):
            hot.append([H.fab(f) if i == 0 else "", H.escape(f"{link['queue']} -> {link['towards']}"),
                        f"{100 * link['utilization']:.1f} %", str(link["bytes"])])
    return "".join([
        H.img(fig, "ZCube/ROFT ratios against the number of GPUs (1.0: the same; a ratio of pauses or of the "
              "busiest link's load below 1 favours ZCube, of tokens/s above 1)", "scale ratios"),
        H.table(head, rows, left=1),
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

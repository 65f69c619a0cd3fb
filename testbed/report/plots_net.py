"""Network figures: per-switch-port utilization heatmaps, queue backlog, PFC pauses.

These answer "where": which switch port ran hot, which queue built up, which
port paused its neighbours and for how long. Heatmaps of both fabrics share
one colour scale, so the same colour means the same load in both pictures.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import PercentFormatter

from testbed.report.load import ExperimentRun
from testbed.report.plots import colour, name, plt, save

# a heatmap writes each cell's percentage only up to this many cells (n = 128: ROFT 24 switches x 32 ports); at
# n = 512 (48 x 64) the numbers were 3,072 texts, most of a report's drawing time, too small to read
MAX_LABELLED_CELLS = 1024
QUEUE_RE = re.compile(r"^(?P<node>[A-Za-z]+\d+):(?P<port>p?\d+)$")


def natural(s: str) -> tuple:
    """sw2 < sw10, leaf* < spine* (so tiers stay together)."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s))


def links_median(exp: ExperimentRun, fabric: str) -> pd.DataFrame | None:
    """queue, towards, bytes, utilization: the median over repetitions, busiest first."""
    frames = [r.links for r in exp.reps[fabric] if r.links is not None and not r.links.empty]
    if not frames:
        return None
    df = pd.concat(frames).groupby(["queue", "towards"], as_index=False)[["bytes", "utilization"]].median()
    return df.sort_values("utilization", ascending=False, kind="stable").reset_index(drop=True)


def _switch_matrix(links: pd.DataFrame) -> tuple[list[str], list[int], np.ndarray, dict]:
    cells = {}
    for q, towards, u in zip(links["queue"], links["towards"], links["utilization"]):
        m = QUEUE_RE.match(str(q))
        if not m or m["port"].startswith("p"):
            continue  # a GPU NIC queue, not a switch port
        cells[(m["node"], int(m["port"]))] = (float(u), str(towards))
    switches = sorted({s for s, _ in cells}, key=natural)
    ports = list(range(1, max((p for _, p in cells), default=0) + 1))
    mat = np.full((len(switches), len(ports)), np.nan)
    for (s, p), (u, _) in cells.items():
        mat[switches.index(s), p - 1] = u
    return switches, ports, mat, cells


def util_heatmaps(exp: ExperimentRun, figures: Path) -> dict[str, Path]:
    """figures/util_heatmap_<fabric>.png: rows = switches, columns = OpenFlow ports, one shared scale."""
    data = {}
    for f in exp.fabrics:
        links = links_median(exp, f)
        if links is not None:
            sw, ports, mat, cells = _switch_matrix(links)
            if sw:
                data[f] = (sw, ports, mat, cells)
    if not data:
        return {}
    vmax = max(np.nanmax(d[2]) if np.isfinite(d[2]).any() else 0 for d in data.values()) or 1e-9
    cmap = plt.get_cmap("YlOrRd").with_extremes(bad="#e8e8e8")
    out = {}
    for f, (sw, ports, mat, cells) in data.items():
        fig, ax = plt.subplots(figsize=(1.2 + 0.55 * len(ports), 1.3 + 0.36 * len(sw)))
        im = ax.imshow(mat, cmap=cmap, vmin=0, vmax=vmax, aspect="auto")
        ax.grid(False)
        for (i, j), u in np.ndenumerate(mat if mat.size <= MAX_LABELLED_CELLS else np.empty((0, 0))):
            if np.isfinite(u):
                ax.text(j, i, f"{u * 100:.2g}" if u > 0 else "0", ha="center", va="center", fontsize=6.5,
                        color="white" if u > 0.6 * vmax else "#333")
        hot = sorted(((u, s, p) for (s, p), (u, _) in cells.items() if u > 0), reverse=True)[:3]
        for u, s, p in hot:
            ax.add_patch(plt.Rectangle((p - 1.5, sw.index(s) - 0.5), 1, 1, fill=False, ec="black", lw=1.8))
        ax.set_xticks(range(len(ports)), [str(p) for p in ports], fontsize=7)
        ax.set_yticks(range(len(sw)), sw, fontsize=8)
        ax.set_xlabel("OpenFlow port (GPU ports first, then switch-to-switch)")
        busiest = "; ".join(f"{s}:{p}->{cells[(s, p)][1]} {u:.1%}" for u, s, p in hot) or "no traffic"
        ax.set_title(f"{name(f)}: egress utilization per switch port, % of link rate (boxed: busiest)\n{busiest}",
                     loc="left", fontsize=9)
        cb = fig.colorbar(im, ax=ax, fraction=0.035, pad=0.02)
        cb.set_label("utilization (scale shared by both fabrics)", fontsize=7)
        cb.ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.1%}"))
        out[f] = save(fig, figures / f"util_heatmap_{f}.png")
    return out


def queue_backlog(exp: ExperimentRun, out: Path, top: int = 5) -> Path | None:
    """Backlog over time of each fabric's ``top`` deepest queues (repetition 1, ~1 Hz samples)."""
    fabrics = [f for f in exp.fabrics if exp.reps[f][0].queues is not None and not exp.reps[f][0].queues.empty]
    if not fabrics:
        return None
    fig, axes = plt.subplots(1, len(fabrics), figsize=(11, 3.4), squeeze=False, sharey=True)
    for i, (f, ax) in enumerate(zip(fabrics, axes[0])):
        q = exp.reps[f][0].queues
        t0 = q["time"].min()
        peak = q.groupby("queue")["backlog_bytes"].max().sort_values(ascending=False, kind="stable")
        links = links_median(exp, f)
        if peak.iloc[0] <= 0 and links is not None:  # nothing ever queued: show the busiest links instead
            chosen = [x for x in links["queue"] if x in peak.index][:top]
        else:
            chosen = list(peak.index[:top])
        shades = np.linspace(1.0, 0.35, len(chosen))
        for qid, a in zip(chosen, shades):
            d = q[q["queue"] == qid].sort_values("time")
            towards = d["towards"].iloc[0]
            ax.plot(d["time"] - t0, d["backlog_bytes"] / 1e3, marker=".", ms=3, lw=1.2, alpha=float(a),
                    color=colour(f, i), label=f"{qid}->{towards} (max {d['backlog_bytes'].max() / 1e3:.1f} KB)")
        if peak.iloc[0] <= 0:
            ax.annotate("no queue held a backlog in any sample", (0.5, 0.6), xycoords="axes fraction",
                        ha="center", fontsize=9, color="#555")
        n_samples = q["time"].nunique()
        ax.set_title(f"{name(f)} rep1: deepest queues ({n_samples} samples)", loc="left")
        ax.set_xlabel("time since first sample (s)")
        ax.legend(fontsize=7, loc="upper right")
    axes[0][0].set_ylabel("backlog (KB)")
    axes[0][0].set_ylim(bottom=0, top=max(axes[0][0].get_ylim()[1], 1.0))
    return save(fig, out)


def _intervals(ev: pd.DataFrame, end_s: float) -> dict[str, list[tuple[float, float]]]:
    """port -> [(pause, resume)] pairing each pause with the next resume of the port."""
    out: dict[str, list[tuple[float, float]]] = {}
    for port, d in ev.sort_values("time_s", kind="stable").groupby("port_id"):
        start = None
        for t, e in zip(d["time_s"], d["event"]):
            if e == 1 and start is None:
                start = t
            elif e == 0 and start is not None:
                out.setdefault(port, []).append((start, t))
                start = None
        if start is not None:
            out.setdefault(port, []).append((start, end_s))
    return out


def pfc_clock(rep) -> tuple[float, str]:
    """Origin and axis label for pfc.txt times. The PFC helper stamps events with the monotonic clock,
    as QueueSampler stamps queues.csv: when the events fall inside the queue samples' span, both
    plots share the origin "first queue sample"; otherwise the times are shown as written."""
    ev, q = rep.pfc_events, rep.queues
    if ev is not None and not ev.empty and q is not None and not q.empty:
        t0, t1 = float(q["time"].min()), float(q["time"].max())
        if t0 - 60 <= float(ev["time_s"].min()) and float(ev["time_s"].max()) <= t1 + 60:
            return t0, "time since first queue sample (s)"
    return 0.0, "time (s, as in pfc.txt)"


def pfc_raster(exp: ExperimentRun, out: Path, top: int = 30) -> Path | None:
    """y = port, x = time: a tick at every pause, a bar while the port is paused (repetition 1)."""
    fabrics = [f for f in exp.fabrics if exp.reps[f][0].pfc_events is not None]
    if not fabrics:
        return None
    heights = [min(top, max(1, exp.reps[f][0].pfc_events["port_id"].nunique())) for f in fabrics]
    fig, axes = plt.subplots(len(fabrics), 1, figsize=(11, 1.2 + 0.22 * sum(heights) + 0.6 * len(fabrics)),
                             squeeze=False, sharex=True, layout="constrained", gridspec_kw={"height_ratios": heights})
    labels = set()
    for i, (f, ax) in enumerate(zip(fabrics, axes[:, 0])):
        origin, label = pfc_clock(exp.reps[f][0])
        labels.add(label)
        ev = exp.reps[f][0].pfc_events.assign(time_s=lambda d: d["time_s"] - origin)
        pauses = ev[ev["event"] == 1]
        if pauses.empty:
            ax.annotate("PFC on, no pause frame", (0.5, 0.5), xycoords="axes fraction", ha="center")
            ax.set_yticks([])
            ax.set_title(f"{name(f)} rep1", loc="left")
            continue
        order = pauses["port_id"].value_counts().index[:top].tolist()
        order.sort(key=natural)
        end_s = float(ev["time_s"].max())
        spans = _intervals(ev, end_s)
        for y, port in enumerate(order):
            for a, b in spans.get(port, []):
                ax.hlines(y, a, max(b, a + 1e-3), color=colour(f, i), lw=5, alpha=0.45)
            ts = pauses.loc[pauses["port_id"] == port, "time_s"]
            ax.plot(ts, [y] * len(ts), "|", color=colour(f, i), ms=9, mew=1.2)
        ax.set_yticks(range(len(order)), order, fontsize=7)
        ax.set_ylim(len(order) - 0.5, -0.5)
        more = pauses["port_id"].nunique() - len(order)
        ax.set_title(f"{name(f)} rep1: {len(pauses)} pauses on {pauses['port_id'].nunique()} ports"
                     + (f" (busiest {len(order)} shown)" if more > 0 else "")
                     + "; tick = pause frame, bar = paused", loc="left")
    axes[-1][0].set_xlabel(" / ".join(sorted(labels)))
    return save(fig, out)


def _port_fractions(rep) -> pd.DataFrame | None:
    """label, paused_fraction per port: pfc_ports.csv, else derived from pfc.txt's pause intervals."""
    if rep.pfc_ports is not None and not rep.pfc_ports.empty:
        d = rep.pfc_ports
        queue = d["queue"] if "queue" in d else [None] * len(d)
        labels = [q if isinstance(q, str) and q else f"{n}:{p}" for q, n, p in zip(queue, d["node"], d["port"])]
        return pd.DataFrame({"label": labels, "paused_fraction": d["paused_fraction"].astype(float)})
    ev = rep.pfc_events
    if ev is None or ev.empty:
        return None
    t = rep.transfers
    span = float(t["end"].max() - t["scheduled_start"].min()) if t is not None and t["end"].notna().any() else 0.0
    span = span or float(ev["time_s"].max() - ev["time_s"].min()) or 1.0
    spans = _intervals(ev, float(ev["time_s"].max()))
    return pd.DataFrame({"label": list(spans), "paused_fraction": [sum(b - a for a, b in v) / span
                                                                    for v in spans.values()]})


def paused_fraction(exp: ExperimentRun, out: Path, top: int = 15) -> Path | None:
    """Horizontal bars: fraction of the run each port spent paused (repetition 1)."""
    data = {f: _port_fractions(exp.reps[f][0]) for f in exp.fabrics}
    data = {f: d for f, d in data.items() if d is not None and not d.empty}
    if not data:
        return None
    rows = max(min(top, len(d)) for d in data.values())
    fig, axes = plt.subplots(1, len(data), figsize=(11, 1.0 + 0.28 * rows), squeeze=False, sharex=True)
    xmax = max(float(d["paused_fraction"].max()) for d in data.values())
    for i, ((f, d), ax) in enumerate(zip(data.items(), axes[0])):
        d = d.sort_values("paused_fraction", ascending=False, kind="stable").head(top)
        bars = ax.barh(range(len(d)), d["paused_fraction"], color=colour(f, i), height=0.6)
        ax.bar_label(bars, [f"{v:.1%}" for v in d["paused_fraction"]], padding=3, fontsize=7)
        ax.set_yticks(range(len(d)), d["label"], fontsize=7)
        ax.set_ylim(max(len(d), 3) - 0.5, -0.5)
        ax.set_xlim(0, max(xmax * 1.25, 0.01))
        ax.xaxis.set_major_formatter(PercentFormatter(xmax=1))
        ax.set_title(f"{name(f)} rep1: share of the run paused (top {len(d)} ports)", loc="left")
        ax.set_xlabel("paused fraction")
    return save(fig, out)

"""Traffic figures: FCT CDF, slowdown by size, goodput over time, per-NIC load, prefill queue.

One colour per fabric across every figure (Okabe-Ito blue for ZCube,
vermillion for ROFT, both readable by colour-blind people) and both fabrics on
the same axes, so a reader compares shapes without reading legends twice. The
prefill-queue figure is the exception: its lines are serving instances, drawn
once (the queue comes from the traffic schedule, the same on every fabric).
Every function returns the PNG path it wrote, or None when there is nothing to
draw, and closes its figure (a report draws a dozen).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import LogLocator, NullFormatter  # noqa: E402

from testbed.report import stats  # noqa: E402
from testbed.report.load import ExperimentRun  # noqa: E402
from traffic.model import metrics  # noqa: E402

COLOURS = {"zcube": "#0072B2", "roft": "#D55E00"}
EXTRA = ("#009E73", "#CC79A7", "#E69F00", "#56B4E9")
NAMES = {"zcube": "ZCube", "roft": "ROFT", "railonly": "rail-only"}
DPI = 100

# applied with style() around the report's plotting only, never process-wide
STYLE = {"font.size": 9, "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
         "grid.alpha": 0.3, "axes.titlesize": 10, "figure.dpi": DPI, "figure.constrained_layout.use": True}


def style():
    """Context manager: the report's matplotlib settings."""
    return plt.rc_context(STYLE)


def colour(fabric: str, i: int = 0) -> str:
    return COLOURS.get(fabric, EXTRA[i % len(EXTRA)])


def name(fabric: str) -> str:
    return NAMES.get(fabric, fabric)


def save(fig, path: Path) -> Path:
    """Constrained layout (set above) fits labels in one drawing pass; bbox_inches="tight" would take two."""
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _fct_ms(exp: ExperimentRun, fabric: str) -> np.ndarray:
    vals = []
    for r in exp.reps[fabric]:
        t = r.transfers
        if t is not None:
            ok = t[t["verified"] & t["start"].notna() & t["end"].notna()]
            vals.append(((ok["end"] - ok["start"]) * 1e3).to_numpy())
    return np.sort(np.concatenate(vals)) if vals else np.array([])


def fct_cdf(exp: ExperimentRun, out: Path) -> Path | None:
    """CDF (log x) and its tail (1 - CDF, log-log) of every verified transfer, all repetitions pooled."""
    data = {f: _fct_ms(exp, f) for f in exp.fabrics}
    if not any(len(v) for v in data.values()):
        return None
    fig, (ax, tail) = plt.subplots(1, 2, figsize=(11, 3.8))
    for i, (f, v) in enumerate(data.items()):
        if not len(v):
            continue
        y = np.arange(1, len(v) + 1) / len(v)
        ax.step(v, y, where="post", color=colour(f, i), lw=1.6, label=f"{name(f)} (n={len(v)})")
        tail.step(v, 1 - y + 1 / len(v), where="post", color=colour(f, i), lw=1.6, label=name(f))
        for p, mk in ((50, "o"), (99, "s")):
            x = metrics.percentile(v, p)
            ax.plot([x], [p / 100], mk, color=colour(f, i), ms=5)
    ax.set_xscale("log")
    ax.set_xlabel("KV-transfer FCT (ms, log)")
    ax.set_ylabel("fraction of transfers")
    ax.set_title("FCT CDF (dots P50, squares P99)")
    ax.legend(loc="lower right")
    tail.set_xscale("log")
    tail.set_yscale("log")
    tail.set_xlabel("KV-transfer FCT (ms, log)")
    tail.set_ylabel("fraction slower (1 - CDF, log)")
    tail.set_title("The tail: how many transfers take longer than x")
    for q in (0.01, 0.001):
        tail.axhline(q, color="#888", lw=0.7, ls=":")
        tail.annotate(f"P{100 - q * 100:g}", (1, q), xycoords=("axes fraction", "data"), ha="right",
                      va="bottom", fontsize=7, color="#666")
    return save(fig, out)


def slowdown_bins(exp: ExperimentRun, out: Path) -> Path | None:
    """P50 and P99 slowdown per equal-count size bin (median over repetitions)."""
    fig, ax = plt.subplots(figsize=(11, 3.8))
    labels: list[str] = []
    drawn = False
    for i, f in enumerate(exp.fabrics):
        bins = [r.slowdown_bins for r in exp.reps[f] if r.slowdown_bins]
        if not bins:
            continue
        n = min(len(b) for b in bins)
        x = np.arange(n)
        for key, ls in (("p50", "-"), ("p99", "--")):
            y = [np.median([b[k][key] for b in bins]) for k in range(n)]
            ax.plot(x, y, ls, marker="o", ms=4, color=colour(f, i), label=f"{name(f)} {key.upper()}")
        if len(labels) < n:
            labels = [f"{_size(b['min_bytes'])}-{_size(b['max_bytes'])}" for b in bins[0][:n]]
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.axhline(1, color="#444", lw=0.8, ls=":")
    ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("transfer size bin (emulated bytes, equal-count bins)")
    ax.set_ylabel("FCT slowdown (measured / ideal, log)")
    ax.set_title("Slowdown by transfer size (1 = as fast as an idle link)")
    ax.legend(ncol=2, fontsize=8)
    return save(fig, out)


def _size(b: float) -> str:
    for unit, div in (("MB", 1e6), ("KB", 1e3)):
        if b >= div:
            return f"{b / div:.3g}{unit}"
    return f"{b:.0f}B"


def goodput_time(exp: ExperimentRun, out: Path) -> Path | None:
    """Goodput per second (repetition 1 bold, others faint); right axis in real-equivalent Gbit/s."""
    fig, ax = plt.subplots(figsize=(11, 3.4))
    scale = None
    drawn = False
    for i, f in enumerate(exp.fabrics):
        for r in exp.reps[f]:
            if r.goodput is None or r.goodput.empty:
                continue
            first = r is exp.reps[f][0]
            ax.plot(r.goodput["second"], r.goodput["goodput_bps"] / 1e6, color=colour(f, i),
                    lw=(2.6 if i == 0 else 1.3) if first else 0.8, alpha=1 if first else 0.35,
                    label=name(f) if first else None, drawstyle="steps-post")
            scale = scale or r.summary.get("bytes_scale")
            drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("time since replay start (s)")
    ax.set_ylabel("goodput (emulated Mbit/s)")
    ax.set_title("Goodput over time (bytes of transfers that finished in each second; ZCube drawn wider, "
                 "so it shows where they coincide)")
    if scale:
        sec = ax.secondary_yaxis("right", functions=(lambda m, s=scale: m * s / 1e3, lambda g, s=scale: g * 1e3 / s))
        sec.set_ylabel("real-equivalent Gbit/s")
    ax.legend()
    return save(fig, out)


# servers drawn one by one in the per-NIC load figure (a bar per port, the server's mean and its max/mean): the
# seed's 64 servers of 8 GPUs; beyond, 2,048 servers' marks take minutes to draw and cannot be read
NIC_LOAD_SERVERS = 64


def nic_load(exp: ExperimentRun, out: Path) -> Path | None:
    """Bytes per NIC port, grouped by 8-GPU server: uneven bars inside a group = imbalance."""
    fabrics = [f for f in exp.fabrics if stats.nic_loads(exp.reps[f][0])]
    if not fabrics:
        return None
    fig, axes = plt.subplots(len(fabrics), 1, figsize=(11, 2.6 * len(fabrics)), squeeze=False, sharey=True)
    for i, (f, ax) in enumerate(zip(fabrics, axes[:, 0])):
        rep = exp.reps[f][0]
        loads = stats.nic_loads(rep)
        k = stats.gpus_per_server(rep)
        imb = stats.nic_imbalance(rep) or {}
        x, xs, heights, cols, centres = 0.0, [], [], [], {}
        server = None
        for (g, p), b in sorted(loads.items()):
            s = (g - 1) // k + 1
            if s != server:
                x += 1.2 if server is not None else 0
                server = s
                centres[s] = []
            xs.append(x)
            heights.append(b / 1e3)
            cols.append(colour(f, i) if p == 1 else _lighter(colour(f, i)))
            centres[s].append(x)
            x += 1
        if len(centres) > NIC_LOAD_SERVERS:  # thousands of servers: the ports as two lines, no per-server marks
            for port, shade in ((1, colour(f, i)), (2, _lighter(colour(f, i)))):
                pts = [(xx, h) for xx, h, (_, p) in zip(xs, heights, sorted(loads)) if p == port]
                ax.plot([xx for xx, _ in pts], [h for _, h in pts], color=shade, lw=0.4)
        else:
            ax.bar(xs, heights, width=0.85, color=cols)
        for s, pos in centres.items() if len(centres) <= NIC_LOAD_SERVERS else ():
            vals = [h for xx, h in zip(xs, heights) if xx in pos]
            mean = sum(vals) / len(vals)
            ax.hlines(mean, pos[0] - 0.4, pos[-1] + 0.4, color="#222", lw=0.8, ls="--")
            ratio = imb.get("per_server", {}).get(s)
            ax.annotate(f"server {s}" + (f"\nmax/mean {ratio:.2f}" if ratio else "\nidle"), ((pos[0] + pos[-1]) / 2, 1),
                        xycoords=("data", "axes fraction"), ha="center", va="top", fontsize=8)
        ax.set_xticks([])
        ax.set_ylabel("sent + received (KB)")
        worst = f"worst server {imb['worst_server']}: max/mean {imb['max']:.2f}" if imb else "no traffic"
        marks = "dashed = server mean" if len(centres) <= NIC_LOAD_SERVERS else f"{len(centres)} servers in order"
        ax.set_title(f"{name(f)} (rep{rep.index}): per-NIC-port load, dark = port 1, light = port 2, "
                     f"{marks}; {worst}", loc="left")
        ax.set_ylim(0, max(heights + [1]) * 1.3)
    return save(fig, out)


def _lighter(hex_colour: str, amount: float = 0.55) -> tuple:
    rgb = np.array(matplotlib.colors.to_rgb(hex_colour))
    return tuple(rgb + (1 - rgb) * amount)


INSTANCE_COLOURS = ("#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000", "#999999", "#882255")


def _prefill_queue(rep) -> pd.DataFrame | None:
    """queue.csv's prefill rows as a table: index t_s, one column per prefill instance."""
    q = rep.serving_queue
    if q is None:
        return None
    q = q[q["kind"] == "prefill"]
    if q.empty:
        return None
    return q.pivot_table(index="t_s", columns="instance", values="queue", aggfunc="max").sort_index()


def serving_queue_source(exp: ExperimentRun) -> dict | None:
    """Which run the prefill-queue figure draws: the first fabric's repetition 1 with a queue.csv.
    The queue comes from the traffic schedule, not the network, so every fabric's should be the
    same: ``same`` lists the fabrics whose first repetition has an identical prefill queue,
    ``differ`` those whose does not (drawn dashed), ``missing`` those without queue.csv."""
    drawn = None
    out = {"fabric": None, "rep": None, "same": [], "differ": [], "missing": []}
    for f in exp.fabrics:
        rep = exp.reps[f][0]
        table = _prefill_queue(rep)
        if table is None:
            out["missing"].append(f)
        elif drawn is None:
            drawn = table
            out["fabric"], out["rep"] = f, rep.index
        elif table.shape == drawn.shape and (table.index == drawn.index).all() and \
                list(table.columns) == list(drawn.columns) and np.allclose(table.to_numpy(), drawn.to_numpy(),
                                                                           equal_nan=True):
            out["same"].append(f)
        else:
            out["differ"].append(f)
    return out if drawn is not None else None


def _instance_label(rep, i: int) -> str:
    df = rep.instances
    if df is not None:
        row = df[(df["kind"] == "prefill") & (df["instance"] == i)]
        if not row.empty:
            r = row.iloc[0]
            return f"prefill {i}: utilization {r['utilization']:.2f}, offered load {r['offered_load']:.2f}"
    u = (rep.summary.get("prefill_utilization") or {}).get(str(i))
    return f"prefill {i}" + (f": utilization {float(u):.2f}" if isinstance(u, (int, float)) else "")


def prefill_queue(exp: ExperimentRun, out: Path) -> Path | None:
    """Each prefill instance's queue (requests waiting or in prefill) over the replayed window,
    one line per instance, from the first fabric's repetition 1 (the schedule's queue, the same on
    every fabric); a fabric whose queue.csv differs is drawn dashed. With at most 4 instances, dotted
    segments mark the mean of the first and last third of the samples: the replay's overload check
    compares them (``traffic.model.schedule.overloaded``)."""
    src = serving_queue_source(exp)
    if src is None:
        return None
    base = exp.reps[src["fabric"]][0]
    fig, ax = plt.subplots(figsize=(11, 3.6))
    table = _prefill_queue(base)
    thirds = len(table.columns) <= 4 and len(table) >= 3
    for j, inst in enumerate(table.columns):
        c = INSTANCE_COLOURS[j % len(INSTANCE_COLOURS)]
        y = table[inst].dropna()
        ax.plot(y.index, y.to_numpy(), color=c, lw=1.8, marker="o" if len(y) <= 40 else None, ms=3,
                label=_instance_label(base, int(inst)))
        if thirds:
            k = len(y) // 3
            for seg in (y.iloc[:k], y.iloc[-k:]):
                ax.hlines(seg.mean(), seg.index[0], seg.index[-1], color=c, lw=1.2, ls=":", alpha=0.9)
    top = float(np.nanmax(table.to_numpy()))
    flagged = [src["fabric"]] if stats.overload_warning(base) is not None else []
    for f in src["differ"]:
        other = _prefill_queue(exp.reps[f][0])
        top = max(top, float(np.nanmax(other.to_numpy())))
        if stats.overload_warning(exp.reps[f][0]) is not None:
            flagged.append(f)
        for j, inst in enumerate(other.columns):
            y = other[inst].dropna()
            ax.plot(y.index, y.to_numpy(), color=INSTANCE_COLOURS[j % len(INSTANCE_COLOURS)], lw=1.2, ls="--",
                    label=f"{name(f)} prefill {int(inst)} (differs)")
    ax.set_ylim(0, max(3.0, top * 1.15))  # a queue of 1 stays small
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("time in the replayed window (s)")
    ax.set_ylabel("requests waiting or in prefill")
    if not flagged:
        head = "Prefill queue over time: bounded, prefill keeps up"
    elif flagged == [src["fabric"]] + src["differ"]:
        head = "Prefill queue over time: it keeps growing, the replay flagged the cluster overloaded"
    else:
        head = f"Prefill queue over time: {' and '.join(name(f) for f in flagged)} flagged overloaded"
    ax.set_title(head + f" ({name(src['fabric'])} rep{src['rep']}" + (", dotted: first / last third mean)"
                                                                      if thirds else ")"), loc="left")
    ax.legend(fontsize=8, loc="upper left")
    return save(fig, out)

"""The faults of a replay: when each came, what it affected, and how that traffic fared against its neighbours.

A replay with faults (an experiment's ``faults:``, ``testbed.backends.emulated.faults``) leaves ``faults.jsonl`` in its
run directory (and the same events in summary.json ``faults``); a replay without has neither, and ``analyze_rep``
returns None for it. Everything here reads the saved files of one repetition and returns plain dicts:

* ``events``: each action as applied, at its run time (``trace_s``, cluster seconds) and wall time.
* ``faults``: the actions paired into intervals, a cable or switch from ``down`` to ``up``, the controller from
  ``stop`` to ``start`` (a ``restart`` from its stop until the controller was back: its ``took_s``).
* per fault and kind of traffic (KV transfers from transfers.csv, EP messages from messages.csv):

  - **affected**: in flight at the cut (start <= cut < end, or never finished) and on a path that may cross the
    dead cable or switch: the planned NIC port pair's every path over the fabric model's forwarding tables
    (``routing.walk``; ZCube has one a pair, ROFT several by ECMP, so there "may cross"). For the controller,
    in flight at any moment it was away, compared alike; they should fare as their neighbours (the switches
    forward without it);
  - **dead-path starts**: started while the cable or switch was down on a port pair with no live path left
    (``failover.usable_ports``): the hosts learn that only from their own connection (``--dead-after``), so
    these stall and are retried or moved too;
  - **neighbours**: the same kind, started from one fault duration before the fault to its end, neither of the
    above; their FCT is what the affected ones are compared against.

  A row an earlier fault affected (or that started on its dead path) counts for that fault only: a transfer
  stalled behind a cut cable is not the controller restart's doing when it is still in flight at the restart.

  FCT is end - start; "after the cut" is an affected transfer's end - the fault's wall time (how long after the
  cut it completed), over those in flight at that instant (for the controller: at its stop). Both in ms of run
  time (``fct_ms``, ``after_cut_ms``: real-cluster time under the live driver, wall / dilation, like every
  serving time), with the emulated wall time beside them (``fct_wall_ms``, ``after_cut_wall_ms``);
  nearest-rank percentiles (``traffic.model.metrics``) over completed rows.
* ``goodput``: bytes delivered per 100 ms of run time (by each completed row's end), KV and EP apart, as
  emulated bit/s; goodput.csv's per-second figures when the run left no rows.

Run time = wall time / ``wall_per_run_s``: the live driver's time dilation, or 1 / speed for the planned
replay (what ``fault_schedule`` scaled by).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from common.errors import TestbedError
from fabrics import addressing, build_fabric
from fabrics.failover import PORT_PAIRS, UNDO, Dead, live_tables, parse_target, usable_ports
from fabrics.routing import forwarding_tables, walk
from fabrics.topology import Fabric
from traffic.model import metrics
from traffic.runtime.records import read_jsonl

FILE = "faults.jsonl"
KINDS = (("kv", "transfers.csv", "KV transfers"), ("ep", "messages.csv", "EP messages"))
BIN_S = 0.1  # goodput bins, run seconds


# --------------------------------------------------------------------------- reading


def read_events(rep_dir: Path | str) -> list[dict]:
    """The fault actions of a replay in wall-time order: faults.jsonl, else summary.json ``faults``; [] when the
    replay had none. Each: wall_s (after the replay's t0), run_s (its ``trace_s``), target, action, late_ms,
    took_s (None where not recorded)."""
    rep_dir = Path(rep_dir)
    path = rep_dir / FILE
    raw = read_jsonl(path) if path.is_file() else _json(rep_dir / "summary.json").get("faults") or []
    events = []
    for ev in raw:
        if not isinstance(ev, dict) or ev.get("wall_s") is None or not ev.get("target") or not ev.get("action"):
            continue
        events.append({"wall_s": float(ev["wall_s"]), "run_s": _float(ev.get("trace_s")),
                       "target": str(ev["target"]), "action": str(ev["action"]), "late_ms": _float(ev.get("late_ms")),
                       "took_s": _float(ev.get("took_s"))})
    return sorted(events, key=lambda e: e["wall_s"])


def _float(v) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def _truthy(v) -> bool:
    return str(v).strip().lower() in ("true", "1", "yes")


def read_rows(path: Path) -> list[dict]:
    """transfers.csv or messages.csv as dicts: start, end, bytes numbers (None when empty), verified, retried and
    moved booleans (False when the columns are absent: nothing was retried); [] for a missing file."""
    if not path.is_file():
        return []
    rows = []
    with open(path, newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            rows.append({"id": r.get("id"), "src_ip": r.get("src_ip") or "", "dst_ip": r.get("dst_ip") or "",
                         "bytes": _float(r.get("bytes")) or 0.0, "start": _float(r.get("start")),
                         "end": _float(r.get("end")), "verified": _truthy(r.get("verified")),
                         "retried": _truthy(r.get("retried")), "moved": _truthy(r.get("moved"))})
    return rows


def _json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}


def wall_per_run_s(summary: dict, config: dict) -> float:
    """Wall seconds per run (cluster) second, as the repetition recorded it (summary.json ``wall_per_run_s``);
    a run directory written before it was recorded: the live driver's time dilation, the planned replay's
    1 / speed."""
    if summary.get("wall_per_run_s"):
        return float(summary["wall_per_run_s"])
    replay = config.get("replay") or {}
    driver = summary.get("driver") or replay.get("driver")
    if driver == "live":
        return float(summary.get("time_dilation") or replay.get("time_dilation") or 1.0)
    speed = replay.get("speed")
    return 1.0 / float(speed) if speed else 1.0


# --------------------------------------------------------------------------- faults as intervals


def pair_faults(events: list[dict], run_end_wall_s: float) -> list[dict]:
    """Each down/stop with its up/start (the next one of the same target), each restart on its own (away for its
    took_s): target, kind (link/switch/controller), action, down_wall_s, up_wall_s (run_end_wall_s when nothing
    brought it back), their run times, late_ms."""
    out = []
    used: set[int] = set()
    for i, ev in enumerate(events):
        act = ev["action"]
        if act not in UNDO and act != "restart":
            continue
        if act == "restart":
            up = ev["wall_s"] + (ev["took_s"] or 0.0)
            up_run = None
        else:
            j = next((j for j in range(i + 1, len(events)) if j not in used and events[j]["target"] == ev["target"]
                      and events[j]["action"] == UNDO[act]), None)
            if j is not None:
                used.add(j)
            up = events[j]["wall_s"] if j is not None else max(run_end_wall_s, ev["wall_s"])
            up_run = events[j]["run_s"] if j is not None else None
        out.append({"target": ev["target"], "kind": ev["target"].split()[0], "action": act,
                    "down_wall_s": ev["wall_s"], "up_wall_s": up, "down_run_s": ev["run_s"], "up_run_s": up_run,
                    "late_ms": ev["late_ms"], "took_s": ev["took_s"]})
    return out


# --------------------------------------------------------------------------- paths


class Paths:
    """Which planned paths may cross what a fault kills, over the fabric model's forwarding tables."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.tables = forwarding_tables(fabric)
        self._walks: dict[tuple[str, str], list | None] = {}
        self._live: dict[Dead, object] = {}

    def _ends(self, src_ip: str, dst_ip: str):
        try:
            return addressing.parse_ip(src_ip), addressing.parse_ip(dst_ip)
        except TestbedError:
            return None

    def walks(self, src_ip: str, dst_ip: str) -> list[tuple[set, set]] | None:
        """Every alternative of the pair's path as (links, switches): links are transmitters, the sender's NIC
        port then each switch output port; None when the addresses or the tables give no path."""
        key = (src_ip, dst_ip)
        if key not in self._walks:
            ends = self._ends(src_ip, dst_ip)
            out = None
            if ends is not None:
                src, dst = ends
                try:
                    found = walk(self.fabric, self.tables, src, dst)
                    out = [({(addressing.host_name(src[0]), src[1]), *zip(hops, outs)}, set(hops))
                           for hops, outs in found]
                except (RuntimeError, KeyError, TestbedError):
                    out = None
            self._walks[key] = out
        return self._walks[key]

    def crossing(self, src_ip: str, dst_ip: str, dead: Dead) -> float | None:
        """The share of the pair's path alternatives that cross something dead (ZCube 0 or 1; ROFT k of its
        ECMP alternatives); None when the path is unknown."""
        walks = self.walks(src_ip, dst_ip)
        if not walks:
            return None
        hit = sum(1 for links, switches in walks if links & dead.ends or switches & dead.switches)
        return hit / len(walks)

    def dead_pair(self, src_ip: str, dst_ip: str, dead: Dead) -> bool:
        """The pair has no live path with ``dead`` down (the switches cannot route around it)."""
        ends = self._ends(src_ip, dst_ip)
        if ends is None:
            return False
        (sg, sp), (dg, dp) = ends
        if (sp, dp) not in PORT_PAIRS:
            return bool(self.crossing(src_ip, dst_ip, dead))
        if dead not in self._live:
            self._live[dead] = live_tables(self.fabric, dead, self.tables)
        try:
            usable = usable_ports(self.fabric, dead, sg, dg, self._live[dead])
        except (KeyError, TestbedError):
            return False
        return (sp, dp) not in {(c.src_port, c.dst_port) for c in usable}


# --------------------------------------------------------------------------- per fault


def in_flight(row: dict, a: float, b: float) -> bool:
    """Started by ``b`` and not finished by ``a`` (a == b: in flight at that instant, start <= t < end)."""
    return row["start"] is not None and row["start"] <= b and (row["end"] is None or row["end"] > a)


def _fct(rows: list[dict]) -> list[float]:
    return [r["end"] - r["start"] for r in rows if r["verified"] and r["end"] is not None and r["start"] is not None]


def group_stats(rows: list[dict], scale: float = 1.0) -> dict:
    """n, failed (not verified), retried, moved and the FCT P50/P99 of completed rows: ``fct_ms`` in ms of run
    time (wall / ``scale``, the wall seconds per run second), ``fct_wall_ms`` in ms of emulated wall time."""
    fct = _fct(rows)
    return {"n": len(rows), "failed": sum(not r["verified"] for r in rows),
            "retried": sum(r["retried"] for r in rows), "moved": sum(r["moved"] for r in rows),
            "fct_ms": metrics.rounded_percentiles(fct, ("p50", "p99"), 1e3 / scale),
            "fct_wall_ms": metrics.rounded_percentiles(fct, ("p50", "p99"), 1e3)}


def traffic_at(fault: dict, rows: list[dict], paths: Paths | None, dead: Dead | None,
               skip: frozenset[int] = frozenset(), scale: float = 1.0) -> dict:
    """What one fault did to one kind of traffic: affected, dead-path starts and neighbours (``group_stats`` each),
    the completion after the cut (P50/P99/max ms) of the affected rows in flight at that instant, and the affected
    ids. ``dead``: what a cable or switch fault kills (None for the controller); ``paths``: the fabric model
    (None: paths unknown, every row in flight counts as affected); ``skip``: ``id()`` of rows an earlier fault
    took (counted there only); ``scale``: wall seconds per run second (figures in run time, wall beside).
    ``taken`` in the result: the ``id()`` of the rows this one took."""
    down, up = fault["down_wall_s"], fault["up_wall_s"]
    affected, dead_starts, unknown = [], [], 0
    rows = [r for r in rows if id(r) not in skip]
    for r in rows:
        if dead is None:
            if in_flight(r, down, up):
                affected.append(r)
            continue
        if in_flight(r, down, down):
            share = paths.crossing(r["src_ip"], r["dst_ip"], dead) if paths is not None else None
            unknown += share is None
            if share is None or share > 0:
                affected.append(r)
        elif (r["start"] is not None and down < r["start"] < up and paths is not None
              and paths.dead_pair(r["src_ip"], r["dst_ip"], dead)):
            dead_starts.append(r)
    taken = {id(r) for r in affected + dead_starts}
    lo = down - (up - down)
    neighbours = [r for r in rows if id(r) not in taken and r["start"] is not None and lo <= r["start"] < up]
    after = [r["end"] - down for r in affected if r["verified"] and r["end"] is not None and r["start"] <= down]
    out = {"affected": group_stats(affected, scale), "dead_path_starts": group_stats(dead_starts, scale),
           "neighbours": group_stats(neighbours, scale),
           "after_cut_ms": metrics.rounded_percentiles(after, ("p50", "p99"), 1e3 / scale)
           | {"max": round(max(after) * 1e3 / scale, 3) if after else None},
           "after_cut_wall_ms": metrics.rounded_percentiles(after, ("p50", "p99"), 1e3)
           | {"max": round(max(after) * 1e3, 3) if after else None},
           "affected_ids": [r["id"] for r in affected], "paths_unknown": unknown, "taken": taken}
    if dead is not None and paths is not None:
        shares = [paths.crossing(r["src_ip"], r["dst_ip"], dead) for r in affected]
        out["affected"]["surely_crossing"] = sum(1 for s in shares if s == 1)
    return out


# --------------------------------------------------------------------------- goodput


def goodput(rows_by_kind: dict[str, list[dict]], scale: float, rep_dir: Path) -> dict:
    """Emulated bit/s delivered per ``BIN_S`` of run time, by each completed row's end: {"bin_s", "t_s" (bin
    starts), "series": {label: [bit/s]}, "source"}; goodput.csv's seconds (scaled to run time) when no row
    completed; an empty ``t_s`` when neither exists."""
    done = {k: [r for r in rows if r["verified"] and r["end"] is not None] for k, rows in rows_by_kind.items()}
    if any(done.values()):
        last = max(r["end"] for rows in done.values() for r in rows)
        n = int(last / scale / BIN_S) + 1
        series = {}
        for key, _, label in KINDS:
            if not rows_by_kind.get(key):
                continue
            b = [0.0] * n
            for r in done[key]:
                b[min(n - 1, max(0, int(r["end"] / scale / BIN_S)))] += r["bytes"]
            series[label] = [round(x * 8 / (BIN_S * scale), 1) for x in b]
        files = " and ".join(f for k, f, _ in KINDS if rows_by_kind.get(k))
        return {"bin_s": BIN_S, "t_s": [round(i * BIN_S, 6) for i in range(n)], "series": series, "source": files}
    path = rep_dir / "goodput.csv"
    t, bps = [], []
    if path.is_file():
        with open(path, newline="") as fh:
            for r in csv.DictReader(fh):
                s, g = _float(r.get("second")), _float(r.get("goodput_bps"))
                if s is not None and g is not None:
                    t.append(round(s / scale, 6))
                    bps.append(g)
    return {"bin_s": 1.0 / scale, "t_s": t, "series": {"every transfer": bps} if t else {}, "source": "goodput.csv"}


# --------------------------------------------------------------------------- one repetition


def fabric_of(config: dict) -> Fabric | None:
    """The fabric model the replay ran on (config.json ``fabric``), or None when it is not recorded."""
    params = config.get("fabric")
    if not isinstance(params, dict) or not params.get("kind"):
        return None
    try:
        return build_fabric(**params)
    except (TestbedError, TypeError):
        return None


def analyze_rep(rep_dir: Path | str) -> dict | None:
    """The faults of one replay run directory (module docstring); None when it had none."""
    rep_dir = Path(rep_dir)
    events = read_events(rep_dir)
    if not events:
        return None
    summary, config = _json(rep_dir / "summary.json"), _json(rep_dir / "config.json")
    scale = wall_per_run_s(summary, config)
    rows = {key: read_rows(rep_dir / fname) for key, fname, _ in KINDS}
    ends = [r["end"] for rs in rows.values() for r in rs if r["end"] is not None]
    run_end = max(ends + [e["wall_s"] for e in events])
    notes: list[str] = []
    fabric = fabric_of(config)
    paths = Paths(fabric) if fabric is not None else None
    if fabric is None:
        notes.append("config.json names no fabric: every transfer in flight at a cut counts as affected")
    for ev in events:
        ev["run_s"] = ev["run_s"] if ev["run_s"] is not None else round(ev["wall_s"] / scale, 4)
    faults = []
    taken: dict[str, set[int]] = {key: set() for key, _, _ in KINDS}  # a row counts for the first fault it met
    for f in pair_faults(events, run_end):
        f["down_run_s"] = f["down_run_s"] if f["down_run_s"] is not None else round(f["down_wall_s"] / scale, 4)
        f["up_run_s"] = f["up_run_s"] if f["up_run_s"] is not None else round(f["up_wall_s"] / scale, 4)
        dead, model = None, None
        if f["kind"] != "controller":
            dead, model = Dead(), paths
            if fabric is not None:
                try:
                    dead = parse_target(fabric, f["target"]).dead(fabric)
                except TestbedError as exc:
                    model = None
                    notes.append(f"{exc}: every transfer in flight at that cut counts as affected")
        f["traffic"] = {}
        for key, _, _ in KINDS:
            if rows[key]:
                t = traffic_at(f, rows[key], model, dead, frozenset(taken[key]), scale)
                taken[key] |= t.pop("taken")
                f["traffic"][key] = t
        faults.append(f)
    totals = {key: {k: v for k, v in group_stats(rs).items() if k != "fct_ms"} for key, rs in rows.items() if rs}
    return {"fabric": (config.get("fabric") or {}).get("kind") or summary.get("fabric"),
            "driver": summary.get("driver") or (config.get("replay") or {}).get("driver"),
            "wall_per_run_s": scale, "events": events, "faults": faults, "totals": totals,
            "goodput": goodput(rows, scale, rep_dir), "notes": notes}


def analyze(exp) -> dict:
    """fabric -> [(repetition index, ``analyze_rep``)] over an ``ExperimentRun``'s repetitions that had faults;
    {} when none had."""
    out: dict = {}
    for f in exp.fabrics:
        for rep in exp.reps[f]:
            doc = analyze_rep(rep.path)
            if doc is not None:
                out.setdefault(f, []).append((rep.index, doc))
    return out


def brief(docs: dict) -> dict:
    """The report summary.json's ``faults``: per fabric and repetition the events and each fault's numbers,
    without the goodput bins and row ids."""
    out = {}
    for f, reps in docs.items():
        out[f] = []
        for k, d in reps:
            faults = [{**{x: y for x, y in fault.items() if x != "traffic"},
                       "traffic": {kind: {x: y for x, y in t.items() if x != "affected_ids"}
                                   for kind, t in fault["traffic"].items()}} for fault in d["faults"]]
            out[f].append({"rep": k, "wall_per_run_s": d["wall_per_run_s"], "events": d["events"], "faults": faults,
                           "totals": d["totals"]})
    return out


# --------------------------------------------------------------------------- the figure

CONTROLLER_COLOUR = "#444444"
HATCHES = ("//", "\\\\", "xx", "..")


def _steps(t: list[float], values: list[float], width: float) -> tuple[list[float], list[float]]:
    """A step series closed at its last bin's end."""
    return t + [t[-1] + width], values + [values[-1]]


def run_time_label(doc: dict) -> str:
    scale = doc["wall_per_run_s"]
    if doc.get("driver") == "live":
        return f"run time (s of cluster time = wall / {scale:g})"
    return f"run time (s of the trace = wall x {1 / scale:g}, the replay speed)"


def timeline_figure(fabric: str, reps: list[tuple[int, dict]], out: Path) -> Path | None:
    """Goodput per 100 ms of run time (stacked KV under EP; the first repetition bold, others' totals faint) with
    the first repetition's faults: a hatched band from each cable or switch's down to its up, a dashed line at
    each controller stop, start or restart (a restart's time away shaded), every one labelled. None when nothing
    was delivered."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from testbed.report.plots import colour, name, save, style

    if not reps or not reps[0][1]["goodput"]["t_s"]:
        return None
    k0, first = reps[0]
    with style():
        fig, ax = plt.subplots(figsize=(11, 3.6))
        base = colour(fabric)
        for k, d in reps[1:]:
            g = d["goodput"]
            if g["t_s"]:
                total = [sum(v) / 1e6 for v in zip(*g["series"].values())]
                ax.plot(*_steps(g["t_s"], total, g["bin_s"]), color=base, lw=0.8, alpha=0.35,
                        drawstyle="steps-post", label=f"rep{k}, all")
        g = first["goodput"]
        bottom = [0.0] * len(g["t_s"])
        for i, (label, vals) in enumerate(g["series"].items()):
            top = [b + v / 1e6 for b, v in zip(bottom, vals)]
            ax.fill_between(*_steps(g["t_s"], bottom, g["bin_s"]), _steps(g["t_s"], top, g["bin_s"])[1],
                            step="post", color=base, alpha=0.8 if i == 0 else 0.3, lw=0,
                            label=label + (f" (rep{k0})" if len(reps) > 1 else ""))
            bottom = top
        ax.plot(*_steps(g["t_s"], bottom, g["bin_s"]), color=base, lw=1.2, drawstyle="steps-post")
        ax.set_ylim(0, max(bottom + [1e-6]) * 1.35)
        for i, f in enumerate(x for x in first["faults"] if x["kind"] != "controller"):
            ax.axvspan(f["down_run_s"], f["up_run_s"], facecolor="#888888", alpha=0.18, lw=0)
            ax.axvspan(f["down_run_s"], f["up_run_s"], facecolor="none", edgecolor="#777777", lw=0,
                       hatch=HATCHES[i % len(HATCHES)], alpha=0.5)
            ax.annotate(f"{f['target']} down", (f["down_run_s"], 0.98), xycoords=("data", "axes fraction"),
                        ha="left", va="top", fontsize=8, color="#222", xytext=(3, 0), textcoords="offset points")
        for f in first["faults"]:
            if f["kind"] == "controller" and f["action"] == "restart" and f["up_run_s"] > f["down_run_s"]:
                ax.axvspan(f["down_run_s"], f["up_run_s"], facecolor=CONTROLLER_COLOUR, alpha=0.08, lw=0)
        for e in first["events"]:
            if e["target"] == "controller":
                ax.axvline(e["run_s"], color=CONTROLLER_COLOUR, lw=1.2, ls="--")
                ax.annotate(f"controller {e['action']}", (e["run_s"], 0.88), xycoords=("data", "axes fraction"),
                            ha="left", va="top", fontsize=8, color=CONTROLLER_COLOUR, xytext=(3, 0),
                            textcoords="offset points")
        ax.set_xlabel(run_time_label(first))
        ax.set_ylabel("goodput (emulated Mbit/s)")
        ax.set_title(f"{name(fabric)}: goodput per {g['bin_s'] * 1e3:.0f} ms of run time ({g['source']}, by end); "
                     "hatched: a cable or switch down, dashed: the controller", loc="left")
        ax.legend(fontsize=8, loc="upper right")
        return save(fig, out)


__all__ = ["read_events", "read_rows", "wall_per_run_s", "pair_faults", "Paths", "in_flight", "group_stats",
           "traffic_at", "goodput", "fabric_of", "analyze_rep", "analyze", "brief", "run_time_label",
           "timeline_figure"]

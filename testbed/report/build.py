"""``build_report``: experiment run directory -> report.html, figures/, summary.json, headline.csv.

Regenerating from the saved data only (no fabric, no root) means a report can
be rebuilt after the code improves, on any machine, from a copied directory.

The page is ``SECTIONS``, in order: each a ``Section`` (anchor, nav label, heading, and a function of the
``LoadedRun`` that returns its HTML, or None when the run has nothing for it); the nav lists the sections
that rendered.
"""

from __future__ import annotations

import csv
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from testbed.report import (
    breakdown,
    confidence,
    congestion_section,
    crosscheck_section,
    drawing,
    faults,
    headline,
    hot_links,
    plots,
    plots_net,
    scale_result,
    sensitivity_section,
    serving,
    stats,
    topology_and_cost,
    verdict,
)
from testbed.report import html as H
from testbed.report import load_curve_section as curve
from testbed.report.crosscheck import line as xc_line
from testbed.report.fmt import num
from testbed.report.headline import engine_line, headline_rows
from testbed.report.load import ExperimentRun, load_experiment
from testbed.report.plots import name
from testbed.report.serving import calibration_applies, calibration_differences  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class LoadedRun:
    """What every section is made from: the run directory as loaded, the report's summary document
    (``summarize``), the figures drawn (``_figures``) and the fault analysis (``faults.analyze``; {}: no replay
    had faults)."""

    exp: ExperimentRun
    doc: dict
    figs: dict
    faults: dict

    @property
    def figures(self) -> Path:
        """The folder the figures go into (a section may draw its own there)."""
        return self.exp.path / "figures"


@dataclass(frozen=True)
class Section:
    """One section of the page: its anchor, its link in the nav, its heading, and its body made from the loaded
    run (None: the run has nothing for it, and the page shows neither the section nor its link). ``SECTIONS``
    lists them in the page's order; the nav is derived from the ones that rendered."""

    id: str
    nav: str
    title: str
    body: Callable[[LoadedRun], str | None]


def summarize(exp: ExperimentRun) -> dict:
    """summary.json of the report (no figures): the aggregate plus verdicts and cost."""
    doc = stats.aggregate(exp)
    doc["live"] = any(r.summary.get("driver") == "live" for rs in exp.reps.values() for r in rs)
    # before the verdicts: they use it. The headline's ratios are its centres (the geometric mean of the
    # per-repetition ratios), so the ratio, its interval and its verdict are one figure everywhere.
    doc["confidence"] = confidence.confidence(exp, {f: doc[f]["per_rep"] for f in exp.reps})
    for key, c in ((doc["confidence"] or {}).get("ratios") or {}).items():
        if c.get("ratio") is not None:
            doc["ratios"][key] = c["ratio"]
    cost = topology_and_cost.cost(exp)
    doc["seed_figures"] = {k: {"ratio": v["ratio"], "claim": v["claim"]} for k, v in verdict.SEED_FIGURES.items()}
    doc["seed_comparison"] = verdict.seed_comparison(doc, cost)
    doc["verdict"] = verdict.title_verdict(doc)
    doc["cost"] = cost
    doc["run_id"] = exp.run_id
    doc["notes"] = list(exp.notes)
    doc["calibration"] = calibration_of(exp)
    doc["headline"] = headline.summary_keys(doc)  # what the terminal and the page's headline show
    return doc


def summary_of(run_dir: Path | str, fresh: bool = False) -> dict:
    """The report's summary document of a run directory: the summary.json its report wrote (unless ``fresh``, or
    it predates the ``headline`` key), else computed again from the saved files (``summarize``, no figures)."""
    if not fresh:
        try:
            doc = json.loads((Path(run_dir) / "summary.json").read_text())
            if isinstance(doc, dict) and isinstance(doc.get("headline"), dict):
                return doc
        except (OSError, ValueError):
            pass
    return summarize(load_experiment(run_dir))


def calibration_of(exp: ExperimentRun) -> dict | None:
    """The calibration this run stands on (its calibration.json), or None when it was not calibrated."""
    try:
        return json.loads((exp.path / "calibration.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def write_headline_csv(doc: dict, fabrics: list[str], path: Path) -> Path:
    """One row a metric (raw units): median, min, max per fabric, the ZCube/ROFT ratio and (live runs) its
    95% confidence interval and verdict."""
    conf = ((doc.get("confidence") or {}).get("ratios")) or {}
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["metric", "label"] + [f"{f}{s}" for f in fabrics for s in ("", "_min", "_max")]
                   + ["ratio", "ratio_ci95_lo", "ratio_ci95_hi", "verdict"])
        seen = set()
        for label, key, *_ in headline_rows(bool(doc.get("live"))) + tuple((k, k) for k in stats.KEYS):
            if key in seen:
                continue
            seen.add(key)
            row = [key, label]
            for f in fabrics:
                spread = doc[f]["spread"].get(key) or [None, None]
                row += [stats.flat_get(doc[f], key), spread[0], spread[1]]
            row.append(doc["ratios"].get(key))
            c = conf.get(key) or {}
            row += (c.get("ci95") or [None, None]) + [c.get("verdict")]
            w.writerow(["" if v is None else v for v in row])
    return path


def _figures(exp: ExperimentRun, figures: Path) -> dict:
    figures.mkdir(exist_ok=True)
    for old in figures.glob("*.png"):
        old.unlink()
    # the slowest first (drawing.draw shares them out in this order)
    out = drawing.draw([("nics", plots.nic_load, (exp, figures / "nic_load.png")),
                        ("heatmaps", plots_net.util_heatmaps, (exp, figures)),
                        ("fct_cdf", plots.fct_cdf, (exp, figures / "fct_cdf.png")),
                        ("queues", plots_net.queue_backlog, (exp, figures / "queue_backlog.png")),
                        ("slowdown", plots.slowdown_bins, (exp, figures / "slowdown_bins.png")),
                        ("serving", serving.serving_figure, (exp, figures / "serving.png")),
                        ("goodput", plots.goodput_time, (exp, figures / "goodput_time.png")),
                        ("pfc_raster", plots_net.pfc_raster, (exp, figures / "pfc_raster.png")),
                        ("pfc_fraction", plots_net.paused_fraction, (exp, figures / "pfc_paused_fraction.png")),
                        ("prefill_queue", plots.prefill_queue, (exp, figures / "prefill_queue.png")),
                        ("calibration", serving.calibration_figure,
                         (calibration_of(exp), figures / "calibration.png"))])
    out["topology"], notes = topology_and_cost.topology_pictures(exp, figures)
    exp.notes.extend(notes)
    return out


def traffic_sentence(config: dict) -> str:
    """What traffic ran, in one sentence: the slice, the model and how its TP
    ranks map (the asymmetry the experiment chose), the transfer mode."""
    e = (config or {}).get("experiment") or {}
    t, s = e.get("trace") or {}, e.get("serving") or {}
    if not t or not s:
        return ""
    from traffic.model import models

    spec = models.MODELS.get(s.get("model"))
    p, d = s.get("prefill_tp"), s.get("decode_tp")
    if spec is not None and spec.attention == "mla":
        mapping = "MLA: one prefill rank sends a full copy to every decode rank (one-to-many)"
    elif p and d and p > d:
        mapping = f"each decode rank gathers its heads from {p // d} prefill ranks ({p // d}-to-1, mostly across rails)"
    elif p and d and p < d:
        mapping = f"each prefill rank splits its heads over {d // p} decode ranks"
    else:
        mapping = "rank i sends to rank i"
    trace = t.get("workload") or Path(t.get("path") or "the default Mooncake trace").name
    return (f"Traffic: {trace}, {t.get('duration_s'):g} s from {t.get('start_s'):g} s replayed at speed "
            f"{t.get('speed'):g}; {s.get('model')} {s.get('dtype')}, prefill TP {p} -> decode TP {d}: {mapping}; "
            f"{s.get('mode')} transfers, NIC port policy {s.get('policy')}.")


def _headline_section(run: LoadedRun) -> str:
    doc, exp = run.doc, run.exp
    reps = doc["reps"]
    parts = []
    live = [r for f in exp.fabrics for r in exp.reps[f] if r.summary.get("driver") == "live"]
    sentence = serving.live_traffic_sentence(exp.config, live[0].summary) if live else traffic_sentence(exp.config)
    if sentence:
        parts.append(f"<p>{H.escape(sentence)}</p>")
    parts.append(H.headline_block(doc["headline"]))
    check = crosscheck_section.load(exp.path)
    if check is not None:  # whether the engines agree on this experiment: one line, the section further down
        parts.append(f'<p><b>{H.escape(xc_line(check))}</b> (<a href="#crosscheck">cross-check</a>)</p>')
    parts.append("<h3>Every figure</h3>")
    parts.append(H.headline_table(doc, exp.fabrics))
    conf = doc.get("confidence")
    spread = (f"Medians over {reps} repetitions, [min, max] in brackets. " if reps > 1 else
              "One repetition per fabric: no spread to judge noise by. ")
    if live and conf and conf.get("samples"):
        behind = "; ".join(f"{label}: {confidence.behind(conf, key)}" for key, label in
                           (("ttft_ms.p99", "TTFT P50 and P99"), ("throughput_tokens_per_s", "output tokens/s")))
        parts.append('<p class="note">' + spread + "Serving figures are measured (real-cluster time): TTFT of the "
                     "requests that arrived after the warm-up, output tokens of the decode steps that ended in the "
                     "measured window. Behind them: " + H.escape(behind) + ". The headline's 95% interval is over "
                     "the repetitions (Student's t over the log of ZCube rep k / ROFT rep k, the same seed), so it "
                     "holds what moves from run to run (ROFT's ECMP hash outcome, the machine's timing) as well as "
                     "each run's sampling noise; the bracket beside a repetition's ratio is a bootstrap over that "
                     "run's requests (TTFT) or decode steps (throughput) alone (docs/serving.md, How sure). KV FCT "
                     "and goodput are the KV transfers' (transfers.csv), in emulated wall time.</p>")
    elif live:
        parts.append('<p class="note">' + spread + "Serving figures are measured (real-cluster time); no "
                     "within-run interval: requests.csv or steps.csv is missing, or one fabric did not run.</p>")
    else:
        parts.append('<p class="note">' + spread
                     + "FCT and goodput are recomputed from transfers.csv; the TTFT proxy comes from the replay "
                       "summary (it needs the trace schedule). Green/red ratio: ZCube better/worse by more than the "
                       "run resolves (the headline's figures: their 95% interval over the repetitions excludes 1; "
                       "the others: over 5%, and repetitions' ranges apart; with one repetition or identical ones, "
                       "FCT percentiles' 95% confidence intervals apart).</p>")
    missing = [f for f in ("zcube", "roft") if f not in doc]
    if missing:
        parts.append(f'<p class="warn">No {", ".join(name(m) for m in missing)} run in this experiment'
                     + (" finished" if exp.failed else "") + ": no ZCube/ROFT ratios.</p>")
    return "".join(parts)


def _labels(fabric_reps: list[tuple[str, int]], exp: ExperimentRun) -> str:
    """'every replay', 'ZCube (every repetition), ROFT rep2' or 'ZCube rep1'."""
    every = {f: sorted(r.index for r in exp.reps[f]) for f in exp.fabrics}
    mine: dict[str, list[int]] = {}
    for f, k in fabric_reps:
        mine.setdefault(f, []).append(k)
    if mine == every and sum(map(len, every.values())) > 1:
        return "every replay"
    return ", ".join(f"{name(f)} (every repetition)" if len(ks) > 1 and sorted(ks) == every[f]
                     else ", ".join(f"{name(f)} rep{k}" for k in ks) for f, ks in mine.items())


def _overload_details(exp: ExperimentRun) -> list[tuple[list[tuple[str, int]], str]]:
    """The replays' overload flags, identical ones grouped: [([(fabric, rep), ...], detail)], where
    detail is the warning's parenthesis (per flagged prefill instance: utilization, offered load,
    queue first -> last third, trend)."""
    groups: dict[str, list[tuple[str, int]]] = {}
    for f in exp.fabrics:
        for r in exp.reps[f]:
            w = stats.overload_warning(r)
            if w:
                head, _, rest = w.partition("(")
                detail = rest[:-1] if rest.endswith(")") else (rest or head)
                groups.setdefault(detail.strip(), []).append((f, r.index))
    return [(where, detail) for detail, where in groups.items()]


def overload_alert(doc: dict, exp: ExperimentRun) -> str:
    """The red banner when a replay flagged the cluster overloaded ('' otherwise)."""
    if not doc.get("overloaded"):
        return ""
    from traffic.model.schedule import MAX_UTILIZATION

    items = [f"{_labels(where, exp)}: {detail}" for where, detail in _overload_details(exp)]
    numbers = verdict.overload_numbers(doc)
    if numbers:
        items.append(numbers[:1].upper() + numbers[1:] + ".")
    items.append(f"A prefill queue that keeps growing (or a prefill instance busy {MAX_UTILIZATION:.0%} of the time "
                 "or more) means requests wait for prefill longer than anything else: more prefill instances, a "
                 "lower replay speed or a quieter trace window bring prefill utilization to the intended 0.7-0.8.")
    return H.alert(verdict.OVERLOADED + ".", items, link=("operating", "Operating point"), cls="overload")


def _instance_rows(rep, with_rep: bool) -> list[list[str]]:
    """Table rows of one repetition: instances.csv, else the summary's utilizations."""
    from traffic.model.schedule import MAX_UTILIZATION

    pre = [f"rep{rep.index}"] if with_rep else []
    df = rep.instances
    if df is None:
        rows = []
        for kind in ("prefill", "decode"):
            for i, u in stats.rep_operating_point(rep)[f"{kind}_utilization"].items():
                rows.append(pre + [kind, H.escape(i), f"{u:.2f}", "-", "-", "-", "-"])
        return rows
    rows = []
    order = df.assign(k=df["kind"].map({"prefill": 0, "decode": 1}).fillna(2)).sort_values(["k", "instance"])
    for _, r in order.iterrows():
        bad = r["kind"] == "prefill" and (r["utilization"] >= MAX_UTILIZATION or r["offered_load"] > 1)
        cell = (lambda text: f'<td class="bad">{text}</td>') if bad else (lambda text: text)
        rows.append(pre + [H.escape(str(r["kind"])), str(int(r["instance"])), cell(f"{r['utilization']:.2f}"),
                           cell(f"{r['offered_load']:.2f}"), num(_int(r.get("requests"))),
                           f"{r['mean_queue']:.1f}", num(_int(r["max_queue"]))])
    return rows


def _int(v):
    try:
        return None if v is None or v != v else int(v)
    except (TypeError, ValueError):
        return None


def _same_instances(a, b) -> bool:
    if a.instances is None or b.instances is None:
        return a.instances is None and b.instances is None and \
            stats.rep_operating_point(a)["prefill_utilization"] == stats.rep_operating_point(b)["prefill_utilization"]
    cols = [c for c in a.instances.columns if c in b.instances.columns]
    return a.instances[cols].reset_index(drop=True).equals(b.instances[cols].reset_index(drop=True))


SHORT_TABLE = 12  # rows per fabric: up to this many, every repetition is listed when they differ


def _instance_table(exp: ExperimentRun, fabric: str) -> str:
    reps = exp.reps[fabric]
    differ = [r for r in reps[1:] if not _same_instances(reps[0], r)]
    n_rows = len(_instance_rows(reps[0], False))
    show = reps if differ and n_rows * len(reps) <= SHORT_TABLE else reps[:1]
    rows = [row for r in show for row in _instance_rows(r, len(show) > 1)]
    if not rows:
        return f"<div><h3>{H.fab(fabric)}</h3><p class=\"note\">Not recorded.</p></div>"
    head = (["rep"] if len(show) > 1 else []) + ["kind", "instance", "utilization", "offered load", "requests",
                                                   "mean queue", "max queue"]
    if len(reps) == 1:
        which = f"rep{reps[0].index}"
    elif len(show) > 1:
        which = "every repetition"
    elif differ:
        which = f"rep{reps[0].index}; {', '.join(f'rep{r.index}' for r in differ)} differ (see their instances.csv)"
    else:
        which = f"rep{reps[0].index}; the other repetitions are identical"
    return (f"<div><h3>{H.fab(fabric)} <span class=\"unit\">({H.escape(which)})</span></h3>"
            + H.table(head, rows, left=(2 if len(show) > 1 else 1)) + "</div>")


def _operating_section(run: LoadedRun) -> str:
    """Whether the serving cluster kept up, so whether TTFT measures the network or a queue."""
    from traffic.model.schedule import MAX_UTILIZATION, MIN_QUEUE_GROWTH

    doc, exp, figs = run.doc, run.exp, run.figs
    if doc.get("live"):
        return serving.live_operating_section(doc, exp)
    parts = []
    ops = {f: doc[f]["operating_point"] for f in exp.fabrics}
    recorded = [f for f in exp.fabrics if ops[f]["overloaded"] is not None]
    shares = {f: stats.flat_get(doc[f], "fct_ms.p99") / stats.flat_get(doc[f], "ttft_ms.p99") for f in exp.fabrics
              if stats.flat_get(doc[f], "fct_ms.p99") is not None and stats.flat_get(doc[f], "ttft_ms.p99")}
    share_text = ", ".join(f"{name(f)} {v:.1%}" for f, v in shares.items())
    if doc.get("overloaded"):
        parts.append(f'<p class="fail">{H.escape(verdict.overload_sentence(doc))}</p>')
        for where, detail in _overload_details(exp):
            parts.append(f'<p class="note">The replay\'s overload check, {H.escape(_labels(where, exp))}: '
                         f"{H.escape(detail)}.</p>")
    elif recorded:
        utils = [u for f in recorded for u in ops[f]["prefill_utilization"].values()]
        span = (f"{min(utils):.2f}" if min(utils) == max(utils) else f"{min(utils):.2f}-{max(utils):.2f}") \
            if utils else "unknown"
        text = (f"Prefill keeps up: no prefill queue keeps growing (the replay's overload check) and prefill "
                f"utilization is {span} (intended: 0.7-0.8). TTFT is queueing + prefill + the measured KV transfer"
                + (f"; the network's part, the KV-transfer FCT P99 over the TTFT proxy P99, is {share_text}."
                   if share_text else "."))
        cls = "pass"
        if utils and max(utils) > 0.9:
            cls, text = "warn", text + (f" Prefill is busy {max(utils):.0%} of the time, close to saturation: "
                                        "a burstier window would queue.")
        parts.append(f'<p class="{cls}">{H.escape(text)}</p>')
        missing = [f for f in exp.fabrics if f not in recorded]
        if missing:
            parts.append(f'<p class="warn">{H.escape(", ".join(name(f) for f in missing))}: not recorded '
                         "(replays from before instances.csv and queue.csv).</p>")
    else:
        parts.append('<p class="warn">Not recorded: these replays predate instances.csv and queue.csv (and the '
                     "replay's overload check), so this run cannot tell whether TTFT measures the network or the "
                     "prefill queue" + (f"; the KV-transfer FCT P99 is {H.escape(share_text)} of the TTFT proxy P99"
                                        if share_text else "") + ".</p>")
    tables = [_instance_table(exp, f) for f in exp.fabrics if ops[f]["overloaded"] is not None]
    if tables:
        parts.append(f'<div class="side">{"".join(tables)}</div>')
        parts.append('<p class="note">From instances.csv (the traffic schedule\'s operating point, '
                     "traffic/model/schedule.py, over the replayed window). Utilization: share of the window the "
                     "instance was busy. Offered load: for prefill, the prefill time asked for by the requests "
                     "arriving in the window over the window (rho: over 1 the instance cannot keep up whatever the "
                     "scheduling); for "
                     "decode, the mean number of requests decoding at once. Queue: requests waiting or in prefill "
                     "(decode: decoding), sampled once a second. Red: a prefill instance busy "
                     f"{MAX_UTILIZATION:.0%} of the time or more, or offered more than it can do.</p>")
    src = plots.serving_queue_source(exp)
    if src is not None and figs.get("prefill_queue"):
        others = [name(f) for f in src["same"]]
        caption = (f"Each prefill instance's queue over the replayed window (queue.csv of {name(src['fabric'])} "
                   f"rep{src['rep']}). Drawn once: the queue comes from the traffic schedule (arrivals and modeled "
                   "prefill times), not from the network, so it is the same on every fabric replaying the same "
                   "traffic and a panel per fabric would repeat it"
                   + (f" ({', '.join(others)}: identical queue.csv)" if others else "")
                   + (f"; {' and '.join(name(f) + chr(39) + 's' for f in src['differ'])} queue.csv differs, so its "
                      "traffic differed (see the configs): drawn dashed" if src["differ"] else "")
                   + (f"; {', '.join(name(f) for f in src['missing'])} recorded none" if src["missing"] else "")
                   + ". A queue that climbs through the window is requests arriving faster than prefill serves them; "
                   "the replay flags it when the mean of the last third of the samples exceeds the first third's "
                   f"by more than {MIN_QUEUE_GROWTH:g} requests with a rising trend (dotted segments, up to 4 "
                   f"instances), or when an instance is busy {MAX_UTILIZATION:.0%} of the time.")
        parts.append(H.img(figs["prefill_queue"], caption, "prefill queue over time"))
    return "".join(parts)


def _pair(group: dict) -> str:
    """'P50 / P99' of a group's FCT in ms of run time, with the emulated wall time's beside it when it differs."""
    p, w = group["fct_ms"], group.get("fct_wall_ms") or group["fct_ms"]
    if p["p50"] is None:
        return "-"
    text = f"{num(p['p50'])} / {num(p['p99'])}"
    return text if w == p else f"{text} (wall {num(w['p50'])} / {num(w['p99'])})"


def _fault_label(f: dict) -> str:
    if f["kind"] == "controller":
        away = f["up_wall_s"] - f["down_wall_s"]
        return (f"controller {f['action']} at {num(f['down_run_s'])} s"
                + (f" (away {num(away)} s wall)" if away > 0 else ""))
    return f"{f['target']} down {num(f['down_run_s'])}-{num(f['up_run_s'])} s"


def _fault_rows(reps: list[tuple[int, dict]]) -> list[list[str]]:
    """The affected-traffic table of one fabric: a row per repetition, fault and kind of traffic."""
    labels = {key: label for key, _, label in faults.KINDS}
    rows = []
    for k, d in reps:
        for f in d["faults"]:
            for key, t in f["traffic"].items():
                c, nb, dp, after = t["affected"], t["neighbours"], t["dead_path_starts"], t["after_cut_ms"]
                after_text = "-" if after["p50"] is None else \
                    f"{num(after['p50'])} / {num(after['p99'])} / {num(after['max'])}"
                wall = t.get("after_cut_wall_ms") or after
                if after["p50"] is not None and wall != after:
                    after_text += f" (wall {num(wall['p50'])} / {num(wall['p99'])} / {num(wall['max'])})"
                dead_text = ("-" if f["kind"] == "controller" else
                             num(dp["n"]) + (f": FCT {_pair(dp)} ms, {num(dp['failed'])} failed, "
                                             f"{num(dp['retried'])} retried, {num(dp['moved'])} moved"
                                             if dp["n"] else ""))
                rows.append(([f"rep{k}"] if len(reps) > 1 else [])
                            + [H.escape(_fault_label(f)), H.escape(labels[key]), num(c["n"]), num(c["failed"]),
                               num(c["retried"]), num(c["moved"]), _pair(c), f"{_pair(nb)} ({num(nb['n'])})",
                               after_text, H.escape(dead_text)])
    return rows


def _faults_section(run: LoadedRun) -> str | None:
    """Per fabric: the fault events, the goodput timeline with them, and what each fault affected against the
    neighbouring traffic (``testbed.report.faults``); None when no replay had faults."""
    docs, exp, figures = run.faults, run.exp, run.figures
    if not docs:
        return None
    parts = []
    for f in exp.fabrics:
        reps = docs.get(f)
        if not reps:
            parts.append(f"<h3>{H.fab(f)}</h3><p class=\"note\">No fault was injected in this fabric's replays.</p>")
            continue
        many = len(reps) > 1
        parts.append(f"<h3>{H.fab(f)}</h3>")
        rows = [([f"rep{k}"] if many else [])
                + [num(e["run_s"]), num(e["wall_s"]), H.escape(e["target"]), H.escape(e["action"]), num(e["late_ms"]),
                   num(None if e["took_s"] is None else e["took_s"] * 1e3)]
                for k, d in reps for e in d["events"]]
        parts.append(H.table((["rep"] if many else []) + ["run time <span class=\"unit\">s</span>",
                                                         "wall <span class=\"unit\">s</span>", "target", "action",
                                                         "late <span class=\"unit\">ms</span>",
                                                         "took <span class=\"unit\">ms</span>"],
                             rows, left={0, 3, 4} if many else {2, 3}))
        d0 = reps[0][1]
        scale = d0["wall_per_run_s"]
        fig = faults.timeline_figure(f, reps, figures / f"faults_{f}.png")
        parts.append(H.img(fig, f"{name(f)}: bytes delivered per {d0['goodput']['bin_s'] * 1e3:.0f} ms of run time "
                           f"({d0['goodput']['source']}, by each transfer's end), as emulated Mbit/s; hatched: a cable "
                           "or switch from down to up; dashed: the controller's actions (grey: a restart's time away)"
                           + (f" (rep{reps[0][0]}'s; other repetitions' totals faint)" if many else "") + ".",
                           f"{name(f)} fault timeline"))
        parts.append(H.table((["rep"] if many else [])
                             + ["fault", "traffic", "affected", "failed", "retried", "moved",
                                "FCT P50 / P99 affected <span class=\"unit\">ms</span>",
                                "FCT P50 / P99 neighbours (n) <span class=\"unit\">ms</span>",
                                "done after the fault P50 / P99 / max <span class=\"unit\">ms</span>",
                                "started on a dead path while down"],
                             _fault_rows(reps), left=({0, 1, 2} if many else {0, 1})))
        totals = "; ".join(f"{label}: {num(t['n'])}, {num(t['failed'])} failed, {num(t['retried'])} retried, "
                           f"{num(t['moved'])} moved" for key, _, label in faults.KINDS
                           for t in [d0["totals"].get(key)] if t)
        unit = (f"cluster seconds, wall / {scale:g} (the time dilation)" if d0["driver"] == "live" else
                f"the trace's seconds, wall x {1 / scale:g} (the replay speed)")
        parts.append(f'<p class="note">Whole run{" (rep" + str(reps[0][0]) + ")" if many else ""}: '
                     f"{H.escape(totals)}. Run time is {H.escape(unit)}; FCT and the time after the fault are ms of "
                     "the same run time, like every serving time, with the emulated wall time's in brackets where "
                     "it differs." + "".join(f" {H.escape(n)}." for _, d in reps
                                                                           for n in d["notes"]) + "</p>")
    parts.append(
        '<p class="note"><b>Affected</b>: a KV transfer (transfers.csv) or EP message (messages.csv) in flight when '
        "the cable or switch went down (started by then, not finished) whose path may cross it: every path of its "
        "planned NIC port pair over the fabric model's forwarding tables. ZCube has one path a pair, so its "
        "affected transfers did cross the dead element; ROFT spreads a pair over several by ECMP and the hash is "
        "not recorded, so its affected transfers <i>may</i> have crossed it. For the controller, everything in "
        "flight while it was away (from the stop to the start; a restart: its took); the switches forward without "
        "it, so these should match their neighbours. A transfer an earlier fault affected (or that started on its "
        "dead path) counts for that fault only. <b>Neighbours</b>: the same kind, started from one fault "
        "duration before the fault to its end, neither affected nor started on a dead path. <b>Done after the "
        "fault</b>: end minus the fault's time, over the affected ones in flight at that instant. <b>Started on a "
        "dead path while down</b>: their port pair had no live path left (the switches cannot route around it: "
        "ZCube with one cable a switch pair, a NIC link, a switch); the hosts learn that only from their own "
        "connection, so these stall until retried, moved or the element comes back. <b>Retried</b>: resent after "
        "a dead connection; <b>moved</b>: sent over the other NIC port pair. Percentiles are nearest-rank over "
        "the completed ones.</p>")
    return "".join(parts)


def _hotspot_section(run: LoadedRun) -> str:
    doc, exp, figs = run.doc, run.exp, run.figs
    parts = []
    utils = [doc[f].get("max_link_utilization") for f in exp.fabrics if doc[f].get("max_link_utilization") is not None]
    if utils and max(utils) < 0.5:
        parts.append(f'<p class="warn">No link was busier than {max(utils):.1%} of its rate: the colours below show '
                     "where this load went, not congestion.</p>")
    for f in exp.fabrics:
        parts.append(H.img(figs["heatmaps"].get(f), f"{name(f)}: utilization of every switch egress port over the "
                           "run (median over repetitions). Grey = no such port. Black boxes = the three busiest.",
                           f"{name(f)} utilization heatmap"))
    parts.append(hot_links.section(exp))  # per fabric: the hottest links, KV vs EP bytes, what crosses them
    parts.append(H.img(figs["queues"], "Backlog of each fabric's deepest queues (repetition 1). Samples are about "
                       "a second apart, so short bursts between samples are invisible.", "queue backlog over time"))
    return "".join(parts)


def _pfc_section(run: LoadedRun) -> str:
    doc, exp, figs = run.doc, run.exp, run.figs
    on = [f for f in exp.fabrics if doc[f].get("pfc_enabled")]
    if not on:
        return ("<p><b>PFC was off</b> in every run (no pfc.txt, pfc_ports.csv or pfc summary): "
                "no pause frames to show.</p>")
    parts = []
    off = [f for f in exp.fabrics if f not in on]
    if off:
        parts.append(f"<p>PFC was off for {', '.join(name(f) for f in off)}.</p>")
    rows = []
    for f in on:
        for r in exp.reps[f]:
            p = r.summary.get("pfc") if isinstance(r.summary.get("pfc"), dict) else {}
            rows.append([H.fab(f), f"rep{r.index}", num(stats.pfc_pauses(r)), num(p.get("ports_paused")),
                         num(p.get("max_spread_hops")), num(p.get("victim_flows")),
                         f"{p['paused_fraction_max']:.1%}" if isinstance(p.get("paused_fraction_max"), float) else "-",
                         num(p.get("lossless_ok"))])
    parts.append(H.table(["fabric", "rep", "pauses", "ports paused", "max spread (hops)", "victim flows",
                          "max paused fraction", "lossless"], rows, left=2))
    parts.append(H.img(figs["pfc_raster"], "Pause frames per port over time (repetition 1, pfc.txt): a tick at each "
                       "pause, a bar while paused. Pauses climbing from switch to switch are head-of-line blocking "
                       "spreading.", "PFC pause raster"))
    parts.append(H.img(figs["pfc_fraction"], "Share of the run each port spent paused (repetition 1; pfc_ports.csv, or "
                       "the pause-to-resume intervals of pfc.txt when it is absent).",
                       "PFC paused fraction"))
    return "".join(parts)


def _nic_section(run: LoadedRun) -> str:
    exp, figs = run.exp, run.figs
    rows = []
    for f in exp.fabrics:
        imb = stats.nic_imbalance(exp.reps[f][0])
        if imb:
            rows.append([H.fab(f), f"{imb['max']:.2f} (server {imb['worst_server']})", f"{imb['median']:.2f}",
                         H.escape(", ".join(f"s{s}: {v:.2f}" for s, v in imb["per_server"].items()))])
    parts = [H.img(figs["nics"], "Bytes sent + received by every NIC port, grouped by server (repetition 1, nics.csv). "
                   "Even bars within a server = the traffic uses all of the server's NIC ports.", "per-NIC load")]
    if rows:
        parts.append(H.table(["fabric", "max/mean, worst server", "max/mean, median server", "per server"], rows,
                             left={0, 3}))
    return "".join(parts)


def _topology_section(run: LoadedRun) -> str:
    doc, exp, figs = run.doc, run.exp, run.figs
    def origin(f: str) -> str:
        return f"plan/{f}.png" if (exp.path / "plan" / f"{f}.png").is_file() else "drawn from the fabric model"

    pics = "".join(H.img(p, f"{name(f)} wiring ({origin(f)})", f"{name(f)} topology")
                   for f, p in figs["topology"].items())
    cost = doc["cost"]
    parts = [f'<div class="grid">{pics}</div>']
    if "zcube" in cost and "roft" in cost:
        keys = [("switches", "switches"), ("switch_ports", "switch ports"), ("cables", "cables"),
                ("transceivers", "transceivers"), ("fabric_transceivers", "switch-to-switch transceivers"),
                ("capex_units", "capex (relative units)")]
        rows = [[H.escape(label), num(cost["zcube"].get(k)), num(cost["roft"].get(k)),
                 H.escape(f"{cost['ratios'].get(k):.3f}" if cost["ratios"].get(k) is not None else "-")]
                for k, label in keys if k in cost["zcube"]]
        parts.append(H.table(["", H.fab("zcube"), H.fab("roft"), "ZCube / ROFT"], rows))
    parts.append(f'<p class="note">Cost source: {H.escape(str(cost.get("source")))}. Prices are relative units '
                 "(switch port 1, transceiver 1.5, fibre 0.1), every cable optical.</p>")
    return "".join(parts)


def _mark(ok: bool | None, text: str) -> str:
    cls = {True: "pass", False: "fail", None: "note"}[ok]
    sign = {True: "ok", False: "FAIL", None: "n/a"}[ok]
    return f'<span class="{cls}">{sign}</span> {H.escape(text)}'


def _invariants_cell(entry: dict) -> str:
    invs = entry.get("invariants") or []
    bad = sum(len(i["violations"]) for i in invs if i["ok"] is False)
    if bad:
        return _mark(False, f"{bad} violation{'s' if bad > 1 else ''} (listed below)")
    if any(i["ok"] for i in invs):
        n = max(len(i["checked"]) for i in invs)
        return _mark(True, f"all {n} checks hold in {len(invs)} repetition{'s' if len(invs) > 1 else ''}")
    return _mark(None, "not checked (a replay from before the invariants)")


def _invariants_list(doc: dict, exp: ExperimentRun) -> str:
    """The checks and, when any failed, every violation with its numbers."""
    lines = [(f, i["rep"], v) for f in exp.fabrics for i in doc[f].get("invariants") or [] if i["ok"] is False
             for v in i["violations"]]
    checked = sorted({c for f in exp.fabrics for i in doc[f].get("invariants") or [] for c in i["checked"]})
    head = ("<h3>Measurement invariants</h3><p class=\"note\">Checked at the end of every replay "
            "(testbed/repetition/invariants.py): " + H.escape(", ".join(checked) or "none") + ".</p>")
    if not lines:
        return head
    return head + "<ul>" + "".join(f"<li>{H.fab(f)} rep{k}: <span class=\"fail\">FAIL</span> {H.escape(v)}</li>"
                                   for f, k, v in lines) + "</ul>"


def _fidelity_section(run: LoadedRun) -> str:
    doc, exp = run.doc, run.exp
    rows = []
    for f in exp.fabrics:
        e = doc[f]
        cpu = e.get("cpu")
        busy = cpu.get("machine_busy_fraction") if cpu else None
        cpu_cell = (_mark(not cpu["saturated"], f"ovs-vswitchd {num(cpu['ovs_vswitchd_cores'])} cores; machine "
                          + (f"{busy:.0%} busy ({1 - busy:.0%} headroom)" if busy is not None else "load unknown"))
                    if cpu else _mark(None, "not measured (no cpu in summary.json)"))
        u = e.get("max_link_utilization")
        rate = (exp.reps[f][0].config.get("datapath") or {}).get("rate_bps") or exp.reps[f][0].summary.get("rate_bps")
        u_cell = (_mark(u <= stats.UTILIZATION_LIMIT, f"{u:.3f} of the configured {(rate or 0) / 1e6:g} Mbit/s "
                        f"({e.get('hottest_queue')}); must stay <= 1")
                  if u is not None else _mark(None, "no links.csv"))
        lat = stats.flat_get(e, "start_lateness_ms.p99")
        lat_cell = (_mark(lat <= stats.LATENESS_GOAL_MS, f"{num(lat)} ms (goal <= {stats.LATENESS_GOAL_MS:g} ms)")
                    if lat is not None else _mark(None, "not measured"))
        tr_cell = _mark(not e.get("failed"), f"{num(e.get('verified'))}/{num(e.get('transfers'))} verified")
        crashed = [r.summary.get("crashed_agents") for r in exp.reps[f] if r.summary.get("crashed_agents")]
        cr_cell = _mark(not crashed, "none exited early" if not crashed else str(crashed))
        lossless = [r.summary["pfc"].get("lossless_ok") for r in exp.reps[f] if isinstance(r.summary.get("pfc"), dict)]
        pfc_cell = (_mark(None, "PFC off") if not e.get("pfc_enabled") else
                    _mark(False not in lossless, "lossless" if False not in lossless else "drops while PFC was on"))
        rows.append([H.fab(f), cpu_cell, u_cell, lat_cell, tr_cell, cr_cell, pfc_cell, _invariants_cell(e)])
    parts = [H.table(["fabric", "CPU headroom", "max link utilization", "start lateness P99", "transfers",
                      "agents", "PFC", "measurement invariants"], rows, left=8)]
    parts.append(_invariants_list(doc, exp))
    warn = [(f, w) for f in exp.fabrics for w in doc[f]["warnings"]]
    parts.append("<h3>Warnings, verbatim</h3>")
    parts.append("<ul>" + "".join(f"<li>{H.fab(f)} {H.escape(w)}</li>" for f, w in warn) + "</ul>" if warn
                 else "<p>None.</p>")
    extra = exp.failed + exp.retried + doc["consistency_notes"] + doc["notes"]
    if extra:
        parts.append("<h3>Data notes</h3><ul>" + "".join(f"<li>{H.escape(n)}</li>" for n in extra) + "</ul>")
    return "".join(parts)


def _config_section(run: LoadedRun) -> str:
    doc, exp = run.doc, run.exp
    parts = []
    if exp.versions:
        rows = [[H.escape(k), H.escape(str(v))] for k, v in exp.versions.items()]
        parts.append(H.table(["component", "version"], rows, left=2))
    else:
        parts.append('<p class="warn">versions.json is missing.</p>')
    parts.append(H.details("experiment.json (resolved experiment config)", exp.config or "missing"))
    for f in exp.fabrics:
        parts.append(H.details(f"{name(f)}: runs/{f}/rep1/config.json (fabric, datapath, replay)",
                               exp.reps[f][0].config or "missing"))
    slim = {k: v for k, v in doc.items() if k not in ("zcube", "roft")}
    parts.append(H.details("report summary.json (without per-fabric detail)", slim))
    return "".join(parts)


def _subtitle(exp: ExperimentRun, doc: dict) -> str:
    rep = next(iter(exp.reps.values()))[0]
    n = (rep.config.get("fabric") or {}).get("gpus")
    rate = (rep.config.get("datapath") or {}).get("rate_bps") or rep.summary.get("rate_bps")
    stands = (rep.summary.get("represents_bps") or (rep.config.get("replay") or {}).get("represents_bps")
              or ((exp.config.get("experiment") or {}).get("link") or {}).get("represents"))
    backend = ((exp.config or {}).get("experiment") or {}).get("backend")
    bits = [exp.run_id, f"{n} GPUs" if n else None, f"{doc['reps']} repetition{'s' if doc['reps'] > 1 else ''}",
            engine_line(backend),
            (f"links {rate / 1e6:g} Mbit/s" + (f" standing for {stands / 1e9:g} Gbit/s" if stands else ""))
            if rate else None,
            "report generated " + time.strftime("%Y-%m-%d %H:%M")]
    return " · ".join(b for b in bits if b)


def _calibration_section(run: LoadedRun) -> str:
    cal = run.doc["calibration"]
    return serving.calibration_section(cal, run.figs["calibration"], serving.calibration_applies(cal, run.exp),
                                       serving.calibration_differences(cal, run.exp))


def _fct_section(run: LoadedRun) -> str:
    figs = run.figs
    return (H.img(figs["fct_cdf"], "Every verified transfer of every repetition. Left: CDF; right: the tail on "
                  "log-log axes, where P99 and P99.9 differences show.", "FCT CDF")
            + H.img(figs["slowdown"], "Slowdown = measured FCT / FCT alone on an idle link, per equal-count size bin "
                    "(slowdown_bins.json, median over repetitions). Below 1: the ideal's per-packet overhead is "
                    "pessimistic for one-packet transfers.", "slowdown by size"))


def _goodput_section(run: LoadedRun) -> str:
    return H.img(run.figs["goodput"], "Bytes of the transfers that finished in each second (goodput.csv); "
                 "repetition 1 bold, others faint.", "goodput")


# The page, top to bottom; a section whose body is None is left out, and its link with it.
SECTIONS: tuple[Section, ...] = (
    Section("calibration", "Calibration", "Calibration: where the network matters as much as in the seed's cluster",
            _calibration_section),
    Section("headline", "Headline", "Headline", _headline_section),
    Section("crosscheck", "Cross-check", "Cross-check: the same experiment on two engines",
            lambda run: crosscheck_section.report_section(run.exp.path, run.figures)),
    Section("scale", "At the seed's scale", "At the seed's scale: the shipped run beside this one",
            lambda run: scale_result.report_section(run.exp.path, run.doc)),
    Section("sensitivity", "Sensitivity", "Sensitivity: does the verdict survive other assumptions?",
            lambda run: sensitivity_section.report_section(run.exp)),  # None: no result, no alternative declared
    Section("loadcurve", "Load curve", "Load curve: TTFT and KV-transfer slowdown against load",
            lambda run: curve.report_section(run.exp, run.figures)),  # None: the experiment named no load curve
    Section("breakdown", "TTFT taken apart", "TTFT taken apart: where a request's and a decode step's time goes",
            lambda run: breakdown.section(run.exp, run.figures)),  # None: no live repetition recorded the parts
    Section("serving", "Serving", "Serving with the network in the loop",
            lambda run: serving.serving_section(run.doc, run.exp, run.figs["serving"])),
    Section("faults", "Faults", "Faults: the transfers each one affected, against their neighbours", _faults_section),
    Section("operating", "Operating point", "Operating point: does TTFT measure the network or a queue?",
            _operating_section),
    Section("seed", "Seed figures", "Against the seed's production figures",
            lambda run: H.seed_table(run.doc["seed_comparison"])),
    Section("fct", "FCT", "KV-transfer completion times", _fct_section),
    Section("congestion", "Congestion", "Where the congestion is: queues and pauses by port class",
            lambda run: congestion_section.section(run.exp)),
    Section("hotspots", "Hotspots", "Hotspots: link utilization and queues", _hotspot_section),
    Section("pfc", "PFC", "PFC pause frames", _pfc_section),
    Section("nics", "NIC load", "Load across each server's NICs", _nic_section),
    Section("goodput", "Goodput", "Goodput over time", _goodput_section),
    Section("topology", "Topology & cost", "Topology and cost", _topology_section),
    Section("assumptions", "Assumptions", "Every assumption", lambda run: serving.assumptions_section(run.exp)),
    Section("fidelity", "Fidelity", "Fidelity", _fidelity_section),
    Section("config", "Versions & config", "Versions and configuration", _config_section),
)


def render_sections(run: LoadedRun) -> list[tuple[Section, str]]:
    """Every section of ``SECTIONS`` with a body for this run, in order, with its body."""
    return [(sec, body) for sec in SECTIONS for body in [sec.body(run)] if body is not None]


def build_report(run_dir: Path | str) -> Path:
    """Write report.html, figures/*.png, summary.json and headline.csv into ``run_dir``; return the page."""
    exp = load_experiment(run_dir)
    figs = _figures(exp, exp.path / "figures")
    doc = summarize(exp)
    fault_docs = faults.analyze(exp)  # {}: no replay had faults
    if fault_docs:
        doc["faults"] = faults.brief(fault_docs)
    (exp.path / "summary.json").write_text(json.dumps(doc, indent=1, default=str))
    write_headline_csv(doc, exp.fabrics, exp.path / "headline.csv")
    n = (next(iter(exp.reps.values()))[0].config.get("fabric") or {}).get("gpus")
    title = " vs ".join(name(f) for f in exp.fabrics) + (f", n={n}" if n else "")
    rendered = render_sections(LoadedRun(exp, doc, figs, fault_docs))
    title_verdict = doc["verdict"][:1].upper() + doc["verdict"][1:]
    alert = overload_alert(doc, exp)
    page = H.page(title, title_verdict, _subtitle(exp, doc), doc["fidelity_problems"],
                  [(sec.id, sec.nav) for sec, _ in rendered], [(sec.id, sec.title, body) for sec, body in rendered],
                  alerts=[alert] if alert else [])
    out = exp.path / "report.html"
    out.write_text(page, encoding="utf-8")
    return out

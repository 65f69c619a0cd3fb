"""The serving figures of live runs (``serving.driver live``) and the calibration the run stands on.

Reads the replays' requests.csv, steps.csv and summary.json and the run's
calibration.json: what the cluster produced (output tokens/s, TTFT), how long
its steps took and how much of that was the expert-parallel exchange, and
which bytes the fabric carried (KV vs EP). Also a live run's own words: what ran (its layout's engines and
what crossed the fabric), its operating point against the live driver's target, and whether the
calibration applies to it.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from testbed.report import headline, stats, workload  # noqa: E402
from testbed.report import html as H  # noqa: E402
from testbed.report.fmt import num  # noqa: E402
from testbed.report.load import ExperimentRun  # noqa: E402
from testbed.report.plots import colour, name, save  # noqa: E402

SEED_ABLATION = {"throughput_ratio": 1.19, "ttft_ratio": 0.78}


def live_reps(exp: ExperimentRun) -> dict:
    """fabric -> its live repetitions (those whose summary says driver live)."""
    return {f: [r for r in exp.reps[f] if r.summary.get("driver") == "live"] for f in exp.fabrics}


def _read(path: Path) -> pd.DataFrame | None:
    try:
        return pd.read_csv(path)
    except (OSError, ValueError):
        return None


def _measured_ttft_s(rep) -> np.ndarray:
    req = _read(rep.path / "requests.csv")
    spec = ((rep.config.get("replay") or {}))
    if req is None or req.empty:
        return np.array([])
    lo = spec.get("warmup_s") or 0.0
    ok = req[(req["arrival_s"] >= lo) & req["ttft_s"].notna()]
    return ok["ttft_s"].to_numpy()


def _decode_steps_ms(rep) -> np.ndarray:
    steps = _read(rep.path / "steps.csv")
    if steps is None or steps.empty:
        return np.array([])
    d = steps[steps["engine"].str.startswith("decode") & steps["end_s"].notna()]
    return ((d["end_s"] - d["start_s"]) * 1e3).to_numpy()


def serving_figure(exp: ExperimentRun, out: Path) -> Path | None:
    """TTFT CDF and decode-step-time CDF per fabric (every repetition pooled)."""
    reps = live_reps(exp)
    if not any(reps.values()):
        return None
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.4))
    for i, (f, rs) in enumerate(reps.items()):
        for ax, vals in ((a, np.concatenate([_measured_ttft_s(r) for r in rs] or [np.array([])])),
                         (b, np.concatenate([_decode_steps_ms(r) for r in rs] or [np.array([])]))):
            if len(vals):
                x = np.sort(vals)
                ax.plot(x, np.arange(1, len(x) + 1) / len(x), color=colour(f, i), label=name(f), lw=1.6)
    a.set_xlabel("TTFT (s, real-cluster time)")
    a.set_ylabel("CDF")
    a.set_title("Time to first token of the measured requests")
    b.set_xlabel("decode step (ms, real-cluster time): compute + expert-parallel exchange")
    b.set_title("Decode step times")
    for ax in (a, b):
        ax.legend()
    return save(fig, out)


def _median(values):
    vals = [v for v in values if v is not None]
    return None if not vals else float(np.median(vals))


def serving_section(doc: dict, exp: ExperimentRun, fig: Path | None) -> str:
    reps = live_reps(exp)
    if not any(reps.values()):
        return ('<p>This experiment used the planned replay (<code>serving.driver: plan</code>): every KV transfer '
                "was timed from the trace before the run, nothing waited for the network, and the TTFT above is a "
                "proxy (queue + prefill + the transfer's tail). Run with <code>serving.driver: live</code> for "
                "serving with the network in the loop.</p>")
    keys = [("Output tokens/s", "throughput_tokens_per_s", 1), ("TTFT P50 (ms)", "ttft_ms.p50", 1),
            ("TTFT P99 (ms)", "ttft_ms.p99", 1), ("Decode step P50 (ms)", "decode_step_ms.p50", 1),
            ("Decode step P99 (ms)", "decode_step_ms.p99", 1), ("EP exchange P50 (ms)", "ep_exchange_ms.p50", 1),
            ("EP exchange P99 (ms)", "ep_exchange_ms.p99", 1), ("Measured requests", "requests", 1),
            ("KV bytes (real, GB)", "kv_bytes", 1e9), ("EP bytes on the fabric (real, GB)", "ep_bytes", 1e9),
            ("EP bytes over NVLink (real, GB)", "nvlink_bytes", 1e9),
            ("EP messages verified", "ep_messages_verified", 1), ("EP messages", "ep_messages", 1),
            ("Start lateness P99 (ms, real-cluster)", "start_lateness_ms.p99", 1),
            ("Coordinator lag P99 (ms, wall)", "control_lag_ms.p99", 1)]
    fabrics = [f for f in exp.fabrics if reps[f]]
    rows = []
    for label, key, div in keys:
        row = [H.escape(label)]
        for f in fabrics:
            v = _median([stats.flat_get(r.summary, key) for r in reps[f]])
            row.append(H.escape(num(v / div if v is not None else None)))
        rows.append(row)
    util = []
    for f in fabrics:
        s = reps[f][0].summary
        pre = ", ".join(f"{k} {v:.2f}" for k, v in (s.get("prefill_utilization") or {}).items())
        dec = ", ".join(f"{k} {v:.2f}" for k, v in (s.get("decode_utilization") or {}).items())
        util.append(f"{name(f)}: prefill compute utilization {pre}; decode busy {dec}")
    s0 = reps[fabrics[0]][0].summary
    parts = [H.table(["metric"] + [H.fab(f) for f in fabrics], rows),
             f'<p class="note">Medians over repetitions. {H.escape("; ".join(util))}. The emulated world ran '
             f"{s0.get('time_dilation', 1):g}x slower than the cluster it models (link.time_dilation); serving times "
             "are converted back. A step is modelled compute plus the measured exchange of its expert-parallel "
             "messages over the fabric (dispatch, then combine); a request's TTFT is its prefill queue, prefill "
             "steps, KV transfer, the wait for a decode step and that step.</p>"]
    parts.append(prefix_cache_block(doc, fabrics))
    if fig is not None:
        parts.append(H.img(fig, "Left: TTFT of the requests that arrived after the warm-up; right: every decode "
                                "step's duration. Every repetition pooled.", "serving CDFs"))
    return "".join(parts)


def prefix_cache_block(doc: dict, fabrics: list[str]) -> str:
    """The prefix cache's hit per fabric and repetition (the report's summary document, ``stats.prefix_cache``):
    requests and tokens counted, the hit in the GPU's own pool, in the host tier and together; empty when no
    repetition recorded one."""
    rows = []
    for f in fabrics:
        p = (doc.get(f) or {}).get("prefix_cache")
        if not p:
            continue
        for r in [*p["per_rep"], {**p, "rep": "all"}]:
            rows.append([H.fab(f), H.escape(f"rep{r['rep']}" if r["rep"] != "all" else "all, pooled"),
                         *(H.escape(num(r.get(k))) for k in ("requests", "input_tokens", "cached_tokens")),
                         *(H.escape(headline.percent(r.get(k))) for k in stats.PREFIX_RATIOS)])
    if not rows:
        return ""
    first = next(doc[f]["prefix_cache"] for f in fabrics if (doc.get(f) or {}).get("prefix_cache"))
    off = "" if first.get("cache") else f" This run had no prefix cache: {headline.prefix_cache_text(first)}."
    return (H.table(["fabric", "repetition", "requests", "prompt tokens", "cached tokens", "hit: GPU",
                     "hit: host tier", "hit"], rows, left={0, 1})
            + f'<p class="note">{H.escape(headline.PREFIX_NOTE)} Counted: {H.escape(first.get("window") or "")}.'
            f"{H.escape(off)}</p>")


def calibration_figure(cal: dict | None, out: Path) -> Path | None:
    """ROFT's 200G/100G throughput and TTFT P99 ratios per level, with the seed's ablation as lines."""
    if not cal or not cal.get("levels"):
        return None
    lv = [r["level"] for r in cal["levels"]]
    fig, ax = plt.subplots(figsize=(7, 3.4))
    seeds = cal["seed"]
    for key, label, c, seed in (("throughput_ratio", "throughput 200G/100G", "#009E73", seeds["throughput_ratio"]),
                                ("ttft_p99_ratio", "TTFT P99 200G/100G", "#CC79A7", seeds["ttft_ratio"])):
        vals = [r.get(key) for r in cal["levels"]]
        lo = [(v - (r.get(f"{key}_spread") or [v, v])[0]) if v is not None else 0 for v, r in zip(vals, cal["levels"])]
        hi = [((r.get(f"{key}_spread") or [v, v])[1] - v) if v is not None else 0 for v, r in zip(vals, cal["levels"])]
        ax.errorbar(lv, [np.nan if v is None else v for v in vals], yerr=[lo, hi], marker="o", color=c, label=label,
                    capsize=3)
        ax.axhline(seed, color=c, ls="--", lw=1)
    if cal.get("chosen"):
        ax.axvline(cal["chosen"]["level"], color="#444", ls=":", lw=1)
    ax.axhline(1, color="#999", lw=0.6)
    ax.set_xlabel(f"{cal.get('knob', 'level')} (requests in flight)")
    ax.set_ylabel("ratio, 200 over 100 Gbit/s")
    ax.set_title("Calibration on ROFT: our bandwidth ablation (markers) against the seed's (dashed)")
    ax.legend(fontsize=8)
    return save(fig, out)


def calibration_section(cal: dict | None, fig: Path | None, matches: bool | None,
                        differences: list[str] | None = None) -> str:
    if not cal:
        return ("<p>This experiment was not calibrated: nothing ties its network intensity to the seed's bandwidth "
                "ablation, so its ZCube/ROFT ratios say how the fabrics differ at this load only. "
                "<code>testbed calibrate</code> finds the load where ROFT's 100 vs 200 Gbit/s ablation matches the "
                "seed's.</p>")
    rows = []
    for r in cal["levels"]:
        chosen = cal.get("chosen") and r["level"] == cal["chosen"]["level"]
        rows.append([H.escape(str(r["level"]) + (" (chosen)" if chosen else "")),
                     H.escape(num(r.get("throughput_ratio"))), H.escape(num(r.get("ttft_p99_ratio"))),
                     H.escape(num(r.get("ttft_p50_ratio"))), H.escape(num(r.get("distance")))])
    rows.append([H.escape("seed's ablation (512 GPUs; docs/serving.md: the readings)"),
                 H.escape(num(cal["seed"]["throughput_ratio"])),
                 H.escape(num(cal["seed"]["ttft_ratio"])), "-", "0"])
    within = "within" if cal.get("within_resolution") else "not within"
    size = f" with {cal['gpus']} GPUs" if cal.get("gpus") else ""
    carried = (f"; this run takes its load per GPU ({num(cal['per_gpu'])} a GPU)" if cal.get("per_gpu") is not None
               else "")
    text = (f"<p>The seed's ablation (NICs at 200 instead of 100 Gbit/s: ~+19% throughput, ~-22% TTFT, no topology "
            f"change) fixes how much the network matters. We ran it on ROFT (the fabric of the seed's cluster before "
            f"its migration: an assumption){size} at several levels of {H.escape(cal.get('knob', ''))} and chose the "
            f"level closest to it: distance {num(cal.get('distance'))}, {within} the testbed's resolution{carried}. "
            "ZCube never ran in the calibration, so its figures below are a prediction at that level, not a fit.</p>")
    if matches is False:
        which = f" ({', '.join(differences)})" if differences else ""
        text += ('<p class="warn">This run\'s workload differs from the calibrated one in more than the knob'
                 + H.escape(which) + ": the calibration does not apply to it.</p>")
    parts = [text, H.table([H.escape(cal.get("knob", "level")), "throughput 200G/100G", "TTFT P99 200G/100G",
                            "TTFT P50 200G/100G", "distance"], rows)]
    if fig is not None:
        parts.append(H.img(fig, "Markers: our ratios (median over repetition pairs, bars: their range); dashed: the "
                                "seed's; dotted: the chosen level.", "calibration"))
    return "".join(parts)


def calibration_applies(cal: dict | None, exp: ExperimentRun) -> bool | None:
    """Whether the run's workload is the calibrated one, the knob and ``link.represents`` (what the calibration
    varies) aside (``testbed.report.workload``); None when unknown."""
    diff = calibration_differences(cal, exp)
    return None if diff is None else not diff


# what a calibration varies itself: the knob (its calibration.json names it; this, when it names none) and the
# links' bandwidth (its 100 vs 200 Gbit/s ablation)
CALIBRATION_KNOB = "serving.concurrency"
CALIBRATION_VARIES = ("link.represents",)
# what a calibration at the seed's scale carries to a smaller cluster: the load per GPU, not the size, the
# switches that size needs or how long the run is (calibration.json's per_gpu)
CALIBRATION_SCALE = ("gpus", "gpus_per_switch", "radix", "cables", "trace.duration_s")


def calibrated_level(cal: dict | None, gpus: int | None) -> int | None:
    """The knob's chosen level for a cluster of ``gpus``: the level itself, or, for a calibration carried per
    GPU (``per_gpu``), that many a GPU rounded to a whole number; None when nothing was chosen."""
    chosen = (cal or {}).get("chosen")
    if not chosen:
        return None
    per_gpu = cal.get("per_gpu")
    return int(chosen["level"]) if per_gpu is None or not gpus else max(1, round(per_gpu * gpus))


def calibration_differences(cal: dict | None, exp: ExperimentRun) -> list[str] | None:
    """The experiment keys (``serving.layout``, ...) in which the run's workload differs from the calibrated
    one (``testbed.report.workload.differences``: keys that do not define a workload aside), the knob and
    ``link.represents`` aside; None when unknown."""
    e = ((exp.config or {}).get("experiment")) or {}
    base = (cal or {}).get("experiment")
    if not cal or not base or not e:
        return None
    scale = CALIBRATION_SCALE if cal.get("per_gpu") is not None else ()
    return workload.differences(base, e, aside=(cal.get("knob") or CALIBRATION_KNOB, *CALIBRATION_VARIES, *scale))


def _layout_of(summary: dict) -> dict | None:
    """A live repetition's engines as ``traffic.model.serving.layout_summary`` gives them; for runs from
    before summary.json's serving_layout, from its engines (every MoE engine then an EP group)."""
    lay = summary.get("serving_layout")
    if isinstance(lay, dict):
        return lay
    eng = summary.get("engines")
    if not isinstance(eng, dict) or not eng.get("prefill") or not eng.get("decode"):
        return None
    out: dict = {"name": None}
    for kind in ("prefill", "decode"):
        sizes = sorted({len(e) for e in eng[kind]})
        out[kind] = {"engines": len(eng[kind]), "gpus": sizes[0] if len(sizes) == 1 else sizes, "form": "ep"}
    return out


def live_traffic_sentence(config: dict, summary: dict) -> str:
    """What a live run served, in its own terms: the model, the load, the layout that ran (each kind's
    engines and whether their all-to-all crosses the fabric) and what the fabric carried."""
    e = (config or {}).get("experiment") or {}
    t, s, link = e.get("trace") or {}, e.get("serving") or {}, e.get("link") or {}
    lay = _layout_of(summary)
    gps = int(e.get("gpus_per_server") or 8)
    on_fabric = ["KV transfers (from a prefill engine's first GPU to the request's decode GPU)"]

    def kind_text(kind: str) -> str:
        d = lay[kind]
        n, g, form = d["engines"], d["gpus"], d["form"]
        if not isinstance(g, int) or not isinstance(form, str):
            return f"{n} engines of {g} GPUs"
        if form == "tp":
            return (f"{n} engine{'s' if n > 1 else ''}, each one TP{g} instance inside "
                    f"{'one server' if g <= gps else f'{-(-g // gps)} servers'} (no all-to-all on the fabric)")
        servers = -(-g // gps)
        if servers > 1:
            on_fabric.append(f"{kind} EP dispatch and combine between the servers of each group")
        return (f"{n} EP{g} group{'s' if n > 1 else ''} with data-parallel attention, over {servers} "
                f"server{'s' if servers > 1 else ''} each" + ("" if servers > 1 else " (its all-to-all rides NVLink)"))

    def g(v) -> str:
        return "?" if v is None else f"{v:g}"

    load = (f"closed loop, {s.get('concurrency')} requests in flight" if s.get("arrivals") == "closed"
            else f"arrivals at the trace's times at speed {g(t.get('speed'))}")
    text = (f"Traffic: {s.get('model') or 'the model'} served live with the network in the loop: {load}, request "
            f"sizes from {workload.served_of(config)}; {g(t.get('duration_s'))} cluster seconds, the "
            f"first {g(s.get('warmup_s') or 0)} not measured; links standing for "
            f"{g((summary.get('represents_bps') or link.get('represents') or 0) / 1e9)} Gbit/s at dilation "
            f"{g(link.get('time_dilation') or summary.get('time_dilation') or 1)}.")
    if lay:
        name_ = f"layout {lay['name']}" if lay.get("name") else "EP groups of serving.prefill_ep / decode_ep"
        text += f" Engines ({name_}): prefill {kind_text('prefill')}; decode {kind_text('decode')}."
    return text + f" On the fabric: {'; '.join(on_fabric)}; NIC port policy {s.get('policy')}."


def live_operating_section(doc: dict, exp: ExperimentRun) -> str:
    """A live run's operating point against the live driver's own target: requests in flight (the
    calibrated level when the run was calibrated), prefill's compute utilization, and how much of the P99
    request's TTFT was the prefill queue and how much the network (its breakdown)."""
    e = (exp.config or {}).get("experiment") or {}
    s = e.get("serving") or {}
    cal = doc.get("calibration")
    applies = calibration_applies(cal, exp)
    if s.get("arrivals") == "closed":
        target = f"a closed loop of {s.get('concurrency')} requests in flight"
        if cal and cal.get("chosen"):
            level = calibrated_level(cal, e.get("gpus"))
            at = ("" if cal.get("per_gpu") is None else
                  f"; {cal['chosen']['level']} at n={cal.get('gpus')}, {cal['per_gpu']:g} a GPU")
            target += (f", the level calibrate chose ({cal.get('knob')} = {level}{at}, calibration.json)"
                       if applies and str(level) == str(s.get("concurrency")) else
                       f" (calibration.json chose {level}{at}" + ("" if applies else " for another workload") + ")")
        else:
            target += " (not calibrated)"
    else:
        target = "arrivals at the trace's times (an open loop)"
    parts = [f"<p>The live driver's target: {H.escape(target)}. A closed loop keeps that many requests in the "
             "cluster whatever the fabric, so a slow fabric shows up as longer steps and TTFT, not as a growing "
             "queue of arrivals.</p>"]
    rows = []
    for f in exp.fabrics:
        for r in exp.reps[f]:
            sm = r.summary
            pre = sm.get("prefill_utilization") or {}
            dec = sm.get("decode_utilization") or {}
            b = (sm.get("ttft_breakdown_ms") or {}).get("p99") or {}
            net = sum(b.get(k) or 0.0 for k in ("prefill_exchange", "kv_transfer", "decode_exchange"))
            rows.append([H.fab(f), f"rep{r.index}",
                         H.escape(", ".join(f"{k} {v:.2f}" for k, v in pre.items()) or "-"),
                         H.escape(", ".join(f"{k} {v:.2f}" for k, v in dec.items()) or "-"),
                         num(b.get("ttft")), num(b.get("prefill_queue")),
                         f"{net / b['ttft']:.0%}" if b.get("ttft") else "-"])
    parts.append(H.table(["fabric", "rep", "prefill compute utilization", "decode busy", "P99 request's TTFT ms",
                          "of it: prefill queue ms", "of it: the network"], rows, left={0, 1, 2, 3}))
    parts.append('<p class="note">Prefill compute utilization: the prefill compute the requests needed over what '
                 "the prefill GPUs could do in the run (under 1 keeps up; the live driver has no utilization target, "
                 "the planned replay's 0.7-0.8 does not apply). Decode busy: the share of the run the decode engine "
                 "spent in steps. The network's part of the P99 request: its prefill EP exchange, KV transfer and "
                 "first decode step's exchange (TTFT taken apart, above).</p>")
    return "".join(parts)


def assumptions(exp: ExperimentRun) -> list[str]:
    """Every assumption the run's figures stand on, in one list, from the saved experiment."""
    e = (exp.config or {}).get("experiment") or {}
    link, s = e.get("link") or {}, e.get("serving") or {}
    rate, rep, dil = link.get("rate"), link.get("represents"), link.get("time_dilation") or 1
    out = []
    if rate and rep:
        out.append(f"Scale: {e.get('gpus')} GPUs stand for a cluster of hundreds to thousands; every emulated link "
                   f"runs at {rate / 1e6:g} Mbit/s and stands for {rep / 1e9:g} Gbit/s, so bytes are scaled by "
                   f"{rep / rate / dil:,.0f} (represents / (rate x dilation)); buffers are sized in packets, "
                   "not scaled.")
    if dil != 1:
        out.append(f"Time: the emulated world runs {dil:g}x slower than the modelled cluster; serving times are "
                   "converted back, per-packet latencies are not (a packet's serialization is dilated like the rest).")
    if s.get("driver") == "live":
        if s.get("layout"):
            from traffic.model.placement import SERVING_LAYOUTS

            lay = SERVING_LAYOUTS.get(s["layout"])
            engines = (f"layout {s['layout']} ({lay.source})" if lay else f"layout {s['layout']}") + \
                ": a TP kind runs one tensor-parallel instance a server (no all-to-all on the fabric), an EP kind " \
                "expert-parallel groups with data-parallel attention"
        else:
            engines = (f"MoE engines are one expert-parallel group per kind (prefill {s.get('prefill_ep') or 'all'} "
                       f"GPUs, decode {s.get('decode_ep') or 'all'} GPUs) with data-parallel attention")
        out += [
            f"Traffic model: {s.get('model')}; {engines}; decode sends one copy per (token, expert), prefill one "
            "per (token, GPU); same-server pairs ride NVLink, not emulated; one message per GPU pair and phase "
            "carries all MoE layers.",
            f"Compute: a decode step is {1e3 * (s.get('decode_step_s') or 0):g} ms of compute (assumed, flat), prefill "
            f"runs at the model table's tokens/s per GPU in chunks of {s.get('prefill_chunk_tokens')} tokens per "
            "GPU; a step is compute then exchange, with no overlap of the two (real engines overlap them).",
            f"Operating point: {s.get('arrivals')} arrivals"
            + (f", {s.get('concurrency')} requests in flight" if s.get("arrivals") == "closed" else "")
            + f", request sizes from {workload.served_of(exp.config)}; requests arriving in the first "
            f"{s.get('warmup_s') or 0:g} s are not measured.",
        ]
    else:
        out.append("Traffic model: the planned replay times every KV transfer from the trace before the run; nothing "
                   "waits for the network and TTFT is a proxy (queue + prefill + the transfer's tail).")
    out.append("Calibration: the seed's 100 vs 200 Gbit/s ablation is matched on ROFT, assumed to be the fabric of the "
               "seed's cluster before its migration; ZCube is never used to choose the load.")
    return out


def assumptions_section(exp: ExperimentRun) -> str:
    return "<ul>" + "".join(f"<li>{H.escape(a)}</li>" for a in assumptions(exp)) + "</ul>"

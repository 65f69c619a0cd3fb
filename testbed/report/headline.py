"""The headline: one definition of its rows and keys for every place that shows it.

``testbed run`` prints it in the terminal (``lines``), the report puts the same cells first in report.html
(``testbed.report.html.headline_block``) and keeps them in summary.json (its ``headline`` key, ``summary_keys``),
and ``testbed compare`` sets several runs' side by side (``testbed.report.comparison``). Like the rest of the
report it reads saved files only. What is here:

* **The stored counts, one key each.** A repetition's PFC pauses are its summary.json's ``pfc.pauses`` and its
  queue drops ``queue_drops`` (the backend's queue counters, first to last complete snapshot); every derived
  document calls them ``pfc_pauses`` and ``queue_drops``. ``pfc_pauses(summary)`` and ``queue_drops(summary)``
  read them, and are the one place that maps the keys of older run directories (a top-level ``pfc_pauses``
  copy, ``pauses``).
* **A repetition's figures** (``rep_headline``, keys ``HEADLINE_KEYS``) and **headline.json**
  (``fabric_headlines``: per fabric every repetition and the spread of each figure), which sweep, calibrate,
  the load curve and the sensitivity read.
* **The report's tables of every figure** (``HEADLINE``, ``LIVE_HEADLINE``, ``headline_rows``).
* **The headline of a run** (``FIGURES``): output tokens/s, TTFT P50 and TTFT P99 per fabric (the median over
  its repetitions, [min, max]); each ZCube/ROFT ratio with its 95 % interval over the repetitions and the
  verdict (``verdict``: better or worse only when that interval excludes 1); every repetition's own ratio; and
  what stands behind them: the requests and decode steps measured, fidelity, PFC pauses and queue drops. The
  interval is ``testbed.report.confidence``'s (docs/serving.md, "How sure").
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from testbed.report import port_classes
from testbed.report.fmt import flat_get, num, ratio_text

# ------------------------------------------------------------------ the stored counts, one key each
OLD_PAUSE_KEYS = ("pfc_pauses", "pauses")  # summary.json keys of older run directories (a copy; an early datapath)


def _number(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def pfc_pauses(summary: dict) -> int | float | None:
    """A repetition's PFC pause frames: its summary.json's ``pfc.pauses`` (testbed.repetition.writeup), or in a
    run directory written before that was the only key, the top-level ``pfc_pauses`` or ``pauses`` (a number,
    or a dict with its ``total``). None when none is recorded."""
    pfc = summary.get("pfc")
    if isinstance(pfc, dict) and _number(pfc.get("pauses")) is not None:
        return pfc["pauses"]
    for key in OLD_PAUSE_KEYS:
        v = summary.get(key)
        v = v.get("total") if isinstance(v, dict) else v
        if _number(v) is not None:
            return v
    return None


def pfc_enabled(summary: dict) -> bool | None:
    """Whether PFC was on in the repetition (its summary.json's ``pfc.enabled``; None when not recorded)."""
    pfc = summary.get("pfc")
    return bool(pfc.get("enabled")) if isinstance(pfc, dict) and "enabled" in pfc else None


def queue_drops(summary: dict) -> int | float | None:
    """Packets the fabric's queues (switch ports and NICs) dropped during the repetition: its summary.json's
    ``queue_drops``, from the backend's queue counters (``QueueCounters.drops``: last minus first complete
    snapshot). None when not recorded."""
    return _number(summary.get("queue_drops"))


# ------------------------------------------------------------------ a repetition's figures, headline.json
HEADLINE_KEYS = ("goodput_bps", "fct_p99_ms", "ttft_p99_ms", "ttft_p50_ms", "throughput_tokens_per_s", "pfc_pauses",
                 "queue_drops", "kv_slowdown_p99")


def read_summary(rep_dir: Path | str) -> dict:
    """A repetition's summary.json ({} when it has none or it cannot be read)."""
    try:
        doc = json.loads((Path(rep_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def rep_headline(rep_dir: Path | str) -> dict:
    """The figures of one repetition's directory, from its summary.json ({} if it has none)."""
    s = read_summary(rep_dir)
    if not s:
        return {}
    return {"goodput_bps": s.get("goodput_bps"), "goodput_real_equivalent_bps": s.get("goodput_real_equivalent_bps"),
            "fct_p99_ms": flat_get(s, "fct_ms.p99"), "ttft_p99_ms": flat_get(s, "ttft_ms.p99"),
            "ttft_p50_ms": flat_get(s, "ttft_ms.p50"), "kv_slowdown_p99": flat_get(s, "slowdown.p99"),
            "throughput_tokens_per_s": s.get("throughput_tokens_per_s"),
            "pfc_pauses": pfc_pauses(s), "queue_drops": queue_drops(s), "transfers": s.get("transfers"),
            "verified": s.get("verified"), "in_flight": s.get("in_flight")}


def spread(values: list) -> dict | None:
    """median, mean, min, max and sample stdev of the numbers among ``values`` (None: no number)."""
    nums = [v for v in values if _number(v) is not None]
    if not nums:
        return None
    return {"median": statistics.median(nums), "mean": round(statistics.fmean(nums), 6), "min": min(nums),
            "max": max(nums), "stdev": round(statistics.stdev(nums), 6) if len(nums) > 1 else 0.0, "n": len(nums)}


def planned_runs(run_dir: Path | str) -> list[dict]:
    """The repetitions a run directory planned ({"fabric", "rep", "dir", ...}: experiment.json's ``runs``), or
    without them every runs/<fabric>/rep<k>/ folder there."""
    run_dir = Path(run_dir)
    try:
        runs = json.loads((run_dir / "experiment.json").read_text()).get("runs")
    except (OSError, ValueError, AttributeError):
        runs = None
    if isinstance(runs, list):
        return runs
    return [{"fabric": d.parent.name, "rep": int(d.name[3:]), "dir": str(d.relative_to(run_dir))}
            for d in sorted(run_dir.glob("runs/*/rep*")) if d.name[3:].isdigit()]


def missing_fails(head: dict) -> bool:
    """A repetition whose transfers were not all verified fails the run, unless its in-flight verdict
    (``testbed.repetition.in_flight``, summary.json "in_flight") says only messages in flight are missing and
    its figures over the measured window stand."""
    if head.get("verified") == head.get("transfers"):
        return False
    v = head.get("in_flight")
    return not isinstance(v, dict) or bool(v.get("fails", True))


def fabric_headlines(run_dir: Path | str, planned: list[dict] | None = None) -> dict:
    """headline.json's ``fabrics``: per fabric (in the order planned) every planned repetition's figures (or its
    error) and the spread of each figure over those that finished. ``planned``: the repetitions, as
    experiment.json's ``runs`` (read from there when not given)."""
    run_dir = Path(run_dir)
    planned = planned_runs(run_dir) if planned is None else planned
    out: dict = {}
    for kind in dict.fromkeys(t["fabric"] for t in planned):
        reps = []
        for t in (t for t in planned if t["fabric"] == kind):
            d = run_dir / t["dir"]
            err = d / "error.txt"
            reps.append(dict(t) | rep_headline(d) | {
                "error": err.read_text().splitlines()[0] if err.is_file() else None})
        ok = [r for r in reps if r.get("goodput_bps") is not None]
        out[kind] = {"runs": len(reps), "ok": len(ok),
                     "unverified": sum(1 for r in ok if missing_fails(r)),
                     "in_flight": sum(1 for r in ok if r.get("verified") != r.get("transfers")
                                      and not missing_fails(r)),
                     **{k: spread([r.get(k) for r in ok]) for k in HEADLINE_KEYS + ("goodput_real_equivalent_bps",)},
                     "repetitions": reps}
    return out


# ------------------------------------------------------------------ the report's tables of every figure
# (label, summary key, unit shown, divisor, which way is better: +1 higher, -1 lower, 0 neither)
HEADLINE = (
    ("Goodput", "goodput_bps", "Mbit/s emulated", 1e6, +1),
    ("Goodput, real equivalent", "goodput_real_equivalent_bps", "Gbit/s", 1e9, +1),
    ("KV-transfer FCT P50", "fct_ms.p50", "ms", 1, -1),
    ("KV-transfer FCT P99", "fct_ms.p99", "ms", 1, -1),
    ("KV-transfer FCT P99.9", "fct_ms.p999", "ms", 1, -1),
    ("TTFT proxy P50", "ttft_ms.p50", "ms", 1, -1),
    ("TTFT proxy P99", "ttft_ms.p99", "ms", 1, -1),
    ("Requests per second", "requests_per_s", "1/s", 1, +1),
    ("Output tokens per second (live)", "throughput_tokens_per_s", "1/s", 1, +1),
    ("Decode step P50 (live)", "decode_step_ms.p50", "ms", 1, -1),
    ("EP exchange P99 (live)", "ep_exchange_ms.p99", "ms", 1, -1),
    ("PFC pauses", "pfc_pauses", "", 1, -1),
    ("Queue drops", "queue_drops", "", 1, -1),
    ("Verified transfers", "verified", "", 1, +1),
)

# a live run (serving.driver live): what the serving cluster produced first, then what the fabric carried.
# TTFT is measured (no proxy); KV goodput is emulated bytes of KV transfers, not the serving throughput.
LIVE_HEADLINE = (
    ("Output tokens per second", "throughput_tokens_per_s", "1/s", 1, +1),
    ("TTFT P50", "ttft_ms.p50", "ms", 1, -1),
    ("TTFT P99", "ttft_ms.p99", "ms", 1, -1),
    ("Requests completed per second", "requests_per_s", "1/s", 1, +1),
    ("Decode step P50", "decode_step_ms.p50", "ms", 1, -1),
    ("Decode step P99", "decode_step_ms.p99", "ms", 1, -1),
    ("EP exchange P99", "ep_exchange_ms.p99", "ms", 1, -1),
    ("KV-transfer FCT P50", "fct_ms.p50", "ms emulated wall", 1, -1),
    ("KV-transfer FCT P99", "fct_ms.p99", "ms emulated wall", 1, -1),
    ("KV goodput", "goodput_bps", "Mbit/s emulated", 1e6, +1),
    ("PFC pauses", "pfc_pauses", "", 1, -1),
    ("Queue drops", "queue_drops", "", 1, -1),
    ("Verified KV transfers", "verified", "", 1, +1),
)


def headline_rows(live: bool) -> tuple:
    """The report's table of every figure: ``LIVE_HEADLINE`` for a live run, else ``HEADLINE`` (the planned
    replay)."""
    return LIVE_HEADLINE if live else HEADLINE


# ------------------------------------------------------------------ the verdict rule
BETTER, WORSE = "better", "worse"
NOT_RESOLVED = "not resolved at this sample size"
SPREAD_UNKNOWN = "not resolved: one repetition, so the between-run spread is unknown"
NOT_MEASURED = "not measured"


def verdict(ci: list | None, higher_is_better: bool, pairs: int | None = None) -> str:
    """ZCube 'better' / 'worse' when the 95 % interval ``ci`` of the ZCube/ROFT ratio excludes 1, else not
    resolved. ``pairs``: the repetitions the interval stands on (ZCube rep k with ROFT rep k): with one there is
    no between-run spread to judge by, so nothing is resolved whatever one run's sampling says; with none
    nothing was measured."""
    if pairs is not None and pairs < 1:
        return NOT_MEASURED
    if pairs is not None and pairs < 2:
        return SPREAD_UNKNOWN
    if not ci or ci[0] is None or ci[1] is None:
        return NOT_RESOLVED
    if ci[0] > 1:
        return BETTER if higher_is_better else WORSE
    if ci[1] < 1:
        return WORSE if higher_is_better else BETTER
    return NOT_RESOLVED


# ------------------------------------------------------------------ the headline of a run
# (summary key, label, unit, higher is better): the figures the headline judges, in order
FIGURES = (("throughput_tokens_per_s", "Output tokens/s", "", True),
           ("ttft_ms.p50", "TTFT P50", "ms", False),
           ("ttft_ms.p99", "TTFT P99", "ms", False))
HIGHER_IS_BETTER = {key: higher for key, _, _, higher in FIGURES}
VERDICT_KEYS = ("throughput_tokens_per_s", "ttft_ms.p99")  # the seed's two claims
NAMES = {"zcube": "ZCube", "roft": "ROFT"}
ONE_REPETITION = ("ONE REPETITION A FABRIC: the between-run spread is unknown, so no ratio is called better or "
                  "worse. Reruns of one commit have moved these ratios by more than one run's own interval "
                  "(ROFT's ECMP hash outcome and the machine's timing are drawn anew each run); the bracket beside "
                  "a repetition's ratio is within that run only. Run 3 or more repetitions (--reps) to judge.")


def fabric_name(f: str) -> str:
    return NAMES.get(f, f)


def fabrics_of(doc: dict) -> list[str]:
    """The fabrics of a report summary document, ZCube and ROFT first (its per-fabric entries)."""
    have = [k for k, v in doc.items() if isinstance(v, dict) and v.get("fabric") == k]
    return sorted(have, key=lambda f: (list(NAMES).index(f) if f in NAMES else 9, f))


def _range(entry: dict, key: str) -> dict:
    sp = (entry.get("spread") or {}).get(key)
    return {"median": flat_get(entry, key), "min": sp[0] if sp else None, "max": sp[1] if sp else None}


def summary_keys(doc: dict) -> dict:
    """summary.json's ``headline``: what the terminal and the page's headline show, from the report's summary
    document (``testbed.report.build.summarize``: the aggregate, its ``confidence`` and title verdict)."""
    fabrics = fabrics_of(doc)
    both = "zcube" in fabrics and "roft" in fabrics
    conf = doc.get("confidence") or {}
    figures = {}
    for key, label, unit, higher in FIGURES:
        c = (conf.get("ratios") or {}).get(key) or {}
        fig: dict = {"label": label, "unit": unit, "higher_is_better": higher}
        fig |= {f: _range(doc[f], key) for f in fabrics}
        fig |= {"ratio": (doc.get("ratios") or {}).get(key) if both else None, "ci95": c.get("ci95"),
                "verdict": c.get("verdict") or NOT_MEASURED, "per_rep": list(c.get("per_rep") or [])}
        figures[key] = fig
    pairs = list(conf.get("pairs") or [])
    samples = conf.get("samples") or {}

    def measured(what: str) -> dict | None:
        return {f: list(samples[f][what]) for f in fabrics if f in samples} or None

    return {"fabrics": fabrics, "reps": {f: doc[f].get("reps") for f in fabrics}, "pairs": pairs,
            "between_run": len(pairs) >= 2, "warning": ONE_REPETITION if both and len(pairs) == 1 else None,
            "figures": figures, "requests_measured": measured("requests"),
            "decode_steps_measured": measured("decode_steps"),
            "fidelity_ok": bool(doc.get("fidelity_ok")), "fidelity_problems": len(doc.get("fidelity_problems") or []),
            "pfc_pauses": {f: _range(doc[f], "pfc_pauses") for f in fabrics},
            "queue_drops": {f: _range(doc[f], "queue_drops") for f in fabrics},
            "congestion": port_classes.sentence({f: doc[f].get("per_rep") or [] for f in fabrics}) if both else None,
            "prefix_cache": {f: doc[f].get("prefix_cache") for f in fabrics if doc[f].get("prefix_cache")} or None,
            "verdict": doc.get("verdict")}


def _spread_text(r: dict) -> str:
    """'4,068' or '4,068 [4,060, 4,070]' (median [min, max] when the repetitions differ)."""
    text = num(r.get("median"))
    if r.get("min") is not None and r.get("min") != r.get("max"):
        text += f" [{num(r['min'])}, {num(r['max'])}]"
    return text


def interval_text(ci: list | None, pairs: int) -> str:
    if ci:
        return f"[{ci[0]:.3f}, {ci[1]:.3f}]"
    return "unknown (1 repetition)" if pairs == 1 else "-"


def verdict_text(v: str) -> str:
    return f"ZCube {v}" if v in (BETTER, WORSE) else v


def figure_table(h: dict) -> tuple[list[str], list[list[str]]]:
    """(head, rows) of the headline's figures: per fabric median [min, max], the ratio, its 95 % interval over
    the repetitions and the verdict (plain text: the terminal prints it, the page escapes it)."""
    both = "zcube" in h["fabrics"] and "roft" in h["fabrics"]
    head = ["figure", *[fabric_name(f) for f in h["fabrics"]]]
    if both:
        head += ["ZCube / ROFT", "95% interval", "verdict"]
    rows = []
    for fig in h["figures"].values():
        row = [fig["label"] + (f" ({fig['unit']})" if fig["unit"] else "")]
        row += [_spread_text(fig[f]) for f in h["fabrics"]]
        if both:
            row += [ratio_text(fig["ratio"]),
                    interval_text(fig["ci95"], len(h["pairs"]) if fig["ratio"] is not None else 0),
                    verdict_text(fig["verdict"])]
        rows.append(row)
    return head, rows


def rep_table(h: dict) -> tuple[list[str], list[list[str]]] | None:
    """(head, rows) of every repetition pair: per figure 'ZCube rep k / ROFT rep k = their ratio', with the
    ratio's 95 % interval within that run in brackets (a bootstrap over its requests or decode steps) where the
    run's files allow one; None without a pair."""
    if not h["pairs"]:
        return None
    head = ["repetition"] + [fig["label"] + (f" ({fig['unit']})" if fig["unit"] else "")
                             for fig in h["figures"].values()]
    rows = []
    for k in h["pairs"]:
        row = [f"rep{k}"]
        for fig in h["figures"].values():
            p = next((p for p in fig["per_rep"] if p["rep"] == k), {})
            ci = p.get("within_ci95")
            row.append(f"{num(p.get('zcube'))} / {num(p.get('roft'))} = {ratio_text(p.get('ratio'))}"
                       + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""))
        rows.append(row)
    return head, rows


REP_CAPTION = ("Every repetition: ZCube rep k / ROFT rep k (the same seed) = their ratio [its 95% interval within "
               "that run alone: a bootstrap over the run's requests or decode steps, shown, never deciding]")


def _per_fabric(h: dict, key: str) -> str:
    return ", ".join(f"{fabric_name(f)} {_spread_text(h[key][f])}" for f in h["fabrics"])


def facts(h: dict) -> list[str]:
    """What stands behind the headline, one line each: repetitions and their pairing, what was measured,
    fidelity, PFC pauses and queue drops."""
    reps = ", ".join(f"{fabric_name(f)} {h['reps'][f]}" for f in h["fabrics"])
    paired = (f"; paired by seed: {', '.join(f'rep{k}' for k in h['pairs'])}" if h["pairs"] else
              "; no repetition ran on both fabrics" if len(h["fabrics"]) > 1 else "")
    out = [f"repetitions: {reps}{paired}"]
    for what, noun in (("requests_measured", "requests measured (TTFT)"),
                       ("decode_steps_measured", "decode steps measured (output tokens/s)")):
        if h.get(what):
            out.append(f"{noun}: " + ", ".join(f"{fabric_name(f)} {' + '.join(str(n) for n in ns)}"
                                                for f, ns in h[what].items()) + " (per repetition)")
    short = lacking_requests(h)
    if short:
        out.append(short)
    out.append("fidelity: ok" if h["fidelity_ok"] else
               f"fidelity: NOT ok ({h['fidelity_problems']} problem{'s' if h['fidelity_problems'] != 1 else ''}: "
               "these numbers may describe the emulator, not the fabric; the report's Fidelity section lists them)")
    out.append(f"PFC pauses: {_per_fabric(h, 'pfc_pauses')}; queue drops: {_per_fabric(h, 'queue_drops')}")
    if h.get("prefix_cache"):
        out.append(prefix_cache_line(h["prefix_cache"]))
    return out


def percent(v) -> str:
    """A ratio as '89.6 %' ('-' for none)."""
    return "-" if v is None else f"{100 * v:.1f} %"


PREFIX_NOTE = ("Prefix-cache hit: the prompt tokens each request's prefill unit had cached (not computed) over its "
               "prompt tokens, summed over the requests (token-weighted, as vLLM and SGLang count it); GPU: found in "
               "the prefill GPU's own pool; host tier: held only by the host-memory tier behind it (SGLang HiCache) "
               "and loaded into the GPU first. The two add up to the hit.")


def prefix_cache_text(p: dict) -> str:
    """One fabric's prefix-cache hit: '89.6 % (GPU 61.9 % + host 27.7 %; repetitions 89.5, 89.6, 89.8 %)', or
    why there is none."""
    if not p.get("cache") and not p.get("assumed_hit"):
        return "none (serving.prefix_cache false)"
    reps = [r.get("hit_rate") for r in p.get("per_rep") or []]
    each = (f"; repetitions {', '.join('-' if v is None else f'{100 * v:.1f}' for v in reps)} %"
            if len(reps) > 1 else "")
    tiers = (f"GPU {percent(p.get('device_hit_rate'))} + host {percent(p.get('host_hit_rate'))}"
             if p.get("hicache_ratio") else "GPU only")
    assumed = ""
    if p.get("assumed_hit") and p.get("with_hash_ids", 0) < (p.get("requests") or 0):
        assumed = f"; serving.prefix_hit {p['assumed_hit']:g} assumed for requests without hash_ids"
    return f"{percent(p.get('hit_rate'))} ({tiers}{each}{assumed})"


def prefix_cache_line(per_fabric: dict) -> str:
    """The terminal's line of the prefix cache's hit per fabric (what vLLM and SGLang print first)."""
    return ("prefix-cache hit, token-weighted over the measured requests (TTFT's): "
            + ", ".join(f"{fabric_name(f)} {prefix_cache_text(p)}" for f, p in per_fabric.items()))


ENOUGH_REQUESTS = 1000  # measured requests a fabric for a TTFT P99 ratio of +-6 % (docs/serving.md, How sure)


def lacking_requests(h: dict) -> str | None:
    """One line when a fabric measured fewer than ``ENOUGH_REQUESTS`` requests: how many it has and what the TTFT
    P99 then rests on (None when every fabric has enough, or nothing was counted)."""
    counts = {f: sum(ns) for f, ns in (h.get("requests_measured") or {}).items()}
    if not counts or min(counts.values()) >= ENOUGH_REQUESTS:
        return None
    fewest = min(counts.values())
    rank = max(1, fewest - math.ceil(0.99 * fewest) + 1)
    return (f"LACKS REQUESTS: {', '.join(f'{fabric_name(f)} {n}' for f, n in counts.items())} measured, of the "
            f"{ENOUGH_REQUESTS:,} a fabric a TTFT P99 ratio resolved to about +-6 % needs (docs/serving.md, How sure): "
            f"each repetition's P99 is among its few slowest requests (over all repetitions, the {rank}"
            f"{'st' if rank == 1 else 'nd' if rank == 2 else 'rd' if rank == 3 else 'th'} slowest of {fewest}); "
            "more repetitions or longer ones would add them")


NOTE = ("Per fabric: the median over its repetitions [min, max]. ZCube / ROFT: the geometric mean of ZCube rep k / "
        "ROFT rep k (the same seed); 95% interval: Student's t over the log of those per-repetition ratios "
        "(docs/serving.md, How sure). ZCube is better or worse only when that interval excludes 1.")


def columns(rows: list[list[str]]) -> list[str]:
    """Rows of cells as left-aligned text columns two spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def lines(h: dict) -> list[str]:
    """The terminal's headline: the title verdict, the loud one-repetition warning, the figures, every
    repetition's ratios and what stands behind them (the report's headline, as text)."""
    out = [f"headline: {h['verdict']}" if h.get("verdict") else "headline"]
    if h.get("warning"):
        out.append(h["warning"])
    head, rows = figure_table(h)
    out += columns([head, *rows])
    reps = rep_table(h)
    if reps:
        out += ["", REP_CAPTION]
        out += columns([reps[0], *reps[1]])
    out.append("")
    if h.get("congestion"):
        out.append(f"where the congestion is: {h['congestion']}")
    out += facts(h)
    out.append(NOTE)
    return out


__all__ = ["pfc_pauses", "pfc_enabled", "queue_drops", "HEADLINE_KEYS", "rep_headline", "spread", "planned_runs",
           "fabric_headlines", "HEADLINE", "LIVE_HEADLINE", "headline_rows", "verdict", "BETTER", "WORSE",
           "NOT_RESOLVED", "SPREAD_UNKNOWN", "NOT_MEASURED", "FIGURES", "VERDICT_KEYS", "HIGHER_IS_BETTER",
           "summary_keys", "figure_table", "rep_table", "facts", "lines", "columns", "prefix_cache_text",
           "prefix_cache_line", "percent", "PREFIX_NOTE"]

"""The seed's production claims and honest sentences about whether a run matches them.

The seed paper reports, for ZCube over ROFT in production: +15% throughput,
-40.6% TTFT P99 and -33% switch + optics capex. A run "matches" a figure when
its ZCube/ROFT ratio goes the same way by a similar amount (between half and
twice the seed's effect). An effect smaller than the run can resolve is
reported as not reproduced, never as a match. For the headline's figures (output
tokens/s, TTFT P50 and P99) their 95% interval over the repetitions decides
(``testbed.report.confidence``; one repetition resolves nothing); for the others:
under 5%, or, with repetitions,
[min, max] ranges that overlap (the repetitions measure the noise), or, with
one repetition (or identical ones), FCT percentiles whose 95% confidence
intervals overlap. Where the load explains a null result (idle links, a TTFT
dominated by prefill time) the sentence says so; when a replay flagged the
cluster overloaded (a prefill queue that keeps growing), the TTFT sentence and
the title say that TTFT measures the prefill queue, not the network.
"""

from __future__ import annotations

import math

from testbed.report import headline
from testbed.report.fmt import flat_get

SEED_FIGURES = {
    "goodput_bps": {"ratio": 1.15, "claim": "+15% throughput", "name": "goodput", "higher_is_better": True},
    "throughput_tokens_per_s": {"ratio": 1.15, "claim": "+15% throughput", "name": "output tokens/s",
                                "higher_is_better": True},
    "ttft_ms.p99": {"ratio": 0.594, "claim": "-40.6% TTFT P99", "name": "TTFT P99", "higher_is_better": False},
    "capex_units": {"ratio": 0.67, "claim": "-33% switch + optics capex", "name": "capex",
                    "higher_is_better": False},
}
RESOLUTION = 0.05  # smallest relative difference trusted without a confidence interval saying more
IDLE_UTILIZATION = 0.5
PREFILL_DOMINATED = 0.1


def _pct(r: float) -> str:
    e = (r - 1) * 100
    return f"{e:+.2f}%" if abs(e) < 1 else f"{e:+.1f}%"


def _overlap(a: list, b: list) -> bool:
    """Intervals with None for an open end."""
    a_lo, b_lo = (-math.inf if x[0] is None else x[0] for x in (a, b))
    a_hi, b_hi = (math.inf if x[1] is None else x[1] for x in (a, b))
    return a_lo <= b_hi and b_lo <= a_hi


def _ci(c: list) -> str:
    return f"{'open' if c[0] is None else f'{c[0]:g}'}..{'open' if c[1] is None else f'{c[1]:g}'}"


def _conf(summary: dict, key: str) -> dict:
    return ((summary.get("confidence") or {}).get("ratios") or {}).get(key) or {}


def _conf_verdict(conf: dict, key: str) -> str | None:
    """The verdict the report's confidence gave a ratio (``headline.verdict``; from its ci95 alone in a document
    that holds no verdict); None when it has neither."""
    if conf.get("verdict"):
        return conf["verdict"]
    if conf.get("ci95"):
        return headline.verdict(conf["ci95"], _higher(key))
    return None


def _higher(key: str) -> bool:
    return headline.HIGHER_IS_BETTER.get(key, SEED_FIGURES.get(key, {}).get("higher_is_better", True))


def resolvable(summary: dict, key: str) -> tuple[bool, str]:
    """Whether the ZCube/ROFT difference of ``key`` exceeds what the run can resolve, and why not."""
    r = summary.get("ratios", {}).get(key)
    if r is None:
        return False, "not measured"
    conf = _conf(summary, key)
    v = _conf_verdict(conf, key)
    if v is not None:  # a headline figure: its interval over the repetitions decides
        if v in (headline.BETTER, headline.WORSE):
            return True, ""
        if conf.get("ci95"):
            lo, hi = conf["ci95"]
            return False, (f"its 95% interval {lo:.3f}..{hi:.3f} includes 1 (not resolved at this sample size)")
        if v == headline.SPREAD_UNKNOWN:
            return False, "one repetition a fabric, so the between-run spread is unknown (not resolved)"
        return False, v
    if abs(r - 1) < RESOLUTION:
        return False, f"under the {RESOLUTION:.0%} this testbed resolves"
    sz, sr = (summary[f].get("spread", {}).get(key) for f in ("zcube", "roft"))
    # repetitions measure the run-to-run noise directly, unless they are all identical (copies tell nothing)
    if summary.get("reps", 1) > 1 and sz and sr and not (sz[0] == sz[1] and sr[0] == sr[1]):
        if _overlap(sz, sr):
            return False, f"the repetitions overlap (ZCube {sz[0]:g}..{sz[1]:g}, ROFT {sr[0]:g}..{sr[1]:g})"
        return True, ""
    cz, cr = (summary[f].get("ci95", {}).get(key) for f in ("zcube", "roft"))
    if cz and cr and _overlap(cz, cr):
        return False, f"their 95% confidence intervals overlap (ZCube {_ci(cz)}, ROFT {_ci(cr)})"
    return True, ""


def verdict_of(summary: dict, key: str) -> str:
    """ZCube better / worse / not resolved on ``key`` as the report decides it: a headline figure's verdict from
    its interval over the repetitions (``headline.verdict``), else (a figure without one, or a summary.json
    from before the intervals) ``resolvable``'s rule; not measured without a ratio."""
    r = (summary.get("ratios") or {}).get(key)
    if r is None:
        return headline.NOT_MEASURED
    v = _conf_verdict(_conf(summary, key), key)
    if v is not None:
        return v
    ok, _ = resolvable(summary, key)
    if not ok:
        return headline.NOT_RESOLVED
    return headline.BETTER if (r > 1) == _higher(key) else headline.WORSE


def _context(summary: dict, key: str) -> str:
    z, r = summary.get("zcube", {}), summary.get("roft", {})
    if key == "goodput_bps":
        utils = [u for u in (z.get("max_link_utilization"), r.get("max_link_utilization")) if u is not None]
        if utils and max(utils) < IDLE_UTILIZATION:
            return (f" Neither fabric was loaded (busiest link at {max(utils):.1%} of its rate), so both carried "
                    "the whole offered load: goodput here measures the trace, not the fabric.")
    if key == "ttft_ms.p99":
        over = overload_sentence(summary)
        if over:
            return " " + over
        if summary.get("live"):
            return _live_ttft_context(summary)
        shares = [flat_get(f, "fct_ms.p99") / flat_get(f, "ttft_ms.p99") for f in (z, r)
                  if flat_get(f, "fct_ms.p99") is not None and flat_get(f, "ttft_ms.p99")]
        if shares and max(shares) < PREFILL_DOMINATED:
            return (f" The TTFT proxy is dominated by prefill and queueing: the KV-transfer FCT P99 is at most "
                    f"{max(shares):.1%} of the TTFT P99, so the fabric can barely move it.")
    return ""


NETWORK_PARTS = ("prefill_exchange", "kv_transfer", "decode_exchange")


def _live_ttft_context(summary: dict) -> str:
    """How much of the P99 request's TTFT the network was, in a live run (its ttft_breakdown_ms): the
    prefill EP exchange, the KV transfer and the first decode step's exchange; '' without the parts."""
    shares = []
    for f in ("zcube", "roft"):
        for m in (summary.get(f) or {}).get("per_rep") or []:
            b = ((m.get("ttft_breakdown_ms") or {}).get("p99")) or {}
            if b.get("ttft"):
                shares.append(sum(b.get(k) or 0.0 for k in NETWORK_PARTS) / b["ttft"])
    if not shares:
        return ""
    text = (f" The network's part of the P99 request's TTFT (its prefill EP exchange, KV transfer and first "
            f"decode step's exchange) is {min(shares):.0%}-{max(shares):.0%} over the fabrics and repetitions")
    if max(shares) < PREFILL_DOMINATED:
        return text + ": the fabric can barely move it."
    return text + "."


OVERLOADED = "The cluster is overloaded; TTFT measures the prefill queue, not the network"


def _overloaded(summary: dict) -> list[str]:
    """Fabrics whose replays the report flagged overloaded (operating_point.overloaded)."""
    return [f for f, e in summary.items() if isinstance(e, dict) and (e.get("operating_point") or {}).get("overloaded")]


def overload_numbers(summary: dict) -> str:
    """'prefill utilization up to 1.00, offered load up to 1.88; TTFT proxy P99 10,100 ms, of which the
    KV-transfer FCT P99 is at most 2.6%' over the flagged fabrics (parts left out when unknown)."""
    flagged = _overloaded(summary)
    utils = [u for f in flagged for u in summary[f]["operating_point"].get("prefill_utilization", {}).values()]
    loads = [v for f in flagged for v in summary[f]["operating_point"].get("prefill_offered_load", {}).values()]
    bits = []
    if utils:
        bits.append(f"prefill utilization up to {max(utils):.2f}")
    if loads:
        bits.append(f"offered load up to {max(loads):.2f} (over 1: more prefill work arrives than the instance "
                    "can do)" if max(loads) > 1 else f"offered load up to {max(loads):.2f}")
    ttft = [flat_get(summary[f], "ttft_ms.p99") for f in flagged if flat_get(summary[f], "ttft_ms.p99") is not None]
    shares = [flat_get(summary[f], "fct_ms.p99") / flat_get(summary[f], "ttft_ms.p99") for f in flagged
              if flat_get(summary[f], "fct_ms.p99") is not None and flat_get(summary[f], "ttft_ms.p99")]
    text = ", ".join(bits)
    if ttft:
        text += ("; " if text else "") + f"TTFT proxy P99 {max(ttft) / 1e3:.3g} s"
        if shares:
            text += f", of which the KV-transfer FCT P99 is at most {max(shares):.1%}" + (
                ": the fabric can barely move it" if max(shares) < PREFILL_DOMINATED else "")
    return text


def overload_sentence(summary: dict) -> str:
    """One sentence when any replay was flagged overloaded, else ''."""
    flagged = _overloaded(summary)
    if not flagged:
        return ""
    names = " and ".join("ZCube" if f == "zcube" else f.upper() if f == "roft" else f for f in flagged)
    numbers = overload_numbers(summary)
    return f"{OVERLOADED} ({names}{': ' + numbers if numbers else ''})."


def judge(summary: dict, key: str, measured: float | None = None, source: str = "") -> dict:
    """One seed figure against this run: {figure, claim, seed, measured, status, sentence}."""
    seed = SEED_FIGURES[key]
    r = measured if measured is not None or key == "capex_units" else summary.get("ratios", {}).get(key)
    row = {"figure": key, "claim": seed["claim"], "seed": seed["ratio"], "measured": r}
    what = f"ZCube's {seed['name']} is"
    if r is None:
        missing = [f for f in ("zcube", "roft") if f not in summary]
        why = f"no {' or '.join(m.upper() if m == 'roft' else 'ZCube' for m in missing)} run" if missing else "no value"
        return row | {"status": "not measured",
                      "sentence": f"Not measured: {why} to compare against the seed's {seed['claim']}."}
    if key == "capex_units":
        ok, why = abs(r - 1) >= RESOLUTION, "the model shows no difference"
    else:
        ok, why = resolvable(summary, key)
    head = f"{what} {r:.3f}x ROFT's ({_pct(r)})"
    if not ok:
        status, text = "not reproduced", f"Not reproduced: {head}, {why}, against the seed's {seed['claim']}."
    elif (r > 1) != (seed["ratio"] > 1):
        status, text = "contradicts", f"Contradicts the seed: {head}, the opposite direction to its {seed['claim']}."
    else:
        size = (r - 1) / (seed["ratio"] - 1)
        if 0.5 <= size <= 2:
            status = "matches"
            text = f"Matches: {head}, the same direction as the seed's {seed['claim']} and a similar size."
        else:
            status = "same direction, smaller" if size < 0.5 else "same direction, larger"
            text = (f"Same direction, {'smaller' if size < 0.5 else 'larger'}: {head} against the seed's "
                    f"{seed['claim']} ({abs(size):.1f}x its effect).")
    if source:
        text += f" ({source}.)"
    return row | {"status": status, "sentence": text + _context(summary, key)}


def seed_comparison(summary: dict, cost: dict) -> list[dict]:
    capex = (cost.get("ratios") or {}).get("capex_units")
    where = f" at n={cost['gpus']}" if cost.get("gpus") else ""
    src = f"From {cost.get('source')}{where}: a model, not a measurement" if capex is not None else ""
    live = summary.get("ratios", {}).get("throughput_tokens_per_s") is not None  # serving throughput measured
    return [judge(summary, "throughput_tokens_per_s" if live else "goodput_bps"), judge(summary, "ttft_ms.p99"),
            judge(summary, "capex_units", capex, src)]


def title_verdict(summary: dict) -> str:
    """One line for the page title: who wins on goodput and the tails, or that nobody does."""
    have = [f for f in ("zcube", "roft") if f in summary]
    suffix = "; the cluster is overloaded, so TTFT measures the prefill queue, not the network" \
        if _overloaded(summary) else ""
    if len(have) < 2:
        only = have[0] if have else "unknown"
        return f"only {'ZCube' if only == 'zcube' else only.upper()} ran: no comparison" + suffix
    return _winner(summary) + suffix


def _winner(summary: dict) -> str:
    first = (("throughput_tokens_per_s", "output tokens/s", True)
             if summary["ratios"].get("throughput_tokens_per_s") is not None else ("goodput_bps", "goodput", True))
    checks = (first, ("fct_ms.p99", "FCT P99", False), ("ttft_ms.p99", "TTFT P99", False))
    zwins, rwins = [], []
    for key, name, higher in checks:
        ok, _ = resolvable(summary, key)
        r = summary["ratios"].get(key)
        if ok and r is not None:
            ((zwins if (r > 1) == higher else rwins)).append(f"{name} x{r:.2f}")
    if not zwins and not rwins:
        return "no measurable difference between ZCube and ROFT on this load"
    if zwins and not rwins:
        return "ZCube ahead: " + ", ".join(zwins)
    if rwins and not zwins:
        return "ROFT ahead: ZCube " + ", ".join(rwins)
    return f"mixed: ZCube better on {', '.join(zwins)}; ROFT better on {', '.join(rwins)}"

"""The headline's keys, one each, and its verdict rule.

A repetition's PFC pauses are its summary.json's ``pfc.pauses`` and its queue drops ``queue_drops`` (the backend's
queue counters, first to last complete snapshot); every derived document calls them ``pfc_pauses`` and
``queue_drops``. ``pfc_pauses(summary)`` and ``queue_drops(summary)`` read them, and are the one place that maps
the keys of older run directories (a top-level ``pfc_pauses`` copy, ``pauses``). Like the rest of the report
this reads saved files only.

The verdict (``verdict``) on the headline's figures (``FIGURES``: output tokens/s, TTFT P50 and P99): ZCube
better or worse only when the ratio's 95 % interval over the repetitions (``testbed.report.confidence``)
excludes 1; with one repetition nothing is resolved.
"""

from __future__ import annotations

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


# (summary key, label, unit, higher is better): the figures the headline judges, in order
FIGURES = (("throughput_tokens_per_s", "Output tokens/s", "", True),
           ("ttft_ms.p50", "TTFT P50", "ms", False),
           ("ttft_ms.p99", "TTFT P99", "ms", False))
HIGHER_IS_BETTER = {key: higher for key, _, _, higher in FIGURES}
VERDICT_KEYS = ("throughput_tokens_per_s", "ttft_ms.p99")  # the seed's two claims


__all__ = ["pfc_pauses", "pfc_enabled", "queue_drops", "verdict", "BETTER", "WORSE", "NOT_RESOLVED", "SPREAD_UNKNOWN",
           "NOT_MEASURED", "FIGURES", "VERDICT_KEYS", "HIGHER_IS_BETTER"]

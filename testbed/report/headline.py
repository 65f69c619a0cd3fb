"""The headline's keys, one each: what the terminal (``testbed run``), the report and the experiments' documents
read out of a repetition's summary.json.

A repetition's PFC pauses are its summary.json's ``pfc.pauses`` and its queue drops ``queue_drops`` (the backend's
queue counters, first to last complete snapshot); every derived document calls them ``pfc_pauses`` and
``queue_drops``. ``pfc_pauses(summary)`` and ``queue_drops(summary)`` read them, and are the one place that maps
the keys of older run directories (a top-level ``pfc_pauses`` copy, ``pauses``). Like the rest of the report
this reads saved files only.
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


__all__ = ["pfc_pauses", "pfc_enabled", "queue_drops"]

"""Which figures of a repetition still stand when it ended with messages in flight.

A run stops at its horizon (the twin: the window's end plus a 30 s drain; the emulator: the coordinator's
drain timeout) with some messages never delivered. The rule (summary.json "in_flight"; ``verdict``):

* **Figures over the measured window** (TTFT P50/P99 and the requests measured, output tokens/s, completed
  requests) count only what happened by the window's end: requests arriving in [warmup, end), first tokens
  and decode steps by the end. A message still in flight when the run stopped had not arrived by the
  window's end, so had it arrived later none of these would change: they **stand** whenever the run got past
  the window's end. A measured request with a message in flight is one of ``first_token_missing`` (or not
  completed), as any request whose first token came after the end; the verdict counts them.
  Messages sent after the window's end, or belonging to requests not measured, are named apart (the brief
  case in which nothing measured was even waiting for them).
* **Figures over every message of the run** leave the messages in flight out: KV transfer FCT, slowdown,
  goodput and requests/s (transfers.csv, headline ``fct_p99_ms``, ``kv_slowdown_p99``, ``goodput_bps``) when a KV
  transfer is in flight; EP exchange and decode step times when an EP message is. They are **censored**:
  the verdict names them and gives the KV FCT P99 with each transfer in flight counted at the least it
  would have taken (its age when the run stopped), a lower bound of the true P99.
* **The run fails** (exit status 1) when a window figure is affected (the run stopped before the window's
  end), when a transfer failed for another reason than being in flight (wrong bytes, a crashed sender), or,
  for the planned replay (no window: every figure is over all its transfers), when any transfer is missing.
  A run whose only missing messages were in flight passes, with a warning naming the censored figures.
"""

from __future__ import annotations

from traffic.model.metrics import percentile
from traffic.runtime.records import NEVER_COMPLETED as IN_FLIGHT  # the error of a message still in flight

WINDOW_FIGURES = ("ttft_ms", "throughput_tokens_per_s", "requests_completed", "completed_requests_per_s",
                  "first_token_missing")
KV_FIGURES = ("fct_ms", "slowdown", "goodput_bps", "goodput_real_equivalent_bps", "requests_per_s")
EP_FIGURES = ("ep_exchange_ms", "ep_exchange_vs_ideal", "decode_step_ms")


def _is_kv(row: dict) -> bool:
    return row.get("kind") in (None, "kv")


def nearest_rank(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile ``q`` (0-100) of ``values``, the summary's rule (None: no value)."""
    return float(percentile(values, q)) if values else None


def verdict(rows: list[dict], *, driver: str, stopped_s: float, dilation: float = 1.0,
            window: tuple[float, float] | None = None, measured: set | None = None) -> dict:
    """The in-flight verdict of one repetition.

    ``rows``: every merged row (KV and EP; ``start``/``end`` in run seconds after t0, ``verified``, ``error``,
    ``request_id``, ``kind``); ``driver``: "live" or "plan"; ``stopped_s``: when the run stopped (run seconds
    after t0); ``dilation``: run seconds per cluster second; ``window``: the measured window (warmup, end) in
    cluster seconds (live only); ``measured``: the ids of the measured requests (live only)."""
    missing = [r for r in rows if not r.get("verified")]
    in_flight = [r for r in missing if (r.get("error") or IN_FLIGHT) == IN_FLIGHT]
    failed = [r for r in missing if (r.get("error") or IN_FLIGHT) != IN_FLIGHT]
    kv = [r for r in in_flight if _is_kv(r)]
    ep = [r for r in in_flight if not _is_kv(r)]
    live = driver == "live" and window is not None
    end_s = window[1] * dilation if live else None
    after = [r for r in in_flight if live and r.get("start") is not None and r["start"] >= end_s]
    later = {id(r) for r in after}
    measured = measured or set()
    of_measured = {r["request_id"] for r in kv if live and r.get("request_id") in measured and id(r) not in later}
    unmeasured = [r for r in kv if live and id(r) not in later and r.get("request_id") not in measured]
    window_stands = live and stopped_s >= end_s
    affected: list[str] = []
    if not window_stands:
        affected += list(WINDOW_FIGURES) if live else []
    censored: list[str] = []
    if kv or any(_is_kv(r) for r in failed):
        censored += list(KV_FIGURES)
    if ep:
        censored += list(EP_FIGURES)
    kv_failed = [r for r in failed if _is_kv(r)]
    fails = bool(kv_failed) or (live and not window_stands and bool(missing)) or (not live and bool(
        [r for r in missing if _is_kv(r)]))
    fct = [r["end"] - r["start"] for r in rows if r.get("verified") and _is_kv(r)]
    ages = [stopped_s - r["start"] for r in kv if r.get("start") is not None]
    p99 = nearest_rank(fct, 99)
    p99_counted = nearest_rank(fct + ages, 99)
    out = {
        "messages": len(in_flight), "kv": len(kv), "ep": len(ep), "failed_otherwise": len(failed),
        "sent_after_window": len(after), "kv_of_unmeasured_requests": len(unmeasured),
        "measured_requests_waiting": len(of_measured),
        "stopped_s": round(stopped_s, 6), "window_end_s": None if end_s is None else round(end_s, 6),
        "window_figures_stand": bool(window_stands) if live else None,
        "affected": affected, "censored": censored if missing else [],
        "fct_p99_ms": None if p99 is None else round(p99 * 1e3, 3),
        "fct_p99_ms_counting_in_flight_at_least": None if p99_counted is None or not ages else round(
            p99_counted * 1e3, 3),
        "fails": fails,
    }
    out["note"] = note(out, live)
    return out


def note(v: dict, live: bool) -> str:
    """One line for the log and the summary's warnings (empty when nothing was missing)."""
    if not v["messages"] and not v["failed_otherwise"]:
        return ""
    parts = [f"{v['messages']} messages in flight when the run stopped ({v['kv']} KV, {v['ep']} EP"
             + (f"; {v['sent_after_window']} sent after the window, {v['kv_of_unmeasured_requests']} KV of requests "
                f"not measured, {v['measured_requests_waiting']} measured requests waiting on one" if live else "")
             + ")"]
    if v["failed_otherwise"]:
        parts.append(f"{v['failed_otherwise']} failed otherwise")
    if live:
        parts.append("the measured window's figures (TTFT, output tokens/s, completed requests) stand: the run went "
                     "past the window's end" if v["window_figures_stand"] else
                     "the measured window's figures are affected: the run stopped before the window's end")
    if v["censored"]:
        text = f"censored (over the messages delivered only): {', '.join(v['censored'])}"
        if v["fct_p99_ms_counting_in_flight_at_least"] is not None:
            text += (f"; KV FCT P99 {v['fct_p99_ms']} ms over those delivered, at least "
                     f"{v['fct_p99_ms_counting_in_flight_at_least']} ms counting those in flight")
        parts.append(text)
    parts.append("the run fails" if v["fails"] else "the run does not fail for it")
    return "; ".join(parts)


__all__ = ["verdict", "note", "nearest_rank", "IN_FLIGHT", "WINDOW_FIGURES", "KV_FIGURES", "EP_FIGURES"]

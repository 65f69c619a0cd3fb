"""Number formatting and the headline rows shared by the HTML page, headline.csv and ``compare``.

One table definition (label, key, unit, scale) keeps the three outputs in
step: a row added here appears everywhere.
"""

from __future__ import annotations

from testbed.report.stats import flat_get

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
    """The headline's rows: ``LIVE_HEADLINE`` for a live run, else ``HEADLINE`` (the planned replay)."""
    return LIVE_HEADLINE if live else HEADLINE


def num(v, digits: int = 3) -> str:
    """Significant digits without scientific notation for everyday magnitudes; '-' for None."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) >= 1000):
        return f"{int(v):,}"
    if v == 0:
        return "0"
    if abs(v) >= 10 ** digits:
        return f"{v:,.0f}"
    if abs(v) < 1e-3:
        return f"{v:.2e}"
    text = f"{v:#.{digits}g}"  # '#': keep trailing zeros, so 5.60 and 5.39 line up
    return text.rstrip(".") if "e" not in text else f"{v:g}"


def scaled(entry: dict, key: str, div: float) -> tuple:
    """(median, min, max) of ``key`` divided by ``div`` (None when absent)."""
    v = flat_get(entry, key)
    spread = (entry.get("spread") or {}).get(key)
    def d(x):
        return x / div if x is not None and div != 1 else x

    return d(v), (d(spread[0]) if spread else None), (d(spread[1]) if spread else None)


def cell_text(entry: dict | None, key: str, div: float, reps: int) -> str:
    """'12.3' or '12.3 [11.9, 12.8]' with repetitions, or 'verified/transfers' for the verified row."""
    if not entry:
        return "-"
    if key == "verified":
        return f"{num(flat_get(entry, 'verified'))}/{num(flat_get(entry, 'transfers'))}"
    v, lo, hi = scaled(entry, key, div)
    text = num(v)
    if reps > 1 and lo is not None and lo != hi:
        text += f" [{num(lo)}, {num(hi)}]"
    return text


def ratio_text(r) -> str:
    return "-" if r is None else f"{r:.3f}"

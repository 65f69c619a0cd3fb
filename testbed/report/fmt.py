"""Number formatting and reading a figure out of a nested summary (``flat_get``), for every output of the
report: the HTML page, headline.csv, the terminal's headline and ``compare``.

The headline's rows themselves are ``testbed.report.headline``'s.
"""

from __future__ import annotations


def flat_get(doc: dict, key: str):
    """``doc["fct_ms"]["p99"]`` for key "fct_ms.p99" (None when absent)."""
    cur = doc
    for part in key.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


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

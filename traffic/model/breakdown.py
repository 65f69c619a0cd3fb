"""Where a run's time went: its requests' TTFT parts and its decode steps' phases, from the rows the serving
model writes (``Cluster.request_rows`` / requests.csv, ``Cluster.step_rows`` / steps.csv), as summary.json's
``ttft_breakdown_ms`` and ``decode_step_breakdown_ms`` (docs/serving.md, "The cluster model")."""

from __future__ import annotations

from typing import Sequence

from traffic.model import metrics
from traffic.model.serving import STEP_PARTS, TTFT_PARTS


def _num(v) -> float | None:
    """A number from a row (a float, or the text of a CSV cell; '' and None: None)."""
    if v is None or v == "":
        return None
    return float(v)


def _int(v) -> int | None:
    """A whole number from a row (None: not recorded, e.g. a run from before cached tokens were)."""
    n = _num(v)
    return None if n is None else int(n)


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def ttft_breakdown(rows: Sequence[dict], warmup_s: float, end_s: float) -> dict:
    """Where the measured requests' TTFT went: for the nearest-rank P50 and P99 request (by TTFT), its
    TTFT and its parts (TTFT_PARTS) in ms with its size (``input_tokens``, ``cached_tokens``: those its
    prefill unit had cached, ``kv_bytes``: what moved to its decode unit; None in rows from before they were
    recorded), and the parts' means over the tail (the P99 request and every slower one); rows from before
    decode memory was modelled count its wait as 0. ``rows``: ``Cluster.request_rows()`` or requests.csv's rows
    (text cells); measured = arrived in [warmup, end) with a first token by ``end``, as ``Cluster.results``
    counts them."""
    measured = []
    for r in rows:
        arrival, first = _num(r.get("arrival_s")), _num(r.get("first_token_s"))
        if arrival is None or first is None or not warmup_s <= arrival < end_s or first > end_s:
            continue
        parts = {k: _num(r.get(f"{k}_s")) for k in TTFT_PARTS}
        if "decode_memory_s" not in r:
            parts["decode_memory"] = 0.0  # a run from before decode memory was modelled: no such wait
        if any(v is None for v in parts.values()):
            continue  # a run from before the parts were recorded
        sizes = {k: _int(r.get(k)) for k in ("input_tokens", "cached_tokens", "kv_bytes")}
        measured.append((first - arrival, str(r.get("request_id")), parts, sizes))
    if not measured:
        return {"requests": 0, "p50": None, "p99": None, "tail_mean": None}
    measured.sort(key=lambda m: (m[0], m[1]))
    n = len(measured)

    def one(m) -> dict:
        return {"request_id": m[1], "ttft": _ms(m[0]), **{k: _ms(v) for k, v in m[2].items()}, **m[3]}

    p99 = metrics.nearest_rank_index(n, 99)
    tail = measured[p99:]
    mean = {k: _ms(sum(m[2][k] for m in tail) / len(tail)) for k in TTFT_PARTS}
    return {"requests": n, "p50": one(measured[metrics.nearest_rank_index(n, 50)]), "p99": one(measured[p99]),
            "tail_mean": {"requests": len(tail), "ttft": _ms(sum(m[0] for m in tail) / len(tail)), **mean}}


def _top(counts: dict, k: int = 3) -> list[dict]:
    return [{"port": key, "steps": v} if isinstance(key, str) else {"src": key[0], "dst": key[1], "steps": v}
            for key, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]


def decode_step_breakdown(rows: Sequence[dict], warmup_s: float, end_s: float,
                          ports: dict | None = None) -> dict:
    """Where the measured decode steps' time went: compute, dispatch, combine (STEP_PARTS) in ms, as means
    and for the nearest-rank P50 and P99 step (by duration). Measured = decode steps that ended in
    [warmup, end], the steps whose tokens ``Cluster.results`` counts as throughput. ``ports``: message id ->
    (source, destination) NIC port labels; with it, ``slowest`` counts per phase which NIC port pairs (and
    source and destination ports) carried the message that ended the phase, the most frequent first."""
    steps = []
    for r in rows:
        if not str(r.get("engine", "")).startswith("decode"):
            continue
        start, ce, de, end = (_num(r.get(k)) for k in ("start_s", "compute_end_s", "dispatch_end_s", "end_s"))
        if end is None or ce is None or de is None or not warmup_s <= end <= end_s:
            continue
        steps.append((end - start, str(r.get("engine")), int(_num(r.get("step"))),
                      {"compute": ce - start, "dispatch": de - ce, "combine": end - de}, r))
    if not steps:
        return {"steps": 0, "mean": None, "p50": None, "p99": None}
    steps.sort(key=lambda s: (s[0], s[1], s[2]))
    n = len(steps)

    def one(s) -> dict:
        return {"engine": s[1], "step": s[2], "total": _ms(s[0]), **{k: _ms(v) for k, v in s[3].items()}}

    out = {"steps": n, "mean": {"total": _ms(sum(s[0] for s in steps) / n),
                                **{k: _ms(sum(s[3][k] for s in steps) / n) for k in STEP_PARTS}},
           "p50": one(steps[metrics.nearest_rank_index(n, 50)]), "p99": one(steps[metrics.nearest_rank_index(n, 99)])}
    if ports is not None:
        slowest = {}
        for phase in ("dispatch", "combine"):
            pairs: dict = {}
            srcs: dict = {}
            dsts: dict = {}
            for s in steps:
                mid = _num(s[4].get(f"{phase}_last_id"))
                pair = ports.get(int(mid)) if mid is not None else None
                if pair is None:
                    continue
                pairs[pair] = pairs.get(pair, 0) + 1
                srcs[pair[0]] = srcs.get(pair[0], 0) + 1
                dsts[pair[1]] = dsts.get(pair[1], 0) + 1
            slowest[phase] = {"steps": sum(pairs.values()), "pairs": _top(pairs), "src": _top(srcs),
                              "dst": _top(dsts)}
        out["slowest"] = slowest
    return out


__all__ = ["ttft_breakdown", "decode_step_breakdown"]

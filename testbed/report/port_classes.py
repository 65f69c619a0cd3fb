"""Where the congestion is, in numbers: per fabric the medians by port class of the repetitions' congestion
records (summary.json ``congestion``, ``testbed.repetition.congestion``), and the one sentence naming the class
the ZCube-vs-ROFT difference comes from (the headline's and the congestion section's). Plain data: no HTML."""

from __future__ import annotations

import statistics

CLASSES = ("switch_to_gpu", "gpu_to_switch", "switch_to_switch")
LABELS = {"switch_to_gpu": "switch -> GPU (last hop)", "gpu_to_switch": "GPU -> switch (NIC)",
          "switch_to_switch": "switch -> switch"}
AVOIDABLE = {"switch_to_gpu": "unavoidable: several senders into one GPU's port",
             "gpu_to_switch": "avoidable: a server's KV piled on few of its NICs",
             "switch_to_switch": "avoidable: the topology and its multipath"}
FIGURES = (("congested_s", "congested s"), ("paused_s", "paused s"), ("backlog_mean_bytes", "mean backlog B"),
           ("backlog_max_bytes", "largest backlog B"))


def per_fabric(summaries: dict[str, list[dict]]) -> dict[str, dict[str, dict[str, float]]]:
    """fabric -> class -> figure -> the median over the fabric's repetitions that recorded it."""
    out: dict = {}
    for f, sums in summaries.items():
        classes = [((s.get("congestion") or {}).get("by_class") or {}) for s in sums]
        classes = [c for c in classes if c]
        if not classes:
            continue
        out[f] = {c: {k: statistics.median(float(x[c][k]) for x in classes if c in x)
                      for k, _ in FIGURES} for c in CLASSES if any(c in x for x in classes)}
    return out


def sentence(summaries: dict[str, list[dict]]) -> str | None:
    """Which class the ZCube-vs-ROFT difference comes from: the class whose congested time (backlog without
    PFC) differs most between the fabrics' medians, with both fabrics' figures; None without both fabrics'
    congestion records."""
    med = per_fabric(summaries)
    if "zcube" not in med or "roft" not in med:
        return None
    z, r = med["zcube"], med["roft"]
    key = "congested_s" if any(z[c]["congested_s"] or r[c]["congested_s"] for c in CLASSES if c in z and c in r) \
        else "backlog_mean_bytes"
    unit = "s congested" if key == "congested_s" else "B of mean backlog"
    diffs = {c: r[c][key] - z[c][key] for c in CLASSES if c in z and c in r}
    if not diffs or all(abs(d) < 1e-9 for d in diffs.values()):
        if all(z[c][key] == 0 and r[c][key] == 0 for c in diffs):
            return "Neither fabric's queues congested: the difference between them is not queueing."
        return "The two fabrics' queues congested alike in every port class."
    top = max(diffs, key=lambda c: abs(diffs[c]))
    more = "ROFT" if diffs[top] > 0 else "ZCube"
    others = ", ".join(f"{LABELS[c]} {z[c][key]:.3g} vs {r[c][key]:.3g}" for c in diffs if c != top)
    return (f"The difference in congestion comes from {LABELS[top]} ports ({AVOIDABLE[top]}): {more} has more "
            f"there, ZCube {z[top][key]:.3g} vs ROFT {r[top][key]:.3g} {unit} (median of the repetitions; "
            f"{others}).")


__all__ = ["CLASSES", "LABELS", "AVOIDABLE", "FIGURES", "per_fabric", "sentence"]

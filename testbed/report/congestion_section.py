"""Where the congestion is: per fabric, queue backlog, congested time and paused time by port class, each
prefill server's KV bytes per NIC port (the production report's Figure 4), and one sentence naming the class
the ZCube-vs-ROFT difference comes from (summary.json's ``congestion`` of every repetition,
``testbed.repetition.congestion``).

Classes: switch -> GPU (the last hop: several senders into one GPU's port, no topology avoids it), GPU ->
switch (NIC ports: a server's KV piled on one NIC is the mapping's doing), switch -> switch (cables between
switches: the topology and its multipath). A queue is *congested* while a transmitter it paused stays paused
(PFC on); without PFC the backlog is the only measure.
"""

from __future__ import annotations

from testbed.report import html as H
from testbed.report.fmt import num
from testbed.report.load import ExperimentRun
from testbed.report.port_classes import AVOIDABLE, FIGURES, LABELS, per_fabric, sentence


def _summaries(exp: ExperimentRun) -> dict[str, list[dict]]:
    return {f: [r.summary for r in exp.reps[f]] for f in exp.fabrics}


def _nic_table(exp: ExperimentRun) -> str:
    """The first repetition's prefill servers: KV bytes a NIC port sent, the busiest port over the mean."""
    rows = []
    for f in exp.fabrics:
        for r in exp.reps[f][:1]:
            for server, d in ((r.summary.get("congestion") or {}).get("kv_by_nic") or {}).items():
                ports = d.get("ports") or {}
                busy = sorted(((b, p) for p, b in ports.items() if b), reverse=True)
                rows.append([H.fab(f), f"rep{r.index}", H.escape(server), num(d.get("bytes")),
                             f"{sum(1 for b, _ in busy)} of {len(ports)}",
                             H.escape(", ".join(f"{p} {b / 1e9:.3g} GB" for b, p in busy[:4])),
                             num(d.get("max_over_mean"), digits=2)])
    if not rows:
        return ""
    return H.table(["fabric", "rep", "server", "KV bytes (real)", "NIC ports that sent KV", "busiest ports",
                    "busiest / mean"], rows, left={0, 1, 2, 4, 5})


def section(exp: ExperimentRun) -> str | None:
    """The section's HTML, or None when no repetition recorded its congestion."""
    sums = _summaries(exp)
    med = per_fabric(sums)
    if not med:
        return None
    rows = []
    for f, classes in med.items():
        for c, figs in classes.items():
            rows.append([H.fab(f), H.escape(LABELS[c]), H.escape(AVOIDABLE[c])]
                        + [num(figs[k], digits=3 if k.endswith("_s") else 0) for k, _ in FIGURES])
    parts = ["<p>Every queue by the port it feeds; medians over the repetitions. <i>Congested</i>: the seconds "
             "(cluster time) a queue over XOFF held a transmitter paused, summed over the class's queues (where "
             "the congestion is); <i>paused</i>: the seconds its transmitters were held (where the pauses land); "
             "backlog from the queue sampler's snapshots.</p>",
             H.table(["fabric", "port class", "", *[label for _, label in FIGURES]], rows, left={0, 1, 2})]
    text = sentence(sums)
    if text:
        parts.insert(0, f"<p><b>{H.escape(text)}</b></p>")
    nic = _nic_table(exp)
    if nic:
        parts += ["<p>Each prefill server's KV by the NIC port it left from (the production report's Figure 4: "
                  "with MLA one prefill rank sends a request's whole KV, so one GPU's two ports carry its "
                  "server's KV).</p>", nic]
    return "\n".join(parts)


__all__ = ["section"]

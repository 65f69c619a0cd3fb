"""Where a request's time goes, and a decode step's: the live repetitions' ``ttft_breakdown_ms`` and
``decode_step_breakdown_ms`` (summary.json, written by the live driver from requests.csv and steps.csv;
``traffic.model.breakdown``) drawn as stacked bars, ZCube beside ROFT, with the numbers and
the link of the message that most often ended a decode step's dispatch or combine.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from testbed.report import html as H  # noqa: E402
from testbed.report.fmt import num  # noqa: E402
from testbed.report.load import ExperimentRun  # noqa: E402
from testbed.report.plots import colour, name, save, style  # noqa: E402
from traffic.model.serving import STEP_PARTS, TTFT_PARTS  # noqa: E402

LABELS = {"decode_memory": "wait for decode KV memory", "prefill_queue": "prefill queue",
          "prefill_compute": "prefill compute",
          "prefill_exchange": "prefill EP exchange", "kv_transfer": "KV transfer",
          "decode_wait": "wait for a decode step",
          "decode_compute": "first decode step: compute", "decode_exchange": "first decode step: EP exchange",
          "compute": "compute", "dispatch": "dispatch", "combine": "combine"}
# network parts hatched, so the part the fabric decides stands out in any colour scheme
NETWORK = {"prefill_exchange", "kv_transfer", "decode_exchange", "dispatch", "combine"}
PART_COLOURS = {"decode_memory": "#F0E442", "prefill_queue": "#bbbbbb", "prefill_compute": "#7f7f7f",
                "prefill_exchange": "#D55E00",
                "kv_transfer": "#E69F00", "decode_wait": "#dddddd", "decode_compute": "#56B4E9",
                "decode_exchange": "#CC79A7", "compute": "#56B4E9", "dispatch": "#D55E00", "combine": "#CC79A7"}
GROUPS = (("p50", "P50 request"), ("p99", "P99 request"), ("tail_mean", "tail mean (P99 and slower)"))
STEP_GROUPS = (("mean", "mean step"), ("p50", "P50 step"), ("p99", "P99 step"))


def _bars(exp: ExperimentRun, key: str) -> list[tuple[str, int, dict]]:
    """(fabric, rep, breakdown) of every live repetition that recorded ``key``."""
    out = []
    for f in exp.fabrics:
        for r in exp.reps[f]:
            b = r.summary.get(key)
            if isinstance(b, dict) and b.get("p50"):
                out.append((f, r.index, b))
    return out


def _figure(bars: list, groups, parts, title: str, ylabel: str, out: Path) -> Path | None:
    if not bars:
        return None
    with style():
        return _draw(bars, groups, parts, title, ylabel, out)


def _draw(bars: list, groups, parts, title: str, ylabel: str, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(11, 4.0))
    width = 0.8 / len(bars)
    seen = set()
    for g, (gkey, _) in enumerate(groups):
        for i, (f, k, b) in enumerate(bars):
            entry = b.get(gkey) or {}
            x = g + (i - (len(bars) - 1) / 2) * width
            bottom = 0.0
            for part in parts:
                v = entry.get(part) or 0.0
                ax.bar(x, v, width * 0.92, bottom=bottom, color=PART_COLOURS[part],
                       hatch="///" if part in NETWORK else None, edgecolor="white", linewidth=0.4,
                       label=LABELS[part] if part not in seen else None)
                seen.add(part)
                bottom += v
            ax.text(x, bottom, f"{name(f)}\nrep{k}", ha="center", va="bottom", fontsize=6.5, color=colour(f, 0))
    ax.set_xticks(range(len(groups)), [label for _, label in groups])
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.margins(y=0.15)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.09))
    return save(fig, out)


def ttft_figure(exp: ExperimentRun, out: Path) -> Path | None:
    return _figure(_bars(exp, "ttft_breakdown_ms"), GROUPS, TTFT_PARTS,
                   "Where TTFT goes (hatched: the network's parts)", "ms, real-cluster time", out)


def step_figure(exp: ExperimentRun, out: Path) -> Path | None:
    return _figure(_bars(exp, "decode_step_breakdown_ms"), STEP_GROUPS, STEP_PARTS,
                   "Where a decode step goes (hatched: the network's parts)", "ms, real-cluster time", out)


def _fabric_model(exp: ExperimentRun, fabric: str):
    from testbed.report.topology_and_cost import _build, fabric_params

    try:
        return _build(fabric_params(exp, fabric))
    except Exception:  # noqa: BLE001 - the report names the pair without its path rather than failing
        return None


def slowest_link(exp: ExperimentRun, fabric: str, phase: str) -> str:
    """'gpu17:p1 -> gpu25:p2 in 120 of 325 steps: gpu17:p1->sw3, sw3->sw6#0, sw6->gpu25:p2' for the NIC
    port pair that most often carried the message ending a decode step's ``phase`` (rep1)."""
    rep = exp.reps[fabric][0]
    b = rep.summary.get("decode_step_breakdown_ms") or {}
    s = ((b.get("slowest") or {}).get(phase)) or {}
    pairs = s.get("pairs") or []
    if not pairs:
        return "not recorded"
    top = pairs[0]
    text = f"{top['src']} -> {top['dst']} in {top['steps']} of {s['steps']} steps"
    model = _fabric_model(exp, fabric)
    if model is None:
        return text
    from fabrics.routing import link_name, path_links

    try:
        src, dst = (tuple(int(x) for x in p.removeprefix("gpu").split(":p")) for p in (top["src"], top["dst"]))
        links = path_links(model, src, dst)
    except Exception:  # noqa: BLE001
        return text
    named = [link_name(model, link) + ("" if share >= 1 else f" (ECMP, {share:.0%})") for link, share in links.items()]
    return text + ": " + ", ".join(named)


def _rows(exp: ExperimentRun, key: str, groups, parts, total: str) -> list[list[str]]:
    rows = []
    for f, k, b in _bars(exp, key):
        for gkey, glabel in groups:
            e = b.get(gkey) or {}
            rows.append([H.fab(f), f"rep{k}", H.escape(glabel), num(e.get(total))] + [num(e.get(p)) for p in parts]
                        + [num(e.get("requests") if gkey == "tail_mean" else None) if key == "ttft_breakdown_ms"
                           else num(b.get("steps"))])
    return rows


def section(exp: ExperimentRun, figures: Path) -> str | None:
    """The TTFT and decode-step breakdowns (None when no repetition recorded them: no section)."""
    if not _bars(exp, "ttft_breakdown_ms") and not _bars(exp, "decode_step_breakdown_ms"):
        return None
    parts = [H.img(ttft_figure(exp, figures / "ttft_breakdown.png"),
                   "Each bar is one request of one repetition (the nearest-rank P50 and P99 request by TTFT, and the "
                   "mean of each part over the P99 request and every slower one), its TTFT cut into the parts "
                   "that add up to it; ZCube's bars beside ROFT's.", "TTFT breakdown")]
    if _bars(exp, "ttft_breakdown_ms"):
        parts.append(H.table(["fabric", "rep", "request", "TTFT"] + [H.escape(LABELS[p]) for p in TTFT_PARTS]
                             + ["tail requests"], _rows(exp, "ttft_breakdown_ms", GROUPS, TTFT_PARTS, "ttft"),
                             left=3))
    parts.append(H.img(step_figure(exp, figures / "decode_step_breakdown.png"),
                       "Decode steps that ended in the measured window: the mean step and the nearest-rank P50 and "
                       "P99 step by duration, cut into compute, dispatch and combine.", "decode step breakdown"))
    if _bars(exp, "decode_step_breakdown_ms"):
        parts.append(H.table(["fabric", "rep", "step", "total"] + [H.escape(LABELS[p]) for p in STEP_PARTS]
                             + ["steps"], _rows(exp, "decode_step_breakdown_ms", STEP_GROUPS, STEP_PARTS, "total"),
                             left=3))
        items = [f"<li>{H.fab(f)} {phase}: {H.escape(slowest_link(exp, f, phase))}</li>"
                 for f in exp.fabrics for phase in ("dispatch", "combine")]
        parts.append("<p>The slowest message's link: the NIC port pair that most often carried the last message "
                     "of a decode step's phase (rep1), and its path over the fabric model (ZCube: the one path; "
                     "ROFT: the spine an ECMP hash picked is not recorded).</p><ul>" + "".join(items) + "</ul>")
    parts.append('<p class="note">Milliseconds of real-cluster time (wall time over the dilation). The parts add '
                 "up to each request's TTFT: the prefill queue (waiting, including steps that ran without it), the "
                 "compute and the EP exchange of the prefill steps it was in, the KV transfer, the wait for a "
                 "decode step, and its first decode step's compute and exchange (docs/serving.md). A TP prefill "
                 "instance has no EP exchange on the fabric.</p>")
    return "".join(parts)


__all__ = ["section", "ttft_figure", "step_figure", "slowest_link", "LABELS"]

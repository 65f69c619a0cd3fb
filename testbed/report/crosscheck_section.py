"""The report's cross-check section, from a run directory's crosscheck.json (``testbed.report.crosscheck``): the
one line on whether the two engines agree, the ZCube/ROFT ratios of both per repetition, per fabric each message
class's completion times on both engines, bytes per link and pauses, which goals held, and one plot of the FCT
CDFs per class (engine A solid, engine B dashed, the first repetition pair)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from testbed.report import crosscheck as xc  # noqa: E402
from testbed.report import html as H  # noqa: E402
from testbed.report.plots import colour, name, save, style  # noqa: E402

FILE = "crosscheck.json"


def load(run_dir: Path) -> dict | None:
    """A run directory's crosscheck.json, or None (none there, or unreadable)."""
    try:
        doc = json.loads((Path(run_dir) / FILE).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("repetitions") else None


def plot(doc: dict, out: Path) -> Path | None:
    """FCT CDFs per message class of the first repetition pair: both fabrics, engine A solid, B dashed."""
    rep = doc["repetitions"][0]
    classes = [c for c in xc.CLASSES if any((f["fct"].get(c) or {}).get("quantiles_ms", {}).get("a")
                                            for f in rep["fabrics"].values())]
    if not classes:
        return None
    with style():
        fig, axes = plt.subplots(1, len(classes), figsize=(4.2 * len(classes), 3.2), squeeze=False)
        for ax, c in zip(axes[0], classes):
            for kind, f in rep["fabrics"].items():
                q = f["fct"][c]["quantiles_ms"]
                for side, ls in (("a", "-"), ("b", "--")):
                    if q.get(side):
                        ax.plot(q[side], xc.CDF_POINTS, ls, color=colour(kind), lw=1.6,
                                label=f"{name(kind)}, {doc[side]['backend']}")
            ax.set_xscale("log")
            ax.set_xlabel(f"{c} completion time (cluster ms)")
            ax.set_ylabel("CDF")
            ax.set_title(c)
        axes[0][0].legend(fontsize=8)
        return save(fig, out)


def _f(v, digits: str = ".3g") -> str:
    return "-" if v is None else format(v, digits)


def section(doc: dict, figures: Path) -> str:
    a, b = doc["a"]["backend"], doc["b"]["backend"]
    out = [f"<p><b>{H.escape(xc.line(doc))}</b></p>",
           f'<p class="note">Engine A ({H.escape(a)}) is the reference; B ({H.escape(b)}) is checked against it. Times '
           "are cluster milliseconds on both. KS: the largest gap between the two completion-time CDFs (0: the same "
           "distribution, 1: disjoint). Goals, B against A in every repetition: "
           + ", ".join(f"{k} within {v:g}" for k, v in doc["goals"].items()) + ".</p>"]
    rows = []
    for rep in doc["repetitions"]:
        for key in ("throughput_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms"):
            ra, rb = rep["ratios"]["a"].get(key), rep["ratios"]["b"].get(key)
            rows.append([f"rep{rep['rep']}", key, _f(ra, ".4f"), _f(rb, ".4f"), _f(xc._ratio(rb, ra), ".4f")])
    out.append(H.table(["repetition", "ZCube / ROFT", a, b, f"{b} / {a}"], rows, left=2))
    rows = []
    for rep in doc["repetitions"]:
        for kind, f in rep["fabrics"].items():
            for key in ("throughput_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "pfc_pauses", "queue_drops"):
                rows.append([f"rep{rep['rep']}", H.fab(kind), key, _f(f["a"][key]), _f(f["b"][key]),
                             _f(f["b_over_a"][key], ".3f"), ""])
            for c, cc in f["fct"].items():
                for q in ("p50", "p90", "p99"):
                    rows.append([f"rep{rep['rep']}", H.fab(kind), f"{c} FCT {q} (ms)", _f(cc["a"][q]), _f(cc["b"][q]),
                                 _f(cc[f"{q}_b_over_a"], ".3f"), _f(cc["ks"], ".3f") if q == "p50" else ""])
            ds = f["decode_step_ms"]
            rows.append([f"rep{rep['rep']}", H.fab(kind), "decode step P50 (ms)", _f(ds["a"]["p50"]),
                         _f(ds["b"]["p50"]), _f(xc._ratio(ds["b"]["p50"], ds["a"]["p50"]), ".3f"), ""])
            lb, pp = f["link_bytes"], f["pauses_per_port"]
            rows.append([f"rep{rep['rep']}", H.fab(kind), f"bytes per link ({lb['links']} links)", "", "",
                         f"median {_f(lb['median'], '.3f')}", f"{_f(lb['within'], '.0%')} within"])
            rows.append([f"rep{rep['rep']}", H.fab(kind), "ports paused", str(pp["ports_a"]), str(pp["ports_b"]),
                         f"{pp['ports_both']} on both", ""])
    out.append(H.table(["repetition", "fabric", "figure", a, b, f"{b} / {a}", "KS"], rows, left=3))
    held = [[H.escape(g), f"{h} of {n}", '<span class="pass">held</span>' if h == n else '<span class="fail">missed'
             "</span>"] for g, (h, n) in doc["agreement"]["goals"].items()]
    out.append(H.table(["goal", "repetitions", ""], held, left=1))
    out.append(H.img(plot(doc, Path(figures) / "crosscheck_fct.png"),
                     f"FCT CDF per message class, repetition {doc['repetitions'][0]['rep']}: {a} solid, {b} dashed",
                     "FCT CDFs of both engines"))
    return "\n".join(out)


def report_section(run_dir: Path, figures: Path) -> str | None:
    """The section for a run directory holding a crosscheck.json (None otherwise)."""
    doc = load(run_dir)
    return None if doc is None else section(doc, figures)

"""The load curve: a one-key sweep's TTFT P99 and KV-transfer FCT P99 slowdown against the swept knob.

``testbed.experiment.load_curve`` builds the document from a sweep directory and draws it with ``figure`` here;
a run whose experiment names it (``load_curve:``) has it copied in as ``load_curve.json``, and the
report shows it after the headline: the figure, a table, where the curve came from and which level
the run itself used. The curve is evidence from a separate sweep, never from the run's own replays.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from common.paths import shown  # noqa: E402
from testbed.report import html as H  # noqa: E402
from testbed.report.fmt import num  # noqa: E402
from testbed.report.plots import colour, name, save, style  # noqa: E402

FILE = "load_curve.json"
PANELS = (("ttft_p99_ms", "TTFT P99 (ms)", False), ("kv_slowdown_p99", "KV-transfer FCT P99 slowdown", True))


def _number(v) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(str(v))
    except ValueError:
        return None


def same_level(a, b) -> bool:
    """64 == '64' == 64.0; other values by their text."""
    x, y = _number(a), _number(b)
    return x == y if x is not None and y is not None else str(a) == str(b)


def levels_of(doc: dict) -> list:
    """Every level of any fabric, in the document's order (numbers: ascending)."""
    out: list = []
    for rows in (doc.get("fabrics") or {}).values():
        for r in rows:
            if not any(same_level(r["level"], s) for s in out):
                out.append(r["level"])
    if out and all(_number(v) is not None for v in out):
        out.sort(key=_number)
    return out


def figure(doc: dict, out: Path, mark=None) -> Path | None:
    """Two panels, TTFT P99 ms and KV FCT P99 slowdown (log y), against the level: one line per fabric at the
    mean over repetitions, bars from min to max; ``mark``: a level drawn as a dotted line. None: no number."""
    fabrics = doc.get("fabrics") or {}
    if not any(r.get(k) for rows in fabrics.values() for r in rows for k, _, _ in PANELS):
        return None
    levels = levels_of(doc)
    numeric = all(_number(v) is not None for v in levels)

    def x_of(level) -> float:
        return _number(level) if numeric else next(i for i, v in enumerate(levels) if same_level(v, level))

    with style():
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
        for ax, (key, label, log) in zip(axes, PANELS):
            for i, (f, rows) in enumerate(fabrics.items()):
                xs, ys, lo, hi = [], [], [], []
                for r in rows:
                    s = r.get(key)
                    xs.append(x_of(r["level"]))
                    ys.append(np.nan if s is None else s["mean"])
                    lo.append(0.0 if s is None else s["mean"] - s["min"])
                    hi.append(0.0 if s is None else s["max"] - s["mean"])
                if np.isfinite(ys).any():
                    ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, lw=1.6, color=colour(f, i),
                                label=name(f))
            if log and any(r.get(key) and r[key]["min"] > 0 for rows in fabrics.values() for r in rows):
                ax.set_yscale("log", nonpositive="clip")
                ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 10, not 10^1
                ax.yaxis.set_minor_formatter(FuncFormatter(  # 2, 3, 5 x a power of ten only
                    lambda v, _: f"{v:g}" if v > 0 and f"{v:.0e}"[0] in "235" else ""))
            if mark is not None and any(same_level(mark, v) for v in levels):
                ax.axvline(x_of(mark), color="#444", ls=":", lw=1, label="this run")
            ax.set_xticks([x_of(v) for v in levels], [str(v) for v in levels])  # a tick at every level
            ax.set_xlabel(str(doc.get("knob", "level")))
            ax.set_ylabel(label)
            ax.set_title(label + " against load")
            ax.legend(fontsize=8)
        return save(fig, out)


def run_level(config: dict, knob: str | None):
    """The run's own value of the knob, from its experiment.json (None: not recorded)."""
    node = (config or {}).get("experiment")
    for part in (knob or "").split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _cell(s: dict | None) -> str:
    if s is None:
        return "-"
    text = num(s["mean"])
    return text + (f" [{num(s['min'])}, {num(s['max'])}]" if s.get("n", 1) > 1 else "")


def _created(text) -> str:
    return str(text)[:16].replace("T", " ") if text else "an unknown date"


def section(doc: dict, fig: Path | None, mine) -> str:
    """The report section: one sentence on where the curve comes from, the figure, a table per level."""
    knob = str(doc.get("knob", "level"))
    fabrics = doc.get("fabrics") or {}
    levels = levels_of(doc)
    at = next((v for v in levels if mine is not None and same_level(v, mine)), None)
    made_in = shown(doc["dir"]) if doc.get("dir") else doc.get("dir", "directory unknown")
    text = (f"This curve comes from a separate sweep over {knob} ({made_in}, created "
            f"{_created(doc.get('created'))}), not from this run's replays: means over its repetitions, [min, max] "
            "in brackets.")
    if at is not None:
        text += f" This run used {knob} = {at}: the marked row and the dotted line."
    elif mine is not None:
        text += f" This run's {knob} = {mine} is not among the curve's levels."
    head = [H.escape(knob)]
    for f in fabrics:
        head += [f"{H.fab(f)} TTFT P99 <span class=\"unit\">ms</span>", f"{H.fab(f)} KV FCT P99 slowdown"]
    rows = []
    for lv in levels:
        label = H.escape(str(lv))
        row = [f"<b>{label} (this run)</b>" if at is not None and same_level(lv, at) else label]
        for rs in fabrics.values():
            r = next((r for r in rs if same_level(r["level"], lv)), {})
            row += [H.escape(_cell(r.get("ttft_p99_ms"))), H.escape(_cell(r.get("kv_slowdown_p99")))]
        rows.append(row)
    parts = [f"<p>{H.escape(text)}</p>"]
    if fig is not None:
        parts.append(H.img(fig, "Left: TTFT P99; right: P99 of the KV transfers' FCT over their FCT alone on an idle "
                                "link (log scale). Markers: mean over repetitions; bars: min to max; dotted: this "
                                "run's level.", "load curve"))
    parts.append(H.table(head, rows))
    return "".join(parts)


def report_section(exp, figures: Path) -> str | None:
    """The section for a run directory with a load_curve.json, drawing figures/load_curve.png; None without one."""
    path = Path(exp.path) / FILE
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        return f'<p class="warn">{H.escape(f"{FILE} could not be read ({exc}): no load curve.")}</p>'
    mine = run_level(exp.config, doc.get("knob"))
    figures.mkdir(exist_ok=True)
    return section(doc, figure(doc, figures / "load_curve.png", mark=mine), mine)

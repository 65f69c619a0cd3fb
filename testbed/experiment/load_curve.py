"""The load curve of a one-key sweep: TTFT P99 and KV-transfer FCT P99 slowdown against the swept knob,
one line per fabric (HPCC's slowdown-vs-load plots), so a reader sees at which load ZCube and ROFT part.

``build(sweep_dir)`` reads a finished (or interrupted) ``testbed sweep`` directory, ``sweep.json`` and every
``points/<key=value>/runs/<fabric>/rep<k>/summary.json``, and returns::

    {"knob": "serving.concurrency", "dir": ..., "created": ..., "source": ...,
     "fabrics": {fabric: [{"level": 64, "ttft_p99_ms": spread, "ttft_p50_ms": spread,
                           "kv_slowdown_p99": spread, "throughput_tokens_per_s": spread}, ...]}}

where a spread is ``testbed.report.headline.spread`` over the repetitions that produced a summary (mean, min, max,
stdev, n, median; None when none did). Levels that all read as numbers are sorted numerically, others keep the
sweep's order. ``plot(doc, out_png)`` draws it (``testbed.report.load_curve_section``, so a run's report can
draw the same figure from the copied load_curve.json). ``testbed sweep`` writes load_curve.json and
load_curve.png whenever it swept one key; an experiment's ``load_curve:`` key puts it in its report.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from common.errors import TestbedError
from testbed.experiment import run
from testbed.report import headline

METRICS = ("ttft_p99_ms", "ttft_p50_ms", "kv_slowdown_p99", "throughput_tokens_per_s")
JSON_NAME, PNG_NAME = "load_curve.json", "load_curve.png"


def level_value(text):
    """'64' -> 64, '1.5' -> 1.5, anything else unchanged (None: not a number)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return text
    for kind in (int, float):
        try:
            return kind(str(text).strip())
        except ValueError:
            continue
    return None


def ordered_levels(values: list) -> list:
    """The swept values as levels: numbers sorted numerically when every value is one, else the given order."""
    nums = [level_value(v) for v in values]
    if values and all(n is not None for n in nums):
        return sorted(nums)
    return list(values)


def _read_json(path: Path, what: str) -> dict:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise TestbedError(f"{path}: cannot be read ({exc.strerror or exc}): expected {what}") from None
    except json.JSONDecodeError as exc:
        raise TestbedError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno}): expected {what}") from None


def _point_reps(point_dir: Path) -> dict[str, list[dict]] | None:
    """fabric -> the figures (testbed.report.headline.rep_headline) of every repetition that produced a summary;
    None when the point never started (no experiment.json). The planned runs come from experiment.json, so a
    repetition that failed (error.txt, no summary.json) or never ran is left out of its spread."""
    try:
        planned = json.loads((point_dir / "experiment.json").read_text()).get("runs")
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(planned, list):  # not written by testbed.experiment.run: every rep<k> folder there
        planned = headline.planned_runs(point_dir)
    out: dict[str, list[dict]] = {}
    for r in planned:
        head = headline.rep_headline(point_dir / r["dir"])
        reps = out.setdefault(r["fabric"], [])
        if head.get("goodput_bps") is not None:  # what headline.fabric_headlines counts as a finished replay
            reps.append(head)
    return out


def build(sweep_dir: Path | str) -> dict:
    """The load-curve document of a sweep directory over exactly one key (TestbedError, one line, otherwise)."""
    sweep_dir = Path(sweep_dir)
    doc = _read_json(sweep_dir / "sweep.json", "the sweep.json of a `testbed sweep` directory")
    params = doc.get("params") or {}
    if len(params) != 1:
        raise TestbedError(f"{sweep_dir}: a load curve needs a sweep over exactly one key; this one swept "
                           f"{len(params)} ({', '.join(params) or 'none'})")
    (knob, values), = params.items()
    numeric = bool(values) and all(level_value(v) is not None for v in values)
    by_level: dict = {}
    for p in doc.get("points") or []:
        raw = (p.get("values") or {}).get(knob)
        reps = _point_reps(sweep_dir / p.get("dir", ""))
        if raw is None or reps is None:
            continue
        by_level[level_value(raw) if numeric else raw] = reps
    fabrics: dict[str, list[dict]] = {}
    for level in ordered_levels(values):
        for fabric, reps in (by_level.get(level) or {}).items():
            fabrics.setdefault(fabric, []).append(
                {"level": level, **{k: headline.spread([r.get(k) for r in reps]) for k in METRICS}})
    return {"knob": knob, "fabrics": fabrics, "dir": str(sweep_dir.resolve()),
            "created": doc.get("created") or time.strftime("%Y-%m-%dT%H:%M:%S%z"), "source": doc.get("source")}


def plot(doc: dict, out_png: Path | str, mark=None) -> Path | None:
    """Two panels against the level, one line per fabric (mean, bars min..max over repetitions): TTFT P99 ms
    and KV-transfer FCT P99 slowdown (log y); ``mark``: a level to mark (a run's own). None: nothing to draw."""
    from testbed.report.load_curve_section import figure

    return figure(doc, Path(out_png), mark=mark)


def write(sweep_dir: Path | str, log: run.Log = run.stderr_log) -> tuple[Path, Path | None]:
    """load_curve.json and load_curve.png in the sweep directory; (json path, png path or None)."""
    sweep_dir = Path(sweep_dir)
    doc = build(sweep_dir)
    out = sweep_dir / JSON_NAME
    out.write_text(json.dumps(doc, indent=1) + "\n")
    png = plot(doc, sweep_dir / PNG_NAME)
    log(f"load curve: {out}" + (f", {png.name}" if png else " (nothing to draw)"))
    return out, png

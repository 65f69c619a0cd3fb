"""Two experiments side by side: did a change (code, rate, trace, PFC) move the headline?

Recomputed from each run's raw files (not from a report summary.json that may
be stale or missing), so comparing never requires building the reports first.
"""

from __future__ import annotations

from pathlib import Path

from testbed.report import html as H
from testbed.report.build import summarize
from testbed.report.fmt import cell_text, ratio_text
from testbed.report.headline import headline_rows
from testbed.report.load import load_experiment
from testbed.report.plots import name


def _load(run: Path) -> tuple[dict, list[str]]:
    exp = load_experiment(run)
    return summarize(exp), exp.fabrics


def _columns(doc: dict, fabrics: list[str]) -> list[tuple[str, callable]]:
    cols = [(name(f), (lambda key, div, f=f: cell_text(doc.get(f), key, div, doc["reps"]))) for f in fabrics]
    if doc["ratios"]:
        cols.append(("ZC/ROFT", lambda key, div: ratio_text(doc["ratios"].get(key)) if key in doc["ratios"] else ""))
    return cols


def compare(run_a: Path | str, run_b: Path | str) -> str:
    """Plain-text table: each run's headline per fabric and its ZCube/ROFT ratio."""
    runs = [Path(run_a), Path(run_b)]
    loaded = [_load(r) for r in runs]
    cols = [(tag, c) for tag, (doc, fabs) in zip("AB", loaded) for c in _columns(doc, fabs)]
    head = ["metric"] + [f"{tag}: {title}" for tag, (title, _) in cols]
    live = any(doc.get("live") for doc, _ in loaded)  # a live run's rows (TTFT measured, no proxy) first
    rows = [[f"{label}" + (f" ({unit})" if unit else "")] + [fn(key, div) for _, (_, fn) in cols]
            for label, key, unit, div, _ in headline_rows(live)]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    lines = [f"A: {runs[0]}  ({loaded[0][0]['verdict']}; fidelity {'ok' if loaded[0][0]['fidelity_ok'] else 'FAILED'})",
             f"B: {runs[1]}  ({loaded[1][0]['verdict']}; fidelity {'ok' if loaded[1][0]['fidelity_ok'] else 'FAILED'})",
             ""]
    for r in [head] + rows:
        lines.append("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)).rstrip())
        if r is head:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def compare_html(run_a: Path | str, run_b: Path | str, out: Path | str) -> Path:
    """An HTML page with both runs' headline tables side by side."""
    return compare_html_runs([run_a, run_b], out)


def compare_html_runs(run_dirs: list[Path | str], out: Path | str) -> Path:
    """An HTML page with every run's headline and table of figures side by side (runs A, B, C, ...)."""
    runs = [Path(r) for r in run_dirs]
    heads, seeds, problems = [], [], []
    for i, run in enumerate(runs):
        tag = chr(ord("A") + i) if i < 26 else f"R{i + 1}"
        doc, fabs = _load(run)
        problems += [f"{tag}: {p}" for p in doc["fidelity_problems"]]
        verdict = doc["verdict"][:1].upper() + doc["verdict"][1:]
        heads.append(f"<div><h3>{tag}: {H.escape(str(run))}</h3><p>{H.escape(verdict)}</p>"
                     f"{H.headline_block(doc['headline'])}{H.headline_table(doc, fabs)}</div>")
        seeds.append(f"<div><h3>{tag}</h3>{H.seed_table(doc['seed_comparison'])}</div>")
    sections = [("compare", "Headline, side by side", f'<div class="side">{"".join(heads)}</div>'),
                ("seed", "Against the seed's production figures", f'<div class="side">{"".join(seeds)}</div>')]
    names = ", ".join(f"{chr(ord('A') + i) if i < 26 else f'R{i + 1}'} = {r.name}" for i, r in enumerate(runs))
    page = H.page(f"Comparison of {len(runs)} experiments", names,
                  "Headline numbers recomputed from each run's raw files.", problems, [], sections, wide=True)
    out = Path(out)
    out.write_text(page, encoding="utf-8")
    return out

"""The self-contained HTML page: inline CSS, plots as base64 PNG, no script, no external URL.

Self-contained so it survives being mailed, attached to an issue or opened
from a laptop without the run directory. Every value is escaped here; callers
pass plain text.
"""

from __future__ import annotations

import base64
import json
from html import escape
from pathlib import Path

from testbed.report.fmt import cell_text, num, ratio_text
from testbed.report.headline import (
    BETTER,
    NOTE,
    REP_CAPTION,
    WORSE,
    facts,
    figure_table,
    headline_rows,
    rep_table,
)
from testbed.report.plots import COLOURS, name
from testbed.report.verdict import resolvable

CSS = """
:root{--z:%(z)s;--r:%(r)s;--ink:#1d1d1f;--mute:#666;--line:#ddd;--bg:#fafafa}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 -apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
 color:var(--ink);background:var(--bg)}
main{max-width:1180px;margin:0 auto;padding:0 20px 60px}
.banner{background:#b00020;color:#fff;padding:14px 20px}
.banner b{font-size:16px}.banner ul{margin:6px 0 0;padding-left:20px}.banner a{color:#fff}
.banner+.banner{border-top:1px solid #fff6}
.okbar{background:#1e7d32;color:#fff;padding:8px 20px}
h1{font-size:26px;margin:22px 0 4px}h1 .v{display:block;font-size:19px;font-weight:500;color:#333;margin-top:4px}
h2{font-size:19px;margin:34px 0 8px;padding-bottom:4px;border-bottom:2px solid var(--line)}
h3{font-size:15px;margin:18px 0 6px}
.sub{color:var(--mute);margin:0 0 8px}
nav{position:sticky;top:0;background:var(--bg);padding:8px 0;border-bottom:1px solid var(--line);z-index:1;
 font-size:13px}
nav a{margin-right:14px;color:#0b57d0;text-decoration:none}
table{border-collapse:collapse;background:#fff;margin:6px 0 10px;font-variant-numeric:tabular-nums}
th,td{border:1px solid var(--line);padding:5px 9px;text-align:right;vertical-align:top}
td:not(.l){white-space:nowrap}
th{background:#f0f0f0;font-weight:600}td.l,th.l{text-align:left}
tbody tr:nth-child(even) td{background:#fbfbfb}
.z{color:var(--z);font-weight:700}.r{color:var(--r);font-weight:700}
.unit{color:var(--mute);font-size:12px}
.good{background:#e3f4e6!important}.bad{background:#fde4e4!important}
.status{font-weight:700;white-space:nowrap}.matches{color:#1e7d32}.contradicts,.notrep{color:#b00020}
.same{color:#a15c00}
figure{margin:10px 0 18px;background:#fff;border:1px solid var(--line);padding:8px}
figure img{max-width:100%%;height:auto;display:block}
figcaption{color:var(--mute);font-size:12.5px;margin-top:4px}
.grid{display:flex;flex-wrap:wrap;gap:14px}.grid>figure{flex:1 1 520px}
details{background:#fff;border:1px solid var(--line);padding:6px 10px;margin:6px 0}
summary{cursor:pointer;font-weight:600}
pre{white-space:pre-wrap;font-size:12px;margin:6px 0}
.warn{color:#a15c00}.fail{color:#b00020;font-weight:600}.pass{color:#1e7d32;font-weight:600}
.note{color:var(--mute);font-size:12.5px}
.side{display:flex;gap:24px}.side>div{flex:1 1 0;min-width:0;overflow-x:auto}
body.wide main{max-width:1700px}
""" % {"z": COLOURS["zcube"], "r": COLOURS["roft"]}


def fab(f: str) -> str:
    cls = {"zcube": "z", "roft": "r"}.get(f, "")
    return f'<span class="{cls}">{escape(name(f))}</span>'


def img(path: Path | None, caption: str, alt: str) -> str:
    if path is None or not Path(path).is_file():
        return f'<p class="note">{escape(alt)}: nothing to draw.</p>'
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return (f'<figure><img alt="{escape(alt)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{escape(caption)}</figcaption></figure>")


def table(head: list[str], rows: list[list[str]], left: int | set[int] = 1, cls: str = "") -> str:
    """Cells are already HTML (a cell starting with <td is used as is); text columns are
    left-aligned: the first ``left`` columns, or the column indices in ``left``."""
    is_left = (lambda i: i in left) if isinstance(left, set) else (lambda i: i < left)
    th = "".join(f'<th class="{"l" if is_left(i) else ""}">{h}</th>' for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(c if c.startswith("<td") else f'<td class="{"l" if is_left(i) else ""}">{c}</td>'
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def headline_block(h: dict) -> str:
    """The headline (summary.json's ``headline``, ``testbed.report.headline``): the one-repetition warning, the
    figures with their ratios, 95% intervals over the repetitions and verdicts, every repetition's ratios, and
    what stands behind them. The cells are the terminal's (``headline.lines``), escaped."""
    parts = []
    if h.get("warning"):
        parts.append(f'<p class="warn"><b>{escape(h["warning"])}</b></p>')
    head, rows = figure_table(h)
    both = len(head) > 1 + len(h["fabrics"])
    cells = []
    for fig, row in zip(h["figures"].values(), rows):
        out = [escape(c) for c in row]
        if both:
            cls = {BETTER: "good", WORSE: "bad"}.get(fig["verdict"], "")
            out[-1] = f'<td class="{cls} l">{out[-1]}</td>'
        cells.append(out)
    parts.append(table([escape(c) for c in head], cells, cls="headline"))
    reps = rep_table(h)
    if reps:
        parts.append(f'<p class="note">{escape(REP_CAPTION)}.</p>')
        parts.append(table([escape(c) for c in reps[0]], [[escape(c) for c in r] for r in reps[1]],
                           cls="headline-reps"))
    parts.append("<ul>" + "".join(f"<li>{escape(line)}</li>" for line in facts(h)) + "</ul>")
    parts.append(f'<p class="note">{escape(NOTE)}</p>')
    return "".join(parts)


def headline_table(summary: dict, fabrics: list[str]) -> str:
    """Every figure x fabrics (median [min, max]) and the ZCube/ROFT ratio, coloured by who is better when the
    run resolves it (``verdict.resolvable``: the headline's figures by their interval over the repetitions)."""
    reps = summary.get("reps", 1)
    both = "zcube" in summary and "roft" in summary
    head = ["metric"] + [fab(f) for f in fabrics] + (["ZCube / ROFT"] if both else [])
    rows = []
    for label, key, unit, div, better in headline_rows(bool(summary.get("live"))):
        row = [f'{escape(label)} <span class="unit">{escape(unit)}</span>']
        row += [escape(cell_text(summary.get(f), key, div, reps)) for f in fabrics]
        if both and key not in summary["ratios"]:
            row.append("")
        elif both:
            r = summary["ratios"].get(key)
            cls = ""
            if r is not None and better and resolvable(summary, key)[0]:
                cls = "good" if (r > 1) == (better > 0) else "bad"
            row.append(f'<td class="{cls}">{escape(ratio_text(r))}</td>')
        rows.append(row)
    return table(head, rows)


def seed_table(comparison: list[dict]) -> str:
    rows = []
    for c in comparison:
        st = c["status"]
        cls = {"matches": "matches", "contradicts": "contradicts", "not reproduced": "notrep"}.get(st, "same")
        rows.append([escape(c["claim"]), escape(f"{c['seed']:.3f}"), escape(ratio_text(c["measured"])),
                     f'<span class="status {cls}">{escape(st)}</span>', escape(c["sentence"])])
    return table(["seed figure (production)", "seed ratio", "this run", "verdict", "why"], rows, left={0, 3, 4})


def details(title: str, obj) -> str:
    text = obj if isinstance(obj, str) else json.dumps(obj, indent=1, sort_keys=False, default=str)
    return f"<details><summary>{escape(title)}</summary><pre>{escape(text)}</pre></details>"


def banner(problems: list[str]) -> str:
    if not problems:
        return ('<div class="okbar">Fidelity checks passed: the replay kept time, no agent crashed, '
                "every transfer arrived.</div>")
    items = "".join(f"<li>{escape(p)}</li>" for p in problems)
    return (f'<div class="banner" role="alert"><b>Fidelity check failed: these numbers may describe the '
            f"emulator, not the fabric.</b><ul>{items}</ul></div>")


def alert(headline: str, items: list[str], link: tuple[str, str] | None = None, cls: str = "") -> str:
    """A red banner besides the fidelity one (e.g. the overloaded cluster): plain-text headline and
    items, and optionally a link (anchor, text) to the section that explains it."""
    lis = "".join(f"<li>{escape(i)}</li>" for i in items)
    more = f' <a href="#{escape(link[0])}">{escape(link[1])}</a>' if link else ""
    return (f'<div class="banner {escape(cls)}" role="alert"><b>{escape(headline)}</b>{more}'
            + (f"<ul>{lis}</ul>" if lis else "") + "</div>")


def page(title: str, verdict: str, subtitle: str, problems: list[str], nav: list[tuple[str, str]],
         sections: list[tuple[str, str, str]], wide: bool = False, alerts: list[str] = ()) -> str:
    """sections: (id, heading, html body); ``wide`` lets side-by-side content use a wide window;
    ``alerts``: red banners (from ``alert``) shown under a failed fidelity banner, above a passed one."""
    links = "".join(f'<a href="#{i}">{escape(t)}</a>' for i, t in nav)
    body = "".join(f'<section id="{i}"><h2>{escape(h)}</h2>{b}</section>' for i, h, b in sections)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)}: {escape(verdict)}</title><style>{CSS}</style></head>"
            + ('<body class="wide">' if wide else "<body>")
            + (banner(problems) + "".join(alerts) if problems else "".join(alerts) + banner(problems)) +
            f"<main><h1>{escape(title)}<span class=\"v\">{escape(verdict)}</span></h1>"
            f'<p class="sub">{escape(subtitle)}</p><nav>{links}</nav>{body}</main></body></html>')


__all__ = ["page", "alert", "img", "table", "headline_block", "headline_table", "seed_table", "details", "fab", "num",
           "escape"]

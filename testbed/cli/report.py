"""The ``report`` verb: (re)build a saved run's report (reads files only; no root, no fabric). ``compare`` is
``testbed.cli.compare``."""

from __future__ import annotations

from pathlib import Path


def cmd_report(args) -> int:
    from testbed.report import build_report

    out = build_report(Path(args.run_dir))
    print(f"wrote {out.parent / 'summary.json'}, {out.parent / 'headline.csv'}, {out.parent / 'figures'}/")
    print(out)
    return 0


def register(sub) -> None:
    p = sub.add_parser("report", help="(re)build report.html, figures, summary.json of an experiment run directory")
    p.add_argument("run_dir", help="experiment run directory (reports/<run-id>/ with runs/<fabric>/rep<k>/)")
    p.set_defaults(func=cmd_report)

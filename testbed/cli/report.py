"""The saved runs' verbs: ``report`` and ``compare`` (read files only; no root, no fabric)."""

from __future__ import annotations

from pathlib import Path


def cmd_report(args) -> int:
    from testbed.report import build_report

    out = build_report(Path(args.run_dir))
    print(f"wrote {out.parent / 'summary.json'}, {out.parent / 'headline.csv'}, {out.parent / 'figures'}/")
    print(out)
    return 0


def cmd_compare(args) -> int:
    from testbed.report import compare, compare_html

    print(compare(Path(args.run_a), Path(args.run_b)))
    if args.html:
        print(compare_html(Path(args.run_a), Path(args.run_b), Path(args.html)))
    return 0


def register(sub) -> None:
    p = sub.add_parser("report", help="(re)build report.html, figures, summary.json of an experiment run directory")
    p.add_argument("run_dir", help="experiment run directory (reports/<run-id>/ with runs/<fabric>/rep<k>/)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("compare", help="two experiment run directories' headline numbers side by side")
    p.add_argument("run_a")
    p.add_argument("run_b")
    p.add_argument("--html", metavar="OUT", help="also write an HTML page with both headline tables")
    p.set_defaults(func=cmd_compare)

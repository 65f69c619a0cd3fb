"""The ``compare`` verb: ``testbed compare RUN_DIR RUN_DIR... [--json] [--html OUT]`` -> ``testbed.report.comparison``.

Several run directories' headlines side by side (the output tokens/s and TTFT P99 ratios with their intervals
and verdicts, repetitions, requests measured, fidelity, commit), where their experiments differ, and whether
they agree. Reads saved files only (no root, no fabric). A folder that is not a run directory, or fewer than two
runs, is one line on stderr naming it (exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path


def cmd_compare(args) -> int:
    from testbed.report import compare_html_runs, compare_runs
    from testbed.report.comparison import lines

    doc = compare_runs([Path(p) for p in args.run_dirs])
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        for line in lines(doc):
            print(line)
    if args.html:
        out = compare_html_runs([Path(p) for p in args.run_dirs], Path(args.html))
        if not args.json:
            print(out)
    return 0


def register(sub) -> None:
    p = sub.add_parser("compare", help="several experiment run directories' headlines side by side: ratios, "
                                       "intervals, verdicts, what differs, and whether they agree")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                   help="experiment run directories (reports/<run-id>/ with runs/<fabric>/rep<k>/), two or more")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON instead of the table")
    p.add_argument("--html", metavar="OUT", help="also write an HTML page with every run's headline side by side")
    p.set_defaults(func=cmd_compare)

"""The ``crosscheck`` verb: experiment file + flags -> ``testbed.experiment.crosscheck``.

``testbed crosscheck [EXPERIMENT] [--against RUN_DIR] [--json]``: runs the experiment on the ns-3 twin and
compares it with the emulator's run directory ``--against`` (or, as root without it, runs the emulator too):
per fabric the figures of both backends and their ratio, per-link bytes, the ZCube/ROFT ratios of each
backend side by side, and which of the issue's goals hold (crosscheck.json in the twin's run directory).
"""

from __future__ import annotations

import sys
from pathlib import Path

from testbed.cli import flags
from testbed.cli.options import print_result


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cmd_crosscheck(args) -> int:
    from testbed.cli.outputs import out_root as out_dir
    from testbed.experiment import crosscheck

    out_root = out_dir(args.out)
    doc, twin_dir = crosscheck.run_crosscheck(args.experiment, flags.overrides(args, flags.RUN), out_root,
                                              Path(args.against) if args.against else None, _stderr)
    print_result(doc, crosscheck.table(doc), twin_dir, args.json)
    return 0


def register(sub) -> None:
    from common.paths import REPORTS

    p = sub.add_parser("crosscheck", help="the experiment on the ns-3 twin beside the emulator (a run directory, "
                                          "or run here as root): per-link bytes, throughput, TTFT, FCT, pauses and "
                                          "the ZCube/ROFT ratios of both (crosscheck.json)")
    p.add_argument("experiment", nargs="?", metavar="EXPERIMENT.yaml",
                   help="experiment file (default: experiments/default.yaml)")
    p.add_argument("--against", metavar="RUN_DIR", help="the emulator's run directory of the same experiment "
                                                         "(default: run it here, which needs root)")
    flags.add_flags(p, flags.RUN)
    flags.add_set(p)
    p.add_argument("--out", default=str(REPORTS), help="an existing folder where the twin's run directory goes "
                                                       "(default reports/)")
    p.add_argument("--json", action="store_true", help="print crosscheck.json instead of the table")
    p.set_defaults(func=cmd_crosscheck)

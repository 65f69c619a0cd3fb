"""The ``sensitivity`` verb: experiment file + flags -> ``testbed.experiment.sensitivity``.

``testbed sensitivity [EXPERIMENT] [--only NAME,...] [--reps N] [--backend B] [--json]``: the experiment as
given and once per alternative of its ``sensitivity:`` list, on both fabrics. The run flags and ``--set``
apply to every run (an alternative's own keys win); ``--dry-run`` prints the plan and the estimate.
"""

from __future__ import annotations

import json
import sys

from testbed.cli import flags
from testbed.cli.options import print_result


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cmd_sensitivity(args) -> int:
    from testbed.cli.outputs import out_root as out_dir
    from testbed.experiment import sensitivity

    out_root = out_dir(args.out)  # checked before anything is built, also by --dry-run
    overrides = flags.overrides(args, flags.RUN)
    only = sensitivity.parse_only(args.only)
    if args.dry_run:
        planned = sensitivity.plan(args.experiment, overrides, only)
        print(json.dumps(sensitivity.dry_run_doc(planned), indent=1))
        for line in sensitivity.estimate_lines(planned):
            _stderr(line)
        return 0
    status, doc, sens_dir = sensitivity.run_sensitivity(args.experiment, overrides, out_root, only=only, log=_stderr)
    print_result(doc, sensitivity.table(doc), sens_dir, args.json)
    return status


def register(sub) -> None:
    from common.paths import REPORTS

    p = sub.add_parser("sensitivity", help="the experiment as given and once per declared alternative, on both "
                                           "fabrics: does the ZCube/ROFT verdict survive? (sensitivity.json)")
    p.add_argument("experiment", nargs="?", metavar="EXPERIMENT.yaml",
                   help="experiment file with a sensitivity: list (default: experiments/default.yaml)")
    p.add_argument("--only", metavar="NAME,...", help="run only these alternatives (the baseline always runs)")
    flags.add_flags(p, flags.RUN)
    flags.add_set(p)
    p.add_argument("--out", default=str(REPORTS), help="an existing folder where the sensitivity directory goes "
                                                       "(default reports/)")
    p.add_argument("--dry-run", action="store_true", help="print every run's resolved experiment and the "
                                                          "estimate, and exit")
    p.add_argument("--json", action="store_true", help="print sensitivity.json instead of the table")
    p.set_defaults(func=cmd_sensitivity)

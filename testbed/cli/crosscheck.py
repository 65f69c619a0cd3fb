"""The ``crosscheck`` verb: experiment file + flags -> ``testbed.experiment.crosscheck``.

``testbed crosscheck [EXPERIMENT] [--engines A,B] [--against A_RUN_DIR] [--own-paths] [--json]`` runs the
experiment on engine B (default ns3) and on engine A (default emulated, as root) unless ``--against`` gives A's
run; B follows the emulator's recorded paths unless ``--own-paths``. ``testbed crosscheck --runs A_DIR B_DIR``
compares two finished runs (``--at-100g A100 B100``: and the same engines' ROFT at 100 Gbit/s). Per repetition
and fabric: the figures of both engines and their ratio, each message class's FCT distribution, bytes per link,
pauses per port, the ZCube/ROFT ratios of both, and which goals hold (crosscheck.json in B's run directory).
"""

from __future__ import annotations

import sys
from pathlib import Path

from testbed.cli import flags
from testbed.cli.options import print_result


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cmd_crosscheck(args) -> int:
    from common.errors import TestbedError
    from testbed.cli.outputs import out_root as out_dir
    from testbed.experiment import crosscheck

    if args.runs:
        if args.against or args.engines or args.experiment:
            raise TestbedError("--runs compares two finished runs: expected no experiment, --engines or --against "
                               "with it", key="runs")
        ablation = tuple(Path(p) for p in args.at_100g) if args.at_100g else None
        doc = crosscheck.compare_only(Path(args.runs[0]), Path(args.runs[1]), ablation)
        b_dir = Path(args.runs[1])
    else:
        if args.at_100g:
            raise TestbedError("--at-100g goes with --runs (two finished runs at 200 and two at 100 Gbit/s)",
                               key="at_100g")
        doc, b_dir = crosscheck.run_crosscheck(args.experiment, flags.overrides(args, flags.RUN),
                                               out_dir(args.out), crosscheck.engines_of(args.engines),
                                               Path(args.against) if args.against else None, args.own_paths, _stderr)
    from testbed.report import crosscheck as xc

    print_result(xc.strip(doc), crosscheck.table(doc), b_dir, args.json)
    return 0


def register(sub) -> None:
    from common.paths import REPORTS

    p = sub.add_parser("crosscheck", help="one experiment on two engines (default: the emulator and the ns-3 twin on "
                                          "the emulator's recorded paths), compared repetition by repetition: "
                                          "figures, FCT per message class, bytes per link, pauses, ZCube/ROFT ratios "
                                          "(crosscheck.json)")
    p.add_argument("experiment", nargs="?", metavar="EXPERIMENT.yaml",
                   help="experiment file (default: experiments/default.yaml)")
    p.add_argument("--engines", metavar="A,B", help="the reference engine and the checked one (default emulated,ns3; "
                                                    "any two of emulated, ns3, ideal and the others testbed run knows)")
    p.add_argument("--against", metavar="RUN_DIR", help="engine A's run directory of the same experiment (default: "
                                                        "run it here; the emulator needs root)")
    p.add_argument("--own-paths", action="store_true", help="engine B routes by its own ECMP hash instead of the "
                                                           "emulator's recorded paths")
    p.add_argument("--runs", nargs=2, metavar=("A_DIR", "B_DIR"), help="compare two finished runs; run nothing")
    p.add_argument("--at-100g", nargs=2, metavar=("A100_DIR", "B100_DIR"),
                   help="with --runs: the same two engines' runs at 100 Gbit/s (ROFT's 200G/100G on each)")
    flags.add_flags(p, flags.RUN)
    flags.add_set(p)
    p.add_argument("--out", default=str(REPORTS), help="an existing folder where the run directories go "
                                                       "(default reports/)")
    p.add_argument("--json", action="store_true", help="print crosscheck.json instead of the table")
    p.set_defaults(func=cmd_crosscheck)
